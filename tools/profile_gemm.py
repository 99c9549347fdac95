#!/usr/bin/env python3
"""Launch ptxgemm and cuBLAS (torch.matmul) a few times each on one shape, for a profiler to capture.

    ncu --kernel-name regex:'gemm_pingpong|sm90|nvjet|cutlass' --launch-skip 2 --launch-count 2 \\
        --metrics <...> python tools/profile_gemm.py --shape 8192x8192x8192

Each implementation runs `--launches` times (the first ones warm up); inputs are random bf16, B row-major.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="8192x8192x8192")
    p.add_argument("--launches", type=int, default=3)
    p.add_argument("--config", default="128x128")
    args = p.parse_args()
    m, n, k = (int(v) for v in args.shape.split("x"))

    import ml_dtypes
    import torch

    import ptxgemm
    from ptxgemm import DeviceArray
    from ptxgemm.runtime import driver
    from ptxgemm.bench.suite import parse_tag

    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n), dtype=np.float32).astype(ml_dtypes.bfloat16)
    plan = ptxgemm.GemmPlan(ptxgemm.to_device(a), ptxgemm.to_device(b), DeviceArray.empty((m, n), a.dtype),
                            parse_tag(args.config))
    for _ in range(args.launches):
        plan.launch()
    driver.synchronize()
    ta = torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16).cuda()
    tb = torch.from_numpy(b.view(np.uint16)).view(torch.bfloat16).cuda()
    for _ in range(args.launches):
        torch.matmul(ta, tb)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
