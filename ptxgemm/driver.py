"""The CUDA driver, through cuda-python's `cuda.bindings.driver`: context, modules, launches, events, memory.

Every driver call goes through `check`, which raises `CudaError` carrying the CUresult name and what ptxgemm was
doing. Nothing here imports torch. The primary context of device 0 is retained lazily, on first use, so that
`import ptxgemm` works on a machine without a GPU.

Device memory comes from a private stream-ordered pool (`memory_pool`): `DeviceArray.empty(..., stream=)` and
`free` are cuMemAllocFromPoolAsync / cuMemFreeAsync on the array's stream, so no allocation or free waits for the
GPU, and freed blocks are reused instead of being returned to the driver at every synchronize.
"""
from __future__ import annotations

import ctypes
import dataclasses
import functools
import math
import threading

import numpy as np

from .errors import ConfigError, CudaError, NoGpuError

try:
    from cuda.bindings import driver as cu
except ImportError as _e:  # pragma: no cover - cuda-bindings is a hard dependency, but say it clearly
    cu = None
    _IMPORT_ERROR = _e
else:
    _IMPORT_ERROR = None


def _err_name(err) -> str:
    try:
        res, name = cu.cuGetErrorName(err)
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # noqa: BLE001 - never mask the original failure
        return str(err)


def _err_string(err) -> str:
    try:
        res, text = cu.cuGetErrorString(err)
        return text.decode() if isinstance(text, bytes) else str(text)
    except Exception:  # noqa: BLE001
        return ""


