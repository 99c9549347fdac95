"""Which kernel config runs a problem: the tune cache's measured winner, else a cost model's pick.

    select_config(m, n, k, in_dtype, out_dtype, a_major, b_major, device) -> GemmConfig

1. Unless PTXGEMM_TUNE_CACHE is off, a winner `ptxgemm.tune` measured for this GPU, driver and problem
   (ptxgemm.select.tune_cache).
2. Otherwise the candidate (ptxgemm.select.tiles) with the least predicted time (ptxgemm.select.predict). The model,
   per CTA (one per SM, so the busiest SM's time is the kernel's):
       steps    = ceil(units / clusters)    units = cluster rows x cluster columns, clusters = SMs // cluster size
                                            (never more clusters than units: ptxgemm.kernel.schedule.plan_schedule)
       mainloop = k_tiles * KTILE_NS[tag]   one output tile's k-loop on one SM
       cooperative: steps * (mainloop + EPILOGUE_NS[tag])          both consumers store every tile together
       pingpong:    steps * max(mainloop, EPILOGUE_NS[tag]) + EPILOGUE_NS[tag]
                    a consumer's epilogue runs under its peer's mainloop, so a step costs the longer of the two
                    (the mainloops take turns at the tensor cores, the epilogues at the one staging buffer); only
                    the last tile's epilogue has nothing to hide under.

   KTILE_NS and EPILOGUE_NS are per-SM costs keyed by config tag (ptxgemm.select.tile_costs): refit them from device
   data (`python -m ptxgemm fit tiles`, ptxgemm/select/fitting.py reads bench runs with --variants, or the tune
   cache, where `python -m ptxgemm tune` stores every candidate's time) and the selection follows. This module
   holds the rules that rank the candidates, each with the measurement it stands on. Only SELECTABLE configs are
   chosen; predictions within TIE_FRACTION of the fastest count as ties, and ties go to the earlier config in
   SELECTABLE, so the choice is deterministic.

3. Last, `with_stream_k` (ptxgemm.select.predict, as the next two): a cooperative 16-bit pick whose units leave the
   last wave partly empty takes the stream-K tail (GemmConfig.stream_k) where the model says it saves SK_MIN_GAIN of
   the busiest cluster's time (`sk_steps`: its whole units, its share of the tail's k-tiles and the fix-up). Then
   `with_serpentine`: a
   cooperative 16-bit pick with at least two whole passes of the walk runs the odd ones backward in K
   (GemmConfig.k_serpentine), which the cost model does not time: it saves DRAM reads, hence energy. Then
   `with_band` (ptxgemm/select/band.py): an fp8 blockwise pick with a short k-loop over at most 16 cluster rows
   walks them all in one band, so B's panels are read from DRAM once. At small M a blockwise problem whose B panels
   fill the SMs in one wave runs unsplit 64x64 tiles with the deepest ring first (ptxgemm/select/unsplit_wave.py);
   so do per-tensor fp8 at M <= 128 (unsplit, or in two splits where the panels are few) and 16-bit outputs of
   1025-2048 columns in one wave over a short k-loop (_measured_first, the same module's other two rules). A short
   grid's cooperative 128x128 pick runs one full wave instead of its stream-K tail: the 128x160 tile or split-K
   (ptxgemm/select/short_grid.py). A 64x64 pingpong split pick runs its final split a few k-tiles longer than its
   partials (ptxgemm/select/split_lead.py).

Nothing here needs a GPU: without one, and without an injected device, the model assumes DEFAULT_DEVICE.
"""
from __future__ import annotations

import dataclasses
import math
import numbers

from ..errors import ConfigError
from ..kernel import layout
from ..kernel.hardware import TMA_ALIGN
from ..kernel.config import FP8_DTYPES, GemmConfig
from ..kernel.tile import TAG_SCHEDULE
from ..runtime import driver
from . import tune_cache
from .band import with_band
from .memory_model import misaligned_factor
from .predict import (DEEP_RING_DTYPES, Prediction, kernel_mnk, kernel_schedule, predict, with_deep_ring,
                      with_serpentine, with_stream_k)
from .problem import Problem
from .short_grid import with_one_wave
from .split_lead import with_split_lead
from .tiles import (BLOCK_SCALE_TILES, BLOCK_SCALE_TUNE_TILES, WHOLE_N_WIDER, blockwise_candidates,
                    problem_candidates)
from .unsplit_wave import FP8_WAVE_MAX_M, fp8_wave_splits, narrow_unsplit, unsplit_wave

# The cooperative 128x224 tile (issue 47; its costs: ptxgemm.select.tile_costs) is offered only where it takes N in
# whole tiles and 128x256 does not (WHOLE_N_TILES), for 16-bit operands with A
# K-major (forward and dX GEMMs): in the weight gradients (A M-major) its stream-K forms lost to the 128x128 tile's
# (4864x896x4096 coop128x224skw 54.0-54.8 us against coop128x128skw's 51.5), and where a longer grid's waves
# alone favored it the model had not been measured.
WHOLE_N_TILES = ("coop128x224",)
# What select_config chooses among, strongest first (measured in bench_h100_issue9_fit.json: the cooperative 128x256
# tile came within 3% of the best of the 10 candidates on 13 of the suite's 14 shapes; on the 14th, M = 128, it
# ran at 0.71x the best, where the 128x128 pingpong, with twice the tiles to spread over the SMs, was the best; on
# the H200 that shape needs the 64x128 pingpong's four times as many tiles: 0.97x cuBLAS against 0.87x).
# A model whose error is ~9% cannot rank candidates predicted within a few percent of each other, so a candidate
# wins only by more than TIE_FRACTION; within it, the earlier one here is taken. `tune` tries every candidate
# (CANDIDATE_TILES x CLUSTER_SHAPES), including those the model leaves out because they measured weaker
# (pp128x192, pp64x256, and 2-CTA clusters of pingpong tiles).
SELECTABLE = ("coop128x256", "coop128x256c2", "coop256x128", "coop256x128c2", "coop256x192", "pp128x128", "pp64x128",
              "pp128x16t", "pp128x32t", "pp128x64t", "pp64x128c2", "coop128x192", "coop128x224")
