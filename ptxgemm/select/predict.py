"""The cost model's time for one config on one problem (see ptxgemm.select.cost_model's docstring), and the forms of
a config the selection adds after its ranking and the model times: the stream-K tail (with_stream_k), the serpentine
k-loop (with_serpentine) and the deepest ring (with_deep_ring).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..errors import ConfigError
from ..kernel import schedule
from ..kernel.config import GemmConfig
from ..kernel.tile import TAG_SCHEDULE
from .memory_model import combine, fixup_ns, memory_ns, misaligned_factor
from .tile_costs import BLOCK_SCALE_EPILOGUE_NS, BLOCK_SCALE_KTILE_NS, tables

# The tiles the selection gives the deepest ring shared memory holds (with_deep_ring; kernel/layout.py, FILL_STAGES):
# 13 stages of the 64x64 pingpong keep 208 KiB in flight, as 8 of the 64x128's keep 192. Measured on the H200 beside
# 8 stages (run 49, bench_h200_issue47_r40-r119.json.gz: r49_explore49): 128x896x16384 pp64x64k3 20.2 us against
# 22.9, k2 22.6 against 26.6; 16384x128x896 unsplit 17.5-17.9 against 18.5-19.1; at 256x1536 with 4 and 6 splits
# (3-5 waves of units) it lost 8-10%, where the narrow rule (cost_model.NARROW_N_TILES) does not offer the tile.
DEEP_RING_TILES = ("pp64x64",)
DEEP_RING_DTYPES = ("bfloat16", "float16")   # measured with bf16; fp8 keeps its own rules (cost_model's FP8_*)

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
# A grid of fewer units than clusters runs all of it as the tail only on a product whose sides are both at least
# SK_ALL_MIN_SIDE and SK_ALL_MIN_K_TILES k-tiles per unit: the weight gradients of a small model's layers, dW = dY^T X with
# the tokens as K, whose few output tiles leave most SMs idle. Measured on the H200 beside split-K and the unsplit
# tiles (bench_h200_training_explore_*.json.gz, issue 47): 1536x1536x4096 coop128x256sk 37.5 us against coop128x256's
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



def predict(config: GemmConfig, m: int, n: int, k: int, sm_count: int, gpu_name: str = "",
            batches: int = 1) -> Prediction:
    """The model's time for `config` on `batches` (m, n, k) problems in one launch and `sm_count` SMs of GPU
    `gpu_name` (see the module docstring): the longer of the compute model and the memory model."""
    tile = config.tile_tag
    ktile_ns, epilogue_ns = tables(gpu_name)
    if tile not in ktile_ns or tile not in epilogue_ns:
        raise ConfigError(f"config: no measured cost for {tile!r} in ptxgemm.select.tile_costs' tables; the model "
                          f"knows {sorted(ktile_ns)}")
    m, n, k = kernel_mnk(config, m, n, k)
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


def kernel_mnk(config: GemmConfig, m: int, n: int, k: int) -> tuple[int, int, int]:
    """(m, n, k) of the problem the kernel runs: the transposed store runs C^T = B^T A^T."""
    return (n, m, k) if config.transposed_store else (m, n, k)


def kernel_schedule(config: GemmConfig, m: int, n: int, k: int, sm_count: int, batches: int = 1):
    """The schedule `config`'s kernel walks for the caller's problem m x n x k (kernel_mnk)."""
    return schedule.plan_for(config, *kernel_mnk(config, m, n, k), sm_count, batches=batches)


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
    m, n, k = kernel_mnk(config, m, n, k)
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
    sched = kernel_schedule(turned, m, n, k, sm_count, batches)
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
        raise ConfigError(f"config: no measured k-tile cost for {tile!r} in ptxgemm.select.tile_costs' tables, which "
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

