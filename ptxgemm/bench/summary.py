"""`python -m ptxgemm bench --summarize FILE...`: several bench runs' JSON -> min/median/max of the cuBLAS/ptxgemm
ratio per shape and per geomean group, per GPU, and of the sustained ratio where the runs have one (`bench
--sustained`). No GPU needed.

Runs of the fp8 and epilogue benches (ptxgemm.bench.modes: their JSON says in_dtype, scaling, epilogue and what the
ratio means) are summarized apart from the bf16 bench's, under "<gpu> [<mode>]"; epilogue runs add the spread of
overhead_vs_plain and saved_vs_separate per shape. A bf16 run's summary is exactly what it always was.

Runs of the named sets whose rows are not one shape each are summarized by their own keys, under "<gpu> [<set>]":
`--set training` (ptxgemm.bench.training) per GEMM (M, N, K and majors), with issue 47's checks evaluated on the
per-row medians across the runs (the median of three runs is the issue's statistic); `--set grouped`
(ptxgemm.bench.grouped_bench) per case and peer, by its speedup.

The other ratios a row may carry (OTHER_RATIOS: the fp8 bench's back-to-back and kernel-duration ratios, `--set
deepgemm`'s ratios to DeepGEMM's published TFLOP/s, `--fastcu`'s) are summarized beside the burst one wherever the
runs have them. The result files with no summary (`bench --host`'s, `--summarize-out`'s own, `model`'s, `fuzz`'s) are
refused in one line that names the kind and says why (no_summary)."""
from __future__ import annotations

import fnmatch
import gzip
import json
import statistics
from pathlib import Path

from ..errors import ConfigError
from . import training
from .suite import GROUPS, geomean, geomeans, row_group


def _row_ratio(row):
    """The row's ratio; runs from before the 'ratio' field have cublas_ms and ptxgemm_ms."""
    if row.get("ratio") is not None:
        return row["ratio"]
    if row.get("cublas_ms") and row.get("ptxgemm_ms"):
        return row["cublas_ms"] / row["ptxgemm_ms"]
    return None


