"""Small M: one wave of 64x64 tiles, each streaming its own B panel through the deepest ring, unsplit (or split
in two where the tiles are too few). Three rules, each fitted where it was measured: blockwise fp8 (unsplit_wave),
per-tensor fp8 (fp8_wave_splits) and 16-bit narrow outputs wider than the narrow-N rule's (narrow_unsplit).

Blockwise fp8.

At M = 64 or 128 a blockwise GEMM is memory-bound and the cost model predicts most candidates within its tie, which
goes to the fullest wave (cost_model._ranked_blockwise): for 64x4096x7168 that is pp64x64k2, 128 units of half the
k-range on 132 SMs, each adding a partial tile to the split-K fix-up. DeepGEMM runs such shapes unsplit, each CTA
one 64-row tile over the whole k-range with a ring of 16 stages.

Measured on the H200 (DeepGEMM's method: kernel durations, L2 flushed; two runs each, docs/perf-notes.md issue 49,
run 91), the unsplit pp64x64 at its deepest ring (13 stages, with the one-set loop: GemmConfig.bs_product_sets)
against the pick:
- 64x4096x7168 (64 tiles, 56 k-tiles): 14.1 against pp64x64k2's 14.6 us (DeepGEMM 13.8);
- 128x4096x7168 (128 tiles): 14.7 against pp64x128k2's 15.8 (DeepGEMM 14.1);
- 64x7168x16384 (112 tiles, 128 k-tiles): 40.0 against pp64x128k2's 40.6 (DeepGEMM 40.8);
and where it lost:
- 64x2112x7168 (33 tiles): 13.1 against pp64x64k3's 9.9; 128x2112x7168 (66 tiles, but 33 B panels): 13.1 against
  pp64x64k2's 11.0. Half the SMs with work is not enough when two of them read each panel: the unsplit tile wins
  where the distinct B panels alone keep at least UNSPLIT_WAVE_MIN_PANEL_FILL of the SMs streaming;
- 128x24576x1536 (768 tiles, 12 k-tiles): 18.6 against pp64x192's 17.2: more than one wave, and a short k-loop.

So the rule takes only what was measured: one wave at most, a k-loop of at least UNSPLIT_WAVE_MIN_K_TILES, and B
panels filling at least UNSPLIT_WAVE_MIN_PANEL_FILL of the SMs. The threshold sits between the losing 0.25 (33 of
132) and the winning 0.48 (64 of 132); it was fitted on these six shapes, on the H200 only.
"""
from __future__ import annotations

import dataclasses

from ..kernel.config import GemmConfig

# The tile the rule runs: DeepGEMM's small-M width that fits 13 stages beside the scale slots.
UNSPLIT_WAVE_TILE = ("pingpong", 64, 64)
# A k-loop this long at least (the winners had 56 and 128 k-tiles; the shortest measured, 16 at 64x7168x2048, was
# not timed with the deep ring and keeps its pick).
UNSPLIT_WAVE_MIN_K_TILES = 32
# The B panels (tiles along N) as a share of the SMs, at least: won at 64/132 and 112/132, lost at 33/132.
UNSPLIT_WAVE_MIN_PANEL_FILL = 0.4


def unsplit_wave(config: GemmConfig, tiles_m: int, tiles_n: int, k_tiles: int, sm_count: int) -> GemmConfig | None:
    """`config` (a candidate of the blockwise ranking, with its predicted tiles and k-tiles) at its deepest ring,
    where it is the unsplit pingpong 64x64 of a dense, unclustered, untransposed blockwise problem that the rule
    above takes; else None."""
    if ((config.schedule, config.block_m, config.block_n) != UNSPLIT_WAVE_TILE or not config.block_scale
            or config.split_k or config.cluster_size > 1 or config.transposed_store or config.stages is not None):
        return None   # (a pingpong tile is never grouped, and blockwise scales never take the stream-K tail)
    if one_wave_splits(tiles_m, tiles_n, k_tiles, sm_count, UNSPLIT_WAVE_MIN_PANEL_FILL, split_in_two=False) != 1:
        return None
    return dataclasses.replace(config, stages=config.most_stages)


def one_wave_splits(tiles_m: int, tiles_n: int, k_tiles: int, sm_count: int, min_panel_fill: float,
                    split_in_two: bool) -> int | None:
    """The split count of the deep-ring 64x64 pingpong over tiles_m x tiles_n tiles and `k_tiles` k-tiles, the rule
    both fp8 kinds share: one wave at most and UNSPLIT_WAVE_MIN_K_TILES at least; unsplit where the B panels alone
    fill `min_panel_fill` of the SMs, else (`split_in_two`) two splits where those still make one wave; None where
    the rule does not take the problem."""
    tiles = tiles_m * tiles_n
    if tiles > sm_count or k_tiles < UNSPLIT_WAVE_MIN_K_TILES:
        return None
    if tiles_n >= min_panel_fill * sm_count:
        return 1
    return 2 if split_in_two and 2 * tiles <= sm_count else None


