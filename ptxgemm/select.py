"""Which kernel config runs a problem: the tune cache's measured winner, else a cost model's pick.

    select_config(m, n, k, in_dtype, out_dtype, a_major, b_major, device) -> GemmConfig

1. Unless PTXGEMM_TUNE_CACHE is off, a winner `ptxgemm.tune` measured for this GPU, driver and problem
   (ptxgemm.tune_cache).
2. Otherwise the candidate (`candidates`) with the least predicted time. The model, per CTA (one per SM, so the
   busiest SM's time is the kernel's):

       steps    = ceil(units / clusters)    units = ceil(tiles_m / cluster_m) * tiles_n, clusters = SMs // cluster_m
                                            (never more clusters than units: ptxgemm.schedule.plan_schedule)
       mainloop = k_tiles * KTILE_NS[tag]   one output tile's k-loop on one SM
       cooperative: steps * (mainloop + EPILOGUE_NS[tag])          both consumers store every tile together
       pingpong:    steps * max(mainloop, EPILOGUE_NS[tag]) + EPILOGUE_NS[tag]
                    a consumer's epilogue runs under its peer's mainloop, so a step costs the longer of the two
                    (the mainloops take turns at the tensor cores, the epilogues at the one staging buffer); only
                    the last tile's epilogue has nothing to hide under.

   KTILE_NS and EPILOGUE_NS are per-SM costs keyed by config tag: refit them from device data (`python -m ptxgemm
   tune` stores every candidate's time in the tune cache) and the selection follows. Ties go to the earlier
   candidate in `candidates`' order, so the choice is deterministic.

Nothing here needs a GPU: without one, and without an injected device, the model assumes DEFAULT_DEVICE.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import numbers

from . import schedule, tune_cache
from .config import GemmConfig
from .errors import ConfigError
from .problem import Problem

# Per-SM costs in ns, keyed by GemmConfig.tag, fitted to one H100 SXM run (docs/results/select_explore_h100_run1.json: 14
# shapes of the benchmark suite, bf16, A K-major, B MN-major, every candidate timed side by side with cuBLAS) by
# minimizing the model's log error per tag (tools/fit_select.py). The EPILOGUE_NS values also absorb what a launch
# costs beyond its k-loops (ramp-up, the last wave's tail), which is why they exceed a bare store's time.
KTILE_NS = {"coop128x256": 663, "coop128x256c2": 660, "coop256x128": 677, "coop256x128c2": 683, "coop256x192": 971, "pp128x128": 452, "pp128x128c2": 437, "pp128x192": 569}
EPILOGUE_NS = {"coop128x256": 2260, "coop128x256c2": 2350, "coop256x128": 2330, "coop256x128c2": 2280, "coop256x192": 3810, "pp128x128": 1710, "pp128x128c2": 1920, "pp128x192": 2770}
UNMEASURED = "pp64x256", "pp64x256c2"
for _tag in UNMEASURED:  # assumed: the 128x128 pingpong's cost per flop, until measured
    KTILE_NS[_tag], EPILOGUE_NS[_tag] = KTILE_NS["pp128x128"], EPILOGUE_NS["pp128x128"]

# (schedule, block_m, block_n) in preference order for ties; each with every cluster size in CLUSTER_SIZES.
CANDIDATE_TILES = (
    ("pingpong", 128, 128), ("pingpong", 128, 192), ("pingpong", 64, 256),
    ("cooperative", 256, 128), ("cooperative", 128, 256), ("cooperative", 256, 192),
)
CLUSTER_SIZES = (1, 2)


@dataclasses.dataclass(frozen=True)
class DeviceModel:
    """The device facts the model and the tune cache key use, for when there is no GPU to ask."""

    name: str
    sm_count: int
    driver_version_str: str | None = None


DEFAULT_DEVICE = DeviceModel("H100-like default (no GPU)", 132)


def resolve_device(device=None):
    """`device`, checked; None: the current GPU (driver.device_info()) if there is one, else DEFAULT_DEVICE."""
    if device is None:
        from . import driver

        return driver.device_info() if driver.device_available() else DEFAULT_DEVICE
    sm = getattr(device, "sm_count", None)
    if not hasattr(device, "name") or isinstance(sm, bool) or not isinstance(sm, numbers.Integral) or sm < 1:
        raise ConfigError(f"device: must have .name and a positive integer .sm_count (e.g. driver.device_info()), "
                          f"got {device!r}")
    return device


def candidates(m: int, n: int, k: int, in_dtype: str = "bfloat16", out_dtype: str | None = None,
               a_major: str = "k", b_major: str = "mn") -> list[GemmConfig]:
    """Every config of CANDIDATE_TILES x CLUSTER_SIZES that GemmConfig accepts for these dtypes and layouts."""
    return _candidates(Problem(m, n, k, in_dtype, out_dtype, a_major, b_major))


def _candidates(problem: Problem) -> list[GemmConfig]:
    return list(_candidates_for(CANDIDATE_TILES, CLUSTER_SIZES, *problem.config_fields().values()))


@functools.lru_cache(maxsize=64)  # select_config runs for every GemmPlan; the configs depend on dtypes and layouts
def _candidates_for(tiles, clusters, in_dtype, out_dtype, a_major, b_major) -> tuple[GemmConfig, ...]:
    found = []
    for sched, block_m, block_n in tiles:
        for cluster_m in clusters:
            try:
                found.append(GemmConfig(schedule=sched, block_m=block_m, block_n=block_n, cluster_m=cluster_m,
                                        in_dtype=in_dtype, out_dtype=out_dtype, a_major=a_major, b_major=b_major))
            except ConfigError:
                continue  # e.g. 128x256 pingpong (too many accumulators), cluster 2 with block_n 192, fp32 smem
    return tuple(found)


@dataclasses.dataclass(frozen=True)
class Prediction:
    tag: str
    tiles_m: int
    tiles_n: int
    k_tiles: int
    steps: int             # scheduler steps of the busiest CTA (tiles it runs)
    mainloop_ns: float     # one tile's k-loop
    epilogue_ns: float     # one tile's store
    total_ns: float

    def row(self) -> dict:
        return {"tag": self.tag, "tiles": f"{self.tiles_m}x{self.tiles_n}", "k_tiles": self.k_tiles,
                "steps_per_cta": self.steps, "predicted_us": self.total_ns / 1e3}


def predict(config: GemmConfig, m: int, n: int, k: int, sm_count: int) -> Prediction:
    """The model's time for `config` on an (m, n, k) problem and `sm_count` SMs (see the module docstring)."""
    tag = config.tag
    if tag not in KTILE_NS or tag not in EPILOGUE_NS:
        raise ConfigError(f"config: no measured cost for {tag!r} in ptxgemm.select.KTILE_NS/EPILOGUE_NS; the model "
                          f"knows {sorted(KTILE_NS)}")
    sched = schedule.plan_schedule(m, n, k, config.block_m, config.block_n, config.block_k, config.cluster_m,
                                   sm_count)
    steps = math.ceil(sched.units / sched.clusters)
    mainloop, epilogue = sched.k_tiles * KTILE_NS[tag], EPILOGUE_NS[tag]
    if config.cooperative:
        total = steps * (mainloop + epilogue)
    else:
        total = steps * max(mainloop, epilogue) + epilogue
    return Prediction(tag, sched.tiles_m, sched.tiles_n, sched.k_tiles, steps, mainloop, epilogue, total)


