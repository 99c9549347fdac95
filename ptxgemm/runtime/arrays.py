"""DeviceArray: device memory with a dtype, shape and byte strides, and `as_device_array`, which takes any
framework's device array as one without a copy.

Memory comes from ptxgemm's stream-ordered pool of the array's device (ptxgemm.runtime.driver.memory_pool). The array
speaks DLPack and __cuda_array_interface__ both ways (ptxgemm.runtime.interop), and a layout that is not one dense
block goes to and from the host through the strided copy kernel (ptxgemm.runtime.relayout).
"""
from __future__ import annotations

import ctypes
import functools
import math

import numpy as np

from ..errors import ConfigError
from . import devices, driver, interop, libcuda, recycling, relayout
from .driver import check, cu, cu_stream, memory_pool, synchronize


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


def upload_offset(arr: np.ndarray) -> int | None:
    """Where DeviceArray.from_numpy puts `arr`'s element 0, in bytes from the start of its (aligned) allocation: 0
    for a C- or Fortran-contiguous array, the distance from its lowest byte otherwise; None for an empty array
    (no allocation: address 0). What a plan made before the upload needs of the address (ptxgemm.run)."""
    if arr.size == 0:
        return None
    if arr.flags.c_contiguous or arr.flags.f_contiguous:
        return 0
    return -byte_span(arr.shape, arr.strides, arr.itemsize)[0]


def upload_strides(arr: np.ndarray) -> tuple:
    """The strides DeviceArray.from_numpy gives `arr`'s upload: a C- or Fortran-contiguous array comes back in that
    order's own strides (which differ from numpy's on extent-1 axes, where numpy keeps whatever it had), any other
    layout with numpy's strides."""
    if arr.size and (arr.flags.c_contiguous or arr.flags.f_contiguous):
        order = "C" if arr.flags.c_contiguous else "F"
        return c_strides(arr.shape, arr.itemsize) if order == "C" else _f_strides(arr.shape, arr.itemsize)
    return tuple(arr.strides)


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


def _on_own_device(method):
    """A DeviceArray method that runs in its array's device's context (driver.call_on, where the process has
    several): its legacy stream, synchronize and relayout kernel are that device's."""
    @functools.wraps(method)
    def on_own_device(self, *args, **kwargs):
        return driver.call_on(self.device, method, self, *args, **kwargs)
    return on_own_device


