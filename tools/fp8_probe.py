"""FP8 e4m3 -> bf16 against torch._scaled_mm (per-tensor scales of 1.0), side by side in one process with
ptxgemm.timing's method (L2 flushed before each launch, CUDA events, interleaved rounds, median), and bf16 ptxgemm
for scale. A first look for issue 12 before `bench --in-dtype` exists; also reports each result's error against
a float64 reference on sampled rows, as a multiple of sum|ab| (what accuracy.FP8_ACCUMULATION_UNIT bounds).

    PYTHONPATH=. python tools/fp8_probe.py --shapes 8192x8192x8192,4096x4096x4096 --json out.json
"""
from __future__ import annotations

import argparse
import json

import ml_dtypes
import numpy as np

import ptxgemm
from ptxgemm import bench, driver
from ptxgemm.timing import time_interleaved

ROWS = 64


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="8192x8192x8192")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--json", required=True)
    args = p.parse_args()
    import torch

    rows = []
    for m, n, k in bench.parse_shapes(args.shapes):
        rng = np.random.default_rng(0)
        a = rng.standard_normal((m, k), dtype=np.float32).astype(ml_dtypes.float8_e4m3fn)
        b = np.asfortranarray(rng.standard_normal((k, n), dtype=np.float32).astype(ml_dtypes.float8_e4m3fn))
        da, db = ptxgemm.to_device(a), ptxgemm.to_device(b)
        out = ptxgemm.DeviceArray.empty((m, n), ml_dtypes.bfloat16)
        plan = ptxgemm.GemmPlan(da, db, out)
        ta = torch.from_numpy(a.view(np.uint8)).cuda().view(torch.float8_e4m3fn)
        tb = torch.from_numpy(np.ascontiguousarray(b.T).view(np.uint8)).cuda().view(torch.float8_e4m3fn).t()
        one = torch.ones((), dtype=torch.float32, device="cuda")
        tout = torch._scaled_mm(ta, tb, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        a16, b16 = a.astype(ml_dtypes.bfloat16), np.asfortranarray(b.astype(ml_dtypes.bfloat16))
        d16a, d16b = ptxgemm.to_device(a16), ptxgemm.to_device(np.ascontiguousarray(b16))
        out16 = ptxgemm.DeviceArray.empty((m, n), ml_dtypes.bfloat16)
        plan16 = ptxgemm.GemmPlan(d16a, d16b, out16)
        times = time_interleaved({"ptxgemm fp8": plan.launch,
                                  "torch._scaled_mm fp8": lambda: torch._scaled_mm(ta, tb, scale_a=one, scale_b=one,
                                                                                    out_dtype=torch.bfloat16),
                                  "ptxgemm bf16": plan16.launch}, args.rounds)
        plan.launch()
        driver.synchronize("the fp8 GEMM")
        sel = np.random.default_rng(1).choice(m, min(ROWS, m), replace=False)
        ref = a[sel].astype(np.float64) @ b.astype(np.float64)
        absp = np.abs(a[sel].astype(np.float64)) @ np.abs(b.astype(np.float64))
        err = {"ptxgemm": float(np.max(np.abs(out.to_numpy()[sel].astype(np.float64) - ref) / absp)),
               "torch": float(np.max(np.abs(tout.float().cpu().numpy()[sel].astype(np.float64) - ref) / absp))}
        flops = 2.0 * m * n * k
        row = {"M": m, "N": n, "K": k, "config": plan.config.tag, "times_ms": times,
               "ratio_vs_scaled_mm": times["torch._scaled_mm fp8"] / times["ptxgemm fp8"],
               "fp8_over_bf16": times["ptxgemm bf16"] / times["ptxgemm fp8"],
               "max_err_over_abs_product": err}
        rows.append(row)
        print(f"{m}x{n}x{k} {plan.config.tag}: " + ", ".join(f"{key} {ms:.4f} ms ({flops / ms / 1e9:.0f} TFLOP/s)"
                                                          for key, ms in times.items())
              + f"; ratio {row['ratio_vs_scaled_mm']:.3f}; max err/sum|ab| {err}", flush=True)
    info = driver.device_info()
    with open(args.json, "w") as f:
        json.dump({"gpu": info.name, "rounds": args.rounds, "peer": f"torch {torch.__version__} _scaled_mm "
                   "(per-tensor scales 1.0)", "method": "ptxgemm.timing.time_interleaved", "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
