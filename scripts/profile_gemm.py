#!/usr/bin/env python3
"""Launch ptxgemm configs (and cuBLAS) on a few shapes, in a fixed order, for a profiler to capture.

    ncu --kernel-name regex:'gemm_pingpong|sm90|nvjet|cutlass' --launch-skip 2 --launch-count 2 \\
        --metrics <...> python scripts/profile_gemm.py --shape 8192x8192x8192

Per shape (`--shape`, a comma-separated list), each config of `--config` (tags, or `sel`: the selection's pick, and
`selz`: the same with the serpentine k-loop) runs `--launches` times (the first ones warm up), then torch.matmul
as often unless `--no-cublas`. Each ptxgemm launch prints `launch <i> <shape> <tag>`, so a profile of many kernels
can be read in order, e.g. issue 26 step 12's DRAM reads with and without the serpentine k-loop:

    ncu --kernel-name regex:gemm_ --metrics dram__bytes_read.sum --csv --page raw python scripts/profile_gemm.py \\
        --shape 8192x8192x8192,4096x4096x14336 --config sel,selz --launches 1 --no-cublas

Inputs are random bf16, B row-major.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys

import numpy as np


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="8192x8192x8192")
    p.add_argument("--launches", type=int, default=3)
    p.add_argument("--config", default="128x128")
    p.add_argument("--no-cublas", action="store_true")
    args = p.parse_args()

    import ml_dtypes

    import ptxgemm
    from ptxgemm import DeviceArray
    from ptxgemm.bench.suite import parse_tag
    from ptxgemm.runtime import driver

    rng = np.random.default_rng(0)
    i = 0
    for shape in args.shape.split(","):
        m, n, k = (int(v) for v in shape.split("x"))
        a = rng.standard_normal((m, k), dtype=np.float32).astype(ml_dtypes.bfloat16)
        b = rng.standard_normal((k, n), dtype=np.float32).astype(ml_dtypes.bfloat16)
        da, db, out = ptxgemm.to_device(a), ptxgemm.to_device(b), DeviceArray.empty((m, n), a.dtype)
        picked = None
        for spec in args.config.split(","):
            if spec in ("sel", "selz"):
                picked = picked or ptxgemm.GemmPlan(da, db, out).config
                cfg = dataclasses.replace(picked, k_serpentine=spec == "selz")
            else:
                cfg = parse_tag(spec)
            plan = ptxgemm.GemmPlan(da, db, out, cfg)
            for _ in range(args.launches):
                plan.launch()
                driver.synchronize()
                print(f"launch {i} {shape} {plan.config.tag}", flush=True)
                i += 1
        if not args.no_cublas:
            import torch

            ta = torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16).cuda()
            tb = torch.from_numpy(b.view(np.uint16)).view(torch.bfloat16).cuda()
            for _ in range(args.launches):
                torch.matmul(ta, tb)
            torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
