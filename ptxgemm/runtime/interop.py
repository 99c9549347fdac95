"""The two array protocols every framework speaks, read and written without importing one: DLPack and
__cuda_array_interface__. This module deals in plain descriptions of device memory (`Foreign`: address, shape,
byte strides, dtype, and what keeps the memory alive); it knows no array class of its own.

    read_foreign(obj, name, stream)   the memory behind anything with __dlpack__ (torch, CuPy, JAX; bfloat16 and
                                      fp8 too, as DLPack's bfloat and float8 types) or __cuda_array_interface__
                                      (CuPy, Numba; numpy's own dtypes), never a copy, with the device DLPack
                                      names (the interface names none)
    export_dlpack(array)              a 'dltensor' capsule for anything with ptr, shape, strides and dtype
    cuda_array_interface(array)       its __cuda_array_interface__ dict

ptxgemm's DeviceArray (ptxgemm.runtime.arrays) wraps `read_foreign` in `as_device_array` and exports both protocols
through the other two, so torch.from_dlpack(c) or cupy.from_dlpack(c) take a result without a copy.

DLPack's C structs are read and written with ctypes; the capsule protocol is followed to the letter: a consumed
"dltensor" capsule is renamed "used_dltensor" and its deleter is called once the view is no longer referenced; an
exported capsule that nobody consumes calls our deleter when it is garbage-collected.
"""
from __future__ import annotations

import ctypes
import dataclasses

import numpy as np

from ..errors import ConfigError
from .driver import check, cu, stream_handle

# --- DLPack (v0.8 ABI, the unversioned "dltensor" capsule every framework still accepts and produces) ----------

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13
KDL_INT, KDL_UINT, KDL_FLOAT, KDL_BFLOAT = 0, 1, 2, 4
KDL_FLOAT8_E4M3FN, KDL_FLOAT8_E5M2 = 10, 12   # DLPack 1.1: torch 2.11 exports fp8 tensors with these
DEVICE_NAMES = {1: "CPU", 2: "CUDA", 3: "CUDA host (pinned)", 4: "OpenCL", 7: "Vulkan", 8: "Metal", 10: "ROCm",
                13: "CUDA managed"}
# (type code, bits) <-> numpy dtype name; bfloat16 and the fp8 types are ml_dtypes' numpy types
_DL_TO_NAME = {(KDL_FLOAT, 16): "float16", (KDL_FLOAT, 32): "float32", (KDL_FLOAT, 64): "float64",
               (KDL_BFLOAT, 16): "bfloat16", (KDL_INT, 8): "int8", (KDL_INT, 32): "int32", (KDL_UINT, 8): "uint8",
               (KDL_FLOAT8_E4M3FN, 8): "float8_e4m3fn", (KDL_FLOAT8_E5M2, 8): "float8_e5m2"}
# numpy's own types, the only ones __cuda_array_interface__'s typestr names unambiguously: ml_dtypes' types print
# as '<V2' (bfloat16), '<V1' (e4m3fn) or even '<f1' (e5m2), which a consumer would misread
_CAI_NAMES = frozenset({"float16", "float32", "float64", "int8", "int32", "uint8"})
_NAME_TO_DL = {v: k for k, v in _DL_TO_NAME.items()}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]

# A capsule destructor runs while the capsule's reference count is zero: it must see a bare pointer, never a
# py_object (which would take a new reference to a dying object), so it has its own raw-pointer API functions.
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_api = ctypes.pythonapi
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _CAPSULE_DESTRUCTOR]
_raw_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_raw_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))

_USED_NAME = ctypes.c_char_p(b"used_dltensor")  # PyCapsule_SetName keeps the pointer: the bytes must outlive it


class _ImportedTensor:
    """Owns a consumed DLManagedTensor: calls the producer's deleter when the last view of it goes away."""

    def __init__(self, managed_ptr: int):
        self.managed = ctypes.cast(managed_ptr, ctypes.POINTER(DLManagedTensor))

    def __del__(self):
        deleter = self.managed.contents.deleter
        if deleter:
            deleter(self.managed)


