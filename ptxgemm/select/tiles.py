"""The tiles the selection and `tune` choose among, and the configs they make for a problem.

The tile lists are data: `tune` tries every config they make (CANDIDATE_TILES x CLUSTER_SHAPES, the split and the
transposed tiles with their split counts; the blockwise tiles with theirs), and the cost model ranks what its rules
offer of them (ptxgemm.select.cost_model). Their per-SM costs are in ptxgemm.select.tile_costs.
"""
from __future__ import annotations

import functools

from ..errors import ConfigError
from ..kernel.config import GemmConfig
from .problem import Problem

# (schedule, block_m, block_n), each with every cluster shape in CLUSTER_SHAPES: what `tune` tries. Single-CTA
# tiles are also tried with every split-K count in SPLITS, and TRANSPOSED_TILES (the transposed store: swap-AB,
# C^T = B^T A^T with N filling the tile's rows and M its narrow columns) with every one.
CANDIDATE_TILES = (
    ("pingpong", 128, 128), ("pingpong", 128, 192), ("pingpong", 64, 256), ("pingpong", 64, 128),
    ("cooperative", 256, 128), ("cooperative", 128, 256), ("cooperative", 256, 192), ("cooperative", 128, 128),
    ("cooperative", 128, 192), ("cooperative", 128, 224),
    # tiles that are not whole 64-column panels, for shapes whose N they divide better (e.g. N = 4160 = 20 x 208)
    ("pingpong", 128, 160), ("cooperative", 128, 208), ("cooperative", 256, 160),
    # twice the tiles of pp64x128 where M is 64 or less: selectable only for fp8 at M <= cost_model.FP8_NARROW_MAX_M
    ("pingpong", 64, 64),
)
CLUSTER_SHAPES = ((1, 1), (2, 1), (1, 2))   # (cluster_m, cluster_n): single CTAs, pairs sharing B, pairs sharing A
SPLITS = (1, 2, 3, 4, 6, 8)
SPLIT_TILES = (("pingpong", 128, 128), ("pingpong", 64, 128), ("pingpong", 64, 256), ("cooperative", 128, 256),
               ("cooperative", 256, 128), ("pingpong", 64, 64))
TRANSPOSED_TILES = (("pingpong", 128, 16), ("pingpong", 128, 32), ("pingpong", 128, 64), ("pingpong", 64, 16),
                    ("pingpong", 64, 32), ("pingpong", 64, 64))
# The N of the cooperative 128x256 tile, which the whole-N tiles (cost_model.WHOLE_N_TILES) stand in for where it
# does not take N whole itself
WHOLE_N_WIDER = 256
# Split counts offered with the blockwise tiles: up to 4, which fills 132 SMs from 33 tiles (M = 64, N = 2112); more
# splits only add partial tiles to sum (split-K's fixup) where the memory model cannot tell them apart.
BLOCK_SCALE_SPLITS = (1, 2, 3, 4)
# The tiles that carry blockwise fp8 scaling (three accumulator sets per consumer: GemmConfig's
# BLOCK_SCALE_ACC_BUDGET), strongest first: the cost model's ties go to the earlier one (cost_model._ranked_blockwise)
BLOCK_SCALE_TILES = (("cooperative", 256, 128), ("cooperative", 128, 192), ("pingpong", 64, 192),
                     ("cooperative", 128, 128), ("pingpong", 64, 128), ("cooperative", 128, 64), ("pingpong", 64, 64))
# Block N of 112 (DeepGEMM's example of a width that fills the SMs): N = 7168 is 64 such tiles, so 2 splits make
# 128 units on 132 SMs where 128-wide tiles make 112. Two product sets with a second B block (7 promotion copies).
# For `tune` only, with clusters and splits: beside the selection's picks on DeepGEMM's six N = 7168 shapes (H100,
# kernel durations, bench_h100_fp8_block_issue24_wide112_variants.json) they ran at most even (128x7168x16384:
# coop128x112k2 576 TFLOP/s, coop128x128k2 583; 64x7168x16384: pp64x112k2 319, pp64x128k2 321), so the selection
# keeps its tiles.
BLOCK_SCALE_TUNE_TILES = (("cooperative", 128, 112), ("pingpong", 64, 112))


