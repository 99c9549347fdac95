"""The grouped GEMM's persistent walk in Python (issue 25; docs/design/grouped-gemm-issue25.md): which (group, tile)
each scheduler unit is, from the group counts alone, as the kernel will compute it on the device.

Every CTA turns the counts into prefix sums of units per group (group g has ceil(rows_g / block_m) x tiles_n
units: the contiguous and masked forms; the k-grouped form has tiles_m x tiles_n units in every group, whatever its
K), then walks units b, b + grid, b + 2 grid, ... as the dense schedule does; unit u belongs to the first group whose
prefix exceeds u (a binary search, ceil(log2 G) steps) and is tile u - prefix_before of it, in the dense raster "m"
order: bands of group_m tile rows, each walked down its rows before moving one column right. So the groups need no host work, an empty group has no unit, and a launch's units spread over the CTAs
round-robin whatever the group sizes: the busiest CTA has at most one unit more than the idlest.

The k form's units run k-loops of their group's K, so with GemmConfig.group_sort the walk takes the groups
longest k-loop first (`k_order`, ranked by warp 0 from the counts): the short units of the small groups end the
launch instead of leaving the big groups' long ones to run into ragged waves.

With the stream-K tail (GemmConfig.stream_k, contiguous and masked forms) the kernel cuts the units past the last
full wave into k-tile shares once it has counted them; `tail_schedule` is that split (the dense schedule's, with
the device's choice between shares and whole units).

The kernel (templates/grouped_scheduler.ptx.j2) mirrors `walk` for the contiguous and masked forms (tests/test_grouped.py
holds this model to its rules; the GPU tests and the mutation tester check the kernel against the ranges it gives). A grouped plan cannot size its
grid from the units, whose number only the device knows: it launches one CTA per SM.
"""
from __future__ import annotations

import bisect
import dataclasses
import math

from .hardware import MAX_GROUPS
from .schedule import Schedule

FORMS = ("contiguous", "masked", "k")

# The k form's order (k_order): each group's sort key is its k-tiles (at most SORT_MAX_K_TILES: longer ones tie and
# keep their index order) above SORT_INDEX_BITS bits of (SORT_INDEX_LIMIT - its index), so every group's key is
# distinct and positive, a larger key goes first, and equal k-loops keep their index order. Warp 0 ranks each
# group by counting the larger keys: (G / 32) x G comparisons per lane, so by default only up to
# SORT_DEFAULT_MAX_GROUPS groups (at 256, about 4,400 instructions per lane: a few microseconds per launch).
SORT_INDEX_BITS = 12
SORT_INDEX_LIMIT = (1 << SORT_INDEX_BITS) - 1
SORT_MAX_K_TILES = (1 << (32 - SORT_INDEX_BITS)) - 1
SORT_DEFAULT_MAX_GROUPS = 256
assert MAX_GROUPS <= SORT_INDEX_LIMIT


@dataclasses.dataclass(frozen=True)
class GroupedUnit:
    """One unit of the walk: its group, the first row of its tile (in the group's frame: contiguous rows count from
    row 0 of a, masked ones from row 0 of the group's matrix), the first column, and the row where its group ends
    (rows from there on belong to another group, or to none, and must not be stored)."""

    group: int
    m0: int
    n0: int
    row_end: int


def ranges(form: str, counts, total: int) -> list[tuple[int, int]]:
    """[start, end) of each group along its grouped dimension, clamped as the kernel clamps counts it cannot trust:
    offs (contiguous, k-grouped) into [previous end, total], masked_m into [0, total] (total: M_max)."""
    if form not in FORMS:
        raise ValueError(f"form: one of {FORMS}, got {form!r}")
    out, start = [], 0
    for c in counts:
        if form == "masked":
            out.append((0, min(max(int(c), 0), total)))
        else:
            end = min(max(int(c), start), total)
            out.append((start, end))
            start = end
    return out


def sort_key(k_tiles: int, group: int) -> int:
    """The k form's sort key of `group`, whose K range is `k_tiles` k-tiles (see SORT_INDEX_BITS)."""
    return (min(k_tiles, SORT_MAX_K_TILES) << SORT_INDEX_BITS) | (SORT_INDEX_LIMIT - group)


