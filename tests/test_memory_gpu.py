"""Stream-ordered device memory on the GPU: allocating and freeing never wait for the GPU (checked against a kernel
that spins for a known time), freed memory is reused, arrays allocated on a ptxgemm Stream round-trip, and numpy
views of any layout (transposed, reversed, stepped, broadcast) go up in one copy and come back bit for bit."""
from __future__ import annotations

import ctypes
import time

import ml_dtypes
import numpy as np
import pytest

from ptxgemm.kernel import codegen
from ptxgemm.runtime import arrays, recycling
from ptxgemm.toolchain import compiler
from ptxgemm.tools import probes

gpu = pytest.mark.gpu

# One thread that spins on %globaltimer for `duration_ns`: work that is still pending while the host allocates.
SPIN_TEMPLATE = """\
{% include "module.ptx.j2" %}

.visible .entry spin(
    .param .u64 duration_ns_param
)
.maxntid 32, 1, 1
{
    .reg .pred  %p_wait;
    .reg .u64   %start, %now, %elapsed, %duration;

    ld.param.u64 %duration, [duration_ns_param];
    mov.u64     %start, %globaltimer;
SPIN:
    mov.u64     %now, %globaltimer;
    sub.u64     %elapsed, %now, %start;
    setp.lt.u64 %p_wait, %elapsed, %duration;
    @%p_wait bra SPIN;
    ret;
}
"""
SPIN_NS = 500_000_000     # 0.5 s: far longer than 1000 allocations and frees take on the host
ALLOCATIONS = 1000


@pytest.fixture(scope="module")
def spin():
    from ptxgemm.runtime import driver

    ptx = codegen.environment().from_string(SPIN_TEMPLATE).render(
        template_name="tests/test_memory_gpu.py (SPIN_TEMPLATE)", summary="spins for a given time",
        ptx_version=probes.PTX_VERSION)
    module = driver.load_module(compiler.compile_ptx(ptx), "spin test module")
    return module.function("spin")


def bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


@gpu
@pytest.mark.parametrize("on", ["legacy-default-stream", "ptxgemm-stream"])
def test_allocation_and_free_never_wait_for_the_gpu(spin, on):
    from ptxgemm.runtime import driver

    stream = None if on == "legacy-default-stream" else driver.Stream()
    arrays.DeviceArray.empty((1,), np.float32, stream=stream).free()   # the pool exists before the clock starts
    driver.synchronize()
    before = driver.memory_pool_usage()
    done = driver.Event()
    driver.launch(spin, (1,), (32,), [ctypes.c_uint64(SPIN_NS)], stream=stream)
    done.record(stream)
    t0 = time.perf_counter()
    for i in range(ALLOCATIONS):
        a = arrays.DeviceArray.empty((1 << 18,), np.float32, stream=stream)   # 1 MiB
        if i % 2:
            a.free()
        else:
            del a                                                           # __del__ frees the same way
    seconds = time.perf_counter() - t0
    pending = not done.query()
    assert pending, (f"the spinning kernel had finished after {seconds * 1e3:.0f} ms of allocations and frees: "
                     f"something waited for the GPU")
    assert seconds < SPIN_NS / 1e9
    done.synchronize()
    assert done.query()
    after = driver.memory_pool_usage()
    # freed in stream order, reused in stream order: the pool never held more than a few blocks; what is still
    # used is what the recycling keeps for the stream's next allocation (ptxgemm.runtime.recycling), nothing more
    assert after["reserved"] - before["reserved"] <= 64 << 20, (before, after)
    assert after["used"] - after["kept"] == before["used"] - before["kept"], (before, after)
    assert after["kept"] - before["kept"] <= recycling.DEPTH << 20, (before, after)