def check(result, operation: str):
    """Unpack a cuda.bindings result tuple `(CUresult, *values)`; raise CudaError(name, operation) on failure."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise CudaError(_err_name(err), operation, _err_string(err))
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


# --------------------------------------------------------------------------------------------------------------
# Device and context
# --------------------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    ordinal: int
    name: str
    compute_capability: tuple[int, int]
    sm_count: int
    l2_bytes: int
    max_smem_per_block_optin: int
    clock_khz: int
    driver_version: int  # e.g. 13000 for CUDA 13.0

    @property
    def driver_version_str(self) -> str:
        return f"{self.driver_version // 1000}.{(self.driver_version % 1000) // 10}"


class _Context:
    """The retained primary context of one device, made current on the calling thread."""

    _lock = threading.Lock()

    def __init__(self, ordinal: int = 0):
        if cu is None:
            raise NoGpuError("CUDA_ERROR_NOT_INITIALIZED", "importing cuda.bindings", str(_IMPORT_ERROR))
        try:
            check(cu.cuInit(0), "initialising the CUDA driver (cuInit)")
        except CudaError as e:
            raise NoGpuError(e.name, "initialising the CUDA driver (cuInit)") from e
        except Exception as e:  # libcuda.so missing: cuda.pathfinder raises its own error
            raise NoGpuError("CUDA_ERROR_NO_DEVICE", "loading the CUDA driver library (libcuda.so)", str(e)) from e
        count = check(cu.cuDeviceGetCount(), "counting CUDA devices")
        if count <= ordinal:
            raise NoGpuError("CUDA_ERROR_NO_DEVICE", f"opening CUDA device {ordinal}", f"{count} device(s) present")
        self.device = check(cu.cuDeviceGet(ordinal), f"getting CUDA device {ordinal}")
        self.context = check(cu.cuDevicePrimaryCtxRetain(self.device), "retaining the primary context")
        self.info = self._query(ordinal)
        self.make_current()

    def make_current(self):
        check(cu.cuCtxSetCurrent(self.context), "making the primary context current")

    def _attr(self, attr, what):
        return check(cu.cuDeviceGetAttribute(attr, self.device), f"reading the device attribute {what}")

    def _query(self, ordinal: int) -> DeviceInfo:
        A = cu.CUdevice_attribute
        name = check(cu.cuDeviceGetName(256, self.device), "reading the device name")
        name = name.split(b"\0", 1)[0].decode() if isinstance(name, bytes) else str(name)
        return DeviceInfo(
            ordinal=ordinal,
            name=name,
            compute_capability=(self._attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "cc major"),
                                self._attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "cc minor")),
            sm_count=self._attr(A.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "multiprocessor count"),
            l2_bytes=self._attr(A.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "L2 size"),
            max_smem_per_block_optin=self._attr(A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                                "max shared memory per block (opt-in)"),
            clock_khz=self._attr(A.CU_DEVICE_ATTRIBUTE_CLOCK_RATE, "clock rate"),
            driver_version=check(cu.cuDriverGetVersion(), "reading the driver version"),
        )


_ctx: _Context | None = None


def context() -> _Context:
    """The process-wide primary context of device 0 (created on first use), current on this thread."""
    global _ctx
    with _Context._lock:
        if _ctx is None:
            _ctx = _Context(0)
        else:
            _ctx.make_current()
    return _ctx


def device_info() -> DeviceInfo:
    return context().info


def device_available() -> bool:
    """True when a CUDA device can be opened. Never raises."""
    try:
        context()
        return True
    except Exception:  # noqa: BLE001
        return False


def no_device_reason() -> str | None:
    """Why no device can be used, or None when one can."""
    try:
        context()
        return None
    except Exception as e:  # noqa: BLE001
        return str(e)


def require_sm90(what: str) -> DeviceInfo:
    """The device, checked to be a Hopper (sm_90); raises NoGpuError naming `what` otherwise."""
    info = device_info()
    if info.compute_capability != (9, 0):
        cc = "%d.%d" % info.compute_capability
        raise NoGpuError("CUDA_ERROR_NO_BINARY_FOR_GPU", what,
                         f"{info.name} is sm_{cc.replace('.', '')}; ptxgemm's kernels are sm_90a (Hopper) only")
    return info


def synchronize(what: str = "waiting for the GPU (cuCtxSynchronize)"):
    context()
    check(cu.cuCtxSynchronize(), what)


# --------------------------------------------------------------------------------------------------------------
# Modules and functions
# --------------------------------------------------------------------------------------------------------------

class Function:
    def __init__(self, handle, name: str, module: "Module"):
        self.handle = handle
        self.name = name
        self.module = module  # keeps the module loaded while the function is in use

    def set_max_dynamic_smem(self, nbytes: int):
        check(cu.cuFuncSetAttribute(self.handle,
                                    cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes),
              f"allowing {nbytes} bytes of dynamic shared memory for {self.name}")

    def attribute(self, attr: str) -> int:
        return check(cu.cuFuncGetAttribute(getattr(cu.CUfunction_attribute, attr), self.handle),
                     f"reading {attr} of {self.name}")


class Module:
    """A loaded module. `image` is a cubin, or NUL-terminated PTX that the driver JIT-compiles."""

    def __init__(self, image: bytes, what: str = "module"):
        context()
        # A trailing NUL (harmless after a cubin) ends raw PTX for the driver's JIT; kept alive with the module.
        self._image = ctypes.create_string_buffer(image)
        self.what = what
        self.handle = check(cu.cuModuleLoadData(ctypes.addressof(self._image)), f"loading the {what}")
        self._functions: dict[str, Function] = {}

    def function(self, name: str) -> Function:
        if name not in self._functions:
            h = check(cu.cuModuleGetFunction(self.handle, name.encode()), f"finding kernel {name!r} in the {self.what}")
            self._functions[name] = Function(h, name, self)
        return self._functions[name]

    def global_address(self, name: str) -> int:
        """The device address of the module's `.global` variable `name`."""
        ptr, _size = check(cu.cuModuleGetGlobal(self.handle, name.encode()),
                           f"finding the global {name!r} in the {self.what}")
        return int(ptr)

    def unload(self):
        if self.handle is not None:
            check(cu.cuModuleUnload(self.handle), f"unloading the {self.what}")
            self.handle = None


def load_module(kernel, what: str = "module") -> Module:
    """Load a CompiledKernel (cubin, or PTX for the JIT when no ptxas was found) or raw image bytes."""
    image = kernel.image() if hasattr(kernel, "image") else bytes(kernel)
    return Module(image, what)


# --------------------------------------------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------------------------------------------

#: bytes the pool keeps reserved across synchronizations: all of it. Freed blocks are reused by the next
#: allocation instead of going back to the driver at every synchronize (and being mapped again); trim_memory_pool
#: gives them back on request.
POOL_RELEASE_THRESHOLD = (1 << 64) - 1

_pool = None
_pool_lock = threading.Lock()


