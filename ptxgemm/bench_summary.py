"""`python -m ptxgemm bench --summarize FILE...`: several bench runs' JSON -> min/median/max of the cuBLAS/ptxgemm
ratio per shape and per geomean group, per GPU. No GPU needed."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from .bench import GROUPS, geomeans, group_of
from .errors import ConfigError


def _row_ratio(row):
    """The row's ratio; runs from before the 'ratio' field have cublas_ms and ptxgemm_ms."""
    if row.get("ratio") is not None:
        return row["ratio"]
    if row.get("cublas_ms") and row.get("ptxgemm_ms"):
        return row["cublas_ms"] / row["ptxgemm_ms"]
    return None


def _spread(values) -> dict | None:
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"n": len(values), "min": min(values), "median": statistics.median(values), "max": max(values)}


def summarize(runs: dict) -> dict:
    """{file: run JSON} -> {gpu: {"runs", "shapes": [...], "geomeans": {group: spread}, "min_ratio": spread}}."""
    by_gpu: dict = {}
    for file, run in runs.items():
        by_gpu.setdefault(run.get("gpu", "unknown GPU"), []).append((file, run))
    out = {}
    for gpu, items in by_gpu.items():
        shapes: dict = {}
        per_group = {g: [] for g in (*GROUPS, "all")}
        mins = []
        for _, run in items:
            rows = [{**r, "ratio": _row_ratio(r)} for r in run["rows"]]
            for r in rows:
                s = shapes.setdefault((r["M"], r["N"], r["K"]), {"ratios": [], "configs": []})
                s["ratios"].append(r["ratio"])
                cfg = r.get("config")
                if cfg and cfg not in s["configs"]:
                    s["configs"].append(cfg)
            stored = run.get("geomeans") or {}
            computed = geomeans(rows)
            for g in per_group:
                per_group[g].append(stored[g] if g in stored else computed[g])
            ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
            mins.append(run["min_ratio"] if run.get("min_ratio") is not None else (min(ratios) if ratios else None))
        out[gpu] = {
            "runs": [f for f, _ in items],
            "shapes": [{"M": m, "N": n, "K": k, "group": group_of(m, n, k), "configs": s["configs"],
                        "ratio": _spread(s["ratios"])}
                       for (m, n, k), s in sorted(shapes.items(), key=lambda i: (GROUPS.index(group_of(*i[0])), i[0]))],
            "geomeans": {g: _spread(v) for g, v in per_group.items()},
            "min_ratio": _spread(mins),
        }
    return out


def format_summary(summary: dict) -> str:
    def cells(s):
        return (f"{s['n']:>4} {s['min']:>7.3f} {s['median']:>7.3f} {s['max']:>7.3f}" if s
                else f"{0:>4} {'-':>7} {'-':>7} {'-':>7}")

    lines = []
    for gpu, g in summary.items():
        lines.append(f"== {gpu}: {len(g['runs'])} run(s): {', '.join(g['runs'])}")
        head = f"{'shape / group':<22} {'runs':>4} {'min':>7} {'median':>7} {'max':>7}  config(s)"
        lines += [head, "-" * len(head)]
        for s in g["shapes"]:
            shape = f"{s['M']}x{s['N']}x{s['K']}"
            lines.append(f"{shape:<22} {cells(s['ratio'])}  {'/'.join(s['configs']) or '-'}")
        lines.append("-" * len(head))
        for name, s in g["geomeans"].items():
            lines.append(f"{'geomean ' + name:<22} {cells(s)}")
        lines.append(f"{'min ratio':<22} {cells(g['min_ratio'])}")
        lines.append("(ratio = cuBLAS ms / ptxgemm ms: above 1, ptxgemm is faster; min/median/max across runs)")
        lines.append("")
    return "\n".join(lines).rstrip("\n")


def read_runs(files) -> dict:
    """{file: run JSON} of bench result files; ConfigError naming the file that is not one."""
    runs = {}
    for f in files:
        try:
            run = json.loads(Path(f).read_text())
            if not isinstance(run, dict) or not isinstance(run.get("rows"), list):
                raise ValueError("no 'rows' list: not a `python -m ptxgemm bench` result")
            if not all(isinstance(r, dict) and {"M", "N", "K"} <= r.keys() for r in run["rows"]):
                raise ValueError("a row without M, N and K: not a `python -m ptxgemm bench` result")
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"--summarize: {f}: {type(e).__name__}: {e}") from None
        runs[str(f)] = run
    return runs
