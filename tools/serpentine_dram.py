#!/usr/bin/env python3
"""Launch ptxgemm configs on a few shapes, once each in a fixed order, for ncu to count their DRAM reads.

Issue 26 step 12 (GemmConfig.k_serpentine): does running the walk's odd passes backward in K cut a large GEMM's DRAM
reads as an LRU model of a ~25 MB L2 says (devrun model in docs/perf-notes.md)? One process, every kernel in order:

    ncu --kernel-name regex:gemm_ --metrics dram__bytes_read.sum,gpu__time_duration.sum --csv --page raw \\
        python3 tools/serpentine_dram.py --shapes 8192x8192x8192,4096x4096x14336 --configs sel,selz

`--configs`: tags, or `sel` (the selection's pick) and `selz` (the same with k_serpentine). The script prints one
line per launch, `launch <i> <shape> <tag>`, in the order ncu sees them. Inputs are random bf16, B row-major.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys

import numpy as np


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="8192x8192x8192")
    p.add_argument("--configs", default="sel,selz")
    args = p.parse_args()

    import ml_dtypes

    import ptxgemm
    from ptxgemm import DeviceArray
    from ptxgemm.bench.suite import parse_tag
    from ptxgemm.runtime import driver

    rng = np.random.default_rng(0)
    i = 0
    for shape in args.shapes.split(","):
        m, n, k = (int(v) for v in shape.split("x"))
        a = rng.standard_normal((m, k), dtype=np.float32).astype(ml_dtypes.bfloat16)
        b = rng.standard_normal((k, n), dtype=np.float32).astype(ml_dtypes.bfloat16)
        da, db, out = ptxgemm.to_device(a), ptxgemm.to_device(b), DeviceArray.empty((m, n), a.dtype)
        picked = ptxgemm.GemmPlan(da, db, out).config
        for spec in args.configs.split(","):
            if spec in ("sel", "selz"):
                cfg = dataclasses.replace(picked, k_serpentine=spec == "selz")
            else:
                cfg = parse_tag(spec)
            plan = ptxgemm.GemmPlan(da, db, out, cfg)
            plan.launch()
            driver.synchronize()
            print(f"launch {i} {shape} {plan.config.tag}", flush=True)
            i += 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
