"""GemmConfig: the one place where a GEMM kernel's parameters are validated.

Its fields fall in four groups: the tile choice (kernel/tile.py's Tile: what the selection picks), the operands
(dtypes, majors), the fused epilogue (in the kernel's frame) and the build switches (debug, trace). Every number
derived from them is a property defined in kernel/layout.py; the templates receive them through
kernel/params.py and compute nothing of their own, so the PTX, the host launch code and the inspection report can
never disagree.

Shape comments use CUTLASS's convention: A is MxK, B is KxN, C = A*B is MxN.
Operand layouts ("majors"): an operand is K-major when K is its contiguous dimension
(A row-major (M, K); B as an (N, K) row-major array, i.e. a Fortran-ordered (K, N)), MN-major otherwise
(B row-major (K, N): what numpy's C order gives you). wgmma reads either through its transpose bits.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import numbers

import numpy as np

from ..errors import ConfigError
from .hardware import MAX_GROUPS, MAX_STAGES, SMEM_PER_BLOCK_OPTIN
from .layout import KernelLayout
from .tile import Tile


INPUT_DTYPES = ("bfloat16", "float16", "float8_e4m3fn", "float8_e5m2")
# wgmma's name for each input type. The 8-bit ones read both operands K-major only: wgmma has no transpose for them
# (PTX ISA, wgmma.mma_async: imm-trans-a/b exist for .f16/.bf16 alone).
WGMMA_TYPES = {"bfloat16": "bf16", "float16": "f16", "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}
FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2")

# --- the fused epilogue (ptxgemm/kernel/templates/fusion.ptx.j2): D = act(alpha * r[m] * c[n] * acc + beta * S + bias) ---
ACTIVATIONS = ("relu", "gelu", "silu")      # gelu: the tanh form; None: no activation
BIAS_AXES = ("row", "col")                  # a vector over the kernel's M (one value per row) or N (per column)
VECTOR_DTYPES = ("float32", "bfloat16", "float16")   # bias vectors; scale vectors are float32
PTX_FLOAT_TYPES = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}   # PTX's names (cvt, loads)
GELU_CUBIC = 0.044715                       # the tanh form's cubic coefficient
# Accumulators plus the fused epilogue's live values (GemmConfig.fused_registers) per consumer thread: an estimate,
# set from ptxas 13 on pp128x192 (192 accumulators), where bias + GELU (196) compiled without spills, alpha with
# rowwise scales (199) spilled 20 bytes and a source tile with a row bias (213) 188 bytes; configs past it are
# refused. Under it ptxas may still spill (it hoists the column loads as far as it sees room: tests/test_epilogue.py
# KNOWN_SPILLS), so the selection compiles its fused pick and walks past one that spills (gemm._resolve_config).
FUSED_REGISTER_BUDGET = 196
SCALE_BLOCK = 128                           # blockwise scaling: A's scales per 1x128, B's per 128x128 block
# Blockwise scaling keeps the promoted sums and k-tile products in registers (blockscale.ptx.j2). Where three sets
# fit (the sums and two k-tiles' products: 64 x 128 per consumer at most), the k-tiles alternate two product sets by
# parity, so one retires and is promoted while the next one's wgmmas run. A wider tile keeps one product set of one
# m64 row block (DeepGEMM's layout): each row block's wgmmas retire and are promoted before the next are issued, and
# the other consumer's wgmmas fill the tensor core meanwhile. 192 registers of sets, with the scale addresses and the
# loop's registers, fit the consumers' 232 without spills (ptxas 13: coop128x128 and pp64x128 with two product sets,
# coop128x192 and coop256x128 with one); 128 x 256 per consumer would need 256.
BLOCK_SCALE_ACC_BUDGET = 192
# The one-set mainloop loads each k-tile's A scales this many k-tiles ahead of their promotion (blockscale.ptx.j2).
# One was not enough on the H100: under the operands' TMA traffic the loads took longer than a k-tile (ncu source
# counters: the promotion waited on them).
SCALE_LOOKAHEAD = 2


def default_out_dtype(in_dtype: str) -> str:
    """The output dtype when none is asked for: the input's own for 16-bit inputs, bfloat16 for fp8 (the kernel
    writes no 8-bit output; bfloat16 keeps fp8's range)."""
    return "bfloat16" if in_dtype in FP8_DTYPES else in_dtype
