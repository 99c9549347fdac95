"""The kernel-duration method: DeepGEMM's own way of timing the figures it publishes (its `bench_kineto`).

Each implementation runs `calls` times inside one torch.profiler (CUPTI) session; the figure is the summed duration of
the kernels each call ran, as the profiler's trace records them on the GPU, averaged over the calls. It leaves out
what burst and back to back include: the gap between an event and the kernel's start, and the gaps between queued
launches. Two forms: without a flush, the calls back to back (DeepGEMM's harness of 2025-02, when its published
dense and grouped tables were taken: `bench_kineto` had no flush), and with the L2 flushed before every call (its
later harness, which flushes by default). It needs torch (the profiler), so it is measured only where torch is
present, and only for the shapes that carry a published DeepGEMM figure.

Each implementation's window begins the way a shape's test began in that harness: one call, then `calls` calls
the profiler does not record (its warm-up cycle), then the `calls` it records, back to back within each cycle.
Before that, the GPU rests SETTLE_S seconds, so that no implementation inherits the heat of the one timed before
it: a kernel long enough to reach the power limit otherwise runs faster when timed first (H100, 4096x7168x16384,
the same blockwise kernel: 1255 TFLOP/s timed first, 1173 timed second; per-tensor 1557 against 1422, with equal
burst times, docs/results/h100/fp8/l2promo_h100_issue24.json.gz).

ptxgemm's plans are timed here as made without programmatic dependent launch (driver.programmatic_launches(False);
the caller makes them so). A programmatic dependent is launched while the kernel before it still runs -- the previous
call's GEMM, or the flush, which the driver runs as a kernel -- and waits on the device for it; the trace records its
span from that early start, so a sum of spans counts the wait. Measured on the H200 (device run 28, with PDL):
4096x7168x16384 blockwise, 0.879 ms per call back to back and 0.777 ms flushed by spans, against 0.741 ms between
events. Without the attribute each span is the kernel's own, as a plain launch's (DeepGEMM's) is.

Kernels from any launcher in the process are in the trace (CUPTI records the context's activity, so ptxgemm's
cuda-bindings launches appear beside torch's); the flush's memset is not a kernel and is left out.
"""
from __future__ import annotations

import time
from collections.abc import Callable

from ..runtime import timing

CALLS = 30        # bench_kineto's num_tests
SETTLE_S = 1.0    # the idle before each implementation's window (as the sustained method's, ptxgemm.bench.power)
METHOD_KERNEL = (f"kernel: the GPU duration of each call's kernels in a torch.profiler (CUPTI) trace, after "
                 f"{SETTLE_S:g} s idle, one call and {CALLS} unrecorded calls, {CALLS} recorded calls back to back, "
                 f"their mean (DeepGEMM's bench_kineto of 2025-02, its published tables' method); "
                 f"kernel_flushed: the same with the L2 flushed before each call (its later harness). ptxgemm's plans "
                 f"made without programmatic dependent launch for this method (a dependent's span would include "
                 f"its wait for the kernel before it). DeepGEMM's shapes only, torch present")


def _duration_us(event) -> float:
    """A device event's duration in microseconds, across torch versions' FunctionEvent spellings."""
    rng = getattr(event, "time_range", None)
    if rng is not None:
        return float(rng.elapsed_us())
    return float(getattr(event, "device_time", None) or getattr(event, "cuda_time", 0.0))


def kernel_ms(launchers: dict[str, Callable[[], object]], torch, calls: int = CALLS,
              flush: bool = False) -> dict[str, float | None]:
    """{name: mean milliseconds of GPU kernel time per call}; None for a launcher whose kernels the trace lacks.
    `flush`: the L2 flushed before every call."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, schedule

    out = {}
    for name, launch in launchers.items():
        launch()
        torch.cuda.synchronize()
        time.sleep(SETTLE_S)
        # two cycles, as bench_kineto ran them: the profiler keeps the second. Each ends with its calls finished:
        # a warm-up kernel still running when the recording starts would be counted (the trace keeps kernels by
        # the time they run, so at 4096x7168x16384 nearly all 30 were, halving the figure), and the recorded ones
        # must end before the profiler stops
        cycles = schedule(wait=0, warmup=1, active=1, repeat=1)
        with profile(activities=[ProfilerActivity.CUDA], schedule=cycles) as prof:
            for _ in range(2):
                for _ in range(calls):
                    if flush:
                        timing.flush_l2()
                    launch()
                torch.cuda.synchronize()
                prof.step()
        kernels = [e for e in prof.events() if getattr(e, "device_type", None) == DeviceType.CUDA
                   and not e.name.lower().startswith(("memset", "memcpy"))]
        total_us = sum(_duration_us(e) for e in kernels)
        out[name] = total_us / calls / 1e3 if kernels else None
    return out