def spread(values) -> dict | None:
    """{n, min, median, max} of `values`, the Nones left out; None where none is left (model_summary uses it too)."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"n": len(values), "min": min(values), "median": statistics.median(values), "max": max(values)}


# per-shape figures of an epilogue run besides its ratio (fractions: fused/plain - 1, 1 - fused/separate)
EPILOGUE_METRICS = ("overhead_vs_plain", "saved_vs_separate")
#: the other ratios a row may carry beside the burst one, each ptxgemm ahead above 1: the fp8 bench's back-to-back
#: and kernel-duration ratios (ptxgemm.bench.modes), `--set deepgemm`'s ptxgemm TFLOP/s over DeepGEMM's published ones
#: (burst, back to back, kernel durations), `--deepgemm`'s DeepGEMM ms over ptxgemm's measured beside it (burst,
#: back to back, kernel durations with and without the flush), and `--fastcu`'s kernel 12 ms over ptxgemm's (burst
#: and sustained).
#: Each is summarized per shape and as each run's geomean over its rows, wherever the runs have it.
OTHER_RATIOS = ("b2b_ratio", "kernel_ratio", "kernel_flushed_ratio", "vs_published", "vs_published_b2b",
                "vs_published_kernel", "vs_published_kernel_flushed", "vs_deepgemm", "vs_deepgemm_b2b",
                "vs_deepgemm_kernel", "vs_deepgemm_kernel_flushed", "fastcu_ratio", "fastcu_sustained_ratio")
OTHER_RATIOS_MEAN = ("b2b_ratio, kernel_*: the peer's ms / ptxgemm's back to back and by kernel durations; "
                     "vs_published*: ptxgemm's TFLOP/s / DeepGEMM's published ones; vs_deepgemm*: DeepGEMM's ms / "
                     "ptxgemm's, measured beside it (bench --deepgemm); fastcu_*: fast.cu kernel 12's "
                     "ms / ptxgemm's; each a geomean per run, above 1 ptxgemm is ahead")
BF16_RATIO = "cuBLAS ms / ptxgemm ms: above 1, ptxgemm is faster"
#: a grouped run's DeepGEMM figures (bench --deepgemm), summarized as each run's geomean over the cases
GROUPED_KERNEL_RATIOS = ("vs_deepgemm_kernel", "vs_deepgemm_kernel_flushed")


def run_mode(run: dict) -> str | None:
    """A run's mode as words ('float8_e4m3fn, tensor scaling'), or None for the bf16 bench (files from before the
    modes have none of the fields)."""
    in_dtype, scaling, epilogue = run.get("in_dtype"), run.get("scaling"), run.get("epilogue")
    if in_dtype in (None, "bfloat16") and not scaling and epilogue in (None, "none"):
        return None
    text = (in_dtype or "bfloat16") + (f", {scaling} scaling" if scaling else "")
    return text + (f", epilogue {epilogue}" if epilogue not in (None, "none") else "")


def run_set(run: dict) -> str | None:
    """The named set whose rows need their own summary ("training", "grouped"), or None (rows are shapes)."""
    if run.get("set") == "training":
        return "training"
    rows = run.get("rows")
    if rows and all(isinstance(r, dict) and "case" in r for r in rows):   # grouped files name no set
        first = next((r for r in rows if r.get("in_dtype")), {})
        return "grouped " + (first.get("in_dtype") or "") + (f", {first['scaling']} scaling"
                                                             if first.get("scaling") else "")
    return None


def _group_key(run: dict) -> str:
    gpu, mode = run.get("gpu", "unknown GPU"), run_set(run) or run_mode(run)
    return gpu if mode is None else f"{gpu} [{mode}]"


def summarize_training(items) -> dict:
    """[(file, training run)] -> each GEMM's ratio across the runs, each run's figures' spread, and the figures
    (geomeans, lowest row, checks) of the per-row medians."""
    per_row: dict = {}
    geos = []
    for _, run in items:
        geos.append(training.figures(run["rows"])["geomean"])
        for r in run["rows"]:
            s = per_row.setdefault(training.row_key(r), {
                **{k: r[k] for k in ("gemm", "tokens", "role", "model", "models", "M", "N", "K", "a_major",
                                     "b_major", "layout")}, "configs": [], "ratios": []})
            s["ratios"].append(_row_ratio(r))
            if r.get("config") and r["config"] not in s["configs"]:
                s["configs"].append(r["config"])
    rows = [{**{k: v for k, v in s.items() if k != "ratios"}, "ratio": spread(s["ratios"])}
            for s in per_row.values()]
    medians = [{**r, "ratio": r["ratio"]["median"] if r["ratio"] else None} for r in rows]
    return {"set": "training", "runs": [f for f, _ in items], "rows": rows, "geomean": spread(geos),
            "median_rows": training.figures(medians)}


def summarize_grouped(items) -> dict:
    """[(file, grouped run)] -> each (case, peer)'s speedup across the runs and each peer's geomean's spread (rows
    of a refused peer carry no speedup and are left out)."""
    cases: dict = {}
    peer_geos: dict = {}
    kernel_geos: dict = {}
    for _, run in items:
        timed = [r for r in run["rows"] if r.get("speedup") is not None]
        for r in timed:
            s = cases.setdefault((r["case"], r["peer"]), {"case": r["case"], "peer": r["peer"], "configs": [],
                                                          "speedups": []})
            s["speedups"].append(r["speedup"])
            if r.get("config") and r["config"] not in s["configs"]:
                s["configs"].append(r["config"])
        for peer in sorted({r["peer"] for r in timed}):
            peer_geos.setdefault(peer, []).append(geomean([r["speedup"] for r in timed if r["peer"] == peer]))
        # bench --deepgemm: DeepGEMM's ms / ptxgemm's by kernel durations, one figure per case (each of its rows
        # carries it)
        for key in GROUPED_KERNEL_RATIOS:
            per_case = {r["case"]: r[key] for r in timed if r.get(key) is not None}
            if per_case:
                kernel_geos.setdefault(key, []).append(geomean(per_case.values()))
    out = {"set": "grouped", "runs": [f for f, _ in items],
           "cases": [{**{k: v for k, v in s.items() if k != "speedups"}, "speedup": spread(s["speedups"])}
                     for s in cases.values()],
           "geomeans": {peer: spread(v) for peer, v in peer_geos.items()}}
    if kernel_geos:
        out["kernel_geomeans"] = {key: spread(v) for key, v in kernel_geos.items()}
    return out


def summarize(runs: dict) -> dict:
    """{file: run JSON} -> {gpu: {"runs", "shapes": [...], "geomeans": {group: spread}, "min_ratio": spread}}; the
    fp8 and epilogue benches' runs under "<gpu> [<mode>]", each with "mode" and "ratio_means" too."""
    by_gpu: dict = {}
    for file, run in runs.items():
        by_gpu.setdefault(_group_key(run), []).append((file, run))
    out = {}
    for gpu, items in by_gpu.items():
        kind = run_set(items[0][1])
        if kind is not None:
            out[gpu] = (summarize_training if kind == "training" else summarize_grouped)(items)
            continue
        shapes: dict = {}
        per_group = {g: [] for g in (*GROUPS, "all")}
        sustained_groups = {g: [] for g in (*GROUPS, "all")}
        mins = []
        other_geos: dict = {}
        mode = run_mode(items[0][1])
        for _, run in items:
            rows = [{**r, "ratio": _row_ratio(r)} for r in run["rows"]]
            for r in rows:
                s = shapes.setdefault((r["M"], r["N"], r["K"]), {"ratios": [], "configs": [], "group": row_group(r),
                                                                 "sustained": [],
                                                                 **{m: [] for m in (*EPILOGUE_METRICS, *OTHER_RATIOS)}})
                s["ratios"].append(r["ratio"])
                s["sustained"].append(r.get("sustained_ratio"))
                for m in (*EPILOGUE_METRICS, *OTHER_RATIOS):
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
            for m in OTHER_RATIOS:
                other_geos.setdefault(m, []).append(geomean([r.get(m) for r in rows]))
            ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
            mins.append(run["min_ratio"] if run.get("min_ratio") is not None else (min(ratios) if ratios else None))
        out[gpu] = {
            "runs": [f for f, _ in items],
            "shapes": [{"M": m, "N": n, "K": k, "group": s["group"], "configs": s["configs"],
                        "ratio": spread(s["ratios"]),
                        **({"sustained_ratio": spread(s["sustained"])} if any(s["sustained"]) else {}),
                        **{m_: spread(s[m_]) for m_ in (*EPILOGUE_METRICS, *OTHER_RATIOS)
                           if any(v is not None for v in s[m_])}}
                       for (m, n, k), s in sorted(shapes.items(), key=lambda i: (GROUPS.index(i[1]["group"]), i[0]))],
            "geomeans": {g: spread(v) for g, v in per_group.items()},
            "min_ratio": spread(mins),
        }
        if any(v is not None for v in sustained_groups["all"]):
            out[gpu]["sustained_geomeans"] = {g: spread(v) for g, v in sustained_groups.items()}
        other = {m: spread(v) for m, v in other_geos.items() if any(x is not None for x in v)}
        if other:
            out[gpu]["other_geomeans"] = other
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
        if g.get("set") == "training":
            head = f"{'GEMM':<58} {'majors':<6} {'runs':>4} {'min':>7} {'median':>7} {'max':>7}  config(s)"
            lines += [head, "-" * len(head)]
            lines += [f"{training.describe(r):<58} {r['a_major'] + '/' + r['b_major']:<6} {cells(r['ratio'])}  "
                      f"{'/'.join(r['configs']) or '-'}" for r in g["rows"]]
            lines += ["-" * len(head), f"{'geomean per run':<65} {cells(g['geomean'])}",
                      "per-row medians:", *training.format_figures(g["median_rows"]),
                      f"(ratio = {BF16_RATIO}; min/median/max across runs)", ""]
            continue
        if g.get("set") == "grouped":
            w = max([len(c["case"]) for c in g["cases"]] + [4])
            head = f"{'case':<{w}} {'peer':<26} {'runs':>4} {'min':>7} {'median':>7} {'max':>7}  config(s)"
            lines += [head, "-" * len(head)]
            lines += [f"{c['case']:<{w}} {c['peer']:<26} {cells(c['speedup'])}  {'/'.join(c['configs']) or '-'}"
                      for c in g["cases"]]
            lines += ["-" * len(head)] + [f"{'geomean vs ' + peer:<{w + 27}} {cells(s)}"
                                          for peer, s in g["geomeans"].items()]
            lines += [f"{'geomean ' + key:<{w + 27}} {cells(s)}" for key, s in (g.get("kernel_geomeans") or {}).items()]
            lines += ["(speedup = the peer's ms / ptxgemm's: above 1, ptxgemm is faster; min/median/max across runs)",
                      ""]
            continue
        # the label column: 22 wide, or wider for the longest other ratio's name
        w = max([22] + [len("geomean " + name) for name in g.get("other_geomeans") or {}])
        head = f"{'shape / group':<{w}} {'runs':>4} {'min':>7} {'median':>7} {'max':>7}  config(s)"
        lines += [head, "-" * len(head)]
        for s in g["shapes"]:
            shape = f"{s['M']}x{s['N']}x{s['K']}"
            lines.append(f"{shape:<{w}} {cells(s['ratio'])}  {'/'.join(s['configs']) or '-'}"
                         + "".join(f"  {m} median {s[m]['median']:+.1%}" for m in EPILOGUE_METRICS if s.get(m))
                         + (f"  sustained {cells(s['sustained_ratio']).strip()}" if s.get("sustained_ratio") else ""))
        lines.append("-" * len(head))
        for name, s in g["geomeans"].items():
            lines.append(f"{'geomean ' + name:<{w}} {cells(s)}")
        lines.append(f"{'min ratio':<{w}} {cells(g['min_ratio'])}")
        for name, s in (g.get("sustained_geomeans") or {}).items():
            if s:
                lines.append(f"{'sustained ' + name:<{w}} {cells(s)}")
        for name, s in (g.get("other_geomeans") or {}).items():
            lines.append(f"{'geomean ' + name:<{w}} {cells(s)}")
        if g.get("other_geomeans"):
            lines.append(f"({OTHER_RATIOS_MEAN})")
        lines.append(f"(ratio = {g.get('ratio_means', BF16_RATIO)}; min/median/max across runs)")
        lines.append("")
    return "\n".join(lines).rstrip("\n")