class DeviceArray:
    """Device memory with a dtype, shape and byte strides, like a numpy array's header, on CUDA device `device` (an
    ordinal; a view is on its base's).

    Allocations come from ptxgemm's memory pool of the device in stream order (`empty(..., stream=)`): neither
    allocating nor freeing waits for the GPU. An owning array frees its memory on the stream it was allocated on; work
    on any other stream that used it must be ordered before that free by the caller (an event, or a synchronize), as
    with any stream-ordered allocator. A freed owner's block is kept for the next allocation of its size on its
    device and stream (ptxgemm.runtime.recycling: a per-call result comes back at the same address, with no driver
    call). A zero-size array owns no memory (ptr 0).

    `view` makes non-owning views (any byte strides, a byte offset) that keep their `base` alive; `from_numpy`
    uploads any numpy layout in one copy and `to_numpy` brings any layout back (ptxgemm.runtime.relayout gathers a
    layout that is not one dense block on the device first).
    """

    _assumed_device = False   # see as_device_array

    def __init__(self, ptr: int, shape, dtype, strides=None, nbytes=None, owner: bool = True, *, base=None,
                 device: int | None = None):
        # owner=True only for memory from ptxgemm's pool (`empty`): an owner is freed with cuMemFreeAsync.
        # device: the memory's device (None: the thread's current device; a view: its base's)
        self.device = base.device if base is not None else devices.resolve(device, "device")
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
        self._recycle = False       # freed into ptxgemm.runtime.recycling (only `allocate`'s results, see there)

    # construction ---------------------------------------------------------------------------------------
    @classmethod
    def empty(cls, shape, dtype, order: str = "C", stream=None, device: int | None = None) -> "DeviceArray":
        """An uninitialised array from ptxgemm's pool on `device` (None: the thread's current device), allocated in
        order on `stream` (None: the device's legacy default stream; a stream of that device): usable by work
        enqueued on `stream` after this call, freed on `stream` when it goes."""
        shape = tuple(int(s) for s in shape)
        if any(n < 0 for n in shape):
            raise ConfigError(f"shape: extents must be >= 0, got {shape}")
        if order not in ("C", "F"):
            raise ConfigError(f"order: must be 'C' (row-major) or 'F' (column-major), got {order!r}")
        itemsize = _itemsize(dtype)
        nbytes = math.prod(shape) * itemsize
        strides = c_strides(shape, itemsize) if order == "C" else _f_strides(shape, itemsize)
        device = devices.resolve(device, "device")
        if nbytes == 0:  # nothing to allocate, nothing to free
            return cls(0, shape, dtype, strides, 0, device=device)
        # the pool looked up inside: its first use makes the device's context current, as the allocation needs
        return driver.call_on(device, lambda: cls.allocate(shape, np.dtype(dtype), strides, nbytes, stream,
                                                           cu_stream(stream), device, memory_pool(device)))

    @classmethod
    def allocate(cls, shape: tuple, dtype: np.dtype, strides: tuple, nbytes: int, stream, handle, device: int,
                 pool) -> "DeviceArray":
        """`empty` for a caller that has checked and derived everything once (a plan cache's entry: shape, dtype,
        C-order strides, nbytes > 0, the stream and its CUstream handle, the device and its pool): the allocation
        alone, on the hot path. The device's context must be current (the legacy stream is the current context's):
        the caller's business (`empty`, or matmul's cached call through devices.in_own_context). A block an earlier
        such result gave back on this device and stream is taken first (ptxgemm.runtime.recycling: no driver call, and
        the same address as last time); outside a CUDA graph capture, this result gives its block back the same way
        when it goes."""
        h = int(handle)
        recycle = not recycling.capturing(h)
        ptr = recycling.take(device, h, nbytes) if recycle else 0
        if not ptr:
            alloc = libcuda.function("cuMemAllocFromPoolAsync")
            if alloc is not None:   # one foreign call (ptxgemm.runtime.libcuda), against the bindings' wrapper
                value = ctypes.c_uint64()
                err = alloc(ctypes.byref(value), nbytes, int(pool), h)
                err, ptr = cu.CUresult(err) if err else None, value.value
            else:
                err, ptr = cu.cuMemAllocFromPoolAsync(nbytes, pool, handle)
                err = None if err == cu.CUresult.CUDA_SUCCESS else err
            if err is not None:   # the message is built only when needed: this is the hot path
                check((err,), f"allocating {nbytes} bytes for a {shape} {dtype} array on device {device} "
                              f"(cuMemAllocFromPoolAsync)")
        out = cls.__new__(cls)
        out.ptr, out.shape, out.dtype, out.strides, out.nbytes = int(ptr), shape, dtype, strides, nbytes
        out._owner, out.base, out._stream, out._stream_handle, out.device = True, None, stream, handle, device
        out._recycle = recycle
        return out

    @classmethod
    def from_numpy(cls, arr: np.ndarray, stream=None, device: int | None = None) -> "DeviceArray":
        """`arr` on `device` (None: the thread's current device), in one host-to-device copy ordered on `stream`, for
        any numpy layout.

        A C- or Fortran-contiguous array comes back as an owning array in the same order. Any other layout
        (transposed, stepped, reversed, broadcast) uploads the smallest span of memory holding all of its elements
        and comes back as a view with numpy's strides into that span: nothing is reordered on the host."""
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"DeviceArray.from_numpy takes a numpy.ndarray, not {type(arr).__name__}")
        if arr.flags.c_contiguous or arr.flags.f_contiguous:
            out = cls.empty(arr.shape, arr.dtype, order="C" if arr.flags.c_contiguous else "F", stream=stream,
                            device=device)
            out._upload(arr.ctypes.data, arr.nbytes, stream)
            return out
        low, span = byte_span(arr.shape, arr.strides, arr.itemsize)
        buffer = cls.empty((span,), np.uint8, stream=stream, device=device)
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
        return interop.export_dlpack(self)

    def __dlpack_device__(self):
        return (interop.KDL_CUDA, self.device)

    @property
    def __cuda_array_interface__(self) -> dict:
        return interop.cuda_array_interface(self)

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
    @_on_own_device
    def _upload(self, host_ptr: int, nbytes: int, stream):
        """One host-to-device copy to self.ptr, ordered on `stream`. The driver copies pageable host memory into a
        staging buffer before returning, so the host array may change or go as soon as this returns."""
        if nbytes:
            check(cu.cuMemcpyHtoDAsync(self.ptr, host_ptr, nbytes, cu_stream(stream)),
                  f"copying {nbytes} bytes host→device")

    @_on_own_device
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
        relayout.copy_array(self, DeviceArray.from_numpy(arr, stream=stream, device=self.device), stream)

    @_on_own_device
    def to_numpy(self) -> np.ndarray:
        """The array's values in a new numpy array (C order; Fortran order for a column-major dense array). Waits
        for the whole GPU first: the data must be final before it comes back to the host."""
        if self.is_c_contiguous or self.is_f_contiguous:
            out = np.empty(self.shape, self.dtype, order="C" if self.is_c_contiguous else "F")
            if out.nbytes:
                synchronize("waiting for the GPU before a device→host copy", self.device)
                check(cu.cuMemcpyDtoH(out.ctypes.data, self.ptr, out.nbytes),
                      f"copying {out.nbytes} bytes device→host")
            return out
        # Any other layout: gathered into a dense temporary on the device, then one copy down. The gather runs on
        # the stream of the array's memory, after a wait for the whole GPU: whatever stream wrote the values, they
        # are final before they are read, as for a dense array.
        synchronize("waiting for the GPU before gathering a strided array for a device→host copy", self.device)
        dense = DeviceArray.empty(self.shape, self.dtype, stream=self.stream, device=self.device)
        relayout.copy_array(dense, self, self.stream)
        out = dense.to_numpy()
        dense.free()
        return out

    @_on_own_device
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
        handle = cu_stream(self.stream if stream is None else stream)
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
            handle = self._stream_handle if self._stream_handle is not None else cu_stream(None)
            if self._recycle and recycling.give(self.device, int(handle), self.nbytes, ptr, self._stream):
                return
            if devices.several_contexts:   # the legacy stream is the current context's: the array's device's then
                devices.in_context(driver.context_of(self.device), driver.free_async, ptr, handle)
            else:
                driver.free_async(ptr, handle)

    def __del__(self):
        try:
            self.free()
        except Exception:  # noqa: BLE001 - interpreter shutdown or a dead context: nothing useful to do
            pass

    def __repr__(self):
        kind = "" if self.base is None else ", view"
        return (f"DeviceArray(shape={self.shape}, dtype={self.dtype}, strides={self.strides}, "
                f"ptr=0x{self.ptr:x}, device={self.device}{kind})")


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


