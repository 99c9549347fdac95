#!/usr/bin/env python3
"""Refit ptxgemm.select.cost_model's memory model (MEMORY[gpu]) and the transposed tiles' KTILE_NS / EPILOGUE_NS
from bench runs with --variants; no GPU needed.

Every (shape, variant) time of the runs is a sample; the fit minimizes the mean squared log error of
ptxgemm.select.cost_model.predict over them (scipy's Powell method, starting from the current tables). It prints the
constants to paste into ptxgemm/select/cost_model.py and the RMS log error.

    python scripts/fit_memory.py docs/results/h100/select/bench_h100_issue11_explore.json [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from ptxgemm.select import cost_model as S
from ptxgemm.kernel.config import GemmConfig

MEMORY_KEYS = ("dram_bytes_per_ns", "sm_bytes_per_ns", "l2_sm_bytes_per_ns", "latency_ns", "overlap_p")


def main() -> int:
    from scipy.optimize import minimize  # a tool's dependency, not the library's

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+")
    p.add_argument("--sm-count", type=int, default=132)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    runs = [json.loads(Path(f).read_text()) for f in args.runs]
    gpu = runs[0]["gpu"]
    samples = [(r["M"], r["N"], r["K"], tag, ms * 1e6) for run in runs for r in run["rows"]
               for tag, ms in r["variants"].items()]
    configs = {t: GemmConfig.from_tag(t) for t in {s[3] for s in samples}}
    transposed = sorted({c.tile_tag for c in configs.values() if c.transposed_store})
    ktile, epilogue = S.tables(gpu)
    memory = S.bandwidths(gpu)
    names = [*MEMORY_KEYS, *(f"kt:{t}" for t in transposed), *(f"ep:{t}" for t in transposed)]

    def apply(x):
        for name, v in zip(names, np.exp(x)):
            table, key = ((ktile, name[3:]) if name.startswith("kt:") else (epilogue, name[3:])
                          if name.startswith("ep:") else (memory, name))
            table[key] = float(v)

    def loss(x):
        apply(x)
        return sum((math.log(S.predict(configs[t], m, n, k, args.sm_count, gpu).total_ns) - math.log(ns)) ** 2
                   for m, n, k, t, ns in samples) / len(samples)

    x0 = np.log([memory[n] if n in memory else (ktile if n.startswith("kt:") else epilogue)[n[3:]] for n in names])
    res = minimize(loss, x0, method="Powell", options={"maxiter": 4000, "xtol": 1e-3, "ftol": 1e-6})
    apply(res.x)
    fitted = {n: float(v) for n, v in zip(names, np.exp(res.x))}
    print(f"# {gpu}: {len(samples)} samples, RMS log error {math.sqrt(res.fun):.3f}")
    for n, v in fitted.items():
        print(f"{n:<24} {v:10.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"gpu": gpu, "rms_log_error": math.sqrt(res.fun), **fitted}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
