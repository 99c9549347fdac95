"""Check ptxgemm's bank-conflict model (ptxgemm/tools/banks.py) against the hardware, through ncu's counters.

Each pattern is one warp repeating one shared-memory instruction ITERATIONS times at 32 fixed lane addresses
(ptxgemm/kernel/templates/bank_probe.ptx.j2), one kernel launch per pattern.  Under ncu, a launch's
l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{st,ld}.sum / ITERATIONS is the measured wavefronts per
instruction, which must equal the model's prediction.

  python -m ptxgemm.tools.bank_probe --list        the patterns and the model's predictions (no GPU)
  python -m ptxgemm.tools.bank_probe --run         run every pattern once: what ncu profiles
  python -m ptxgemm.tools.bank_probe --measure [--results docs/results/bank_conflicts_<gpu>.md]
                                             run --run under ncu, compare, print (and save) the table;
                                             exit 1 on any mismatch

(`python tools/bank_probe_gpu.py` is the same.) tests/test_banks_gpu.py runs --measure's code and asserts that every
pattern matches; tests/test_banks.py checks the patterns and the committed tables without a GPU. It lives in the
package, not in tools/, so that tests import it as they import the rest of ptxgemm.
"""
from __future__ import annotations

import argparse
import csv
import ctypes
import dataclasses
import io
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from ..build import compiler
from ..kernel import codegen
from ..kernel.config import GemmConfig
from ..kernel.epilogue_layout import epilogue_stores
from ..runtime import arrays, driver
from . import banks

#: the directory holding this ptxgemm package: the profiled child process must import the same one
PACKAGE_PARENT = Path(__file__).resolve().parents[2]   # the folder holding ptxgemm/

TEMPLATE = "bank_probe.ptx.j2"
PTX_VERSION = "8.0"
KERNEL_PREFIX = "bank_probe_"
ITERATIONS = 64
"""Instructions per launch: large enough that any one-off shared access would show as a fraction."""
WARP_THREADS = banks.WARP_SIZE
METRICS = {
    banks.STORE: "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    banks.LOAD: "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
}
"""ncu counts stmatrix under _op_st and ldmatrix under _op_ld (checked on an H200)."""
NCU_FALLBACK = Path("/usr/local/cuda/bin/ncu")
NCU_TIMEOUT_S = 540

STRIDES = (4, 8, 16, 32, 64, 128, 132)
"""Row-major strides from the issue: lane l at l * stride (where the op's alignment allows)."""
MATRIX_ROW_PITCHES = (16, 32, 64, 128, 144)
"""ldmatrix/stmatrix rows must be 16-byte aligned: 144 (128 + 16 pad) stands in for 132."""
SWIZZLE_COLUMN_BLOCKS = (0, 16, 32, 48)
"""Columns of the 16x16 blocks of a 64-column swizzle128 tile: each hits another XOR of the chunk index."""
EPILOGUE_CONFIGS = (
    {},
    {"block_n": 64},
    {"block_n": 192},
    {"block_m": 64, "block_n": 256},
    {"out_dtype": "float16"},
    {"out_dtype": "float32"},
    {"block_n": 64, "out_dtype": "float32"},
)
"""GemmConfig keyword sets whose epilogue stores are probed (defaults for the rest): stmatrix.x4 for 16-bit
outputs, st.v2.b32 for fp32."""
EPILOGUE_STORES_PER_CONFIG = 8
"""The first 8 distinct stores of a config already cycle through every chunk XOR and both swizzle panels of
a 128-column tile; more would only repeat those bank patterns at other rows and cost ncu time."""
PERMUTATION_SEED = 90
"""Fixed, so the profiled child process and the comparing parent build identical patterns."""


# --------------------------------------------------------------------------------------------------------------
# Patterns
# --------------------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Pattern:
    """One warp-wide instruction to measure: op, 32 lane addresses, and the model rules it exercises."""

    name: str
    op: str
    addresses: tuple[int, ...]
    group: str
    rules: tuple[str, ...] = ()

    def simulate(self) -> banks.Result:
        return banks.simulate(self.op, self.addresses)

    @property
    def kind(self) -> str:
        return banks.OPS[self.op].kind


