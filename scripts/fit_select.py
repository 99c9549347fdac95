#!/usr/bin/env python3
"""Refit ptxgemm.select.cost_model's cost tables (KTILE_NS, EPILOGUE_NS) from measured runs; no GPU needed.

Input: bench JSON files (python -m ptxgemm bench, with --variants: every row times the selected config and each variant side
by side) or the tune cache (python -m ptxgemm tune stores every candidate's time). For each config tag it fits the
model of ptxgemm.select.cost_model.predict to that tag's times over all shapes: a grid over the epilogue cost and, for
each, the k-tile cost that minimizes the squared relative error; the pair with the least RMS log error wins.

    python scripts/fit_select.py docs/results/h100/select/bench_h100_issue9_fit.json [--sm-count 132] [--json OUT]

It prints the tables as Python dict literals to paste into ptxgemm/select/cost_model.py, and per tag the RMS log error.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

EPILOGUE_GRID_NS = np.linspace(0.0, 6000.0, 601)


def samples(files) -> dict[str, list[tuple[int, int, int, float]]]:
    """{tag: [(m, n, k, ns), ...]} from bench rows (config + variants) and tune-cache entries."""
    out: dict[str, list] = {}
    for f in files:
        data = json.loads(Path(f).read_text())
        if "entries" in data:                                   # the tune cache
            for e in data["entries"].values():
                for tag, ms in e.get("timings_ms", {}).items():
                    out.setdefault(tag, []).append((e["m"], e["n"], e["k"], ms * 1e6))
            continue
        for r in data["rows"]:
            times = dict(r.get("variants") or {})
            if r.get("config") and r.get("ptxgemm_ms"):
                times.setdefault(r["config"], r["ptxgemm_ms"])
            for tag, ms in times.items():
                if isinstance(ms, dict):                        # older bench files: {"ms": .., "rel_err": ..}
                    ms = ms["ms"]
                out.setdefault(tag, []).append((r["M"], r["N"], r["K"], ms * 1e6))
    return out


def fit(tag: str, points, sm_count: int) -> tuple[float, float, float]:
    """(k-tile ns, epilogue ns, RMS log error) of `tag` over `points`."""
    from ptxgemm import GemmConfig
    from ptxgemm.kernel import schedule
    from ptxgemm.select import cost_model as select

    cfg = GemmConfig.from_tag(tag)
    steps, k_tiles, ns = [], [], []
    for m, n, k, t in points:
        s = schedule.plan_for(cfg, m, n, k, sm_count)
        steps.append(select.steps_per_cta(s))
        k_tiles.append(s.k_tiles)
        ns.append(t)
    steps, k_tiles, ns = (np.array(v, float) for v in (steps, k_tiles, ns))
    best = None
    for epi in EPILOGUE_GRID_NS:
        # for a fixed epilogue cost the model is linear in the k-tile cost (pingpong: while the mainloop is the
        # longer, which the fitted costs make true), so the relative-error least squares has a closed form
        x = steps * k_tiles
        y = ns - (steps * epi if cfg.cooperative else epi)
        w = 1.0 / ns
        kt = float(np.sum(w * w * x * y) / np.sum(w * w * x * x))
        if kt <= 0:
            continue
        pred = select.model_ns(cfg.cooperative, steps, k_tiles, kt, epi)
        err = float(np.sqrt(np.mean(np.log(pred / ns) ** 2)))
        if best is None or err < best[2]:
            best = (kt, float(epi), err)
    return best


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", help="bench JSON files or a tune cache (tune.json)")
    p.add_argument("--sm-count", type=int, default=132, help="SMs of the GPU the files were measured on (default 132)")
    p.add_argument("--json", default=None, help="also write {tag: [ktile_ns, epilogue_ns, rms_log_err]} here "
                                                "(default: none)")
    args = p.parse_args(argv)
    data = samples(args.files)
    result = {tag: fit(tag, pts, args.sm_count) for tag, pts in sorted(data.items()) if len(pts) >= 3}
    for tag, (kt, epi, err) in result.items():
        print(f"{tag:<16} k-tile {kt:8.1f} ns  epilogue {epi:7.0f} ns  RMS log error {err:.3f}  "
              f"({len(data[tag])} shapes)")
    print("KTILE_NS = {" + ", ".join(f'"{t}": {v[0]:.0f}' for t, v in result.items()) + "}")
    print("EPILOGUE_NS = {" + ", ".join(f'"{t}": {v[1]:.0f}' for t, v in result.items()) + "}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
