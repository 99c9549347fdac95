"""Short grids of the cooperative 128x128 tile: one full wave in place of the stream-K tail.

Where the cost model picks the cooperative 128x128 tile (cost_model.SHORT_GRID_TILES) it gives it the stream-K tail,
which shares the k-tiles the last wave cannot fill among the SMs (predict.with_stream_k). Two short grids run faster
as one wave with no tail at all:
- a few more tiles than SMs (1536x1536: 144 of them on 132 SMs): the 128x160 tile, whose tiles make one wave
  (120). It is cuBLAS's tile there (`nvjet_sm90_tst_128x160_64x5_4x2`, run 127);
- at most half as many tiles as SMs, over a long k-loop (896x896x16384: 49 tiles): split-K in as many splits as
  one wave holds (two: 98 units), where stream-K's tail spreads each tile over 2-3 SMs with a fix-up per share.

Measured (runs 127 and 129, NVIDIA H200, CUPTI kernel durations with L2 flushed before each launch, three rounds of
30 launches beside cuBLAS through torch; docs/perf-notes.md, issue 47; the runs are r127_sweep, r129_sweep,
r130_heldout and r131_heldout in docs/results/h200/bench/bench_h200_training_issue47_r103-r134.json.gz), the pick in
brackets, cuBLAS after:
- the 128x160 tile: 1536x1536x4096 with A and B MN-major (Qwen2-1.5B's q/o weight gradient, the fitted row) 28.5
  (30.0; cuBLAS 28.7); held out: 2048x1280x4096 29.2 (33.0; 29.0), 1280x2048x4096 29.3 (33.4; 29.0), 1536x1536x2048
  16.2 (18.7; 15.3), A K-major 1536x1536x4096 28.5 (30.9; 28.8) and 2048x1280x4096 29.5 (36.2; 29.4). At
  1536x1536x8192 (128 k-tiles) it ran level, 53.4 (53.1), so the rule stops at ONE_WAVE_WIDE_MAX_K_TILES;
- split-K: 896x896x16384 MN-major in two splits 43.9 (46.6; cuBLAS 38.9 + its 4.7 reduce); held out: 896x896x8192
  25.5 (26.3), 1024x1024x16384 46.9 (51.7), 896x1152x16384 46.9 (49.1), 896x896x32768 87.1 (88.0), A K-major
  896x896x16384 44.8 (48.4), and 768x896x16384 (42 tiles) in three splits 35.3 (40.0), where two lost (43.6).
  Three splits of 49 tiles (147 units, a second wave) lost badly (66.7): hence the largest count one wave holds.
  Splits of 64 k-tiles were mixed: 896x896x8192 25.5 (26.3) but 768x1024x8192 25.7 (25.2, run 130), so a split
  takes at least ONE_WAVE_SPLIT_MIN_K_TILES.
Checked after the rule was written (run 130, the same method, on a second machine; the tail it replaced after):
1536x1536x4096 28.5 (29.8; cuBLAS 28.5), 896x896x16384 44.4 (46.7), 1280x2048x4096 29.6 (33.0), 1024x2112x4096
28.1 (29.8; cuBLAS's 64x256 tile 24.8), 1024x2112x1536 A K-major 13.1 (15.4), both operands K-major 1536x1536x4096
28.7 (30.7) and 896x896x16384 45.8 (47.7), 896x1024x32768 89.6 (93.3), 768x768x32768 in three splits 60.0 (67.7);
1536x1536x16384 keeps the tail, which ran ahead of the 128x160 tile there (103.4 against 107.5).

Both measured with 16-bit inputs and outputs, single problems (no batch), no fused epilogue, on the H200 only.
"""
from __future__ import annotations

import dataclasses

from ..errors import ConfigError
from ..kernel.config import GemmConfig

# The pick the rules turn: the cooperative 128x128 tile with its stream-K tail (with or without a full wave).
SHORT_GRID_PICK = ("cooperative", 128, 128)
# The wider tile that makes one wave where 128x128's tiles overflow it, and the deepest k-loop it was measured ahead
# at (64 k-tiles: K = 4096; level at 128).
ONE_WAVE_WIDE_N = 160
ONE_WAVE_WIDE_MAX_K_TILES = 64
# Split-K where one wave holds two or three splits of every tile (the counts measured), each split at least this many
# k-tiles: every split of 85 (768x896x16384 in three) or more measured ran ahead; at 64 one ran ahead (896x896x8192,
# +3.5%) and one behind (768x1024x8192, -2%, run 130).
ONE_WAVE_SPLITS = (2, 3)
ONE_WAVE_SPLIT_MIN_K_TILES = 80
ONE_WAVE_DTYPES = ("bfloat16", "float16")


def _tiles(m: int, n: int, block_m: int, block_n: int) -> int:
    return -(-m // block_m) * -(-n // block_n)


def with_one_wave(config: GemmConfig, m: int, n: int, k: int, sm_count: int, batches: int = 1) -> GemmConfig:
    """`config` (a ranked pick with the tail it takes, for a problem of m x n x k) as one full wave where the rules
    above take it: the 128x160 tile, or split-K in the most splits one wave holds (two or three); else `config`
    itself."""
    if ((config.schedule, config.block_m, config.block_n) != SHORT_GRID_PICK or not config.stream_k
            or batches != 1 or config.cluster_size > 1 or config.grouped is not None or config.fused
            or config.in_dtype not in ONE_WAVE_DTYPES or config.out_dtype not in ONE_WAVE_DTYPES):
        return config
    k_tiles = -(-k // config.block_k)
    tiles = _tiles(m, n, config.block_m, config.block_n)
    plain = dict(stream_k=False, sk_wave=False, k_serpentine=False)
    if tiles > sm_count:
        if k_tiles > ONE_WAVE_WIDE_MAX_K_TILES or _tiles(m, n, config.block_m, ONE_WAVE_WIDE_N) > sm_count:
            return config
        turned = dict(plain, block_n=ONE_WAVE_WIDE_N)
    else:
        splits = sm_count // tiles
        if splits not in ONE_WAVE_SPLITS or k_tiles // splits < ONE_WAVE_SPLIT_MIN_K_TILES:
            return config
        turned = dict(plain, splits=splits)
    try:
        return dataclasses.replace(config, **turned)
    except ConfigError:
        return config    # e.g. a stage count of its own that the wider tile's stages do not fit
