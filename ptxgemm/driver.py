"""The CUDA driver, through cuda-python's `cuda.bindings.driver`: context, modules, launches, events, memory.

Every driver call goes through `check`, which raises `CudaError` carrying the CUresult name and what ptxgemm was
doing. Nothing here imports torch. The primary context of device 0 is retained lazily, on first use, so that
`import ptxgemm` works on a machine without a GPU.
"""
from __future__ import annotations

import ctypes
import dataclasses
import functools
import math
import threading

import numpy as np

from .errors import CudaError, NoGpuError

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

def _itemsize(dtype) -> int:
    return np.dtype(dtype).itemsize


class DeviceArray:
    """A device buffer that knows its dtype, shape and (byte) strides, like a numpy array's header.

    Only dense layouts are made from host arrays (C or Fortran order), so a transfer is one memcpy and never
    a hidden reordering copy. `strides` are in bytes, numpy-style.
    """

    def __init__(self, ptr: int, shape, dtype, strides=None, nbytes=None, owner: bool = True):
        self.ptr = int(ptr)
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.strides = tuple(strides) if strides is not None else _c_strides(self.shape, self.dtype.itemsize)
        self.nbytes = nbytes if nbytes is not None else math.prod(self.shape) * self.dtype.itemsize
        self._owner = owner

    # construction ---------------------------------------------------------------------------------------
    @classmethod
    def empty(cls, shape, dtype, order: str = "C") -> "DeviceArray":
        context()
        shape = tuple(int(s) for s in shape)
        itemsize = _itemsize(dtype)
        nbytes = math.prod(shape) * itemsize
        ptr = check(cu.cuMemAlloc(max(nbytes, 1)), f"allocating {nbytes} bytes for a {shape} {np.dtype(dtype)} array")
        strides = _c_strides(shape, itemsize) if order == "C" else _f_strides(shape, itemsize)
        return cls(int(ptr), shape, dtype, strides, nbytes)

    @classmethod
    def from_numpy(cls, arr: np.ndarray) -> "DeviceArray":
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"DeviceArray.from_numpy takes a numpy.ndarray, not {type(arr).__name__}")
        if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
            raise ValueError("DeviceArray.from_numpy: the array must be C- or Fortran-contiguous (one dense block); "
                             "make it so explicitly with numpy.ascontiguousarray")
        out = cls.empty(arr.shape, arr.dtype, order="C" if arr.flags.c_contiguous else "F")
        out.copy_from_host(arr)
        return out

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

    # transfers -------------------------------------------------------------------------------------------
    @property
    def is_c_contiguous(self) -> bool:
        return self.strides == _c_strides(self.shape, self.dtype.itemsize)

    def copy_from_host(self, arr: np.ndarray):
        if arr.nbytes != self.nbytes or arr.dtype != self.dtype:
            raise ValueError(f"copy_from_host: host array {arr.shape} {arr.dtype} does not match device array "
                             f"{self.shape} {self.dtype}")
        if arr.nbytes:
            check(cu.cuMemcpyHtoD(self.ptr, arr.ctypes.data, arr.nbytes),
                  f"copying {arr.nbytes} bytes host→device")

    def to_numpy(self) -> np.ndarray:
        order = "C" if self.is_c_contiguous else "F"
        out = np.empty(self.shape, self.dtype, order=order)
        if self.nbytes:
            synchronize("waiting for the GPU before a device→host copy")
            check(cu.cuMemcpyDtoH(out.ctypes.data, self.ptr, self.nbytes), f"copying {self.nbytes} bytes device→host")
        return out

    def fill_bytes(self, pattern: int, width: int):
        """Fill with a repeated 1/2/4-byte pattern (e.g. a NaN bit pattern to poison an output)."""
        n = self.nbytes // width
        fn = {1: cu.cuMemsetD8, 2: cu.cuMemsetD16, 4: cu.cuMemsetD32}[width]
        check(fn(self.ptr, pattern, n), f"filling {self.nbytes} bytes with 0x{pattern:x}")

    def poison(self):
        """Fill with NaN (float dtypes) or 0xFF bytes, so an element the kernel never wrote cannot pass a check."""
        nan_bits = {2: 0x7FFF, 4: 0x7FFFFFFF}
        is_float = self.dtype.kind == "f" or self.dtype.name == "bfloat16"  # ml_dtypes' bf16 has kind 'V'
        if is_float and self.dtype.itemsize in nan_bits:
            self.fill_bytes(nan_bits[self.dtype.itemsize], self.dtype.itemsize)
        else:
            self.fill_bytes(0xFF, 1)

    def free(self):
        if self._owner and self.ptr:
            ptr, self.ptr = self.ptr, 0
            check(cu.cuMemFree(ptr), "freeing a device buffer")

    def __del__(self):
        try:
            self.free()
        except Exception:  # noqa: BLE001 - interpreter shutdown or a dead context: nothing useful to do
            pass

    def __repr__(self):
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}, strides={self.strides}, ptr=0x{self.ptr:x})"


def _c_strides(shape, itemsize):
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


def _stream_handle(stream):
    """None (the legacy default stream), a ptxgemm Stream, a raw handle (e.g. torch.cuda.current_stream().cuda_stream)
    or any object with __cuda_stream__ (ptxgemm.interop.stream_handle)."""
    if stream is None:
        return cu.CUstream(0)
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

    def elapsed_ms(self, end: "Event") -> float:
        end.synchronize()
        return float(check(cu.cuEventElapsedTime(self.handle, end.handle), "reading the time between two events"))


def _pack_args(args):
    values, types = [], []
    for i, a in enumerate(args):
        if isinstance(a, DeviceArray):
            values.append(a.ptr)
            types.append(ctypes.c_void_p)
        elif hasattr(a, "cu_map"):  # tensormap.TensorMap: the 128-byte map is passed by value
            values.append(a.cu_map)
            types.append(None)
        elif isinstance(a, cu.CUtensorMap):
            values.append(a)
            types.append(None)
        elif isinstance(a, ctypes._SimpleCData):
            values.append(a.value)
            types.append(type(a))
        else:
            raise TypeError(f"kernel argument {i}: {type(a).__name__} is not a DeviceArray, TensorMap or ctypes scalar"
                            " (wrap plain integers, e.g. ctypes.c_uint32(n))")
    return tuple(values), tuple(types)


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
        self._packed = _pack_args(self.args)
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
        self._cfg.hStream = _stream_handle(stream)
        check(cu.cuLaunchKernelEx(self._cfg, self.fn.handle, self._packed, 0), self._what)


def launch(fn: Function, grid, block, args, smem_bytes: int = 0, cluster=None, stream=None):
    """Launch `fn` with cuLaunchKernelEx. grid/block/cluster are 1-3 ints; args see `_pack_args`."""
    PreparedLaunch(fn, grid, block, args, smem_bytes, cluster)(stream)


@functools.lru_cache(maxsize=1)
def _l2_flush_buffer() -> DeviceArray:
    return DeviceArray.empty((2 * max(device_info().l2_bytes, 1 << 20),), np.uint8)


def flush_l2(stream=None):
    """Evict L2 by writing a buffer twice its size (the way cuBLAS/Triton benchmarks do)."""
    buf = _l2_flush_buffer()
    check(cu.cuMemsetD8Async(buf.ptr, 0, buf.nbytes, _stream_handle(stream)), "flushing L2")
