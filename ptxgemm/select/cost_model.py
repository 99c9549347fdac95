"""Which kernel config runs a problem: the tune cache's measured winner, else a cost model's pick.

    select_config(m, n, k, in_dtype, out_dtype, a_major, b_major, device) -> GemmConfig

1. Unless PTXGEMM_TUNE_CACHE is off, a winner `ptxgemm.tune` measured for this GPU, driver and problem
   (ptxgemm.select.tune_cache).
2. Otherwise the candidate (`candidates`) with the least predicted time. The model, per CTA (one per SM, so the
   busiest SM's time is the kernel's):
       steps    = ceil(units / clusters)    units = cluster rows x cluster columns, clusters = SMs // cluster size
                                            (never more clusters than units: ptxgemm.kernel.schedule.plan_schedule)
       mainloop = k_tiles * KTILE_NS[tag]   one output tile's k-loop on one SM
       cooperative: steps * (mainloop + EPILOGUE_NS[tag])          both consumers store every tile together
       pingpong:    steps * max(mainloop, EPILOGUE_NS[tag]) + EPILOGUE_NS[tag]
                    a consumer's epilogue runs under its peer's mainloop, so a step costs the longer of the two
                    (the mainloops take turns at the tensor cores, the epilogues at the one staging buffer); only
                    the last tile's epilogue has nothing to hide under.

   KTILE_NS and EPILOGUE_NS are per-SM costs keyed by config tag: refit them from device data (`python -m ptxgemm fit tiles`, ptxgemm/select/fitting.py
   reads bench runs with --variants, or the tune cache, where `python -m ptxgemm tune` stores every candidate's
   time) and the selection follows. Only SELECTABLE configs are chosen; predictions within TIE_FRACTION of the
   fastest count as ties, and ties go to the earlier config in SELECTABLE, so the choice is deterministic.

3. Last, `with_stream_k`: a cooperative 16-bit pick whose units leave the last wave partly empty takes the
   stream-K tail (GemmConfig.stream_k) where the model says it saves SK_MIN_GAIN of the busiest cluster's time
   (`sk_steps`: its whole units, its share of the tail's k-tiles and the fix-up). Then `with_serpentine`: a
   cooperative 16-bit pick with at least two whole passes of the walk runs the odd ones backward in K
   (GemmConfig.k_serpentine), which the cost model does not time: it saves DRAM reads, hence energy. Then
   `with_band` (ptxgemm/select/band.py): an fp8 blockwise pick with a short k-loop over at most 16 cluster rows
   walks them all in one band, so B's panels are read from DRAM once. At small M a blockwise problem whose B panels
   fill the SMs in one wave runs unsplit 64x64 tiles with the deepest ring first (ptxgemm/select/unsplit_wave.py).

Nothing here needs a GPU: without one, and without an injected device, the model assumes DEFAULT_DEVICE.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import numbers

import numpy as np

from ..errors import ConfigError
from ..kernel import layout, schedule
from ..kernel.hardware import TMA_ALIGN
from ..kernel.config import FP8_DTYPES, GemmConfig
from ..kernel.tile import TAG_SCHEDULE
from ..runtime import driver
from . import tune_cache
from .band import with_band
from .memory_model import combine, fixup_ns, memory_ns, misaligned_factor
from .problem import Problem
from .unsplit_wave import unsplit_wave

# Per-SM costs in ns, keyed by GemmConfig.tag, fitted (`python -m ptxgemm fit tiles`, ptxgemm/select/fitting.py) to two H100 SXM runs of the benchmark
# suite in which every candidate was timed side by side with cuBLAS (docs/results/h100/select/bench_h100_issue9_fit.json and
# docs/results/h100/select/select_explore_h100_run1.json: 14 shapes each; bf16, A K-major, B MN-major) by minimizing the model's
# log error per tag. EPILOGUE_NS also absorbs what a launch costs beyond its k-loops (ramp-up, the last wave's tail,
# the output's DRAM traffic), which is why it exceeds a bare store's time. The fit's RMS log error is 7-11% per tag.
KTILE_NS = {
    "coop128x256": 657, "coop128x256c2": 653, "coop256x128": 671, "coop256x128c2": 677, "coop256x192": 962,
    "pp128x128": 457, "pp128x128c2": 438, "pp128x192": 565, "pp64x256": 424, "pp64x256c2": 473,
    "pp64x128": 280,   # pp64x128: not measured on the H100; the H200's ratio to pp128x128 (0.61) applied
    # transposed tiles (swap-AB): fitted with the memory model's constants (memory_model.MEMORY)
    "pp128x16t": 290, "pp128x32t": 311, "pp128x64t": 327, "pp64x16t": 161}
EPILOGUE_NS = {
    "coop128x256": 2260, "coop128x256c2": 2360, "coop256x128": 2340, "coop256x128c2": 2280, "coop256x192": 3800,
    "pp128x128": 1730, "pp128x128c2": 1930, "pp128x192": 2760, "pp64x256": 1870, "pp64x256c2": 1670,
    "pp64x128": 860,   # (the H200's 0.5 ratio to pp128x128's)
    "pp128x16t": 4980, "pp128x32t": 4980, "pp128x64t": 3260, "pp64x16t": 2590}

# The same fitted to the H200 (docs/results/h200/select/bench_h200_issue9_fit.json: the suite's 14 shapes with 10 candidates
# side by side). GPU_TABLES maps a substring of the device name to its tables; other GPUs use the H100's.
KTILE_NS_H200 = {
    "coop128x128": 362, "coop128x256": 685, "coop128x256c2": 681, "coop256x128": 695, "coop256x128c2": 712, "coop256x192": 1000,
    "pp128x128": 397, "pp128x192": 572, "pp64x128": 243, "pp64x256": 420,
    # transposed tiles: not measured on the H200; the H100's fits scaled by pp128x128's ratio (397 / 457)
    "pp128x16t": 252, "pp128x32t": 270, "pp128x64t": 284, "pp64x16t": 140}
EPILOGUE_NS_H200 = {
    "coop128x128": 770, "coop128x256": 1600, "coop128x256c2": 1630, "coop256x128": 1680, "coop256x128c2": 1620, "coop256x192": 2750,
    "pp128x128": 1330, "pp128x192": 2020, "pp64x128": 660, "pp64x256": 1290,
    "pp128x16t": 3830, "pp128x32t": 3830, "pp128x64t": 2510, "pp64x16t": 1990}   # (scaled by 1330 / 1730)
# The cooperative 128x192 tile (issue 47): fitted (`python -m ptxgemm fit tiles`, ptxgemm/select/fitting.py, the points above 30 us) to the H200 runs of the
# training set with 17 variants side by side (docs/results/h200/bench/bench_h200_training_explore_*.json, 45 GEMMs of
# Qwen2-0.5B, Qwen2-1.5B and Llama-3-8B widths at 4096 tokens; RMS log error 7%). The same fit gave the tables'
# tiles within 1-8% of their entries above (coop128x256 709, coop256x128 710, coop128x128 370, pp128x128 374). Its
# 96 tiles fill 1536x1536 where 128x256's 72 leave 60 SMs idle: the Qwen2-1.5B weight gradient dW = dY^T X (1536 x
# 1536 x 4096) ran 36.8 us against coop128x256's 45.4. The H100 has no measurement: the H200's, scaled by the two
# GPUs' coop128x256 entries (657 / 685 and 2260 / 1600).
KTILE_NS_H200["coop128x192"], EPILOGUE_NS_H200["coop128x192"] = 538, 1420
KTILE_NS["coop128x192"], EPILOGUE_NS["coop128x192"] = 516, 2010
# The cooperative 128x224 tile (issue 47): N = 896 (Qwen2-0.5B's width) in four whole tiles where 128x256 pads it by
# an eighth. Its costs are the 128x256 tile's scaled by area (224 / 256), which its times fit within 1-5% (H200, run
# 52, docs/results/h200/bench/bench_h200_issue47_r40-r53.json.gz: r52_explore52: 4096x896x4864 48.0 us against coop128x256's 52.3,
# 16384x896x4864 182.8-191.5 against 201.6-207.6, 4096x896x896 14.6-14.8 against the pick's 15.6-15.8).
# It is offered only where it takes N in whole tiles and 128x256 does not (WHOLE_N_TILES), for 16-bit operands with A
# K-major (forward and dX GEMMs): in the weight gradients (A M-major) its stream-K forms lost to the 128x128 tile's
# (4864x896x4096 coop128x224skw 54.0-54.8 us against coop128x128skw's 51.5), and where a longer grid's waves
# alone favored it the model had not been measured.
WHOLE_N_TILES = ("coop128x224",)
WHOLE_N_WIDER = 256                 # the wider tile's N, 128x256's: where it divides N, it takes N whole itself
W224_AREA = 224 / WHOLE_N_WIDER
KTILE_NS_H200["coop128x224"], EPILOGUE_NS_H200["coop128x224"] = (round(KTILE_NS_H200["coop128x256"] * W224_AREA),
                                                                round(EPILOGUE_NS_H200["coop128x256"] * W224_AREA))
KTILE_NS["coop128x224"], EPILOGUE_NS["coop128x224"] = (round(KTILE_NS["coop128x256"] * W224_AREA),
                                                      round(EPILOGUE_NS["coop128x256"] * W224_AREA))
GPU_TABLES = {"H200": (KTILE_NS_H200, EPILOGUE_NS_H200)}

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
# Measured on the H200 beside the old picks (run 50, burst, side by side, bench_h200_issue47_r40-r53.json.gz: r50_ab50;
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
# The tiles the selection gives the deepest ring shared memory holds (with_deep_ring; kernel/layout.py, FILL_STAGES):
# 13 stages of the 64x64 pingpong keep 208 KiB in flight, as 8 of the 64x128's keep 192. Measured on the H200 beside
# 8 stages (run 49, bench_h200_issue47_r40-r53.json.gz: r49_explore49): 128x896x16384 pp64x64k3 20.2 us against
# 22.9, k2 22.6 against 26.6; 16384x128x896 unsplit 17.5-17.9 against 18.5-19.1; at 256x1536 with 4 and 6 splits
# (3-5 waves of units) it lost 8-10%, where the narrow rule above does not offer the tile.
DEEP_RING_TILES = ("pp64x64",)
NARROW_DTYPES = DEEP_RING_DTYPES = ("bfloat16", "float16")   # measured with bf16; fp8 keeps its own rules (FP8_*)
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
# most: GemmConfig's BLOCK_SCALE_ACC_BUDGET), so only these tiles carry it; each is also offered with every split-K
# count and, the cooperative 128x128, in cluster pairs. They are ranked by the cost model's prediction (their
# k-tile costs: the measured tile's, or the 128x128 pingpong's scaled by area, as for other unmeasured tiles); a
# candidate within TIE_FRACTION of the fastest yields to one that pads less (a 128-row tile at M = 64 multiplies as
# many zero rows as real ones), then to one earlier in BLOCK_SCALE_TILES, then to fewer splits.
# Measured before the two-set mainloop on the H200 at 8192^3 and 4096^3 (bench_h200_fp8_block_issue12_*.json):
# coop128x128 1120 and 1031 TFLOP/s against pp64x128's 801 and 743.
# Their k-tile costs (ns per SM), from the H100 at 4096x7168x16384 (118 k-tiles per tile, so the store hardly counts):
# coop128x128 1108 TFLOP/s, pp64x128 714, coop128x64 685, pp64x64 510 (bench_h100_fp8_block_issue24_calib.json):
# ns = 2 * block_m * block_n * 128 / (TFLOP/s * 1e12 / 132) * 1e9. Cluster pairs take their tile's.
# The one-product-set tiles (issue 24: 128x192 and 256x128 cooperative; scales a k-tile batch ahead), from the same
# shape in the variants runs beside coop128x128 (docs/results/h100/fp8/turns_h100_run4.json: 1177 and 1123-1230
# TFLOP/s, coop128x128 1004 in that run).
BLOCK_SCALE_KTILE_NS = {"coop128x128": 500, "pp64x128": 388, "coop128x64": 404, "pp64x64": 271,
                        "coop128x192": 705, "coop256x128": 940}
# pp64x192 is not measured where compute decides (it is offered at small M only): pp64x128's, scaled by area
BLOCK_SCALE_KTILE_NS["pp64x192"] = BLOCK_SCALE_KTILE_NS["pp64x128"] * 192 / 128
# ... and the cooperative 128x128's store, from 4096x32768x512 (4 k-tiles per tile): 888 TFLOP/s over 63 steps of
# 8192 tiles leaves about 460 ns a tile beyond its k-tiles (the table's guess for it, 1730, picked pp64x128 there:
# 786 TFLOP/s). The other tiles keep the tables' estimates.
BLOCK_SCALE_EPILOGUE_NS = {"coop128x128": 460, "coop128x192": 690, "coop256x128": 920}   # the wider ones: by area
# Split counts offered with them: up to 4, which fills 132 SMs from 33 tiles (M = 64, N = 2112); more splits only
# add partial tiles to sum (split-K's fixup) where the memory model cannot tell them apart.
BLOCK_SCALE_SPLITS = (1, 2, 3, 4)
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
BLOCK_SCALE_TILES = (("cooperative", 256, 128), ("cooperative", 128, 192), ("pingpong", 64, 192),
                     ("cooperative", 128, 128), ("pingpong", 64, 128), ("cooperative", 128, 64), ("pingpong", 64, 64))
# Block N of 112 (DeepGEMM's example of a width that fills the SMs): N = 7168 is 64 such tiles, so 2 splits make
# 128 units on 132 SMs where 128-wide tiles make 112. Two product sets with a second B block (7 promotion copies).
# For `tune` only, with clusters and splits: beside the selection's picks on DeepGEMM's six N = 7168 shapes (H100,
# kernel durations, bench_h100_fp8_block_issue24_wide112_variants.json) they ran at most even (128x7168x16384:
# coop128x112k2 576 TFLOP/s, coop128x128k2 583; 64x7168x16384: pp64x112k2 319, pp64x128k2 321), so the selection
# keeps its tiles.
BLOCK_SCALE_TUNE_TILES = (("cooperative", 128, 112), ("pingpong", 64, 112))
WAVE_FILL_MARGIN = 0.05
# Split-K pays a fix-up the memory model prices low where the units are few: a pick that splits K yields to a
# candidate predicted within SPLIT_TIE_FRACTION of it that makes at least as many units with fewer splits (a narrower
# tile). Measured on the H200 beside both (bench_h200_training_explore_qwen.json, issue 47), weight gradients of
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
# bench_h200_issue47_r40-r53.json.gz: r48_explore48, two runs, burst, issue 47): 16384x128x896 coop256x128 (64 units) 18.3 / 17.8 us
# against pp64x128's (256) 16.4 / 15.8; 4096x1536x256 coop256x192 (128) 12.6 / 12.0 against pp128x128's (384)
# 11.8 / 11.0; 4096x896x128 coop256x128 (112) 8.8 / 8.0 against coop128x128's 8.4 / 7.8.
BUSY_TIE_DTYPES = SHORT_K_DTYPES
BUSY_TIE_MIN_M = 512

# The stream-K tail (GemmConfig.stream_k; ptxgemm/kernel/templates/streamk.ptx.j2). Whole units leave the last wave
# partly idle (4096x4096x14336 in cluster pairs: 256 units on 66 clusters, 3.88 waves timed as 4). A cooperative
# pick whose units are not a whole number of waves runs its last partial wave as k-tile shares when that saves at
# least SK_MIN_GAIN of its steps. The tail costs its shares' k-tiles plus a fix-up, counted as two fp32 partial
# tiles (one consumer pair's accumulators each) through L2 at SK_L2_BYTES_PER_NS per SM. That rate is measured, not
# a bandwidth: the trace put the whole fix-up (the partial's stores and release, the final's wait and adds, one more
# epilogue per share) at about 11 us per cluster at 4096^3 and at 4096x4096x14336 (H100, perf-notes issue 26 step
# 9), which 2 x 128 KiB at 24 B/ns gives; with it the model's gains came within 0.3 points of the measured ones on
# six shapes (6144^3 +1.1 against +1.1%, 8192^3 +2.2 against +2.2, 4096^3 -3.5 against -2.4). Shares need
# SK_MIN_K_TILES k-tiles per unit: short k-loops are memory-bound, where the wave's idle SMs cost nothing. And at
# least one full wave: with fewer units than clusters every unit is cut (all tail), which measured 12-16% slower
# than cuBLAS at 128 and 256 x 14336 x 4096 (H100, `sustained/streamk/bench_h100_issue26_streamk_smallm.json`)
# where the selection's picks had been at parity; splitting K for a small grid is split-K's job, which has its own
# candidates.
SK_MIN_GAIN = 0.005
# ... and the tail with a full wave (GemmConfig.sk_wave) where it beats the plain tail by SK_WAVE_MIN_GAIN: a thin tail
# whose shares the SK_MAX_SHARES floor keeps at a quarter unit on a few clusters (2 units of 64 k-tiles over 132
# clusters: 8 shares of 16 k-tiles, the other 124 clusters idle) is spread over every cluster as a unit and a k-tile
# or two each. Where the plain tail's shares already cover every cluster the two walks cost the same k-tiles, and
# the plain one, measured, stays.
SK_WAVE_MIN_GAIN = 0.02
# The ranking sees a cooperative candidate with its tail where its whole units take at most MAX_TAIL_RANKED_STEPS
# steps per SM: there the tail decides the time (4864x896x4096: 3 waves of 128x128 or 2 of 256x128, the tail a
# third of it). Longer grids are ranked by their whole units and get the tail after the ranking: ranked with their
# tails, 4096x14336x16384 (A M-major) and 16384x896x151936 moved to coop256x192 forms measured 2.5% slower than
# their picks (H200, run 40, perf-notes issue 47).
MAX_TAIL_RANKED_STEPS = 2
# The cooperative 128x128 tile is selectable on short grids only, of at most SHORT_GRID_MAX_STEPS steps of its whole
# units, where it is ranked with its tail and, as LATE_SELECTABLE, wins only by more than TIE_FRACTION. Its units
# are a quarter of 256x128's, so its tail and its last wave are finer; on longer grids the wider tiles' bytes per
# FLOP decide. Measured on the H200, burst, side by side (bench_h200_issue47_r40-r53.json.gz: r48_explore48, two runs; run 40 in
# bench_h200_issue47_r40-r53.json.gz): 1536x1536x4096 coop128x128skw 33.0 / 32.4 us against coop128x256sk's 36.2 /
# 35.5; 4864x896x4096 51.7 / 52.5 against coop256x128skw's 54.4 / 54.7; 896x896x16384 coop128x128sk 48.5 / 49.2
# against coop128x192sk's 50.7 / 52.9; but 4096x896x4864 (2 steps) coop128x128sk 56.1 against coop128x256's 53.0
# (the model keeps coop128x256 there), and on long grids 2-8% behind (4096x1536x8960 151.4 against coop256x192's
# 140.4; 4096x896x151936 1888 against coop256x128sk's 1617).
SHORT_GRID_TILES = ("coop128x128",)
SHORT_GRID_MAX_STEPS = 3
# ... and on products whose sides are both at least SHORT_GRID_MIN_SIDE, where it was measured (small M, 256 and 512
# rows, is the pingpong and split-K tiles' ground, as for SK_ALL_MIN_SIDE)
SHORT_GRID_MIN_SIDE = 768
# ... but a grid of fewer units than clusters, all of it run as the tail, on a product whose sides are both at least
# SK_ALL_MIN_SIDE and SK_ALL_MIN_K_TILES k-tiles per unit: the weight gradients of a small model's layers, dW = dY^T X with
# the tokens as K, whose few output tiles leave most SMs idle. Measured on the H200 beside split-K and the unsplit
# tiles (bench_h200_training_explore_*.json, issue 47): 1536x1536x4096 coop128x256sk 37.5 us against coop128x256's
# 45.4; the Qwen2-0.5B lm_head's dX (4096x896x151936, 112 units of 2374 k-tiles) coop256x128sk 1.50 ms against
# split-K 8's 2.59 (its 896 partial tiles of 128 KiB overflow the L2, which the split-K model does not see). At small
# M (the H100's 128 and 256 x 14336 x 4096; the H200's 256x1536x4096 and 128x896x4096) the tail lost to split-K
# pingpong tiles by 12-20%: a side that short is split-K's ground (its partial tiles are few and small).
SK_ALL_MIN_K_TILES = 32
# ... and shares of at least SK_ALL_MIN_SHARE k-tiles: a shorter share is mostly the launch's ramp and the fix-up.
# Measured on the H200 (run 40, perf-notes issue 47): 896x896x4096 all tail, shares of 17-24 k-tiles, ran
# 19.0-23.1 us in every cooperative tile against pp64x128's 16.0; 896x896x16384, shares of 68-96, 49.4-52.3 against
# split-K's 52.3.
SK_ALL_MIN_SHARE = 32
# Once the busiest CTA's loads were counted per share (predict), the H200's 512x4096x14336 took the all-tail form and
# ran coop128x256sk 90.7-91.7 us against pp128x128's 84.7 (runs 40-41): a side of 512 is short too.
SK_ALL_MIN_SIDE = 768
SK_L2_BYTES_PER_NS = 24.0
SK_MIN_K_TILES = 16
SK_DTYPES = ("bfloat16", "float16")   # measured with bf16 (docs/perf-notes.md, issue 26 step 9); fp8's k-tiles are
#                                       half as long, so its fix-up weighs twice as much, and is not measured

# The serpentine k-loop (GemmConfig.k_serpentine; scheduler.ptx.j2's k_direction): the walk's odd passes load K from
# its end, where the pass before them finished, so each wave begins on lines L2 still holds. Measured on cooperative
# bf16 picks (H100, perf-notes issue 26 step 12): DRAM reads 2-15% lower on square+LLM shapes, burst time unchanged,
# sustained +0.1 to +0.8% per shape beside the same config without it. It needs a pass to turn after (at least
# SERPENTINE_MIN_PASSES whole passes); pingpong and fp8 picks are not measured and keep the forward loop.
SERPENTINE_MIN_PASSES = 2
SERPENTINE_DTYPES = SK_DTYPES

# (schedule, block_m, block_n), each with every cluster shape in CLUSTER_SHAPES: what `tune` tries. Single-CTA
# tiles are also tried with every split-K count in SPLITS, and TRANSPOSED_TILES (the transposed store: swap-AB,
# C^T = B^T A^T with N filling the tile's rows and M its narrow columns) with every one.
CANDIDATE_TILES = (
    ("pingpong", 128, 128), ("pingpong", 128, 192), ("pingpong", 64, 256), ("pingpong", 64, 128),
    ("cooperative", 256, 128), ("cooperative", 128, 256), ("cooperative", 256, 192), ("cooperative", 128, 128),
    ("cooperative", 128, 192), ("cooperative", 128, 224),
    # tiles that are not whole 64-column panels, for shapes whose N they divide better (e.g. N = 4160 = 20 x 208)
    ("pingpong", 128, 160), ("cooperative", 128, 208), ("cooperative", 256, 160),
    # twice the tiles of pp64x128 where M is 64 or less: selectable only for fp8 at M <= FP8_NARROW_MAX_M (below)
    ("pingpong", 64, 64),
)
CLUSTER_SHAPES = ((1, 1), (2, 1), (1, 2))   # (cluster_m, cluster_n): single CTAs, pairs sharing B, pairs sharing A
SPLITS = (1, 2, 3, 4, 6, 8)
SPLIT_TILES = (("pingpong", 128, 128), ("pingpong", 64, 128), ("pingpong", 64, 256), ("cooperative", 128, 256),
               ("cooperative", 256, 128), ("pingpong", 64, 64))
TRANSPOSED_TILES = (("pingpong", 128, 16), ("pingpong", 128, 32), ("pingpong", 128, 64), ("pingpong", 64, 16),
                    ("pingpong", 64, 32), ("pingpong", 64, 64))


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

# Candidates a table has no measurement for (pairs along N, most pingpong pairs, tiles one GPU was not run with) are
# costed as their tile without a cluster, or else as the 128x128 pingpong scaled by tile area. None of these is
# SELECTABLE (the one selectable estimate, pp64x128 on the H100, is set explicitly above); they only give `tune` a
# prediction to print beside its measurement.
def _fill_unmeasured(ktile_ns: dict, epilogue_ns: dict) -> None:
    for sched, block_m, block_n in CANDIDATE_TILES + BLOCK_SCALE_TILES:
        base = f"{TAG_SCHEDULE[sched]}{block_m}x{block_n}"
        if base not in ktile_ns:
            area = block_m * block_n / (128 * 128)
            ktile_ns[base], epilogue_ns[base] = ktile_ns["pp128x128"] * area, epilogue_ns["pp128x128"] * area
        for cluster_m, cluster_n in CLUSTER_SHAPES:
            try:
                tag = GemmConfig(schedule=sched, block_m=block_m, block_n=block_n, cluster_m=cluster_m,
                                 cluster_n=cluster_n).tag
            except ConfigError:
                continue  # a tile this cluster cannot split
            ktile_ns.setdefault(tag, ktile_ns[base])
            epilogue_ns.setdefault(tag, epilogue_ns[base])


def _fill_transposed(ktile_ns: dict, epilogue_ns: dict) -> None:
    """Transposed tiles not measured: the 128x128 pingpong scaled by tile area (the memory model decides them)."""
    for sched, block_m, block_n in TRANSPOSED_TILES:
        tag = f"{TAG_SCHEDULE[sched]}{block_m}x{block_n}t"
        area = block_m * block_n / (128 * 128)
        ktile_ns.setdefault(tag, ktile_ns["pp128x128"] * area)
        epilogue_ns.setdefault(tag, epilogue_ns["pp128x128"] * area)


for _tables in ((KTILE_NS, EPILOGUE_NS), (KTILE_NS_H200, EPILOGUE_NS_H200)):
    _fill_unmeasured(*_tables)
    _fill_transposed(*_tables)


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
    memory_bound: bool = False   # the memory model's time exceeds the compute model's
    padded_area: int = 0         # output elements the tiles compute, padding included (every problem's)
    wave_fill: float = 1.0       # units / (steps x clusters): how full the busiest CTA's steps keep the grid
    busy_ctas: int = 0           # CTAs with work in the first step (min(units, clusters) x the cluster's CTAs)

    def row(self, tag: str | None = None) -> dict:
        """The table row; `tag`: the config's tag where the selection adds what the model does not time."""
        return {"tag": tag or self.tag, "tiles": f"{self.tiles_m}x{self.tiles_n}", "k_tiles": self.k_tiles,
                "steps_per_cta": self.steps, "predicted_us": self.total_ns / 1e3}


