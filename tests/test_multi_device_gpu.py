"""ptxgemm on two GPUs in one process: each call runs on its arrays' device, whichever device is current
(tests/test_devices.py holds the rules on the CPU).

- matmul on DeviceArrays on device 1, then 0, then 1 again (one shape): a plan per device, the first found again
  (ptxgemm.plan_stats()), each result on its arrays' device and the thread's CUDA context as it was;
- ptxgemm.run under `with ptxgemm.device(1)`, grouped_matmul on device 1;
- the torch ops (ptxgemm.torch.mm, pt.Linear forward and backward, torch.compile of a small pt.Linear model) on
  cuda:1 tensors with torch's current device left at 0, then set to 1: torch's current device is the same after
  every call, and the plans made in the first pass serve the second;
- a CuPy array on device 1 (through DLPack, and through __cuda_array_interface__ alone, which names no device);
- arrays of one call on two devices refused with the ConfigError naming the argument.

Every input is random (never zeros), every result ptxgemm lets the test allocate is poisoned with NaN first, and
every result is compared with a float64 reference within ptxgemm.accuracy's dtype-derived bounds (inputs drawn
anew for each device and pass, so a stale result of an earlier one cannot pass). Skipped, saying why, with fewer
than two CUDA devices, and each framework's case without that framework."""
from __future__ import annotations

import contextlib

import ml_dtypes
import numpy as np
import pytest

import ptxgemm
from ptxgemm import ConfigError, accuracy
from ptxgemm.runtime import devices, driver
from ptxgemm.runtime.arrays import DeviceArray
from torch_peer import host_values, require_torch_cuda

pytestmark = pytest.mark.gpu

M, N, K = 520, 776, 392           # partial tiles in every dimension
BF16 = np.dtype(ml_dtypes.bfloat16)
#: a two-layer chain's bound, in units of the dtype's unit roundoff times the same computation on absolute values:
#: each bf16 rounding (of h, of each gradient, of the output) is within u of the magnitudes that made it; 8 covers
#: the ones a chain of two layers and its gradients add up (tests/distributed_checks.py's C_BOUND, the same reason)
CHAIN_UNITS = 8.0
U_BF16 = 2.0 ** -accuracy.OUTPUT_PRECISION_BITS["bfloat16"]


@pytest.fixture(scope="module", autouse=True)
def two_gpus():
    count = driver.device_count()
    if count < 2:
        pytest.skip(f"fewer than two CUDA devices: the driver sees {count}; these tests run one process on two GPUs")
    for ordinal in (0, 1):
        info = driver.device_info(ordinal)
        if info.compute_capability != (9, 0):
            pytest.skip(f"CUDA device {ordinal} is {info.name}, not sm_90: ptxgemm's kernels are sm_90a only")


def _operands(rng, m=M, n=N, k=K, dtype="bfloat16"):
    a, b = accuracy.random_matrix(rng, m, k, dtype), accuracy.random_matrix(rng, k, n, dtype)
    return a, b, *accuracy.reference(a, b)


def _check(got: np.ndarray, ref, absprod, k: int, what: str) -> None:
    verdict = accuracy.check(got, ref, absprod, k, in_dtype="bfloat16")
    assert verdict.ok, f"{what}: {verdict}"


# --- ptxgemm's own arrays -----------------------------------------------------------------------------------------

def test_matmul_runs_on_its_arrays_device_one_plan_per_device():
    rng = np.random.default_rng(461)
    ptxgemm.clear_plan_cache()
    ptxgemm.reset_plan_stats()
    before = devices.thread_context()
    for step, device in enumerate((1, 0, 1)):
        a, b, ref, absprod = _operands(rng)             # new values each step: a stale result cannot pass
        da, db = ptxgemm.to_device(a, device=device), ptxgemm.to_device(b, device=device)
        out = DeviceArray.empty((M, N), BF16, device=device)
        out.poison()
        assert ptxgemm.matmul(da, db, out=out) is out
        new = ptxgemm.matmul(da, db)                     # a result allocated by the call: on the arrays' device
        assert (da.device, out.device, new.device) == (device,) * 3
        assert driver.pointer_device(out.ptr) == driver.pointer_device(new.ptr) == device   # the memory's own word
        for what, result in (("out", out), ("new", new)):
            _check(result.to_numpy(), ref, absprod, K, f"step {step}, device {device}, {what}")
        assert devices.thread_context() == before, "a call on another device left its context current"
    stats = ptxgemm.plan_stats()
    # out given and a new result, each a plan per device; device 1's two found again on the third step
    assert (stats["plans_made"], stats["plan_hits"]) == (4, 2), stats


