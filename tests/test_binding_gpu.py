"""Plans by shape, bound per call, on the GPU (issue 46): one plan per signature serves arrays at any address --
in place, staged (the staging copies' sources rebound), with the epilogue's vectors, grouped, through the torch
ops and the layers' eager training -- every result against float64 with ptxgemm.accuracy's bounds, outputs
poisoned first; and a steady state makes no plan.

Each case runs its calls on memory at several addresses (fresh allocations and offsets inside one buffer), so a
slot left at an earlier call's address reads the wrong operand or writes the wrong place, which the poisoned
outputs and the references catch."""
from __future__ import annotations

import numpy as np
import pytest

import ptxgemm
from ptxgemm import ConfigError, accuracy
from ptxgemm.runtime.arrays import DeviceArray
from gemm_reference import check_result, random_matrix

gpu = pytest.mark.gpu
BF16 = np.dtype("bfloat16")


def _require_gpu():
    from ptxgemm.runtime import driver

    reason = driver.no_device_reason()
    if reason is not None:
        pytest.skip(f"no CUDA device: {reason}")


@pytest.fixture
def counted():
    """A GPU, an empty library plan cache and zeroed counters: what a test then counts is its own calls' plans."""
    _require_gpu()
    ptxgemm.clear_plan_cache()
    ptxgemm.reset_plan_stats()


def _poisoned(shape, dtype=BF16) -> DeviceArray:
    return DeviceArray.from_numpy(np.full(shape, np.nan, dtype=dtype))


def _placed(host: np.ndarray, pad_bytes: int) -> tuple[DeviceArray, DeviceArray]:
    """`host` uploaded `pad_bytes` into a fresh buffer (a new address, and with a pad that is not a multiple of 16,
    a new address class), as a view of the same strides; returns (view, buffer)."""
    raw = np.ascontiguousarray(host).view(np.uint8).reshape(-1)
    buf = DeviceArray.from_numpy(np.concatenate([np.zeros(pad_bytes, np.uint8), raw]))
    return DeviceArray(buf.ptr + pad_bytes, host.shape, host.dtype, owner=False, base=buf), buf


@gpu
@pytest.mark.parametrize("layout", ["row", "b_col", "stepped_a"])
def test_one_plan_serves_every_address_of_its_signature(layout, counted):
    """matmul at six addresses of one signature: one plan made, five found, each result right. "stepped_a" reads
    every other column of a wider matrix, which TMA cannot: A is staged, so each call's staging copy must read
    that call's A."""
    rng = np.random.default_rng(46)
    m, n, k = 300, 264, 520
    for i in range(6):
        a = random_matrix(rng, m, 2 * k if layout == "stepped_a" else k, "bfloat16")
        b = random_matrix(rng, k, n, "bfloat16")
        da, keep_a = _placed(a, 256 * i)
        if layout == "b_col":   # B column-major (the bytes of B^T, row-major), at a new address each call
            db_t, keep_b = _placed(np.ascontiguousarray(b.T), 512 * (5 - i))
            db = DeviceArray(db_t.ptr, b.shape, BF16, (2, 2 * k), owner=False, base=keep_b)
        else:
            db, keep_b = _placed(b, 512 * (5 - i))
        if layout == "stepped_a":
            da = da.view((m, k), (4 * k, 4))
            a = a[:, ::2]
        out = _poisoned((m, n))
        ptxgemm.matmul(da, db, out)
        verdict = check_result(out.to_numpy(), a, b)
        assert verdict.ok, f"call {i}: {verdict}"
    stats = ptxgemm.plan_stats()
    assert (stats["plans_made"], stats["plan_hits"]) == (1, 5), stats


@gpu
def test_a_new_address_class_gets_a_plan_of_its_own_and_both_stay_right(counted):
    """An A that starts 8 bytes into its buffer (not 16-byte aligned) cannot be read by TMA in place: it is a
    different signature, planned (staged) separately, and the aligned plan is not reused for it."""
    rng = np.random.default_rng(7)
    m, n, k = 128, 256, 256
    for pad in (0, 8, 16, 24):
        a, b = random_matrix(rng, m, k, "bfloat16"), random_matrix(rng, k, n, "bfloat16")
        da, keep = _placed(a, pad)
        out = _poisoned((m, n))
        ptxgemm.matmul(da, DeviceArray.from_numpy(b), out)
        assert check_result(out.to_numpy(), a, b).ok, f"pad {pad}"
    assert ptxgemm.plan_stats()["plans_made"] == 2


