"""Trace one GEMM launch on the GPU and measure what tracing costs (`python -m ptxgemm trace`).

`record` runs a traced plan once to warm up and once under CUDA events (L2 flushed first, as every ptxgemm timing
is), reads the events of that second launch and checks its result on sampled rows against float64, so a trace is
never drawn from a wrong kernel. `overhead` times the traced and the untraced kernel side by side with the bench
method (ptxgemm.runtime.timing: interleaved rounds, L2 flushed before each launch, medians), in several independent sets so
the spread is visible. The event formats and the analysis live in ptxgemm.tools.trace.
"""
from __future__ import annotations

import dataclasses
import statistics

import numpy as np

from .. import accuracy, gemm
from ..errors import ConfigError
from ..kernel.config import FIELD_PARTS, GemmConfig
from ..runtime import arrays, driver, timing
from .trace import Trace

CHECK_ROWS = 128          # rows of the float64 reference (the whole matrix would take the CPU seconds)
SPAN_TOLERANCE = 0.05     # the trace's first-to-last event span must be within this of the event-timed launch


@dataclasses.dataclass
class Recording:
    trace: object          # ptxgemm.tools.trace.Trace
    event_ms: float        # the traced launch, timed with CUDA events
    verdict: accuracy.Verdict
    ptxas: dict            # the traced build's registers and spills (tracing must not change the kernel's code)


@dataclasses.dataclass
class Overhead:
    off_ms: list           # per set: median of the untraced kernel
    on_ms: list            # per set: median of the traced kernel
    rounds: int

    @property
    def ratios(self) -> list:
        return [on / off for on, off in zip(self.on_ms, self.off_ms)]

    def as_dict(self) -> dict:
        r = self.ratios
        return {"rounds_per_set": self.rounds, "off_ms": self.off_ms, "on_ms": self.on_ms, "on_over_off": r,
                "overhead": {"min": min(r) - 1, "median": statistics.median(r) - 1, "max": max(r) - 1}}

    def __str__(self) -> str:
        d = self.as_dict()["overhead"]
        return (f"tracing overhead (trace on / off - 1, {len(self.ratios)} sets of {self.rounds} interleaved rounds, "
                f"L2 flushed before each launch): min {d['min']:+.2%}, median {d['median']:+.2%}, "
                f"max {d['max']:+.2%}; untraced median {statistics.median(self.off_ms):.4f} ms")


def _operands(m: int, n: int, k: int, config: GemmConfig, seed: int):
    """Random inputs in the layouts the config names (A K-major = row-major (M, K); B MN-major = row-major (K, N))."""
    rng = np.random.default_rng(seed)
    a = accuracy.random_matrix(rng, m, k, config.in_dtype, "C" if config.a_major == "k" else "F")
    b = accuracy.random_matrix(rng, k, n, config.in_dtype, "C" if config.b_major == "mn" else "F")
    return rng, a, b


def _ptxas_numbers(plan) -> dict:
    fn = plan.kernel.compiled.report.functions.get(plan.config.kernel_name) if plan.kernel.compiled.report else None
    if fn is None:
        return {}
    return {"registers": fn.registers, "spill_store_bytes": fn.spill_store_bytes,
            "spill_load_bytes": fn.spill_load_bytes}


def record(m: int, n: int, k: int, config: GemmConfig | None = None, *, ctas: int | None = None, seed: int = 0,
           meta: dict | None = None) -> Recording:
    """Trace one launch of the GEMM (config.trace is switched on here) and check its result."""

    driver.require_sm90("tracing a GEMM (python -m ptxgemm trace)")
    config = dataclasses.replace(config or GemmConfig(), trace=True)
    rng, a, b = _operands(m, n, k, config, seed)
    out = arrays.DeviceArray.empty((m, n), np.dtype(config.out_dtype))
    out.poison()
    plan = gemm.GemmPlan(arrays.DeviceArray.from_numpy(a), arrays.DeviceArray.from_numpy(b), out, config, ctas=ctas)
    plan.launch()                                   # compile, load, first touch
    start, end = driver.Event(), driver.Event()
    out.poison()
    timing.flush_l2()
    start.record()
    plan.launch()                                   # the traced launch, timed by itself: its span is compared with
    end.record()                                    # this time, never another launch's (they differ by up to 10%)
    event_ms = start.elapsed_ms(end)
    info = driver.device_info()
    trace = Trace.from_plan(plan, {"event_ms": event_ms, "driver": info.driver_version_str,
                                   "sm_count": info.sm_count, **(meta or {})})
    rows = np.sort(rng.choice(m, size=min(CHECK_ROWS, m), replace=False))
    ref, abs_product = accuracy.reference(a[rows], b)
    # the bound of the inputs' dtype: fp8 products accumulate at the tensor cores' reduced width (accuracy)
    verdict = accuracy.check(out.to_numpy()[rows], ref, abs_product, k, in_dtype=config.in_dtype)
    return Recording(trace, event_ms, verdict, _ptxas_numbers(plan))


