"""numpy's matmul semantics on the GPU: a thousand random cases (ptxgemm.tools.cases: unaligned and empty sizes, K = 0,
vectors, batches with broadcasting, transposed, sliced, reversed, misaligned and zero-stride views, every dtype and
output layout), each one correct and none refused.

Half the cases go through `ptxgemm.run` (host arrays, uploaded as their spans), half through `ptxgemm.matmul` on
device views made at the same byte offsets as the host views (so a misaligned start stays misaligned), with a
poisoned `out` view of its own layout where the case has one. Every result is checked elementwise against the
float64 reference with ptxgemm.accuracy's bound.
"""
from __future__ import annotations

import collections
import os

import numpy as np
import pytest

from ptxgemm import accuracy
from ptxgemm.plan import operands
from ptxgemm.tools import cases

gpu = pytest.mark.gpu
CASES = int(os.environ.get("PTXGEMM_RANDOM_CASES", "1000"))
CHUNK = 50


def _owner(x: np.ndarray) -> np.ndarray:
    while isinstance(x.base, np.ndarray):
        x = x.base
    return x


def _device_view(x: np.ndarray):
    """A DeviceArray with x's shape and strides at x's byte offset inside its uploaded owner array."""
    from ptxgemm.runtime.arrays import DeviceArray

    owner = _owner(x)
    dev = DeviceArray.from_numpy(np.ascontiguousarray(owner).view(np.uint8).reshape(-1))
    offset = x.ctypes.data - owner.ctypes.data if x.size else 0
    view = DeviceArray(dev.ptr + offset, x.shape, x.dtype, x.strides, owner=False)
    view._keepalive = dev
    return view, dev, owner, offset


def _read_view(dev, owner: np.ndarray, offset: int, like: np.ndarray) -> np.ndarray:
    host = dev.to_numpy().view(owner.dtype).reshape(owner.shape)  # the generator's owners are C-contiguous
    return np.ndarray(like.shape, like.dtype, buffer=host, offset=offset, strides=like.strides).copy() \
        if like.size else np.empty(like.shape, like.dtype)


def _result_shape(a: np.ndarray, b: np.ndarray) -> tuple[int, ...]:
    """numpy's shape of a @ b (a vector operand drops its axis)."""
    return (tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2])) + ((a.shape[-2],) if a.ndim > 1 else ())
            + ((b.shape[-1],) if b.ndim > 1 else ()))


def _verdict(out: np.ndarray, a: np.ndarray, b: np.ndarray, out_dtype: str) -> accuracy.Verdict | None:
    """None when out is right; else the Verdict of the worst 2-D slice."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = np.matmul(a64, b64)
    absp = np.matmul(np.abs(a64), np.abs(b64))
    if ref.size == 0:
        return None if out.shape == ref.shape else accuracy.Verdict(False, (0, 0), np.inf, 0, 0, [], None)
    k = a.shape[-1]
    bound = accuracy.error_bound(ref, absp, k, out_dtype, np.dtype(a.dtype).name)
    shape2 = (-1, ref.shape[-1]) if ref.ndim >= 1 else (1, 1)  # 2-D slices for the per-block report
    v = accuracy.check_bound(np.asarray(out).reshape(shape2), ref.reshape(shape2), bound.reshape(shape2))
    return None if v.ok else v


@gpu
@pytest.mark.parametrize("chunk", range(-(-CASES // CHUNK)))
def test_random_matmuls_are_numpys(chunk, device_report):
    import ptxgemm

    rng = np.random.default_rng(1000 + chunk)
    failures, kinds = [], collections.Counter()
    for i in range(min(CHUNK, CASES - chunk * CHUNK)):
        case = cases.random_case(rng)
        a, b = case.a, case.b
        via = "run" if i % 2 == 0 else "matmul"
        try:
            if via == "run" and case.out_layout == "new":
                out = ptxgemm.run(a, b, out_dtype=case.out_dtype)
            else:
                da, _, _, _ = _device_view(a)
                db, _, _, _ = _device_view(b)
                full = _result_shape(a, b)
                if case.out_layout == "new":
                    dout = ptxgemm.matmul(da, db, out_dtype=case.out_dtype)
                    out = dout.to_numpy()
                else:
                    host_out = cases.make_out(rng, full, case.out_dtype, case.out_layout)
                    dout, ddev, owner, offset = _device_view(host_out)
                    plan = ptxgemm.GemmPlan(da, db, dout)
                    kinds.update(op.name + (" staged" if op.staged else " in place") for op in plan.layout.operands)
                    kinds.update(["swapped"] * plan.layout.swapped + ["folded"] * plan.layout.folded)
                    plan.launch()
                    out = _read_view(ddev, owner, offset, host_out)
        except ptxgemm.ConfigError as e:
            failures.append(f"{case.note} via {via}: refused: {e}")
            continue
        kinds[via] += 1
        kinds["batched"] += a.ndim > 2 or b.ndim > 2
        verdict = _verdict(out, a, b, case.out_dtype)
        if verdict is not None:
            failures.append(f"{case.note} via {via}: {verdict}")
    device_report(f"random matmul cases {chunk * CHUNK}..: {dict(sorted(kinds.items()))}")
    assert not failures, "\n".join(failures[:10])


def test_the_generator_reaches_every_path():
    """On the CPU: the cases the GPU test runs cover staging, swaps, folds, batches, empty and K = 0 outputs."""
    seen = collections.Counter()
    for chunk in range(-(-CASES // CHUNK)):
        rng = np.random.default_rng(1000 + chunk)
        for _ in range(min(CHUNK, CASES - chunk * CHUNK)):
            case = cases.random_case(rng)
            a, b = case.a, case.b
            out = cases.make_out(rng, _result_shape(a, b), case.out_dtype, case.out_layout if case.out_layout != "new" else "C")
            plan = operands.plan_matmul(a.shape, a.strides, 256, b.shape, b.strides, 512, a.itemsize, out.itemsize,
                                        out.shape, out.strides, 1024)
            seen["empty"] += plan.a is None and not plan.fill
            seen["zeros"] += bool(plan.fill)
            if plan.a is not None:
                seen["staged"] += any(op.staged for op in plan.operands)
                seen["swapped"] += plan.swapped
                seen["folded"] += plan.folded
                seen["batched"] += plan.batches > 1
    assert all(seen[k] >= 5 for k in ("empty", "zeros", "staged", "swapped", "folded", "batched")), seen
