#!/usr/bin/env python3
"""ptxgemm against cuBLAS, side by side in one process, one timing method for both.

Method (the same for every implementation, ptxgemm.timing): L2 flushed (a memset twice its size) before each
launch, CUDA events around the launch alone on the same stream, rounds interleaved between implementations (the
order alternating each round), median over rounds. Inputs are random bf16 (never zeros); A is row-major (M, K), B row-major (K, N),
as numpy gives them. The peer is cuBLAS through torch.matmul when torch is importable, else CuPy.

    python tools/bench.py                 # default shapes, table + JSON + PNG under --out
    python tools/bench.py --quick         # about a minute
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

K_SWEEP = (64, 128, 256, 512, 1024, 2048)
SEED_M, SEED_N = 8448, 9216  # 66 x 72 tiles of 128x128 = 36 waves of 132 SMs exactly
EXTRA_SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096), (4096, 4096, 14336),
                (512, 8192, 8192))
QUICK_SHAPES = ((SEED_M, SEED_N, 64), (SEED_M, SEED_N, 512), (SEED_M, SEED_N, 2048), (4096, 4096, 4096),
                (8192, 8192, 8192), (512, 8192, 8192))


def parse_variant(spec: str):
    """'128x192' or '128x128c2' (cluster of 2 along M, B multicast) -> GemmConfig."""
    import ptxgemm

    tile, _, cluster = spec.partition("c")
    bm, bn = (int(v) for v in tile.split("x"))
    return ptxgemm.GemmConfig(block_m=bm, block_n=bn, cluster_m=int(cluster or 1))


def default_shapes():
    return [(SEED_M, SEED_N, k) for k in K_SWEEP] + list(EXTRA_SHAPES)


# --------------------------------------------------------------------------------------------------------------
# Peers: each gives run(a_np, b_np) -> (launch(), result()) over device-resident copies of the same data
# --------------------------------------------------------------------------------------------------------------

class PtxgemmImpl:
    def __init__(self, config, name="ptxgemm"):
        self.config = config
        self.name = name

    def prepare(self, a, b, out_dtype):
        import ptxgemm
        from ptxgemm import DeviceArray

        self.out = DeviceArray.empty((a.shape[0], b.shape[1]), out_dtype)
        self.out.poison()
        self.plan = ptxgemm.GemmPlan(ptxgemm.to_device(a), ptxgemm.to_device(b), self.out, self.config)
        return self.plan.launch

    def result(self):
        return self.out.to_numpy()


class TorchImpl:
    name = "cublas (torch.matmul)"

    def __init__(self):
        import torch

        self.torch = torch

    def prepare(self, a, b, out_dtype):
        torch = self.torch
        ta = torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16).cuda()
        tb = torch.from_numpy(b.view(np.uint16)).view(torch.bfloat16).cuda()
        self.out = torch.full((a.shape[0], b.shape[1]), float("nan"), dtype=torch.bfloat16, device="cuda")
        out = self.out
        return lambda: torch.matmul(ta, tb, out=out)

    def result(self):
        import ml_dtypes

        return self.out.cpu().view(self.torch.uint16).numpy().view(ml_dtypes.bfloat16)


class CupyImpl:
    name = "cublas (cupy.matmul)"

    def __init__(self):
        import cupy

        self.cp = cupy

    def prepare(self, a, b, out_dtype):
        cp = self.cp
        # CuPy has no bf16 GEMM dtype; this peer runs fp16 inputs of the same values (same FLOPs and bytes).
        ca, cb = cp.asarray(a.astype(np.float16)), cp.asarray(b.astype(np.float16))
        self.out = cp.full((a.shape[0], b.shape[1]), cp.nan, dtype=cp.float16)
        out = self.out
        return lambda: cp.matmul(ca, cb, out=out)

    def result(self):
        return self.cp.asnumpy(self.out)


def find_peer():
    try:
        import torch

        if torch.cuda.is_available():
            return TorchImpl()
    except ImportError:
        pass
    try:
        return CupyImpl()
    except ImportError:
        return None


# --------------------------------------------------------------------------------------------------------------
# Measurement
# --------------------------------------------------------------------------------------------------------------

def float64_reference(a, b):
    """a @ b in float64, on the GPU through torch when it is there (the peer already needs it), else numpy."""
    try:
        import torch

        ta = torch.from_numpy(np.ascontiguousarray(a.astype(np.float64))).cuda()
        tb = torch.from_numpy(np.ascontiguousarray(b.astype(np.float64))).cuda()
        return (ta @ tb).cpu().numpy()
    except ImportError:
        return a.astype(np.float64) @ b.astype(np.float64)


def rel_err(out, ref):
    """‖out − ref‖ / ‖ref‖: a one-number summary for the table (correctness is the GPU tests' elementwise bound)."""
    denom = np.linalg.norm(ref)
    return float(np.linalg.norm(out.astype(np.float64) - ref) / (denom if denom else 1.0))


def read_clocks() -> dict:
    query = "clocks.sm,clocks.mem,clocks.max.sm,power.draw,temperature.gpu"
    try:
        text = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=10).stdout.strip().splitlines()[0]
        return dict(zip(query.split(","), (v.strip() for v in text.split(","))))
    except Exception as e:  # noqa: BLE001 - clocks are informative only
        return {"error": str(e)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer shapes and rounds (about a minute)")
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--shapes", default=None, help="MxNxK,MxNxK,... instead of the defaults")
    p.add_argument("--out", default="bench_out", help="directory for bench.json and bench.png")
    p.add_argument("--config", default="128x128", help="ptxgemm's tile: BMxBN, optionally cC for a cluster of C")
    p.add_argument("--variants", default="",
                   help="extra ptxgemm configs timed in the same rounds, e.g. 128x192,128x128c2 (reported per row)")
    args = p.parse_args(argv)

    import ml_dtypes

    from ptxgemm import driver
    from ptxgemm.timing import time_interleaved

    reason = driver.no_device_reason()
    if reason:
        print(f"bench: no GPU ({reason})", file=sys.stderr)
        return 2
    info = driver.device_info()
    if args.shapes:
        shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    else:
        shapes = list(QUICK_SHAPES) if args.quick else default_shapes()
    rounds = args.rounds or (7 if args.quick else 25)
    config = parse_variant(args.config)
    peer = find_peer()
    variants = [PtxgemmImpl(parse_variant(v), f"ptxgemm {v}") for v in filter(None, args.variants.split(","))]
    impls = [PtxgemmImpl(config)] + variants + ([peer] if peer else [])
    print(f"# {info.name}, {info.sm_count} SMs, driver {info.driver_version_str}; peer: "
          f"{peer.name if peer else 'none'}; {config.describe()}; {rounds} rounds, median", flush=True)

    rng = np.random.default_rng(0)
    rows = []
    header = (f"{'M':>6} {'N':>6} {'K':>6} | {'ptxgemm ms':>10} {'TFLOP/s':>8} | {'cuBLAS ms':>10} {'TFLOP/s':>8} | "
              f"{'ratio':>6} | {'rel_err':>9} {'cublas err':>10}")
    print(header)
    print("-" * len(header))
    print("(ratio = cuBLAS ms / ptxgemm ms: above 1, ptxgemm is faster)")
    for m, n, k in shapes:
        a = rng.standard_normal((m, k), dtype=np.float32).astype(ml_dtypes.bfloat16)
        b = rng.standard_normal((k, n), dtype=np.float32).astype(ml_dtypes.bfloat16)
        launchers = {impl.name: impl.prepare(a, b, np.dtype(ml_dtypes.bfloat16)) for impl in impls}
        times = time_interleaved(launchers, rounds, warmup=3)
        ref = float64_reference(a, b)
        errs = {impl.name: rel_err(impl.result(), ref) for impl in impls}
        flops = 2.0 * m * n * k
        ours = times["ptxgemm"]
        theirs = times.get(peer.name) if peer else None
        row = {"M": m, "N": n, "K": k, "ptxgemm_ms": ours, "cublas_ms": theirs, "rel_err": errs["ptxgemm"],
               "cublas_rel_err": errs.get(peer.name) if peer else None,
               "ptxgemm_tflops": flops / ours / 1e9, "cublas_tflops": flops / theirs / 1e9 if theirs else None,
               "variants": {v.name: {"ms": times[v.name], "rel_err": errs[v.name]} for v in variants}}
        rows.append(row)
        ratio = theirs / ours if theirs else float("nan")
        print(f"{m:>6} {n:>6} {k:>6} | {ours:>10.4f} {row['ptxgemm_tflops']:>8.1f} | "
              f"{(theirs or float('nan')):>10.4f} {(row['cublas_tflops'] or float('nan')):>8.1f} | "
              f"{ratio:>6.3f} | {row['rel_err']:>9.2e} {(row['cublas_rel_err'] or float('nan')):>10.2e}"
              + "".join(f" | {v.name}: {times[v.name]:.4f} ms ({(theirs or math.nan) / times[v.name]:.3f})"
                        for v in variants), flush=True)
        del launchers
        for impl in impls:
            impl.out = None
            if hasattr(impl, "plan"):
                impl.plan = None

    summary = {}
    if peer:
        ratios = [r["cublas_ms"] / r["ptxgemm_ms"] for r in rows]
        seed = [r["cublas_ms"] / r["ptxgemm_ms"] for r in rows if (r["M"], r["N"]) == (SEED_M, SEED_N)]
        summary = {"geomean_ratio": math.exp(statistics.fmean(math.log(x) for x in ratios)),
                   "min_ratio": min(ratios)}
        if seed:
            summary["seed_k_sweep_geomean_ratio"] = math.exp(statistics.fmean(math.log(x) for x in seed))
        print("-" * len(header))
        print(f"geomean ptxgemm/cuBLAS speed ratio: {summary['geomean_ratio']:.3f} (all shapes), "
              f"{summary.get('seed_k_sweep_geomean_ratio', float('nan')):.3f} (M={SEED_M}, N={SEED_N} K sweep); "
              f"min {summary['min_ratio']:.3f}")
    result = {"gpu": info.name, "driver": info.driver_version_str, "clocks": read_clocks(),
              "peer": peer.name if peer else None, "config": config.describe(), "rounds": rounds,
              "method": "L2 flushed before each launch, CUDA events around the launch, interleaved rounds, median",
              "date": time.strftime("%Y-%m-%d %H:%M:%S"), "summary": summary, "rows": rows}
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "bench.json").write_text(json.dumps(result, indent=1))
    plot(rows, out_dir / "bench.png", info.name)
    print(f"wrote {out_dir / 'bench.json'} and {out_dir / 'bench.png'}")
    return 0


