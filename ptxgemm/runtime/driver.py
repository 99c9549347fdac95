"""The CUDA driver, through cuda-python's `cuda.bindings.driver`: contexts, modules, launches, events, memory.

Every driver call goes through `check`, which raises `CudaError` carrying the CUresult name and what ptxgemm was
doing. Nothing here imports torch. Each device's primary context is retained lazily, on first use (`context(n)`), so
that `import ptxgemm` works on a machine without a GPU; a call that names no device uses the thread's current one
(ptxgemm.runtime.devices, `ptxgemm.device(n)`), and `on_device(n)` is the block an entry point computes in.

Device memory comes from a private stream-ordered pool per device (`memory_pool`):
`ptxgemm.runtime.arrays.DeviceArray.empty(..., stream=)` and `free` are cuMemAllocFromPoolAsync / cuMemFreeAsync on
the array's stream, so no allocation or free waits for the GPU, and freed blocks are reused instead of being returned
to the driver at every synchronize.
"""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import threading

from ..errors import ConfigError, CudaError, NoGpuError
from . import devices, libcuda, recycling

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
    """The retained primary context of one device (the one torch, CuPy and JAX use on that device too)."""

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
        self.ordinal = ordinal
        self.device = check(cu.cuDeviceGet(ordinal), f"getting CUDA device {ordinal}")
        self.context = check(cu.cuDevicePrimaryCtxRetain(self.device), f"retaining device {ordinal}'s primary context")
        self.handle = int(self.context)   # what devices compares and sets on the per-call paths
        self.info = self._query(ordinal)

    def make_current(self):
        """Make this context current on the calling thread (nothing to do when it is); one of another device found
        there is noticed (devices.noticed)."""
        previous = devices.thread_context()
        if previous != self.handle:
            devices.noticed(previous)
            devices.make_current(self.handle)

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


_contexts: dict[int, _Context] = {}   # by ordinal, each opened once for the process


def context_of(ordinal: int | None = None) -> _Context:
    """Device `ordinal`'s primary context (None: the thread's current device), retained on first use; not made
    current (`context` does that)."""
    ordinal = devices.resolve(ordinal)
    ctx = _contexts.get(ordinal)
    if ctx is not None:
        return ctx
    with _Context._lock:
        if ordinal not in _contexts:
            previous = devices.thread_context()
            ctx = _Context(devices.check_ordinal(ordinal))
            _contexts[ordinal] = ctx
            devices.opened(ctx.handle)
            devices.noticed(previous)   # only now: torch's context of this very device is the one just retained
        return _contexts[ordinal]


def context(ordinal: int | None = None) -> _Context:
    """Device `ordinal`'s primary context (None: the thread's current device), created on first use and made
    current on this thread. Left current: an entry point that computes on a device does so inside `on_device`, which
    puts the thread's own context back after."""
    ctx = context_of(ordinal)
    ctx.make_current()
    return ctx


class on_device(devices.device):
    """`with on_device(n):` devices.device(n) with n's context made current at once: the block an entry point plans,
    allocates and launches in (a call's arrays' device), the thread's own device and context put back after."""

    def __enter__(self):
        super().__enter__()
        try:
            context(self.ordinal)
        except BaseException:
            super().__exit__(None, None, None)
            raise
        return self


def call_on(ordinal: int, fn, *args, **kwargs):
    """fn(*args, **kwargs) inside on_device(ordinal) where the process has several contexts
    (devices.several_contexts), else directly (the one context is current): the work on one device's memory outside
    a plan's launches. The first work on a device, which opens its context (and may find another current there:
    torch's), runs inside devices.device(ordinal), which puts that one back after and asks the driver nothing
    first."""
    if devices.several_contexts:
        with on_device(ordinal):
            return fn(*args, **kwargs)
    if ordinal not in _contexts:
        with devices.device(ordinal):
            return fn(*args, **kwargs)
    return fn(*args, **kwargs)


def device_info(ordinal: int | None = None) -> DeviceInfo:
    """Device `ordinal`'s facts (None: the thread's current device); its context is opened, not made current (asking
    about a device changes no thread's context)."""
    return context_of(ordinal).info


def pci_bus_id(ordinal: int | None = None) -> str:
    """The device's PCI bus id ("0000:19:00.0"; None: the thread's current device): how NVML (the power sampler of
    `bench --sustained`) finds the same GPU whatever CUDA_VISIBLE_DEVICES renumbered."""
    ctx = context_of(ordinal)
    raw = check(cu.cuDeviceGetPCIBusId(32, ctx.device), "reading the device's PCI bus id")
    return raw.split(b"\0", 1)[0].decode() if isinstance(raw, bytes) else str(raw)


