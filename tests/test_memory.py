"""DeviceArray without a GPU: the byte span of a strided layout, contiguity by numpy's rule, views and their base,
and zero-size arrays (which own no memory, so every method works on them without a device)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ptxgemm.errors import ConfigError
from ptxgemm.runtime import driver
from ptxgemm.runtime.arrays import DeviceArray, byte_span

try:
    from numpy.lib.array_utils import byte_bounds
except ImportError:  # numpy < 2
    byte_bounds = np.byte_bounds

ADDRESS = 0x7F00_0000_0000   # a made-up device address nobody dereferences here

BASE = np.arange(7 * 11 * 13, dtype=np.float32).reshape(7, 11, 13)
VIEWS = {
    "dense": BASE,
    "transposed": BASE.transpose(2, 0, 1),
    "reversed": BASE[::-1],
    "reversed-inner": BASE[:, :, ::-1],
    "stepped": BASE[:, ::3, 1::2],
    "mixed-signs": BASE[::-2, 3:, ::-4],
    "broadcast": np.broadcast_to(BASE[0, 0], (5, 4, 13)),
    "broadcast-reversed": np.broadcast_to(BASE[0, :, 0][::-1, None], (11, 9)),
    "scalar": BASE[2, 3, 4],
    "one-element": BASE[2:3, 3:4, 4:5],
}


@pytest.mark.parametrize("name", list(VIEWS))
def test_byte_span_matches_numpy(name):
    view = np.asarray(VIEWS[name])
    low, nbytes = byte_span(view.shape, view.strides, view.itemsize)
    lo, hi = byte_bounds(view)
    assert (low, nbytes) == (lo - view.ctypes.data, hi - lo)


def test_byte_span_rules():
    assert byte_span((5,), (-4,), 4) == (-16, 20)
    assert byte_span((3, 4), (0, 4), 4) == (0, 16)
    assert byte_span((3, 4), (0, 0), 2) == (0, 2)
    assert byte_span((), (), 8) == (0, 8)
    assert byte_span((3, 0, 5), (-100, 20, 4), 4) == (0, 0)
    assert byte_span((2, 3), (1 << 40, -(1 << 33)), 2) == (-(2 << 33), (1 << 40) + (2 << 33) + 2)
    with pytest.raises(ConfigError, match="strides: one per dimension of shape"):
        byte_span((2, 3), (4,), 4)


@pytest.mark.parametrize("shape, strides, c, f", [
    ((3, 4), (16, 4), True, False),
    ((3, 4), (4, 12), False, True),
    ((1, 4), (999, 4), True, True),       # an extent-1 dimension's stride never counts
    ((4, 1), (4, -8), True, True),
    ((1, 1), (0, 0), True, True),
    ((5,), (4,), True, True),
    ((5,), (-4,), False, False),
    ((3, 4), (32, 4), False, False),      # padded rows
    ((3, 4), (0, 4), False, False),       # broadcast
    ((0, 4), (0, 0), True, True),         # zero-size: contiguous, as numpy says
    ((2, 1, 3), (12, 1, 4), True, False),
])
def test_contiguity_follows_numpys_rule(shape, strides, c, f):
    a = DeviceArray(ADDRESS, shape, np.float32, strides, owner=False)
    assert (a.is_c_contiguous, a.is_f_contiguous) == (c, f)
    if 0 not in shape:  # the same verdicts as numpy for the same header
        host = np.lib.stride_tricks.as_strided(np.zeros(64, np.float32)[32:], shape, strides)
        assert (host.flags.c_contiguous, host.flags.f_contiguous) == (c, f)


def test_view_keeps_its_base_and_offsets_in_bytes():
    a = DeviceArray(ADDRESS, (8, 16), np.float16, owner=False)
    v = a.view((16, 8), (2, 32), offset=64)
    assert (v.ptr, v.shape, v.strides, v.dtype) == (ADDRESS + 64, (16, 8), (2, 32), np.dtype(np.float16))
    assert v.base is a and v.nbytes == 16 * 8 * 2
    w = v.view((4,), (-2,), offset=6, dtype=np.uint16)
    assert w.base is a                         # a view of a view keeps the memory's owner, as numpy does
    assert (w.ptr, w.dtype) == (ADDRESS + 70, np.dtype(np.uint16))
    assert v.view((2, 4)).strides == (8, 2)    # default strides: C order
    assert "view" in repr(w)
    w.free()                                   # a view frees nothing
    assert w.ptr == ADDRESS + 70


def test_zero_size_arrays_need_no_memory_and_no_device():
    for shape, order in (((0,), "C"), ((3, 0), "C"), ((0, 5, 2), "F")):
        a = DeviceArray.empty(shape, ml_dtypes.bfloat16, order=order)
        assert a.ptr == 0 and a.nbytes == 0 and a.shape == shape
        back = a.to_numpy()
        assert back.shape == shape and back.dtype == np.dtype(ml_dtypes.bfloat16)
        a.poison()
        a.fill_bytes(0, 4)
        a.copy_from_host(np.zeros(shape, ml_dtypes.bfloat16))
        a.free()
    host = np.zeros((4, 0), np.float32)[:, ::2]
    up = DeviceArray.from_numpy(host)
    assert up.ptr == 0 and up.shape == (4, 0) and up.nbytes == 0
    assert up.to_numpy().shape == (4, 0)
    assert up.view((0, 4)).ptr == 0


def test_arguments_are_checked_before_the_gpu():
    with pytest.raises(ConfigError, match="order: must be 'C' .* or 'F' .*, got 'K'"):
        DeviceArray.empty((2, 2), np.float32, order="K")
    with pytest.raises(ConfigError, match=r"shape: extents must be >= 0, got \(2, -1\)"):
        DeviceArray.empty((2, -1), np.float32)
    strided = DeviceArray(ADDRESS, (4, 4), np.float32, (32, 4), owner=False)
    with pytest.raises(ConfigError, match=r"fill_bytes: this array .* is not one dense block; fill the array it "
                                          r"views \(its .base\), or use relayout.fill_zero"):
        strided.poison()
    with pytest.raises(ConfigError, match="width: a fill pattern is 1, 2 or 4 bytes, got 8"):
        DeviceArray(ADDRESS, (4,), np.float64, owner=False).fill_bytes(0, 8)


def test_stream_of_a_view_is_its_bases():
    a = DeviceArray(ADDRESS, (4,), np.float32, owner=False)
    a._stream = "s"
    assert a.view((2,), (8,)).stream == "s"
    assert DeviceArray(ADDRESS, (4,), np.float32, owner=False).stream is None


def test_pool_release_threshold_keeps_everything():
    assert driver.POOL_RELEASE_THRESHOLD == 2**64 - 1
