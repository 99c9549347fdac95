"""The shared-memory access patterns the bank probe measures: one warp-wide instruction at 32 lane addresses each,
with the rules of ptxgemm's bank-conflict model (ptxgemm/tools/banks.py) it exercises.

Strides, packed and broadcast lanes, permuted phases, pairings, tile layouts and ptxgemm's own epilogue stores;
ptxgemm/tools/bank_probe.py launches them and compares ncu's counts with the model. Everything here is fixed (no
GPU, no randomness the profiled child process could draw differently).
"""
from __future__ import annotations

import dataclasses
import random
from typing import Sequence

from ..kernel.config import GemmConfig
from ..kernel.epilogue_layout import epilogue_stores
from . import banks

WARP_THREADS = banks.WARP_SIZE

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


def select_patterns(patterns: Sequence[Pattern], only: str | None) -> list[Pattern]:
    """The patterns whose name contains `only` (all of them for None), in order: --only of `bank-probe`. The parent
    that compares and the profiled child select with this same function, so their launch lists agree."""
    return [p for p in patterns if only is None or only in p.name]