def device_count() -> int:
    """How many CUDA devices this process sees (0 where none can be used), without opening any. Never raises."""
    try:
        check(cu.cuInit(0), "initialising the CUDA driver (cuInit)")
        return int(check(cu.cuDeviceGetCount(), "counting CUDA devices"))
    except Exception:  # noqa: BLE001 - no cuda.bindings, no libcuda, no device
        return 0


def device_available() -> bool:
    """True when a CUDA device (the thread's current one) can be opened. Never raises."""
    try:
        context()
        return True
    except Exception:  # noqa: BLE001
        return False


def no_device_reason() -> str | None:
    """Why no device (the thread's current one) can be used, or None when one can."""
    try:
        context()
        return None
    except Exception as e:  # noqa: BLE001
        return str(e)


def require_sm90(what: str, ordinal: int | None = None) -> DeviceInfo:
    """Device `ordinal` (None: the thread's current device), checked to be a Hopper (sm_90), its context made current
    (what asks is about to work there); raises NoGpuError naming `what` otherwise."""
    info = context(ordinal).info
    if info.compute_capability != (9, 0):
        cc = "%d.%d" % info.compute_capability
        raise NoGpuError("CUDA_ERROR_NO_BINARY_FOR_GPU", what,
                         f"{info.name} is sm_{cc.replace('.', '')}; ptxgemm's kernels are sm_90a (Hopper) only")
    return info


def synchronize(what: str = "waiting for the GPU (cuCtxSynchronize)", ordinal: int | None = None):
    """Wait for all work on device `ordinal` (None: the thread's current device)."""
    context(ordinal)
    check(cu.cuCtxSynchronize(), what)


def pointer_device(ptr: int) -> int | None:
    """The ordinal of the device whose memory `ptr` is (cuPointerGetAttribute), or None where the driver does not
    know it as device memory: how a __cuda_array_interface__, which names no device, is placed (at plan time)."""
    if not ptr or cu is None:
        return None
    # through libcuda, not cuda.bindings: its wrapper reads this attribute from a field the driver never wrote and
    # answers 0 for memory on any device (NVIDIA/cuda-python#2928, seen on the H200 host's cuda-bindings): device 1's
    # memory then passed for device 0's, and a kernel there read it without peer access (an illegal address)
    fn = libcuda.function("cuPointerGetAttribute")
    if fn is None:
        return None
    value = ctypes.c_int(-1)
    err = fn(ctypes.byref(value), int(cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL), int(ptr))
    return value.value if err == 0 and value.value >= 0 else None


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
    """A loaded module, in device `ordinal`'s context (None: the thread's current device); its functions launch
    there only. `image` is a cubin, or NUL-terminated PTX that the driver JIT-compiles."""

    def __init__(self, image: bytes, what: str = "module", ordinal: int | None = None):
        self.ordinal = context(ordinal).ordinal
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


def load_module(kernel, what: str = "module", ordinal: int | None = None) -> Module:
    """Load a CompiledKernel (cubin, or PTX for the JIT when no ptxas was found) or raw image bytes on device
    `ordinal` (None: the thread's current device)."""
    image = kernel.image() if hasattr(kernel, "image") else bytes(kernel)
    return Module(image, what, ordinal)


# --------------------------------------------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------------------------------------------

#: bytes the pool keeps reserved across synchronizations: all of it. Freed blocks are reused by the next
#: allocation instead of going back to the driver at every synchronize (and being mapped again); trim_memory_pool
#: gives them back on request.
POOL_RELEASE_THRESHOLD = (1 << 64) - 1

_pools: dict[int, object] = {}   # by ordinal
_pool_lock = threading.Lock()


