"""Split-K's final split, lengthened: the 64x64 pingpong's split picks run their last split (the final) some k-tiles
longer than each partial (GemmConfig.split_lead), so its own k-loop runs while the partials store and publish theirs.

Why. Every split of a tile starts together and, evenly split, ends together; then each partial stores its fp32 tile
(~0.7 us) and raises the flag, and the final waits for that. Traced on the H200 (run 120, `python -m ptxgemm
trace`), the final's wait after its own k-loop, median: 1.09 us at per-tensor fp8 64x2112x7168 (pp64x64k2s13, a
9.4 us kernel) and 1.2 us at 128x896x16384 (pp64x64k3s13, 17.4 us). A final longer by that wait's worth of k-tiles
(about 0.16 us each on either tile) ends as its partials arrive, and each partial is shorter by the final's extra
over the number of splits.

Measured (run 121, NVIDIA H200, CUPTI kernel durations, L2 flushed before each launch, three rounds of 30; the
even split in brackets):
- per-tensor fp8 64x2112x7168, pp64x64k2s13: lead 3 9.36, 5 9.22, 7 9.15, **9 9.06**, 12 9.15 us (9.41);
  torch._scaled_mm 9.22;
- per-tensor fp8 128x2112x7168, the same tile: lead 3 9.98, 5 9.86, 7 9.76, **9 9.73**, 12 9.81 (10.10);
- bf16 dW 128x896x16384 (both MN-major), pp64x64k3s13: lead 4 17.36, **8 17.02**, 12 17.12, 16 17.39 (17.47);
  pp64x64k4s13 with lead 6 and 10: 18.03, 17.98 (18.34);
- bf16 dW 128x896x4096, pp64x64k3s13: lead 3 7.78, 6 7.71, 9 7.66 (7.95).
At the split counts run 121 did not time (run 124, one run of three rounds, the same method):
- bf16 256x896x4096, pp64x64k2s13 (16-bit in two splits): lead 4 8.45, **8 8.24**, 12 8.29 (8.42-8.51);
- bf16 128x128x16384, pp64x64k8s13: lead 4 9.55, 8 9.60, 12 10.22 (9.57-9.58): level, then worse;
- bf16 128x128x4096 (dW) pp64x64k8s13 and 128x256x1536 pp64x64k6s13 (short k-loops the two-lead floor excludes
  anyway): lead 4 level, lead 8 level or 2% worse.
Where it did not pay (so the rule leaves those tiles even): pp128x128k4 at 256x1536x16384, lead 3 30.45 and 9 31.23
against 30.22; pp64x128k3 at 128x2048x6144, lead 3-9 14.56-14.62 against 14.34; pp64x128k2 at 64x4096x4096 -1.2%
and pp128x16tk2 at 16x4096x14336 -0.7%, inside the runs' spread.

So the rule takes the 64x64 pingpong only, at the lead measured best per input width, at the split counts measured
(SPLIT_LEAD_SPLITS), and only where each partial keeps at least twice the lead (the measured rows had 2.5-10 times
it).
"""
from __future__ import annotations

import dataclasses

from ..kernel.config import GemmConfig

# The tile whose split picks take the lead: (schedule, block_m, block_n), single CTAs, untransposed.
SPLIT_LEAD_TILE = ("pingpong", 64, 64)
# The lead by the inputs' bytes per element: fp8's 128-deep k-tiles (best 9 of 3-12) and 16-bit's 64-deep (best 8
# of 4-16); both near the traced wait over one k-tile's time (1.1-1.2 us / 0.16 us).
SPLIT_LEAD_K_TILES = {1: 9, 2: 8}
# Each partial's k-tiles at least this many times the lead: the measured rows' partials held 2.5-10 leads.
SPLIT_LEAD_MIN_PARTIAL = 2
# The split counts where a lead paid, by the inputs' bytes per element: fp8 in two splits (the wave rule's), 16-bit in
# two, three and four. Six and eight splits (the 64x64 pingpong's picks at M <= 128 with long k-loops) ran level with
# a lead (run 124), so they stay even.
SPLIT_LEAD_SPLITS = {1: (2,), 2: (2, 3, 4)}


def with_split_lead(config: GemmConfig, k: int) -> GemmConfig:
    """`config` (a pick for a problem of depth `k`, the kernel's) with the final split lengthened where the rule
    above takes it: the 64x64 pingpong under split-K, no lead of its own, no blockwise scales; else `config`."""
    if ((config.schedule, config.block_m, config.block_n) != SPLIT_LEAD_TILE or not config.split_k
            or config.split_lead or config.block_scale or config.cluster_size > 1 or config.transposed_store):
        return config
    lead = SPLIT_LEAD_K_TILES.get(config.in_itemsize)
    k_tiles = -(-k // config.block_k)
    if (lead is None or config.splits not in SPLIT_LEAD_SPLITS[config.in_itemsize]
            or (k_tiles - lead) // config.splits < SPLIT_LEAD_MIN_PARTIAL * lead):
        return config
    return dataclasses.replace(config, split_lead=lead)
