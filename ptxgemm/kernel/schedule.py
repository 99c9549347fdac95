"""The static persistent schedule in Python: which output tiles each CTA and each consumer runs.

ptxgemm/kernel/templates/scheduler.ptx.j2 walks the tiles in the kernel; this module answers the same questions on the host,
without a GPU, so tests can prove that a case exercises the pingpong (every consumer of every CTA runs several
tiles) and tools can report grid, waves and tiles per consumer.

The unit of the schedule is a cluster (a single CTA when cluster_m and cluster_n are 1): cluster b of G walks units
b, b+G, b+2G, ...; in the pingpong schedule consumer 0 takes the even steps, consumer 1 the odd ones; in the
cooperative one both consumers take every step (each half of the tile). Every CTA of a cluster runs the same
steps (on adjacent tile rows), so per-consumer counts are per cluster.

With the stream-K tail (GemmConfig.stream_k, cooperative only) the walk has two phases. The units of the full waves
run whole, as above: cluster b takes b, b+G, ... below `dp_units` (a multiple of G). The rest, fewer than G units,
are one run of k-tiles, unit after unit, cut into G equal shares of `sk_per` k-tiles: cluster b takes share b, which
covers the end of one unit and the start of the next at most (sk_per <= k_tiles). Each piece of a share is a
segment (unit, first k-tile, k-tiles); the segment that starts a unit (first k-tile 0) is its final, the others
are partials (ptxgemm/kernel/templates/streamk.ptx.j2 has the fix-up).

With `sk_wave` (GemmConfig.sk_wave) the tail takes the last full wave with it: G more units, so every share is a unit
or more (k_tiles <= sk_per <= 2 k_tiles): the end of one unit (a partial), maybe one whole unit, and the start of
another (a final). A thin tail (2 units over 132 clusters) is then spread over every cluster in shares of a unit
and a k-tile or two, instead of quarter-unit shares on eight clusters and idle SMs beside them, and a final adds
one partial, never up to SK_MAX_SHARES. Still only a share's first segment is a partial: every later one starts a
unit.
"""
from __future__ import annotations

import dataclasses
import math

from ..errors import ConfigError

CONSUMERS = 2
# stream-K: a share is at least 1/SK_MAX_SHARES of a unit's k-tiles, so one unit's k-loop is cut among at most
# SK_MAX_SHARES + 1 clusters and its final adds at most SK_MAX_SHARES partials (each a 128 KiB fp32 tile read from
# L2 by one consumer pair: cheap beside the k-tiles it saves, but not free); fewer clusters then share the tail.
SK_MAX_SHARES = 4


