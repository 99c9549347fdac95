"""The fused epilogue and the fp8 scalings on the GPU: D = act(alpha * (scale_a . A) @ (B . scale_b) + beta*C + bias).

Every case: random inputs (never zero), random positive scales, a random C and bias, a NaN-poisoned output, and every
element against ptxgemm.accuracy.fused_bound from a float64 reference of the dequantized inputs. The cases are drawn
by a fixed-seed generator over every feature (input pair, output dtype, scaling, C's dtype, bias axis and dtype,
activation, tile) so that each value of each feature, and each pair of activation and bias, appears; each runs on 3
CTAs so every consumer runs several tiles, the k-loop wraps the ring and the one-slot source buffer changes hands
(asserted on the CPU). Targeted tests add what the matrix cannot: C = out in place, a column-major output (the
swapped problem: rows and columns of the epilogue trade places), a batch, device per-tensor scales, column vectors
read in pairs and one value at a time (odd N, a misaligned vector), an fp8 operand that is not K-major (staged
transposed), and run() on numpy arrays.
"""
from __future__ import annotations

import dataclasses
import itertools
import zlib

import numpy as np
import pytest
from gemm_reference import matmul64, random_matrix

from ptxgemm import accuracy
from ptxgemm.accuracy import DTYPES
from ptxgemm.errors import ConfigError
from ptxgemm.kernel.config import GemmConfig, SCALE_BLOCK
from ptxgemm.kernel.schedule import plan_for
from ptxgemm.plan import epilogue

gpu = pytest.mark.gpu
CTAS = 3
PAIRS = (("bfloat16", "bfloat16"), ("float16", "float16"), ("float8_e4m3fn", "float8_e4m3fn"),
         ("float8_e5m2", "float8_e5m2"), ("float8_e4m3fn", "float8_e5m2"))
OUTS = ("bfloat16", "float16", "float32")
SCALINGS = ("none", "alpha", "tensor", "device", "row", "block")
SOURCES = (None, "bfloat16", "float16", "float32")
BIASES = (None, ("col", "float32"), ("row", "bfloat16"), ("col", "float16"), ("row", "float32"))
ACTIVATIONS = (None, "relu", "gelu", "silu")
TILES = ("pp128x128", "coop128x256", "pp64x128", "coop256x128")
BLOCK_TILES = ("pp64x128", "coop128x128")
SHAPES = ((700, 900, 2100), (333, 520, 2304), (1000, 1100, 2200))


@dataclasses.dataclass(frozen=True)
class Case:
    pair: tuple
    out: str
    scaling: str
    source: str | None
    bias: tuple | None
    activation: str | None
    tile: str
    shape: tuple

    @property
    def fp8(self) -> bool:
        return self.pair[0].startswith("float8")

    def __str__(self):
        bias = "-".join(self.bias) if self.bias else "nobias"
        return (f"{'x'.join(p.replace('float8_', '') for p in self.pair)}-{self.out}-{self.scaling}-"
                f"S{self.source}-{bias}-{self.activation}-{self.tile}-{'x'.join(map(str, self.shape))}")


