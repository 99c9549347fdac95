"""What the GPU draws while a kernel runs back to back (`bench --sustained`): SM clock and board power sampled from
NVML on a thread, and the energy counter read at both ends of the window.

NVML comes from nvidia-ml-py (`import pynvml`), an optional peer of the benchmark: without it the sustained figures
are still timed, and the clock, power and energy fields are None with the reason in `Window.note`. The library
never imports this module.

Energy is the driver's board energy counter (nvmlDeviceGetTotalEnergyConsumption, millijoules since the driver
loaded) read before and after the window; where the counter is missing, the mean of the power samples times the
window's length. Joules per TFLOP divide that by the window's FLOPs: the figure that decides a power-limited run,
where the clock falls until the board draws its limit."""
from __future__ import annotations

import dataclasses
import statistics
import threading
import time

#: seconds between samples: NVML's power reading is itself a moving average over about 25 ms on Hopper
SAMPLE_INTERVAL_S = 0.02
#: samples from the window's start ignored in the clock and power means: the clock needs a few tens of ms to fall
#: from its boost value once the board reaches its limit
SETTLE_S = 0.25


@dataclasses.dataclass
class Window:
    """One back-to-back window's draw: means over its settled samples, and its energy."""

    seconds: float
    sm_mhz: float | None = None
    watts: float | None = None
    joules: float | None = None
    samples: int = 0
    energy_source: str | None = None    # "counter" or "mean power x time"
    note: str = ""

    def joules_per_tflop(self, flops: float) -> float | None:
        return self.joules / (flops / 1e12) if self.joules is not None and flops > 0 else None


def summarize(samples: list[tuple[float, float, float]], seconds: float, energy_mj: tuple[int, int] | None,
              settle_s: float = SETTLE_S) -> Window:
    """A Window from samples (t seconds since the window began, SM MHz, watts) and the energy counter's readings
    at both ends (millijoules, or None). The means skip the first settle_s seconds unless that leaves none."""
    settled = [s for s in samples if s[0] >= settle_s] or samples
    w = Window(seconds=seconds, samples=len(settled))
    if settled:
        w.sm_mhz = statistics.fmean(s[1] for s in settled)
        w.watts = statistics.fmean(s[2] for s in settled)
    if energy_mj is not None and energy_mj[1] > energy_mj[0]:
        w.joules, w.energy_source = (energy_mj[1] - energy_mj[0]) / 1000.0, "counter"
    elif w.watts is not None:
        w.joules, w.energy_source = w.watts * seconds, "mean power x time"
    return w


class Sampler:
    """NVML on the GPU with `pci_bus_id`; `measure(run)` samples while `run()` executes and returns its Window.
    Without pynvml (or NVML) every window has only its length, and `note` says why."""

    def __init__(self, pci_bus_id: str | None):
        self.nvml, self.handle, self.note = None, None, ""
        try:
            import pynvml
        except ImportError:
            self.note = "nvidia-ml-py (pynvml) is not installed: no clock, power or energy"
            return
        try:
            pynvml.nvmlInit()
            self.handle = (pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id) if pci_bus_id else
                           pynvml.nvmlDeviceGetHandleByIndex(0))
            self.nvml = pynvml
        except Exception as e:  # noqa: BLE001 - NVML's own error, reported with the figures
            self.note = f"NVML unavailable ({type(e).__name__}: {e}): no clock, power or energy"

    def _energy(self) -> int | None:
        try:
            return int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))
        except Exception:  # noqa: BLE001 - older boards have no counter; the mean power stands in
            return None

    def _sample(self) -> tuple[float, float]:
        mhz = self.nvml.nvmlDeviceGetClockInfo(self.handle, self.nvml.NVML_CLOCK_SM)
        return float(mhz), self.nvml.nvmlDeviceGetPowerUsage(self.handle) / 1000.0

    def measure(self, run) -> tuple[object, Window]:
        """run()'s result and the Window of the time it took (run must return only once the GPU is done)."""
        if self.nvml is None:
            t0 = time.perf_counter()
            result = run()
            return result, Window(seconds=time.perf_counter() - t0, note=self.note)
        samples, stop = [], threading.Event()
        t0 = time.perf_counter()

        def poll():
            while not stop.is_set():
                mhz, watts = self._sample()
                samples.append((time.perf_counter() - t0, mhz, watts))
                stop.wait(SAMPLE_INTERVAL_S)
        e0 = self._energy()
        thread = threading.Thread(target=poll, daemon=True)
        thread.start()
        try:
            result = run()
        finally:
            stop.set()
            thread.join()
        seconds = time.perf_counter() - t0
        e1 = self._energy()
        return result, summarize(samples, seconds, (e0, e1) if e0 is not None and e1 is not None else None)
