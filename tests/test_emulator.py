"""The plan emulator (ptxgemm.tools.emulator) and the wrong answers an outside fuzzer found (issue 22), on the CPU.

Each regression below failed before its fix: the emulator runs the library's own planning on host memory, so a plan
that feeds the kernel the wrong dtype, drops the epilogue or refuses a legal input shows here without a GPU. The
GPU side of the same cases is tests/test_fuzz_gpu.py.
"""
from __future__ import annotations

import re

import ml_dtypes
import zlib

import numpy as np
import pytest

import ptxgemm
from ptxgemm.accuracy import DTYPES, activation64
from ptxgemm.errors import ConfigError
from ptxgemm.kernel.config import GemmConfig
from ptxgemm.plan import epilogue
from ptxgemm.plan.call import plan_call
from ptxgemm.toolchain.kernels import render_gemm
from ptxgemm.tools import emulator

E4M3, E5M2, BF16 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.bfloat16


def _normal(rng, shape, dtype):
    x = rng.standard_normal(shape, dtype=np.float32).astype(dtype)
    x[x == 0] = 1
    return x


def _close(got, want, rel=2 ** -7):
    got = np.asarray(got, np.float64)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=rel, atol=rel * (1 + np.abs(want).max(initial=0)))


# --- the reported wrong result: mixed fp8 on a swapped problem ---------------------------------------------------

def _mixed_swapped_case(rng, rows: int = 777):
    """a e4m3 (rows x 511, F-order) @ b e5m2 (511 x 1, rows reversed): the output is one column, computed as
    C^T = B^T A^T when its one line is whole 16-byte chunks, so the kernel's A is the caller's b."""
    a = np.asfortranarray(_normal(rng, (rows, 511), E4M3))
    b = _normal(rng, (511, 1), E5M2)[::-1]
    return a, b


def test_a_swapped_mixed_fp8_problem_gives_the_kernel_each_operand_its_own_dtype():
    rng = np.random.default_rng(22)
    a, b = _mixed_swapped_case(rng, rows=776)   # 776 bf16: one line of whole chunks, so in place, swapped
    out = emulator.HostArray.empty((776, 1), "bfloat16")
    planned = plan_call(emulator.HostArray.of(a), emulator.HostArray.of(b), out, None, epilogue.PLAIN,
                             device=ptxgemm.select.cost_model.DEFAULT_DEVICE, spill_check=lambda cfg: False)
    assert planned.layout.swapped
    assert (planned.config.in_dtype, planned.config.b_type) == ("float8_e5m2", "float8_e4m3fn")


@pytest.mark.parametrize("entry", ["run", "matmul"])
def test_the_reported_mixed_fp8_case_is_right(entry):
    rng = np.random.default_rng(7)
    a, b = _mixed_swapped_case(rng)
    want = 1.35 * 0.24 * (a.astype(np.float64) @ b.astype(np.float64))
    if entry == "run":
        got = emulator.run(a, b, scale_a=1.35, scale_b=0.24, out_dtype="bfloat16")
    else:
        got = emulator.matmul(a, b, scale_a=1.35, scale_b=0.24, out_dtype="bfloat16")
    _close(got, want, rel=2 ** -6)


# --- K = 0 under an epilogue ------------------------------------------------------------------------------------

K0_CASES = {   # the three the outside fuzzer found: act(alpha * 0 + beta * c + bias)
    "c+col bias+silu": dict(in_dtype="bfloat16", c=True, bias="col", activation="silu"),
    "row bias+silu": dict(in_dtype="bfloat16", c=False, bias="row", activation="silu"),
    "c+bias+silu fp16": dict(in_dtype="float16", c=True, bias="col", activation="silu"),
    "c only, batched, fp8 scales": dict(in_dtype="float8_e4m3fn", c=True, bias=None, activation="gelu", batch=3),
}


def _k0_case(rng, in_dtype, c, bias, activation, batch=None):
    lead = (batch,) if batch else ()
    a, b = np.ones(lead + (37, 0), DTYPES[in_dtype]), np.ones((0, 45), DTYPES[in_dtype])
    kw = dict(activation=activation, alpha=1.5)
    want = np.zeros(lead + (37, 45))
    if c:
        kw["c"], kw["beta"] = _normal(rng, lead + (37, 45), np.float32), 0.75
        want = want + 0.75 * kw["c"]
    if bias == "col":
        kw["bias"] = _normal(rng, (45,), np.float32)
        want = want + kw["bias"]
    elif bias == "row":
        kw["bias"] = _normal(rng, (37, 1), BF16)
        want = want + kw["bias"].astype(np.float64)
    if in_dtype.startswith("float8"):
        kw["scale_a"], kw["scale_b"] = np.float32(3.0), np.array([0.5], np.float32)
    return a, b, kw, activation64(activation, want)