def memory_pool(ordinal: int | None = None):
    """ptxgemm's own stream-ordered memory pool on device `ordinal` (None: the thread's current device), a
    CUmemoryPool created on first use.

    A private pool, not the device's default one: other libraries in the process (torch, CuPy) allocate from the
    default pool or their own and may set its attributes; ptxgemm changes nothing of theirs."""
    ordinal = devices.resolve(ordinal)
    pool = _pools.get(ordinal)
    if pool is not None:  # on every allocation that derives nothing once: no lock, no context switch
        return pool
    ctx = context(ordinal)   # current, as the first allocation on the device's legacy stream needs it
    with _pool_lock:
        if ordinal not in _pools:
            props = cu.CUmemPoolProps()
            props.allocType = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
            props.handleTypes = cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE
            props.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
            props.location.id = ctx.ordinal
            pool = check(cu.cuMemPoolCreate(props), f"creating ptxgemm's memory pool on device {ctx.ordinal} "
                                                    f"(cuMemPoolCreate)")
            check(cu.cuMemPoolSetAttribute(pool, cu.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                                           cu.cuuint64_t(POOL_RELEASE_THRESHOLD)),
                  "setting the release threshold of ptxgemm's memory pool")
            _pools[ordinal] = pool
    return _pools[ordinal]


def memory_pool_usage(ordinal: int | None = None) -> dict[str, int]:
    """Bytes of ptxgemm's pool on device `ordinal` (None: the thread's current device): `reserved` (held from the
    driver) and `used` (in live allocations), now and at their high-water marks, and `kept`: the part of `used`
    that dropped results left for the next call on their stream (ptxgemm.runtime.recycling)."""
    ordinal = devices.resolve(ordinal)
    pool = memory_pool(ordinal)
    A = cu.CUmemPool_attribute
    attrs = {"reserved": A.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, "reserved_high": A.CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH,
             "used": A.CU_MEMPOOL_ATTR_USED_MEM_CURRENT, "used_high": A.CU_MEMPOOL_ATTR_USED_MEM_HIGH}
    usage = {k: int(check(cu.cuMemPoolGetAttribute(pool, a), f"reading {a.name} of ptxgemm's memory pool"))
             for k, a in attrs.items()}
    usage["kept"] = recycling.kept_bytes(ordinal)   # of `used`: results' blocks kept for reuse (trim frees them)
    return usage


def trim_memory_pool(keep_bytes: int = 0, ordinal: int | None = None) -> None:
    """Give the pool's unused memory back to the driver, down to `keep_bytes` reserved (memory freed on a stream is
    given back once the stream has reached the free); device `ordinal`'s pool (None: the thread's current device),
    the results' blocks kept for reuse there (ptxgemm.runtime.recycling) freed into it first, in its context (a
    legacy-stream handle is the current context's)."""
    ordinal = devices.resolve(ordinal)
    with on_device(ordinal):
        recycling.release(free_async, ordinal)
        check(cu.cuMemPoolTrimTo(memory_pool(ordinal), int(keep_bytes)),
              f"trimming ptxgemm's memory pool to {keep_bytes} bytes")


def free_async(ptr: int, handle) -> None:
    """cuMemFreeAsync of `ptr` on the stream `handle` (a CUstream or its int), in the current context: through
    libcuda directly, as a dropped result's free is on the per-call path."""
    free = libcuda.function("cuMemFreeAsync")
    if free is None:
        check(cu.cuMemFreeAsync(ptr, cu.CUstream(int(handle))), "freeing a device buffer (cuMemFreeAsync)")
        return
    err = free(ptr, int(handle))
    if err:
        check((cu.CUresult(err),), "freeing a device buffer (cuMemFreeAsync)")


# --------------------------------------------------------------------------------------------------------------
# Streams, events, launch
# --------------------------------------------------------------------------------------------------------------

class Stream:
    """A non-blocking stream of the thread's current device (`device`: its ordinal): work on another device's
    arrays cannot be ordered on it."""

    def __init__(self):
        self.device = context().ordinal
        self.handle = check(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING), "creating a stream")

    def synchronize(self):
        check(cu.cuStreamSynchronize(self.handle), "waiting for a stream")


_LEGACY_STREAM = None  # cu.CUstream(0), made once


def stream_handle(stream) -> int:
    """A raw CUstream handle (0: the legacy default stream) from None, an int, a ptxgemm Stream, or an object with
    __cuda_stream__ (the CUDA stream protocol: returns (version, handle)) or a .cuda_stream / .ptr attribute."""
    if stream is None:
        return 0
    if isinstance(stream, bool):
        raise ConfigError("stream: must be None, a raw CUstream handle or a stream object, got a bool")
    if isinstance(stream, int):
        return stream
    if hasattr(stream, "__cuda_stream__"):
        _version, handle = stream.__cuda_stream__()
        return int(handle)
    handle = getattr(stream, "handle", None)
    if handle is not None:                     # ptxgemm's Stream
        return int(handle)
    for attr in ("cuda_stream", "ptr"):        # torch.cuda.Stream, cupy.cuda.Stream
        if hasattr(stream, attr):
            return int(getattr(stream, attr))
    raise ConfigError(f"stream: a {type(stream).__name__} is not a stream (None, an int handle, or an object with "
                      f"__cuda_stream__)")