@gpu
def test_the_pool_is_private():
    from ptxgemm.runtime import driver
    from ptxgemm.runtime.driver import check, cu

    pool = driver.memory_pool()
    dev = driver.context().device
    default = check(cu.cuDeviceGetDefaultMemPool(dev), "reading the default pool")
    current = check(cu.cuDeviceGetMemPool(dev), "reading the current pool")
    assert int(pool) != int(default) and int(pool) != int(current)
    threshold = check(cu.cuMemPoolGetAttribute(pool, cu.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD),
                      "reading the release threshold")
    assert int(threshold) == driver.POOL_RELEASE_THRESHOLD


@gpu
@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16, np.float32], ids=lambda d: np.dtype(d).name)
def test_arrays_allocated_on_a_stream_round_trip(dtype):
    from ptxgemm.runtime import driver

    rng = np.random.default_rng(1)
    stream = driver.Stream()
    host = (rng.standard_normal((129, 77)) * 100).astype(dtype)
    dev = arrays.DeviceArray.from_numpy(host, stream=stream)
    assert dev.stream is stream
    np.testing.assert_array_equal(bits(dev.to_numpy()), bits(host))
    other = arrays.DeviceArray.empty(host.shape, dtype, order="F", stream=stream)
    other.copy_from_host(np.asfortranarray(host))        # on the array's own stream
    back = other.to_numpy()
    assert back.flags.f_contiguous
    np.testing.assert_array_equal(bits(back), bits(host))
    dev.free()
    other.free()
    stream.synchronize()


BASE = np.arange(9 * 10 * 11, dtype=np.float64).reshape(9, 10, 11)
VIEWS = {
    "transposed": lambda x: x[:, 0].T,
    "reversed": lambda x: x[::-1],
    "reversed-inner": lambda x: x[..., ::-1],
    "stepped-columns": lambda x: x[0, :, ::3],
    "stepped-and-reversed": lambda x: x[::-2, 1:, ::-3],
    "broadcast-row": lambda x: np.broadcast_to(x[0, 0], (6, 11)),
    "broadcast-batch": lambda x: np.broadcast_to(x[0], (4, 10, 11)),
    "permuted-3d": lambda x: x.transpose(2, 0, 1),
    "four-d-mergeable": lambda x: x.reshape(3, 3, 10, 11)[:, ::-1],
}


@gpu
@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16, np.float32, np.float64, np.uint8],
                         ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", list(VIEWS))
def test_numpy_views_round_trip(name, dtype):

    host_base = np.ascontiguousarray(BASE.astype(dtype))
    view = VIEWS[name](host_base)
    assert not (view.flags.c_contiguous or view.flags.f_contiguous)
    dev = arrays.DeviceArray.from_numpy(view)
    assert dev.shape == view.shape and dev.strides == view.strides and dev.dtype == view.dtype
    assert dev.base is not None and dev.base.nbytes == arrays.byte_span(view.shape, view.strides, view.itemsize)[1]
    back = dev.to_numpy()
    assert back.flags.c_contiguous
    np.testing.assert_array_equal(bits(back), bits(np.ascontiguousarray(view)))


@gpu
def test_copy_from_host_into_a_strided_view():

    buffer = arrays.DeviceArray.empty((8, 16), np.float32)
    buffer.poison()
    every_other = buffer.view((8, 8), (64, 8))
    host = np.arange(64, dtype=np.float32).reshape(8, 8)
    every_other.copy_from_host(host)
    got = buffer.to_numpy()
    np.testing.assert_array_equal(got[:, ::2], host)
    assert np.isnan(got[:, 1::2]).all()
    np.testing.assert_array_equal(every_other.to_numpy(), host)


@gpu
def test_views_keep_their_memory_alive():
    import gc


    host = np.arange(100, dtype=np.float32)
    dense = arrays.DeviceArray.from_numpy(host)
    view = dense.view((50,), (8,))
    del dense
    gc.collect()
    big = [arrays.DeviceArray.empty((100,), np.float32) for _ in range(8)]   # would reuse freed memory
    for b in big:
        b.fill_bytes(0, 4)
    np.testing.assert_array_equal(view.to_numpy(), host[::2])
