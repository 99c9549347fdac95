"""`python -m ptxgemm tune`: every candidate config of a problem run, checked and timed on the GPU; the fastest
stored in the tune cache."""
from __future__ import annotations

import dataclasses
import json

from .. import tuning
from ..errors import ConfigError
from ..kernel.tile import TAG_SCHEDULE
from ..runtime import driver
from ..select import tiles
from ..select.problem import Problem
from .options import add_problem_arguments, problem_args


#: the command's --help text (its one-line summary is in ptxgemm/cli/main.py's table)
DESCRIPTION = ("Run every candidate config once and check its result on sampled rows against "
               "float64 (a wrong one is reported and never chosen), time the rest together "
               "(ptxgemm.runtime.timing: L2 flushed before each launch, interleaved rounds, median) and "
               "store the winner in <cache dir>/tune.json, where select_config finds it "
               "(PTXGEMM_TUNE_CACHE=off disables both). Needs an sm_90 GPU. Exit status 1 when a "
               "candidate failed to run or produced a wrong result.")


def add_arguments(p) -> None:
    add_problem_arguments(p)
    tags = [f"{TAG_SCHEDULE[sched]}{bm}x{bn}" for sched, bm, bn in tiles.CANDIDATE_TILES]
    p.add_argument("--candidates", default=None, metavar="TAG,TAG,...",
                   help="configs to try, as GemmConfig tags <pp|coop><block_m>x<block_n>[c2] (e.g. "
                        f"{tags[0]},{tags[-3]}c2) (default: select's candidates: every one of {', '.join(tags)}, "
                        f"with and without c2, that GemmConfig accepts)")
    p.add_argument("--scaling", default=None, choices=tuning.SCALINGS,
                   help="block: fp8 with blockwise scales (1x128 per row of A, 128x128 per block of B): the blockwise "
                        "tiles and split counts are the candidates, and the winner is stored for blockwise calls "
                        "only (default: none, the plain GEMM)")
    p.add_argument("--rounds", type=int, default=20, help="interleaved timing rounds, >= 1 (default 20)")
    p.add_argument("--method", default="burst", choices=tuning.METHODS,
                   help=f"burst: each launch alone after an L2 flush (the bench's method); b2b: windows of "
                        f"{tuning.B2B_LAUNCHES} launches back to back, as a model's step runs them (default burst)")
    p.add_argument("--no-store", action="store_true", help="do not write the tune cache (default: store the winner)")
    p.add_argument("--seed", type=int, default=0, help="random operands' seed (default 0)")
    p.add_argument("--check-rows", type=int, default=tuning.CHECK_ROWS,
                   help=f"rows checked against float64, >= 1 (default {tuning.CHECK_ROWS})")
    p.add_argument("--json", default=None, metavar="PATH",
                   help="also write the winner and every candidate's record as JSON here (default: none)")


def run(args) -> int:
    problem = Problem(*problem_args(args))  # bad arguments fail before the GPU question
    for name in ("rounds", "check_rows"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')}: must be >= 1, got {getattr(args, name)}")
    tuning.candidate_configs(problem, args.candidates, args.scaling)   # checks the tags and the scaling
    reason = driver.no_device_reason()
    if reason is not None:
        raise ConfigError(f"tune runs the kernel, so it needs an sm_90 GPU (H100/H200), and there is none here: "
                          f"{reason.rstrip('.')}. `python -m ptxgemm select` shows the cost model's choice without one")
    winner, records = tuning.tune(*problem_args(args), candidates=args.candidates, rounds=args.rounds,
                                  store=not args.no_store, progress=lambda line: print(line, flush=True),
                                  seed=args.seed, check_rows=args.check_rows, scaling=args.scaling,
                                  method=args.method)
    if args.json:
        info = driver.device_info()
        with open(args.json, "w") as f:
            json.dump({"gpu": info.name, "sm_count": info.sm_count, "driver": info.driver_version_str,
                       "problem": dataclasses.asdict(problem), "scaling": args.scaling, "winner": winner.tag,
                       "rounds": args.rounds, "method": args.method,
                       "candidates": records}, f, indent=1)
    return 0 if all(r["ok"] for r in records) else 1  # a candidate that failed or computed wrong is a bug