def cu_stream(stream):
    """`stream` (anything `stream_handle` takes) as the driver's CUstream; None is the legacy default stream."""
    global _LEGACY_STREAM
    if stream is None:
        if _LEGACY_STREAM is None:
            _LEGACY_STREAM = cu.CUstream(0)
        return _LEGACY_STREAM
    if isinstance(stream, Stream):
        return stream.handle
    return cu.CUstream(stream_handle(stream))


class Event:
    """An event of the thread's current device (record it on that device's streams)."""

    def __init__(self):
        context()
        self.handle = check(cu.cuEventCreate(cu.CUevent_flags.CU_EVENT_DEFAULT), "creating an event")

    def record(self, stream=None):
        check(cu.cuEventRecord(self.handle, cu_stream(stream)), "recording an event")

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
        if isinstance(getattr(a, "ptr", None), int):   # a device array: its address (ptxgemm.runtime.arrays)
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

    Repeated launches (benchmarks, the device-resident GEMM path) skip the Python-side argument packing. The launch
    goes through cuda.bindings: calling libcuda's cuLaunchKernelEx through ctypes with a config struct made once
    measured the same (5.15 against 5.18 us per launch on an H200, docs/perf-notes.md, issue 46), the driver's own
    work being the cost.
    """

    def __init__(self, fn: Function, grid, block, args, smem_bytes: int = 0, cluster=None, programmatic: bool = False):
        """`programmatic`: launch with programmatic stream serialization (PDL), so the kernel may start before the
        previous kernel on the stream has finished; only for a kernel that waits for it (griddepcontrol.wait,
        kernel/templates/grid_dependency.ptx.j2) before it touches global memory. The launch is made on `fn`'s
        device, whose context must be current when it is called (a plan makes it so: devices.in_context)."""
        context(fn.module.ordinal)
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
        if programmatic:
            attr = cu.CUlaunchAttribute()
            attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            attr.value.programmaticStreamSerializationAllowed = 1
            attrs.append(attr)
        self.programmatic = bool(programmatic)
        cfg.attrs = attrs
        cfg.numAttrs = len(attrs)  # cuda.bindings does not derive it from the list
        self._cfg = cfg
        self._what = f"launching {fn.name} (grid {self.grid}, block {self.block}, {self.smem_bytes} B dynamic smem)"

    def __call__(self, stream=None):
        # converting the handle costs as much as the rest of the call: only for a new stream (a raw handle, as
        # frameworks give it, is a new int object on every call: compared by value)
        if stream is not self._last_stream and not (type(stream) is int and stream == self._last_stream):
            self._cfg.hStream = cu_stream(stream)
            self._last_stream = stream
        err, = cu.cuLaunchKernelEx(self._cfg, self.fn.handle, self._params_address, 0)
        if err != cu.CUresult.CUDA_SUCCESS:
            check((err,), self._what)

    _last_stream = object()  # no stream yet: the first call sets hStream


#: whether the GEMM kernels are launched as programmatic dependents of the previous kernel on their stream (PDL,
#: kernel/templates/grid_dependency.ptx.j2): their prologue overlaps that kernel's tail. PTXGEMM_PDL=0 turns it
#: off; a plan reads it when it is made (so a process can time both ways: set it, clear the plan caches)
PROGRAMMATIC_LAUNCH = os.environ.get("PTXGEMM_PDL", "1") != "0"


@contextlib.contextmanager
def programmatic_launches(enabled: bool):
    """Plans made inside this block launch as programmatic dependents (`enabled`) or plainly; the setting before it
    comes back after. For measurements that must not overlap a kernel with the one before it (the kernel-duration
    method: a programmatic dependent's recorded span begins while it waits for its predecessor)."""
    global PROGRAMMATIC_LAUNCH
    saved, PROGRAMMATIC_LAUNCH = PROGRAMMATIC_LAUNCH, enabled
    try:
        yield
    finally:
        PROGRAMMATIC_LAUNCH = saved


def launch(fn: Function, grid, block, args, smem_bytes: int = 0, cluster=None, stream=None):
    """Launch `fn` with cuLaunchKernelEx. grid/block/cluster are 1-3 ints; args see `kernel_params`."""
    PreparedLaunch(fn, grid, block, args, smem_bytes, cluster)(stream)