def tables(gpu_name: str = "") -> tuple[dict, dict]:
    """(KTILE_NS, EPILOGUE_NS) for a GPU: the GPU_TABLES entry whose key its name contains, else the H100's."""
    return next((t for key, t in GPU_TABLES.items() if key in gpu_name), (KTILE_NS, EPILOGUE_NS))


def predict(config: GemmConfig, m: int, n: int, k: int, sm_count: int, gpu_name: str = "",
            batches: int = 1) -> Prediction:
    """The model's time for `config` on `batches` (m, n, k) problems in one launch and `sm_count` SMs of GPU
    `gpu_name` (see the module docstring): the longer of the compute model and the memory model."""
    tile = config.tile_tag
    ktile_ns, epilogue_ns = tables(gpu_name)
    if tile not in ktile_ns or tile not in epilogue_ns:
        raise ConfigError(f"config: no measured cost for {tile!r} in ptxgemm.select.cost_model's tables; the model "
                          f"knows {sorted(ktile_ns)}")
    m, n, k = _kernel_mnk(config, m, n, k)
    sched = schedule.plan_for(config, m, n, k, sm_count, batches=batches)
    steps = steps_per_cta(sched)
    base_ns, epi_ns = ktile_ns[tile], epilogue_ns[tile]
    if config.block_scale:   # blockwise tiles have costs of their own (the promotion, their stage counts)
        bs_tag = f"{TAG_SCHEDULE[config.schedule]}{config.block_m}x{config.block_n}"
        base_ns, epi_ns = BLOCK_SCALE_KTILE_NS.get(bs_tag, base_ns), BLOCK_SCALE_EPILOGUE_NS.get(bs_tag, epi_ns)
    ktile = base_ns * misaligned_factor(config, m, n, k)   # m, n already the kernel's
    compute = model_ns(config.cooperative, steps, sched.k_tiles, ktile, epi_ns)
    if sched.sk_units:   # the stream-K tail: the busiest cluster's whole units and share, plus the fix-up
        compute *= sk_steps(config, sched, gpu_name) / steps
    if sched.splits > 1:
        compute += steps * fixup_ns(config, sched.splits, gpu_name)
    # the busiest CTA's loads: under the stream-K tail its whole units and its share, not whole steps (a share of a
    # unit and a k-tile or two loads half of what a third step would)
    loaded_steps = sched.sk_busiest_units if sched.sk_units else steps
    # the ring as the selection runs it (with_deep_ring): what bounds a CTA's load rate (cta_load_rate)
    memory = memory_ns(with_deep_ring(config), sched, loaded_steps, m, n, k, batches, gpu_name)
    total = combine(compute, memory, gpu_name)
    area = batches * sched.tiles_m * config.block_m * sched.tiles_n * config.block_n
    return Prediction(config.tag, sched.tiles_m, sched.tiles_n, sched.k_tiles, steps, sched.k_tiles * base_ns,
                      epi_ns, float(total), bool(memory > compute), area,
                      sched.waves / steps, min(sched.units, sched.clusters) * config.cluster_size)


