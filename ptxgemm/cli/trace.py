"""`python -m ptxgemm trace`: one traced GEMM launch, its timeline written as Chrome JSON, a summary and PNGs, and
the cost of tracing measured (ptxgemm.tools.tracing)."""
from __future__ import annotations

import json
from pathlib import Path

from ..errors import ConfigError
from ..runtime import driver
from ..tools import trace, tracing
from . import options
from .options import SHAPE_OPTIONS


#: the command's --help text (its one-line summary is in ptxgemm/cli/main.py's table)
DESCRIPTION = ("Run the GEMM once with GemmConfig(trace=True) and write what every warpgroup did "
               "and when: trace.json.gz (Chrome trace / Perfetto: a process per SM, a track per "
               "role), summary.json, sm<N>.png and overview.png (with the 'plot' extra); then "
               "time the traced kernel against the untraced one. Needs an sm_90 GPU.")


def add_arguments(p) -> None:
    for dim in SHAPE_OPTIONS:
        p.add_argument(f"--{dim}", type=int, required=True,
                       help=f"problem size {dim.upper()}, >= 1 (required; no default)")
    p.add_argument("--out", required=True, help="output directory, created if missing (required; no default)")
    p.add_argument("--ctas", type=int, default=None, help="cap the grid (default: one CTA per SM)")
    p.add_argument("--sm", type=int, default=None, help="the SM to draw in sm<N>.png (default: the SM whose CTA "
                                                        "finished at the median time)")
    p.add_argument("--rounds", type=int, default=20,
                   help="interleaved rounds per overhead set (default 20; 0 skips the overhead measurement)")
    p.add_argument("--sets", type=int, default=3, help="independent overhead sets, for min/median/max (default 3)")
    p.add_argument("--seed", type=int, default=0, help="random inputs' seed (default 0)")
    p.add_argument("--also", action="append", default=[], metavar="NAME=VALUE[,...]",
                   help="also trace this variant of the config on the same problem and draw it under the first in "
                        "compare.png (repeatable; e.g. --also block_n=192 --also cluster_m=2; default: none)")
    options.add_config_arguments(p.add_argument_group("GEMM configuration"))


def run(args) -> int:
    for dim in SHAPE_OPTIONS:
        if getattr(args, dim) < 1:
            raise ConfigError(f"--{dim}: must be >= 1, got {getattr(args, dim)}")
    if args.rounds < 0 or args.sets < 1:
        raise ConfigError(f"--rounds must be >= 0 and --sets >= 1, got {args.rounds} and {args.sets}")
    config = options.config_from_args(args)
    variants = [tracing.config_variant(config, spec) for spec in args.also]  # bad specs fail before the GPU
    reason = driver.no_device_reason()
    if reason is not None:
        raise ConfigError(f"trace runs the kernel, so it needs an sm_90 GPU (H100/H200), and there is none here: "
                          f"{reason.rstrip('.')}. `python -m ptxgemm dump` shows the traced build without one (add --trace)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rec = tracing.record(args.m, args.n, args.k, config, ctas=args.ctas, seed=args.seed)
    t = rec.trace
    print(f"{t.meta['gpu']}: {args.m}x{args.n}x{args.k}, {t.meta['config']}, grid {t.meta['grid']}")
    print(f"result check on sampled rows: {rec.verdict}")
    summary = t.summary()
    print(trace.format_summary(summary))
    agreement = tracing.span_agreement(rec)
    print(f"traced launch {rec.event_ms * 1e3:.1f} us by CUDA events; first to last event {t.kernel_end_ns / 1e3:.1f} "
          f"us ({agreement:+.1%})")
    if rec.ptxas:
        print(f"traced build: {rec.ptxas['registers']} registers at entry, {rec.ptxas['spill_store_bytes']} B "
              f"spill stores")
    result = {"meta": t.meta, "summary": summary, "event_ms": rec.event_ms, "span_vs_events": agreement,
              "check": str(rec.verdict), "check_ok": rec.verdict.ok, "traced_build": rec.ptxas}
    if args.rounds:
        ovh = tracing.overhead(args.m, args.n, args.k, config, rounds=args.rounds, sets=args.sets, seed=args.seed)
        print(ovh)
        result["overhead"] = ovh.as_dict()
    others = []
    for variant in variants:
        other = tracing.record(args.m, args.n, args.k, variant, ctas=args.ctas, seed=args.seed)
        print(f"\n--also {variant.describe()}: check {other.verdict}")
        print(trace.format_summary(other.trace.summary()))
        others.append(other)
        result.setdefault("also", []).append({"meta": other.trace.meta, "summary": other.trace.summary(),
                                              "event_ms": other.event_ms, "check_ok": other.verdict.ok})
    t.to_chrome(out / "trace.json.gz")
    written = ["trace.json.gz"]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("no PNGs: matplotlib is not installed (pip install 'ptxgemm[plot]')")
    else:
        sm = t.default_sm() if args.sm is None else args.sm
        t.plot_sm(out / f"sm{sm}.png", sm)
        t.plot_overview(out / "overview.png")
        written += [f"sm{sm}.png", "overview.png"]
        if others:
            trace.plot_compare([t] + [o.trace for o in others], out / "compare.png",
                               labels=[r.trace.meta["config"] for r in [rec] + others])
            written.append("compare.png")
    with open(out / "summary.json", "w") as f:
        json.dump(result, f, indent=1, default=str)
    written.append("summary.json")
    print(f"wrote {', '.join(written)} to {out}")
    return 0 if rec.verdict.ok and all(o.verdict.ok for o in others) else 1
