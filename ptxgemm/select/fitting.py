"""The cost model's constants refitted from measured runs (`python -m ptxgemm fit`; no GPU needed).

The selection's tables (ptxgemm.select.tile_costs: KTILE_NS and EPILOGUE_NS per config tag and GPU; memory_model: MEMORY per GPU)
are fitted to benchmark runs in which every candidate ran side by side (`bench --variants`) or to a tune cache
(`tune` stores every candidate's time). This module is that fit, kept beside the model it feeds, so a new GPU or a new
tile gets its constants the way the current ones were got:

- `fit_tiles`: per config tag, the k-tile and epilogue costs that best explain its times over all shapes. For a
  fixed epilogue cost the model is linear in the k-tile cost, so each point of a grid over the epilogue cost has a
  closed-form least squares of the relative error; the pair with the least RMS log error wins.
- `fit_memory`: the memory model (bandwidths, latency, overlap) and the transposed tiles' costs together, by
  Powell's method on the mean squared log error of `predict.predict`. It needs scipy (a developer's tool, not a
  dependency of the library), and leaves the module's tables as they were.

Both print what to paste into tile_costs.py or memory_model.py; neither changes the selection by itself.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from ..errors import ConfigError
from ..kernel import schedule
from ..kernel.config import GemmConfig
from . import memory_model, predict, tile_costs

#: the epilogue costs tried per tag (ns per output tile): every 10 ns up to 6 us, above any fitted so far
EPILOGUE_GRID_NS = np.linspace(0.0, 6000.0, 601)
#: fewer shapes than this give a tag no fit (two unknowns)
MIN_POINTS = 3
MEMORY_KEYS = ("dram_bytes_per_ns", "sm_bytes_per_ns", "l2_sm_bytes_per_ns", "latency_ns", "overlap_p")


def _read(path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"files: {path} is not a readable JSON file ({e})") from None


def samples(files) -> dict[str, list[tuple[int, int, int, float]]]:
    """{tag: [(m, n, k, ns), ...]} from bench runs (each row's selected config and its variants) and tune caches."""
    out: dict[str, list] = {}
    for f in files:
        data = _read(f)
        if "entries" in data:                                   # the tune cache
            for e in data["entries"].values():
                for tag, ms in e.get("timings_ms", {}).items():
                    out.setdefault(tag, []).append((e["m"], e["n"], e["k"], ms * 1e6))
            continue
        if "rows" not in data:
            raise ConfigError(f"files: {f} is neither a bench run (rows) nor a tune cache (entries)")
        for r in data["rows"]:
            times = dict(r.get("variants") or {})
            if r.get("config") and r.get("ptxgemm_ms"):
                times.setdefault(r["config"], r["ptxgemm_ms"])
            for tag, ms in times.items():
                if isinstance(ms, dict):                        # older bench files: {"ms": .., "rel_err": ..}
                    ms = ms["ms"]
                out.setdefault(tag, []).append((r["M"], r["N"], r["K"], ms * 1e6))
    return out


def fit_tile(tag: str, points, sm_count: int) -> tuple[float, float, float]:
    """(k-tile ns, epilogue ns, RMS log error) of config `tag` over `points` [(m, n, k, ns), ...]."""
    cfg = GemmConfig.from_tag(tag)
    plans = [schedule.plan_for(cfg, m, n, k, sm_count) for m, n, k, _ in points]
    steps = np.array([predict.steps_per_cta(s) for s in plans], float)
    k_tiles = np.array([s.k_tiles for s in plans], float)
    ns = np.array([t for *_, t in points], float)
    best = None
    for epi in EPILOGUE_GRID_NS:
        # pingpong overlaps the epilogue with the next tile's mainloop (the fitted costs make the mainloop the
        # longer), so only one epilogue shows; cooperative pays one per step
        x = steps * k_tiles
        y = ns - (steps * epi if cfg.cooperative else epi)
        w = 1.0 / ns
        kt = float(np.sum(w * w * x * y) / np.sum(w * w * x * x))
        if kt <= 0:
            continue
        pred = predict.model_ns(cfg.cooperative, steps, k_tiles, kt, epi)
        err = float(np.sqrt(np.mean(np.log(pred / ns) ** 2)))
        if best is None or err < best[2]:
            best = (kt, float(epi), err)
    if best is None:
        raise ConfigError(f"files: no positive k-tile cost explains {tag}'s {len(points)} times")
    return best


def fit_tiles(files, sm_count: int) -> dict[str, tuple[float, float, float, int]]:
    """{tag: (k-tile ns, epilogue ns, RMS log error, shapes)} of every tag with at least MIN_POINTS shapes."""
    data = samples(files)
    return {tag: (*fit_tile(tag, pts, sm_count), len(pts)) for tag, pts in sorted(data.items())
            if len(pts) >= MIN_POINTS}


def fit_memory(files, sm_count: int) -> dict:
    """The memory model and the transposed tiles' costs fitted to bench runs with --variants: {"gpu",
    "samples", "rms_log_error", name: value ...}. tile_costs' tables are restored before it returns."""
    try:
        from scipy.optimize import minimize   # a developer's tool's dependency, not the library's
    except ImportError:
        raise ConfigError("fit memory: needs scipy (pip install scipy); `fit tiles` does not") from None
    runs = [_read(f) for f in files]
    gpu = runs[0].get("gpu", "")
    points = [(r["M"], r["N"], r["K"], tag, (ms["ms"] if isinstance(ms, dict) else ms) * 1e6)
              for run in runs for r in run.get("rows", ()) for tag, ms in (r.get("variants") or {}).items()]
    if not points:
        raise ConfigError("files: no row with variants (run the bench with --variants)")
    configs = {t: GemmConfig.from_tag(t) for t in {p[3] for p in points}}
    transposed = sorted({c.tile_tag for c in configs.values() if c.transposed_store})
    ktile, epilogue = tile_costs.tables(gpu)
    memory = memory_model.bandwidths(gpu)
    names = [*MEMORY_KEYS, *(f"kt:{t}" for t in transposed), *(f"ep:{t}" for t in transposed)]

    # each fitted constant's place in the model's tables: (table, key), in `names`' order
    slots = [(ktile, n[3:]) if n.startswith("kt:") else (epilogue, n[3:]) if n.startswith("ep:") else (memory, n)
             for n in names]
    saved = [table[key] for table, key in slots]

    def put(values):
        for (table, key), v in zip(slots, values):
            table[key] = v

    def loss(x):
        put(map(float, np.exp(x)))
        return sum((math.log(predict.predict(configs[t], m, n, k, sm_count, gpu).total_ns) - math.log(ns)) ** 2
                   for m, n, k, t, ns in points) / len(points)

    try:
        res = minimize(loss, np.log(saved), method="Powell", options={"maxiter": 4000, "xtol": 1e-3, "ftol": 1e-6})
    finally:
        put(saved)   # the library's tables as they were (the same objects): the fit only reports
    return {"gpu": gpu, "samples": len(points), "rms_log_error": math.sqrt(res.fun),
            **{n: float(v) for n, v in zip(names, np.exp(res.x))}}
