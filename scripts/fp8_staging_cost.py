"""What an fp8 operand that is not K-major costs: fp8 wgmma reads both operands K-major only, so a C-ordered (K, N)
B is staged K-major by one transposing relayout copy before the GEMM (ptxgemm.plan.operands, k_major). Times, side by
side with ptxgemm.runtime.timing's method (L2 flushed before each launch, CUDA events, interleaved rounds, median): the
plan with B K-major (in place), the plan with B row-major (copy + GEMM), and the copy alone.

    PYTHONPATH=. python scripts/fp8_staging_cost.py --shapes 8192x8192x8192,4096x14336x4096 --json out.json
"""
from __future__ import annotations

import argparse
import json

import ml_dtypes
import numpy as np

import ptxgemm
from ptxgemm.bench import suite as bench
from ptxgemm.runtime import driver
from ptxgemm.runtime.timing import time_interleaved


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="8192x8192x8192,4096x14336x4096,4096x4096x14336")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--json", required=True)
    args = p.parse_args()
    rows = []
    for m, n, k in bench.parse_shapes(args.shapes):
        rng = np.random.default_rng(0)
        a = rng.standard_normal((m, k), dtype=np.float32).astype(ml_dtypes.float8_e4m3fn)
        b = rng.standard_normal((k, n), dtype=np.float32).astype(ml_dtypes.float8_e4m3fn)
        da, db_rows, db_cols = ptxgemm.to_device(a), ptxgemm.to_device(b), ptxgemm.to_device(np.asfortranarray(b))
        out = ptxgemm.DeviceArray.empty((m, n), ml_dtypes.bfloat16)
        in_place = ptxgemm.GemmPlan(da, db_cols, out)
        staged = ptxgemm.GemmPlan(da, db_rows, out)
        assert staged.layout.b.staged and not in_place.layout.b.staged, staged.layout.describe()
        copy = staged._steps[0]
        times = time_interleaved({"B K-major (in place)": in_place.launch, "B row-major (staged)": staged.launch,
                                  "the transposing copy": lambda: copy(None)}, args.rounds)
        row = {"M": m, "N": n, "K": k, "config": in_place.config.tag, "times_ms": times,
               "staging_overhead": times["B row-major (staged)"] / times["B K-major (in place)"] - 1,
               "copy_GBps": 2 * k * n / times["the transposing copy"] / 1e6}
        rows.append(row)
        print(f"{m}x{n}x{k}: " + ", ".join(f"{key} {ms:.4f} ms" for key, ms in times.items())
              + f"; staged +{100 * row['staging_overhead']:.1f}%, copy {row['copy_GBps']:.0f} GB/s", flush=True)
    with open(args.json, "w") as f:
        json.dump({"gpu": driver.device_info().name, "rounds": args.rounds,
                   "method": "ptxgemm.runtime.timing.time_interleaved", "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