def memory_pool():
    """ptxgemm's own stream-ordered memory pool on device 0 (a CUmemoryPool, created on first use).

    A private pool, not the device's default one: other libraries in the process (torch, CuPy) allocate from the
    default pool or their own and may set its attributes; ptxgemm changes nothing of theirs."""
    global _pool
    if _pool is not None:  # on every allocation: no lock, no context switch
        return _pool
    ctx = context()
    with _pool_lock:
        if _pool is None:
            props = cu.CUmemPoolProps()
            props.allocType = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
            props.handleTypes = cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE
            props.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
            props.location.id = ctx.info.ordinal
            pool = check(cu.cuMemPoolCreate(props), "creating ptxgemm's memory pool (cuMemPoolCreate)")
            check(cu.cuMemPoolSetAttribute(pool, cu.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                                           cu.cuuint64_t(POOL_RELEASE_THRESHOLD)),
                  "setting the release threshold of ptxgemm's memory pool")
            _pool = pool
    return _pool


def memory_pool_usage() -> dict[str, int]:
    """Bytes of ptxgemm's pool: `reserved` (held from the driver) and `used` (in live allocations), now and at
    their high-water marks."""
    pool = memory_pool()
    A = cu.CUmemPool_attribute
    attrs = {"reserved": A.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, "reserved_high": A.CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH,
             "used": A.CU_MEMPOOL_ATTR_USED_MEM_CURRENT, "used_high": A.CU_MEMPOOL_ATTR_USED_MEM_HIGH}
    return {k: int(check(cu.cuMemPoolGetAttribute(pool, a), f"reading {a.name} of ptxgemm's memory pool"))
            for k, a in attrs.items()}


def trim_memory_pool(keep_bytes: int = 0) -> None:
    """Give the pool's unused memory back to the driver, down to `keep_bytes` reserved (memory freed on a stream is
    given back once the stream has reached the free)."""
    check(cu.cuMemPoolTrimTo(memory_pool(), int(keep_bytes)), f"trimming ptxgemm's memory pool to {keep_bytes} bytes")


def byte_span(shape, strides, itemsize: int) -> tuple[int, int]:
    """(low, nbytes): the smallest block of memory holding every element of an array with this shape and these
    byte strides, as the offset of its lowest byte from the address of element (0, ..., 0) (0 or negative) and its
    length. Negative strides reach below that element, 0 strides add nothing. A zero-size array spans (0, 0)."""
    shape, strides = tuple(int(n) for n in shape), tuple(int(s) for s in strides)
    if len(shape) != len(strides):
        raise ConfigError(f"strides: one per dimension of shape {shape}, got {strides}")
    if 0 in shape:
        return 0, 0
    low = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
    high = sum((n - 1) * s for n, s in zip(shape, strides) if s > 0) + itemsize
    return low, high - low


def _itemsize(dtype) -> int:
    return np.dtype(dtype).itemsize


def _is_contiguous(shape, strides, itemsize, order: str) -> bool:
    """numpy's rule: a zero-size array is contiguous; otherwise every dimension of extent > 1 has the stride of a
    dense array in that order (the stride of an extent-1 dimension is never used, so it does not count)."""
    if 0 in shape:
        return True
    dims = zip(reversed(shape), reversed(strides)) if order == "C" else zip(shape, strides)
    expected = itemsize
    for n, s in dims:
        if n != 1 and s != expected:
            return False
        expected *= n
    return True