def plot(rows, path: Path, gpu: str):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot", file=sys.stderr)
        return
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.5))
    sweep = [r for r in rows if (r["M"], r["N"]) == (SEED_M, SEED_N)]
    other = [r for r in rows if (r["M"], r["N"]) != (SEED_M, SEED_N)]
    if sweep:
        ks = [r["K"] for r in sweep]
        ax1.plot(ks, [r["ptxgemm_tflops"] for r in sweep], "o-", label="ptxgemm")
        if sweep[0]["cublas_tflops"]:
            ax1.plot(ks, [r["cublas_tflops"] for r in sweep], "s--", label="cuBLAS")
        ax1.set_xscale("log", base=2)
        ax1.set_xlabel("K")
        ax1.set_ylabel("TFLOP/s")
        ax1.set_title(f"M={SEED_M}, N={SEED_N}")
        ax1.legend()
        ax1.grid(alpha=0.3)
    if other:
        labels = [f"{r['M']}x{r['N']}x{r['K']}" for r in other]
        x = np.arange(len(other))
        ax2.bar(x - 0.2, [r["ptxgemm_tflops"] for r in other], 0.4, label="ptxgemm")
        if other[0]["cublas_tflops"]:
            ax2.bar(x + 0.2, [r["cublas_tflops"] for r in other], 0.4, label="cuBLAS")
        ax2.set_xticks(x, labels, rotation=20, fontsize=8)
        ax2.set_ylabel("TFLOP/s")
        ax2.legend()
        ax2.grid(alpha=0.3, axis="y")
    fig.suptitle(f"bf16 GEMM on {gpu}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