def _kernel_mnk(config: GemmConfig, m: int, n: int, k: int) -> tuple[int, int, int]:
    """(m, n, k) of the problem the kernel runs: the transposed store runs C^T = B^T A^T."""
    return (n, m, k) if config.transposed_store else (m, n, k)


def _kernel_schedule(config: GemmConfig, m: int, n: int, k: int, sm_count: int, batches: int = 1):
    """The schedule `config`'s kernel walks for the caller's problem m x n x k (_kernel_mnk)."""
    return schedule.plan_for(config, *_kernel_mnk(config, m, n, k), sm_count, batches=batches)


def with_stream_k(config: GemmConfig, m: int, n: int, k: int, sm_count: int, gpu_name: str = "",
                  batches: int = 1) -> GemmConfig:
    """`config` with the stream-K tail where it can carry it and the model says it saves SK_MIN_GAIN of the
    busiest cluster's time (see SK_MIN_GAIN); else `config` itself."""
    if not config.cooperative or config.stream_k or config.split_k or config.in_dtype not in SK_DTYPES:
        return config
    try:
        sk = dataclasses.replace(config, stream_k=True)
    except ConfigError:
        return config      # a kernel the tail does not combine with (blockwise, a source tile, grouped, traced)
    m, n, k = _kernel_mnk(config, m, n, k)
    sched = schedule.plan_for(sk, m, n, k, sm_count, batches=batches)
    if not sched.sk_units or sched.k_tiles < SK_MIN_K_TILES:
        return config      # no tail, or a short loop
    if not sched.dp_units and (sched.k_tiles < SK_ALL_MIN_K_TILES or min(m, n) < SK_ALL_MIN_SIDE
                               or sched.sk_per < SK_ALL_MIN_SHARE):
        return config      # all tail (fewer units than clusters) on a small or short problem: split-K's ground
    best, best_steps = config, steps_per_cta(sched) * (1 - SK_MIN_GAIN)
    wave = dataclasses.replace(sk, sk_wave=True)
    wave_sched = schedule.plan_for(wave, m, n, k, sm_count, batches=batches)
    for form, form_sched in ((sk, sched), (wave, wave_sched)):
        if form.sk_wave and form_sched.sk_units == sched.sk_units:
            continue       # no full wave to fold in: the same walk as the plain tail
        steps = sk_steps(form, form_sched, gpu_name)
        if steps <= best_steps * (1 - SK_WAVE_MIN_GAIN if form.sk_wave else 1):
            best, best_steps = form, steps
    return best


