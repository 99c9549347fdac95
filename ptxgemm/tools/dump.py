"""A kernel's PTX, cubin, SASS and resource report written to a directory (`python -m ptxgemm dump`, in
ptxgemm/cli/dump.py, decides what to build). No GPU needed.

Files written to the output directory, for kernel NAME:
    NAME.ptx      the rendered PTX (written before ptxas runs, so a ptxas failure can be read against it)
    NAME.cubin    what whole-program ptxas made of it
    NAME.sass     nvdisasm of the cubin
    ptxas.log     the raw `ptxas -v` output
    report.json   "measured": what ptxas (and nvdisasm) report of the cubin: registers, spills, static shared
                  memory, warnings, per-function resources, SASS counts; apart from what was decided before ptxas
                  ran: the probe's "params", or the GEMM's "config" (tag and where it came from), "predicted" (the
                  config's derived stages, shared-memory map, register split), "problem" and "schedule" (what M, N
                  and K decide: tiles, grid, waves, tiles per consumer)
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from ..errors import ToolchainError
from ..toolchain import compiler
from ..toolchain.compiler import CompiledKernel



def build_report(name: str, kernel: CompiledKernel, extras: dict | None = None) -> dict:
    """The report.json dict: "measured" (totals over the module's entry functions, then each function), then the
    caller's `extras` (sections decided before ptxas ran), kept apart so a prediction is never read as a
    measurement."""
    if kernel.report is None:
        raise ToolchainError("no ptxas report: ptxas was not found (install nvidia-cuda-nvcc or set PTXGEMM_PTXAS)")
    funcs = kernel.report.to_dict()["functions"]
    measured = {
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
    extras = dict(extras or {})
    measured.update(extras.pop("measured", {}))  # e.g. SASS counts: also facts of the cubin
    return {"kernel": name, "arch": compiler.DEFAULT_ARCH, "measured": measured, **extras}


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
    """A few lines for the terminal: what the shape decided (GEMM), then what ptxas measured."""
    name = report["kernel"]
    measured = report["measured"]
    lines = []
    if "config" in report:
        c, p, s = report["config"], report["problem"], report["schedule"]
        lines.append(f"config {c['tag']} ({c['source']}): {c['description']}")
        if "grouped" in s:   # a grouped kernel: the device's counts decide the walk
            lines.append(f"grouped: {s['grouped']}")
        else:
            lines.append(f"problem {p['m']}x{p['n']}x{p['k']} on {s['sm_count']} SMs ({s['device']}): "
                         f"{s['tiles_m']}x{s['tiles_n']} tiles of {s['k_tiles']} k-tiles, grid {s['grid']} CTAs "
                         f"({s['clusters']} clusters), {s['waves']} waves, "
                         f"{s['tiles_per_consumer'][0]}..{s['tiles_per_consumer'][1]} tiles per consumer")
    lines.append(f"wrote {Path(out) / name}.{{ptx,cubin,sass}}, ptxas.log, report.json "
                 f"(ptxas {measured['ptxas_version']}{', cached' if measured['cache_hit'] else ''})")
    for fname, f in measured["functions"].items():
        lines.append(f"  {fname}: {f['registers']} registers, {f['spill_store_bytes']} B spill stores, "
                     f"{f['spill_load_bytes']} B spill loads, {f['smem_bytes']} B static smem")
    if "consumer_k_loop_sass" in measured:
        loop = measured["consumer_k_loop_sass"]
        lines.append(f"  consumer k-tile loop: {loop['instructions']} SASS instructions per warp, "
                     f"{loop['hgmma']} of them HGMMA/QGMMA")
    if "predicted" in report:
        pr = report["predicted"]
        regs = pr["registers"]
        lines.append(f"  predicted by the config: {pr['stages']} stages, {pr['smem_bytes']} B dynamic shared memory, "
                     f"registers {regs['entry']} at entry, {regs['producer_after_setmaxnreg']} producer / "
                     f"{regs['consumer_after_setmaxnreg']} consumer after setmaxnreg")
    elif "dynamic_shared_bytes" in report.get("params", {}):
        lines.append(f"  dynamic shared memory at launch: {report['params']['dynamic_shared_bytes']} B")
    warnings = measured["ptxas_warnings"]
    lines.append("  ptxas warnings: " + ("none" if not warnings else
                                         "; ".join(f"({w['code']}) {w['message']}" if w["code"] else w["message"]
                                                   for w in warnings)))
    return "\n".join(lines)


_SASS_INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(.*?);")
# wgmma in SASS: HGMMA for 16-bit inputs, QGMMA for fp8 (the report's "hgmma" counts both)
_GMMA = re.compile(r"\b[HQ]GMMA\.")


def consumer_k_loop(sass: str) -> list[str]:
    """The consumer's k-tile loop in the SASS: from the full-barrier wait before the first HGMMA to the backward
    branch after the last one (the GEMM's SASS has one such loop). Its length, instructions per k-tile per warp,
    is the number docs/perf-notes.md tracks per change: everything in it besides the HGMMAs competes with them
    for issue slots and power."""
    lines = _SASS_INSTRUCTION.findall(sass)
    hgmma = [i for i, line in enumerate(lines) if _GMMA.search(line)]
    if not hgmma:
        return []
    waits = [i for i in range(hgmma[0]) if "TRYWAIT" in lines[i]]
    branches = [i for i in range(hgmma[-1], len(lines)) if "BRA" in lines[i]]
    if not waits or not branches:
        return []
    return [line.strip() for line in lines[waits[-1]:branches[0] + 1]]


def k_loop_report(sass: str) -> dict:
    loop = consumer_k_loop(sass)
    return {"instructions": len(loop), "hgmma": sum(bool(_GMMA.search(line)) for line in loop),
            "r2ur": sum("R2UR" in line for line in loop)}
