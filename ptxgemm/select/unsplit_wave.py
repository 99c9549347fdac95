"""Small-M blockwise fp8: one wave of unsplit 64x64 tiles, each streaming its own B panel through the deepest ring.

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
    if (tiles_m * tiles_n > sm_count or k_tiles < UNSPLIT_WAVE_MIN_K_TILES
            or tiles_n < UNSPLIT_WAVE_MIN_PANEL_FILL * sm_count):
        return None
    return dataclasses.replace(config, stages=config.most_stages)