@dataclasses.dataclass(frozen=True)
class Foreign:
    """Device memory another framework owns: where it is, how it is laid out, on which device, and what keeps it
    alive (the producer's object, and for DLPack the consumed tensor whose deleter runs when this goes)."""

    ptr: int
    shape: tuple[int, ...]
    dtype: np.dtype
    strides: tuple[int, ...] | None   # bytes; None: compact row-major
    keepalive: object
    device: int | None = None         # the CUDA ordinal DLPack names; None: the protocol names none (the interface)


def _from_dlpack(obj, name: str, stream_for_producer) -> Foreign:
    device_type, _ = obj.__dlpack_device__() if hasattr(obj, "__dlpack_device__") else (None, None)
    if device_type is not None and device_type not in (KDL_CUDA, KDL_CUDA_MANAGED):
        raise ConfigError(f"{name}: a {type(obj).__name__} on the {DEVICE_NAMES.get(device_type, device_type)} "
                          f"device; ptxgemm reads CUDA device memory (move it to the GPU first, or use ptxgemm.run "
                          f"for numpy arrays)")
    try:
        capsule = obj.__dlpack__(stream=stream_for_producer)
    except TypeError:  # an older producer without the stream keyword
        capsule = obj.__dlpack__()
    if not _api.PyCapsule_IsValid(capsule, b"dltensor"):
        raise ConfigError(f"{name}: __dlpack__ did not return an unconsumed 'dltensor' capsule")
    managed_ptr = _api.PyCapsule_GetPointer(capsule, b"dltensor")
    _api.PyCapsule_SetName(capsule, _USED_NAME)  # ours now: the producer's capsule destructor must not free it
    owner = _ImportedTensor(managed_ptr)
    t = owner.managed.contents.dl_tensor
    if t.device.device_type not in (KDL_CUDA, KDL_CUDA_MANAGED):
        raise ConfigError(f"{name}: a DLPack tensor on the {DEVICE_NAMES.get(t.device.device_type, t.device.device_type)}"
                          f" device; ptxgemm reads CUDA device memory")
    key = (t.dtype.code, t.dtype.bits)
    if t.dtype.lanes != 1 or key not in _DL_TO_NAME:
        raise ConfigError(f"{name}: DLPack dtype (code {t.dtype.code}, {t.dtype.bits} bits, {t.dtype.lanes} lanes) "
                          f"has no ptxgemm equivalent")
    dtype = np.dtype(_DL_TO_NAME[key])  # 'bfloat16' is registered: ptxgemm imports ml_dtypes (gemm.py)
    shape = tuple(t.shape[i] for i in range(t.ndim))
    if t.strides:
        strides = tuple(t.strides[i] * dtype.itemsize for i in range(t.ndim))  # DLPack counts elements
        if not _addressable(shape, strides):
            # CuPy (the device's, 2026) exports a negative stride as an unsigned element count: -4 arrives as
            # 2**63 - 4. Its __cuda_array_interface__ describes the same memory correctly, so read that instead.
            if hasattr(obj, "__cuda_array_interface__"):
                return _from_cuda_array_interface(obj, name)
            raise ConfigError(f"{name}: the DLPack tensor's strides {tuple(t.strides[i] for i in range(t.ndim))} "
                              f"(elements) reach past a 64-bit address space for shape {shape}: the producer "
                              f"exported them wrongly (negative strides?); pass a contiguous copy")
    else:
        strides = None  # compact row-major
    return Foreign(int(t.data or 0) + int(t.byte_offset), shape, dtype, strides, (owner, obj), int(t.device.device_id))


def _addressable(shape, byte_strides) -> bool:
    """Whether every element of `shape` with these byte strides lies within 2**63 bytes of the first: what any real
    tensor satisfies, and a stride exported as an unsigned number breaks."""
    reach = sum(abs(s) * (n - 1) for n, s in zip(shape, byte_strides) if n > 1)
    return 0 in shape or reach < 2 ** 63