def with_serpentine(config: GemmConfig, m: int, n: int, k: int, sm_count: int, batches: int = 1) -> GemmConfig:
    """`config` with the serpentine k-loop where it can carry it (a cooperative 16-bit pick without split-K) and
    its walk makes at least SERPENTINE_MIN_PASSES whole passes; else `config` itself."""
    if not config.cooperative or config.k_serpentine or config.split_k or config.in_dtype not in SERPENTINE_DTYPES:
        return config
    try:
        turned = dataclasses.replace(config, k_serpentine=True)
    except ConfigError:
        return config      # a kernel the backward loop does not combine with (blockwise, grouped)
    sched = _kernel_schedule(turned, m, n, k, sm_count, batches)
    return turned if sched.dp_units >= SERPENTINE_MIN_PASSES * sched.clusters else config


def with_deep_ring(config: GemmConfig) -> GemmConfig:
    """`config` with the deepest load ring shared memory holds where its tile is one of DEEP_RING_TILES (16-bit,
    no `stages` of its own); else `config` itself."""
    if (config.tile_tag not in DEEP_RING_TILES or config.stages is not None
            or config.in_dtype not in DEEP_RING_DTYPES or config.most_stages <= config.num_stages):
        return config
    return dataclasses.replace(config, stages=config.most_stages)


