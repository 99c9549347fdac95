"""A dense-sized problem as one group of the grouped kernel, C's L2 store hint off then on, two launches each, for
ncu (issue 26's DRAM question: does the output stream evict the operands of a dense GEMM?).

    ncu --kernel-name regex:gemm_grouped --launch-count 4 --metrics dram__bytes_read.sum,... \\
        python3 tools/profile_dense_as_group.py 16384x14336x4096 coop128x256c2

B is K-major (a transposed (1, N, K) array); the tile tag is the grouped config's."""
import dataclasses
import sys

import torch

import ptxgemm

m, n, k = (int(x) for x in sys.argv[1].split("x"))
a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
b = torch.randn(1, n, k, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
offs = torch.tensor([m], device="cuda", dtype=torch.int32)
base = ptxgemm.GroupedPlan(a, b, offs=offs, config=ptxgemm.GemmConfig.from_tag(sys.argv[2])).config
for hint in (False, True):
    plan = ptxgemm.GroupedPlan(a, b, offs=offs, config=dataclasses.replace(base, group_store_hint=hint))
    print(hint, plan.config.describe(), flush=True)
    for _ in range(2):
        plan.launch()
    torch.cuda.synchronize()
