"""`python -m ptxgemm bench`'s options and their checks; the benchmark is ptxgemm/bench.py, --summarize
ptxgemm/bench_summary.py."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

from .errors import ConfigError


def add_parser(sub) -> None:
    from .bench import QUICK_SHAPES, SEED_M, SEED_N, SMALL_M_MAX, default_shapes

    p = sub.add_parser("bench", help="time ptxgemm against cuBLAS side by side (--summarize: summarize runs, no GPU)",
                       description="Time ptxgemm and cuBLAS (torch.matmul, else CuPy) on the same shapes in one "
                                   "process with one method: L2 flushed before each launch, CUDA events around the "
                                   "launch, interleaved rounds, median. ptxgemm runs the config it selects itself, "
                                   "with the tune cache off unless --use-tune-cache. Writes bench_<gpu>[_<name>].json "
                                   "and .png. Needs an sm_90 GPU, except --summarize.")
    p.add_argument("--quick", action="store_true",
                   help=f"{len(QUICK_SHAPES)} shapes and 7 rounds, about a minute (default off: the full suite of "
                        f"{len(default_shapes())} shapes, 25 rounds)")
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds, >= 1 (default 25, 7 with --quick)")
    p.add_argument("--shapes", default=None, metavar="MxNxK,...",
                   help="MxNxK,MxNxK,... instead of the suite (default: the suite: seed K sweep, square/LLM, small-M); "
                        f"grouped for geomeans as seed_sweep (M,N = {SEED_M},{SEED_N}), small_m (M <= {SMALL_M_MAX}) "
                        "or square_llm")
    p.add_argument("--out", default="bench_out",
                   help="directory for bench_<gpu>[_<name>].json and .png (default bench_out)")
    p.add_argument("--name", default=None,
                   help="run name in the file names, letters, digits, '.', '_' or '-' (default: none, "
                        "bench_<gpu>.json)")
    p.add_argument("--config", default=None, metavar="TAG",
                   help="run this fixed ptxgemm config instead of the library's selection, as a GemmConfig tag "
                        "<pp|coop><block_m>x<block_n>[c2], e.g. pp128x128 or coop256x128c2 (a bare 128x192 means "
                        "pingpong) (default: none, i.e. GemmPlan's own selection)")
    p.add_argument("--variants", default="", metavar="TAG,...",
                   help="extra fixed ptxgemm configs timed in the same rounds, as tags, e.g. pp128x192,coop256x128c2 "
                        "(reported per row under 'variants'; default: none)")
    p.add_argument("--use-tune-cache", action="store_true",
                   help="let the selection use the tune cache (default off: the bench sets PTXGEMM_TUNE_CACHE=off "
                        "so it measures the untuned heuristic)")
    p.add_argument("--summarize", nargs="+", default=None, metavar="FILE",
                   help="summarize bench JSON files instead of running (no GPU needed): per GPU, per shape and per "
                        "geomean group, min/median/max of the ratio across the runs (default: run the bench)")
    p.add_argument("--summarize-out", default=None, metavar="F.json",
                   help="with --summarize: also write the summary as JSON here (default: print only)")
    p.set_defaults(func=cmd_bench)


def _tags(option: str, specs) -> list:
    from .bench import parse_tag

    try:
        return [parse_tag(s) for s in specs]
    except ConfigError as e:
        raise ConfigError(f"{option}: {e}") from None


def cmd_bench(args) -> int:
    # First of all: every selection in this process reads it (on every plan), and the bench decides it for its own
    # process so that it measures the untuned heuristic unless told otherwise.
    os.environ["PTXGEMM_TUNE_CACHE"] = tune_cache = "on" if args.use_tune_cache else "off"
    from . import bench, bench_summary

    if args.summarize_out and not args.summarize:
        raise ConfigError("--summarize-out: only with --summarize")
    if args.summarize:
        summary = bench_summary.summarize(bench_summary.read_runs(args.summarize))
        print(bench_summary.format_summary(summary))
        if args.summarize_out:
            Path(args.summarize_out).write_text(json.dumps(summary, indent=1))
            print(f"wrote {args.summarize_out}")
        return 0
    if args.rounds is not None and args.rounds < 1:
        raise ConfigError(f"--rounds: must be >= 1, got {args.rounds}")
    if args.name is not None and not re.fullmatch(r"[\w.-]+", args.name):
        raise ConfigError(f"--name: letters, digits, '.', '_' or '-' only, got {args.name!r}")
    shapes = (bench.parse_shapes(args.shapes) if args.shapes else
              list(bench.QUICK_SHAPES) if args.quick else bench.default_shapes())
    config = _tags("--config", [args.config])[0] if args.config else None
    variants = _tags("--variants", filter(None, args.variants.split(",")))
    rounds = args.rounds or (7 if args.quick else 25)
    return bench.run_bench(shapes, rounds, config, variants, out=args.out, name=args.name, tune_cache=tune_cache)