class DeviceArray:
    """Device memory with a dtype, shape and byte strides, like a numpy array's header.

    Allocations come from ptxgemm's memory pool in stream order (`empty(..., stream=)`): neither allocating nor
    freeing waits for the GPU. An owning array frees its memory on the stream it was allocated on; work on any
    other stream that used it must be ordered before that free by the caller (an event, or a synchronize), as with
    any stream-ordered allocator. A zero-size array owns no memory (ptr 0).

    `view` makes non-owning views (any byte strides, a byte offset) that keep their `base` alive; `from_numpy`
    uploads any numpy layout in one copy and `to_numpy` brings any layout back (ptxgemm.relayout gathers a
    layout that is not one dense block on the device first).
    """

    def __init__(self, ptr: int, shape, dtype, strides=None, nbytes=None, owner: bool = True, *, base=None):
        # owner=True only for memory from ptxgemm's pool (`empty`): an owner is freed with cuMemFreeAsync
        self.ptr = int(ptr)
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.strides = (tuple(int(s) for s in strides) if strides is not None
                        else c_strides(self.shape, self.dtype.itemsize))
        self.nbytes = nbytes if nbytes is not None else math.prod(self.shape) * self.dtype.itemsize
        self._owner = owner
        self.base = base            # the array whose memory this view reads (kept alive); None for an owner
        self._stream = None         # the stream object an owner was allocated on (kept alive: its free goes there)
        self._stream_handle = None  # ... and its CUstream handle

    # construction ---------------------------------------------------------------------------------------
    @classmethod
    def empty(cls, shape, dtype, order: str = "C", stream=None) -> "DeviceArray":
        """An uninitialised array from ptxgemm's pool, allocated in order on `stream` (None: the legacy default
        stream): usable by work enqueued on `stream` after this call, freed on `stream` when it goes."""
        shape = tuple(int(s) for s in shape)
        if any(n < 0 for n in shape):
            raise ConfigError(f"shape: extents must be >= 0, got {shape}")
        if order not in ("C", "F"):
            raise ConfigError(f"order: must be 'C' (row-major) or 'F' (column-major), got {order!r}")
        itemsize = _itemsize(dtype)
        nbytes = math.prod(shape) * itemsize
        strides = c_strides(shape, itemsize) if order == "C" else _f_strides(shape, itemsize)
        if nbytes == 0:  # nothing to allocate, nothing to free
            return cls(0, shape, dtype, strides, 0)
        pool = memory_pool()
        handle = _stream_handle(stream)
        err, ptr = cu.cuMemAllocFromPoolAsync(nbytes, pool, handle)
        if err != cu.CUresult.CUDA_SUCCESS:  # the message is built only when needed: this is the hot path
            check((err,), f"allocating {nbytes} bytes for a {shape} {np.dtype(dtype)} array "
                          f"(cuMemAllocFromPoolAsync)")
        out = cls(int(ptr), shape, dtype, strides, nbytes)
        out._stream, out._stream_handle = stream, handle
        return out

    @classmethod
    def from_numpy(cls, arr: np.ndarray, stream=None) -> "DeviceArray":
        """`arr` on the device, in one host-to-device copy ordered on `stream`, for any numpy layout.

        A C- or Fortran-contiguous array comes back as an owning array in the same order. Any other layout
        (transposed, stepped, reversed, broadcast) uploads the smallest span of memory holding all of its elements
        and comes back as a view with numpy's strides into that span: nothing is reordered on the host."""
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"DeviceArray.from_numpy takes a numpy.ndarray, not {type(arr).__name__}")
        if arr.flags.c_contiguous or arr.flags.f_contiguous:
            out = cls.empty(arr.shape, arr.dtype, order="C" if arr.flags.c_contiguous else "F", stream=stream)
            out._upload(arr.ctypes.data, arr.nbytes, stream)
            return out
        low, span = byte_span(arr.shape, arr.strides, arr.itemsize)
        buffer = cls.empty((span,), np.uint8, stream=stream)
        buffer._upload(arr.ctypes.data + low, span, stream)
        return buffer.view(arr.shape, arr.strides, offset=-low, dtype=arr.dtype)

    def view(self, shape, strides=None, offset: int = 0, dtype=None) -> "DeviceArray":
        """A non-owning view of this array's memory: `shape` and byte `strides` (default: C order) starting `offset`
        bytes after self.ptr, as `dtype` (default: this array's). The view keeps its base alive; nothing is
        checked against the base's extent."""
        base = self if self.base is None else self.base
        dtype = self.dtype if dtype is None else dtype
        return DeviceArray(self.ptr + int(offset), shape, dtype, strides, owner=False, base=base)

    # interop: read in place by torch.from_dlpack, cupy.from_dlpack, cupy.asarray, numba ... -------------------------
    def __dlpack__(self, stream=None, **_ignored):
        """A DLPack capsule viewing this array (no copy). ptxgemm's work is ordered on the streams it was launched on;
        a consumer on another stream should synchronize with those first (as with any CUDA library)."""
        from .interop import export_dlpack

        return export_dlpack(self)

    def __dlpack_device__(self):
        from .interop import KDL_CUDA

        return (KDL_CUDA, 0)

    @property
    def __cuda_array_interface__(self) -> dict:
        from .interop import cuda_array_interface

        return cuda_array_interface(self)

    # layout ----------------------------------------------------------------------------------------------
    @property
    def is_c_contiguous(self) -> bool:
        """Row-major and dense, by numpy's rule (the strides of extent-1 dimensions do not count)."""
        return _is_contiguous(self.shape, self.strides, self.dtype.itemsize, "C")

    @property
    def is_f_contiguous(self) -> bool:
        """Column-major and dense, by numpy's rule."""
        return _is_contiguous(self.shape, self.strides, self.dtype.itemsize, "F")

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def stream(self):
        """The stream this array's memory was allocated on, and is freed on (a view: its base's)."""
        return self._stream if self.base is None else self.base._stream

    # transfers -------------------------------------------------------------------------------------------
    def _upload(self, host_ptr: int, nbytes: int, stream):
        """One host-to-device copy to self.ptr, ordered on `stream`. The driver copies pageable host memory into a
        staging buffer before returning, so the host array may change or go as soon as this returns."""
        if nbytes:
            check(cu.cuMemcpyHtoDAsync(self.ptr, host_ptr, nbytes, _stream_handle(stream)),
                  f"copying {nbytes} bytes host→device")

    def copy_from_host(self, arr: np.ndarray, stream=None):
        """Overwrite this array with `arr` (same dtype; same shape, or the same number of bytes when both are dense
        in the same order), ordered on `stream` (default: the stream the array was allocated on)."""
        if arr.nbytes != self.nbytes or arr.dtype != self.dtype:
            raise ValueError(f"copy_from_host: host array {arr.shape} {arr.dtype} does not match device array "
                             f"{self.shape} {self.dtype}")
        stream = self.stream if stream is None else stream
        if not arr.nbytes:
            return
        same_order = ((self.is_c_contiguous and arr.flags.c_contiguous)
                      or (self.is_f_contiguous and arr.flags.f_contiguous))
        if same_order:
            self._upload(arr.ctypes.data, arr.nbytes, stream)
            return
        if tuple(arr.shape) != self.shape:
            raise ValueError(f"copy_from_host: host array {arr.shape} and device array {self.shape} differ in shape "
                             f"and are not both dense in one order, so no byte copy matches their elements")
        from . import relayout

        relayout.copy_array(self, DeviceArray.from_numpy(arr, stream=stream), stream)

    def to_numpy(self) -> np.ndarray:
        """The array's values in a new numpy array (C order; Fortran order for a column-major dense array). Waits
        for the whole GPU first: the data must be final before it comes back to the host."""
        if self.is_c_contiguous or self.is_f_contiguous:
            out = np.empty(self.shape, self.dtype, order="C" if self.is_c_contiguous else "F")
            if out.nbytes:
                synchronize("waiting for the GPU before a device→host copy")
                check(cu.cuMemcpyDtoH(out.ctypes.data, self.ptr, out.nbytes),
                      f"copying {out.nbytes} bytes device→host")
            return out
        # Any other layout: gathered into a dense temporary on the device, then one copy down. The gather runs on
        # the stream of the array's memory, after a wait for the whole GPU: whatever stream wrote the values, they
        # are final before they are read, as for a dense array.
        from . import relayout

        synchronize("waiting for the GPU before gathering a strided array for a device→host copy")
        dense = DeviceArray.empty(self.shape, self.dtype, stream=self.stream)
        relayout.copy_array(dense, self, self.stream)
        out = dense.to_numpy()
        dense.free()
        return out

    def fill_bytes(self, pattern: int, width: int, stream=None):
        """Fill with a repeated 1/2/4-byte pattern (e.g. a NaN bit pattern to poison an output), ordered on `stream`
        (default: the stream the array was allocated on). Dense arrays only: a memset cannot skip gaps."""
        if width not in (1, 2, 4):
            raise ConfigError(f"width: a fill pattern is 1, 2 or 4 bytes, got {width}")
        if not (self.is_c_contiguous or self.is_f_contiguous):
            raise ConfigError(f"fill_bytes: this array (shape {self.shape}, byte strides {self.strides}) is not one "
                              f"dense block; fill the array it views (its .base), or use relayout.fill_zero")
        n = self.nbytes // width
        if not n:
            return
        fn = {1: cu.cuMemsetD8Async, 2: cu.cuMemsetD16Async, 4: cu.cuMemsetD32Async}[width]
        handle = _stream_handle(self.stream if stream is None else stream)
        check(fn(self.ptr, pattern, n, handle), f"filling {self.nbytes} bytes with 0x{pattern:x}")

    def poison(self, stream=None):
        """Fill with NaN (float dtypes) or 0xFF bytes, so an element the kernel never wrote cannot pass a check."""
        nan_bits = {2: 0x7FFF, 4: 0x7FFFFFFF}
        is_float = self.dtype.kind == "f" or self.dtype.name == "bfloat16"  # ml_dtypes' bf16 has kind 'V'
        if is_float and self.dtype.itemsize in nan_bits:
            self.fill_bytes(nan_bits[self.dtype.itemsize], self.dtype.itemsize, stream)
        else:
            self.fill_bytes(0xFF, 1, stream)

    def free(self):
        """Give an owner's memory back to the pool, in order on the stream it was allocated on (no wait). Memory
        that work on another stream used must be ordered before this by the caller, as with any stream-ordered
        allocator. It goes even while views of it exist (dropping the last reference is the safe way); a view
        itself frees nothing."""
        if self._owner and self.ptr:
            ptr, self.ptr = self.ptr, 0
            handle = self._stream_handle if self._stream_handle is not None else _stream_handle(None)
            check(cu.cuMemFreeAsync(ptr, handle), "freeing a device buffer (cuMemFreeAsync)")

    def __del__(self):
        try:
            self.free()
        except Exception:  # noqa: BLE001 - interpreter shutdown or a dead context: nothing useful to do
            pass

    def __repr__(self):
        kind = "" if self.base is None else ", view"
        return (f"DeviceArray(shape={self.shape}, dtype={self.dtype}, strides={self.strides}, "
                f"ptr=0x{self.ptr:x}{kind})")


