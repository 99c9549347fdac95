"""Launch one grouped problem's kernels twice each, in order, for ncu: a grouped benchmark case
(scripts/device_grouped.sh ncu), or a dense-sized problem as one group (issue 26's DRAM question: does the output
stream evict the operands of a dense GEMM?).

    python3 scripts/profile_grouped.py --case deepseek-v3-wgrad-gate-up --impl coop128x256:nostore --impl coop128x256
    ncu --kernel-name regex:gemm_grouped --launch-count 4 --metrics dram__bytes_read.sum,... \\
        python3 scripts/profile_grouped.py --dense 16384x14336x4096 \\
        --impl coop128x256c2:nostore --impl coop128x256c2:store

--impl is a grouped tile tag (the plan's config from it), with ':nostore' or ':store' for the same config with C's L2
store hint off or on (GemmConfig.group_store_hint; without either, the form's default), or 'torch' for
torch._grouped_mm on the same operands. --dense MxNxK: one group of M rows, bf16, B K-major (a transposed
(1, N, K) array), in place of --case."""
import argparse
import dataclasses

import torch

import ptxgemm
from ptxgemm.bench import grouped_bench, grouped_shapes

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--case", default="deepseek-v3-wgrad-gate-up", choices=[c.name for c in grouped_shapes.CASES])
p.add_argument("--dense", metavar="MxNxK", help="one group of this dense size in place of --case")
p.add_argument("--impl", action="append", required=True)
args = p.parse_args()
if args.dense:
    m, n, k = (int(x) for x in args.dense.split("x"))
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(1, n, k, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    counts = torch.tensor([m], device="cuda", dtype=torch.int32)
    kw = {"offs": counts}
else:
    case = {c.name: c for c in grouped_shapes.CASES}[args.case]
    a, b, counts = grouped_bench._inputs(torch, case, "bfloat16")
    kw = {"masked_m" if case.layout == "masked" else "offs": counts}
for impl in args.impl:
    if impl == "torch":
        launch = lambda: torch._grouped_mm(a, b, offs=counts)   # noqa: E731
    else:
        tag, _, option = impl.partition(":")
        plan = ptxgemm.GroupedPlan(a, b, **kw, config=ptxgemm.GemmConfig.from_tag(tag))
        if option in ("nostore", "store"):
            hint = option == "store"
            plan = ptxgemm.GroupedPlan(a, b, **kw, config=dataclasses.replace(plan.config, group_store_hint=hint))
        print(impl, plan.config.describe(), flush=True)
        launch = plan.launch
    for _ in range(2):
        launch()
    torch.cuda.synchronize()
