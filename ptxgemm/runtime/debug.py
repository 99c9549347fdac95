"""Debug mode for kernels: bounded barrier waits that report *which* barrier stalled instead of hanging the GPU.

In debug mode every mbarrier wait in the PTX gives up after `timeout_ns` of %globaltimer, writes a 32-byte
record (see ptxgemm/kernel/templates/mbarrier.ptx.j2 `report_stall`) into pinned host memory mapped into the GPU, and
traps. The trap kills the CUDA context, but the records live in host memory, so `StallRecords.raise_if_stalled`
can still read them and raise an exception that names the barrier, the parity, the CTA and the thread.
"""
from __future__ import annotations

import ctypes

import numpy as np

from ..errors import CudaError
from ..kernel.stall_format import BARRIER_NAMES, MAGIC, RECORD_BYTES
from .driver import check, context, cu

class HostMappedBuffer:
    """Pinned host memory the GPU can write to directly (the thread's current device: a plan makes its own current
    while it is made). Used for debug records: it stays readable from the host even after a kernel `trap` has made
    the context unusable."""

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


class BarrierStall(CudaError):
    """A debug-mode wait gave up: the barrier's phase never completed."""


class StallRecords:
    """Mapped host memory with one record per thread of a launch, passed to a debug kernel as a u64 pointer."""

    def __init__(self, n_ctas: int, threads_per_cta: int):
        self.threads = threads_per_cta
        self.buffer = HostMappedBuffer(max(n_ctas * threads_per_cta, 1) * RECORD_BYTES)

    @property
    def device_pointer(self) -> int:
        return self.buffer.dev_ptr

    def stalls(self) -> list[dict]:
        words = self.buffer.as_u32().reshape(-1, RECORD_BYTES // 4)
        hits = np.nonzero((words[:, 0] >> 16) == MAGIC)[0]
        out = []
        for slot in hits:
            w = words[slot]
            code = int(w[0] & 0xFFFF)
            out.append({"barrier": BARRIER_NAMES.get(code, f"code {code}"), "code": code, "parity": int(w[1]),
                        "smem_address": int(w[2]), "thread": int(w[3]), "cta": int(w[4]), "detail": int(w[5]),
                        "globaltimer_ns": int(w[6]) | (int(w[7]) << 32)})
        return sorted(out, key=lambda r: r["globaltimer_ns"])

    def raise_if_stalled(self, what: str, cause: BaseException | None = None):
        stalls = self.stalls()
        if not stalls:
            return
        first = stalls[0]
        detail = (f"{len(stalls)} thread(s) gave up; first: barrier '{first['barrier']}' at smem 0x{first['smem_address']:x} "
                  f"waiting for parity {first['parity']}, CTA {first['cta']} thread {first['thread']} "
                  f"(warpgroup {first['thread'] // 128}), detail {first['detail']}")
        raise BarrierStall("BARRIER_STALL", what, detail) from cause