@pytest.mark.parametrize("name", list(K0_CASES))
def test_k0_under_an_epilogue_is_the_epilogue_of_zero(name):
    rng = np.random.default_rng(0)
    a, b, kw, want = _k0_case(rng, **K0_CASES[name])
    _close(emulator.run(a, b, **kw), want)
    out = np.full(want.shape, np.nan, np.float32)
    _close(emulator.matmul(a, b, out, **kw), want)


def test_k0_plans_a_kernel_on_zero_operands_only_when_something_is_added():
    rng = np.random.default_rng(1)
    a, b, kw, _ = _k0_case(rng, "bfloat16", True, "col", "silu")
    plan = emulator.GemmPlan(a, b, np.empty((37, 45), BF16), **kw)
    assert plan.layout.zero_k and plan.layout.k == 1 and plan.config is not None
    assert not plan.config.alpha   # the product's factors are gone with the product
    plain = emulator.GemmPlan(a, b, np.empty((37, 45), BF16), activation="relu", alpha=2.0)
    assert plain.config is None and plain.layout.fill   # act(0) = 0 for every activation: zeros, no kernel


# --- empty problems under blockwise scales ------------------------------------------------------------------------

@pytest.mark.parametrize("m,n,k", [(0, 256, 512), (64, 0, 512), (64, 256, 0), (0, 0, 0)])
def test_an_empty_blockwise_problem_is_accepted(m, n, k):
    """Tables of shape (0, 4), (16, 0), ...: the strides of an empty array mean nothing, whatever a framework
    reports for them."""
    rng = np.random.default_rng(2)
    a, b = _normal(rng, (m, k), E4M3), np.ascontiguousarray(_normal(rng, (n, k), E4M3).T)
    kb, nb = -(-k // 128), -(-n // 128)
    sa = np.lib.stride_tricks.as_strided(np.ones(1, np.float32), (m, kb), (0, 0))   # strides (0, 0), as reported
    sb = np.lib.stride_tricks.as_strided(np.ones(1, np.float32), (kb, nb), (0, 0))
    if m * kb:
        sa = np.ones((m, kb), np.float32)
    if kb * nb:
        sb = np.ones((kb, nb), np.float32)
    got = emulator.run(a, b, scale_a=sa, scale_b=sb)
    assert got.shape == (m, n) and not np.any(got.astype(np.float32))


# --- legal inputs that used to be refused ---------------------------------------------------------------------

def test_one_c_broadcast_over_the_batch_is_staged_per_problem():
    rng = np.random.default_rng(3)
    a, b = _normal(rng, (3, 40, 24), BF16), _normal(rng, (3, 24, 56), BF16)
    c = _normal(rng, (40, 56), np.float32)
    c3 = np.broadcast_to(c, (3, 40, 56))    # numpy's rule for c: the result's shape, any strides (stride 0 here)
    want = a.astype(np.float64) @ b.astype(np.float64) + 2.0 * c
    _close(emulator.run(a, b, c3, beta=2.0), want)


def test_blockwise_scales_with_a_column_major_out_stage_the_output():
    rng = np.random.default_rng(4)
    m, n, k = 200, 136, 300
    a, b = _normal(rng, (m, k), E4M3), np.ascontiguousarray(_normal(rng, (n, k), E4M3).T)
    sa = rng.uniform(0.5, 2, (m, 3)).astype(np.float32)
    sb = rng.uniform(0.5, 2, (3, 2)).astype(np.float32)
    out = np.full((n, m), np.nan, np.float32).T     # column-major
    a64 = a.astype(np.float64) * np.repeat(sa, 128, axis=1)[:, :k]
    b64 = b.astype(np.float64) * np.repeat(np.repeat(sb, 128, axis=0), 128, axis=1)[:k, :n]
    emulator.matmul(a, b, out, scale_a=sa, scale_b=sb)
    _close(out, a64 @ b64, rel=2 ** -8)


@pytest.mark.parametrize("tag, m, n, k, order", [
    ("pp64x32t", 40, 328, 300, "C"),      # swapped: rows the caller's N over three 128-blocks, a partial last one
    ("pp128x16tk2", 9, 200, 520, "C"),     # swapped, split-K: the second split's k-blocks offset
    ("pp64x64t", 72, 136, 256, "F"),       # a column-major out is computed as given: the scales keep their axes
])
def test_blockwise_swap_ab_reads_the_scale_tables_with_their_axes_traded(tag, m, n, k, order):
    """The swap-AB tiles under blockwise scales: a row-major out is computed as C^T = B^T A^T, so the kernel's rows
    are the caller's N and take B's 128x128 scales, its columns the caller's M and A's 1x128 ones
    (GemmConfig.block_scale_swapped); a column-major out keeps the problem, and the flag off."""
    rng = np.random.default_rng(zlib.crc32(tag.encode()))
    a, b = _normal(rng, (m, k), E4M3), np.ascontiguousarray(_normal(rng, (n, k), E4M3).T)
    kb, nb = -(-k // 128), -(-n // 128)
    sa = rng.uniform(0.5, 2, (m, kb)).astype(np.float32)
    sb = rng.uniform(0.5, 2, (kb, nb)).astype(np.float32)
    a64 = a.astype(np.float64) * np.repeat(sa, 128, axis=1)[:, :k]
    b64 = b.astype(np.float64) * np.repeat(np.repeat(sb, 128, axis=0), 128, axis=1)[:k, :n]
    out = np.full((m, n), np.nan, np.float32) if order == "C" else np.full((n, m), np.nan, np.float32).T
    plan = emulator.GemmPlan(a, b, out, GemmConfig.from_tag(tag), scale_a=sa, scale_b=sb)
    assert plan.config.transposed_store and plan.config.block_scale_swapped == (order == "C")
    assert plan.layout.swapped == (order == "C")
    plan.launch()
    _close(out, a64 @ b64, rel=2 ** -8)


def test_a_selected_decode_blockwise_problem_runs_swapped():
    """With no config, a decode-sized blockwise problem is selected swap-AB (pp64x32t), planned swapped with the
    scale tables' axes traded, and computed right."""
    rng = np.random.default_rng(32)
    m, n, k = 24, 1032, 640
    a, b = _normal(rng, (m, k), E4M3), np.ascontiguousarray(_normal(rng, (n, k), E4M3).T)
    sa = rng.uniform(0.5, 2, (m, -(-k // 128))).astype(np.float32)
    sb = rng.uniform(0.5, 2, (-(-k // 128), -(-n // 128))).astype(np.float32)
    a64 = a.astype(np.float64) * np.repeat(sa, 128, axis=1)[:, :k]
    b64 = b.astype(np.float64) * np.repeat(np.repeat(sb, 128, axis=0), 128, axis=1)[:k, :n]
    out = np.full((m, n), np.nan, np.float32)
    plan = emulator.GemmPlan(a, b, out, None, scale_a=sa, scale_b=sb)
    assert plan.config.tile_tag == "pp64x32t" and plan.config.block_scale_swapped and plan.layout.swapped
    plan.launch()
    _close(out, a64 @ b64, rel=2 ** -8)


# --- bad input: a ConfigError naming the argument, before the GPU -----------------------------------------------

@pytest.fixture
def no_gpu_allowed(monkeypatch):
    """Fail the test if anything asks for the GPU."""
    from ptxgemm.runtime import driver

    def refuse(*_a, **_k):
        raise AssertionError("the GPU was asked for before the input was checked")
    monkeypatch.setattr(driver, "require_sm90", refuse)


@pytest.mark.parametrize("field,value", [("block_n", "128"), ("block_m", 128.0), ("stages", True), ("splits", "2"),
                                         ("debug", 1), ("schedule", 3), ("in_dtype", "float99"),
                                         ("activation", 5), ("cluster_m", None)])
def test_a_config_field_of_the_wrong_type_is_named(field, value):
    with pytest.raises(ConfigError, match=rf"^{field}: must be "):
        GemmConfig(**{field: value})


@pytest.mark.parametrize("out_dtype", ["float99", 3, "int8", object()])
def test_an_unknown_out_dtype_is_named(out_dtype, no_gpu_allowed):
    a = np.ones((4, 8), BF16)
    with pytest.raises(ConfigError, match=r"^out_dtype: "):
        ptxgemm.run(a, a.T.copy(), out_dtype=out_dtype)


@pytest.mark.parametrize("config", ["pp128x128", 3, {"block_m": 128}])
def test_a_config_that_is_no_gemmconfig_is_named_before_the_gpu(config, no_gpu_allowed):
    a = np.ones((4, 8), BF16)
    with pytest.raises(ConfigError, match=r"^config: must be a ptxgemm.GemmConfig"):
        ptxgemm.run(a, a.T.copy(), config=config)
    with pytest.raises(ConfigError, match=r"^config: must be a ptxgemm.GemmConfig"):
        ptxgemm.GemmPlan(ptxgemm.DeviceArray(1 << 20, (4, 8), BF16), ptxgemm.DeviceArray(1 << 21, (8, 4), BF16),
                         ptxgemm.DeviceArray(1 << 22, (4, 4), BF16), config)


# --- the emulator against the kernel's own parameter list ------------------------------------------------------

class _Vec:
    """A device vector's header: an address and a dtype is all the parameters carry."""

    def __init__(self, ptr, dtype="float32", shape=(1,)):
        self.ptr, self.dtype, self.shape, self.strides = ptr, np.dtype(dtype), shape, (np.dtype(dtype).itemsize,)


EPILOGUES = {
    "alpha": epilogue.Epilogue(alpha=2.0),
    "device scales": epilogue.Epilogue(device_a=_Vec(256), device_b=None),
    "source+bias+gelu": epilogue.Epilogue(alpha=0.5, beta=2.0, source=_Vec(512, "bfloat16"), bias=_Vec(1024),
                                          bias_axis="col", activation="gelu"),
    "rowwise+row bias": epilogue.Epilogue(row_scale=_Vec(256), col_scale=_Vec(512), bias=_Vec(768, "float16"),
                                          bias_axis="row"),
    "blockwise": epilogue.Epilogue(block_a=_Vec(256), block_b=_Vec(512), activation="relu"),
}


@pytest.mark.parametrize("name", list(EPILOGUES))
@pytest.mark.parametrize("swapped", [False, True])
def test_the_epilogue_parameters_are_the_templates_in_name_and_order(name, swapped):
    """Epilogue.kernel_params (which the emulator reads by name and GemmPlan packs by position) against the .param
    lines of the rendered kernel between the tensor maps and param_m."""
    epi = EPILOGUES[name]
    fp8 = epi.block_a is not None
    tile = {"block_n": 64, "c_major": "m"} if fp8 and swapped else {"block_n": 128}   # swapped blockwise: swap-AB tiles
    cfg = GemmConfig(**tile, block_m=64 if fp8 else 128, in_dtype="float8_e4m3fn" if fp8 else "bfloat16",
                     a_major="k", b_major="k" if fp8 else "mn", **epi.config_fields(swapped, 256))
    assert cfg.block_scale_swapped == (fp8 and swapped)
    ptx = render_gemm(cfg)
    declared = re.findall(r"\.param \.(?:f32|u32|u64) (param_\w+)", ptx)
    declared = declared[:declared.index("param_m")]
    assert [n for n, _ in epi.kernel_params(swapped, 512)] == declared


def test_a_one_element_block_table_beside_a_real_one_is_blockwise():
    """M = 1 and K <= 128: scale_a's table (1, 1) has one element, which alone reads as a per-tensor scale; beside
    a (1, 2) table for B it is blockwise (found by the fuzzer: refused as 'needs both tables')."""
    rng = np.random.default_rng(5)
    a, b = _normal(rng, (1, 1), E4M3), _normal(rng, (1, 129), E4M3)
    sa, sb = np.float32([[2.0]]), np.float32([[0.5, 4.0]])
    want = a.astype(np.float64) @ b.astype(np.float64) * 2.0 * np.repeat(sb, 128, axis=1)[:, :129]
    _close(emulator.run(a, b, scale_a=sa, scale_b=sb), want)


@pytest.mark.parametrize("bias_shape", [(1,), (1, 1)])
def test_a_column_vector_of_a_swapped_batch_stops_the_fold(bias_shape):
    """(8, 1) @ (5, 1, 1) with a column bias: the column output is computed as C^T = B^T A^T, where the caller's
    columns are the kernel's rows, so the batch must not fold into the kernel's M (the bias, one value, was read at
    five rows: out of bounds, found by the fuzzer)."""
    rng = np.random.default_rng(6)
    a, b = _normal(rng, (8, 1), BF16), _normal(rng, (5, 1, 1), BF16)
    bias = _normal(rng, bias_shape, np.float32)
    plan = emulator.GemmPlan(a, b, np.empty((5, 8, 1), BF16), bias=bias)
    assert plan.layout.swapped and not plan.layout.folded
    want = a.astype(np.float64) @ b.astype(np.float64) + bias.reshape(1, 1).astype(np.float64)
    _close(emulator.run(a, b, bias=bias), want)


def test_the_emulator_refuses_to_read_outside_the_launchs_allocations():
    memory = emulator.Memory([emulator.HostArray.empty((4,), np.float32)])
    start = memory.ranges[0][0]
    memory.at(start, (4,), (4,), np.float32, "inside")
    with pytest.raises(AssertionError, match="outside every allocation"):
        memory.at(start, (5,), (4,), np.float32, "one past")