def no_summary(run) -> tuple[str, str] | None:
    """(what the file is, why it has no summary) for the result files --summarize does not read, each named by the
    command that writes it, so that the one-line error says what the file is rather than "not a bench run"; None
    for any other file."""
    if not isinstance(run, dict):
        return None
    rows = run.get("rows") if isinstance(run.get("rows"), list) else None
    if rows is None and run and all(isinstance(v, dict) and isinstance(v.get("runs"), list) for v in run.values()):
        return ("a summary (what `bench --summarize-out` writes), not a run",
                "summarize the run files it lists under 'runs' instead")
    if rows is not None and "checks" in run and any(isinstance(r, dict) and "us_min" in r for r in rows):
        layer = any(isinstance(r, dict) and "call" in r for r in rows)
        return (f"a `bench --host{' layer' if layer else ''}` result (host microseconds per call)",
                f"each row is already the median of the run's {run.get('repeats', '')} repeats, judged by the run's "
                f"own checks, with no peer ratio to spread across runs; `bench --host` prints its report")
    if rows is not None and "arch" in run and any(isinstance(r, dict) and "phase" in r for r in rows):
        return ("a `python -m ptxgemm model` result (tokens/s per phase)",
                "it is not a GEMM bench run; `python -m ptxgemm model --summarize` summarizes model runs")
    if {"cases", "correct", "failures"} <= run.keys():
        return "a `python -m ptxgemm fuzz` report", "its cases are checked, not timed"
    return None


