"""The strided relayout kernel on the GPU: random bit patterns copied between random layouts (transposed, reversed,
stepped, broadcast, batched, odd extents) into dense, column-major and padded destinations, compared bit for bit
with numpy; every destination is poisoned first and checked whole, so an element written twice, out of place or
not at all cannot pass. Also fill_zero, 64-bit strides and a bandwidth line for the report."""
from __future__ import annotations

import ctypes
import zlib

import ml_dtypes
import numpy as np
import pytest

from ptxgemm.runtime import arrays, relayout

gpu = pytest.mark.gpu
DTYPES = [ml_dtypes.bfloat16, np.float16, np.float32]
POISON_BITS = {2: 0x7FFF, 4: 0x7FFFFFFF}   # what DeviceArray.poison() writes for float dtypes


def bits_of(dtype):
    return np.dtype(f"u{np.dtype(dtype).itemsize}")


def random_values(shape, dtype, rng):
    """Any bit pattern, NaN payloads and signalling NaNs included: a raw copy must carry them unchanged."""
    itemsize = np.dtype(dtype).itemsize
    return rng.integers(0, 1 << (8 * itemsize), size=shape, dtype=bits_of(dtype)).view(dtype)


# name -> (shape of the dense host buffer, the view of it to copy from)
SOURCES = {
    "1d-one": ((1,), lambda x: x),
    "1d-7-reversed": ((7,), lambda x: x[::-1]),
    "1d-1001-stepped": ((3003,), lambda x: x[1::3]),
    "2d-transposed": ((1001, 7), lambda x: x.T),
    "2d-reversed-stepped": ((64, 1001), lambda x: x[::-1, ::2]),
    "2d-broadcast-row": ((1001,), lambda x: np.broadcast_to(x, (7, 1001))),
    "2d-broadcast-column": ((7,), lambda x: np.broadcast_to(x[:, None], (7, 1001))),
    "2d-broadcast-scalar": ((1,), lambda x: np.broadcast_to(x, (33, 65))),
    "3d-batched-permuted": ((33, 3, 65), lambda x: x.transpose(1, 2, 0)),
    "3d-batched-negative": ((5, 40, 70), lambda x: x[::-2, :, ::-1]),
    "3d-batch-broadcast": ((40, 70), lambda x: np.broadcast_to(x, (4, 40, 70))),
    "3d-ones": ((1, 7, 1), lambda x: x),
    "3d-column-of-ones": ((1001, 1, 1), lambda x: x[::-1]),
    "2d-large-transposed": ((1536, 2048), lambda x: x.T),
}
PAD = 5   # elements of padding after each destination row


def destination(kind, shape, dtype):
    """(device buffer, poisoned; device view to write; host buffer of the same poison; host view of it)."""

    itemsize = np.dtype(dtype).itemsize
    if kind == "padded":
        buf_shape = shape[:-1] + (shape[-1] + PAD,)
    else:
        buf_shape = shape
    buffer = arrays.DeviceArray.empty(buf_shape, dtype)
    buffer.poison()
    host = np.full(buf_shape, POISON_BITS[itemsize], bits_of(dtype)).view(dtype)
    if kind == "c":
        return buffer, buffer.view(shape), host, host
    if kind == "f":
        host_view = np.asfortranarray(host)
        return buffer, buffer.view(shape, host_view.strides), host_view, host_view
    host_view = host[..., :shape[-1]]
    return buffer, buffer.view(shape, host_view.strides), host, host_view


def upload_view(host_buffer, host_view, dtype):
    """The device twin of a numpy view: the dense buffer uploaded, and a DeviceArray view with the same offset and
    byte strides into it."""

    dense = arrays.DeviceArray.from_numpy(host_buffer)
    offset = host_view.ctypes.data - host_buffer.ctypes.data
    return dense.view(host_view.shape, host_view.strides, offset=offset, dtype=dtype)


@gpu
@pytest.mark.parametrize("dst_kind", ["c", "f", "padded"])
@pytest.mark.parametrize("source", list(SOURCES))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_copy_matches_numpy_bit_for_bit(dtype, source, dst_kind):
    rng = np.random.default_rng(zlib.crc32(f"{np.dtype(dtype).name} {source} {dst_kind}".encode()))
    buf_shape, make_view = SOURCES[source]
    host_src = random_values(buf_shape, dtype, rng)
    host_view = make_view(host_src)
    src = upload_view(host_src, host_view, dtype)
    shape = host_view.shape
    buffer, dst, expected, expected_view = destination(dst_kind, shape, dtype)
    expected_view[...] = host_view

    relayout.copy(dst.ptr, dst.strides, src.ptr, src.strides, shape, np.dtype(dtype).itemsize)

    # the whole destination buffer in memory order: written elements and untouched padding alike
    got = buffer.to_numpy().view(bits_of(dtype)).ravel()
    want = expected.view(bits_of(dtype)).ravel(order="K")
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, (f"{bad.size} of {got.size} destination elements differ (first at byte offset "
                           f"{bad[0] * got.itemsize}: got 0x{int(got[bad[0]]):x}, want 0x{int(want[bad[0]]):x})")


@gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_copy_on_a_stream_between_arrays_allocated_there(dtype):
    from ptxgemm.runtime import driver

    rng = np.random.default_rng(11)
    stream = driver.Stream()
    host = random_values((3, 257, 129), dtype, rng)
    src = arrays.DeviceArray.from_numpy(host, stream=stream)
    dst = arrays.DeviceArray.empty((129, 3, 257), dtype, stream=stream)   # (c, l, r): a permuted copy
    dst.poison()
    view = src.view((129, 3, 257), (src.strides[2], src.strides[0], src.strides[1]))
    relayout.copy(dst.ptr, dst.strides, view.ptr, view.strides, dst.shape, np.dtype(dtype).itemsize, stream)
    stream.synchronize()
    got = dst.to_numpy().view(bits_of(dtype))
    np.testing.assert_array_equal(got, np.ascontiguousarray(host.transpose(2, 0, 1)).view(bits_of(dtype)))


@gpu
def test_copy_array_merges_five_dimensions():

    rng = np.random.default_rng(5)
    host = random_values((2, 3, 4, 5, 6), np.float32, rng)
    view = host[:, ::-1]                     # five dimensions that merge into three: (2, 3, 4 * 5 * 6)
    src = upload_view(host, view, np.float32)
    dst = arrays.DeviceArray.empty(view.shape, np.float32)
    dst.poison()
    relayout.copy_array(dst, src)
    np.testing.assert_array_equal(dst.to_numpy().view(np.uint32), np.ascontiguousarray(view).view(np.uint32))


@gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_fill_zero_writes_only_the_view(dtype):

    itemsize = np.dtype(dtype).itemsize
    buffer = arrays.DeviceArray.empty((3, 37, 50), dtype)
    buffer.poison()
    view = buffer.view((3, 37, 25), (37 * 50 * itemsize, 50 * itemsize, 2 * itemsize), offset=itemsize)
    relayout.fill_zero(view.ptr, view.strides, view.shape, itemsize)
    got = buffer.to_numpy().view(bits_of(dtype))
    assert (got[..., 1::2] == 0).all()
    assert (got[..., 0::2] == POISON_BITS[itemsize]).all()


@gpu
def test_strides_beyond_32_bits():
    """Rows 2^33 bytes apart, read forwards and backwards: any 32-bit address arithmetic would land elsewhere."""
    from ptxgemm.runtime import driver

    far = 1 << 33
    big = arrays.DeviceArray.empty((far + 64,), np.uint8)
    rows = np.arange(8, dtype=np.float32).reshape(2, 4) + 1
    try:
        for r in range(2):
            big.view((4,), offset=r * far, dtype=np.float32).copy_from_host(rows[r])
        # dst rows at offsets 32 and 2^33 + 32, src rows reversed (stride -2^33)
        dst = big.view((2, 4), (far, 4), offset=32, dtype=np.float32)
        relayout.copy(dst.ptr, dst.strides, big.ptr + far, (-far, 4), (2, 4), 4)
        for r in range(2):
            got = big.view((4,), offset=r * far + 32, dtype=np.float32).to_numpy()
            np.testing.assert_array_equal(got, rows[1 - r])
        # and a small dense destination gathering both rows through a 3-D walk (batch stride 2^33 as well)
        out = arrays.DeviceArray.empty((2, 2, 2), np.float32)
        relayout.copy(out.ptr, out.strides, big.ptr, (far, 8, 4), (2, 2, 2), 4)
        np.testing.assert_array_equal(out.to_numpy(), rows.reshape(2, 2, 2))
    finally:
        big.free()
        driver.synchronize()
        driver.trim_memory_pool()


@gpu
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_bandwidth_report(layout, device_report):
    from ptxgemm.runtime import driver

    n = 8192
    src = arrays.DeviceArray.empty((n, n), ml_dtypes.bfloat16)
    dst = arrays.DeviceArray.empty((n, n), ml_dtypes.bfloat16)
    src_strides = src.strides if layout == "contiguous" else src.strides[::-1]
    copy = lambda: relayout.copy(dst.ptr, dst.strides, src.ptr, src_strides, (n, n), 2)  # noqa: E731
    copy()
    start, end = driver.Event(), driver.Event()
    reps = 10
    start.record()
    for _ in range(reps):
        copy()
    end.record()
    ms = start.elapsed_ms(end) / reps
    gbs = 2 * n * n * 2 / (ms * 1e-3) / 1e9
    line = f"relayout {layout} {n}x{n} bf16: {ms * 1e3:.0f} us, {gbs:.0f} GB/s (read + write)"
    print(line)
    device_report(line)
    assert gbs > 0


@gpu
def test_kernel_args_are_what_the_template_declares():
    from ptxgemm.runtime import driver

    kernel = relayout.get_kernel(2)
    wide, grid, args = relayout.launch_parameters(0x1000, (2,), 0x2000, (2,), (10,), 2,
                                                  driver.device_info().sm_count)
    assert (wide, grid) == (4, 1) and len(args) == relayout.relayout_ptx(2).count(".param ")
    assert all(isinstance(a, (ctypes.c_uint64, ctypes.c_int64)) for a in args)
    assert kernel.zero_ptr != 0 and relayout.get_kernel(2) is kernel
