"""A model of Hopper (sm_90) shared-memory bank conflicts for one warp-wide instruction.

Kernel engineers usually find bank conflicts after the fact: ``ncu`` reports more
shared-memory wavefronts than the instruction needs, and someone writes a script
that prints every lane's address and bank.  This module is that script made
precise: given the 32 lanes' byte addresses of one shared-memory instruction it
predicts how many wavefronts (128-byte bank-array passes) the hardware needs,
which lanes are served together, and which banks they collide on.

The model is a small set of *named rules* (``RULES``), each a statement about the
hardware that the device check (``tests/test_banks_gpu.py``, which compares the
prediction with ncu's ``l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{ld,st}``
counters) either confirms or refutes.  The knobs that a refuted rule would
change live in :class:`HardwareRules`, so a correction is one edit there.

Pure Python (and ptxgemm.kernel.swizzle's numpy): no GPU, no CUDA, importable anywhere.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping, Sequence

from ..errors import ConfigError
from ..kernel.hardware import WARP_LANES
from ..kernel.swizzle import swizzle_address

# --------------------------------------------------------------------------- #
# Hardware constants
# --------------------------------------------------------------------------- #

NUM_BANKS = 32
"""Shared memory is interleaved over 32 banks ..."""
BANK_BYTES = 4
"""... each 4 bytes wide: consecutive 4-byte words live in consecutive banks."""
WAVEFRONT_BYTES = NUM_BANKS * BANK_BYTES
"""One wavefront reads or writes one word in every bank: 128 bytes at most."""
WARP_SIZE = WARP_LANES

MATRIX_ROWS = 8
"""An 8x8 b16 matrix of ``ldmatrix``/``stmatrix`` has 8 rows, one address per row."""
MATRIX_ROW_BYTES = 16
"""Each row is 8 b16 elements: 16 contiguous bytes at the address its lane supplies."""

SHARED_WINDOW_BYTES = 227 * 1024
"""The most shared memory one CTA can have on H100/H200 (the opt-in limit).  Addresses
are offsets into the CTA's shared memory, so one at or past this bound is out of range."""

LOAD = "load"
STORE = "store"


class BankModelError(ConfigError):
    """Bad input to the model: unknown op, missing lanes, misaligned or out-of-range
    address.  The message is one line, fit to print as a CLI error."""


# --------------------------------------------------------------------------- #
# Rules
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class Rule:
    """One statement about the hardware that the model relies on."""

    name: str
    statement: str
    # The evidence is data, not a flag: tests/test_banks.py checks the model against every row that ncu measured
    # (docs/results/h200/banks/).


RULES: Mapping[str, Rule] = MappingProxyType(
    {
        rule.name: rule
        for rule in (
            Rule(
                "BANK_MAPPING",
                "byte address A lives in 4-byte word A//4, which lives in bank (A//4) % 32.",
            ),
            Rule(
                "PHASE_BY_WIDTH",
                "a warp's ld/st is split into phases of consecutive lanes by access width: "
                "1, 2 or 4 bytes per lane -> one phase of 32 lanes; 8 bytes -> two phases of "
                "16 lanes (half-warps); 16 bytes -> four phases of 8 lanes (quarter-warps).  "
                "Stores always; loads unless LOAD_PAIR_PACKING applies.",
            ),
            Rule(
                "LOAD_PAIR_PACKING",
                "a load returns at most 128 bytes (one register per lane) per wavefront, but when "
                "lane pairs share their address -- a[n] == a[n^1] for every lane n, or a[n] == a[n^2] "
                "for every lane n (all lanes at one address is both) -- the return is packed 2x: "
                "an 8-byte load is served as one phase of 32 lanes, a 16-byte load as two phases of "
                "16 lanes (half-warps).  Only ld/ld.v2/ld.v4 (ldmatrix and stores are never packed).  "
                "Decided by the H200 run: ld.v2/ld.v4 'all lanes one address' measured 1 and 2 "
                "(half-warp/quarter-warp phases alone predict 2 and 4), while 'half-warps on the same "
                "128 B' (a[n] == a[n^16]) and 'quarter-warps on the same 128 B' (a[n] == a[n^8]) "
                "measured 2 and 4 and the 2-way split patterns 4 and 8, so it is not whole-warp "
                "same-word broadcast.  H200 run 3 settled the general case: the 'pairing' patterns of "
                "ptxgemm/tools/bank_probe.py (n^1 pairs, n^2 pairs, quads, a pair broken by one lane, "
                "stores with pairs) all measured as this rule predicts (docs/results/h200/banks/bank_conflicts_h200.md).",
            ),
            Rule(
                "MATRIX_PHASE",
                "ldmatrix/stmatrix .x1/.x2/.x4 serve one 8x8 b16 matrix per phase: matrix m "
                "uses the addresses of lanes 8m..8m+7, each the start of a 16-byte row; "
                ".trans changes which registers receive the data, not the addresses.",
            ),
            Rule(
                "DISTINCT_WORDS",
                "a phase costs as many wavefronts as the largest number of distinct words "
                "that any single bank must serve in it (at least 1).",
            ),
            Rule(
                "LOAD_BROADCAST",
                "lanes of one phase that read the same word share one bank access (broadcast).",
            ),
            Rule(
                "STORE_MERGE",
                "lanes that write the same word (same or different bytes of it) share one "
                "bank access, as loads do.",
            ),
            Rule(
                "PHASES_ADD",
                "an instruction costs the sum of its phases' wavefronts; phases never "
                "share a wavefront (same-word lanes in different phases are not merged).",
            ),
        )
    }
)