def _full_warp(addresses: Sequence[int]) -> tuple[int, ...]:
    """Pad .x1/.x2 address lists to 32 lanes by repeating them: the hardware ignores those lanes, and repeating
    keeps every lane's address valid."""
    addresses = list(addresses)
    return tuple(addresses[lane % len(addresses)] for lane in range(WARP_THREADS))


def _scalar_ops() -> list[banks.Op]:
    return [op for op in banks.OPS.values() if not op.matrix]


def _matrix_ops() -> list[banks.Op]:
    return [op for op in banks.OPS.values() if op.matrix]


def _phase_rule(op: banks.Op) -> str:
    return "MATRIX_PHASE" if op.matrix else "PHASE_BY_WIDTH"


def _same_word_rule(op: banks.Op) -> str:
    return "LOAD_BROADCAST" if op.kind == banks.LOAD else "STORE_MERGE"


def stride_patterns() -> list[Pattern]:
    """Lane l at l * stride: the row-major walks of the issue (and the 32-way one-bank case at 128)."""
    out = []
    for op in _scalar_ops():
        for stride in STRIDES:
            if stride % op.bytes_per_lane == 0:
                out.append(Pattern(f"{op.name} stride {stride}", op.name, tuple(banks.strided_addresses(stride)),
                                   "stride", ("BANK_MAPPING", "DISTINCT_WORDS", _phase_rule(op))))
    for op in _matrix_ops():
        for pitch in MATRIX_ROW_PITCHES:
            out.append(Pattern(f"{op.name} rows {pitch} B apart", op.name,
                               _full_warp(banks.strided_addresses(pitch, op.lanes_used)),
                               "stride", ("BANK_MAPPING", "DISTINCT_WORDS", "MATRIX_PHASE")))
    return out


def packed_patterns() -> list[Pattern]:
    """Sub-word accesses packed into shared words: lanes share words with different bytes."""
    out = []
    for op in _scalar_ops():
        if op.bytes_per_lane < banks.BANK_BYTES:
            stride = op.bytes_per_lane
            out.append(Pattern(f"{op.name} packed (stride {stride})", op.name,
                               tuple(banks.strided_addresses(stride)), "packed", (_same_word_rule(op),)))
    return out


def _packing_rules(op: banks.Op) -> tuple[str, ...]:
    """LOAD_PAIR_PACKING decides the count of a wide ld whose lane pairs share addresses."""
    return ("LOAD_PAIR_PACKING",) if op.kind == banks.LOAD and not op.matrix and op.bytes_per_lane > 4 else ()


def broadcast_patterns() -> list[Pattern]:
    """Every lane (or every matrix row) at the same address."""
    return [Pattern(f"{op.name} all lanes one address", op.name, (256,) * WARP_THREADS, "broadcast",
                    (_same_word_rule(op), "PHASES_ADD") + _packing_rules(op))
            for op in banks.OPS.values()]


def _phase_permutation(op: banks.Op, rng: random.Random) -> tuple[int, ...]:
    """Within each phase, the lanes take a random permutation of the slots of one 128-byte line."""
    slots_per_line = banks.WAVEFRONT_BYTES // op.bytes_per_lane
    addresses: list[int] = []
    for index, lanes in enumerate(banks.phase_lane_groups(op)):
        slots = rng.sample(range(slots_per_line), len(lanes))
        line = 4096 + index * 1024   # a different 128-byte line (and bank-aligned) per phase
        addresses += [line + slot * op.bytes_per_lane for slot in slots]
    return _full_warp(addresses)


def permutation_patterns() -> list[Pattern]:
    """Law: a conflict-free permutation costs the ideal count."""
    rng = random.Random(PERMUTATION_SEED)
    return [Pattern(f"{op.name} permuted line", op.name, _phase_permutation(op, rng), "permutation",
                    ("DISTINCT_WORDS", _phase_rule(op)))
            for op in banks.OPS.values()]


