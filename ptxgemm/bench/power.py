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
import functools
import operator
import statistics
import threading
import time

#: seconds between samples: NVML's power reading is itself a moving average over about 25 ms on Hopper
SAMPLE_INTERVAL_S = 0.02
#: samples from the window's start ignored in the clock and power means: the clock needs a few tens of ms to fall
#: from its boost value once the board reaches its limit
SETTLE_S = 0.25
#: NVML's clock event reasons (nvmlClocksEventReason*; the same bits as the older "throttle reasons") worth naming in
#: a window. "sw_power_cap" is what a power-limited window should show; the others mean the board held the clock down
#: for reasons of its own (heat, a power brake, a slowdown signal), and then its figures do not measure the kernel
#: (one H100 of the pool ran every sustained window at 400-800 MHz and 250-390 W, docs/perf-notes.md issue 26 step 12).
CLOCK_REASONS = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal", 0x40: "hw_thermal",
                 0x80: "hw_power_brake"}
HARDWARE_LIMITS = ("hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake")


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
    clock_limits: list[str] | None = None   # CLOCK_REASONS seen in the settled samples (None: not read)

    @property
    def held_down(self) -> list[str]:
        """The HARDWARE_LIMITS among clock_limits: the board, not the power limit, set this window's clock."""
        return [r for r in self.clock_limits or () if r in HARDWARE_LIMITS]

    def joules_per_tflop(self, flops: float) -> float | None:
        return self.joules / (flops / 1e12) if self.joules is not None and flops > 0 else None


def reason_names(bits: int) -> list[str]:
    """The CLOCK_REASONS set in a clock event reason bit mask."""
    return [name for bit, name in CLOCK_REASONS.items() if bits & bit]


def summarize(samples: list[tuple], seconds: float, energy_mj: tuple[int, int] | None,
              settle_s: float = SETTLE_S) -> Window:
    """A Window from samples (t seconds since the window began, SM MHz, watts[, clock event reason bits or None])
    and the energy counter's readings at both ends (millijoules, or None). The means, and the reasons, skip the
    first settle_s seconds unless that leaves none."""
    settled = [s for s in samples if s[0] >= settle_s] or samples
    w = Window(seconds=seconds, samples=len(settled))
    if settled:
        w.sm_mhz = statistics.fmean(s[1] for s in settled)
        w.watts = statistics.fmean(s[2] for s in settled)
        bits = [s[3] for s in settled if len(s) > 3 and s[3] is not None]
        if bits:
            w.clock_limits = reason_names(functools.reduce(operator.or_, bits))
    if energy_mj is not None and energy_mj[1] > energy_mj[0]:
        w.joules, w.energy_source = (energy_mj[1] - energy_mj[0]) / 1000.0, "counter"
    elif w.watts is not None:
        w.joules, w.energy_source = w.watts * seconds, "mean power x time"
    return w


class Sampler:
    """NVML on the GPU with `pci_bus_id`; `measure(run)` samples while `run()` executes and returns its Window.
    Without pynvml (or NVML) every window has only its length, and `note` says why."""

    def __init__(self, pci_bus_id: str | None):
        self.nvml, self.handle, self.note, self._read_reasons = None, None, "", None
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
            # the clock event reasons' call, by its newer name or the older one (None: this NVML has neither)
            self._read_reasons = (getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
                                  or getattr(pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None))
        except Exception as e:  # noqa: BLE001 - NVML's own error, reported with the figures
            self.note = f"NVML unavailable ({type(e).__name__}: {e}): no clock, power or energy"

    def _energy(self) -> int | None:
        try:
            return int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))
        except Exception:  # noqa: BLE001 - older boards have no counter; the mean power stands in
            return None

    def _reasons(self) -> int | None:
        """The clock event reason bits now (None where NVML cannot say)."""
        if self._read_reasons is None:
            return None
        try:
            return int(self._read_reasons(self.handle))
        except Exception:  # noqa: BLE001 - not supported on this board: the window has no reasons
            return None

    def _sample(self) -> tuple[float, float, int | None]:
        mhz = self.nvml.nvmlDeviceGetClockInfo(self.handle, self.nvml.NVML_CLOCK_SM)
        return float(mhz), self.nvml.nvmlDeviceGetPowerUsage(self.handle) / 1000.0, self._reasons()

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
                mhz, watts, reasons = self._sample()
                samples.append((time.perf_counter() - t0, mhz, watts, reasons))
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
