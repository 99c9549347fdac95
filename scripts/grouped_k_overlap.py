"""Experiment: DeepSeek-V3 weight gradients split by K into heavy and light groups, run as two grouped launches
concurrently on disjoint CTA budgets, against the one combined launch. Burst: L2 flushed, events around.

    python3 scripts/grouped_k_overlap.py OUT.json   (H100: docs/results/h100/grouped/k_order/overlap_h100.json)
"""
import json
import math
import sys

import torch

import ptxgemm
from ptxgemm.bench import grouped_bench, grouped_shapes
from ptxgemm.runtime import timing

out = {}
cases = {c.name: c for c in grouped_shapes.CASES}
for name in ("deepseek-v3-wgrad-gate-up", "deepseek-v3-wgrad-down"):
    case = cases[name]
    a, b, offs = grouped_bench._inputs(torch, case, "bfloat16")
    comb = ptxgemm.GroupedPlan(a, b, offs=offs)
    res = {}
    for thr in (3, 8):
        plans = {}
        for cls in ("heavy", "light"):   # the groups of at least `thr` k-tiles (block_k 64), and the rest
            gs = [g for g, c in enumerate(case.counts) if (math.ceil(c / 64) >= thr) == (cls == "heavy")]
            plans[cls] = (*grouped_bench.k_groups(torch, a, b, case, gs), len(gs))
        s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
        launchers = {"combined": comb.launch}
        hp = ptxgemm.GroupedPlan(plans["heavy"][0], plans["heavy"][1], offs=plans["heavy"][2])
        lp = ptxgemm.GroupedPlan(plans["light"][0], plans["light"][1], offs=plans["light"][2])
        print(hp.config.describe(), lp.config.describe(), flush=True)
        launchers["heavy alone"] = hp.launch
        launchers["light alone"] = lp.launch
        keep = [hp, lp]
        for ph in (33, 44, 55, 66, 77):
            h = ptxgemm.GroupedPlan(plans["heavy"][0], plans["heavy"][1], offs=plans["heavy"][2], ctas=ph,
                                    out=hp.out)
            l = ptxgemm.GroupedPlan(plans["light"][0], plans["light"][1], offs=plans["light"][2],
                                    ctas=132 - ph, out=lp.out)
            keep += [h, l]

            def both(h=h, l=l):
                main = torch.cuda.current_stream()
                s1.wait_stream(main); s2.wait_stream(main)
                h.launch(s1.cuda_stream); l.launch(s2.cuda_stream)
                main.wait_stream(s1); main.wait_stream(s2)
            launchers[f"concurrent heavy {ph} CTAs"] = both
        burst = timing.time_interleaved(launchers, 5)
        res[thr] = {"groups_heavy": plans["heavy"][3], **burst}
        print(name, thr, plans["heavy"][3], {k: round(v, 3) for k, v in burst.items()}, flush=True)
        del keep, launchers, hp, lp, h, l, plans
        torch.cuda.synchronize()
    out[name] = res
    del comb, a, b
    torch.cuda.empty_cache()
json.dump({"gpu": torch.cuda.get_device_name(), "method": "burst, L2 flushed, median of 5 rounds", "rows": out},
          open(sys.argv[1], "w"), indent=1)