# SELECTABLE tiles added after WAVE_FILL_TILES' rule was measured (issue 47): they win where the model predicts them
# faster, and last in a tie, but do not raise the fill a WAVE_FILL_TILES tile must beat (at 3000x5000x2048 with B
# K-major coop128x192 would tie pp128x192's 98% and hand the tie back to coop128x256, measured 3% slower).
LATE_SELECTABLE = ("coop128x192", "coop128x224", "coop128x128", "pp64x64")
# The 64x64 pingpong is selectable for a narrow output (N <= NARROW_N_MAX, M >= NARROW_N_MIN_M, 16-bit) whose units
# take one wave: the k/v projections of grouped-query attention (N 128-256) and the weight gradients of narrow layers
# (128 x 896 x tokens). Twice the 64x128 tile's units at the same splits, or the same units with half the splits,
# each CTA streaming half the B panel. It runs with the deep ring (DEEP_RING_TILES), and goes first in a tie.
# Measured on the H200 beside the old picks (run 50, burst, side by side, bench_h200_issue47_r40-r119.json.gz: r50_ab50;
# 18 such shapes 1.10-1.37x faster, e.g. 512x1024x256 5.6-6.2 us against pp64x128k2's 7.6-8.4, 128x896x4096 10.4-10.5
# against pp64x128k6's 12.1-12.3) and where it lost: at decode-sized M (the transposed tiles' ground) and wider N
# (the small-M suite, run 48: 64x4096x14336 unsplit 47.8 against pp64x128k2's 42.2), and at two shapes left to it
# (2048x128x16384 35.9 against pp64x128k4's 32.0; 256x128x16384 14.2 against pp128x16tk8's 13.4).
NARROW_N_TILES = ("pp64x64",)
NARROW_N_MAX = 1024
NARROW_N_MIN_M = 128
# ... and of its split counts the fewest whose units still fill NARROW_MIN_FILL of the SMs, where the model would
# split further: with the deep ring (DEEP_RING_TILES) a CTA streams its longer k-range faster than the model's per-SM
# rate, and each split more is one more partial for the final to add. Measured on the H200 (runs 49 and 52, burst,
# side by side): 128x896x16384 pp64x64k3s13 (84 units) 20.2-20.9 us against pp64x64k4s13's (112) 20.6-21.7;
# 128x896x4096 10.3-11.0 against 10.6-11.2; two splits (56 units) lost at 16384 (22.6-23.5).
NARROW_MIN_FILL = 0.6
NARROW_DTYPES = DEEP_RING_DTYPES   # measured with bf16, as the deep ring it runs with
TIE_FRACTION = 0.03
# Within a tie, a long k-loop (K >= MULTICAST_MIN_K) goes to the cooperative 128x256 tile in cluster pairs sharing B
# (each CTA loads half of B's panel and multicasts it): measured under sustained, power-limited load on the H100 over
# the six square/LLM shapes (K 4096-14336; bench_h100_sustained_coop128x256c2.json beside bench_h100_sustained_r*.json),
# it held a 20-40 MHz higher clock at the same 650 W and ran 1.008x cuBLAS against the single CTA's 0.992x, and
# 1.016x against 0.997x in burst: half of B's traffic from L2 is energy the clock gets back. Short k-loops keep the
# single CTA, whose store is the cheaper (EPILOGUE_NS), and so does a grid of under MULTICAST_MIN_STEPS tiles per
# SM: at 512x8192x8192 (128 tiles, one partial wave) the pair ran 1.3% slower than the single CTA, side by side
# (bench_h100_quick_sel.json), where 8448x9216x2048 (6 steps) ran 1.5% faster.
MULTICAST_MIN_K = 2048
MULTICAST_MIN_STEPS = 2
MULTICAST_DTYPES = ("bfloat16", "float16")   # measured with bf16; fp8's k-tiles are not (their B panel is half)
MULTICAST_FIRST = "coop128x256c2"
# ... unless the model predicts LEAN_FIRST, the cooperative 256x192 tile, faster than MULTICAST_FIRST: then it goes
# first. Per FLOP it loads 22% fewer operand bytes into shared memory than 128x256 ((256 + 192) / (256 x 192)
# against (128 + 256) / (128 x 256)), and under sustained load that bought a higher clock at the same power than the
# pair's multicast. H100, 3 s windows beside cuBLAS, with the stream-K tail and the serpentine as the selection adds
# them (docs/results/h100/sustained/lean/): first as a variant (bench_h100_192_r1.json), 6144^3 1.026 against the
# pair's 1.015 (1380 against 1348 MHz, both at 653 W), 8192^3 1.046 against 1.039, 16384x16384x8192 1.044 against
# 1.027; then as the selection, four runs with the pair in its own windows (bench_h100_lean_sel_r{1..4}.json): 6144^3
# 1.037-1.042 against 1.018-1.023, 8192^3 1.046-1.052 against 1.039-1.041, 16384x16384x8192 1.041-1.049 against
# 1.028-1.036, burst not lower. Where a 4096-wide side pads it (22 columns of 192 for 4096) the model predicts it
# slower, and as a variant it ran slower: 4096^3 0.951, 4096x4096x14336 0.983, 4096x14336x4096 1.001 against the
# pair's 1.003, 0.995, 1.020.
LEAN_FIRST = "coop256x192"
# ... and it goes first from a shorter k-loop on, LEAN_MIN_K, where the pair does not: the same operand bytes per FLOP
# saved, with no multicast store to pay for. H200, 3 s sustained windows beside cuBLAS, one process, the 16-bit
# GEMMs of a Qwen2-1.5B-width step at K = 1536 (docs/results/h200/bench/bench_h200_sustained_issue46.json, runs
# r18): 4096 x 151936 x 1536 (the LM head, B K-major) 1.025 against coop128x256's 0.974 (1485 against 1412 MHz at
# 641-644 W); 4096 x 8960 x 1536 1.011 against 0.962 (B K-major) and 1.012 against 0.958 (B N-major); burst within
# 1% either way (1.025 / 1.032, 1.100 / 1.087, 1.007 / 0.994).
LEAN_MIN_K = 1536
# fp8 at M <= FP8_NARROW_MAX_M (one row of 64-row tiles): the 64x64 pingpong is selectable too, and first within a
# tie, so each B panel is half as wide and the same split count keeps twice the CTAs streaming B. Measured on the
# H100 beside pp64x128 and torch._scaled_mm on DeepGEMM's six M = 64 shapes, per-tensor scales, one process
# (bench_h100_fp8_tensor_issue24_smallm_variants.json; kernel durations / burst, over torch): 64x2112x7168 pp64x64k3
# 1.12 / 0.97 against pp64x128k3's 0.92 / 0.91; 64x4096x7168 pp64x64k2 1.03 / 1.00 against pp64x128k2's 0.85 / 0.95;
# 64x7168x2048 1.25 / 1.23 against 1.03 / 1.19; 64x24576x1536 0.99 / 1.09 against 0.95 / 1.04; 64x7168x16384 1.09 /
# 1.10 against 1.07 / 1.08; 64x32768x512 1.05 / 1.05 against 1.12 / 1.04. At M = 128 it won two shapes and lost two.
FP8_NARROW_TILE = "pp64x64"
FP8_NARROW_MAX_M = 64
# ... and above it, up to FP8_ROW_PAIR_MAX_M (two 64-row tiles), the 64x128 pingpong goes first in the order that
# decides a tie, where SELECTABLE's order used to give it to a 128-row tile (pp128x128, coop128x256): the same
# padding, twice the CTAs streaming B. Measured on the H100, burst, three runs of DeepGEMM's M = 128 shapes with per-tensor
# scales (bench_h100_fp8_tensor_issue24_smallm_variants.json, ..._tensor128_variants_run{1,2}.json), TFLOP/s:
# 128x7168x2048 pp64x128 304-307 against pp128x128's 279-283; 128x24576x1536 402-415 against coop128x256's 371-375;
# 128x32768x512 277 against 274.
FP8_ROW_PAIR_TILE = "pp64x128"
FP8_ROW_PAIR_MAX_M = 128
# Tiles the model's constants do not rank reliably against SELECTABLE (pp128x192 measured weaker on the seed sweep's
# full waves, where the model would pick it), offered only where they fill the grid better: when one is predicted
# within TIE_FRACTION of SELECTABLE's fastest and its steps are fuller than every tied SELECTABLE candidate's by more
# than WAVE_FILL_MARGIN (fill = units / (steps x clusters); a heavy last wave leaves SMs idle while the busiest
# finish), it is chosen. Measured on the H100 at 3000x5000x2048 with B K-major (probe_h100_issue11_*3000x5000x2048,
# probe3_h100_issue11_3000x5000x2048.json): coop128x256 fills 480 / (4 x 132) = 91% and ran 93.5 and 95.4 us;
# pp128x192 fills 648 / (5 x 132) = 98% and ran 90.8 and 92.2 us; the model ties them (93.1 against 93.2 us).
WAVE_FILL_TILES = ("pp128x192",)
# Blockwise fp8 scaling keeps three accumulator sets per consumer (the sums and two k-tiles' products, 64 x 128 at
# most: GemmConfig's BLOCK_SCALE_ACC_BUDGET), so only tiles.BLOCK_SCALE_TILES carry it; each is also offered with
# every split-K count and, the cooperative 128x128, in cluster pairs. They are ranked by the cost model's prediction
# (their k-tile costs, tile_costs.BLOCK_SCALE_KTILE_NS: the measured tile's, or the 128x128 pingpong's scaled by
# area, as for other unmeasured tiles); a candidate within TIE_FRACTION of the fastest yields to one that pads less
# (a 128-row tile at M = 64 multiplies as many zero rows as real ones), then to one earlier in BLOCK_SCALE_TILES,
# then to fewer splits.
# Measured before the two-set mainloop on the H200 at 8192^3 and 4096^3 (bench_h200_fp8_block_issue12_*.json):
# coop128x128 1120 and 1031 TFLOP/s against pp64x128's 801 and 743.
# Within a tie, a blockwise k-loop of at least this K goes to the cluster pair sharing B (coop256x128c2 beside
# coop256x128, H100, turns_h100_run3/run4.json): 4096x7168x16384 1220-1230 against 1123-1205 TFLOP/s, 4096x4096x7168
# 1243-1264 against 1133-1195; at K 1536-2048 the two were within 1%.
BLOCK_SCALE_MULTICAST_MIN_K = 4096
# ... but the 256-row tile goes, within its tie and at any K, to the pair sharing A (cn2, DeepGEMM's pair): each
# CTA of a 256x128 tile reads twice as many A rows per k-tile as B columns, so halving A's traffic saves more than
# halving B's. Measured on the H200 (run 32, flushed kernel durations, one run, perf-notes issue 49), cn2 against
# the selection's pick: 4096x7168x16384 732.8 us against c2's 759.1, 4096x4096x7168 180.3 against 181.5,
# 4096x24576x1536 246.7 against the single CTA's 249.3, 4096x32768x512 138.6 against 140.6, 4096x7168x2048 95.8
# against 96.3. The H100 is not measured: the rule is the H200's.
BLOCK_SCALE_PAIR_A_TILES = ("coop256x128",)
# Small M (DeepGEMM's M = 64 and 128 shapes) is memory-bound: the model predicts most candidates within the tie, and
# the tie used to go to the most CTAs with work, which picked split counts leaving a second, partial wave
# (64x7168x16384: pp64x128k3, 168 units on 132 SMs, 206-208 TFLOP/s burst, where pp64x128k2's 112 in one wave ran
# 251). Ties among memory-bound predictions now go first to the fuller waves (Prediction.wave_fill; a split counts
# only with at least BLOCK_SCALE_FILL_MIN_K_TILES k-tiles), then to the busier grid: over the 12 shapes of the
# calibration run (bench_h100_fp8_block_issue24_smallm_calib.json, 22 fixed variants each) the pick's burst time is
# 0.976 of the fastest variant's (geomean; lowest 0.80) where the old rule's was 0.945 (lowest 0.813), back to back
# 0.975 against 0.89. Fitted on those same 12 shapes.
# The one-set tiles are offered only above this M: measured at M = 4096, and at M <= 128 no faster than coop128x128
# with the same splits.
BLOCK_SCALE_WIDE_MIN_M = 128
BLOCK_SCALE_FILL_MIN_K_TILES = 16
# ... except the one-set pingpong 64x192, offered only there (M <= BLOCK_SCALE_WIDE_MIN_M), unsplit and without a
# cluster. Where its units fill the grid as well as the 64x128's (the rank's first keys tie), it goes first: fewer,
# longer units for the same waves. Measured on the H100 by kernel durations (DeepGEMM's method), three rounds in one
# process (docs/results/h100/fp8/l2promo_h100_issue24.json.gz): 128x24576x1536, 256 units against pp64x128's 384 (both
# 97% of their waves), 536-568 TFLOP/s against 446-463; where its waves are emptier the fill key keeps the other
# (128x4096x7168: 44 units, 292 against pp64x128k2's 505; 64x32768x512: 171 units in 2 waves, 299 against 335).
# Its splits are not offered: at 128x4096x7168 pp64x192k2/k3 ran 0.83-0.86 of the published figure where
# pp64x128k2 ran 0.96 (bench_h100_fp8_block_issue24_smallm_oneset_calib.json), which fill alone would not foresee.
BLOCK_SCALE_SMALL_M_TILES = (("pingpong", 64, 192),)
WAVE_FILL_MARGIN = 0.05
# Split-K pays a fix-up the memory model prices low where the units are few: a pick that splits K yields to a
# candidate predicted within SPLIT_TIE_FRACTION of it that makes at least as many units with fewer splits (a narrower
# tile). Measured on the H200 beside both (bench_h200_training_explore_qwen.json.gz, issue 47), weight gradients of
# Qwen2's narrow layers: 896x896x4096 pp64x128 17.7 us against pp128x128k2's 19.9 (98 units each); 256x1536x4096
# pp64x128k2 15.1 against pp128x128k4's 18.0 (96 each); 4096x128x896 pp64x128 10.6 against pp64x128k2's 11.7. The
# model had put each 6-9% behind.
SPLIT_TIE_FRACTION = 0.10
# A short k-loop (at most SHORT_K_TILES k-tiles) is mostly prologue and store: among memory-bound ties the fuller
# waves go first, before the order of SELECTABLE. Measured on the H200 (the same run): 4096x1536x256 pp128x128
# (384 tiles in 3 steps, 97% full) 12.9 us against coop128x256's 15.6 (192 in 2, 73%).
SHORT_K_TILES = 4
SHORT_K_DTYPES = ("bfloat16", "float16")   # measured with bf16; fp8's ties keep their own rules (FP8_*)
# Among memory-bound ties of the same padded work, the candidate with more units (up to one per SM) goes first: each
# CTA streams its own operand panels, so a grid that leaves SMs idle draws less of the bandwidth and pays each
# tile's ramp and store on fewer SMs. Measured on the H200 beside each other (docs/results/h200/bench/
# bench_h200_issue47_r40-r119.json.gz: r48_explore48, two runs, burst, issue 47): 16384x128x896 coop256x128 (64 units) 18.3 / 17.8 us
# against pp64x128's (256) 16.4 / 15.8; 4096x1536x256 coop256x192 (128) 12.6 / 12.0 against pp128x128's (384)
# 11.8 / 11.0; 4096x896x128 coop256x128 (112) 8.8 / 8.0 against coop128x128's 8.4 / 7.8.
BUSY_TIE_DTYPES = SHORT_K_DTYPES
BUSY_TIE_MIN_M = 512

