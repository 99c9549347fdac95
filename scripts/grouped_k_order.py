"""Experiment: the k form's group order. The same DeepSeek-V3 weight gradients with the groups (their K ranges of x
and dy) permuted on the host, so the kernel's walk meets them in another order. Burst, L2 flushed, median of 5.

    python3 scripts/grouped_k_order.py OUT.json   (H100: docs/results/h100/grouped/k_order/host_order_h100_r{1,2}.json)
"""
import json
import math
import sys

import torch

import ptxgemm
from ptxgemm.bench import grouped_bench, grouped_shapes
from ptxgemm.runtime import timing

res = {}
cases = {c.name: c for c in grouped_shapes.CASES}
for name in ("deepseek-v3-wgrad-gate-up", "deepseek-v3-wgrad-down", "mixtral-8x7b-wgrad-up"):
    case = cases[name]
    a, b, _ = grouped_bench._inputs(torch, case, "bfloat16")
    G = case.groups
    kt = [math.ceil(c / 64) for c in case.counts]     # the k-tiles of the k form's tiles (block_k 64)
    orders = {"given": list(range(G)),
              "k descending": sorted(range(G), key=lambda g: (-kt[g], g)),
              "k ascending": sorted(range(G), key=lambda g: (kt[g], g)),
              "heavy (>=3 k-tiles) first": sorted(range(G), key=lambda g: (kt[g] < 3, g)),
              "log2 buckets descending": sorted(range(G), key=lambda g: (-(kt[g].bit_length()), g))}
    out = torch.empty(G, case.m, case.n, device="cuda", dtype=torch.bfloat16)
    launchers, keep = {}, []
    for label, order in orders.items():
        xs_t, dys, offs = grouped_bench.k_groups(torch, a, b, case, order)
        p = ptxgemm.GroupedPlan(xs_t, dys, offs=offs, out=out)
        keep.append((xs_t, dys, offs, p))
        launchers[label] = p.launch
        if label == "given":
            launchers["torch._grouped_mm"] = lambda a=xs_t, b=dys, offs=offs: torch._grouped_mm(a, b, offs=offs)
    t = timing.time_interleaved(launchers, 5)
    res[name] = t
    print(name, keep[0][3].config.describe(), {k: round(v, 3) for k, v in t.items()}, flush=True)
    del keep, launchers, a, b, out
    torch.cuda.empty_cache()
json.dump({"gpu": torch.cuda.get_device_name(), "method": "burst, L2 flushed, median of 5 rounds", "rows": res},
          open(sys.argv[1], "w"), indent=1)
