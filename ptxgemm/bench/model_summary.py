"""`python -m ptxgemm model --summarize FILE...`: several model runs' reports -> min / median / max per (model, sweep
entry, phase, mode, peer) of the ratio a table reads (transformer_models.headline_ratio: the order-balanced pairs'
median, ptxgemm over the peer), with the plans made per step (the largest of any run) and the host ms per step of
both peers (medians over the runs). No GPU, no torch.

A file is one report as `model` writes it ({"model", "rows", ...}) or several kept together ({"runs": [{"report":
...}, ...]}, as docs/results keeps them). Figures per run, three runs at least: a bar is read on the median."""
from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError
from .summary import read_json, spread
from .transformer_models import OURS, headline_ratio


def read_reports(files) -> list[dict]:
    """Every report in `files`, in order; a ConfigError naming a file that holds none."""
    reports = []
    for f in files:
        path = Path(f)
        try:
            data = read_json(path)     # (committed reports may be gzipped: docs/results/ keeps its size cap)
        except (OSError, ValueError) as e:
            raise ConfigError(f"--summarize: cannot read {path} as JSON ({e})") from None
        found = ([r.get("report") for r in data.get("runs", [])] if isinstance(data, dict) and "runs" in data
                 else [data])
        found = [r for r in found if isinstance(r, dict) and isinstance(r.get("rows"), list) and "model" in r]
        if not found:
            raise ConfigError(f"--summarize: {path} holds no `python -m ptxgemm model` report (a JSON object with "
                              f"'model' and 'rows', or {{'runs': [{{'report': ...}}]}})")
        reports += found
    return reports


def summarize(reports) -> list[dict]:
    """One entry per (model, sweep entry, phase, compiled, peer), in first-seen order: the spread of the ratio over
    the runs, the most plans ptxgemm made per step in any run, and each peer's median host ms per step."""
    groups: dict[tuple, dict] = {}
    for rep in reports:
        for row in rep["rows"]:
            for peer, ratio in (row.get("ratio") or {}).items():
                key = (rep["model"], rep.get("sweep"), row["phase"], bool(row["compiled"]), peer)
                g = groups.setdefault(key, {"ratios": [], "plans": [], "host_ours": [], "host_peer": []})
                g["ratios"].append(headline_ratio(ratio))
                g["plans"].append((row.get("plans_made_per_step") or {}).get(OURS))
                host = row.get("host_ms_per_step") or {}
                g["host_ours"].append(host.get(OURS))
                g["host_peer"].append(host.get(peer))
    out = []
    for (model, sweep, phase, compiled, peer), g in groups.items():
        plans = [p for p in g["plans"] if p is not None]
        host = [spread(g["host_ours"]), spread(g["host_peer"])]
        out.append({"model": model, "sweep": sweep, "phase": phase, "compiled": compiled, "peer": peer,
                    "ratio": spread(g["ratios"]), "plans_made_per_step_max": max(plans) if plans else None,
                    "host_ms_per_step": {OURS: host[0] and host[0]["median"], peer: host[1] and host[1]["median"]}})
    return out


def format_summary(summary) -> str:
    """The summary as a table: runs, min / median / max of the ratio, plans per step, host ms ptxgemm/peer."""
    lines = [f"{'model':<22}{'phase':<11}{'mode':<9}{'peer':<11}{'runs':>4}  {'min / median / max':<23}"
             f"{'plans/step':>10}  {'host ms ptx/peer':>16}"]
    for s in summary:
        r, host = s["ratio"], s["host_ms_per_step"]
        ratio = "-" if r is None else f"{r['min']:.3f} / {r['median']:.3f} / {r['max']:.3f}"
        plans = "-" if s["plans_made_per_step_max"] is None else f"{s['plans_made_per_step_max']:.2f}"
        ms = "/".join("-" if host[p] is None else f"{host[p]:.2f}" for p in (OURS, s["peer"]))
        label = s["model"] + (f" ({s['sweep']})" if s["sweep"] else "")
        lines.append(f"{label:<22}{s['phase']:<11}{'compiled' if s['compiled'] else 'eager':<9}{s['peer']:<11}"
                     f"{0 if r is None else r['n']:>4}  {ratio:<23}{plans:>10}  {ms:>16}")
    lines.append("ratio: ptxgemm's tokens/s over the peer's, the order-balanced pairs' median per run "
                 "(transformer_models.headline_ratio); above 1, ptxgemm is faster")
    return "\n".join(lines)
