"""Results handed back on their own stream: a per-call result's memory kept for the next call on that stream.

Every array ptxgemm allocates goes through `DeviceArray.allocate` (`empty`, uploads, matmul's per-call result), so
every one is kept this way when it goes; the per-call result is why.

A matmul that allocates its result (`DeviceArray.allocate`, the per-call path) and a caller that drops the result
before the next call is the common case in a loop or a layer: allocation then free then allocation of the same size
on the same stream, each a driver call (cuMemAllocFromPoolAsync, cuMemFreeAsync), and each new address moves the
plan's output map (cuTensorMapReplaceAddress). Kept here instead, the block comes back at the same address: no
allocation, no free, and the output slots the plan bound last time are already right (ptxgemm.runtime.patch binds
only what moved). torch's caching allocator does the same for every tensor, which is why F.linear's results recur.

Why it is safe: a block is taken back only on the stream it was freed on, so every later use is ordered after every
earlier one by the stream itself -- the stream-ordered pool's own rule (cuMemFreeAsync), kept without the driver.
Work on other streams that used the memory must be ordered before the free by the caller, as with the pool. A kept
block holds its stream object (ptxgemm's Stream, torch's, CuPy's), so the stream outlives it and its handle cannot
name a new stream; a stream given as a raw handle is the caller's to keep alive, as cuMemFreeAsync already asks of
every result allocated on it, until `ptxgemm.runtime.driver.trim_memory_pool()` has given its blocks back.

CUDA graphs: nothing is handed back or taken while the stream is being captured (cuStreamIsCapturing): a captured
allocation is the graph's memory, and a block taken during a capture would be baked into the graph while the pool's
next user wrote it. An array allocated during a capture is never handed back (`DeviceArray.allocate` marks it).

`release(free)` frees every kept block on its stream (ptxgemm.runtime.driver.trim_memory_pool calls it first)."""
from __future__ import annotations

import ctypes
import threading

from . import libcuda

#: blocks kept per (stream, size): one covers a caller that drops each result before the next call; a few more, a
#: result kept across a call or two (a residual, the other branch of a layer) without going back to the driver
DEPTH = 4
#: bytes kept in all: the blocks past it go back to the pool, so a sweep over many sizes cannot hold memory hostage
MAX_BYTES = 1 << 30

# (device ordinal, stream handle, nbytes) -> [(address, stream object)], last in first out. The device is part of the
# key because a handle is not: 0, the legacy default stream, is every context's own
_kept: dict[tuple[int, int, int], list] = {}
_bytes = [0]
_lock = threading.Lock()   # take and give from any thread (a result dropped on another thread frees there)

_CAPTURE_NONE = 0          # CUstreamCaptureStatus: CU_STREAM_CAPTURE_STATUS_NONE


def capturing(handle: int) -> bool:
    """Whether `handle`'s stream is being captured into a CUDA graph (any status but NONE; an error counts as
    capturing, so the caller takes the driver's route, which reports it)."""
    fn = libcuda.function("cuStreamIsCapturing")
    if fn is None:
        return True
    status = ctypes.c_int()
    return bool(fn(handle, ctypes.byref(status))) or status.value != _CAPTURE_NONE


def take(device: int, handle: int, nbytes: int) -> int:
    """A kept block of `nbytes` on `device`'s stream `handle` (its address), or 0: none kept. The caller has checked
    that the stream is not capturing (and marks what it allocates during a capture as never to be given back)."""
    blocks = _kept.get((device, handle, nbytes))
    if not blocks:
        return 0
    with _lock:
        if not blocks:
            return 0
        _bytes[0] -= nbytes
        return blocks.pop()[0]


def give(device: int, handle: int, nbytes: int, ptr: int, stream=None) -> bool:
    """Keep a freed block (and `stream`, the object its handle came from) for the next `take` on its stream; False
    (the caller frees it) when the stream is capturing or DEPTH blocks of that size, or MAX_BYTES in all, are kept
    already."""
    if capturing(handle):
        return False
    with _lock:
        blocks = _kept.setdefault((device, handle, nbytes), [])
        if len(blocks) >= DEPTH or _bytes[0] + nbytes > MAX_BYTES:
            return False
        blocks.append((ptr, stream))
        _bytes[0] += nbytes
        return True


def kept_bytes(device: int | None = None) -> int:
    """Bytes kept, on `device` (None: on every device)."""
    if device is None:
        return _bytes[0]
    with _lock:
        return sum(n * len(blocks) for (d, _, n), blocks in _kept.items() if d == device)


def release(free, device: int | None = None) -> None:
    """Every block kept on `device` (None: on every device) through `free(ptr, handle)` (cuMemFreeAsync, on the
    stream it was kept for; the caller makes the device's context current: a legacy-stream handle is its)."""
    with _lock:
        keys = [key for key in _kept if device is None or key[0] == device]
        kept = [(key[1], ptr) for key in keys for ptr, _stream in _kept.pop(key)]
        _bytes[0] = sum(n * len(blocks) for (_, _, n), blocks in _kept.items())
    for handle, ptr in kept:
        free(ptr, handle)
