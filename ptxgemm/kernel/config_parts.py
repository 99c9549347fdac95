"""GemmConfig's parts besides the tile (kernel/tile.py): the operands, the fused epilogue, the grouped kernel's
options and the build switches, each a frozen dataclass that checks the rules reading it alone. The rules that tie
parts together are GemmConfig's (kernel/config.py).

Operand layouts ("majors"): an operand is K-major when K is its contiguous dimension
(A row-major (M, K); B as an (N, K) row-major array, i.e. a Fortran-ordered (K, N)), MN-major otherwise
(B row-major (K, N): what numpy's C order gives you). wgmma reads either through its transpose bits.
"""
from __future__ import annotations

import dataclasses

from ..errors import ConfigError
from .hardware import MAX_GROUPS
from .part import Part

INPUT_DTYPES = ("bfloat16", "float16", "float8_e4m3fn", "float8_e5m2")
# wgmma's name for each input type. The 8-bit ones read both operands K-major only: wgmma has no transpose for them
# (PTX ISA, wgmma.mma_async: imm-trans-a/b exist for .f16/.bf16 alone).
WGMMA_TYPES = {"bfloat16": "bf16", "float16": "f16", "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}
FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2")
OUTPUT_DTYPES = ("bfloat16", "float16", "float32")
MAJORS = ("k", "mn")

# --- the fused epilogue (ptxgemm/kernel/templates/fusion.ptx.j2): D = act(alpha * r[m] * c[n] * acc + beta * S + bias) ---
ACTIVATIONS = ("relu", "gelu", "silu")      # gelu: the tanh form; None: no activation
BIAS_AXES = ("row", "col")                  # a vector over the kernel's M (one value per row) or N (per column)
VECTOR_DTYPES = ("float32", "bfloat16", "float16")   # bias vectors; scale vectors are float32

# Grouped GEMM (gemm_grouped.ptx.j2): the forms whose groups run along M. "contiguous": group g is rows
# [offs[g-1], offs[g]) of one (total_M, K) A and of C; "masked": rows [g*M_max, g*M_max + masked_m[g]) of A and C
# seen as (G*M_max, K) and (G*M_max, N). B is one matrix per group either way; the counts are read on the device.
# "k": group g is K range [offs[g-1], offs[g]) of one (M, total_K) A and (total_K, N) B, into C's matrix g; both
# operands MN-major, so the K rows past a group's end in its last k-tile are whole shared-memory lines to zero.
GROUPED_FORMS = ("contiguous", "masked", "k")


def default_out_dtype(in_dtype: str) -> str:
    """The output dtype when none is asked for: the input's own for 16-bit inputs, bfloat16 for fp8 (the kernel
    writes no 8-bit output; bfloat16 keeps fp8's range)."""
    return "bfloat16" if in_dtype in FP8_DTYPES else in_dtype


@dataclasses.dataclass(frozen=True)
class Operands(Part):
    """The operands' dtypes and layouts (the arrays decide them, after any swap)."""

    DTYPE_FIELDS = ("in_dtype", "out_dtype", "b_dtype")

    in_dtype: str = "bfloat16"
    out_dtype: str = "bfloat16"
    b_dtype: str | None = None    # B's dtype where it differs from A's (fp8 only: e4m3 x e5m2); None: in_dtype
    a_major: str = "k"
    b_major: str = "mn"

    def __post_init__(self):
        self.check_types()
        if self.b_dtype == self.in_dtype:   # one spelling of "same", so that equal configs are equal
            object.__setattr__(self, "b_dtype", None)
        if self.in_dtype not in INPUT_DTYPES:
            raise ConfigError(f"in_dtype: must be one of {INPUT_DTYPES}, got {self.in_dtype}")
        if self.out_dtype not in OUTPUT_DTYPES:
            raise ConfigError(f"out_dtype: must be one of {OUTPUT_DTYPES}, got {self.out_dtype}")
        if self.a_major not in MAJORS or self.b_major not in MAJORS:
            raise ConfigError(f"a_major/b_major: must be one of {MAJORS}, got {self.a_major!r}/{self.b_major!r}")
        fp8 = self.in_dtype in FP8_DTYPES
        if fp8 and (self.a_major, self.b_major) != ("k", "k"):
            raise ConfigError(f"a_major/b_major: {self.in_dtype} operands must both be K-major (wgmma reads 8-bit "
                              f"types only K-major), got A {self.a_major}-major, B {self.b_major}-major")
        if self.b_dtype is not None and not (fp8 and self.b_dtype in FP8_DTYPES):
            raise ConfigError(f"b_dtype: A and B may differ only as two fp8 types (e4m3 x e5m2), got "
                              f"{self.in_dtype} x {self.b_dtype}")


@dataclasses.dataclass(frozen=True)
class Fusion(Part):
    """The fused epilogue, in the kernel's frame (rows are its M, after any swap); all off: the plain GEMM."""

    DTYPE_FIELDS = ("source_dtype", "bias_dtype")

    alpha: bool = False           # multiply by the fp32 kernel parameter alpha (alpha x per-tensor scales)
    device_scales: bool = False   # ... and by two per-tensor fp32 scales read on the device, once per consumer
    row_scale: bool = False       # multiply row m by an fp32 vector's element m (rowwise scale of A)
    col_scale: bool = False       # multiply column n by an fp32 vector's element n (rowwise scale of B)
    block_scale: bool = False     # fp8 blockwise scales: each k-tile's products promoted into the fp32 accumulators
    block_scale_swapped: bool = False  # ... of a swapped problem (C^T = B^T A^T): the kernel's rows are the caller's
                                       # N, so B's 128x128 scales index its rows and A's 1x128 ones its columns
    block_scale_a_mn: bool = False     # ... with A's scales M-major (a row's next k-block one column stride on, the
                                       # rows adjacent: DeepGEMM's and torch's layout): the producer loads each
                                       # stage's block_m of them with one TMA box beside the operands
    source_dtype: str | None = None   # add beta x S, S an M x N matrix of this dtype loaded by TMA (None: no S)
    bias: str | None = None       # BIAS_AXES: add a vector along rows ("row": one value per row) or columns
    bias_dtype: str = "float32"   # VECTOR_DTYPES: the bias vector's dtype
    activation: str | None = None  # ACTIVATIONS, after the bias, before the output cast
    col_pairs: bool = False       # column vectors read two adjacent values per load: the host saw each aligned to two
    #                               elements and N even (Epilogue.config_fields); off for a config without one

    def __post_init__(self):
        self.check_types()
        # one spelling of "no column vector to pair" (the plain GEMM's PTX stays byte-identical)
        object.__setattr__(self, "col_pairs", bool(self.col_pairs and (self.col_scale or self.bias == "col")))
        if self.activation is not None and self.activation not in ACTIVATIONS:
            raise ConfigError(f"activation: must be None or one of {ACTIVATIONS}, got {self.activation!r}")
        if self.bias is not None and self.bias not in BIAS_AXES:
            raise ConfigError(f"bias: must be None or one of {BIAS_AXES}, got {self.bias!r}")
        if self.bias_dtype not in VECTOR_DTYPES:
            raise ConfigError(f"bias_dtype: must be one of {VECTOR_DTYPES}, got {self.bias_dtype}")
        if self.source_dtype is not None and self.source_dtype not in OUTPUT_DTYPES:
            raise ConfigError(f"source_dtype: the added matrix must be one of {OUTPUT_DTYPES}, got "
                              f"{self.source_dtype}")
        if self.block_scale and (self.row_scale or self.col_scale):
            raise ConfigError("block_scale: rowwise scales do not combine with blockwise ones (fold them into "
                              "the block scales)")
        if self.block_scale_swapped and not self.block_scale:
            raise ConfigError("block_scale_swapped: only with block_scale")
        if self.block_scale_a_mn and not self.block_scale:
            raise ConfigError("block_scale_a_mn: only with block_scale")


_GROUP_OPTIONS = ("group_capacity", "group_stream_hint", "group_store_hint", "group_sort")


@dataclasses.dataclass(frozen=True)
class GroupedOptions(Part):
    """The grouped kernel: its form (None: the dense GEMM) and the options that only it takes."""

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
        self.check_types()
        if self.grouped is None:
            for name in _GROUP_OPTIONS:
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
        cap = self.group_capacity
        if cap is not None and not (1 <= cap <= MAX_GROUPS and cap & (cap - 1) == 0):
            raise ConfigError(f"group_capacity: must be a power of two in 1..{MAX_GROUPS} (the kernel's tables hold "
                              f"that many groups), got {cap}")


@dataclasses.dataclass(frozen=True)
class Instrumentation(Part):
    """The build switches that change what the kernel reports, not what it computes."""

    debug: bool = False           # bounded barrier waits that report the stalled barrier (ptxgemm.runtime.debug)
    debug_timeout_ns: int = 2_000_000_000
    trace: bool = False           # record a per-warpgroup timeline into a device buffer (ptxgemm.tools.trace); dense only

    def __post_init__(self):
        self.check_types()
        if self.debug_timeout_ns <= 0:
            raise ConfigError(f"debug_timeout_ns: must be positive (each debug wait compares the unsigned time it "
                              f"has waited with it), got {self.debug_timeout_ns}")