def c_strides(shape, itemsize):
    strides, acc = [], itemsize
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


def _f_strides(shape, itemsize):
    strides, acc = [], itemsize
    for s in shape:
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(strides)


class HostMappedBuffer:
    """Pinned host memory the GPU can write to directly. Used for debug records: it stays readable from the host
    even after a kernel `trap` has made the context unusable."""

    def __init__(self, nbytes: int):
        context()
        flags = cu.CU_MEMHOSTALLOC_DEVICEMAP if hasattr(cu, "CU_MEMHOSTALLOC_DEVICEMAP") else 2
        self.host_ptr = int(check(cu.cuMemHostAlloc(nbytes, flags), f"allocating {nbytes} bytes of mapped host memory"))
        self.dev_ptr = int(check(cu.cuMemHostGetDevicePointer(self.host_ptr, 0), "mapping host memory for the GPU"))
        self.nbytes = nbytes
        self.view = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(self.host_ptr))
        self.view[:] = 0

    def as_u32(self) -> np.ndarray:
        return self.view.view(np.uint32)

    def free(self):
        if self.host_ptr:
            ptr, self.host_ptr = self.host_ptr, 0
            check(cu.cuMemFreeHost(ptr), "freeing mapped host memory")

    def __del__(self):
        try:
            self.free()
        except Exception:  # noqa: BLE001
            pass


