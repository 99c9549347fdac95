"""The memory model of the selection's cost model (ptxgemm.select.cost_model): what a launch's loads cost.

    memory_ns = latency_ns + max(DRAM bytes / dram_bytes_per_ns, the busiest CTA's loaded bytes / its load rate)

A launch streams its operands once from DRAM; no CTA loads faster than its rate (`cta_load_rate`: a few SMs cannot
draw the whole bandwidth, and a CTA's ring bounds what it keeps in flight); `combine` joins this time with the
compute model's; `fixup_ns` prices split-K's partial tiles through L2; `misaligned_factor` the L2 lines a k-tile
straddles. The constants are per GPU (MEMORY), fitted by `python -m ptxgemm fit memory` (ptxgemm/select/fitting.py).
"""
from __future__ import annotations

from ..kernel.config import GemmConfig

# The memory model's constants (memory_ns, fixup_ns), per GPU name substring.
# H100: fitted by `python -m ptxgemm fit memory` (Powell, least squares of the log error; RMS 12%) to
# docs/results/h100/select/bench_h100_issue11_explore.json, the
# small-M suite with 23 variants side by side (split-K, transposed and narrow tiles), together with the transposed
# tiles' KTILE_NS / EPILOGUE_NS below. latency_ns absorbs a launch's fixed costs (ramp-up, the first loads' latency,
# the last tile's epilogue); l2_sm_bytes_per_ns is split-K's partial traffic as one SM sees it.
MEMORY = {
    "H100": {"dram_bytes_per_ns": 2496, "sm_bytes_per_ns": 102, "l2_sm_bytes_per_ns": 16.2, "latency_ns": 10000,
             "overlap_p": 7.8},
    # H200: the H100's with DRAM scaled by the two GPUs' peak bandwidths (4.8 / 3.35 TB/s), and two terms of its own
    # (issue 47). sm_bytes_per_ns refitted: `fit memory` on the H200's small-M suite with the same 23 variants and
    # the 64x64 pingpong (run 48: docs/results/h200/bench/bench_h200_issue47_r40-r119.json.gz, r48_smallm_explore48)
    # put it at 115.5 B/ns (110-116 with the training rows and run 50's picks added; a trace of one SM streaming its k-loop read 136,
    # run 44). The H100's 102 had overcharged the narrower tiles' extra loads (1536x1536x4096: coop128x128skw 33.0 us
    # against the pick's 36.2). The fit's other constants are not taken: with them 14 picks at decode-sized M and
    # N <= 1024 moved to tiles measured 10-27% slower (run 50, docs/results/h200/bench/bench_h200_issue47_r40-r119.json.gz,
    # r50_ab50). load_latency_ns: a CTA's ring bounds its load rate (cta_load_rate), 1400 ns by the fit over
    # sm_bytes_per_ns and it together (RMS 17.7% to 17.6% on the bf16 runs, 6.9% to 6.2% on run 50's fp8 ones); it is
    # what keeps the 64x64 pingpong's 8-stage ring (128 KiB in flight: 64x4096x14336 fp8 unsplit 30.6 us against
    # split in two 26.0) from looking as fast as its deep ring (predict.DEEP_RING_TILES)
    "H200": {"dram_bytes_per_ns": 3576, "sm_bytes_per_ns": 115.5, "l2_sm_bytes_per_ns": 16.2, "latency_ns": 10000,
             "overlap_p": 7.8, "load_latency_ns": 1400},
}

# A dense operand whose lines are not whole 128-byte L2 lines (K or M/N not a multiple of 64 bf16 elements) makes
# every 128-byte TMA row straddle two L2 lines. Measured on the H100 (docs/results/h100/select/probe_h100_issue11_*.json): B
# row-major at N = 5000 slowed coop128x256 by 1.29x against the same B in 128-byte-padded lines, B's bytes being
# 2/3 of a stage; with a cluster pair multicasting B (each CTA loads half), nothing was lost. So a k-tile costs
# 1 + MISALIGNED_COST x (the share of the stage's bytes this CTA loads itself from misaligned lines).
MISALIGNED_COST = 0.43
LINE_BYTES = 128


def misaligned_factor(config: GemmConfig, m: int, n: int, k: int) -> float:
    """The k-tile cost multiplier for operands with lines not 128-byte aligned (the kernel's problem: m, n after any
    swap), assuming dense operands: a K-major line holds K elements, an MN-major one M (A) or N (B)."""
    item = config.in_itemsize
    a_line = (k if config.a_major == "k" else m) * item
    b_line = (k if config.b_major == "k" else n) * item
    share = 0.0
    if a_line % LINE_BYTES:
        share += config.a_stage_bytes / config.cluster_n / config.stage_bytes
    if b_line % LINE_BYTES:
        share += config.b_stage_bytes / config.cluster_m / config.stage_bytes
    return 1.0 + MISALIGNED_COST * share


def combine(compute_ns, memory_ns_, gpu_name: str = ""):
    """The two models' times as one: a smooth maximum, (compute^p + memory^p)^(1/p). The larger one dominates, but
    a candidate's compute still counts where the memory model ties many of them (small M, where every tile streams
    the same B)."""
    p = bandwidths(gpu_name)["overlap_p"]
    return (compute_ns ** p + memory_ns_ ** p) ** (1.0 / p)


def bandwidths(gpu_name: str = "") -> dict:
    """The memory model's constants for a GPU (MEMORY's entry whose key its name contains, else the H100's)."""
    return next((v for key, v in MEMORY.items() if key in gpu_name), MEMORY["H100"])


def memory_ns(config: GemmConfig, sched, steps: float, m: int, n: int, k: int, batches: int, gpu_name: str = ""):
    """The memory model: a launch streams its operands once from DRAM at dram_bytes_per_ns, and no CTA loads faster
    than sm_bytes_per_ns (a few SMs cannot draw the whole bandwidth). A CTA loads, per k-tile, the rows of its A
    and B boxes that lie inside the matrix (TMA fills the rest with zeros without reading memory)."""
    bw = bandwidths(gpu_name)
    dram = batches * ((m * k + k * n) * config.in_itemsize + m * n * config.out_itemsize)
    rows = min(config.block_m, m) + min(config.block_n, n)
    cta = steps * sched.k_tiles * rows * config.block_k * config.in_itemsize
    return bw["latency_ns"] + max(dram / bw["dram_bytes_per_ns"], cta / cta_load_rate(config, gpu_name))


def cta_load_rate(config: GemmConfig, gpu_name: str = "") -> float:
    """Bytes per ns one CTA loads: sm_bytes_per_ns, or less where its ring (`config` as it runs: the selection
    passes its deep ring, predict.with_deep_ring) keeps fewer bytes in flight than that rate needs over
    load_latency_ns (Little's law; a GPU without load_latency_ns in MEMORY: no such bound)."""
    bw = bandwidths(gpu_name)
    latency = bw.get("load_latency_ns")
    if not latency or config.transposed_store:
        return bw["sm_bytes_per_ns"]
    return min(bw["sm_bytes_per_ns"], config.num_stages * config.stage_bytes / latency)


def fixup_ns(config: GemmConfig, splits: int, gpu_name: str = ""):
    """Split-K's cost per unit: a partial tile written, and (spread over the splits) the final's reads of the
    others, through L2 at l2_sm_bytes_per_ns per SM."""
    bw = bandwidths(gpu_name)
    return config.consumers_per_tile * config.partial_bytes * 2 / bw["l2_sm_bytes_per_ns"]
