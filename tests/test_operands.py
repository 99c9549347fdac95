"""The launch plans of ptxgemm.plan.operands, run on host memory: every staging copy, the kernel's rank-3 TMA reads
and writes (zeros past an extent, as TMA fills them) and the copy-out, against numpy's `a @ b`.

Device addresses are host addresses here: the plan is pure arithmetic on pointers and strides, so executing it on
host memory checks every index the GPU path will use, for a thousand random layouts, without a GPU.
"""
from __future__ import annotations

import ctypes

import ml_dtypes  # noqa: F401
import numpy as np
import pytest

from ptxgemm.accuracy import DTYPES
from ptxgemm.errors import ConfigError
from ptxgemm.plan import operands
from ptxgemm.tools import cases


def _span(shape, strides, itemsize):
    lo = sum((e - 1) * s for e, s in zip(shape, strides) if s < 0 and e > 0)
    hi = sum((e - 1) * s for e, s in zip(shape, strides) if s > 0 and e > 0)
    return lo, hi + itemsize


def _at(ptr, shape, strides, dtype):
    """A numpy view of host memory at `ptr` with byte strides (negative ones included)."""
    dtype = np.dtype(dtype)
    lo, hi = _span(shape, strides, dtype.itemsize)
    raw = (ctypes.c_uint8 * (hi - lo)).from_address(ptr + lo)
    return np.ndarray(shape, dtype, buffer=raw, offset=-lo, strides=strides)


def _run_copies(copies, dtype):
    for c in copies:
        assert all(s >= 0 for s in c.dst_strides), c  # relayout's rule
        dst = _at(c.dst_ptr, c.shape, c.dst_strides, dtype)
        if c.src_ptr == 0:
            dst[...] = 0
        else:
            dst[...] = _at(c.src_ptr, c.shape, c.src_strides, dtype)


def _tma_matrix(op, problem, dtype, rows, cols):
    """What the kernel's map reads for problem `problem`: rows x cols of the operand (values past the map's
    extents would be zeros; the plan's extents equal the problem's, so none are read)."""
    v, p = op.view, op.place
    assert p.lead % 16 == 0 and p.batch % 16 == 0 and v.ptr % 16 == 0
    dims = p.map_dims(v)
    z = problem if v.count > 1 else 0
    assert z < dims[2]
    item = np.dtype(dtype).itemsize
    if p.inner == "cols":
        assert (v.rows, v.cols) == (rows, cols)
        return _at(v.ptr + z * p.batch, (rows, cols), (p.lead, item), dtype)
    assert (v.rows, v.cols) == (rows, cols)
    return _at(v.ptr + z * p.batch, (rows, cols), (item, p.lead), dtype)


def execute(plan, a, b, out, in_dtype, out_dtype, transposed_store=False):
    """Run `plan` on host memory: staging buffers, copies in, the kernel per problem, copies out. The kernel stores
    rows of its C, or columns with `transposed_store` (GemmConfig.c_major "m")."""
    keep = []
    buffers = {}
    for op in plan.operands:
        if op.staged:
            buf = np.full(op.staging.nbytes + 64, 0xFF, np.uint8)  # poisoned padding
            ptr = buf.ctypes.data
            ptr += (-ptr) % 16
            keep.append(buf)
            buffers[op.name] = ptr
    if plan.fill:
        _run_copies(plan.fill, out_dtype)
        return
    if plan.a is None:
        return
    bound, ins, outs = operands.bind(plan, buffers)
    _run_copies(ins, in_dtype)
    m, n, k = bound.m, bound.n, bound.k
    for problem in range(bound.batches):
        am = _tma_matrix(bound.a, problem, in_dtype, m, k).astype(np.float64)
        bm = _tma_matrix(bound.b, problem, in_dtype, k, n).astype(np.float64)
        assert bound.c.place.inner == ("rows" if transposed_store else "cols")  # the only order the kernel stores
        c = _tma_matrix(bound.c, problem, out_dtype, m, n)
        c[...] = (am @ bm).astype(DTYPES[out_dtype])
    _run_copies(outs, out_dtype)


