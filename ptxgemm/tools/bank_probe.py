"""Check ptxgemm's bank-conflict model (ptxgemm/tools/banks.py) against the hardware, through ncu's counters.

Each pattern is one warp repeating one shared-memory instruction ITERATIONS times at 32 fixed lane addresses
(ptxgemm/kernel/templates/bank_probe.ptx.j2), one kernel launch per pattern.  Under ncu, a launch's
l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{st,ld}.sum / ITERATIONS is the measured wavefronts per
instruction, which must equal the model's prediction.

  python -m ptxgemm bank-probe --list        the patterns and the model's predictions (no GPU)
  python -m ptxgemm bank-probe --run         run every pattern once: what ncu profiles
  python -m ptxgemm bank-probe --measure [--results docs/results/<gpu>/banks/bank_conflicts_<gpu>.md]
                                       run --run under ncu, compare, print (and save) the table;
                                       exit 1 on any mismatch

The patterns are ptxgemm/tools/bank_patterns.py; the command line is ptxgemm/cli/bank_probe.py.
tests/test_banks_gpu.py runs --measure's code and asserts that every pattern matches; tests/test_banks.py checks the
patterns and the committed tables without a GPU.
"""
from __future__ import annotations

import csv
import ctypes
import dataclasses
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from ..toolchain import compiler
from ..kernel import codegen
from ..runtime import arrays, driver
from . import banks
from .bank_patterns import Pattern, WARP_THREADS, all_patterns, select_patterns

#: the directory holding this ptxgemm package: the profiled child process must import the same one
PACKAGE_PARENT = Path(__file__).resolve().parents[2]   # the folder holding ptxgemm/

TEMPLATE = "bank_probe.ptx.j2"
PTX_VERSION = "8.0"
KERNEL_PREFIX = "bank_probe_"
ITERATIONS = 64
"""Instructions per launch: large enough that any one-off shared access would show as a fraction."""
METRICS = {
    banks.STORE: "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    banks.LOAD: "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
}
"""ncu counts stmatrix under _op_st and ldmatrix under _op_ld (checked on an H200)."""
NCU_FALLBACK = Path("/usr/local/cuda/bin/ncu")
NCU_TIMEOUT_S = 540


# --------------------------------------------------------------------------------------------------------------
# The probe kernels
# --------------------------------------------------------------------------------------------------------------

def kernel_symbol(op: str) -> str:
    return op.replace(".", "_")


def kernel_name(op: str) -> str:
    return KERNEL_PREFIX + kernel_symbol(op)


def _template_op(op: banks.Op) -> dict:
    """What bank_probe.ptx.j2 needs to spell the op's instruction."""
    parts = op.name.split(".")
    if op.matrix:
        matrices = op.lanes_used // banks.MATRIX_ROWS
        return dict(symbol=kernel_symbol(op.name), kind=op.kind, matrix=True, num=parts[1], trans=op.trans,
                    vec="", type="b16", regs=matrices)
    vec = parts[1] if len(parts) == 3 else ""
    regs = {"": 1, "v2": 2, "v4": 4}[vec]
    return dict(symbol=kernel_symbol(op.name), kind=op.kind, matrix=False, num="", trans=False,
                vec=vec, type=parts[-1], regs=regs)


def probe_ptx(ops: Iterable[str] | None = None) -> str:
    """The probe module: one entry `bank_probe_<op>` per op (all of banks.OPS by default)."""

    names = list(ops) if ops is not None else list(banks.OPS)
    return codegen.render(TEMPLATE, template_name=TEMPLATE, ptx_version=PTX_VERSION,
                          summary=f"shared-memory bank-conflict probe: {len(names)} ops, one warp each",
                          ops=[_template_op(banks.OPS[name]) for name in names])


