"""`python -m ptxgemm trace`: one traced GEMM launch, its timeline written as Chrome JSON, a summary and PNGs, and
the cost of tracing measured (ptxgemm.tools.tracing)."""
from __future__ import annotations

import json

from ..errors import ConfigError
from ..kernel.config import SCHEDULES, GemmConfig
from ..runtime import driver
from ..tools import trace, tracing
from . import options
from .options import SHAPE_OPTIONS


#: the command's --help text (its one-line summary is in ptxgemm/cli/main.py's table)
DESCRIPTION = ("Run the GEMM once with GemmConfig(trace=True) and write what every warpgroup did "
               "and when: trace.json.gz (Chrome trace / Perfetto: a process per SM, a track per "
               "role), summary.json, sm<N>.png and overview.png (with the 'plot' extra); then "
               "time the traced kernel against the untraced one. --compare pingpong,cooperative "
               "traces the selection's pick of each schedule and draws them one above the other "
               "in compare.png. Needs an sm_90 GPU.")


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
    p.add_argument("--compare", default=None, metavar="SCHEDULE,SCHEDULE",
                   help=f"trace, instead of the config the options name, the selection's pick of each of these "
                        f"schedules ({', '.join(SCHEDULES)}) for the problem and its dtypes (split-K where the "
                        f"selection splits), and draw them one above the other in compare.png (e.g. --compare "
                        f"pingpong,cooperative; no tile option with it; default: off)")
    p.add_argument("--sm-count", type=int, default=1,
                   help="SMs each panel of compare.png draws, those whose CTAs finished around the median time "
                        "(default 1)")
    p.add_argument("--window-us", type=float, default=None,
                   help="also write compare_zoom.png: this many microseconds around the middle of the kernels, the "
                        "same stretch in every panel (default: none)")
    group = p.add_argument_group("GEMM configuration (default: ptxgemm's selection for the shape, as run() would "
                                 "pick it, the transposed-store picks passed over)")
    options.add_config_tag_argument(group)
    options.add_config_arguments(group)


def _configs(args) -> tuple[GemmConfig, list, list]:
    """(the first config to trace, the compared schedules' other picks, the --also variants of the first)."""
    if not args.compare:
        named = options.named_config(args)
        config = named[0] if named is not None else tracing.selected_config(args.m, args.n, args.k,
                                                                            options.operand_fields(args))
        return config, [], [tracing.config_variant(config, spec) for spec in args.also]
    schedules = [s.strip() for s in args.compare.split(",") if s.strip()]
    if len(schedules) < 2 or len(set(schedules)) != len(schedules) or not set(schedules) <= set(SCHEDULES):
        raise ConfigError(f"--compare: must name two or more of {', '.join(SCHEDULES)}, each once "
                          f"(e.g. pingpong,cooperative), got {args.compare!r}")
    tile = options.given(args, options.TILE_OPTIONS) + (["--config"] if args.config is not None else [])
    if tile:
        raise ConfigError(f"--compare: the selection picks each schedule's tile, so {', '.join(tile)} cannot be "
                          f"given with it (leave them out, or trace one config with --also variants)")
    first, *others = tracing.schedule_picks(args.m, args.n, args.k, options.operand_fields(args), schedules)
    return first, others, [tracing.config_variant(first, spec) for spec in args.also]


def run(args) -> int:
    for dim in SHAPE_OPTIONS:
        if getattr(args, dim) < 1:
            raise ConfigError(f"--{dim}: must be >= 1, got {getattr(args, dim)}")
    if args.rounds < 0 or args.sets < 1:
        raise ConfigError(f"--rounds must be >= 0 and --sets >= 1, got {args.rounds} and {args.sets}")
    if args.sm_count < 1 or (args.window_us is not None and args.window_us <= 0):
        raise ConfigError(f"--sm-count must be >= 1 and --window-us > 0, got {args.sm_count} and {args.window_us}")
    config, compared, variants = _configs(args)   # bad specs and schedules fail before the GPU
    reason = driver.no_device_reason()
    if reason is not None:
        raise ConfigError(f"trace runs the kernel, so it needs an sm_90 GPU (H100/H200), and there is none here: "
                          f"{reason.rstrip('.')}. `python -m ptxgemm dump` shows the traced build without one (add --trace)")
    out = options.check_output_dir(args.out)   # an unusable --out: a one-line error before the launch
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
    for variant in compared + variants:
        other = tracing.record(args.m, args.n, args.k, variant, ctas=args.ctas, seed=args.seed)
        print(f"\n{'--compare' if variant in compared else '--also'} {variant.describe()}: check {other.verdict}")
        print(trace.format_summary(other.trace.summary()))
        others.append(other)
        entry = {"meta": other.trace.meta, "summary": other.trace.summary(), "event_ms": other.event_ms,
                 "span_vs_events": tracing.span_agreement(other), "check_ok": other.verdict.ok,
                 "traced_build": other.ptxas}
        if args.rounds and variant in compared:   # a compared schedule's own tracing cost
            ovh = tracing.overhead(args.m, args.n, args.k, variant, rounds=args.rounds, sets=args.sets, seed=args.seed)
            print(ovh)
            entry["overhead"] = ovh.as_dict()
        result.setdefault("also", []).append(entry)
    t.to_chrome(out / "trace.json.gz")
    written = ["trace.json.gz"]
    for i, other in enumerate(others, 1):
        name = f"trace_{i}_{other.trace.meta['tag']}.json.gz"
        other.trace.to_chrome(out / name)
        written.append(name)
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
            traces, labels = [t] + [o.trace for o in others], [r.trace.meta["config"] for r in [rec] + others]
            trace.plot_compare(traces, out / "compare.png", labels=labels, sm_count=args.sm_count)
            written.append("compare.png")
            if args.window_us:
                trace.plot_compare(traces, out / "compare_zoom.png", labels=labels, sm_count=args.sm_count,
                                   window_ns=int(args.window_us * 1e3))
                written.append("compare_zoom.png")
    with open(out / "summary.json", "w") as f:
        json.dump(result, f, indent=1, default=str)
    written.append("summary.json")
    print(f"wrote {', '.join(written)} to {out}")
    return 0 if rec.verdict.ok and all(o.verdict.ok for o in others) else 1
