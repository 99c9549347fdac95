"""Experiment: batched GEMMs with a k-loop of one or two k-tiles (the k form's light units) by dense schedule and
tile: which runs the most output per second. Burst, L2 flushed, median of 5. A and B MN-major as in the k form.

    python3 scripts/batched_tiny_k.py OUT.json   (H100: docs/results/h100/grouped/k_order/tiny_k_batched_h100.json)
"""
import json
import sys

import torch

import ptxgemm
from ptxgemm.runtime import timing

rows = []
B, M, N = 64, 7168, 4096
for K in (64, 128):
    gen = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(B, K, M, device="cuda", dtype=torch.bfloat16, generator=gen)
    dy = torch.randn(B, K, N, device="cuda", dtype=torch.bfloat16, generator=gen)
    a = x.transpose(1, 2)                      # (B, M, K), M contiguous
    out = torch.empty(B, M, N, device="cuda", dtype=torch.bfloat16)
    launchers, plans = {}, {}
    for tag in ("coop128x256", "coop128x128", "coop256x128", "pp128x128", "pp64x256", "pp128x192", "pp64x128"):
        try:
            p = ptxgemm.GemmPlan(a, dy, out, ptxgemm.GemmConfig.from_tag(tag))
            plans[tag] = p
            launchers[tag] = p.launch
        except Exception as e:
            print(tag, "refused", str(e)[:200], flush=True)
    launchers["torch.bmm"] = lambda: torch.bmm(a, dy, out=out)
    launchers["fill_"] = lambda: out.fill_(1.0)
    t = timing.time_interleaved(launchers, 5)
    gb = B * M * N * 2 / 1e9
    for k, v in t.items():
        rows.append({"K": K, "impl": k, "ms": v, "TBps_out": gb / v, "config": plans[k].config.describe() if k in plans else k})
        print(K, k, round(v, 3), "ms", round(gb / v, 2), "TB/s of output", flush=True)
    del plans, launchers
json.dump({"gpu": torch.cuda.get_device_name(), "method": "burst, L2 flushed, median of 5", "batch": B, "M": M,
           "N": N, "rows": rows}, open(sys.argv[1], "w"), indent=1)