@dataclass(frozen=True)
class HardwareRules:
    """The tunable parts of the model, one field per rule that could turn out wrong.

    The defaults are the rules in ``RULES``.  If the device check refutes one, the
    fix is to change the default here (and the rule's text), not the algorithm.
    """

    lanes_per_phase_by_width: Mapping[int, int] = field(
        default_factory=lambda: MappingProxyType({1: 32, 2: 32, 4: 32, 8: 16, 16: 8})
    )
    """PHASE_BY_WIDTH: bytes per lane -> lanes served per phase (stores, and loads that are not packed)."""
    paired_load_lanes_per_phase_by_width: Mapping[int, int] = field(
        default_factory=lambda: MappingProxyType({1: 32, 2: 32, 4: 32, 8: 32, 16: 16})
    )
    """LOAD_PAIR_PACKING: bytes per lane -> lanes per phase of a load whose lane pairs share addresses."""
    paired_load_lane_masks: tuple[int, ...] = (1, 2)
    """LOAD_PAIR_PACKING: a load is packed if, for one of these m, every lane n has the address of lane
    n ^ m.  ``()`` turns packing off (the model before the H200 run)."""
    matrix_lanes_per_phase: int = MATRIX_ROWS
    """MATRIX_PHASE: one matrix (8 row addresses) per phase."""
    load_broadcast: bool = True
    """LOAD_BROADCAST: same-word reads count once."""
    store_merge: bool = True
    """STORE_MERGE: same-word writes count once."""


DEFAULT_RULES = HardwareRules()