def sk_steps(config: GemmConfig, sched, gpu_name: str = "") -> float:
    """The busiest cluster's time under the stream-K tail, in units: its whole units, its share of the tail, and
    the fix-up (two partial tiles through L2 at SK_L2_BYTES_PER_NS)."""
    ktile_ns, epilogue_ns = tables(gpu_name)
    unit_ns = sched.k_tiles * ktile_ns[config.tile_tag] + epilogue_ns[config.tile_tag]
    return sched.sk_busiest_units + sk_fixup_ns(config) / unit_ns


def sk_fixup_ns(config: GemmConfig) -> float:
    """The stream-K fix-up's cost on the busiest cluster: two fp32 partial tiles (one consumer pair's accumulators
    each) through L2 at SK_L2_BYTES_PER_NS."""
    return 2 * config.consumers_per_tile * config.partial_bytes / SK_L2_BYTES_PER_NS


def sk_fixup_k_tiles(config: GemmConfig, gpu_name: str = "") -> int:
    """The fix-up's cost in k-tiles of `config`'s tile, rounded up: what the grouped kernel, which cuts its tail
    on the device (streamk.ptx.j2's split_on_device), weighs a share against a whole unit with."""
    ktile_ns, _ = tables(gpu_name)
    tile = config.tile_tag
    if tile not in ktile_ns:
        raise ConfigError(f"config: no measured k-tile cost for {tile!r} in ptxgemm.select.cost_model's tables, which "
                          f"the stream-K tail's split needs; the model knows {sorted(ktile_ns)}")
    return math.ceil(sk_fixup_ns(config) / ktile_ns[tile])