def smem_bytes_for(patterns: Sequence[Pattern]) -> int:
    """Dynamic shared memory that covers every address of every pattern, 1 KiB granular."""
    end = max((a + banks.OPS[p.op].bytes_per_lane for p in patterns for a in p.addresses), default=0)
    return max(1024, -(-end // 1024) * 1024)


def run_patterns(patterns: Sequence[Pattern], iterations: int = ITERATIONS) -> dict:
    """Launch every pattern once, in order; returns facts about the device for the manifest."""

    info = driver.require_sm90("running the bank-conflict probe")
    ops = list(dict.fromkeys(p.op for p in patterns))
    module = driver.load_module(compiler.compile_ptx(probe_ptx(ops)), "bank-conflict probe module")
    smem = smem_bytes_for(patterns)
    functions = {}
    for op in ops:
        functions[op] = module.function(kernel_name(op))
        functions[op].set_max_dynamic_smem(smem)
    addrs = arrays.DeviceArray.empty((WARP_THREADS,), np.uint32)
    out = arrays.DeviceArray.empty((WARP_THREADS,), np.uint32)
    for pattern in patterns:
        addrs.copy_from_host(np.asarray(pattern.addresses, dtype=np.uint32))
        driver.launch(functions[pattern.op], (1,), (WARP_THREADS,),
                      [addrs, out, ctypes.c_uint32(iterations), ctypes.c_uint32(0)], smem_bytes=smem)
        driver.synchronize(f"running bank-conflict pattern {pattern.name!r}")
    return {"gpu": info.name, "driver": info.driver_version_str, "iterations": iterations, "smem_bytes": smem}


# --------------------------------------------------------------------------------------------------------------
# ncu
# --------------------------------------------------------------------------------------------------------------

def find_ncu() -> str | None:
    found = shutil.which("ncu")
    if found:
        return found
    return str(NCU_FALLBACK) if NCU_FALLBACK.is_file() else None


def ncu_command(ncu: str, log_file: Path, manifest: Path, only: str | None) -> list[str]:
    cmd = [ncu, "--metrics", ",".join(METRICS.values()), "--csv", "--print-units", "base",
           "--clock-control", "none", "--kernel-name", f"regex:^{KERNEL_PREFIX}", "--log-file", str(log_file),
           sys.executable, "-m", "ptxgemm", "bank-probe", "--run", "--manifest", str(manifest)]
    if only:
        cmd += ["--only", only]
    return cmd


def _number(text: str) -> float:
    """ncu prints '2,048' or '2048' (or 'n/a' for a counter it could not read)."""
    cleaned = text.replace(",", "").strip()
    try:
        return float(cleaned)
    except ValueError:
        return float("nan")


def parse_ncu_csv(text: str) -> list[dict]:
    """ncu --csv output -> [{"id", "kernel", "metrics": {name: value}}] in launch order.

    The CSV starts at its header line ("ID","Process ID",...); ==PROF== lines and anything the profiled
    program printed are skipped.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    launches: dict[int, dict] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        if not row.get("ID", "").strip().isdigit() or not row.get("Metric Name"):
            continue
        launch = launches.setdefault(int(row["ID"]), {"id": int(row["ID"]), "kernel": row.get("Kernel Name", ""),
                                                      "metrics": {}})
        launch["metrics"][row["Metric Name"]] = _number(row.get("Metric Value", ""))
    return [launches[k] for k in sorted(launches)]


@dataclasses.dataclass(frozen=True)
class Measurement:
    pattern: Pattern
    predicted: int
    ideal: int
    measured: float
    """ncu's wavefronts of the op's kind (st or ld) per instruction."""
    other: float
    """The other kind's wavefronts per instruction: 0 unless the kernel touches shared memory elsewhere."""

    @property
    def ok(self) -> bool:
        return self.measured == self.predicted and self.other == 0


class MeasureError(RuntimeError):
    """ncu failed, or its output cannot be matched to the patterns."""


def _kernel_base(name: str) -> str:
    """'bank_probe_st_b32(unsigned long, ...)' -> 'bank_probe_st_b32'."""
    return re.split(r"[\s(<]", name.strip(), maxsplit=1)[0]


def pair(patterns: Sequence[Pattern], launches: Sequence[dict], iterations: int) -> list[Measurement]:
    """Match profiled launches to patterns by launch order, checking the kernel names agree."""
    if len(launches) != len(patterns):
        raise MeasureError(f"ncu profiled {len(launches)} probe launches, expected {len(patterns)}")
    out = []
    for pattern, launch in zip(patterns, launches):
        if _kernel_base(launch["kernel"]) != kernel_name(pattern.op):
            raise MeasureError(f"launch {launch['id']} is {launch['kernel']!r}, expected {kernel_name(pattern.op)} "
                               f"for pattern {pattern.name!r}")
        other_kind = banks.LOAD if pattern.kind == banks.STORE else banks.STORE
        result = pattern.simulate()
        out.append(Measurement(pattern, result.wavefronts, result.ideal,
                               launch["metrics"].get(METRICS[pattern.kind], float("nan")) / iterations,
                               launch["metrics"].get(METRICS[other_kind], float("nan")) / iterations))
    return out


def measure(only: str | None = None, ncu: str | None = None) -> tuple[list[Measurement], dict]:
    """Run the probe under ncu and compare with the model; returns (measurements, manifest facts)."""
    ncu = ncu or find_ncu()
    if ncu is None:
        raise MeasureError("ncu not found on PATH or at /usr/local/cuda/bin/ncu")
    patterns = select_patterns(all_patterns(), only)
    with tempfile.TemporaryDirectory(prefix="bank-probe-") as tmp:
        log_file, manifest = Path(tmp) / "ncu.csv", Path(tmp) / "manifest.json"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(PACKAGE_PARENT),
                                                                         os.environ.get("PYTHONPATH")])))
        proc = subprocess.run(ncu_command(ncu, log_file, manifest, only), capture_output=True, text=True,
                              env=env, timeout=NCU_TIMEOUT_S, cwd=tmp)
        text = (log_file.read_text() if log_file.is_file() else "") + "\n" + proc.stdout
        if proc.returncode != 0 or not manifest.is_file():
            tail = "\n".join((text + "\n" + proc.stderr).strip().splitlines()[-30:])
            raise MeasureError(f"ncu run failed (exit {proc.returncode}):\n{tail}")
        facts = json.loads(manifest.read_text())
    names = [p.name for p in patterns]
    if facts["patterns"] != names:
        raise MeasureError("the profiled run launched other patterns than this process expects")
    facts["ncu"] = _ncu_version(ncu)
    return pair(patterns, parse_ncu_csv(text), facts["iterations"]), facts