@gpu
def test_the_epilogue_vectors_and_c_are_rebound_per_call(counted):
    rng = np.random.default_rng(3)
    m, n, k = 256, 384, 320
    for i in range(4):
        a, b = random_matrix(rng, m, k, "bfloat16"), random_matrix(rng, k, n, "bfloat16")
        bias = rng.standard_normal(n).astype(np.float32)
        c = random_matrix(rng, m, n, "bfloat16")
        scale_a = (rng.random((m, 1)) + 0.5).astype(np.float32)
        args = dict(c=c, beta=-0.5, bias=bias, scale_a=scale_a, activation="silu")
        dev = {name: _placed(x, 32 * i)[0] if isinstance(x, np.ndarray) else x for name, x in args.items()}
        keep = [x.base for x in dev.values() if isinstance(x, DeviceArray)]
        out = ptxgemm.matmul(_placed(a, 64 * i)[0], DeviceArray.from_numpy(b), **dev)
        ref, bound = accuracy.fused_reference(a, b, args, "bfloat16")
        verdict = accuracy.check_bound(out.to_numpy().astype(np.float64), ref, bound)
        assert verdict.ok, f"call {i}: {verdict}"
        del keep
    assert ptxgemm.plan_stats()["plans_made"] == 1


@gpu
def test_a_plan_binds_to_other_arrays_of_its_signature_and_refuses_others_by_name():
    _require_gpu()
    rng = np.random.default_rng(5)
    a1, a2 = random_matrix(rng, 200, 136, "bfloat16"), random_matrix(rng, 200, 136, "bfloat16")
    b = random_matrix(rng, 136, 72, "bfloat16")
    db = DeviceArray.from_numpy(b)
    out1, out2 = _poisoned((200, 72)), _poisoned((200, 72))
    plan = ptxgemm.GemmPlan(DeviceArray.from_numpy(a1), db, out1)
    plan.launch()
    plan.bind(DeviceArray.from_numpy(a2), db, out2).launch()
    assert check_result(out1.to_numpy(), a1, b).ok and check_result(out2.to_numpy(), a2, b).ok
    with pytest.raises(ConfigError, match="^a: this plan was made for shape"):
        plan.bind(DeviceArray.from_numpy(a2[:100]), db, out2)


@gpu
def test_grouped_calls_at_new_addresses_share_one_plan(counted):
    rng = np.random.default_rng(11)
    g, k, n = 4, 256, 192
    sizes = np.array([40, 0, 100, 60], dtype=np.int32)
    total = int(sizes.sum())
    for i in range(3):
        a = random_matrix(rng, total, k, "bfloat16")
        b = np.stack([random_matrix(rng, k, n, "bfloat16") for _ in range(g)])
        offs = DeviceArray.from_numpy(np.cumsum(sizes).astype(np.int32))
        da, db = _placed(a, 128 * i)[0], _placed(b, 256 * i)[0]
        out = _poisoned((total, n))
        ptxgemm.grouped_matmul(da, db, offs=offs, out=out)
        got, start = out.to_numpy(), 0
        for gi, rows in enumerate(sizes):
            if rows:
                verdict = check_result(got[start:start + rows], a[start:start + rows], b[gi])
                assert verdict.ok, f"call {i} group {gi}: {verdict}"
            start += rows
    assert ptxgemm.plan_stats()["plans_made"] == 1


@gpu
def test_the_torch_layers_make_no_plan_in_a_steady_state_and_stay_right():
    """pt.Linear's eager inference and eager training (_LinearFunction) on a new activation every step: after the
    first step no plan is made; the output and the three gradients are right."""
    from torch_peer import host_values, require_torch_cuda

    torch = require_torch_cuda("the torch layers' steady state")
    import ptxgemm.torch as pt

    gen = torch.Generator(device="cuda").manual_seed(9)
    m, k, n = 320, 264, 192
    lin = torch.nn.Linear(k, n, dtype=torch.bfloat16, device="cuda")
    layer = pt.Linear.from_linear(lin)
    for step in range(4):
        if step == 1:
            ptxgemm.reset_plan_stats()
        x = (torch.randn((m, k), device="cuda", generator=gen)).to(torch.bfloat16).requires_grad_(True)
        g = torch.randn((m, n), device="cuda", generator=gen).to(torch.bfloat16)
        with torch.no_grad():
            y0 = layer(x)
        y = layer(x)
        y.backward(g)
        torch.cuda.synchronize()
        x64, w64, g64 = (host_values(t).astype(np.float64) for t in (x, lin.weight, g))
        b64 = host_values(lin.bias).astype(np.float64)
        for got, ref, absprod, kk, what in (
                (y0, x64 @ w64.T + b64, np.abs(x64) @ np.abs(w64.T) + np.abs(b64), k, "forward (no_grad)"),
                (y, x64 @ w64.T + b64, np.abs(x64) @ np.abs(w64.T) + np.abs(b64), k, "forward (training)"),
                (x.grad, g64 @ w64, np.abs(g64) @ np.abs(w64), n, "dX"),
                (lin.weight.grad, g64.T @ x64, np.abs(g64.T) @ np.abs(x64), m, "dW")):
            bound = accuracy.error_bound(ref, absprod, kk, "bfloat16", "bfloat16")
            verdict = accuracy.check_bound(host_values(got).astype(np.float64), ref, bound)
            assert verdict.ok, f"step {step} {what}: {verdict}"
        ref = g64.sum(0)
        bound = 2.0 ** -8 * np.abs(ref) + m * 2.0 ** -23 * np.abs(g64).sum(0)
        assert accuracy.check_bound(host_values(lin.bias.grad).astype(np.float64), ref, bound).ok
        lin.weight.grad = lin.bias.grad = None
    assert ptxgemm.plan_stats()["plans_made"] == 0
    assert ptxgemm.plan_stats()["plan_hits"] == 3 * 4