# The ranking sees a cooperative candidate with its tail where its whole units take at most MAX_TAIL_RANKED_STEPS
# steps per SM: there the tail decides the time (4864x896x4096: 3 waves of 128x128 or 2 of 256x128, the tail a
# third of it). Longer grids are ranked by their whole units and get the tail after the ranking: ranked with their
# tails, 4096x14336x16384 (A M-major) and 16384x896x151936 moved to coop256x192 forms measured 2.5% slower than
# their picks (H200, run 40, perf-notes issue 47).
MAX_TAIL_RANKED_STEPS = 2
# The cooperative 128x128 tile is selectable on short grids only, of at most SHORT_GRID_MAX_STEPS steps of its whole
# units, where it is ranked with its tail and, as LATE_SELECTABLE, wins only by more than TIE_FRACTION. Its units
# are a quarter of 256x128's, so its tail and its last wave are finer; on longer grids the wider tiles' bytes per
# FLOP decide. Measured on the H200, burst, side by side (bench_h200_issue47_r40-r119.json.gz: r48_explore48, two runs; run 40 in
# bench_h200_issue47_r40-r119.json.gz): 1536x1536x4096 coop128x128skw 33.0 / 32.4 us against coop128x256sk's 36.2 /
# 35.5; 4864x896x4096 51.7 / 52.5 against coop256x128skw's 54.4 / 54.7; 896x896x16384 coop128x128sk 48.5 / 49.2
# against coop128x192sk's 50.7 / 52.9; but 4096x896x4864 (2 steps) coop128x128sk 56.1 against coop128x256's 53.0
# (the model keeps coop128x256 there), and on long grids 2-8% behind (4096x1536x8960 151.4 against coop256x192's
# 140.4; 4096x896x151936 1888 against coop256x128sk's 1617).
SHORT_GRID_TILES = ("coop128x128",)
SHORT_GRID_MAX_STEPS = 3
# ... and on products whose sides are both at least SHORT_GRID_MIN_SIDE, where it was measured (small M, 256 and 512
# rows, is the pingpong and split-K tiles' ground, as for predict.SK_ALL_MIN_SIDE)
SHORT_GRID_MIN_SIDE = 768