def _plan(a, b, out, transposed_store=False):
    return operands.plan_matmul(a.shape, a.strides, a.ctypes.data, b.shape, b.strides, b.ctypes.data,
                                a.itemsize, out.itemsize, out.shape, out.strides, out.ctypes.data, transposed_store)


@pytest.mark.parametrize("transposed_store", (False, True), ids=("rows", "transposed"))
@pytest.mark.parametrize("seed", range(10))
def test_random_plans_compute_numpy_matmul(seed, transposed_store):
    rng = np.random.default_rng(seed)
    kinds = {"staged": 0, "swapped": 0, "folded": 0, "batched": 0, "empty": 0, "zeros": 0}
    for _ in range(100):
        case = cases.random_case(rng)
        a, b = case.a, case.b
        expect = (a.astype(np.float64) @ b.astype(np.float64)).astype(DTYPES[case.out_dtype])
        out = cases.make_out(rng, expect.shape, case.out_dtype, case.out_layout)
        plan = _plan(a, b, out, transposed_store)
        execute(plan, a, b, out, a.dtype.name, case.out_dtype, transposed_store)
        np.testing.assert_array_equal(out, expect, err_msg=f"{case.note}: {plan.describe()}")
        kinds["staged"] += any(op.staged for op in plan.operands)
        kinds["swapped"] += plan.swapped
        kinds["folded"] += plan.folded
        kinds["batched"] += plan.batches > 1
        kinds["empty"] += plan.a is None and not plan.fill
        kinds["zeros"] += bool(plan.fill)
    if transposed_store:  # a fold stacks rows of C: it needs the row store
        assert kinds.pop("folded") == 0
    assert all(v > 0 for v in kinds.values()), kinds  # the generator reaches every path


def _c(shape, dtype="bfloat16"):
    return np.ones(shape, DTYPES[dtype])


def test_aligned_c_order_runs_in_place():
    a, b = _c((256, 128)), _c((128, 64))
    plan = _plan(a, b, _c((256, 64)))
    assert not any(op.staged for op in plan.operands)
    assert (plan.a.place.inner, plan.b.place.inner, plan.c.place.inner) == ("cols", "cols", "cols")


def test_unaligned_k_stages_a_with_padded_lines():
    a, b = _c((100, 1001)), _c((1001, 64))
    plan = _plan(a, b, _c((100, 64)))
    assert plan.a.staged and plan.a.staging.lead == 2016 and not plan.b.staged
    assert plan.a.place.inner == "cols"


def _aligned_view(base: np.ndarray, index) -> np.ndarray:
    """base[index] with the view's element 0 on a 256-byte boundary (a device allocation's, as a span upload has)."""
    raw = np.zeros(base.nbytes + 512, np.uint8)
    start = (-raw.ctypes.data) % 256
    view_offset = base[index].__array_interface__["data"][0] - base.__array_interface__["data"][0]
    moved = raw[start - view_offset % 256 + 256:][:base.nbytes].view(base.dtype).reshape(base.shape)
    return moved[index]


@pytest.mark.parametrize("cols, staged", [(109, True), (104, False)])
def test_an_out_whose_lines_end_inside_a_chunk_is_staged(cols, staged):
    # TMA's store writes a line's last 16-byte chunk whole (measured on the H200): in place, a pitched out of 109
    # bf16 columns (218 bytes in 224-byte lines) would have its neighbours' bytes written; 104 columns (208) end
    # on a chunk
    out = _aligned_view(np.zeros((64, 112), ml_dtypes.bfloat16), (slice(None), slice(1, 1 + cols)))
    assert out.ctypes.data % 16 == 0 and out.strides[0] == 224
    plan = _plan(_c((64, 32)), _c((32, cols)), out)
    assert plan.c.staged == staged and not plan.swapped