@dataclasses.dataclass(frozen=True)
class Schedule:
    """The tile walk of one launch: problem tiles, grid and what each consumer gets."""

    tiles_m: int          # tile rows of the problem
    tiles_n: int          # tile columns
    k_tiles: int          # k-tiles per output tile (every tile has the same count)
    cluster_m: int        # CTAs per cluster along M (adjacent tile rows)
    clusters: int         # launched clusters (grid = clusters * cluster_m * cluster_n CTAs)
    schedule: str = "pingpong"
    cluster_n: int = 1    # CTAs per cluster along N (adjacent tile columns)
    batches: int = 1      # problems in the batch: units are numbered problem by problem
    splits: int = 1       # split-K: units per output tile, each over k_tiles k-tiles of its own range
    stream_k: bool = False  # the last partial wave's units spread as k-tile shares over every cluster
    k_serpentine: bool = False  # odd passes of the walk (a cluster's 2nd, 4th, ... whole unit) run K backward
    sk_wave: bool = False   # the tail takes the last full wave with it (module docstring)
    k_last: int | None = None   # split-K with a lead: the last split's k-tiles (None: k_tiles, as every split's)

    @property
    def final_k_tiles(self) -> int:
        """k-tiles of a tile's last split (its final): k_last under a split lead, else k_tiles like the others."""
        return self.k_tiles if self.k_last is None else self.k_last

    def unit_k_tiles(self, unit: int) -> int:
        """k-tiles unit `unit` of the walk runs whole (outside the stream-K tail): its split's count under split-K
        (the final's under a lead), else every unit's."""
        return self.final_k_tiles if self.splits > 1 and unit % self.splits == self.splits - 1 else self.k_tiles

    @property
    def work_tiles(self) -> int:
        """Output tiles (of clusters) of the whole launch, every problem's."""
        return self.batch_units * self.batches

    @property
    def cluster_rows(self) -> int:
        """Tile rows of clusters: the kernel's `param_tiles_m` (= tile rows when cluster_m is 1)."""
        return math.ceil(self.tiles_m / self.cluster_m)

    @property
    def cluster_cols(self) -> int:
        """Tile columns of clusters: the kernel's `param_tiles_n` (= tile columns when cluster_n is 1)."""
        return math.ceil(self.tiles_n / self.cluster_n)

    @property
    def batch_units(self) -> int:
        """Scheduler steps of one problem: cluster columns x cluster rows."""
        return self.cluster_rows * self.cluster_cols

    @property
    def units(self) -> int:
        """Scheduler steps of the whole launch: every problem's units, problem after problem; with split-K each
        output tile is `splits` consecutive units."""
        return self.batch_units * self.batches * self.splits

    @property
    def grid(self) -> int:
        return self.clusters * self.cluster_m * self.cluster_n

    # --- the stream-K tail ------------------------------------------------------------------------------
    @property
    def sk_units(self) -> int:
        """Units the tail spreads over the clusters: those past the last full wave (0 without stream-K), and with
        sk_wave the last full wave's too, where there is a tail and a full wave before it."""
        if not self.stream_k:
            return 0
        tail = self.units % self.clusters
        return tail + self.clusters if self.sk_wave and tail and self.units > self.clusters else tail

    @property
    def dp_units(self) -> int:
        """Units run whole (data-parallel): every unit of the full waves, a multiple of the clusters."""
        return self.units - self.sk_units

    @property
    def sk_per(self) -> int:
        """k-tiles of each cluster's share of the tail (the kernel's param_sk_per): the tail's k-tiles over every
        cluster, but no share under 1/SK_MAX_SHARES of a unit's (the last clusters may then get none)."""
        if not self.sk_units:
            return self.k_tiles
        return max(math.ceil(self.sk_units * self.k_tiles / self.clusters), math.ceil(self.k_tiles / SK_MAX_SHARES))

    @property
    def sk_busiest_units(self) -> float:
        """The busiest cluster's work under the stream-K tail, in units: its whole units and its share (a fraction of
        a unit; with sk_wave one to two units). What the cost model counts its k-tiles and its loads by."""
        return self.dp_units / self.clusters + self.sk_per / self.k_tiles

    def cluster_walk(self, cluster: int) -> list[tuple[int, int, int]]:
        """The (unit, first k-tile, k-tiles) cluster `cluster` runs, in order: the walk the kernel's roles make."""
        walk = [(u, 0, self.k_tiles) for u in range(cluster, self.dp_units, self.clusters)]
        if self.sk_units:
            it = self.dp_units * self.k_tiles + cluster * self.sk_per
            end = min(it + self.sk_per, self.units * self.k_tiles)
            while it < end:
                unit, first = divmod(it, self.k_tiles)
                count = min(self.k_tiles - first, end - it)
                walk.append((unit, first, count))
                it += count
        return walk

    def sk_rotation(self, unit: int) -> int:
        """Where a tail unit's k-loop starts in K: its segments' k-tiles are positions in the loop, position p being
        k-tile (p + rotation) % k_tiles of K. The rotation is the length of the first segment of its final's share
        (0 for whole units), so that every final reads k-tile t of K at time t of the tail, and every partial a
        share's length further on: the clusters read K in a few common fronts and share its panels in L2, as whole
        units of one wave do (unrotated, each share read its own part of K, and the tail ran from DRAM)."""
        if unit < self.dp_units:
            return 0
        # mod k_tiles: with sk_wave a share is longer than a unit, and what precedes the final in it may be too
        return (unit - self.dp_units) * self.k_tiles % self.sk_per % self.k_tiles

    def backward(self, unit: int) -> bool:
        """Whether whole unit `unit` loads its k-tiles from the last to the first: with the serpentine k-loop, the
        units of the walk's odd passes (unit // clusters odd), every cluster turning at once; never a tail segment."""
        return self.k_serpentine and unit < self.dp_units and (unit // self.clusters) % 2 == 1

    def k_tiles_of(self, unit: int, first: int, count: int) -> list[int]:
        """The k-tiles of K a segment loads, in order."""
        rot = self.sk_rotation(unit)
        ks = [(p + rot) % self.k_tiles for p in range(first, first + count)]
        return [self.k_tiles - 1 - kt for kt in ks] if self.backward(unit) else ks

    def sk_partials(self, unit: int) -> list[int]:
        """The clusters whose shares add partials to tail unit `unit`, in the order its final adds them (the
        final is the cluster whose share holds the unit's first k-tile)."""
        base = self.dp_units * self.k_tiles
        first = (unit * self.k_tiles - base) // self.sk_per
        last = ((unit + 1) * self.k_tiles - 1 - base) // self.sk_per
        return list(range(first + 1, last + 1))

    def consumer_tiles(self, cluster: int, consumer: int) -> int:
        """Tiles consumer `consumer` of every CTA of cluster `cluster` runs: steps cluster + (consumer + 2j)·G in
        pingpong, every step cluster + j·G in cooperative (the consumer computes half of each); with the stream-K
        tail, every segment of the cluster's walk."""
        if self.stream_k:
            return len(self.cluster_walk(cluster)) if cluster < self.clusters else 0
        if self.schedule == "cooperative":
            return 0 if cluster >= self.units else (self.units - 1 - cluster) // self.clusters + 1
        first = cluster + consumer * self.clusters
        return 0 if first >= self.units else (self.units - 1 - first) // (CONSUMERS * self.clusters) + 1

    @property
    def min_tiles_per_consumer(self) -> int:
        """The fewest tiles any consumer of any CTA runs (the last cluster's consumer 1 has the fewest)."""
        if self.stream_k:
            return min(self.consumer_tiles(c, 0) for c in range(self.clusters))
        return self.consumer_tiles(self.clusters - 1, CONSUMERS - 1)

    @property
    def max_tiles_per_consumer(self) -> int:
        if self.stream_k:
            return max(self.consumer_tiles(c, 0) for c in range(self.clusters))
        return self.consumer_tiles(0, 0)

    @property
    def waves(self) -> float:
        """Scheduler steps per cluster: how many tiles each CTA runs, on average."""
        return self.units / self.clusters

    @property
    def ring_passes(self) -> int:
        """How many k-tiles one CTA's producer loads, at most: the running ring position at the end of its walk (a
        stream-K share is at most a unit's k-tiles, or with sk_wave under two units where the tail holds a full
        wave's more units, so the whole-unit count bounds it too)."""
        return math.ceil(self.units / self.clusters) * max(self.k_tiles, self.final_k_tiles)

    def describe(self) -> dict:
        return {"tiles_m": self.tiles_m, "tiles_n": self.tiles_n, "k_tiles": self.k_tiles, "batches": self.batches,
                "splits": self.splits, **({"k_last": self.k_last} if self.k_last is not None else {}),
                **({"stream_k": {"dp_units": self.dp_units, "sk_units": self.sk_units, "sk_per": self.sk_per}}
                   if self.stream_k else {}),
                "grid": self.grid,
                "clusters": self.clusters, "waves": round(self.waves, 3),
                "tiles_per_consumer": [self.min_tiles_per_consumer, self.max_tiles_per_consumer]}


def plan_for(config, m: int, n: int, k: int, sm_count: int, ctas: int | None = None, batches: int = 1) -> Schedule:
    """plan_schedule with every field taken from a GemmConfig."""
    return plan_schedule(m, n, k, config.block_m, config.block_n, config.block_k, config.cluster_m, sm_count, ctas,
                         config.schedule, config.cluster_n, batches, config.splits, config.stream_k,
                         config.k_serpentine, config.sk_wave, config.split_lead)


def effective_splits(k_tiles: int, splits: int, lead: int = 0) -> tuple[int, int, int]:
    """(splits, k-tiles of each partial, k-tiles of the last split) a launch runs.
    Without a lead every split gets the same count, ceil(k_tiles / splits), and the splits are as many as that count
    needs (never one that would start past K); the last split's range may run past K by less than one split: TMA
    fills those k-tiles with zeros, which add nothing.
    With a lead (GemmConfig.split_lead) the partials get (k_tiles - lead) // splits each (at least one) and the last
    split the rest, up to K exactly: lead or more k-tiles beyond a partial's, so its own k-loop runs while the
    partials store and publish theirs. The roles then read each unit's count from the split it is (the kernel's
    %k_count); never more splits than k-tiles."""
    splits = max(splits, 1)
    if not lead:
        per = max(1, math.ceil(k_tiles / splits))
        splits = max(1, math.ceil(k_tiles / per))
        return splits, per, per
    splits = min(splits, k_tiles)
    per = max(1, (k_tiles - lead) // splits)
    return splits, per, k_tiles - (splits - 1) * per


def plan_schedule(m: int, n: int, k: int, block_m: int, block_n: int, block_k: int, cluster_m: int,
                  sm_count: int, ctas: int | None = None, schedule: str = "pingpong",
                  cluster_n: int = 1, batches: int = 1, splits: int = 1, stream_k: bool = False,
                  k_serpentine: bool = False, sk_wave: bool = False, split_lead: int = 0) -> Schedule:
    """The grid GemmPlan launches: one CTA per SM (or at most `ctas`), never more clusters than scheduler steps
    (but for the stream-K tail's).
    With split-K, k_tiles is each split's count (effective_splits). The stream-K tail numbers k-tiles of the whole
    launch in 32 bits."""
    tiles_m, tiles_n, k_tiles = math.ceil(m / block_m), math.ceil(n / block_n), math.ceil(k / block_k)
    splits, k_tiles, k_last = effective_splits(k_tiles, splits, split_lead)
    units = math.ceil(tiles_m / cluster_m) * math.ceil(tiles_n / cluster_n) * batches * splits
    limit = sm_count if ctas is None else ctas
    # never more clusters than units, except under the stream-K tail, where fewer units than SMs are all tail: every
    # cluster takes a share of their k-tiles
    clusters = max(1, limit // (cluster_m * cluster_n) if stream_k else min(limit // (cluster_m * cluster_n), units))
    if stream_k and units * k_tiles >= 2 ** 32:
        raise ConfigError(f"stream_k: {units} units of {k_tiles} k-tiles overflow the kernel's 32-bit k-tile numbers; "
                          f"run this problem without the stream-K tail")
    return Schedule(tiles_m, tiles_n, k_tiles, cluster_m, clusters, schedule, cluster_n, batches, splits, stream_k,
                    k_serpentine, sk_wave, k_last if split_lead else None)


# --------------------------------------------------------------------------------------------------------------
# The Hilbert walk (GemmConfig(raster="hilbert"))
# --------------------------------------------------------------------------------------------------------------

def hilbert_order(rows: int, cols: int) -> list[tuple[int, int]]:
    """Every (row, col) of a rows x cols grid once, along a generalized Hilbert curve: consecutive cells are neighbours
    (at most one diagonal step when both sides are odd), for any rectangle, not only powers of two. The recursion is
    the published "gilbert" construction (Jakub Cervený): split the long side in two halves, or, when the rectangle is
    not much longer than wide, into three parts turning through the short side."""
    out: list[tuple[int, int]] = []
    if cols >= rows:
        _gilbert(out, 0, 0, cols, 0, 0, rows)
    else:
        _gilbert(out, 0, 0, 0, rows, cols, 0)
    return [(y, x) for x, y in out]


def _sign(v: int) -> int:
    return (v > 0) - (v < 0)


def _gilbert(out, x, y, ax, ay, bx, by) -> None:
    """Cells of the rectangle at (x, y) with major axis (ax, ay) and minor axis (bx, by), appended as (x, y)."""
    w, h = abs(ax + ay), abs(bx + by)
    dax, day, dbx, dby = _sign(ax), _sign(ay), _sign(bx), _sign(by)
    if h == 1 or w == 1:                       # a single line: walk it
        (n, dx, dy) = (w, dax, day) if h == 1 else (h, dbx, dby)
        for _ in range(n):
            out.append((x, y))
            x, y = x + dx, y + dy
        return
    ax2, ay2, bx2, by2 = ax // 2, ay // 2, bx // 2, by // 2
    w2, h2 = abs(ax2 + ay2), abs(bx2 + by2)
    if 2 * w > 3 * h:                          # long: two halves along the major axis
        if w2 % 2 and w > 2:                   # keep the halves' lengths even, so the curve ends where it should
            ax2, ay2 = ax2 + dax, ay2 + day
        _gilbert(out, x, y, ax2, ay2, bx, by)
        _gilbert(out, x + ax2, y + ay2, ax - ax2, ay - ay2, bx, by)
    else:                                      # squarish: up the minor axis, across, and back down
        if h2 % 2 and h > 2:
            bx2, by2 = bx2 + dbx, by2 + dby
        _gilbert(out, x, y, bx2, by2, ax2, ay2)
        _gilbert(out, x + bx2, y + by2, ax, ay, bx - bx2, by - by2)
        _gilbert(out, x + (ax - dax) + (bx2 - dbx), y + (ay - day) + (by2 - dby), -bx2, -by2, -(ax - ax2),
                 -(ay - ay2))