def _ncu_version(ncu: str) -> str:
    out = subprocess.run([ncu, "--version"], capture_output=True, text=True).stdout
    match = re.search(r"Version\s+(\S+)", out)
    return match.group(1) if match else "unknown"


# --------------------------------------------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------------------------------------------

def _fmt(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:.3f}"


def rule_verdicts(measurements: Sequence[Measurement]) -> dict[str, tuple[int, list[str]]]:
    """rule -> (patterns exercising it, names of those that mismatched)."""
    verdicts: dict[str, tuple[int, list[str]]] = {name: (0, []) for name in banks.RULES}
    for m in measurements:
        for rule in m.pattern.rules:
            count, bad = verdicts[rule]
            verdicts[rule] = (count + 1, bad + ([m.pattern.name] if not m.ok else []))
    return verdicts


def results_markdown(measurements: Sequence[Measurement], facts: dict) -> str:
    """The table committed under docs/results/: every pattern, predicted vs measured."""
    ok = sum(m.ok for m in measurements)
    lines = [
        f"# Shared-memory bank conflicts: model vs ncu on {facts.get('gpu', 'unknown GPU')}",
        "",
        f"Driver {facts.get('driver', '?')}, ncu {facts.get('ncu', '?')}; {facts.get('iterations', '?')} "
        "instructions per launch, one warp; measured = "
        "`l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{st,ld}.sum` / instructions.",
        "Produced by `python -m ptxgemm bank-probe --measure --results <this file>`.",
        "",
        f"**{ok} of {len(measurements)} patterns match the model.**",
        "",
        "## Rules",
        "",
        "| rule | patterns | verdict |",
        "|---|---|---|",
    ]
    for rule, (count, bad) in rule_verdicts(measurements).items():
        verdict = "not exercised" if count == 0 else "confirmed" if not bad else f"REFUTED by {len(bad)}: " + \
            "; ".join(bad[:5])
        lines.append(f"| {rule} | {count} | {verdict} |")
    lines += ["", "## Patterns", "", "| group | pattern | op | predicted | ideal | measured | other kind | match |",
              "|---|---|---|---|---|---|---|---|"]
    for m in measurements:
        lines.append(f"| {m.pattern.group} | {m.pattern.name} | `{m.pattern.op}` | {m.predicted} | {m.ideal} | "
                     f"{_fmt(m.measured)} | {_fmt(m.other)} | {'yes' if m.ok else '**NO**'} |")
    return "\n".join(lines) + "\n"