def k_order(counts, total: int, block_k: int) -> list[int]:
    """The k form's groups in the order the walk takes them with GemmConfig.group_sort: the longest k-loop first
    (longest processing time first, so the short units end the launch), equal ones by index. `counts` are the
    offs over K, clamped as the kernel clamps them."""
    tiles = [-(-(e - s) // block_k) for s, e in ranges("k", counts, total)]
    return sorted(range(len(tiles)), key=lambda g: -sort_key(tiles[g], g))


def units_per_group(form: str, counts, total: int, m: int, n: int, block_m: int, block_n: int,
                    cluster_m: int = 1) -> list[int]:
    """Units of each group: ceil(rows / unit_rows) x tiles_n, or, k-grouped, ceil(m / unit_rows) x tiles_n for every
    group (its K range sets the length of each unit's k-loop, not the number of units); unit_rows is block_m, or
    cluster_m tile rows when a cluster pairs CTAs along M (one unit is the pair's)."""
    tiles_n, unit_rows = math.ceil(n / block_n), block_m * cluster_m
    if form == "k":
        return [math.ceil(m / unit_rows) * tiles_n] * len(counts)
    return [math.ceil((e - s) / unit_rows) * tiles_n for s, e in ranges(form, counts, total)]


def band_order(local: int, tiles_m: int, tiles_n: int, group_m: int) -> tuple[int, int]:
    """(tile row, tile column) of unit `local` of a tiles_m x tiles_n grid walked in bands of group_m rows (the
    dense raster "m"; the last band may be narrower)."""
    band, inside = divmod(local, group_m * tiles_n)
    first = band * group_m
    size = min(tiles_m - first, group_m)
    return first + inside % size, inside // size


def walk(form: str, counts, total: int, m: int, n: int, block_m: int, block_n: int, ctas: int,
         group_m: int = 8, cluster_m: int = 1, block_k: int | None = None) -> list[list[GroupedUnit]]:
    """The tiles each CTA runs, in order: cluster c (of ctas / cluster_m) takes units c, c + clusters, ..., and the
    CTA of rank r in it tile row cluster_m x (the unit's row) + r (a tile row past its group's end is still walked:
    its CTA keeps the pair's barriers and stores nothing); `total` is total_M (contiguous), M_max (masked) or
    total_K (k-grouped); m is the rows of the k-grouped form's output (unused otherwise); block_k: the k form's
    groups sorted by their k-loops of that many K per k-tile (GemmConfig.group_sort, k_order), or None: in index
    order."""
    if ctas % cluster_m:
        raise ValueError(f"ctas: whole clusters of {cluster_m}, got {ctas}")
    clusters, unit_rows = ctas // cluster_m, block_m * cluster_m
    spans = ranges(form, counts, total)
    per_group = units_per_group(form, counts, total, m, n, block_m, block_n, cluster_m)
    prefix, acc = [], 0
    for c in per_group:
        acc += c
        prefix.append(acc)
    tiles_n = math.ceil(n / block_n)
    out = [[] for _ in range(ctas)]
    if block_k is not None and form != "k":
        raise ValueError("block_k: the k form's sorted walk only")
    order = k_order(counts, total, block_k) if block_k else list(range(len(per_group)))
    for u in range(acc):
        slot = bisect.bisect_right(prefix, u)       # the first group whose prefix exceeds u
        local = u - (prefix[slot - 1] if slot else 0)
        g = order[slot]                             # the k form's groups all have the same units: any order
        start, end = spans[g]
        rows = m if form == "k" else end - start
        mt, nt = band_order(local, math.ceil(rows / unit_rows), tiles_n, group_m)
        base, row_end = (0, m) if form == "k" else (start, end)
        for rank in range(cluster_m):
            m0 = base + (mt * cluster_m + rank) * block_m
            out[(u % clusters) * cluster_m + rank].append(GroupedUnit(g, m0, nt * block_n, row_end))
    return out


def tail_schedule(units: int, clusters: int, k_tiles: int, fixup_k_tiles: int) -> Schedule:
    """The split the grouped kernel makes once warp 0 has counted `units` (streamk.ptx.j2's split_on_device): the
    units past the last full wave cut into shares as the dense stream-K tail cuts them (Schedule.cluster_walk has
    each cluster's segments), where a share and its fix-up (`fixup_k_tiles`, the host's figure) take fewer k-tiles
    than a whole unit and there is a full wave before the tail; otherwise every unit whole."""
    sk = Schedule(units, 1, k_tiles, 1, clusters, "cooperative", stream_k=True)
    if not sk.sk_units or not sk.dp_units or sk.sk_per + fixup_k_tiles >= k_tiles:
        return dataclasses.replace(sk, stream_k=False)
    return sk