# The selection offers one of them, unsplit, at decode-sized M (M <= BLOCK_SCALE_SWAP_MAX_M: its 32 columns hold
# the caller's rows, where an unswapped tile pads M to 64), and only where the unswapped pick is unsplit too (a short
# k-loop, where the padded rows' share of the wgmma and of the promotion shows). Measured on the H100, burst, two
# runs side by side with 10 other tiles (docs/results/h100/fp8/bench_h100_fp8_block_issue24_swap_variants_run*.json):
# 32x7168x2048 77-78 TFLOP/s against pp64x64's 71-72; 16x24576x1536 52-53 against pp64x192's 49; 16x7168x2048
# 39 against 39. Where the unswapped pick splits K (16x2112x7168, 32x4096x7168, 32x7168x16384), the swap-AB tiles'
# splits only tie with it (within 3%), so it stays. The output must take the transposed store in place (its rows
# whole 16-byte lines); otherwise swapping would stage it.
BLOCK_SCALE_SWAP_TILE = ("pingpong", 64, 32)
BLOCK_SCALE_SWAP_MAX_M = 32



@dataclasses.dataclass(frozen=True)
class DeviceModel:
    """The device facts the model and the tune cache key use, for when there is no GPU to ask."""

    name: str
    sm_count: int
    driver_version_str: str | None = None