def steps_per_cta(sched) -> int:
    """Scheduler steps of the busiest CTA (cluster) of a ptxgemm.kernel.schedule.Schedule: the tiles it runs."""
    return math.ceil(sched.units / sched.clusters)


def model_ns(cooperative: bool, steps, k_tiles, ktile_ns, epilogue_ns):
    """The model's time from its terms; numbers or numpy arrays alike (`python -m ptxgemm fit tiles`, ptxgemm/select/fitting.py fits the costs with it).
    Cooperative: both consumers store every tile together. Pingpong: a consumer's epilogue runs under its peer's
    mainloop, so a step costs the longer of the two, and only the last tile's epilogue has nothing to hide under."""
    mainloop = k_tiles * ktile_ns
    if cooperative:
        return steps * (mainloop + epilogue_ns)
    return steps * np.maximum(mainloop, epilogue_ns) + epilogue_ns


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
                    misaligned_factor(c, *_kernel_mnk(c, problem.m, problem.n, problem.k)), order)
        return (0, 0, order, c.splits, 0, 0)

    pairs += fillers
    return _narrow_fewest_splits(_fewer_splits_first(sorted(pairs, key=rank)), sm_count)


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


def blockwise_candidates(problem: Problem) -> list[GemmConfig]:
    """The configs that can carry blockwise scaling for this problem's dtypes and layouts (without the epilogue
    fields yet): BLOCK_SCALE_TILES and BLOCK_SCALE_TUNE_TILES x CLUSTER_SHAPES, each single-CTA tile with every
    split count, and the swap-AB BLOCK_SCALE_TRANSPOSED_TILES with every split count (the selection passes over
    the 112-wide tiles and offers one swap-AB tile: BLOCK_SCALE_SWAP_TILE)."""
    tiles = BLOCK_SCALE_TILES + BLOCK_SCALE_TUNE_TILES
    return list(_candidates_for(tiles, CLUSTER_SHAPES, tiles, BLOCK_SCALE_TRANSPOSED_TILES, BLOCK_SCALE_SPLITS,
                                *problem.config_fields().values()))


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
        turned = with_deep_ring(with_serpentine(tail, m, n, k, device.sm_count, batches))
        yield with_band(turned, lambda c: _kernel_schedule(c, m, n, k, device.sm_count, batches)), "cost model"


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
        turned = with_deep_ring(with_serpentine(tail, m, n, k, device.sm_count))
        turned = with_band(turned, lambda c: _kernel_schedule(c, m, n, k, device.sm_count))
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
