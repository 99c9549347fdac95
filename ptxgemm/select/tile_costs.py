"""Per-SM costs of each tile, in ns, keyed by GemmConfig.tag: the measured tables, and how the tiles without a
measurement are costed. The cost model (ptxgemm.select.predict) times a config with them; `python -m ptxgemm fit
tiles` (ptxgemm/select/fitting.py) refits them from device data, and the selection follows.
"""
from __future__ import annotations

from ..errors import ConfigError
from ..kernel.config import GemmConfig
from ..kernel.tile import TAG_SCHEDULE
from .tiles import BLOCK_SCALE_TILES, CANDIDATE_TILES, CLUSTER_SHAPES, TRANSPOSED_TILES, WHOLE_N_WIDER

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
# training set with 17 variants side by side (docs/results/h200/bench/bench_h200_training_explore_*.json.gz, 45 GEMMs of
# Qwen2-0.5B, Qwen2-1.5B and Llama-3-8B widths at 4096 tokens; RMS log error 7%). The same fit gave the tables'
# tiles within 1-8% of their entries above (coop128x256 709, coop256x128 710, coop128x128 370, pp128x128 374). Its
# 96 tiles fill 1536x1536 where 128x256's 72 leave 60 SMs idle: the Qwen2-1.5B weight gradient dW = dY^T X (1536 x
# 1536 x 4096) ran 36.8 us against coop128x256's 45.4. The H100 has no measurement: the H200's, scaled by the two
# GPUs' coop128x256 entries (657 / 685 and 2260 / 1600).
KTILE_NS_H200["coop128x192"], EPILOGUE_NS_H200["coop128x192"] = 538, 1420
KTILE_NS["coop128x192"], EPILOGUE_NS["coop128x192"] = 516, 2010
# The cooperative 128x224 tile (issue 47): N = 896 (Qwen2-0.5B's width) in four whole tiles where 128x256 pads it by
# an eighth. Its costs are the 128x256 tile's scaled by area (224 / 256), which its times fit within 1-5% (H200, run
# 52, docs/results/h200/bench/bench_h200_issue47_r40-r119.json.gz: r52_explore52: 4096x896x4864 48.0 us against coop128x256's 52.3,
# 16384x896x4864 182.8-191.5 against 201.6-207.6, 4096x896x896 14.6-14.8 against the pick's 15.6-15.8).
W224_AREA = 224 / WHOLE_N_WIDER
KTILE_NS_H200["coop128x224"], EPILOGUE_NS_H200["coop128x224"] = (round(KTILE_NS_H200["coop128x256"] * W224_AREA),
                                                                round(EPILOGUE_NS_H200["coop128x256"] * W224_AREA))
KTILE_NS["coop128x224"], EPILOGUE_NS["coop128x224"] = (round(KTILE_NS["coop128x256"] * W224_AREA),
                                                      round(EPILOGUE_NS["coop128x256"] * W224_AREA))
GPU_TABLES = {"H200": (KTILE_NS_H200, EPILOGUE_NS_H200)}

# The blockwise tiles (tiles.BLOCK_SCALE_TILES) have k-tile costs of their own (the promotion, their stage counts).
# The k-tile costs (ns per SM), from the H100 at 4096x7168x16384 (118 k-tiles per tile, so the store hardly counts):
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

# Candidates a table has no measurement for (pairs along N, most pingpong pairs, tiles one GPU was not run with) are
# costed as their tile without a cluster, or else as the 128x128 pingpong scaled by tile area. None of these is
# cost_model.SELECTABLE (the one selectable estimate, pp64x128 on the H100, is set explicitly above); they only give `tune` a
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


def tables(gpu_name: str = "") -> tuple[dict, dict]:
    """(KTILE_NS, EPILOGUE_NS) for a GPU: the GPU_TABLES entry whose key its name contains, else the H100's."""
    return next((t for key, t in GPU_TABLES.items() if key in gpu_name), (KTILE_NS, EPILOGUE_NS))

