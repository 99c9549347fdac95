"""Launch one grouped benchmark case's kernels twice each, in order, for ncu (tools/device_grouped.sh ncu).

    python3 tools/profile_grouped.py --case deepseek-v3-wgrad-gate-up --impl coop128x256:nostore --impl coop128x256

--impl is a grouped tile tag (the plan's config from it), with ':nostore' for the same config with C's L2 store hint
off (GemmConfig.group_store_hint), or 'torch' for torch._grouped_mm on the same operands."""
import argparse
import dataclasses

import torch

import ptxgemm
from ptxgemm.bench import grouped_bench, grouped_shapes

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--case", default="deepseek-v3-wgrad-gate-up", choices=[c.name for c in grouped_shapes.CASES])
p.add_argument("--impl", action="append", required=True)
args = p.parse_args()
case = {c.name: c for c in grouped_shapes.CASES}[args.case]
a, b, counts = grouped_bench._inputs(torch, case, "bfloat16")
kw = {"masked_m" if case.layout == "masked" else "offs": counts}
for impl in args.impl:
    if impl == "torch":
        launch = lambda: torch._grouped_mm(a, b, offs=counts)   # noqa: E731
    else:
        tag, _, option = impl.partition(":")
        plan = ptxgemm.GroupedPlan(a, b, **kw, config=ptxgemm.GemmConfig.from_tag(tag))
        if option == "nostore":
            plan = ptxgemm.GroupedPlan(a, b, **kw, config=dataclasses.replace(plan.config, group_store_hint=False))
        print(impl, plan.config.describe(), flush=True)
        launch = plan.launch
    for _ in range(2):
        launch()
    torch.cuda.synchronize()