def as_device_array(obj, name: str, stream=None) -> DeviceArray:
    """A DeviceArray view of `obj` (a DeviceArray, or anything with __dlpack__ or __cuda_array_interface__), never a
    copy. `name` is the argument's name in error messages; `stream` is where the view will be used."""
    if isinstance(obj, DeviceArray):  # first: this is on every matmul's path
        return obj
    if isinstance(obj, np.ndarray):
        raise ConfigError(f"{name}: a numpy array lives in host memory; use ptxgemm.run for numpy arrays, or "
                          f"ptxgemm.to_device to upload it once")
    foreign = interop.read_foreign(obj, name, stream)
    if foreign is None:
        raise ConfigError(f"{name}: a {type(obj).__name__} is neither a ptxgemm.DeviceArray nor an object with "
                          f"__dlpack__ or __cuda_array_interface__")
    # the device DLPack names; the CUDA array interface names none: taken as the thread's current device (what the
    # call's key holds, asking the driver nothing per call) and checked against the pointer's when planned
    view = DeviceArray(foreign.ptr, foreign.shape, foreign.dtype, foreign.strides, owner=False, device=foreign.device)
    view._keepalive = foreign.keepalive
    view._assumed_device = foreign.device is None
    return view


def call_device(args: dict, is_array) -> int | None:
    """The one device of a call's arrays (`args` by name, in the arguments' order; `is_array(name, x)` says which are
    arrays), when it is planned: devices.common on their devices (a ConfigError names an array on another device
    than the first), None when no argument is an array. An array read through __cuda_array_interface__, which names
    no device and was taken as the thread's current one, is first checked to lie there (cuPointerGetAttribute)."""
    for name, x in args.items():
        if is_array(name, x) and getattr(x, "_assumed_device", False):
            actual = driver.pointer_device(x.ptr)
            if actual is not None and actual != x.device:
                raise ConfigError(f"{name}: its memory is on CUDA device {actual}, but __cuda_array_interface__ names "
                                  f"no device, so ptxgemm takes the array on the thread's current device, "
                                  f"{x.device}: call inside `with ptxgemm.device({actual}):` (or pass it through "
                                  f"DLPack, which names its device)")
    return devices.common((name, x.device) for name, x in args.items() if is_array(name, x))