def read_json(path) -> object:
    """A result file's JSON, gzipped or not (docs/results/ keeps its size cap by gzipping what it commits);
    ValueError or OSError where it is neither."""
    path = Path(path)
    raw = path.read_bytes()
    try:
        return json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)
    except (EOFError, gzip.BadGzipFile) as e:
        raise ValueError(f"not gzipped JSON ({e})") from None


def _bundled(f, data) -> list[tuple[str, object]]:
    """(name, run) of a file: its one run, or each run of a bundle ({"gpu", "what", "runs": {name: run}}: how
    docs/results/ commits a session's runs in one file) as FILE:NAME."""
    if isinstance(data, dict) and "rows" not in data and isinstance(data.get("runs"), dict):
        return [(f"{f}:{name}", run) for name, run in data["runs"].items()]
    return [(str(f), data)]


def read_runs(files) -> dict:
    """{file (or bundle file:run name): run JSON} of bench result files, gzipped or not, single runs or bundles;
    `BUNDLE:PATTERN` takes the bundle's runs whose names match the glob (e.g. `...r103-r134.json.gz:r134_*`).
    ConfigError naming the file that is not one (and, for a kind of result file that has no summary, why)."""
    runs = {}
    for f in files:
        path, pattern = str(f), None
        if not Path(path).exists() and ":" in path:
            path, pattern = path.rsplit(":", 1)
        try:
            found = _bundled(path, read_json(path))
        except (OSError, ValueError) as e:
            raise ConfigError(f"--summarize: {f}: {type(e).__name__}: {e}") from None
        if pattern is not None:
            found = [(name, run) for name, run in found
                     if name != path and fnmatch.fnmatch(name.rsplit(":", 1)[1], pattern)]
            if not found:
                raise ConfigError(f"--summarize: {f}: no run of the bundle {path} matches {pattern!r}")
        for name, run in found:
            runs.update(_checked_run(name, run))
    return runs


def _checked_run(f: str, run) -> dict:
    """{f: run} where `run` is a bench run's JSON; ConfigError naming `f` otherwise."""
    other = no_summary(run)
    if other is not None:
        raise ConfigError(f"--summarize: {f}: {other[0]}; this kind of file has no summary: {other[1]}")
    try:
        if not isinstance(run, dict) or not isinstance(run.get("rows"), list):
            raise ValueError("no 'rows' list: not a `python -m ptxgemm bench` result")
        kind = run_set(run)
        need = (() if kind and kind.startswith("grouped") else ("M", "N", "K") if kind is None else
                ("M", "N", "K", "gemm", "tokens", "model", "models", "role", "layout", "a_major", "b_major"))
        if not all(isinstance(r, dict) and set(need) <= r.keys() for r in run["rows"]):
            raise ValueError(f"a row without {', '.join(need[:-1])} and {need[-1]}: not a `python -m ptxgemm "
                             f"bench{' --set training' if kind else ''}` result")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"--summarize: {f}: {type(e).__name__}: {e}") from None
    return {f: run}