def overhead(m: int, n: int, k: int, config: GemmConfig | None = None, *, rounds: int = 20, sets: int = 3,
             seed: int = 0) -> Overhead:
    """The traced kernel against the same kernel without tracing, on the same operands, side by side."""

    if rounds < 1 or sets < 1:
        raise ConfigError(f"rounds and sets: must be >= 1, got rounds={rounds}, sets={sets}")
    driver.require_sm90("measuring the tracing overhead")
    config = config or GemmConfig()
    _, a, b = _operands(m, n, k, config, seed)
    da, db = arrays.DeviceArray.from_numpy(a), arrays.DeviceArray.from_numpy(b)
    plans = {}
    for name, trace in (("off", False), ("on", True)):
        out = arrays.DeviceArray.empty((m, n), np.dtype(config.out_dtype))
        plans[name] = gemm.GemmPlan(da, db, out, dataclasses.replace(config, trace=trace))
    off, on = [], []
    for _ in range(sets):
        medians = timing.time_interleaved({name: plan.launch for name, plan in plans.items()}, rounds)
        off.append(medians["off"])
        on.append(medians["on"])
    return Overhead(off, on, rounds)


def config_variant(base: GemmConfig, spec: str) -> GemmConfig:
    """`base` with the fields of 'name=value,name=value' replaced (e.g. 'block_n=192,cluster_m=2'), validated."""
    fields = FIELD_PARTS
    changes = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, sep, value = item.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in fields or name in ("trace", "debug", "debug_timeout_ns"):
            allowed = ", ".join(n for n in fields if n not in ("trace", "debug", "debug_timeout_ns"))
            raise ConfigError(f"--also {spec!r}: {item!r} must be NAME=VALUE with NAME one of {allowed}")
        value = value.strip()
        changes[name] = int(value) if value.lstrip("-").isdigit() else (None if value == "None" else value)
    if not changes:
        raise ConfigError(f"--also {spec!r}: names no field to change (e.g. block_n=192)")
    return dataclasses.replace(base, **changes)


def _traceable_picks(m: int, n: int, k: int, operands: dict, device=None):
    """The selection's configs for this problem, most preferred first (ptxgemm.select.cost_model.preferences: the
    tune cache's winner, then the cost model's ranking; split-K, the stream-K tail and the deep ring included), with
    `operands`' dtypes and majors, swap-AB picks (c_major 'm') passed over: a trace runs the problem as given."""
    from ..select import cost_model as model

    return (config for config, _ in model.preferences(m, n, k, **operands, device=device)
            if not config.transposed_store)


def _problem_words(m: int, n: int, k: int, operands: dict) -> str:
    return f"{m}x{n}x{k} ({', '.join(f'{name}={v}' for name, v in operands.items())})"


def selected_config(m: int, n: int, k: int, operands: dict, device=None) -> GemmConfig:
    """The config the selection prefers for this problem among those a trace can run (_traceable_picks)."""
    config = next(_traceable_picks(m, n, k, operands, device), None)
    if config is None:
        raise ConfigError(f"the selection has no config for {_problem_words(m, n, k, operands)} that stores C as "
                          f"given; name one with --config")
    return config


def schedule_picks(m: int, n: int, k: int, operands: dict, schedules, device=None) -> list[GemmConfig]:
    """Per schedule in `schedules`, the config the selection prefers among that schedule's for this problem
    (_traceable_picks): the two schedules at their best on one problem, for side-by-side traces."""
    picks = []
    for schedule in schedules:
        pick = next((c for c in _traceable_picks(m, n, k, operands, device) if c.schedule == schedule), None)
        if pick is None:
            raise ConfigError(f"--compare: the selection has no {schedule} config for "
                              f"{_problem_words(m, n, k, operands)}")
        picks.append(pick)
    return picks


def span_agreement(recording: Recording) -> float:
    """(trace's first-to-last event span) / (CUDA-event time of the same launch) - 1."""
    return recording.trace.kernel_end_ns / (recording.event_ms * 1e6) - 1