# Per-tensor fp8 (no blockwise scales) at M <= FP8_WAVE_MAX_M: the same tile in the deepest ring, unsplit where its B
# panels (tiles along N) alone keep at least FP8_WAVE_UNSPLIT_MIN_PANEL_FILL of the SMs streaming, else in two splits
# where those make one wave. Measured on the H200 beside the cost model's picks, which split K 2-4 ways at the
# default ring (runs 114-117, docs/perf-notes.md issue 49; kernel durations with L2 flushed, two or three runs each,
# and burst times (events, L2 flushed) on the shapes of run 115, which the rule was checked on):
# - unsplit, 48 panels or more: 64x4096x7168 13.1 us against pp64x64k2's 14.4; 128x4096x7168 13.5 against
#   pp64x128k2's 15.4; 64x7168x16384 38.9 against the unsplit default ring's 39.3; burst 64x3072x7168 15.2 against
#   16.1, 128x3072x7168 15.6 against 17.2, 64x4096x4096 12.6 against 13.8, 96x4096x7168 18.6 against 19.2,
#   64x5120x4096 level (the pick was unsplit already). Split in two there it lost every time (14.5, 15.4, 16.1 ...);
# - two splits, fewer panels: 128x2112x7168 (33 panels, 66 tiles) 10.1-10.2 against pp64x128k3's 11.1 (unsplit
#   10.3); 64x2112x7168 (33) 9.6 against pp64x64k3's 9.6 (unsplit 10.2); burst 128x1536x8192 (24) 13.2 against
#   pp64x128k4's 14.4 (unsplit 14.8); 64x2560x7168 (40) level, unsplit too. One shape gained less than it could:
#   128x2048x4096 (32 panels, 16 k-tiles a split) 12.2 against the pick's 12.5, where unsplit ran 11.0.
# The threshold sits between 40 panels (0.30 of 132 SMs: level) and 48 (0.36: unsplit ahead). A k-loop of
# UNSPLIT_WAVE_MIN_K_TILES at least, as for blockwise: nothing shorter was measured. Warm L2 (DeepGEMM's method without the flush) the
# unsplit tile is slower than the split ones (64x4096x7168 9.2 against 7.8 us): the rule is fitted on the flush,
# which is how a model's weights arrive. Row-wise scales, applied in the same kernel's epilogue, take the rule too;
# they were not timed with it.
FP8_WAVE_MAX_M = 128
FP8_WAVE_UNSPLIT_MIN_PANEL_FILL = 0.35


def fp8_wave_splits(tiles_m: int, tiles_n: int, k_tiles: int, sm_count: int) -> int | None:
    """The split count (1 or 2) of the deep-ring 64x64 pingpong for a per-tensor fp8 problem (M <= FP8_WAVE_MAX_M:
    the caller's rule), or None where the rule above does not take it."""
    return one_wave_splits(tiles_m, tiles_n, k_tiles, sm_count, FP8_WAVE_UNSPLIT_MIN_PANEL_FILL, split_in_two=True)


# 16-bit outputs wider than the narrow-N rule's (cost_model.NARROW_N_MAX < N <= NARROW_UNSPLIT_N_MAX) whose 64x64
# tiles make one wave: the unsplit tile in the deep ring (predict.DEEP_RING_TILES) where the k-loop is short enough,
# NARROW_UNSPLIT_MAX_K_TILES by A's major. That is Qwen2-1.5B's k/v weight gradient (256 x 1536 x tokens). Measured on
# the H200 beside the cost model's pick (burst: events, L2 flushed; one process, bench --variants):
# - A M-major (the weight gradient dY^T X, training set, runs 114-115, four runs): 256x1536x4096 pp64x64s13
#   1.047-1.049x the speed of pp64x128k2 (15.3 against 16.0 us);
# - A K-major (B N-major, two runs, run 115): 256x1536x2048 10.8 against pp64x128k2's 12.3-12.4, x3072 13.0 against
#   13.7-13.8, 256x2048x4096 16.4 against 16.3-17.1, 320x1536x4096 15.1-15.3 against 15.6-15.7; level at
#   256x1536x4096 (15.1-15.2 against 15.1-15.2) and 192x1536x4096; behind at 256x1280x4096 (14.8 against 14.6),
#   x6144 (19.5-19.6 against 19.3-19.5) and x8192 (23.4 against 22.8-23.0);
# - where the k-loop is long it loses with either major: 256x1536x16384 (A M-major) 0.85x the pick (pp128x128k4).
NARROW_UNSPLIT_N_MAX = 2048
NARROW_UNSPLIT_MAX_K_TILES = {"mn": 64, "k": 48}


def narrow_unsplit(tiles: int, k_tiles: int, n: int, a_major: str, sm_count: int) -> bool:
    """Whether a 16-bit problem of N = `n` (above the narrow-N rule's bound, M at least its NARROW_N_MIN_M: the
    caller's rule) runs the unsplit 64x64 pingpong: one wave of `tiles` and a k-loop of `k_tiles` short enough for
    A's major."""
    return (tiles <= sm_count and n <= NARROW_UNSPLIT_N_MAX
            and k_tiles <= NARROW_UNSPLIT_MAX_K_TILES.get(a_major, 0))