def _carries_swapped_block_scales(sched: str, block_m: int, block_n: int) -> bool:
    """Whether the transposed tile takes blockwise scales with the problem swapped (GemmConfig's rule: its columns'
    A scales must fit beside the sums and products)."""
    try:
        GemmConfig(schedule=sched, block_m=block_m, block_n=block_n, c_major="m", in_dtype="float8_e4m3fn",
                   b_major="k", block_scale=True, block_scale_swapped=True)
    except ConfigError:
        return False
    return True


# The swap-AB tiles that carry blockwise scales with the problem swapped (all but pp128x64t, which would spill),
# each with every split count in BLOCK_SCALE_SPLITS: all of them for `tune`.
BLOCK_SCALE_TRANSPOSED_TILES = tuple(t for t in TRANSPOSED_TILES if _carries_swapped_block_scales(*t))


def candidates(m: int, n: int, k: int, in_dtype: str = "bfloat16", out_dtype: str | None = None,
               a_major: str = "k", b_major: str = "mn") -> list[GemmConfig]:
    """Every config of CANDIDATE_TILES x CLUSTER_SHAPES that GemmConfig accepts for these dtypes and layouts."""
    return problem_candidates(Problem(m, n, k, in_dtype, out_dtype, a_major, b_major))


def problem_candidates(problem: Problem) -> list[GemmConfig]:
    return list(_candidates_for(CANDIDATE_TILES, CLUSTER_SHAPES, SPLIT_TILES, TRANSPOSED_TILES, SPLITS,
                                *problem.config_fields().values()))


@functools.lru_cache(maxsize=64)  # select_config runs for every GemmPlan; the configs depend on dtypes and layouts
def _candidates_for(tiles, clusters, split_tiles, transposed_tiles, splits, in_dtype, out_dtype, a_major,
                    b_major) -> tuple[GemmConfig, ...]:
    """Every accepted config: the tiles x cluster shapes, the split tiles x splits > 1, and the transposed tiles x
    splits. A transposed config runs the swapped problem, so its operands' majors trade places (A' = B^T is
    MN-major exactly when B is; B' = A^T is K-major exactly when A is)."""
    shapes = [(sched, bm, bn, cm, cn, 1, "n") for sched, bm, bn in tiles for cm, cn in clusters]
    shapes += [(sched, bm, bn, 1, 1, sp, "n") for sched, bm, bn in split_tiles for sp in splits if sp > 1]
    shapes += [(sched, bm, bn, 1, 1, sp, "m") for sched, bm, bn in transposed_tiles for sp in splits]
    found = []
    for sched, block_m, block_n, cluster_m, cluster_n, sp, c_major in shapes:
        majors = (a_major, b_major) if c_major == "n" else (b_major, a_major)
        if cluster_m > 1 and block_n % 128:
            continue  # a pair along M of a tile not split in 128-column halves: no measured entry (bench --variants)
        try:
            found.append(GemmConfig(schedule=sched, block_m=block_m, block_n=block_n, cluster_m=cluster_m,
                                    cluster_n=cluster_n, in_dtype=in_dtype, out_dtype=out_dtype, a_major=majors[0],
                                    b_major=majors[1], splits=sp, c_major=c_major))
        except ConfigError:
            continue  # e.g. 128x256 pingpong (too many accumulators), cluster 2 with block_n 192, fp32 smem
    return tuple(found)


def blockwise_candidates(problem: Problem) -> list[GemmConfig]:
    """The configs that can carry blockwise scaling for this problem's dtypes and layouts (without the epilogue
    fields yet): BLOCK_SCALE_TILES and BLOCK_SCALE_TUNE_TILES x CLUSTER_SHAPES, each single-CTA tile with every
    split count, and the swap-AB BLOCK_SCALE_TRANSPOSED_TILES with every split count (the selection passes over
    the 112-wide tiles and offers one swap-AB tile: BLOCK_SCALE_SWAP_TILE)."""
    tiles = BLOCK_SCALE_TILES + BLOCK_SCALE_TUNE_TILES
    return list(_candidates_for(tiles, CLUSTER_SHAPES, tiles, BLOCK_SCALE_TRANSPOSED_TILES, BLOCK_SCALE_SPLITS,
                                *problem.config_fields().values()))

