"""`python -m ptxgemm dump`: write a kernel's PTX, cubin, SASS and resource report to a directory. No GPU needed.

Files written to the output directory, for kernel NAME:
    NAME.ptx      the rendered PTX (written before ptxas runs, so a ptxas failure can be read against it)
    NAME.cubin    what whole-program ptxas made of it
    NAME.sass     nvdisasm of the cubin
    ptxas.log     the raw `ptxas -v` output
    report.json   registers, spills, shared memory, ptxas warnings and version, per-function resources
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from . import compiler
from .compiler import CompiledKernel
from .errors import ToolchainError

KERNELS = ("gemm", "swizzle_probe")
#: modules whose absence means "the GEMM is not there yet" rather than a bug inside it


def build_report(name: str, kernel: CompiledKernel, extras: dict | None = None) -> dict:
    """The report.json dict: totals over the module's entry functions, then each function, then `extras`."""
    if kernel.report is None:
        raise ToolchainError("no ptxas report: ptxas was not found (install nvidia-cuda-nvcc or set PTXGEMM_PTXAS)")
    funcs = kernel.report.to_dict()["functions"]
    report = {
        "kernel": name,
        "arch": compiler.DEFAULT_ARCH,
        "ptxas": kernel.ptxas,
        "ptxas_version": kernel.ptxas_version,
        "cache_hit": kernel.cache_hit,
        # the worst entry function: what limits occupancy / what must not spill
        "registers": max((f["registers"] for f in funcs.values()), default=0),
        "spills": {
            "store_bytes": sum(f["spill_store_bytes"] for f in funcs.values()),
            "load_bytes": sum(f["spill_load_bytes"] for f in funcs.values()),
        },
        "shared_memory": {
            "static_bytes": max((f["smem_bytes"] for f in funcs.values()), default=0),
        },
        "warning_codes": sorted(kernel.report.warning_codes),
        "ptxas_warnings": kernel.report.warnings,
        "functions": funcs,
    }
    for key, value in (extras or {}).items():
        if isinstance(value, dict) and isinstance(report.get(key), dict):
            report[key] = {**report[key], **value}
        else:
            report[key] = value
    return report


def write_ptx(name: str, ptx: str, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.ptx"
    path.write_text(ptx)
    return path


def write_dump(name: str, kernel: CompiledKernel, out: Path, extras: dict | None = None) -> dict:
    """Write every file of the dump; returns the report."""
    out = Path(out)
    write_ptx(name, kernel.ptx, out)
    if kernel.cubin is None:
        raise ToolchainError(f"cannot dump {name}: no ptxas was found, so there is no cubin, SASS or report "
                             f"(install nvidia-cuda-nvcc or set PTXGEMM_PTXAS); the PTX is in {out / (name + '.ptx')}")
    report = build_report(name, kernel, extras)
    (out / f"{name}.cubin").write_bytes(kernel.cubin)
    (out / "ptxas.log").write_text(kernel.report.raw)
    (out / f"{name}.sass").write_text(kernel.sass())
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def summary(report: dict, out: Path) -> str:
    """A few lines for the terminal."""
    name = report["kernel"]
    lines = [f"wrote {Path(out) / name}.{{ptx,cubin,sass}}, ptxas.log, report.json "
             f"(ptxas {report['ptxas_version']}{', cached' if report['cache_hit'] else ''})"]
    for fname, f in report["functions"].items():
        lines.append(f"  {fname}: {f['registers']} registers, {f['spill_store_bytes']} B spill stores, "
                     f"{f['spill_load_bytes']} B spill loads, {f['smem_bytes']} B static smem")
    if "consumer_k_loop_sass" in report:
        loop = report["consumer_k_loop_sass"]
        lines.append(f"  consumer k-tile loop: {loop['instructions']} SASS instructions per warp, "
                     f"{loop['hgmma']} of them HGMMA")
    if "dynamic_bytes" in report["shared_memory"]:
        lines.append(f"  dynamic shared memory at launch: {report['shared_memory']['dynamic_bytes']} B")
    warnings = report["ptxas_warnings"]
    lines.append("  ptxas warnings: " + ("none" if not warnings else
                                         "; ".join(f"({w['code']}) {w['message']}" if w["code"] else w["message"]
                                                   for w in warnings)))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# swizzle_probe
# ---------------------------------------------------------------------------------------------------------------

def dump_swizzle_probe(args) -> dict:
    """--kernel swizzle_probe [--mode M] [--rows R] [--cols C]. The mode only picks the default columns and the
    rules the tile must meet: the swizzle itself lives in the tensor map, not in the PTX."""
    from . import probes

    mode = args.mode or "128B"
    rows = args.rows if args.rows is not None else 8
    cols = args.cols if args.cols is not None else probes.default_cols(mode) if mode in probes.MODES else 0
    probes.check_tile(mode, rows, cols)
    out = Path(args.out)
    ptx = probes.swizzle_probe_ptx(rows, cols)
    write_ptx("swizzle_probe", ptx, out)
    kernel = compiler.compile_ptx(ptx)
    extras = {
        "params": {"mode": mode, "rows": rows, "cols": cols, "elem_bytes": probes.ELEM_BYTES,
                   "threads": probes.PROBE_THREADS, "debug": True},
        # as launched by probes.run_swizzle_probe: the tile, then the load's 8-byte mbarrier (16 B reserved)
        "shared_memory": {"dynamic_bytes": rows * cols * probes.ELEM_BYTES + 16},
    }
    return write_dump("swizzle_probe", kernel, out, extras)


# ---------------------------------------------------------------------------------------------------------------
# gemm
# ---------------------------------------------------------------------------------------------------------------

def dump_gemm(args) -> dict:
    """--kernel gemm --m M --n N --k K [config options]: compile the GEMM for that config and dump it."""
    from .config import GemmConfig
    from .gemm import compile_gemm

    config = GemmConfig.from_cli(args)
    kernel = compile_gemm(config)
    extras = {"problem": {dim: getattr(args, dim, None) for dim in ("m", "n", "k")}}
    extras.update(config.report_extras())
    if kernel.cubin is not None:
        extras["consumer_k_loop_sass"] = k_loop_report(kernel.sass())
    return write_dump("gemm", kernel, Path(args.out), extras)


_SASS_INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(.*?);")


def consumer_k_loop(sass: str) -> list[str]:
    """The consumer's k-tile loop in the SASS: from the full-barrier wait before the first HGMMA to the backward
    branch after the last one (the GEMM's SASS has one such loop). Its length, instructions per k-tile per warp,
    is the number docs/perf-notes.md tracks per change: everything in it besides the HGMMAs competes with them
    for issue slots and power."""
    lines = _SASS_INSTRUCTION.findall(sass)
    hgmma = [i for i, line in enumerate(lines) if "HGMMA" in line]
    if not hgmma:
        return []
    waits = [i for i in range(hgmma[0]) if "TRYWAIT" in lines[i]]
    branches = [i for i in range(hgmma[-1], len(lines)) if "BRA" in lines[i]]
    if not waits or not branches:
        return []
    return [line.strip() for line in lines[waits[-1]:branches[0] + 1]]


def k_loop_report(sass: str) -> dict:
    loop = consumer_k_loop(sass)
    return {"instructions": len(loop), "hgmma": sum("HGMMA" in line for line in loop),
            "r2ur": sum("R2UR" in line for line in loop)}


DUMPERS = {"gemm": dump_gemm, "swizzle_probe": dump_swizzle_probe}


def dump(args) -> dict:
    return DUMPERS[args.kernel](args)