@gpu
def test_a_dropped_result_comes_back_at_its_address_on_its_own_stream_only(counted):
    """matmul's result, dropped, leaves its block for the next call on its stream (ptxgemm.runtime.recycling): the
    next result there has the same address (so the plan's output map needs no move), one on another stream does
    not (nothing would order it after the first stream's work), and a result still held is never handed out. Every
    call has new inputs, so a block's old bytes cannot pass for a new result."""
    from ptxgemm.runtime import driver, recycling

    driver.synchronize()
    driver.trim_memory_pool()           # nothing kept from earlier tests
    rng = np.random.default_rng(4646)
    m, n, k = 256, 384, 512
    s1, s2 = driver.Stream(), driver.Stream()
    b = random_matrix(rng, k, n, "bfloat16")
    db = DeviceArray.from_numpy(b)
    driver.synchronize()

    def call(stream):
        a = random_matrix(rng, m, k, "bfloat16")
        da = DeviceArray.from_numpy(a, stream=stream)
        return a, da, ptxgemm.matmul(da, db, stream=stream)

    a1, da1, out1 = call(s1)
    assert check_result(out1.to_numpy(), a1, b).ok
    first = out1.ptr
    del out1
    assert recycling.kept_bytes() == m * n * 2, "the dropped result's block was not kept"
    a2, da2, out2 = call(s2)
    assert out2.ptr != first, "a block freed on one stream was handed to another"
    assert check_result(out2.to_numpy(), a2, b).ok
    a3, da3, out3 = call(s1)
    assert out3.ptr == first, "the block kept on s1 did not come back on s1"
    assert check_result(out3.to_numpy(), a3, b).ok, "a recycled block kept its old values: the call did not write it"
    a4, da4, out4 = call(s1)            # out3 still held: a block of its own
    assert out4.ptr != out3.ptr
    assert check_result(out4.to_numpy(), a4, b).ok and check_result(out3.to_numpy(), a3, b).ok
    del out2, out3, out4
    driver.synchronize()
    driver.trim_memory_pool()
    assert recycling.kept_bytes() == 0


@gpu
def test_nothing_is_recycled_while_the_stream_is_captured(counted):
    """During a CUDA graph capture an allocation is the graph's: a block kept before the capture is not handed out
    to it (the graph would bake in an address the pool's next user writes), and a result freed during the capture
    is not kept (it is the graph's memory)."""
    from ptxgemm.runtime import driver, recycling
    from ptxgemm.runtime.graph import Graph

    driver.synchronize()
    driver.trim_memory_pool()
    s = driver.Stream()
    shape, nbytes = (64, 64), 64 * 64 * 2
    handle = driver.cu_stream(s)
    kept = DeviceArray.allocate(shape, BF16, (128, 2), nbytes, s, handle, 0, driver.memory_pool(0))
    kept_ptr = kept.ptr
    del kept
    assert recycling.kept_bytes() == nbytes
    graph = Graph()
    with graph.capture(s):
        inside = DeviceArray.allocate(shape, BF16, (128, 2), nbytes, s, handle, 0, driver.memory_pool(0))
        assert inside.ptr != kept_ptr, "a block kept outside the capture was handed to the graph"
        inside.free()
        assert recycling.kept_bytes() == nbytes, "a block freed during the capture was kept"
    graph.close()
    driver.synchronize()
    driver.trim_memory_pool()
    assert recycling.kept_bytes() == 0