def phase_patterns() -> list[Pattern]:
    """Patterns whose count depends on how lanes are grouped into phases (PHASE_BY_WIDTH, PHASES_ADD):
    a model that served the whole warp at once would predict fewer wavefronts for each of these."""
    out = []
    half_reuse = [(lane % 16) * 8 for lane in range(WARP_THREADS)]
    half_split = [(lane // 16) * 64 + (lane % 8) * 8 + ((lane % 16) // 8) * 128 for lane in range(WARP_THREADS)]
    quarter_reuse = [(lane % 8) * 16 for lane in range(WARP_THREADS)]
    quarter_split = [((lane // 8) % 2) * 64 + (lane // 16) * 256 + (lane % 4) * 16 + ((lane % 8) // 4) * 128
                     for lane in range(WARP_THREADS)]
    matrix_reuse = quarter_reuse          # 8-lane phases with 16-byte rows: the v4 shapes apply as they are
    matrix_split = quarter_split
    matrix_dup_rows = [(lane % 4) * 16 + (lane // 8) * 1024 for lane in range(WARP_THREADS)]
    word_pairs = [(lane // 2) * 4 for lane in range(WARP_THREADS)]
    two_words_one_bank = [(lane // 16) * 128 for lane in range(WARP_THREADS)]
    for prefix in ("st", "ld"):
        for suffix, addrs, what in (
            ("v2.b32", half_reuse, "half-warps on the same 128 B"),
            ("v2.b32", half_split, "half-warps 2-way on disjoint banks"),
            ("v4.b32", quarter_reuse, "quarter-warps on the same 128 B"),
            ("v4.b32", quarter_split, "quarter-warps 2-way on disjoint bank halves"),
            ("b32", word_pairs, "lane pairs share a word"),
            ("b32", two_words_one_bank, "half-warps on two words of bank 0"),
        ):
            op = banks.OPS[f"{prefix}.{suffix}"]
            out.append(Pattern(f"{op.name} {what}", op.name, tuple(addrs), "phase",
                               (_phase_rule(op), "PHASES_ADD", _same_word_rule(op))))
    for base in ("stmatrix", "ldmatrix"):
        op = banks.OPS[f"{base}.x4"]
        for addrs, what in ((matrix_reuse, "four matrices on the same rows"),
                            (matrix_split, "matrices 2-way on disjoint bank halves"),
                            (matrix_dup_rows, "rows 4-7 repeat rows 0-3")):
            out.append(Pattern(f"{op.name} {what}", op.name, tuple(addrs), "phase",
                               ("MATRIX_PHASE", "PHASES_ADD", _same_word_rule(op))))
    return out


def _pairs_share(chunks: Sequence[int], width: int, mask: int = 1) -> list[int]:
    """32 lane addresses from 16 chunk indices (chunk * width bytes): lanes n and n ^ mask share a chunk,
    the pairs taking the chunks in lane order."""
    pair_of_lane = [lane // 2 if mask == 1 else (lane // 4) * 2 + lane % 2 for lane in range(WARP_THREADS)]
    return [chunks[p] * width for p in pair_of_lane]


def pairing_patterns() -> list[Pattern]:
    """Patterns that tell the LOAD_PAIR_PACKING candidates apart: the H200 run only saw its all-lanes-one-
    address case (ld.v2 1, ld.v4 2 wavefronts), which 'uniform only', 'pairs n^1 only', 'pairs n^2 only' and
    'pairs n^1 or n^2' all predict.  Each pattern below has a different count under at least two of them
    (the model's prediction is the 'n^1 or n^2' one; without packing v2 costs 2 and v4 4 at least)."""
    out = []
    v2, v4 = 8, 16
    # ld.v2: 16 chunks of 8 B in one 128-byte line; packed -> 1 phase of 32 lanes -> 1, else 2
    line_v2 = list(range(16))
    # ld.v2, pairs conflicting: half-warp 0 2-way on banks 0-7, half-warp 1 2-way on banks 16-23;
    # packed (one 32-lane phase) -> 2, half-warp phases -> 2 + 2 = 4
    split_v2 = [0, 1, 2, 3, 16, 17, 18, 19] + [8, 9, 10, 11, 24, 25, 26, 27]
    # ld.v4: 16 chunks of 16 B over 256 B; packed -> 2 half-warps of 128 B -> 2, quarter-warps -> 4
    line_v4 = list(range(16))
    # ld.v4, pairs conflicting in half-warp 0 only: quarter 0 on banks 0-15 of line 0, quarter 1 on banks 0-15
    # of line 1, quarters 2/3 on banks 16-31 of line 0 and 0-15 of line 2; packed -> 2 + 1 = 3, else 4
    split_v4 = [0, 1, 2, 3] + [8, 9, 10, 11] + [4, 5, 6, 7] + [16, 17, 18, 19]
    cases = []
    for prefix in ("ld", "st"):
        cases += [
            (f"{prefix}.v2.b32", _pairs_share(line_v2, v2, 1), "lane pairs n, n^1 share an address"),
            (f"{prefix}.v4.b32", _pairs_share(line_v4, v4, 1), "lane pairs n, n^1 share an address"),
        ]
    cases += [
        ("ld.v2.b32", _pairs_share(line_v2, v2, 2), "lane pairs n, n^2 share an address"),
        ("ld.v4.b32", _pairs_share(line_v4, v4, 2), "lane pairs n, n^2 share an address"),
        ("ld.v2.b32", [(lane // 4) * v2 for lane in range(WARP_THREADS)], "lane quads share an address"),
        ("ld.v4.b32", [(lane // 4) * v4 for lane in range(WARP_THREADS)], "lane quads share an address"),
        ("ld.v2.b32", _pairs_share(split_v2, v2, 1), "lane pairs n, n^1, half-warps 2-way on different banks"),
        ("ld.v4.b32", _pairs_share(split_v4, v4, 1), "lane pairs n, n^1, half-warp 0 2-way"),
        # one lane breaks the pairing (moved to an idle bank): 'every lane' or 'most lanes'?
        ("ld.v2.b32", _pairs_share(line_v2, v2, 1)[:31] + [128], "lane pairs n, n^1 except lane 31"),
        ("ld.v4.b32", _pairs_share(line_v4, v4, 1)[:31] + [4096], "lane pairs n, n^1 except lane 31"),
    ]
    for op_name, addrs, what in cases:
        op = banks.OPS[op_name]
        out.append(Pattern(f"{op_name} {what}", op_name, tuple(addrs), "pairing",
                           ("PHASE_BY_WIDTH", "DISTINCT_WORDS") + (_packing_rules(op) or (_same_word_rule(op),))))
    return out


def layout_patterns() -> list[Pattern]:
    """16x16 bf16 blocks of naive, padded and swizzled tiles, moved by every .x4 matrix op, and 16-byte
    vector walks down a column of a 128-byte-row tile with and without the 128B swizzle."""
    out = []
    x4_ops = [op for op in _matrix_ops() if op.lanes_used == WARP_THREADS]
    for layout_name in banks.LAYOUTS:
        layout = banks.tile_layout(layout_name)
        for op in x4_ops:
            out.append(Pattern(f"{op.name} 16x16 block, {layout_name}", op.name,
                               tuple(banks.block_x4_addresses(layout)), "layout",
                               ("MATRIX_PHASE", "DISTINCT_WORDS")))
    swizzled = banks.tile_layout("swizzle128")
    for col in SWIZZLE_COLUMN_BLOCKS[1:]:
        addrs = tuple(banks.block_x4_addresses(swizzled, 0, col))
        for op in x4_ops:
            out.append(Pattern(f"{op.name} 16x16 block at column {col}, swizzle128", op.name, addrs, "layout",
                               ("MATRIX_PHASE", "DISTINCT_WORDS")))
    column_walk = {name: tuple(banks.tile_layout(name).offset(lane, 0) for lane in range(WARP_THREADS))
                   for name in ("naive", "swizzle128")}
    for prefix in ("st", "ld"):
        for name, addrs in column_walk.items():
            out.append(Pattern(f"{prefix}.v4.b32 down a column, {name}", f"{prefix}.v4.b32", addrs, "layout",
                               ("PHASE_BY_WIDTH", "DISTINCT_WORDS")))
    return out


def epilogue_patterns() -> tuple[list[Pattern], str | None]:
    """ptxgemm's own epilogue shared-memory stores (warp 0): one pattern per distinct (op, addresses).

    Returns (patterns, why_missing): why_missing names the config error when ptxgemm's epilogue layout cannot be
    had, so the caller can report it instead of silently covering less.
    """

    out, seen, problems = [], set(), []
    for kwargs in EPILOGUE_CONFIGS:
        label = ", ".join(f"{k}={v}" for k, v in kwargs.items()) or "defaults"
        try:
            stores = epilogue_stores(GemmConfig(**kwargs))
        except (TypeError, ValueError) as exc:
            problems.append(f"GemmConfig({label}): {exc}")
            continue
        taken = 0
        for index, (op, addrs) in enumerate(stores):
            key = (op, tuple(int(a) for a in addrs))
            if key in seen or taken == EPILOGUE_STORES_PER_CONFIG:
                continue
            taken += 1
            seen.add(key)
            spec = banks.OPS[op]
            out.append(Pattern(f"epilogue ({label}) store #{index}", op, key[1], "epilogue",
                               (_phase_rule(spec), "DISTINCT_WORDS")))
    return out, ("; ".join(problems) or None)


def all_patterns() -> list[Pattern]:
    """Every pattern the hardware check runs, in launch order."""
    epilogue, _ = epilogue_patterns()
    return (stride_patterns() + packed_patterns() + broadcast_patterns() + permutation_patterns()
            + phase_patterns() + pairing_patterns() + layout_patterns() + epilogue)


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
           sys.executable, "-m", "ptxgemm.tools.bank_probe", "--run", "--manifest", str(manifest)]
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
    patterns = select(all_patterns(), only)
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
        "Produced by `python -m ptxgemm.tools.bank_probe --measure --results <this file>`.",
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


def select(patterns: Sequence[Pattern], only: str | None) -> list[Pattern]:
    return [p for p in patterns if only is None or only in p.name]


def list_table(patterns: Sequence[Pattern]) -> str:
    rows = [f"{'group':<12} {'op':<18} {'pred':>4} {'ideal':>5}  pattern"]
    for p in patterns:
        r = p.simulate()
        rows.append(f"{p.group:<12} {p.op:<18} {r.wavefronts:>4} {r.ideal:>5}  {p.name}")
    return "\n".join(rows)


# --------------------------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m ptxgemm.tools.bank_probe", description=__doc__.split("\n")[0])
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--list", action="store_true", help="print the patterns and predictions (no GPU)")
    mode.add_argument("--run", action="store_true", help="run every pattern once (under ncu, by --measure)")
    mode.add_argument("--measure", action="store_true", help="profile --run with ncu and compare with the model")
    p.add_argument("--only", help="only patterns whose name contains this text")
    p.add_argument("--manifest", type=Path, help="--run: write the launched patterns and device facts here")
    p.add_argument("--results", type=Path, help="--measure: write the markdown table here")
    p.add_argument("--ncu", help="--measure: the ncu executable (default: PATH, then /usr/local/cuda/bin/ncu)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.list:
        _, missing = epilogue_patterns()
        print(list_table(select(all_patterns(), args.only)))
        if missing:
            print(f"note: {missing}", file=sys.stderr)
        return 0
    if args.run:
        patterns = select(all_patterns(), args.only)
        facts = run_patterns(patterns)
        if args.manifest:
            args.manifest.write_text(json.dumps({**facts, "patterns": [p.name for p in patterns]}))
        print(f"ran {len(patterns)} bank-conflict patterns on {facts['gpu']}")
        return 0
    try:
        measurements, facts = measure(args.only, args.ncu)
    except MeasureError as exc:
        print(f"bank_probe: error: {exc}", file=sys.stderr)
        return 2
    report = results_markdown(measurements, facts)
    print(report)
    if args.results:
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(report)
    _, missing = epilogue_patterns()
    if missing:
        print(f"bank_probe: warning: {missing}", file=sys.stderr)
    return 0 if all(m.ok for m in measurements) else 1


if __name__ == "__main__":
    sys.exit(main())