def test_run_under_device_1(monkeypatch):
    rng = np.random.default_rng(462)
    a, b, ref, absprod = _operands(rng)
    ran = []
    launch = ptxgemm.GemmPlan.launch

    def spy(plan, stream=None):
        ran.append(plan.device)
        return launch(plan, stream)

    monkeypatch.setattr(ptxgemm.GemmPlan, "launch", spy)
    with ptxgemm.device(1):
        c = ptxgemm.run(a, b)
        assert devices.current() == 1
    assert ran == [1] and devices.current() == 0
    _check(c, ref, absprod, K, "run on device 1")


def test_grouped_matmul_on_device_1():
    rng = np.random.default_rng(463)
    sizes, tail = [130, 0, 217, 64], 20             # an empty group, and rows past offs[-1] never written
    offs = np.cumsum(sizes).astype(np.int32)
    total = int(offs[-1]) + tail
    a = accuracy.random_matrix(rng, total, K, "bfloat16")
    b = np.stack([accuracy.random_matrix(rng, K, N, "bfloat16") for _ in sizes])
    da, db, doffs = (ptxgemm.to_device(x, device=1) for x in (a, b, offs))
    out = DeviceArray.empty((total, N), BF16, device=1)
    out.poison()
    assert ptxgemm.grouped_matmul(da, db, offs=doffs, out=out) is out
    got = out.to_numpy()
    assert np.isnan(got[offs[-1]:].astype(np.float64)).all(), "rows past offs[-1] were written"
    starts = [0, *offs.tolist()]
    for g in range(len(sizes)):
        rows = slice(starts[g], starts[g + 1])
        if sizes[g]:
            ref, absprod = accuracy.reference(a[rows], b[g])
            _check(got[rows], ref, absprod, K, f"group {g} on device 1")
    with pytest.raises(ConfigError, match=r"^offs: on CUDA device 0, but a is on CUDA device 1"):
        ptxgemm.grouped_matmul(da, db, offs=ptxgemm.to_device(offs, device=0))


def test_arrays_on_two_devices_are_refused_by_name():
    rng = np.random.default_rng(464)
    a, b, _, _ = _operands(rng)
    da0, db1 = ptxgemm.to_device(a, device=0), ptxgemm.to_device(b, device=1)
    with pytest.raises(ConfigError, match=r"^b: on CUDA device 1, but a is on CUDA device 0"):
        ptxgemm.matmul(da0, db1)
    with pytest.raises(ConfigError, match=r"^out: on CUDA device 0, but a is on CUDA device 1"):
        ptxgemm.matmul(ptxgemm.to_device(a, device=1), db1, out=DeviceArray.empty((M, N), BF16, device=0))
    with pytest.raises(ConfigError, match=r"^b: on CUDA device 1, but a is on CUDA device 0"):
        ptxgemm.GemmPlan(da0, db1, DeviceArray.empty((M, N), BF16, device=0))


# --- CuPy -----------------------------------------------------------------------------------------------------------

class InterfaceOnly:
    """A CuPy array seen through __cuda_array_interface__ alone (which names no device)."""

    def __init__(self, x):
        self.__cuda_array_interface__ = x.__cuda_array_interface__
        self.keep = x


