"""The timing methods of ptxgemm's numbers (`python -m ptxgemm bench`, `python -m ptxgemm demo`).

burst (time_interleaved; every figure unless a row says otherwise): L2 flushed (a memset twice its size) before
each launch, CUDA events around the launch alone on one stream, implementations interleaved round by round with
the order alternating, median over rounds.

back to back (time_back_to_back; only beside a burst figure, for comparison with numbers measured that way, such
as DeepGEMM's published ones): no flush, a run of launches queued back to back, CUDA events around the whole run,
its mean per launch; the median over rounds, implementations interleaved. The L2 stays warm with the operands and
the launch gaps overlap the previous kernel, so a small kernel times close to its own duration. Short runs: this is
not the sustained, power-limited figure of a long run.

sustained (time_sustained; `bench --sustained S`): one launcher's launches queued back to back for at least S
seconds with no flush, the way a training step runs them, CUDA events around the whole window, its mean per launch.
The board reaches its power limit within the window and the clock falls until it draws no more, so this figure,
not burst, ranks kernels by energy per FLOP. The caller idles between windows (bench: --sustained-gap) so each
starts from a cool, boosted state.

Each method times launches on the thread's current device (`with ptxgemm.device(n):`): its events, its legacy
stream and its L2.
"""
from __future__ import annotations

import functools
import statistics
from collections.abc import Callable

import numpy as np

from . import devices, driver
from .arrays import DeviceArray


def _median_of_rounds(launchers: dict[str, Callable[[], object]], rounds: int, warmup: int, sample) -> dict[str, float]:
    """Each launcher warmed up, then `rounds` rounds of sample(launcher) -> ms over all of them, the order
    alternating round by round; the median per launcher."""
    names = list(launchers)
    for name in names:
        for _ in range(warmup):
            launchers[name]()
    driver.synchronize("warming up")
    samples = {n: [] for n in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            samples[name].append(sample(launchers[name]))
    return {n: statistics.median(s) for n, s in samples.items()}


def time_interleaved(launchers: dict[str, Callable[[], object]], rounds: int, warmup: int = 3) -> dict[str, float]:
    """Median milliseconds per launcher (burst); each launcher enqueues one launch on the default stream."""
    start, end = driver.Event(), driver.Event()

    def one_launch(launch):
        flush_l2()
        start.record()
        launch()
        end.record()
        return start.elapsed_ms(end)
    return _median_of_rounds(launchers, rounds, warmup, one_launch)


def time_back_to_back(launchers: dict[str, Callable[[], object]], launches: int = 20, rounds: int = 3,
                      warmup: int = 3) -> dict[str, float]:
    """Median over rounds of the mean milliseconds per launch of `launches` back-to-back launches (see the module's
    docstring); each launcher enqueues one launch on the default stream."""
    start, end = driver.Event(), driver.Event()

    def one_run(launch):
        start.record()
        for _ in range(launches):
            launch()
        end.record()
        return start.elapsed_ms(end) / launches
    return _median_of_rounds(launchers, rounds, warmup, one_run)


def time_sustained(launch: Callable[[], object], seconds: float, calibrate: int = 10) -> tuple[float, int]:
    """(mean ms per launch, launches) of one back-to-back window of at least `seconds` (see the module's
    docstring): the launch count from a short back-to-back run of `calibrate` launches first. Returns once the GPU
    has finished the window."""
    start, end = driver.Event(), driver.Event()
    launch()
    start.record()
    for _ in range(calibrate):
        launch()
    end.record()
    end.synchronize()
    per_ms = max(start.elapsed_ms(end) / calibrate, 1e-3)
    launches = max(calibrate, int(seconds * 1000.0 / per_ms) + 1)
    start.record()
    for _ in range(launches):
        launch()
    end.record()
    end.synchronize()
    return start.elapsed_ms(end) / launches, launches


@functools.lru_cache(maxsize=None)
def _l2_flush_buffer(ordinal: int) -> DeviceArray:
    """Device `ordinal`'s flush buffer, made once per device."""
    return DeviceArray.empty((2 * max(driver.device_info(ordinal).l2_bytes, 1 << 20),), np.uint8, device=ordinal)


def flush_l2(stream=None):
    """Evict the thread's current device's L2 (`stream`: one of that device) by writing a buffer twice its size (the
    way cuBLAS/Triton benchmarks do)."""
    buf = _l2_flush_buffer(devices.current())
    driver.check(driver.cu.cuMemsetD8Async(buf.ptr, 0, buf.nbytes, driver.cu_stream(stream)), "flushing L2")