OUTPUT_DTYPES = ("bfloat16", "float16", "float32")
MAJORS = ("k", "mn")
# The kernel's output layout: "n" stores each tile as rows of a row-major C (N contiguous); "m" stores it transposed,
# as columns of a column-major C (M contiguous). "m" is how swap-AB writes a row-major result: the host runs
# C^T = B^T A^T (the wide N fills wgmma's 64-row M, the small M becomes a narrow wgmma N) and the kernel stores
# each C^T tile transposed, i.e. straight into C's rows (ptxgemm.plan.operands chooses the swap from the layout).
C_MAJORS = ("n", "m")
MAX_SPLITS = 16                    # split-K: k-ranges per output tile (fp32 partials, a fixed-order fix-up)
# pingpong: each consumer owns whole tiles and the two alternate (one's epilogue under the other's mainloop);
# cooperative: both consumers share every tile, each the half of its rows; stores overlap the next mainloop.
SCHEDULES = ("pingpong", "cooperative")
# Grouped rasterization (Triton's): "m" walks group_m tile-rows down before moving one column right (the CTAs running
# at once share B's column panels and a few of A's row panels), "n" walks group_m tile-columns across first.
# "hilbert" walks a generalized Hilbert curve over the grid of units (ptxgemm.kernel.schedule.hilbert_order), so that units
# run at the same time stay close in both directions; the host computes the order once per grid shape and the kernel
# reads it from a table.
RASTERS = ("m", "n", "hilbert")
# Grouped GEMM (gemm_grouped.ptx.j2): the forms whose groups run along M. "contiguous": group g is rows
# [offs[g-1], offs[g]) of one (total_M, K) A and of C; "masked": rows [g*M_max, g*M_max + masked_m[g]) of A and C
# seen as (G*M_max, K) and (G*M_max, N). B is one matrix per group either way; the counts are read on the device.
# "k": group g is K range [offs[g-1], offs[g]) of one (M, total_K) A and (total_K, N) B, into C's matrix g; both
# operands MN-major, so the K rows past a group's end in its last k-tile are whole shared-memory lines to zero.
GROUPED_FORMS = ("contiguous", "masked", "k")
PTX_VERSION = "8.0"



_DTYPE_FIELDS = ("in_dtype", "out_dtype", "b_dtype", "source_dtype", "bias_dtype")   # names, or numpy/ml_dtypes types


@functools.cache
def _field_types() -> tuple[tuple[str, str, bool], ...]:
    """(name, kind, optional) of every GemmConfig field, read once from its annotations: kind "dtype" for the
    dtype fields, else the annotated type ("int", "bool", "str")."""
    return tuple((f.name, "dtype" if f.name in _DTYPE_FIELDS else f.type.replace(" | None", ""),
                  f.type.endswith("| None")) for f in dataclasses.fields(GemmConfig))


_DTYPE_NAMES: dict = {}


def dtype_name(d) -> str | None:
    """numpy's name of a dtype or anything numpy reads as one ('bfloat16' and the fp8 types too: ml_dtypes registers
    them), None for None; remembered per spelling: numpy builds a name anew on every read (0.75 us), and a matmul
    call's plan key reads two, the cost model a few hundred per selection."""
    if d is None:
        return None
    try:
        name = _DTYPE_NAMES.get(d)
    except TypeError:   # unhashable: ask numpy each time
        return _numpy_dtype_name(d)
    if name is None:
        name = _DTYPE_NAMES[d] = _numpy_dtype_name(d)
    return name


def _numpy_dtype_name(d) -> str:
    try:
        return np.dtype(d).name
    except TypeError:
        import ml_dtypes  # noqa: F401 - registers 'bfloat16' with numpy

        return np.dtype(d).name