MIN_CLUSTER_ROWS = 2


def _cluster_fills(config: GemmConfig, m: int) -> bool:
    """A cluster needs that many SMs at once and pays off only with at least MIN_CLUSTER_ROWS rows of clusters:
    with fewer, a pair's second CTA multiplies mostly zero-filled rows (H100, 128x8192x8192: pp128x128c2 ran at
    0.78x cuBLAS where pp128x128 ran at 0.97x; the model, which sees equal steps, would pick the pair)."""
    if config.cluster_m == 1:
        return True
    return -(-m // config.block_m) >= MIN_CLUSTER_ROWS * config.cluster_m


def _ranked(problem: Problem, sm_count: int) -> list[tuple[Prediction, GemmConfig]]:
    pairs = [(predict(c, problem.m, problem.n, problem.k, sm_count), i, c) for i, c in enumerate(_candidates(problem))
             if c.cluster_m <= sm_count and _cluster_fills(c, problem.m)]
    if not pairs:
        raise ConfigError(f"in_dtype/out_dtype: no candidate config fits {problem.describe()}")
    pairs.sort(key=lambda p: (p[0].total_ns, p[1]))  # ties: the earlier candidate
    return [(p, c) for p, _, c in pairs]


def choose(m: int, n: int, k: int, in_dtype: str = "bfloat16", out_dtype: str | None = None, a_major: str = "k",
           b_major: str = "mn", device=None) -> tuple[GemmConfig, str]:
    """(config, where it came from: 'tune cache' or 'cost model'); select_config without the second part."""
    problem = Problem(m, n, k, in_dtype, out_dtype, a_major, b_major)
    device = resolve_device(device)
    cached = tune_cache.lookup(problem, device)
    if cached is not None:
        return cached, "tune cache"
    return _ranked(problem, device.sm_count)[0][1], "cost model"


def select_config(m: int, n: int, k: int, in_dtype: str = "bfloat16", out_dtype: str | None = None,
                  a_major: str = "k", b_major: str = "mn", device=None) -> GemmConfig:
    """The config to run C (m x n) = A (m x k) . B (k x n) with: the tune cache's winner, else the cost model's.

    out_dtype None means in_dtype. device: an object with .name and .sm_count (driver.device_info() gives one);
    None: the current GPU, or DEFAULT_DEVICE (132 SMs) without one. ConfigError names a bad argument."""
    return choose(m, n, k, in_dtype, out_dtype, a_major, b_major, device)[0]


def explain(m: int, n: int, k: int, in_dtype: str = "bfloat16", out_dtype: str | None = None, a_major: str = "k",
            b_major: str = "mn", device=None) -> list[dict]:
    """The cost model's table, fastest first: per candidate its tag, tiles, k-tiles, steps per CTA and predicted us.
    (The cost model only: the tune cache, if it has an entry, overrides the first row; see `choose`.)"""
    problem = Problem(m, n, k, in_dtype, out_dtype, a_major, b_major)
    device = resolve_device(device)
    return [p.row() for p, _ in _ranked(problem, device.sm_count)]


def format_table(rows: list[dict], chosen: str | None = None) -> str:
    head = f"{'config':<16} {'tiles':>9} {'k_tiles':>7} {'steps/CTA':>9} {'predicted us':>12}"
    lines = [head, "-" * len(head)]
    for r in rows:
        mark = "  <- chosen" if r["tag"] == chosen else ""
        lines.append(f"{r['tag']:<16} {r['tiles']:>9} {r['k_tiles']:>7} {r['steps_per_cta']:>9} "
                     f"{r['predicted_us']:>12.2f}{mark}")
    return "\n".join(lines)
