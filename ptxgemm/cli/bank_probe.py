"""`python -m ptxgemm bank-probe`: the bank-conflict model checked against ncu's counters on the GPU
(ptxgemm.tools.bank_probe); --list needs no GPU."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Sequence

from ..tools.bank_patterns import Pattern, all_patterns, epilogue_patterns, select_patterns
from ..tools.bank_probe import MeasureError, measure, results_markdown, run_patterns


def list_table(patterns: Sequence[Pattern]) -> str:
    rows = [f"{'group':<12} {'op':<18} {'pred':>4} {'ideal':>5}  pattern"]
    for p in patterns:
        r = p.simulate()
        rows.append(f"{p.group:<12} {p.op:<18} {r.wavefronts:>4} {r.ideal:>5}  {p.name}")
    return "\n".join(rows)


#: the command's --help text (its one-line summary is in ptxgemm/cli/main.py's table)
DESCRIPTION = ("Run one warp of each shared-memory access pattern under ncu and compare its "
               "wavefronts with ptxgemm's bank-conflict model (docs/bank_conflicts.md). --list "
               "prints the patterns and predictions without a GPU; --measure needs an sm_90 GPU "
               "and ncu, and exits 1 on any mismatch.")


def add_arguments(p) -> None:
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--list", action="store_true", help="print the patterns and predictions, no GPU (default off; one of --list, --run, --measure is required)")
    mode.add_argument("--run", action="store_true", help="run every pattern once: what --measure profiles under ncu (default off)")
    mode.add_argument("--measure", action="store_true", help="profile --run with ncu and compare with the model (default off)")
    p.add_argument("--only", help="only patterns whose name contains this text (default: all)")
    p.add_argument("--manifest", type=Path, help="--run: write the launched patterns and device facts here (default: none)")
    p.add_argument("--results", type=Path, help="--measure: write the markdown table here (default: none)")
    p.add_argument("--ncu", help="--measure: the ncu executable (default: PATH, then /usr/local/cuda/bin/ncu)")


def run(args) -> int:
    if args.list:
        _, missing = epilogue_patterns()
        print(list_table(select_patterns(all_patterns(), args.only)))
        if missing:
            print(f"note: {missing}", file=sys.stderr)
        return 0
    if args.run:
        patterns = select_patterns(all_patterns(), args.only)
        facts = run_patterns(patterns)
        if args.manifest:
            args.manifest.write_text(json.dumps({**facts, "patterns": [p.name for p in patterns]}))
        print(f"ran {len(patterns)} bank-conflict patterns on {facts['gpu']}")
        return 0
    try:
        measurements, facts = measure(args.only, args.ncu)
    except MeasureError as exc:
        print(f"bank_probe: error: {exc}", file=sys.stderr)
        return 2
    report = results_markdown(measurements, facts)
    print(report)
    if args.results:
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(report)
    _, missing = epilogue_patterns()
    if missing:
        print(f"bank_probe: warning: {missing}", file=sys.stderr)
    return 0 if all(m.ok for m in measurements) else 1