# --------------------------------------------------------------------------------------------------------------
# Streams, events, launch
# --------------------------------------------------------------------------------------------------------------

class Stream:
    def __init__(self):
        context()
        self.handle = check(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING), "creating a stream")

    def synchronize(self):
        check(cu.cuStreamSynchronize(self.handle), "waiting for a stream")


_LEGACY_STREAM = None  # cu.CUstream(0), made once


def _stream_handle(stream):
    """None (the legacy default stream), a ptxgemm Stream, a raw handle (e.g. torch.cuda.current_stream().cuda_stream)
    or any object with __cuda_stream__ (ptxgemm.interop.stream_handle)."""
    global _LEGACY_STREAM
    if stream is None:
        if _LEGACY_STREAM is None:
            _LEGACY_STREAM = cu.CUstream(0)
        return _LEGACY_STREAM
    if isinstance(stream, Stream):
        return stream.handle
    from .interop import stream_handle

    return cu.CUstream(stream_handle(stream))


class Event:
    def __init__(self):
        context()
        self.handle = check(cu.cuEventCreate(cu.CUevent_flags.CU_EVENT_DEFAULT), "creating an event")

    def record(self, stream=None):
        check(cu.cuEventRecord(self.handle, _stream_handle(stream)), "recording an event")

    def synchronize(self):
        check(cu.cuEventSynchronize(self.handle), "waiting for an event")

    def query(self) -> bool:
        """True once the GPU has reached the event (or it was never recorded), False while work before it is still
        pending. Never waits."""
        err = cu.cuEventQuery(self.handle)
        err = err[0] if isinstance(err, tuple) else err
        if err == cu.CUresult.CUDA_ERROR_NOT_READY:
            return False
        check(err, "querying an event")
        return True

    def elapsed_ms(self, end: "Event") -> float:
        end.synchronize()
        return float(check(cu.cuEventElapsedTime(self.handle, end.handle), "reading the time between two events"))


