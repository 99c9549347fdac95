"""The per-call half of a plan, shared by the dense and the grouped plan (ptxgemm.gemm.GemmPlan,
ptxgemm.grouped.GroupedPlan): bind the address slots to a call's arrays and enqueue the prepared launches, in the
plan's own CUDA context where the process has several (ptxgemm.runtime.devices), and in debug builds wait for the
GPU so that a stalled barrier becomes an exception that names it.

A subclass provides `_slots` (patch.AddressSlots), `_steps` (the prepared launches, each called with the stream),
`_lock` (a bind and the launches that read it go together), `context` (its device's driver context, None with
nothing to launch), `records` (debug.StallRecords, or None), `device` and `config`."""
from __future__ import annotations

from ..errors import CudaError
from . import devices, driver


class BoundLaunches:

    def launch_at(self, ptrs: tuple, stream=None) -> None:
        """Bind to the arrays at `ptrs` (ROLES order; the caller has checked that their signatures are the plan's,
        as a plan cache's key does) and launch, on `stream` (one of the plan's device; None: its legacy default
        stream): the per-call path of matmul, grouped_matmul and the torch ops."""
        if devices.several_contexts:   # another device's context may be current here: the plan's, around the work
            return devices.in_context(self.context, self._enqueue, ptrs, stream)
        # devices.in_own_context(self.context, self._enqueue, ...) written out: one context in the process costs this
        # path the test above and nothing more
        try:
            with self._lock:   # binding and enqueueing together: another thread's binding cannot come between
                self._slots.bind(ptrs)
                for step in self._steps:
                    step(stream)
        except CudaError as e:   # refused in the context another library made current since: again, in the plan's
            if not devices.elsewhere(self.context, e):
                raise
            return devices.in_context(self.context, self._enqueue, ptrs, stream)
        if self.records is not None:
            self._wait_for_stalls()

    def launch(self, stream=None):
        """Enqueue on `stream` (one of the plan's device; None: its legacy default stream) what the plan runs, on the
        arrays it is bound to."""
        devices.in_own_context(self.context, self._enqueue, None, stream)

    def _enqueue(self, ptrs: tuple | None, stream) -> None:
        """launch_at (launch: `ptrs` None, the arrays bound already), for devices.in_context."""
        with self._lock:
            if ptrs is not None:
                self._slots.bind(ptrs)
            for step in self._steps:
                step(stream)
        if self.records is not None:
            self._wait_for_stalls()

    def _wait_for_stalls(self) -> None:
        """debug: wait here so that a stall becomes an exception that names the barrier."""
        what = f"running {self.config.describe()}"
        try:
            driver.synchronize(what, self.device)
        except CudaError as e:
            self.records.raise_if_stalled(what, e)
            raise
