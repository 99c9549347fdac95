"""`python -m ptxgemm bench --summarize FILE...`: several bench runs' JSON -> min/median/max of the cuBLAS/ptxgemm
ratio per shape and per geomean group, per GPU, and of the sustained ratio where the runs have one (`bench
--sustained`). No GPU needed.

Runs of the fp8 and epilogue benches (ptxgemm.bench.modes: their JSON says in_dtype, scaling, epilogue and what the
ratio means) are summarized apart from the bf16 bench's, under "<gpu> [<mode>]"; epilogue runs add the spread of
overhead_vs_plain and saved_vs_separate per shape. A bf16 run's summary is exactly what it always was."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from ..errors import ConfigError
from .suite import GROUPS, geomeans, row_group


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


# per-shape figures of an epilogue run besides its ratio (fractions: fused/plain - 1, 1 - fused/separate)
EPILOGUE_METRICS = ("overhead_vs_plain", "saved_vs_separate")
BF16_RATIO = "cuBLAS ms / ptxgemm ms: above 1, ptxgemm is faster"


def run_mode(run: dict) -> str | None:
    """A run's mode as words ('float8_e4m3fn, tensor scaling'), or None for the bf16 bench (files from before the
    modes have none of the fields)."""
    in_dtype, scaling, epilogue = run.get("in_dtype"), run.get("scaling"), run.get("epilogue")
    if in_dtype in (None, "bfloat16") and not scaling and epilogue in (None, "none"):
        return None
    text = (in_dtype or "bfloat16") + (f", {scaling} scaling" if scaling else "")
    return text + (f", epilogue {epilogue}" if epilogue not in (None, "none") else "")


def _group_key(run: dict) -> str:
    gpu, mode = run.get("gpu", "unknown GPU"), run_mode(run)
    return gpu if mode is None else f"{gpu} [{mode}]"


def summarize(runs: dict) -> dict:
    """{file: run JSON} -> {gpu: {"runs", "shapes": [...], "geomeans": {group: spread}, "min_ratio": spread}}; the
    fp8 and epilogue benches' runs under "<gpu> [<mode>]", each with "mode" and "ratio_means" too."""
    by_gpu: dict = {}
    for file, run in runs.items():
        by_gpu.setdefault(_group_key(run), []).append((file, run))
    out = {}
    for gpu, items in by_gpu.items():
        shapes: dict = {}
        per_group = {g: [] for g in (*GROUPS, "all")}
        sustained_groups = {g: [] for g in (*GROUPS, "all")}
        mins = []
        mode = run_mode(items[0][1])
        for _, run in items:
            rows = [{**r, "ratio": _row_ratio(r)} for r in run["rows"]]
            for r in rows:
                s = shapes.setdefault((r["M"], r["N"], r["K"]), {"ratios": [], "configs": [], "group": row_group(r),
                                                                 "sustained": [],
                                                                 **{m: [] for m in EPILOGUE_METRICS}})
                s["ratios"].append(r["ratio"])
                s["sustained"].append(r.get("sustained_ratio"))
                for m in EPILOGUE_METRICS:
                    s[m].append(r.get(m))
                cfg = r.get("config")
                if cfg and cfg not in s["configs"]:
                    s["configs"].append(cfg)
            stored = run.get("geomeans") or {}
            computed = geomeans(rows)
            for g in per_group:
                per_group[g].append(stored[g] if g in stored else computed[g])
            sustained = geomeans(rows, "sustained_ratio")
            for g in sustained_groups:
                sustained_groups[g].append(sustained[g])
            ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
            mins.append(run["min_ratio"] if run.get("min_ratio") is not None else (min(ratios) if ratios else None))
        out[gpu] = {
            "runs": [f for f, _ in items],
            "shapes": [{"M": m, "N": n, "K": k, "group": s["group"], "configs": s["configs"],
                        "ratio": _spread(s["ratios"]),
                        **({"sustained_ratio": _spread(s["sustained"])} if any(s["sustained"]) else {}),
                        **{m_: _spread(s[m_]) for m_ in EPILOGUE_METRICS if any(v is not None for v in s[m_])}}
                       for (m, n, k), s in sorted(shapes.items(), key=lambda i: (GROUPS.index(i[1]["group"]), i[0]))],
            "geomeans": {g: _spread(v) for g, v in per_group.items()},
            "min_ratio": _spread(mins),
        }
        if any(v is not None for v in sustained_groups["all"]):
            out[gpu]["sustained_geomeans"] = {g: _spread(v) for g, v in sustained_groups.items()}
        if mode is not None:
            out[gpu]["mode"] = mode
            out[gpu]["ratio_means"] = items[0][1].get("ratio_means") or "see the run files"
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
            lines.append(f"{shape:<22} {cells(s['ratio'])}  {'/'.join(s['configs']) or '-'}"
                         + "".join(f"  {m} median {s[m]['median']:+.1%}" for m in EPILOGUE_METRICS if s.get(m))
                         + (f"  sustained {cells(s['sustained_ratio']).strip()}" if s.get("sustained_ratio") else ""))
        lines.append("-" * len(head))
        for name, s in g["geomeans"].items():
            lines.append(f"{'geomean ' + name:<22} {cells(s)}")
        lines.append(f"{'min ratio':<22} {cells(g['min_ratio'])}")
        for name, s in (g.get("sustained_geomeans") or {}).items():
            if s:
                lines.append(f"{'sustained ' + name:<22} {cells(s)}")
        lines.append(f"(ratio = {g.get('ratio_means', BF16_RATIO)}; min/median/max across runs)")
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