def test_a_cupy_array_on_device_1():
    cp = pytest.importorskip("cupy", reason="CuPy is not installed: the CuPy case needs it")
    rng = np.random.default_rng(465)
    a, b, ref, absprod = _operands(rng, dtype="float16")      # CuPy has no bfloat16
    with cp.cuda.Device(1):
        ca, cb = cp.asarray(a), cp.asarray(b)
        c = ptxgemm.matmul(ca, cb)                             # DLPack names device 1; ptxgemm's current is 0
        assert c.device == 1 and devices.current() == 0
        _check(c.to_numpy(), ref, absprod, K, "CuPy through DLPack")
        # the interface names no device: taken on the current one (0), refused when planned, run inside device(1)
        with pytest.raises(ConfigError, match=r"^a: its memory is on CUDA device 1.*ptxgemm\.device\(1\)"):
            ptxgemm.matmul(InterfaceOnly(ca), InterfaceOnly(cb))
        with ptxgemm.device(1):
            c = ptxgemm.matmul(InterfaceOnly(ca), InterfaceOnly(cb))
        assert c.device == 1
        _check(c.to_numpy(), ref, absprod, K, "CuPy through __cuda_array_interface__")
        got = cp.from_dlpack(c)                                 # and back to CuPy, on device 1
        assert got.device.id == 1
        _check(cp.asnumpy(got), ref, absprod, K, "the result through CuPy")


# --- torch ----------------------------------------------------------------------------------------------------------

def _torch():
    torch = require_torch_cuda("the torch cases")
    if torch.cuda.device_count() < 2:
        pytest.skip(f"torch sees {torch.cuda.device_count()} CUDA device(s); the torch cases need two")
    return torch


@contextlib.contextmanager
def poisoned(torch, shape, dtype, device):
    """Free a NaN-filled block of the result's size on `device` just before the op, and check the op's result took
    it (tests/test_torch_gpu.py's way: the op allocates its result from torch's caching allocator)."""
    block = torch.full(shape, float("nan"), dtype=dtype, device=device)
    ptr = block.data_ptr()
    del block
    got = {}
    yield got
    assert got["out"].data_ptr() == ptr, "the result did not reuse the poisoned block: the test checks nothing"


def _within(got, ref, bound, what):
    verdict = accuracy.check_bound(np.atleast_2d(host_values(got).astype(np.float64)), np.atleast_2d(ref),
                                   np.atleast_2d(bound))
    assert verdict.ok, f"{what}: {verdict}"


def _chain_reference(x, w1, b1, w2, b2, g):
    """(reference, computation on absolute values) in float64 of y = (x w1^T + b1) w2^T + b2 and of the gradients of
    y.backward(g): {"y", "x", "w1", "b1", "w2", "b2"}."""
    x, w1, b1, w2, b2, g = (host_values(t).astype(np.float64) for t in (x, w1, b1, w2, b2, g))
    h, ah = x @ w1.T + b1, np.abs(x) @ np.abs(w1).T + np.abs(b1)
    dh, adh = g @ w2, np.abs(g) @ np.abs(w2)
    return {"y": (h @ w2.T + b2, ah @ np.abs(w2).T + np.abs(b2)), "x": (dh @ w1, adh @ np.abs(w1)),
            "w1": (dh.T @ x, adh.T @ np.abs(x)), "b1": (dh.sum(0), adh.sum(0)),
            "w2": (g.T @ h, np.abs(g).T @ ah), "b2": (g.sum(0), np.abs(g).sum(0))}


