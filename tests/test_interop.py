"""Interop without a GPU: what ptxgemm reads from DLPack and __cuda_array_interface__ objects and what it exports.

No device memory is touched here: views are made of made-up device addresses, which is all the protocols carry."""
from __future__ import annotations

import gc

import ml_dtypes
import numpy as np
import pytest

from ptxgemm import ConfigError
from ptxgemm.runtime import arrays, driver, interop
from ptxgemm.runtime.arrays import DeviceArray

ADDRESS = 0x7F00_0000_0000   # a device address nobody dereferences here


class Exported:
    """Stands for another framework's tensor: hands out the capsule a DeviceArray exports."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, stream=None):
        self.stream = stream
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


class CAI:
    def __init__(self, **fields):
        self.__cuda_array_interface__ = {"version": 3, "data": (ADDRESS, False), "strides": None, **fields}


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16, np.float32, ml_dtypes.float8_e4m3fn,
                                   ml_dtypes.float8_e5m2])
@pytest.mark.parametrize("order", ["C", "F"])
def test_dlpack_round_trip_keeps_address_shape_strides_and_dtype(dtype, order):
    itemsize = np.dtype(dtype).itemsize
    strides = (5 * itemsize, itemsize) if order == "C" else (itemsize, 3 * itemsize)
    array = DeviceArray(ADDRESS, (3, 5), dtype, strides, owner=False)
    source = Exported(array)
    view = arrays.as_device_array(source, "a")
    assert (view.ptr, view.shape, view.strides, view.dtype) == (ADDRESS, (3, 5), strides, np.dtype(dtype))
    assert source.stream == 1   # the consumer's stream, DLPack's name for the legacy default stream


def test_an_imported_tensor_is_released_once_and_an_unconsumed_capsule_frees_itself():
    array = DeviceArray(ADDRESS, (4, 4), np.float16, owner=False)
    before = len(interop._exports)
    view = arrays.as_device_array(Exported(array), "b")
    assert len(interop._exports) == before + 1          # alive while the view is
    del view
    gc.collect()
    assert len(interop._exports) == before              # the deleter ran when the view went
    capsule = array.__dlpack__()
    assert len(interop._exports) == before + 1
    del capsule
    gc.collect()
    assert len(interop._exports) == before              # nobody consumed it: its destructor freed it


def test_dlpack_stream_is_the_consumers():
    array = DeviceArray(ADDRESS, (2, 2), np.float16, owner=False)
    source = Exported(array)
    arrays.as_device_array(source, "a", stream=0x1234)
    assert source.stream == 0x1234


def test_host_memory_is_refused_with_the_way_out():
    with pytest.raises(ConfigError, match=r"a: a numpy array lives in host memory; use ptxgemm.run"):
        arrays.as_device_array(np.ones((2, 2), np.float16), "a")

    class HostTensor:   # a CPU tensor of another framework (numpy's own __dlpack__ says the same)
        def __dlpack__(self, stream=None):
            return np.ones((2, 2), np.float16).__dlpack__()

        def __dlpack_device__(self):
            return (interop.KDL_CPU, 0)

    with pytest.raises(ConfigError, match=r"b: a HostTensor on the CPU device; ptxgemm reads CUDA device memory"):
        arrays.as_device_array(HostTensor(), "b")
    with pytest.raises(ConfigError, match=r"out: a list is neither a ptxgemm.DeviceArray nor an object with"):
        arrays.as_device_array([1, 2], "out")


def test_cuda_array_interface_is_read_in_place():
    view = arrays.as_device_array(CAI(shape=(4, 6), typestr="<f2", strides=(2, 8)), "b")
    assert (view.ptr, view.shape, view.strides, view.dtype) == (ADDRESS, (4, 6), (2, 8), np.dtype(np.float16))
    dense = arrays.as_device_array(CAI(shape=(4, 6), typestr="<f2"), "b")
    assert dense.strides == (12, 2) and dense.is_c_contiguous
    with pytest.raises(ConfigError, match="bfloat16 has none there: pass the object through DLPack"):
        arrays.as_device_array(CAI(shape=(2, 2), typestr="<V2"), "a")
    with pytest.raises(ConfigError, match="mask"):
        arrays.as_device_array(CAI(shape=(2, 2), typestr="<f2", mask=object()), "a")


def test_fp8_travels_as_dlpack_float8_codes():
    # torch 2.11 exports float8_e4m3fn as code 10 and float8_e5m2 as code 12 (DLPack 1.1); reversed strides survive
    for dtype, code in ((ml_dtypes.float8_e4m3fn, 10), (ml_dtypes.float8_e5m2, 12)):
        array = DeviceArray(ADDRESS + 14, (3, 5), dtype, (-5, 1), owner=False)
        capsule = array.__dlpack__()
        managed = interop.ctypes.cast(interop._api.PyCapsule_GetPointer(capsule, b"dltensor"),
                                      interop.ctypes.POINTER(interop.DLManagedTensor))
        tensor = managed.contents.dl_tensor
        assert (tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes) == (code, 8, 1)
        assert (tensor.strides[0], tensor.strides[1]) == (-5, 1)
        view = arrays.as_device_array(Exported(array), "a")
        assert (view.ptr, view.strides, view.dtype) == (ADDRESS + 14, (-5, 1), np.dtype(dtype))


def test_device_array_exports_the_cuda_array_interface_for_numpys_own_dtypes_only():
    half = DeviceArray(ADDRESS, (3, 5), np.float16, owner=False)
    assert half.__cuda_array_interface__ == {"shape": (3, 5), "typestr": "<f2", "data": (ADDRESS, False),
                                             "strides": (10, 2), "version": 3, "stream": None}
    # ml_dtypes' types print as '<V2', '<V1' and '<f1' there: a consumer would misread the bytes
    for dtype in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2):
        with pytest.raises(AttributeError, match="use __dlpack__"):
            DeviceArray(ADDRESS, (3, 5), dtype, owner=False).__cuda_array_interface__  # noqa: B018


def test_streams_from_handles_and_protocol_objects():
    class ProtocolStream:
        def __cuda_stream__(self):
            return (0, 0xABC)

    class TorchLike:
        cuda_stream = 0xDEF

    assert driver.stream_handle(None) == 0 and driver.stream_handle(77) == 77
    assert driver.stream_handle(ProtocolStream()) == 0xABC and driver.stream_handle(TorchLike()) == 0xDEF
    with pytest.raises(ConfigError, match="stream: a str is not a stream"):
        driver.stream_handle("default")
    with pytest.raises(ConfigError, match="bool"):
        driver.stream_handle(True)


class BrokenNegativeStrides(Exported):
    """A producer that writes a negative element stride as unsigned (CuPy's DLPack export did: -4 -> 2**63 - 4),
    with a correct __cuda_array_interface__ beside it, or without one."""

    def __init__(self, array, with_cai: bool):
        super().__init__(array)
        if with_cai:
            self.__cuda_array_interface__ = {"version": 3, "data": (array.ptr, False), "shape": array.shape,
                                             "typestr": "<f2", "strides": array.strides}

    def __dlpack__(self, stream=None):
        capsule = self.array.__dlpack__()
        managed = interop.ctypes.cast(interop._api.PyCapsule_GetPointer(capsule, b"dltensor"),
                                      interop.ctypes.POINTER(interop.DLManagedTensor))
        tensor = managed.contents.dl_tensor
        assert tensor.strides[0] == -4
        tensor.strides[0] = 2 ** 63 - 4   # (2**64 - 8 bytes) // 2, unsigned
        return capsule


def test_a_negative_stride_exported_as_unsigned_is_read_through_the_array_interface():
    array = DeviceArray(ADDRESS + 16, (3, 4), np.float16, (-8, 2), owner=False)
    view = arrays.as_device_array(BrokenNegativeStrides(array, with_cai=True), "a")
    assert (view.ptr, view.shape, view.strides) == (ADDRESS + 16, (3, 4), (-8, 2))
    with pytest.raises(ConfigError, match=r"^a: the DLPack tensor's strides .* reach past a 64-bit address space"):
        arrays.as_device_array(BrokenNegativeStrides(array, with_cai=False), "a")