def test_a_single_line_out_ending_inside_a_chunk_is_staged():
    # one row of 100 bf16 (200 bytes): in place, the store's last chunk would run 8 bytes past the array
    out = _aligned_view(np.zeros((1, 112), ml_dtypes.bfloat16), (slice(None), slice(0, 100)))
    plan = _plan(_c((1, 32)), _c((32, 100)), out)
    assert plan.c.staged


def test_fortran_out_is_computed_transposed_in_place():
    a, b = _c((64, 32)), _c((32, 48))
    out = np.asfortranarray(_c((64, 48)))
    plan = _plan(a, b, out)
    assert plan.swapped and not any(op.staged for op in plan.operands) and (plan.m, plan.n) == (48, 64)


def test_shared_b_folds_the_batch_into_m():
    a, b = _c((4, 64, 32)), _c((32, 48))
    plan = _plan(a, b, _c((4, 64, 48)))
    assert plan.folded and plan.batches == 1 and plan.m == 256


def test_batched_b_is_a_map_dimension():
    a, b = _c((4, 64, 32)), _c((4, 32, 48))
    plan = _plan(a, b, _c((4, 64, 48)))
    assert plan.batches == 4 and not plan.folded and plan.b.view.count == 4 and plan.a.place.batch == 64 * 64


def test_broadcast_a_is_shared_without_a_copy():
    a, b = _c((64, 32)), _c((3, 32, 48))
    plan = _plan(a, b, _c((3, 64, 48)))
    assert plan.batches == 3 and plan.a.view.count == 1 and not plan.a.staged


@pytest.mark.parametrize("a_shape,b_shape,rule", [
    ((), (3, 4), "at least one dimension"),
    ((3, 4), (5, 6), "must equal"),
    ((2, 3, 4), (3, 4, 5), "do not broadcast"),
])
def test_bad_shapes_name_the_rule(a_shape, b_shape, rule):
    with pytest.raises(ConfigError, match=rule):
        operands.plan_matmul(a_shape, (2,) * len(a_shape), 16, b_shape, (2,) * len(b_shape), 16, 2, 2)


def test_bad_out_shape_and_zero_stride():
    with pytest.raises(ConfigError, match=r"out: shape must be \(3, 5\)"):
        operands.plan_matmul((3, 4), (8, 2), 16, (4, 5), (10, 2), 16, 2, 2, (5, 3), (6, 2), 16)
    with pytest.raises(ConfigError, match="zero stride"):
        operands.plan_matmul((3, 4), (8, 2), 16, (4, 5), (10, 2), 16, 2, 2, (3, 5), (0, 2), 16)


def test_collapse_batch():
    assert operands.collapse_batch((2, 3), (48, 16)) == (6, 16)
    assert operands.collapse_batch((2, 3), (0, 0)) == (1, 0)
    assert operands.collapse_batch((2, 3), (16, 0)) is None
    assert operands.collapse_batch((2, 3), (16, 48)) is None
    assert operands.collapse_batch((1, 3, 1), (999, 16, 5)) == (3, 16)


def test_transposed_store_swaps_a_row_major_out_and_keeps_a_column_major_one():
    """swap-AB: with the kernel storing columns, a row-major C (M x N) is computed as C^T = B^T A^T in place (the
    wide N becomes the kernel's M); a column-major C is stored directly, unswapped."""
    a, b = _c((16, 512)), _c((512, 4096))
    plan = _plan(a, b, _c((16, 4096)), transposed_store=True)
    assert plan.swapped and (plan.m, plan.n, plan.k) == (4096, 16, 512)
    assert not any(op.staged for op in plan.operands)
    assert (plan.a.place.inner, plan.b.place.inner, plan.c.place.inner) == ("rows", "rows", "rows")
    f = np.asfortranarray(_c((16, 4096)))
    plan = _plan(a, b, f, transposed_store=True)
    assert not plan.swapped and (plan.m, plan.n) == (16, 4096) and plan.c.place.inner == "rows"