# --------------------------------------------------------------------------- #
# Operations
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class Op:
    """One warp-wide shared-memory instruction form."""

    name: str
    kind: str
    """LOAD or STORE: ncu counts them under ``_op_ld`` and ``_op_st``."""
    bytes_per_lane: int
    """Bytes each lane's address starts: the access width, or 16 for a matrix row."""
    lanes_used: int
    """How many lanes' addresses the instruction reads (8/16 for .x1/.x2)."""
    matrix: bool = False
    trans: bool = False

    @property
    def banks_per_lane(self) -> int:
        return max(1, self.bytes_per_lane // BANK_BYTES)


def _build_ops() -> dict[str, Op]:
    ops: dict[str, Op] = {}
    for kind, prefix in ((STORE, "st"), (LOAD, "ld")):
        for suffix, width in (("b8", 1), ("b16", 2), ("b32", 4), ("v2.b32", 8), ("v4.b32", 16)):
            name = f"{prefix}.{suffix}"
            ops[name] = Op(name, kind, width, WARP_SIZE)
    for kind, base in ((STORE, "stmatrix"), (LOAD, "ldmatrix")):
        for num, matrices in (("x1", 1), ("x2", 2), ("x4", 4)):
            name = f"{base}.{num}"
            ops[name] = Op(name, kind, MATRIX_ROW_BYTES, matrices * MATRIX_ROWS, matrix=True)
        name = f"{base}.x4.trans"
        ops[name] = Op(name, kind, MATRIX_ROW_BYTES, WARP_SIZE, matrix=True, trans=True)
    return ops


OPS: Mapping[str, Op] = MappingProxyType(_build_ops())
"""Every op the model knows, by name (``st.b32``, ``ldmatrix.x4.trans``, ...)."""


def get_op(name: str | Op) -> Op:
    if isinstance(name, Op):
        return name
    try:
        return OPS[name]
    except KeyError:
        raise BankModelError(f"unknown op {name!r}; expected one of: {', '.join(OPS)}") from None


# --------------------------------------------------------------------------- #
# Address helpers
# --------------------------------------------------------------------------- #


def bank_of(address: int) -> int:
    """BANK_MAPPING."""
    return (address // BANK_BYTES) % NUM_BANKS


def words_of(address: int, width: int) -> tuple[int, ...]:
    """The 4-byte words an aligned access of ``width`` bytes at ``address`` touches."""
    first = address // BANK_BYTES
    last = (address + width - 1) // BANK_BYTES
    return tuple(range(first, last + 1))


def validate_addresses(op: Op, addresses: Sequence[int]) -> list[int]:
    """Return the addresses the op actually uses, or raise BankModelError.

    Only the first ``op.lanes_used`` addresses are checked: ``ldmatrix.x1`` ignores
    lanes 8..31, so their values do not matter (they may still be given).
    """
    if len(addresses) > WARP_SIZE:
        raise BankModelError(f"{op.name}: got {len(addresses)} addresses, a warp has {WARP_SIZE} lanes")
    if len(addresses) < op.lanes_used:
        raise BankModelError(
            f"{op.name} needs {op.lanes_used} lane addresses, got {len(addresses)}"
        )
    used = [int(a) for a in addresses[: op.lanes_used]]
    for lane, address in enumerate(used):
        if address < 0:
            raise BankModelError(f"lane {lane}: negative address {address}")
        if address + op.bytes_per_lane > SHARED_WINDOW_BYTES:
            raise BankModelError(
                f"lane {lane}: address {address} is out of range "
                f"(shared memory is {SHARED_WINDOW_BYTES} bytes)"
            )
        if address % op.bytes_per_lane:
            raise BankModelError(
                f"lane {lane}: address {address} is not {op.bytes_per_lane}-byte aligned as {op.name} requires"
            )
    return used


# --------------------------------------------------------------------------- #
# Simulation
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class LaneAccess:
    lane: int
    address: int
    phase: int
    banks: tuple[int, ...]
    degree: int
    """Conflict degree: the most distinct words that any bank this lane touches must
    serve within its phase (1 = no conflict)."""

    @property
    def bank(self) -> int:
        return self.banks[0]


@dataclass(frozen=True)
class Phase:
    index: int
    lanes: tuple[int, ...]
    wavefronts: int
    ideal: int
    packed: bool = False
    """LOAD_PAIR_PACKING: a load phase whose lane pairs share addresses (2x the lanes, half the return)."""


@dataclass(frozen=True)
class Result:
    op: Op
    accesses: tuple[LaneAccess, ...]
    phases: tuple[Phase, ...]

    @property
    def wavefronts(self) -> int:
        """PHASES_ADD."""
        return sum(p.wavefronts for p in self.phases)

    @property
    def ideal(self) -> int:
        return sum(p.ideal for p in self.phases)

    @property
    def conflict_free(self) -> bool:
        return self.wavefronts <= self.ideal

    def to_json(self) -> dict:
        """The machine-readable form printed by ``python -m ptxgemm bank-conflicts --json``.

        ``banks`` holds each lane's first bank; a lane covers ``banks_per_lane``
        consecutive banks from there (2 for 8-byte, 4 for 16-byte accesses).
        """
        by_lane = {a.lane: a for a in self.accesses}
        return {
            "op": self.op.name,
            "wavefronts": self.wavefronts,
            "ideal": self.ideal,
            "bytes_per_lane": self.op.bytes_per_lane,
            "banks_per_lane": self.op.banks_per_lane,
            "phases": [
                {
                    "index": p.index,
                    "lanes": list(p.lanes),
                    "addresses": [by_lane[l].address for l in p.lanes],
                    "banks": [by_lane[l].bank for l in p.lanes],
                    "degrees": [by_lane[l].degree for l in p.lanes],
                    "wavefronts": p.wavefronts,
                    "packed": p.packed,
                }
                for p in self.phases
            ],
        }


def packed_load(op: Op, addresses: Sequence[int] | None, rules: HardwareRules = DEFAULT_RULES) -> bool:
    """LOAD_PAIR_PACKING: is this ld (not ldmatrix) served with its lane pairs packed?

    True when, for one of ``rules.paired_load_lane_masks`` m, every lane n has lane n ^ m's address.
    """
    if op.kind != LOAD or op.matrix or addresses is None:
        return False
    used = list(addresses[: op.lanes_used])
    if len(used) < op.lanes_used:
        return False
    return any(all(used[n] == used[n ^ m] for n in range(op.lanes_used) if (n ^ m) < op.lanes_used)
               for m in rules.paired_load_lane_masks)


def phase_lane_groups(op: Op, rules: HardwareRules = DEFAULT_RULES,
                      addresses: Sequence[int] | None = None) -> list[tuple[int, ...]]:
    """PHASE_BY_WIDTH / MATRIX_PHASE / LOAD_PAIR_PACKING: which lanes the hardware serves together.

    Without ``addresses`` (or for lanes at distinct addresses) this is the unpacked grouping; a load
    whose lane pairs share addresses gets the wider phases of LOAD_PAIR_PACKING.
    """
    if op.matrix:
        per_phase = rules.matrix_lanes_per_phase
    elif packed_load(op, addresses, rules):
        per_phase = rules.paired_load_lanes_per_phase_by_width[op.bytes_per_lane]
    else:
        per_phase = rules.lanes_per_phase_by_width[op.bytes_per_lane]
    return [tuple(range(start, min(start + per_phase, op.lanes_used)))
            for start in range(0, op.lanes_used, per_phase)]


def _merges_same_word(op: Op, rules: HardwareRules) -> bool:
    return rules.load_broadcast if op.kind == LOAD else rules.store_merge


def _bank_loads(words_by_lane: Mapping[int, tuple[int, ...]], merge: bool) -> dict[int, int]:
    """DISTINCT_WORDS: bank -> number of word accesses it must serve in one phase."""
    if merge:
        distinct: dict[int, set[int]] = defaultdict(set)
        for words in words_by_lane.values():
            for word in words:
                distinct[word % NUM_BANKS].add(word)
        return {bank: len(ws) for bank, ws in distinct.items()}
    counts: dict[int, int] = defaultdict(int)
    for words in words_by_lane.values():
        for word in words:
            counts[word % NUM_BANKS] += 1
    return dict(counts)


def _ideal_wavefronts(lanes: int, bytes_per_lane: int, packing: int = 1) -> int:
    """Bytes moved / 128 per wavefront (``packing`` lanes share each returned value), and at least one
    wavefront per phase."""
    return max(1, math.ceil(lanes * bytes_per_lane / (WAVEFRONT_BYTES * packing)))


def simulate(op: str | Op, addresses: Sequence[int], rules: HardwareRules = DEFAULT_RULES) -> Result:
    """Predict the wavefronts of one warp-wide shared-memory instruction.

    ``addresses`` are the lanes' byte addresses (offsets in the CTA's shared
    window), lane 0 first.  Raises BankModelError on bad input.
    """
    op = get_op(op)
    used = validate_addresses(op, addresses)
    merge = _merges_same_word(op, rules)
    packed = packed_load(op, used, rules)
    accesses: list[LaneAccess] = []
    phases: list[Phase] = []
    for index, lanes in enumerate(phase_lane_groups(op, rules, used)):
        words = {lane: words_of(used[lane], op.bytes_per_lane) for lane in lanes}
        loads = _bank_loads(words, merge)
        phases.append(Phase(index, lanes, max(loads.values(), default=1),
                            _ideal_wavefronts(len(lanes), op.bytes_per_lane, 2 if packed else 1), packed))
        for lane in lanes:
            banks = tuple(w % NUM_BANKS for w in words[lane])
            accesses.append(LaneAccess(lane, used[lane], index, banks, max(loads[b] for b in banks)))
    return Result(op, tuple(accesses), tuple(phases))


def wavefronts(op: str | Op, addresses: Sequence[int], rules: HardwareRules = DEFAULT_RULES) -> int:
    """Shorthand for ``simulate(...).wavefronts``."""
    return simulate(op, addresses, rules).wavefronts


def ideal_wavefronts(op: str | Op, rules: HardwareRules = DEFAULT_RULES) -> int:
    """The ideal count of the op with every lane active at its own address.

    A load packed by LOAD_PAIR_PACKING (lane pairs sharing addresses) can take fewer: ``simulate``'s
    ``Result.ideal`` accounts for that."""
    op = get_op(op)
    return sum(_ideal_wavefronts(len(lanes), op.bytes_per_lane) for lanes in phase_lane_groups(op, rules))


# --------------------------------------------------------------------------- #
# Layouts: where the rows of a 16x16 b16 block land, for stmatrix / ldmatrix
# --------------------------------------------------------------------------- #

ELEMENT_BYTES = 2
"""bf16 / fp16: the element of ldmatrix/stmatrix .b16 matrices."""
BLOCK = 16
"""A 16x16 block is what one stmatrix.x4 (or ldmatrix.x4) moves."""

LAYOUTS = ("naive", "padded", "swizzle32", "swizzle64", "swizzle128")
SWIZZLE_LAYOUTS = {"swizzle32": ("32B", 32), "swizzle64": ("64B", 64), "swizzle128": ("128B", 128)}
"""layout name -> (ptxgemm.kernel.swizzle mode, span in bytes = the row pitch of such a tile)."""
DEFAULT_ROW_BYTES = 128
DEFAULT_PAD_BYTES = 16


@dataclass(frozen=True)
class TileLayout:
    """A row-major b16 tile in shared memory: row pitch, optional TMA swizzle.

    Offsets are relative to a base aligned to the swizzle period (1024 bytes does
    for every mode), as TMA requires: ptxgemm.kernel.swizzle's model is a function of the
    absolute address, so this is what makes tile offsets and addresses agree.
    """

    name: str
    row_pitch: int
    swizzle: str = "none"
    """A ptxgemm.kernel.swizzle mode: none, 32B, 64B or 128B."""

    def offset(self, row: int, col: int) -> int:
        return int(swizzle_address(row * self.row_pitch + col * ELEMENT_BYTES, self.swizzle))


def tile_layout(name: str, row_bytes: int = DEFAULT_ROW_BYTES, pad: int = DEFAULT_PAD_BYTES) -> TileLayout:
    """Build one of LAYOUTS.

    naive:      rows of ``row_bytes`` back to back;
    padded:     rows of ``row_bytes + pad``;
    swizzleN:   rows of N bytes (one TMA swizzle atom wide: a TMA box with
                SWIZZLE_NB has an inner extent of N bytes), N-byte swizzled.
    """
    if row_bytes <= 0 or row_bytes % MATRIX_ROW_BYTES:
        raise BankModelError(f"row bytes must be a positive multiple of {MATRIX_ROW_BYTES}, got {row_bytes}")
    if row_bytes < BLOCK * ELEMENT_BYTES:
        raise BankModelError(f"row bytes must hold a 16-column block ({BLOCK * ELEMENT_BYTES} bytes), got {row_bytes}")
    if pad < 0 or pad % MATRIX_ROW_BYTES:
        raise BankModelError(f"pad must be a non-negative multiple of {MATRIX_ROW_BYTES} bytes, got {pad}")
    if name == "naive":
        return TileLayout(name, row_bytes)
    if name == "padded":
        return TileLayout(name, row_bytes + pad)
    if name in SWIZZLE_LAYOUTS:
        mode, span = SWIZZLE_LAYOUTS[name]
        return TileLayout(name, span, mode)
    raise BankModelError(f"unknown layout {name!r}; expected one of: {', '.join(LAYOUTS)}")


def matrix_x4_lane_coords(lane: int) -> tuple[int, int]:
    """(row, col) of the 16x16 block whose row start lane ``lane`` supplies to x4.

    Matrices 0..3 are the block's quadrants top-left, bottom-left, top-right,
    bottom-right, the order the mma accumulator fragment uses: lane l gives
    row l % 16, column 8 * (l // 16).
    """
    return lane % BLOCK, (lane // BLOCK) * (BLOCK // 2)


def block_x4_addresses(layout: TileLayout, row0: int = 0, col0: int = 0) -> list[int]:
    """The 32 lane addresses of a stmatrix/ldmatrix.x4 moving the 16x16 block whose top-left element
    is (row0, col0) of the tile."""
    addresses = []
    for lane in range(WARP_SIZE):
        row, col = matrix_x4_lane_coords(lane)
        addresses.append(layout.offset(row0 + row, col0 + col))
    return addresses


def strided_addresses(stride: int, lanes: int = WARP_SIZE, base: int = 0) -> list[int]:
    """Lane l at ``base + l * stride``: a row-major walk down a column."""
    return [base + lane * stride for lane in range(lanes)]




__all__ = [
    "BANK_BYTES", "NUM_BANKS", "WAVEFRONT_BYTES", "WARP_SIZE", "MATRIX_ROWS", "MATRIX_ROW_BYTES",
    "SHARED_WINDOW_BYTES", "LOAD", "STORE", "BankModelError", "Rule", "RULES", "HardwareRules",
    "DEFAULT_RULES", "Op", "OPS", "get_op", "bank_of", "words_of", "validate_addresses",
    "LaneAccess", "Phase", "Result", "packed_load", "phase_lane_groups", "simulate", "wavefronts",
    "ideal_wavefronts", "LAYOUTS", "TileLayout", "tile_layout", "matrix_x4_lane_coords",
    "block_x4_addresses", "strided_addresses",
]