def _torch_pass(torch, pt, current: int, seed: int) -> None:
    """Every torch case on cuda:1 with torch's current device `current`, which no call may change."""
    dev = torch.device("cuda", 1)
    gen = torch.Generator(device=dev).manual_seed(seed)

    def rand(*shape):
        return torch.randn(shape, device=dev, generator=gen).to(torch.bfloat16)

    # ptxgemm.torch.mm
    a, w = rand(M, K), rand(N, K)
    with poisoned(torch, (M, N), torch.bfloat16, dev) as got:
        got["out"] = out = pt.mm(a, w.t())
    assert torch.cuda.current_device() == current and out.device == dev
    torch.cuda.synchronize(dev)
    ref, absprod = accuracy.reference(host_values(a), host_values(w).T)
    _within(out, ref, accuracy.error_bound(ref, absprod, K, "bfloat16", "bfloat16"), f"mm (current device {current})")

    # pt.Linear, forward and backward (its eager training path)
    lin = pt.Linear(K, N, device=dev, dtype=torch.bfloat16)
    with torch.no_grad():
        lin.weight.copy_(rand(N, K))
        lin.bias.copy_(rand(N))
    x, g = rand(M, K).requires_grad_(True), rand(M, N)
    with poisoned(torch, (M, N), torch.bfloat16, dev) as got:
        got["out"] = y = lin(x)
    y.backward(g)
    assert torch.cuda.current_device() == current
    torch.cuda.synchronize(dev)
    w64, x64, g64 = (host_values(t).astype(np.float64) for t in (lin.weight, x, g))
    ref, bound = accuracy.fused_reference(host_values(x), host_values(lin.weight).T, {"bias": host_values(lin.bias)},
                                          "bfloat16")
    _within(y, ref, bound, "Linear forward")
    for what, got_, ref, absprod, k in (("dX", x.grad, g64 @ w64, np.abs(g64) @ np.abs(w64), N),
                                       ("dW", lin.weight.grad, g64.T @ x64, np.abs(g64).T @ np.abs(x64), M),
                                       ("dbias", lin.bias.grad, g64.sum(0), np.abs(g64).sum(0), M)):
        _within(got_, ref, accuracy.error_bound(np.atleast_2d(ref), np.atleast_2d(absprod), k, "bfloat16", "bfloat16"),
                f"Linear {what} (current device {current})")

    # torch.compile of a small pt.Linear model, forward and backward
    hidden = 264
    model = torch.nn.Sequential(pt.Linear(K, hidden), pt.Linear(hidden, N)).to(device=dev, dtype=torch.bfloat16)
    with torch.no_grad():
        for layer, (n_out, n_in) in zip(model, ((hidden, K), (N, hidden))):
            layer.weight.copy_(rand(n_out, n_in) * (n_in ** -0.5))
            layer.bias.copy_(rand(n_out))
    x, g = rand(M, K).requires_grad_(True), rand(M, N)
    y = torch.compile(model)(x)
    y.backward(g)
    assert torch.cuda.current_device() == current
    torch.cuda.synchronize(dev)
    refs = _chain_reference(x, model[0].weight, model[0].bias, model[1].weight, model[1].bias, g)
    grads = {"y": y, "x": x.grad, "w1": model[0].weight.grad, "b1": model[0].bias.grad,
             "w2": model[1].weight.grad, "b2": model[1].bias.grad}
    for name, got_ in grads.items():
        ref, absref = refs[name]
        _within(got_, ref, CHAIN_UNITS * U_BF16 * absref, f"compiled model {name} (current device {current})")

    # the tensors of one call on one device
    with pytest.raises(ConfigError, match=r"^b: on CUDA device 0, but a is on CUDA device 1"):
        pt.mm(a, torch.ones(K, N, dtype=torch.bfloat16, device="cuda:0"))
    assert torch.cuda.current_device() == current


def test_the_torch_ops_on_cuda_1_whatever_torchs_current_device():
    torch = _torch()
    import ptxgemm.torch as pt

    pt.clear_plan_cache()
    try:
        torch.cuda.set_device(0)
        _torch_pass(torch, pt, 0, seed=466)
        made = pt.plan_stats()["made"]
        assert made > 0
        torch.cuda.set_device(1)
        _torch_pass(torch, pt, 1, seed=467)
        # the plans of the first pass serve the second: keyed by the tensors' device, not torch's current one (the
        # second pass's compile makes none of its own: the compiled graphs call the same ops on the same shapes)
        assert pt.plan_stats()["made"] == made, pt.plan_stats()
        torch.cuda.set_device(0)
        a, w = (torch.randn(s, device="cuda:0").to(torch.bfloat16) for s in ((M, K), (N, K)))
        pt.mm(a, w.t())                                    # the same call on device 0: a plan of its own
        assert pt.plan_stats()["made"] == made + 1
    finally:
        torch.cuda.set_device(0)