@dataclasses.dataclass(frozen=True)
class GemmConfig(KernelLayout):
    """A GEMM kernel. Everything not given is derived; invalid combinations raise ConfigError."""

    block_m: int = 128            # CTA tile rows; pingpong: one consumer's, cooperative: both consumers' halves
    block_n: int = 128            # tile columns (the wgmma N)
    stages: int | None = None     # None: as many as fit in shared memory (up to MAX_STAGES); see num_stages
    in_dtype: str = "bfloat16"
    out_dtype: str = "bfloat16"
    a_major: str = "k"
    b_major: str = "mn"
    group_m: int = 8              # rasterization: tiles walk group_m tile-rows (raster "m") or tile-columns ("n")
    cluster_m: int = 1            # CTAs per cluster along M; 2: the pair shares B, each loads half and multicasts
    debug: bool = False           # bounded barrier waits that report the stalled barrier (ptxgemm.runtime.debug)
    debug_timeout_ns: int = 2_000_000_000
    trace: bool = False           # record a per-warpgroup timeline into a device buffer (ptxgemm.tools.trace); dense only
    schedule: str = "pingpong"    # SCHEDULES: how the two consumer warpgroups share the tiles
    cluster_n: int = 1            # CTAs per cluster along N; 2: the pair shares A, each loads half and multicasts
    raster: str = "m"             # RASTERS: grouped down tile-rows ("m"), across tile-columns ("n"), or "hilbert"
    splits: int = 1               # split-K: each output tile's k-loop cut into this many units of the schedule
    stream_k: bool = False        # stream-K tail: whole tiles for the full waves, then the last partial wave's k-tiles
    #                               spread evenly over every cluster, fixed up in fp32 (streamk.ptx.j2)
    k_serpentine: bool = False    # the walk's odd passes (units cta + G, cta + 3G, ...) load their k-tiles from the
    #                               last to the first, so each wave starts on the k-tiles the wave before it read last,
    #                               which L2 still holds (scheduler.ptx.j2: k_direction; issue 26 step 12)
    c_major: str = "n"            # C_MAJORS: tiles stored as rows ("n") or transposed, as columns ("m"; swap-AB)
    b_dtype: str | None = None    # B's dtype where it differs from A's (fp8 only: e4m3 x e5m2); None: in_dtype
    # --- the fused epilogue, in the kernel's frame (rows are its M, after any swap); all off: the plain GEMM ---
    alpha: bool = False           # multiply by the fp32 kernel parameter alpha (alpha x per-tensor scales)
    device_scales: bool = False   # ... and by two per-tensor fp32 scales read on the device, once per consumer
    row_scale: bool = False       # multiply row m by an fp32 vector's element m (rowwise scale of A)
    col_scale: bool = False       # multiply column n by an fp32 vector's element n (rowwise scale of B)
    block_scale: bool = False     # fp8 blockwise scales: each k-tile's products promoted into the fp32 accumulators
    block_scale_swapped: bool = False  # ... of a swapped problem (C^T = B^T A^T): the kernel's rows are the caller's
                                       # N, so B's 128x128 scales index its rows and A's 1x128 ones its columns
    source_dtype: str | None = None   # add beta x S, S an M x N matrix of this dtype loaded by TMA (None: no S)
    bias: str | None = None       # BIAS_AXES: add a vector along rows ("row": one value per row) or columns
    bias_dtype: str = "float32"   # VECTOR_DTYPES: the bias vector's dtype
    activation: str | None = None  # ACTIVATIONS, after the bias, before the output cast
    col_pairs: bool = False       # column vectors read two adjacent values per load: the host saw each aligned to two
    #                               elements and N even (Epilogue.config_fields); off for a config without one
    grouped: str | None = None    # GROUPED_FORMS: one launch over G groups along M (None: the dense GEMM)
    group_capacity: int | None = None  # grouped: the most groups the kernel's tables hold, a power of two up to
    #                                    MAX_GROUPS (None: MAX_GROUPS); smaller tables leave room for staging
    group_stream_hint: bool | None = None  # grouped (contiguous, masked): B's loads for a one-row group's unit carry
    #                                        L2::evict_first, each of its weight panels being read by that unit only
    #                                        (None: on for those forms; measured, docs/perf-notes.md issue 25 step 8)
    group_store_hint: bool | None = None  # grouped: C's TMA stores carry L2::evict_first, the output being written
    #                                       once and never read here, so its lines leave L2 before the operands'
    #                                       (None: on for the k form, whose output is the largest stream; issue 25
    #                                       step 11)
    group_sort: bool | None = None  # grouped (k): warp 0 orders the groups by their k-loops, longest first, and the
    #                                 walk takes them in that order (grouped_walk.k_order; None: on where the tables
    #                                 hold at most SORT_DEFAULT_MAX_GROUPS groups, the sort's cost growing with the
    #                                 square of the tables)

    def __post_init__(self):
        self._check_types()
        for name in _DTYPE_FIELDS:
            object.__setattr__(self, name, dtype_name(getattr(self, name)))
        b_dtype = self.b_dtype
        object.__setattr__(self, "b_dtype", None if b_dtype == self.in_dtype else b_dtype)   # one spelling of "same"
        # one spelling of "no column vector to pair" (the plain GEMM's PTX stays byte-identical)
        object.__setattr__(self, "col_pairs", bool(self.col_pairs and (self.col_scale or self.bias == "col")))
        self._validate()
        if self.stages is not None and self.stages > self._max_stages():
            raise ConfigError(f"stages: {self.stages} stages of {self.stage_bytes} B plus the {self.epilogue_bytes} B "
                              f"epilogue buffer exceed {SMEM_PER_BLOCK_OPTIN} B of shared memory "
                              f"(at most {self._max_stages()})")

    @property
    def fp8(self) -> bool:
        return self.in_dtype in FP8_DTYPES

    # --- blockwise scaling's derived shape (blockscale.ptx.j2) -----------------------------------------------
    @property
    def bs_product_sets(self) -> int:
        """k-tile product sets the blockwise mainloop keeps: 2 (whole consumer tiles, alternated by the k-tile's
        parity) where they fit beside the sums, else 1 (one m64 row block's, reused by each row block in turn), 0
        where not even that fits (BLOCK_SCALE_ACC_BUDGET)."""
        if 3 * self.acc_registers <= BLOCK_SCALE_ACC_BUDGET:
            return 2
        return 1 if self.acc_registers + self.acc_per_half <= BLOCK_SCALE_ACC_BUDGET else 0

    @property
    def bs_a_scales(self) -> int:
        """A's scales a thread holds per k-tile: one per row it holds (2 per m64 row block), or, swapped, one per
        column it holds (2 of every 8: block_n / 4)."""
        return self.block_n // 4 if self.block_scale_swapped else 2 * self.m_halves

    @property
    def bs_swapped_registers(self) -> int:
        """Swapped blockwise scales: the registers of the sums, two product sets and every rotating set of A's
        per-column scales (the swap-AB tiles keep two product sets; checked against BLOCK_SCALE_ACC_BUDGET)."""
        return 3 * self.acc_registers + self.bs_scale_sets * self.bs_a_scales

    @property
    def bs_scale_sets(self) -> int:
        """Register sets the blockwise loop rotates its scales through: it loads a k-tile's scales SCALE_LOOKAHEAD
        k-tiles before it issues that k-tile, so the sets hold those, the k-tile being promoted and, with two
        product sets, the k-tile issued beside it."""
        return SCALE_LOOKAHEAD + (1 if self.bs_product_sets == 1 else 2)

    @property
    def bs_unroll(self) -> int:
        """Copies of the blockwise k-loop's body: the sets rotate by name, so one copy per set, and with two product
        sets a common multiple with their parity. A tile's last k-tile ends the loop in copy (k_tiles - 1) mod
        bs_unroll, which has its own drain."""
        sets = self.bs_scale_sets
        return sets if self.bs_product_sets == 1 else math.lcm(sets, 2)

    @property
    def bs_b_boundaries(self) -> tuple[int, ...]:
        """Where, in the tile's columns, B's second scale block begins, for each tile start n0 = j * block_n the
        kernel meets: SCALE_BLOCK - n0 % SCALE_BLOCK, or block_n where the whole tile lies in one block. The first
        entry is j = 0's (one block when block_n divides SCALE_BLOCK); each entry is one copy of the promotion.
        Swapped, B's scales index the rows (one block per consumer tile) and the columns have none: (block_n,)."""
        if self.block_scale_swapped:
            return (self.block_n,)
        seen = []
        for j in range(SCALE_BLOCK):
            t = min(SCALE_BLOCK - j * self.block_n % SCALE_BLOCK, self.block_n)
            if t not in seen:
                seen.append(t)
        return tuple(seen)

    # --- validation ------------------------------------------------------------------------------------
    def _check_types(self):
        """Each field's type, before any rule formats or compares it: whole numbers (not bools), bools, strings,
        dtypes (anything numpy reads as one), each optional where its default is None (_FIELD_TYPES)."""
        for name, kind, optional in _field_types():
            value = getattr(self, name)
            if value is None and optional:
                continue
            if kind == "dtype":
                try:
                    dtype_name(value)
                    continue
                except TypeError:
                    ok = False
            elif kind == "int":
                ok = type(value) is int or (isinstance(value, numbers.Integral)
                                            and not isinstance(value, (bool, np.bool_)))
            elif kind == "bool":
                ok = isinstance(value, (bool, np.bool_))
            else:
                ok = isinstance(value, str)
            if not ok:
                what = {"dtype": "a dtype", "int": "a whole number", "bool": "True or False"}.get(kind, "a string")
                raise ConfigError(f"{name}: must be {what}{' or None' if optional else ''}, got "
                                  f"{type(value).__name__} {value!r}")
            if kind == "int" and type(value) is not int:
                object.__setattr__(self, name, int(value))

    def _validate(self):
        if self.in_dtype not in INPUT_DTYPES:
            raise ConfigError(f"in_dtype: must be one of {INPUT_DTYPES}, got {self.in_dtype}")
        if self.out_dtype not in OUTPUT_DTYPES:
            raise ConfigError(f"out_dtype: must be one of {OUTPUT_DTYPES}, got {self.out_dtype}")
        if self.a_major not in MAJORS or self.b_major not in MAJORS:
            raise ConfigError(f"a_major/b_major: must be one of {MAJORS}, got {self.a_major!r}/{self.b_major!r}")
        if self.fp8 and (self.a_major, self.b_major) != ("k", "k"):
            raise ConfigError(f"a_major/b_major: {self.in_dtype} operands must both be K-major (wgmma reads 8-bit "
                              f"types only K-major), got A {self.a_major}-major, B {self.b_major}-major")
        if self.schedule not in SCHEDULES:
            raise ConfigError(f"schedule: must be one of {SCHEDULES}, got {self.schedule!r}")
        allowed_m = (64, 128) if self.schedule == "pingpong" else (128, 256)
        if self.block_m not in allowed_m:
            raise ConfigError(f"block_m: the {self.schedule} schedule takes {allowed_m[0]} or {allowed_m[1]} (each "
                              f"consumer one or two m64 wgmma rows), got {self.block_m}")
        if self.block_n % 16 or not 16 <= self.block_n <= 256:
            raise ConfigError(f"block_n: must be a multiple of 16 in 16..256 (the epilogue stores 16-column blocks; "
                              f"a last output panel narrower than 64 columns goes out through its own tensor map), "
                              f"got {self.block_n}")
        if not isinstance(self.splits, int) or not 1 <= self.splits <= MAX_SPLITS:
            raise ConfigError(f"splits: must be an integer in 1..{MAX_SPLITS} (k-ranges per output tile), "
                              f"got {self.splits!r}")
        if self.c_major not in C_MAJORS:
            raise ConfigError(f"c_major: must be one of {C_MAJORS}, got {self.c_major!r}")
        self._validate_stream_k()
        self._validate_k_serpentine()
        if self.c_major == "m" and self.cooperative:
            raise ConfigError("c_major: the transposed (column) store is built for the pingpong schedule, whose "
                              "epilogue writes the whole tile at once; use schedule='pingpong'")
        if (self.splits > 1 or self.c_major == "m") and self.cluster_size > 1:
            raise ConfigError("splits, c_major: split-K and the transposed store run on single CTAs (cluster_m and "
                              "cluster_n 1): they are for problems with too few tiles to pair")
        if self.acc_registers > 192:
            raise ConfigError(f"block_m x block_n: {self.block_m}x{self.block_n} needs {self.acc_registers} fp32 "
                              f"accumulator registers per thread; at most 192 fit beside addresses in 240")
        if self.stages is not None and not 2 <= self.stages <= MAX_STAGES:
            raise ConfigError(f"stages: must be in 2..{MAX_STAGES}, got {self.stages}")
        if not 1 <= self.group_m <= 64:
            raise ConfigError(f"group_m: must be in 1..64, got {self.group_m}")
        if self.cluster_m not in (1, 2):
            raise ConfigError(f"cluster_m: must be 1 or 2, got {self.cluster_m}")
        if self.cluster_m == 2 and self.block_n % 128:
            raise ConfigError(f"cluster_m: 2 splits B's 64-column panels evenly between the pair, so block_n must be "
                              f"a multiple of 128, got {self.block_n}")
        if self.cluster_n not in (1, 2):
            raise ConfigError(f"cluster_n: must be 1 or 2, got {self.cluster_n}")
        if self.cluster_n == 2 and self.block_m % 128:
            raise ConfigError(f"cluster_n: 2 splits A's 64-row panels evenly between the pair, so block_m must be "
                              f"a multiple of 128, got {self.block_m}")
        if self.cluster_m > 1 and self.cluster_n > 1:
            raise ConfigError("cluster_m, cluster_n: a cluster pairs CTAs along M (sharing B) or along N (sharing A), "
                              "not both")
        if self.raster not in RASTERS:
            raise ConfigError(f"raster: must be one of {RASTERS}, got {self.raster!r}")
        self._validate_epilogue()
        self._validate_grouped()
        if self.trace and self.grouped is not None:
            raise ConfigError("trace: the grouped kernel records no timeline (its scheduler and row-predicated store "
                              "have no trace events); trace the dense GEMM of either schedule, split-K included")
        if self._max_stages() < 2:
            raise ConfigError(f"block_m x block_n: {self.block_m}x{self.block_n} leaves room for fewer than 2 stages"
                              + (f" beside the {self.source_bytes} B source tile" if self.source_bytes else ""))

    def _validate_stream_k(self):
        if not self.stream_k:
            return
        refused = [name for name, on in (("schedule='pingpong'", not self.cooperative), ("splits", self.split_k),
                                         ("grouped='k'", self.grouped == "k"), ("block_scale", self.block_scale),
                                         ("source_dtype", self.source_dtype is not None)) if on]
        if refused:
            raise ConfigError(f"stream_k: the stream-K tail runs the cooperative schedule, whose two consumers read "
                              f"every k-tile of a unit, so a unit's k-range may have any length; it does not take "
                              f"{', '.join(refused)} (pingpong's consumers skip each other's k-tiles by a fixed "
                              f"count; split-K already cuts K; the k-grouped, blockwise and source-tile loops "
                              f"assume whole tiles)")

    def _validate_k_serpentine(self):
        if not self.k_serpentine:
            return
        refused = [name for name, on in (("splits", self.split_k), ("grouped", self.grouped is not None),
                                         ("block_scale", self.block_scale)) if on]
        if refused:
            raise ConfigError(f"k_serpentine: the backward k-loop is built for the dense walk of whole tiles, whose "
                              f"consumers never ask which k-tile a stage holds; it does not take {', '.join(refused)} "
                              f"(split-K's units are k-ranges already, the grouped walks set their own k-loops, and "
                              f"the blockwise consumers index their scales by k-tile)")

    def _validate_epilogue(self):
        if self.b_dtype is not None and self.b_dtype != self.in_dtype:
            if not (self.fp8 and self.b_dtype in FP8_DTYPES):
                raise ConfigError(f"b_dtype: A and B may differ only as two fp8 types (e4m3 x e5m2), got "
                                  f"{self.in_dtype} x {self.b_dtype}")
        if self.activation is not None and self.activation not in ACTIVATIONS:
            raise ConfigError(f"activation: must be None or one of {ACTIVATIONS}, got {self.activation!r}")
        if self.bias is not None and self.bias not in BIAS_AXES:
            raise ConfigError(f"bias: must be None or one of {BIAS_AXES}, got {self.bias!r}")
        if self.bias_dtype not in VECTOR_DTYPES:
            raise ConfigError(f"bias_dtype: must be one of {VECTOR_DTYPES}, got {self.bias_dtype}")
        if self.source_dtype is not None:
            if self.source_dtype not in OUTPUT_DTYPES:
                raise ConfigError(f"source_dtype: the added matrix must be one of {OUTPUT_DTYPES}, got "
                                  f"{self.source_dtype}")
            if self.transposed_store or self.split_k:
                raise ConfigError("source_dtype: the source tile is loaded as rows of the output tile, once per "
                                  "tile: not with the transposed store or split-K")
            if self.block_n % self.src_panel_cols:
                raise ConfigError(f"source_dtype: block_n ({self.block_n}) must be a whole number of the source's "
                                  f"{self.src_panel_cols}-column (128-byte) panels")
        if self.fused and self.acc_registers + self.fused_registers > FUSED_REGISTER_BUDGET:
            raise ConfigError(f"block_m x block_n: {self.consumer_m}x{self.block_n} per consumer keeps "
                              f"{self.acc_registers} accumulators, and this epilogue ({self.epilogue_summary()}) "
                              f"{self.fused_registers} more live values: over {FUSED_REGISTER_BUDGET}, it would spill")
        if self.block_scale:
            if not self.fp8:
                raise ConfigError(f"block_scale: blockwise scaling is for fp8 inputs (one k-tile is one "
                                  f"{SCALE_BLOCK}-wide scale block), got {self.in_dtype}")
            if self.block_scale_swapped:
                if self.cooperative or self.grouped or self.consumer_m > SCALE_BLOCK:
                    raise ConfigError(f"block_scale_swapped: the swapped scales are built for pingpong tiles whose "
                                      f"rows lie in one {SCALE_BLOCK}-row block of B's scales, not grouped; got "
                                      f"{self.tag}{', grouped' if self.grouped else ''}")
                if self.bs_swapped_registers > BLOCK_SCALE_ACC_BUDGET:
                    raise ConfigError(f"block_scale_swapped: {self.consumer_m}x{self.block_n} per consumer keeps "
                                      f"{3 * self.acc_registers} registers of sums and two product sets and "
                                      f"{self.bs_scale_sets * self.bs_a_scales} of A's scales (one per column, in "
                                      f"{self.bs_scale_sets} rotating sets): over {BLOCK_SCALE_ACC_BUDGET}, it "
                                      f"would spill (pp64x64t, pp128x32t and narrower fit)")
            elif self.block_n - SCALE_BLOCK > math.gcd(self.block_n, SCALE_BLOCK):
                raise ConfigError(f"block_scale: a tile's columns may span at most two {SCALE_BLOCK}-column blocks "
                                  f"of B's scales (block_n <= {SCALE_BLOCK} + gcd(block_n, {SCALE_BLOCK}): 144, 160 "
                                  f"and 192 do, 176 and 208 do not); got {self.block_n}")
            if self.bs_product_sets == 0:
                raise ConfigError(f"block_scale: {self.consumer_m}x{self.block_n} per consumer needs "
                                  f"{self.acc_registers + self.acc_per_half} accumulator registers (the promoted "
                                  f"sums and one row block's k-tile products); at most {BLOCK_SCALE_ACC_BUDGET}")
            if self.row_scale or self.col_scale:
                raise ConfigError("block_scale: rowwise scales do not combine with blockwise ones (fold them into "
                                  "the block scales)")
        elif self.block_scale_swapped:
            raise ConfigError("block_scale_swapped: only with block_scale")

    def _validate_grouped(self):
        if self.grouped is None:
            for name in ("group_capacity", "group_stream_hint", "group_store_hint", "group_sort"):
                if getattr(self, name) is not None:
                    raise ConfigError(f"{name}: only for a grouped kernel (grouped one of {GROUPED_FORMS})")
            return
        if self.grouped not in GROUPED_FORMS:
            raise ConfigError(f"grouped: must be None or one of {GROUPED_FORMS}, got {self.grouped!r}")
        if self.grouped == "k" and self.group_stream_hint:
            raise ConfigError("group_stream_hint: in the k form every tile row of a group's output reads the same K "
                              "range of B, so no unit is the only reader of what it loads; the hint is for the "
                              "contiguous and masked forms")
        if self.group_sort and self.grouped != "k":
            raise ConfigError("group_sort: only for the k form, whose units' k-loops are their groups' K; the "
                              "contiguous and masked forms' units all run the same k-loop")
        refused = [name for name, on in (("schedule='pingpong'", not self.cooperative),
                                         ("cluster_n", self.cluster_n > 1),
                                         ("splits", self.split_k), ("c_major='m'", self.transposed_store),
                                         ("raster='hilbert'", self.raster == "hilbert"),
                                         ("source_dtype", self.has_source)) if on]
        if refused:
            raise ConfigError(f"grouped: the grouped kernel is the cooperative schedule, on single CTAs or pairs "
                              f"along M (cluster_m 2: both tile rows in one group, sharing its B panel), without a "
                              f"source tile; it does not take {', '.join(refused)}")
        if self.grouped == "k" and (self.block_scale or self.row_scale or self.col_scale or self.bias):
            raise ConfigError("grouped: the k form takes per-tensor scales only (its rows and columns are the "
                              "weights'; no vector or block scale belongs to a group's K range)")
        cap = self.group_capacity
        if cap is not None and not (1 <= cap <= MAX_GROUPS and cap & (cap - 1) == 0):
            raise ConfigError(f"group_capacity: must be a power of two in 1..{MAX_GROUPS} (the kernel's tables hold "
                              f"that many groups), got {cap}")
        if self.grouped == "k" and (self.a_major, self.b_major) != ("mn", "mn"):
            raise ConfigError(f"grouped: the k form reads A and B MN-major (a is (M, total_K) with M contiguous, b "
                              f"(total_K, N) with N contiguous: the activations' and gradients' own layouts), got A "
                              f"{self.a_major}-major, B {self.b_major}-major")
        if self.epi_tail_cols:
            raise ConfigError(f"grouped: block_n must be a whole number of {self.epi_panel_cols}-column output "
                              f"panels (a group's last rows are stored panel by panel), got {self.block_n}")

    def describe(self) -> str:
        return ((f"grouped ({self.grouped}) " if self.grouped else "")
                + f"{self.schedule} GEMM {self.block_m}x{self.block_n}x{self.block_k}, {self.num_stages} stages, "
                + (f"cluster {self.cluster_m}x1 (B multicast), " if self.cluster_m > 1 else "")
                + (f"cluster 1x{self.cluster_n} (A multicast), " if self.cluster_n > 1 else "")
                + (f"raster {self.raster}, " if self.raster != GemmConfig.raster else "")
                + (f"split-K {self.splits}, " if self.split_k else "")
                + ("stream-K tail, " if self.stream_k else "")
                + ("serpentine k-loop, " if self.k_serpentine else "")
                + ("C stored transposed (swap-AB), " if self.transposed_store else "")
                + (f"{self.in_dtype}->{self.out_dtype}" if self.b_type == self.in_dtype else
                   f"{self.in_dtype} x {self.b_type}->{self.out_dtype}")
                + f", A {self.a_major}-major, B {self.b_major}-major"
                + (f", epilogue {self.epilogue_summary()}" if self.fused or self.block_scale else "")
                + (", DEBUG waits" if self.debug else "") + (", traced" if self.trace else ""))

    def epilogue_summary(self) -> str:
        """The fused epilogue as a formula, e.g. 'gelu(alpha*acc*r[m]*c[n] + beta*S(bfloat16) + bias[n])'."""
        v = "acc" + (("[blockwise scaled, swapped]" if self.block_scale_swapped else "[blockwise scaled]")
                     if self.block_scale else "")
        v = ("alpha*" if self.alpha else "") + ("s_a*s_b*" if self.device_scales else "") + v + ("*r[m]" if self.row_scale else "") + ("*c[n]" if self.col_scale else "")
        if self.has_source:
            v += f" + beta*S({self.source_dtype})"
        if self.bias:
            v += f" + bias[{'m' if self.bias == 'row' else 'n'}]({self.bias_dtype})"
        v = f"{self.activation}({v})" if self.activation else v
        return v + (", column vectors read in pairs" if self.col_pairs else "")

    @property
    def kernel_name(self) -> str:
        return "gemm_grouped" if self.grouped else f"gemm_{self.schedule}"

    # --- the tile choice and its short name (bench rows, tune cache, CLI) ---------------------------------------
    @property
    def tile(self) -> Tile:
        """The tile choice in this config: what the selection picks and the tune cache keeps."""
        return Tile.of(self)

    @property
    def tag(self) -> str:
        """The tile choice's tag (Tile.tag); dtypes, layouts, the epilogue, debug and trace are not part of it."""
        return self.tile.tag

    @property
    def tile_tag(self) -> str:
        return self.tile.tile_tag

    @classmethod
    def from_tag(cls, tag: str, **fields) -> GemmConfig:
        """The config a tag names (Tile.from_tag), with `fields` (dtypes, majors, epilogue, ...) added."""
        return cls(**{**Tile.from_tag(tag).fields(), **fields})

    def report_extras(self) -> dict:
        producer_regs, consumer_regs = self.register_split
        return {
            "config": dataclasses.asdict(self),
            "block_k": self.block_k,
            "stages": self.num_stages,
            "smem_bytes": self.smem_bytes,
            "smem_map": {"a": self.smem_a, "b": self.smem_b, "c": self.smem_c, "source": self.smem_source,
                         "full_barriers": self.smem_full, "empty_barriers": self.smem_empty,
                         "source_barriers": self.smem_src_full, "end": self.smem_bytes},
            "stage_bytes": self.stage_bytes,
            "epilogue_bytes": self.epilogue_bytes,
            "threads": self.threads,
            "registers": {"entry": self.entry_registers, "producer_after_setmaxnreg": producer_regs,
                          "consumer_after_setmaxnreg": consumer_regs, "accumulators_per_consumer_thread":
                          self.acc_registers},
        }