DEFAULT_DEVICE = DeviceModel("H100-like default (no GPU)", 132)


def resolve_device(device=None):
    """`device`, checked; None: the thread's current GPU (driver.device_info(), ptxgemm.device) if there is one, else
    DEFAULT_DEVICE."""
    if device is None:
        return driver.device_info() if driver.device_available() else DEFAULT_DEVICE
    sm = getattr(device, "sm_count", None)
    if not hasattr(device, "name") or isinstance(sm, bool) or not isinstance(sm, numbers.Integral) or sm < 1:
        raise ConfigError(f"device: must have .name and a positive integer .sm_count (e.g. driver.device_info()), "
                          f"got {device!r}")
    return device



MIN_CLUSTER_ROWS = 2


def _cluster_fills(config: GemmConfig, m: int) -> bool:
    """A cluster needs that many SMs at once and pays off only with at least MIN_CLUSTER_ROWS rows of clusters:
    with fewer, a pair's second CTA multiplies mostly zero-filled rows (H100, 128x8192x8192: pp128x128c2 ran at
    0.78x cuBLAS where pp128x128 ran at 0.97x; the model, which sees equal steps, would pick the pair)."""
    if config.cluster_m > 1:
        return -(-m // config.block_m) >= MIN_CLUSTER_ROWS * config.cluster_m
    return True


def with_epilogue(config: GemmConfig, epilogue: tuple) -> GemmConfig | None:
    """`config` carrying the fused epilogue `epilogue` (GemmConfig's epilogue fields as sorted (name, value) pairs),
    or None where it cannot (a source tile leaving fewer than 2 stages, blockwise scaling on a tile without room for
    two sets of accumulators, ...)."""
    if not epilogue:
        return config
    try:
        return dataclasses.replace(config, **dict(epilogue))
    except ConfigError:
        return None


def _ranked(problem: Problem, sm_count: int, gpu_name: str = "", batches: int = 1,
            epilogue: tuple = ()) -> list[tuple[Prediction, GemmConfig]]:
    """The selectable candidates with their predictions, in the order select_config prefers them: predicted time,
    except that a candidate within TIE_FRACTION of the fastest yields to an earlier one in SELECTABLE (or, for a
    long k-loop, to MULTICAST_FIRST, or LEAN_FIRST where that is predicted faster), and a
    WAVE_FILL_TILES candidate tied with them that fills the grid better than all of them goes first. The other
    WAVE_FILL_TILES candidates come last. With a fused `epilogue`, only candidates that can carry it; when no
    SELECTABLE one can (blockwise scaling's two sets of accumulators), every candidate that can."""
    if dict(epilogue).get("block_scale"):
        return _ranked_blockwise(problem, sm_count, gpu_name, batches, epilogue)
    pairs, fillers, others = [], [], []
    narrow = problem.in_dtype in FP8_DTYPES and problem.m <= FP8_NARROW_MAX_M
    row_pair = problem.in_dtype in FP8_DTYPES and FP8_NARROW_MAX_M < problem.m <= FP8_ROW_PAIR_MAX_M
    selectable = ((FP8_NARROW_TILE,) + SELECTABLE if narrow else
                  (FP8_ROW_PAIR_TILE,) + tuple(t for t in SELECTABLE if t != FP8_ROW_PAIR_TILE) if row_pair else
                  SELECTABLE)
    for c in problem_candidates(problem):
        c = with_epilogue(c, epilogue)
        if c is None or c.cluster_size > sm_count or not _cluster_fills(c, problem.m):
            continue
        pred = (predict(c, problem.m, problem.n, problem.k, sm_count, gpu_name, batches), c)
        offered = _offered_where_measured(c, pred[0].steps, problem)   # None: SELECTABLE decides
        tail_steps = SHORT_GRID_MAX_STEPS if c.tile_tag in SHORT_GRID_TILES else MAX_TAIL_RANKED_STEPS
        if c.cooperative and c.splits == 1 and pred[0].steps <= tail_steps:
            # a short grid: its stream-K form competes with split-K and the other tiles as it would run (with_stream_k)
            pred = _with_tail(*pred, problem.m, problem.n, problem.k, sm_count, gpu_name, batches)
        (pairs if offered or (offered is None and c.tile_tag in selectable) else
         fillers if c.tile_tag in WAVE_FILL_TILES else others).append(pred)
    if not pairs:
        pairs, fillers = others, []
    if not pairs:
        raise ConfigError(f"in_dtype/out_dtype: no candidate config fits {problem.describe()}")
    fastest = min(p.total_ns for p, _ in pairs)
    tied_fill = max((p.wave_fill for p, c in pairs if p.total_ns <= fastest * (1 + TIE_FRACTION)
                     and c.tile_tag not in LATE_SELECTABLE), default=0.0)
    # the long k-loop's first tile, each of the two timed with the stream-K tail where the selection would add it
    min_k = {MULTICAST_FIRST: MULTICAST_MIN_K, LEAN_FIRST: LEAN_MIN_K}
    long_k = {c.tile_tag: _with_tail(p, c, problem.m, problem.n, problem.k, sm_count, gpu_name, batches)[0].total_ns
              for p, c in pairs if c.tile_tag in min_k and problem.k >= min_k[c.tile_tag]
              and p.steps >= MULTICAST_MIN_STEPS and problem.in_dtype in MULTICAST_DTYPES}
    first = LEAN_FIRST if long_k.get(LEAN_FIRST, math.inf) < long_k.get(MULTICAST_FIRST, math.inf) else MULTICAST_FIRST

    def rank(pair):
        p, c = pair
        if c.tile_tag in WAVE_FILL_TILES:
            if p.total_ns <= fastest * (1 + TIE_FRACTION) and p.wave_fill > tied_fill + WAVE_FILL_MARGIN:
                return (-1, p.total_ns, 0, 0, 0)     # ties SELECTABLE's best and fills the grid better
            return (2, p.total_ns, 0, 0, 0)
        if p.total_ns > fastest * (1 + TIE_FRACTION):
            return (1, p.total_ns, 0, 0, 0)
        order = (selectable.index(c.tile_tag) if c.tile_tag in selectable
                 else -0.5 if c.tile_tag in SHORT_GRID_TILES + NARROW_N_TILES
                 else len(selectable))
        if c.tile_tag == first and c.tile_tag in long_k:
            order = -1
        if p.memory_bound:   # tied on streaming the same bytes: the least padded work, the most SMs streaming
            # (BUSY_TIES), the fewest splits, the fewest straddled L2 lines; a short k-loop first the fullest waves
            # (SHORT_K_TILES)
            short = p.k_tiles * c.splits <= SHORT_K_TILES and c.in_dtype in SHORT_K_DTYPES
            fill = -round(p.wave_fill, 2) if short else 0
            busy = (-round(p.busy_ctas / sm_count, 1) if c.in_dtype in BUSY_TIE_DTYPES
                    and problem.m >= BUSY_TIE_MIN_M else 0)
            overlapped = int(c.cooperative) if short else 0
            return (0, p.padded_area, overlapped, fill, c.splits, busy,
                    misaligned_factor(c, *kernel_mnk(c, problem.m, problem.n, problem.k)), order)
        return (0, 0, order, c.splits, 0, 0)

    pairs += fillers
    ranked = _narrow_fewest_splits(_fewer_splits_first(sorted(pairs, key=rank)), sm_count)
    first = _measured_first(problem, sm_count, gpu_name, batches, epilogue)
    if first is not None:
        ranked.insert(0, first)
    return ranked


def _measured_first(problem: Problem, sm_count: int, gpu_name: str, batches: int, epilogue: tuple):
    """(prediction, config) of the candidate a measured rule puts ahead of the model's ranking, or None: one problem
    (not a batch), a single CTA per cluster, the rule's split count, each rule in its module with its measurements:
    - per-tensor fp8 at M <= FP8_WAVE_MAX_M: one wave of 64x64 pingpong tiles in the deepest ring, unsplit or in two
      splits (unsplit_wave.fp8_wave_splits);
    - 16-bit, N above NARROW_N_MAX (the narrow rule's) and M at least NARROW_N_MIN_M: the unsplit 64x64 pingpong where
      it makes one wave over a short k-loop (unsplit_wave.narrow_unsplit), in the deep ring _untimed_forms gives it.
    (A third, the 128x128 pingpong for a language model's head, won burst and lost sustained: perf-notes, run 116.)"""
    if batches != 1:
        return None
    p = problem
    if p.in_dtype in FP8_DTYPES and p.m <= FP8_WAVE_MAX_M:
        tile, rule = FP8_NARROW_TILE, lambda whole: fp8_wave_splits(whole.tiles_m, whole.tiles_n, whole.k_tiles,
                                                                    sm_count)
    elif p.in_dtype in NARROW_DTYPES and p.n > NARROW_N_MAX and p.m >= NARROW_N_MIN_M:
        tile, rule = NARROW_N_TILES[0], lambda whole: (
            1 if narrow_unsplit(whole.tiles_m * whole.tiles_n, whole.k_tiles, p.n, p.a_major, sm_count) else None)
    else:
        return None
    # the tile alone, untransposed, by split count; the rule reads the unsplit form's tiles and k-tiles
    forms = {c.splits: c for c in problem_candidates(p)
             if c.tile_tag == tile and c.cluster_size == 1 and not c.transposed_store}
    if 1 not in forms:
        return None
    splits = rule(predict(forms[1], p.m, p.n, p.k, sm_count, gpu_name, batches))
    c = with_epilogue(forms[splits], epilogue) if splits in forms else None
    if c is None:
        return None
    pred = predict(c, p.m, p.n, p.k, sm_count, gpu_name, batches)   # (the model times the tile, not its ring)
    if c.in_dtype in FP8_DTYPES:   # (16-bit pp64x64 takes the deep ring from _untimed_forms: with_deep_ring)
        c = dataclasses.replace(c, stages=c.most_stages)
    return pred, c


def _offered_where_measured(config: GemmConfig, steps: int, problem: Problem) -> bool | None:
    """Whether a tile that is selectable only where it was measured to win (with 16-bit operands) is offered for
    `problem`: NARROW_N_TILES for a narrow output in one wave, SHORT_GRID_TILES on a short grid (`steps` of its whole
    units) with long sides, WHOLE_N_TILES where it takes N whole and 128x256 does not. None where no such rule
    applies (SELECTABLE decides). A tile not offered joins the candidates taken only when no selectable one fits."""
    tile = config.tile_tag
    sixteen = problem.in_dtype in NARROW_DTYPES
    if tile in NARROW_N_TILES and sixteen:   # (fp8 has the tile by its own rule: FP8_NARROW_TILE)
        return steps <= 1 and problem.n <= NARROW_N_MAX and problem.m >= NARROW_N_MIN_M
    if tile in SHORT_GRID_TILES and sixteen:
        return steps <= SHORT_GRID_MAX_STEPS and min(problem.m, problem.n) >= SHORT_GRID_MIN_SIDE
    if tile in WHOLE_N_TILES:
        return (sixteen and problem.a_major == "k" and problem.n % config.block_n == 0
                and problem.n % WHOLE_N_WIDER != 0)
    return None


def _narrow_fewest_splits(ranked: list, sm_count: int) -> list:
    """`ranked` with its first candidate, where it is a NARROW_N_TILES tile that splits K, behind the same tile with
    the fewest splits whose units still fill NARROW_MIN_FILL of the SMs (NARROW_MIN_FILL says why)."""
    top_pred, top = ranked[0]
    if top.tile_tag not in NARROW_N_TILES or top.splits == 1:
        return ranked
    tiles = top_pred.tiles_m * top_pred.tiles_n
    fewer = [(i, c) for i, (p, c) in enumerate(ranked) if c.tile_tag == top.tile_tag and c.splits < top.splits
             and tiles * c.splits >= NARROW_MIN_FILL * sm_count]
    if not fewer:
        return ranked
    i = min(fewer, key=lambda ic: ic[1].splits)[0]
    return _to_front(ranked, i)


def _to_front(ranked: list, i: int) -> list:
    """`ranked` with its i-th candidate first, the others in their order."""
    return [ranked[i]] + ranked[:i] + ranked[i + 1:]


def _fewer_splits_first(ranked: list) -> list:
    """`ranked` with its first candidate, where it splits K, behind the first one that makes at least as many units
    with fewer splits (a narrower tile, stored the same way) and is predicted within SPLIT_TIE_FRACTION of it."""
    top_pred, top = ranked[0]
    if top.splits == 1:
        return ranked
    units = top_pred.tiles_m * top_pred.tiles_n * top.splits
    for i, (p, c) in enumerate(ranked[1:], 1):
        if (c.splits < top.splits and p.tiles_m * p.tiles_n * c.splits >= units
                and p.total_ns <= top_pred.total_ns * (1 + SPLIT_TIE_FRACTION) and c.tile_tag not in WAVE_FILL_TILES
                and c.transposed_store == top.transposed_store):
            return _to_front(ranked, i)
    return ranked


def _with_tail(pred: Prediction, config: GemmConfig, m: int, n: int, k: int, sm_count: int, gpu_name: str,
               batches: int = 1) -> tuple[Prediction, GemmConfig]:
    """`config` as `preferences` runs it, with the stream-K tail where it takes one, and its prediction (`pred`,
    the ranking's, where it takes none)."""
    tail = with_stream_k(config, m, n, k, sm_count, gpu_name, batches)
    return (pred if tail is config else predict(tail, m, n, k, sm_count, gpu_name, batches)), tail



def _ranked_blockwise(problem: Problem, sm_count: int, gpu_name: str, batches: int, epilogue: tuple):
    """_ranked for blockwise scaling: the BLOCK_SCALE_TILES candidates by predicted time, ties (TIE_FRACTION) to
    fuller waves (memory-bound predictions), then more CTAs with work, then the least padded work, then the earlier
    tile, then fewer splits, then for BLOCK_SCALE_PAIR_A_TILES a cluster pair sharing A, then (K >=
    BLOCK_SCALE_MULTICAST_MIN_K) a cluster pair sharing B; at decode-sized M,
    BLOCK_SCALE_SWAP_TILE ahead of an unsplit first pick; at small M, where its tiles make one wave on B panels
    of their own, the unsplit 64x64 pingpong in its deepest ring first of all (unsplit_wave.py)."""
    order = [f"{TAG_SCHEDULE[s]}{bm}x{bn}" for s, bm, bn in BLOCK_SCALE_TILES]
    small_m = problem.m <= BLOCK_SCALE_WIDE_MIN_M
    # the swap-AB kernel reads A's scales per thread, by its columns: not from an M-major table (GemmConfig's
    # block_scale_a_mn rule)
    swap_fits = (problem.m <= BLOCK_SCALE_SWAP_MAX_M and not dict(epilogue).get("block_scale_a_mn")
                 and problem.n * layout.itemsize(problem.out_dtype) % TMA_ALIGN == 0)
    pairs, swapped = [], None
    for c in blockwise_candidates(problem):
        c = with_epilogue(c, epilogue)
        if c is None or c.cluster_size > sm_count or not _cluster_fills(c, problem.m):
            continue
        if c.transposed_store:
            if swap_fits and (c.schedule, c.block_m, c.block_n) == BLOCK_SCALE_SWAP_TILE and c.splits == 1:
                swapped = c
            continue
        if (c.schedule, c.block_m, c.block_n) in BLOCK_SCALE_TUNE_TILES:
            continue       # tune's until measured
        if (c.schedule, c.block_m, c.block_n) in BLOCK_SCALE_SMALL_M_TILES:
            if not small_m or c.splits > 1 or c.cluster_size > 1:
                continue   # offered at small M only, unsplit and alone
        elif not c.bs_two_sets_fit and small_m:
            continue       # the wide one-set tiles: at large M only
        pairs.append((predict(c, problem.m, problem.n, problem.k, sm_count, gpu_name, batches), c))
    if not pairs:
        raise ConfigError(f"scale_a, scale_b: no blockwise-capable config fits {problem.describe()}")
    fastest = min(p.total_ns for p, _ in pairs)

    def rank(pair):
        p, c = pair
        base = f"{TAG_SCHEDULE[c.schedule]}{c.block_m}x{c.block_n}"
        tied = p.total_ns <= fastest * (1 + TIE_FRACTION)
        if not tied:
            return (1, p.total_ns, 0, 0, 0, 0)
        busy = min(p.tiles_m * p.tiles_n * c.splits, sm_count)   # CTAs with work: each streams its own B columns
        pair_first = c.cluster_m > 1 and problem.k >= BLOCK_SCALE_MULTICAST_MIN_K
        pair_a_first = c.cluster_n > 1 and base in BLOCK_SCALE_PAIR_A_TILES
        # a split whose k-range is short loses more to the fix-up than fuller waves give back (64x24576x1536:
        # pp64x128k2 169 TFLOP/s against pp64x128's 186), so only splits of BLOCK_SCALE_FILL_MIN_K_TILES count
        fill = (round(p.wave_fill, 2) if c.splits == 1 or p.k_tiles >= BLOCK_SCALE_FILL_MIN_K_TILES else 0.0) \
            if p.memory_bound else 1.0
        return (0, -fill, -busy, p.padded_area, order.index(base), c.splits, not pair_a_first, not pair_first,
                c.cluster_size)
    ranked = sorted(pairs, key=rank)
    if swapped is not None and ranked[0][1].splits == 1:   # decode-sized M, a short k-loop: the swap-AB tile first
        ranked.insert(0, (predict(swapped, problem.m, problem.n, problem.k, sm_count, gpu_name, batches), swapped))
    if batches == 1:   # one wave of unsplit 64x64 tiles in the deepest ring, each on its own B panel (unsplit_wave)
        wave = next(((p, deep) for p, c in ranked
                     if (deep := unsplit_wave(c, p.tiles_m, p.tiles_n, p.k_tiles, sm_count)) is not None), None)
        if wave is not None:
            ranked.insert(0, wave)
    return ranked


def _untimed_forms(config: GemmConfig, m: int, n: int, k: int, sm_count: int, batches: int = 1) -> GemmConfig:
    """`config` (a ranked pick with the tail it takes) with the forms the selection adds last and the model does not
    time: one full wave for the cooperative 128x128 tile's short grids (short_grid.py), the serpentine k-loop, the
    deep ring, the final split's lead (split_lead.py) and the walk's band (`config` itself where none applies)."""
    whole = with_one_wave(config, m, n, k, sm_count, batches)
    turned = with_split_lead(with_deep_ring(with_serpentine(whole, m, n, k, sm_count, batches)), k)
    return with_band(turned, lambda c: kernel_schedule(c, m, n, k, sm_count, batches))


def preferences(m: int, n: int, k: int, in_dtype: str = "bfloat16", out_dtype: str | None = None,
                a_major: str = "k", b_major: str = "mn", device=None, batches: int = 1, epilogue: tuple = ()):
    """Every config that can run the problem, most preferred first, each with where it came from ('tune cache' or
    'cost model'): the tune cache's winner (single problems only: a batch asks the cost model, which counts every
    problem's tiles), when it can carry the fused epilogue (the epilogue runs under the peer's mainloop), then the
    cost model's ranking. A generator: the caller takes the first, or walks on past one it rejects (a fused kernel
    that ptxas spills, see ptxgemm.gemm)."""
    problem = Problem(m, n, k, in_dtype, out_dtype, a_major, b_major)
    device = resolve_device(device)
    scaling = "block" if dict(epilogue).get("block_scale") else None   # blockwise winners have entries of their own
    cached = tune_cache.lookup(problem, device, scaling) if batches == 1 else None
    if cached is not None and with_epilogue(cached, epilogue) is not None:
        yield with_epilogue(cached, epilogue), "tune cache"
    for _, config in _ranked(problem, device.sm_count, str(device.name), batches, epilogue):
        # the tail decided for the configs the caller takes, not for every candidate ranked
        tail = with_stream_k(config, m, n, k, device.sm_count, str(device.name), batches)
        yield _untimed_forms(tail, m, n, k, device.sm_count, batches), "cost model"


def choose(m: int, n: int, k: int, in_dtype: str = "bfloat16", out_dtype: str | None = None, a_major: str = "k",
           b_major: str = "mn", device=None, batches: int = 1, epilogue: tuple = ()) -> tuple[GemmConfig, str]:
    """(config, where it came from: 'tune cache' or 'cost model'); select_config without the second part."""
    return next(preferences(m, n, k, in_dtype, out_dtype, a_major, b_major, device, batches, epilogue))


def select_config(m: int, n: int, k: int, in_dtype: str = "bfloat16", out_dtype: str | None = None,
                  a_major: str = "k", b_major: str = "mn", device=None, batches: int = 1,
                  epilogue: tuple = ()) -> GemmConfig:
    """The config to run C (m x n) = A (m x k) . B (k x n) with: the tune cache's winner, else the cost model's.

    out_dtype None means in_dtype. device: an object with .name and .sm_count (driver.device_info() gives one);
    None: the current GPU, or DEFAULT_DEVICE (132 SMs) without one. `batches`: problems of that shape in one launch.
    `epilogue`: the fused epilogue's GemmConfig fields as sorted (name, value) pairs; the config carries them.
    ConfigError names a bad argument."""
    return choose(m, n, k, in_dtype, out_dtype, a_major, b_major, device, batches, epilogue)[0]


def explain(m: int, n: int, k: int, in_dtype: str = "bfloat16", out_dtype: str | None = None, a_major: str = "k",
            b_major: str = "mn", device=None) -> list[dict]:
    """The cost model's table, fastest first: per candidate its tag, tiles, k-tiles, steps per CTA and predicted us,
    each with the stream-K tail where `preferences` would give it one. (The cost model only: the tune cache, if it
    has an entry, overrides the first row; see `choose`.)"""
    problem = Problem(m, n, k, in_dtype, out_dtype, a_major, b_major)
    device = resolve_device(device)
    rows = []
    for p, c in _ranked(problem, device.sm_count, str(device.name)):
        pred, tail = _with_tail(p, c, m, n, k, device.sm_count, str(device.name))
        turned = _untimed_forms(tail, m, n, k, device.sm_count)
        rows.append(pred.row(None if turned is tail else turned.tag))
    return rows


def format_table(rows: list[dict], chosen: str | None = None) -> str:
    head = f"{'config':<16} {'tiles':>9} {'k_tiles':>7} {'steps/CTA':>9} {'predicted us':>12}"
    lines = [head, "-" * len(head)]
    for r in rows:
        mark = "  <- chosen" if r["tag"] == chosen else ""
        lines.append(f"{r['tag']:<16} {r['tiles']:>9} {r['k_tiles']:>7} {r['steps_per_cta']:>9} "
                     f"{r['predicted_us']:>12.2f}{mark}")
    return "\n".join(lines)