def kernel_params(args) -> tuple[list, ctypes.Array]:
    """The kernel's `void** kernelParams`, built once: one pointer per argument to its value's bytes (a tensor map's
    128 bytes, a scalar's ctypes value, a DeviceArray's address). Passing the array's address lets cuLaunchKernelEx
    skip converting Python values on every launch. Returns (what the pointers point into, the pointer array); keep
    both, and the args, alive as long as the launch."""
    values = []
    for i, a in enumerate(args):
        if isinstance(a, DeviceArray):
            v = ctypes.c_void_p(a.ptr)
            values.append((v, ctypes.addressof(v)))
        elif hasattr(a, "cu_map") or isinstance(a, cu.CUtensorMap):  # by value: its 128 bytes
            m = a.cu_map if hasattr(a, "cu_map") else a
            values.append((m, int(m.getPtr())))
        elif isinstance(a, ctypes._SimpleCData):
            values.append((a, ctypes.addressof(a)))
        else:
            raise TypeError(f"kernel argument {i}: {type(a).__name__} is not a DeviceArray, TensorMap or ctypes scalar"
                            " (wrap plain integers, e.g. ctypes.c_uint32(n))")
    params = (ctypes.c_void_p * max(len(values), 1))(*(addr for _, addr in values))
    return [v for v, _ in values], params


class PreparedLaunch:
    """A launch whose configuration and packed arguments are built once; calling it only enqueues the kernel.

    Repeated launches (benchmarks, the device-resident GEMM path) skip the Python-side argument packing.
    """

    def __init__(self, fn: Function, grid, block, args, smem_bytes: int = 0, cluster=None):
        context()
        self.fn = fn
        self.grid = (tuple(grid) + (1, 1, 1))[:3]
        self.block = (tuple(block) + (1, 1, 1))[:3]
        self.smem_bytes = int(smem_bytes)
        self.args = list(args)  # keeps DeviceArrays and tensor maps alive as long as the launch
        self._values, self._params = kernel_params(self.args)
        self._params_address = ctypes.addressof(self._params)
        cfg = cu.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = self.grid
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = self.block
        cfg.sharedMemBytes = self.smem_bytes
        attrs = []
        if cluster is not None:
            c = (tuple(cluster) + (1, 1, 1))[:3]
            attr = cu.CUlaunchAttribute()
            attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = c
            attrs.append(attr)
        cfg.attrs = attrs
        cfg.numAttrs = len(attrs)  # cuda.bindings does not derive it from the list
        self._cfg = cfg
        self._what = f"launching {fn.name} (grid {self.grid}, block {self.block}, {self.smem_bytes} B dynamic smem)"

    def __call__(self, stream=None):
        if stream is not self._last_stream:  # converting the handle costs as much as the rest of the call
            self._cfg.hStream = _stream_handle(stream)
            self._last_stream = stream
        err, = cu.cuLaunchKernelEx(self._cfg, self.fn.handle, self._params_address, 0)
        if err != cu.CUresult.CUDA_SUCCESS:
            check((err,), self._what)

    _last_stream = object()  # no stream yet: the first call sets hStream


def launch(fn: Function, grid, block, args, smem_bytes: int = 0, cluster=None, stream=None):
    """Launch `fn` with cuLaunchKernelEx. grid/block/cluster are 1-3 ints; args see `kernel_params`."""
    PreparedLaunch(fn, grid, block, args, smem_bytes, cluster)(stream)


@functools.lru_cache(maxsize=1)
def _l2_flush_buffer() -> DeviceArray:
    return DeviceArray.empty((2 * max(device_info().l2_bytes, 1 << 20),), np.uint8)


def flush_l2(stream=None):
    """Evict L2 by writing a buffer twice its size (the way cuBLAS/Triton benchmarks do)."""
    buf = _l2_flush_buffer()
    check(cu.cuMemsetD8Async(buf.ptr, 0, buf.nbytes, _stream_handle(stream)), "flushing L2")