def _cases() -> list[Case]:
    """Every (activation, bias) pair once, with the other features drawn so each of their values appears too."""
    rng = np.random.default_rng(12)
    out = []
    for i, (act, bias) in enumerate(itertools.product(ACTIVATIONS, BIASES)):
        pair = PAIRS[i % len(PAIRS)]
        scaling = SCALINGS[i % len(SCALINGS)]
        if scaling == "block" and not pair[0].startswith("float8"):
            pair = PAIRS[2 + i % 3]
        tile = BLOCK_TILES[i % 2] if scaling == "block" else TILES[int(rng.integers(len(TILES)))]
        case = Case(pair, OUTS[int(rng.integers(3))], scaling, SOURCES[(i // 2) % len(SOURCES)], bias, act, tile,
                    SHAPES[i % len(SHAPES)])
        if _config(case) is None:   # a source tile too big beside this tile's stages: the 128x128 pingpong holds it
            case = dataclasses.replace(case, tile="pp128x128")
        out.append(case)
    return out


@dataclasses.dataclass(frozen=True)
class _OnDevice:
    """What ptxgemm.plan.epilogue sees of a device array (a numpy array would count as a host scalar when it has one
    element)."""

    shape: tuple
    strides: tuple
    dtype: np.dtype
    ptr: int = 1 << 32   # aligned, as a fresh device allocation is


def _fields(case: Case) -> dict:
    """GemmConfig's epilogue fields for the case, from ptxgemm.plan.epilogue's own parse of device stand-ins."""
    m, n, k = case.shape
    args = {key: _OnDevice(v.shape, v.strides, v.dtype) if isinstance(v, np.ndarray) else v
            for key, v in _arguments(case, np.random.default_rng(0)).items()}
    return epilogue.parse(**args, m=m, n=n, k=k, in_dtype=case.pair[0], batched=False,
                          convert=lambda x, name: x).config_fields(False, n)


def _config(case: Case) -> GemmConfig | None:
    base = GemmConfig.from_tag(case.tile)
    try:
        return dataclasses.replace(base, in_dtype=case.pair[0], b_dtype=case.pair[1], out_dtype=case.out,
                                   a_major="k", b_major="k", **_fields(case))
    except ConfigError:
        return None


def _positive(rng, shape) -> np.ndarray:
    return rng.uniform(0.5, 2.0, size=shape).astype(np.float32)


def _arguments(case: Case, rng) -> dict:
    """The epilogue arguments as numpy arrays and numbers."""
    m, n, k = case.shape
    args = {"activation": case.activation}
    if case.scaling == "alpha":
        args["alpha"] = -0.75
    elif case.scaling == "tensor":
        args["scale_a"], args["scale_b"] = 1.5, 0.625
    elif case.scaling == "device":
        args["scale_a"], args["scale_b"] = _positive(rng, (1,)), _positive(rng, (1,))
    elif case.scaling == "row":
        args["scale_a"], args["scale_b"] = _positive(rng, (m, 1)), _positive(rng, (n,))
    elif case.scaling == "block":
        kb, nb = -(-k // SCALE_BLOCK), -(-n // SCALE_BLOCK)
        args["scale_a"], args["scale_b"] = _positive(rng, (m, kb)), _positive(rng, (kb, nb))
    if case.source:
        args["c"] = random_matrix(rng, m, n, case.source)
        args["beta"] = 0.5
    if case.bias:
        axis, dt = case.bias
        shape = (n,) if axis == "col" else (m, 1)
        args["bias"] = rng.standard_normal(shape).astype(DTYPES[dt])
    return args


def expected(a, b, args: dict, out_dtype: str, block: bool = False):
    """(reference, bound) of the fused result (ptxgemm.accuracy.fused_reference, products on the GPU via torch)."""
    return accuracy.fused_reference(a, b, args, out_dtype, block, matmul64)


CASES = _cases()


def test_the_matrix_covers_every_feature_value():
    assert {c.pair for c in CASES} == set(PAIRS)
    assert {c.out for c in CASES} == set(OUTS)
    assert {c.scaling for c in CASES} == set(SCALINGS)
    assert {c.source for c in CASES} == set(SOURCES)
    assert {(c.activation, c.bias) for c in CASES} == set(itertools.product(ACTIVATIONS, BIASES))
    assert {c.tile for c in CASES} >= set(TILES) | set(BLOCK_TILES)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_case_is_a_valid_config_that_exercises_the_schedule(case):
    cfg = _config(case)
    assert cfg is not None
    s = plan_for(cfg, *case.shape, 132, CTAS)
    assert s.min_tiles_per_consumer >= 2 and s.k_tiles >= 2 * cfg.num_stages, s.describe()


def _device(x):
    import ptxgemm

    return ptxgemm.to_device(x) if isinstance(x, np.ndarray) else x


@gpu
@pytest.mark.parametrize("case", CASES, ids=str)
def test_fused_case(case):
    import ptxgemm

    rng = np.random.default_rng(zlib.crc32(str(case).encode()))
    m, n, k = case.shape
    a = random_matrix(rng, m, k, case.pair[0])
    b = random_matrix(rng, k, n, case.pair[1], order="F")
    args = _arguments(case, rng)
    dargs = {key: _device(v) for key, v in args.items()}
    out = ptxgemm.DeviceArray.empty((m, n), np.dtype(DTYPES[case.out]))
    out.poison()
    plan = ptxgemm.GemmPlan(ptxgemm.to_device(a), ptxgemm.to_device(b), out, GemmConfig.from_tag(case.tile),
                            ctas=CTAS, **dargs)
    assert plan.config == _config(case), plan.config.describe()
    plan.launch()
    ref, bound = expected(a, b, args, case.out, case.scaling == "block")
    verdict = accuracy.check_bound(out.to_numpy(), ref, bound)
    assert verdict.ok, f"{plan.config.describe()}: {verdict}"


@gpu
def test_c_may_be_out_itself_and_a_column_major_out_swaps_rows_and_columns():
    """out = relu(A B + 1.0 * out + bias) in place; then the same into a column-major output, which the planner
    computes as C^T = B^T A^T: the row bias becomes a column bias of the kernel, and its rowwise scales trade too."""
    import ptxgemm

    rng = np.random.default_rng(5)
    m, n, k = 640, 900, 1000
    a, b = random_matrix(rng, m, k, "bfloat16"), random_matrix(rng, k, n, "bfloat16")
    c0 = random_matrix(rng, m, n, "bfloat16")
    bias = rng.standard_normal((m, 1)).astype(np.float32)
    sa, sb = _positive(rng, (m,)), _positive(rng, (1, n))
    out = ptxgemm.to_device(c0)
    ptxgemm.matmul(ptxgemm.to_device(a), ptxgemm.to_device(b), out, c=out, beta=1.0, bias=ptxgemm.to_device(bias),
                   activation="relu")
    args = {"c": c0, "beta": 1.0, "bias": bias, "activation": "relu"}
    ref, bound = expected(a, b, args, "bfloat16")
    verdict = accuracy.check_bound(out.to_numpy(), ref, bound)
    assert verdict.ok, str(verdict)

    fout = ptxgemm.DeviceArray.empty((m, n), np.dtype(DTYPES["float32"]), order="F")   # column-major
    fout.poison()
    plan = ptxgemm.GemmPlan(ptxgemm.to_device(a), ptxgemm.to_device(b), fout, bias=ptxgemm.to_device(bias),
                            scale_a=ptxgemm.to_device(sa), scale_b=ptxgemm.to_device(sb), activation="gelu")
    assert plan.layout.swapped and plan.config.bias == "col" and plan.config.row_scale and plan.config.col_scale
    plan.launch()
    ref, bound = expected(a, b, {"bias": bias, "scale_a": sa, "scale_b": sb, "activation": "gelu"}, "float32")
    verdict = accuracy.check_bound(fout.to_numpy(), ref, bound)
    assert verdict.ok, str(verdict)


@gpu
@pytest.mark.parametrize("n, offset, paired", [(1100, 0, True), (1101, 0, False), (1100, 1, False)],
                         ids=["even-aligned", "odd-n", "misaligned"])
def test_column_vectors_are_read_in_pairs_only_when_every_pair_is_whole_and_aligned(n, offset, paired):
    """The column bias and scales are read two adjacent values per load when N is even and each vector starts on a
    two-element boundary; otherwise one at a time. Both paths, the last partial tile included (N % 256 != 0), and
    vectors `offset` elements into their allocation."""
    import ptxgemm

    rng = np.random.default_rng(8 + n + offset)
    m, k = 700, 2100
    a = random_matrix(rng, m, k, "float8_e4m3fn")
    b = random_matrix(rng, k, n, "float8_e4m3fn", order="F")
    bias = rng.standard_normal(n).astype(DTYPES["bfloat16"])
    sa, sb = _positive(rng, (m, 1)), _positive(rng, (n,))

    def shifted(x):   # x's values `offset` elements into a device allocation
        host = np.concatenate([np.ones(offset, x.dtype), x])
        return ptxgemm.to_device(host).view(x.shape, offset=offset * x.itemsize)

    out = ptxgemm.DeviceArray.empty((m, n), np.dtype(DTYPES["bfloat16"]))
    out.poison()
    plan = ptxgemm.GemmPlan(ptxgemm.to_device(a), ptxgemm.to_device(b), out, GemmConfig.from_tag("coop128x256"),
                            ctas=CTAS, bias=shifted(bias), scale_a=ptxgemm.to_device(sa), scale_b=shifted(sb),
                            activation="gelu")
    assert plan.config.col_pairs is paired, plan.config.describe()
    plan.launch()
    ref, bound = expected(a, b, {"bias": bias, "scale_a": sa, "scale_b": sb, "activation": "gelu"}, "bfloat16")
    verdict = accuracy.check_bound(out.to_numpy(), ref, bound)
    assert verdict.ok, f"{plan.config.describe()}: {verdict}"


@gpu
def test_a_batch_with_a_column_bias_and_a_source():
    """(L, M, K) @ (K, N) + C (L, M, N) + bias (N,): the batch folds into M (nothing is indexed by row)."""
    import ptxgemm

    rng = np.random.default_rng(6)
    L, m, n, k = 3, 300, 520, 800
    a = np.stack([random_matrix(rng, m, k, "float16") for _ in range(L)])
    b = random_matrix(rng, k, n, "float16")
    c = np.stack([random_matrix(rng, m, n, "float32") for _ in range(L)])
    bias = rng.standard_normal((n,)).astype(np.float32)
    out = ptxgemm.run(a, b, c, beta=-1.0, bias=bias, activation="silu", out_dtype=np.float32)
    for i in range(L):
        ref, bound = expected(a[i], b, {"c": c[i], "beta": -1.0, "bias": bias, "activation": "silu"}, "float32")
        verdict = accuracy.check_bound(out[i], ref, bound)
        assert verdict.ok, f"problem {i}: {verdict}"


@gpu
@pytest.mark.parametrize("scaling", ["tensor", "row", "block"])
def test_run_scales_fp8_with_an_mn_major_operand_staged_transposed(scaling):
    """B row-major (N contiguous) is not what fp8 wgmma reads: it is staged K-major (a transposing copy) first."""
    import ptxgemm

    rng = np.random.default_rng(7)
    m, n, k = 1000, 1500, 2000
    a = random_matrix(rng, m, k, "float8_e4m3fn")
    b = random_matrix(rng, k, n, "float8_e4m3fn")   # row-major: MN-major
    case = Case(("float8_e4m3fn",) * 2, "bfloat16", scaling, None, None, None, "pp64x128", (m, n, k))
    args = _arguments(case, rng)
    out = ptxgemm.run(a, b, **args)
    ref, bound = expected(a, b, args, "bfloat16", scaling == "block")
    verdict = accuracy.check_bound(out, ref, bound)
    assert verdict.ok, str(verdict)
