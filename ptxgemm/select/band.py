"""The walk's band (GemmConfig.group_m) that the selection gives its pick.

The persistent walk goes down `group_m` cluster rows, then one column right (raster "m", kernel/tile.py). The CTAs
of one wave share B's column panels and a few of A's row panels. Every band of rows reads all of B again: with the
default band of 8, a problem of 16 cluster rows reads B twice. Between the two bands the output's stores have gone
through L2, so the second reading comes from DRAM too.

A short k-loop shows this. Each tile loads only a few k-tiles and then stores, so the DRAM latency of B's panels at
the start of each tile is not hidden. One band over every row reads each B panel once, and A (small, since there are
few rows) stays in L2. Measured on an H200 (docs/perf-notes.md, issue 49, runs 86 and 89), fp8 blockwise
4096x32768x512 (coop256x128cn2, 16 rows, 4 k-tiles):
- DeepGEMM's kernel durations, L2 flushed: 136.7 µs with 8 rows and 125.4 µs with 16, against DeepGEMM's 125.8;
- burst: 137.1 against 127.0 µs.

Longer k-loops hide the latency, and there the whole band measured level, or better and worse by row:
- fp8 blockwise 4096 x {24576x1536, 7168x2048, 4096x7168, 7168x16384}: time -1.5% to +0.7% (run 89), inside the
  spread;
- the bf16 training set's 4096-token rows (run 88, 27 rows): 0.997 as a geomean, from +9.5% (4096^3 forward) down
  to -6.5% (4096x151936x1536) and -11% (4096x1536x151936).

So the selection widens the band only for k-loops of at most WHOLE_BAND_MAX_K_TILES, and only in the blockwise fp8
kernels, the only ones timed with such a k-loop. Other short k-loops of 9 to 16 rows were never timed with the whole
band: bf16 2048x8192x256 (pp128x128, 16 rows, 4 k-tiles) and per-tensor fp8 2048x32768x512. They keep the band of 8
until a run measures them.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from ..kernel.config import GemmConfig
from ..kernel.schedule import Schedule
from ..kernel.tile import Tile

# Cluster rows that one band covers at most: 16 is the largest band measured (above); wider ones were not timed.
WHOLE_BAND_MAX_ROWS = 16
# The longest k-loop (k-tiles per tile) whose tile start the whole band speeds up. fp8 4096x32768x512 has 4 and
# gained 8%. The next ones measured, 4096x24576x1536 with 12 and 4096x7168x2048 with 16, were level.
WHOLE_BAND_MAX_K_TILES = 4


def band_rows(config: GemmConfig, sched: Schedule) -> int | None:
    """The band the selection gives `config`, whose kernel walks `sched` (the kernel's problem: the transposed store
    runs C^T): every cluster row when there are between group_m and WHOLE_BAND_MAX_ROWS of them and a tile's k-loop
    has at most WHOLE_BAND_MAX_K_TILES k-tiles. None keeps the config's band. Only what was measured is widened: the
    default band down the rows of one dense fp8 blockwise problem, unsplit and without the stream-K tail."""
    if not _walks_the_default_band(config):
        return None
    rows = sched.cluster_rows
    if not config.group_m < rows <= WHOLE_BAND_MAX_ROWS or sched.k_tiles > WHOLE_BAND_MAX_K_TILES:
        return None
    return rows


def _walks_the_default_band(config: GemmConfig) -> bool:
    """The config half of band_rows: the default band down the rows of one dense fp8 blockwise problem, unsplit and
    without the stream-K tail."""
    return (config.block_scale and config.raster == "m" and config.group_m == Tile.group_m
            and config.grouped is None and not config.split_k and not config.stream_k)


def with_band(config: GemmConfig, schedule_of: Callable[[GemmConfig], Schedule]) -> GemmConfig:
    """`config` with the band `band_rows` gives it, else `config` itself. `schedule_of(config)`: the schedule its
    kernel walks, asked for only where the config could take a band (the selection walks many that cannot)."""
    if not _walks_the_default_band(config):
        return config
    rows = band_rows(config, schedule_of(config))
    return config if rows is None else dataclasses.replace(config, group_m=rows)