def _from_cuda_array_interface(obj, name: str) -> Foreign:
    cai = obj.__cuda_array_interface__
    if cai.get("mask") is not None:
        raise ConfigError(f"{name}: __cuda_array_interface__ with a mask is not supported")
    typestr = cai["typestr"]
    try:
        dtype = np.dtype(typestr)
    except TypeError as e:
        raise ConfigError(f"{name}: __cuda_array_interface__ typestr {typestr!r} is not a numpy dtype") from e
    if dtype.kind == "V":
        raise ConfigError(f"{name}: __cuda_array_interface__ typestr {typestr!r} names no numeric type (bfloat16 has "
                          f"none there: pass the object through DLPack, its __dlpack__, instead)")
    ptr, _readonly = cai["data"]
    shape = tuple(int(s) for s in cai["shape"])
    strides = tuple(int(s) for s in cai["strides"]) if cai.get("strides") is not None else None
    stream = cai.get("stream")
    if stream not in (None, 0, 1, 2):
        # v3: the producer's work on `stream` must come first. Waiting for it here is correct for every consumer
        # stream and costs a host wait only when that stream is still busy.
        check(cu.cuStreamSynchronize(cu.CUstream(int(stream))), f"waiting for {name}'s producer stream")
    return Foreign(int(ptr or 0), shape, dtype, strides, obj)


def read_foreign(obj, name: str, stream=None) -> Foreign | None:
    """The device memory behind `obj`, read through __dlpack__ or else __cuda_array_interface__ (never a copy);
    None when `obj` speaks neither protocol. `stream`: where the consumer will use it (the producer orders its
    work before that stream)."""
    if hasattr(obj, "__dlpack__"):
        # DLPack's stream argument: the stream the consumer will use, 1 meaning the legacy default stream (0 is
        # ambiguous there), which is where ptxgemm launches without a stream
        handle = stream_handle(stream)
        return _from_dlpack(obj, name, 1 if handle == 0 else handle)
    if hasattr(obj, "__cuda_array_interface__"):
        return _from_cuda_array_interface(obj, name)
    return None


# --- exporting device memory ------------------------------------------------------------------------------------

_exports: dict[int, tuple] = {}  # managed tensor address -> what must stay alive until its deleter runs


@_DELETER
def _export_deleter(managed):
    _exports.pop(ctypes.addressof(managed.contents), None)


@_CAPSULE_DESTRUCTOR
def _capsule_destructor(capsule):
    # only an unconsumed capsule frees its tensor; a consumer renamed it and calls the deleter itself
    if _raw_is_valid(capsule, b"dltensor"):
        managed = ctypes.cast(_raw_get_pointer(capsule, b"dltensor"), ctypes.POINTER(DLManagedTensor))
        managed.contents.deleter(managed)


def export_dlpack(array) -> object:
    """A 'dltensor' capsule viewing `array` (anything with ptr, shape, byte strides, dtype and device, its CUDA
    ordinal: a DeviceArray); the array stays alive until the consumer is done."""
    name = array.dtype.name
    if name not in _NAME_TO_DL:
        raise ConfigError(f"__dlpack__: dtype {name} has no DLPack type here")
    code, bits = _NAME_TO_DL[name]
    ndim = len(array.shape)
    shape = (ctypes.c_int64 * max(ndim, 1))(*array.shape)
    strides = (ctypes.c_int64 * max(ndim, 1))(*(s // array.dtype.itemsize for s in array.strides))
    managed = DLManagedTensor()
    managed.dl_tensor = DLTensor(ctypes.c_void_p(array.ptr), DLDevice(KDL_CUDA, array.device), ndim,
                                 DLDataType(code, bits, 1), shape, strides, 0)
    managed.deleter = _export_deleter
    _exports[ctypes.addressof(managed)] = (managed, shape, strides, array)
    return _api.PyCapsule_New(ctypes.addressof(managed), b"dltensor", _capsule_destructor)


def cuda_array_interface(array) -> dict:
    """__cuda_array_interface__ (version 3) of a device array (ptr, shape, byte strides, dtype). The protocol has no
    device field: a consumer finds the device from the pointer (cuPointerGetAttribute), as ptxgemm does. bfloat16 and
    the fp8 types have no typestr in that protocol: it raises, naming DLPack, rather than exporting bytes a consumer
    would misread."""
    if array.dtype.name not in _CAI_NAMES:
        raise AttributeError(f"__cuda_array_interface__: {array.dtype.name} has no typestr in this protocol; use "
                             f"__dlpack__ (torch.from_dlpack / cupy.from_dlpack)")
    return {"shape": tuple(array.shape), "typestr": array.dtype.str, "data": (array.ptr, False),
            "strides": tuple(array.strides), "version": 3, "stream": None}
