"""Why B row-major (MN-major) at N = 5000 is slower than K-major: time one shape with B in several layouts, ptxgemm
and cuBLAS side by side (ptxgemm.runtime.timing's method), to separate the layout from the line alignment.

    PYTHONPATH=. python scripts/probe_b_layout.py --shape 3000x5000x2048 --json out.json [--variants coop128x256,...]

Layouts of B (K x N), each the same values:
  mn         numpy's C order: lines of N elements, N * 2 bytes apart (10000 B at N = 5000: 16 B past a 128 B line)
  mn-pad128  C order inside a wider array whose lines are rounded up to 128 bytes (N = 5000 -> 5056 elements)
  k          Fortran order: lines of K elements
"""
from __future__ import annotations

import argparse
import json

import ml_dtypes
import numpy as np

import ptxgemm
from ptxgemm import gemm
from ptxgemm.bench import suite as bench
from ptxgemm.kernel.config import GemmConfig
from ptxgemm.runtime import driver
from ptxgemm.runtime.timing import time_interleaved


def layouts(b: np.ndarray) -> dict[str, np.ndarray]:
    k, n = b.shape
    padded = np.zeros((k, -(-n // 64) * 64), b.dtype)
    padded[:, :n] = b
    return {"mn": b, "mn-pad128": padded[:, :n], "k": np.asfortranarray(b)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="3000x5000x2048")
    p.add_argument("--variants", default="", help="fixed ptxgemm config tags timed beside the selection")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--promotions", default="256B", help="L2 promotions of the operand maps to try, e.g. 256B,128B,none")
    p.add_argument("--layouts", default="mn,mn-pad128,k")
    p.add_argument("--json", required=True)
    args = p.parse_args()
    m, n, k = bench.parse_shapes(args.shape)[0]
    import torch

    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n), dtype=np.float32).astype(ml_dtypes.bfloat16)
    tags = [None] + [t for t in args.variants.split(",") if t]
    launchers, configs, keep = {}, {}, []
    da = ptxgemm.to_device(a)
    ta = bench.torch_bf16(torch, a)
    wanted = args.layouts.split(",")
    for name, bl in ((n_, v) for n_, v in layouts(b).items() if n_ in wanted):
        db = ptxgemm.to_device(bl)   # the span of memory it occupies, strides kept
        if name == "mn-pad128":      # torch would make a sliced view dense on the way: slice on the device
            tb = bench.torch_bf16(torch, bl.base)[:, :n]
        else:
            tb = bench.torch_bf16(torch, bl)
        assert tuple(s // 2 for s in bl.strides) == tuple(tb.stride()), (name, bl.strides, tb.stride())
        for tag, promo in ((t, p_) for t in tags for p_ in args.promotions.split(",")):
            gemm.LOAD_L2_PROMOTION = promo   # read when a plan encodes its maps
            out = ptxgemm.DeviceArray.empty((m, n), a.dtype)
            plan = ptxgemm.GemmPlan(da, db, out, GemmConfig.from_tag(tag) if tag else None)
            key = f"ptxgemm {name} {plan.config.tag} L2:{promo}" + ("" if tag else " (selected)")
            launchers[key], configs[key] = plan.launch, plan.config.describe()
            keep += [out, plan]
        tout = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
        launchers[f"cublas {name}"] = (lambda x, y, o: (lambda: torch.matmul(x, y, out=o)))(ta, tb, tout)
        keep += [db, tb, tout]
    times = time_interleaved(launchers, args.rounds)
    flops = 2.0 * m * n * k
    for key, ms in times.items():
        print(f"{key:<48} {ms:8.4f} ms {flops / ms / 1e9:7.1f} TFLOP/s")
    info = driver.device_info()
    with open(args.json, "w") as f:
        json.dump({"gpu": info.name, "shape": [m, n, k], "rounds": args.rounds, "times_ms": times,
                   "configs": configs, "method": "ptxgemm.runtime.timing.time_interleaved"}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
