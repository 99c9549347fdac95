"""Plans kept by what they depend on, and the counters that show whether a program re-plans.

A plan is keyed by shapes, strides' pattern, address classes, dtypes, epilogue and config (ptxgemm.plan.binding),
never by addresses, so a model's steady state finds every plan it needs: `plan_stats()["plans_made"]` stays still
while `plan_hits` grows. Every entry point (matmul, grouped_matmul, the torch ops) also adds the host time it spent
per call, so `host_us_per_call` shows a regression in the host path the way a benchmark shows one in a kernel.

The counters are plain integers bumped without a lock: exact in one thread, approximate when threads call at once.
"""
from __future__ import annotations

import threading
import time

now_ns = time.perf_counter_ns


class Counters:
    """Process-wide: plans made (cache misses, and plans made outside any cache), plan-cache hits, plans made during a
    CUDA graph capture (never cached), calls through the entry points and the host nanoseconds they took."""

    __slots__ = ("plans_made", "plan_hits", "captured", "calls", "host_ns")

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.plans_made = self.plan_hits = self.captured = self.calls = self.host_ns = 0

    def call(self, start_ns: int) -> None:
        """One entry-point call that began at `start_ns` (now_ns()) has ended."""
        self.calls += 1
        self.host_ns += now_ns() - start_ns


COUNTERS = Counters()


def plan_stats() -> dict:
    """What the host path has done since the last reset: {"plans_made", "plan_hits", "plan_misses" (= plans made by
    a cache), "captured" (plans made during a CUDA graph capture, never cached), "calls", "host_us" (total),
    "host_us_per_call"}."""
    c = COUNTERS
    return {"plans_made": c.plans_made, "plan_hits": c.plan_hits, "plan_misses": c.plans_made, "captured": c.captured,
            "calls": c.calls, "host_us": c.host_ns / 1e3,
            "host_us_per_call": c.host_ns / 1e3 / c.calls if c.calls else None}


def reset_plan_stats() -> None:
    COUNTERS.reset()


class PlanCache:
    """Plans by key, made once each by the caller's `make()`; past `size` the oldest made is dropped (its own buffers
    go back to their pool). `stats` counts this cache's plans made and found; COUNTERS counts every cache's."""

    def __init__(self, size: int):
        self.size = size
        self.plans: dict[tuple, object] = {}
        self.stats = {"made": 0, "found": 0}
        self._lock = threading.Lock()

    def get(self, key: tuple, make):
        plan = self.plans.get(key)  # one dictionary read, atomic: no lock on the hit path
        if plan is not None:
            self.stats["found"] += 1
            COUNTERS.plan_hits += 1
            return plan
        return self.add(key, make())

    def found(self, plan):
        """Count a hit that the caller looked up in `plans` itself (the entry points' one-lookup fast paths)."""
        self.stats["found"] += 1
        COUNTERS.plan_hits += 1
        return plan

    def add(self, key: tuple, plan):
        """Keep `plan`, just made, under `key`."""
        with self._lock:
            self.stats["made"] += 1
            COUNTERS.plans_made += 1
            self.plans[key] = plan
            while len(self.plans) > self.size:
                self.plans.pop(next(iter(self.plans)))  # the oldest plan made
        return plan

    def clear(self) -> None:
        with self._lock:
            self.plans.clear()
            self.stats.update(made=0, found=0)
