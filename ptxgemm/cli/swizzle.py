"""`python -m ptxgemm swizzle-probe`: where does TMA put my bytes? Ask the hardware, and compare with the model.

store: shared element i holds i; one TMA store with the swizzle writes the tile to global memory.
       grid[r][c] = the shared-memory linear index whose value landed at global (r, c).
load : global element i holds i; one TMA load with the swizzle fills shared memory, which is copied out linearly.
       grid[r][c] = the global linear index whose value landed at shared-memory position r*cols + c.

Rows are printed one per line with 16-byte chunks separated by '|', so the chunk permutation shows at a glance.
Exits 1 if the hardware disagrees with the model anywhere, 2 on bad input. The probe itself is ptxgemm/tools/probes.py,
the model ptxgemm/kernel/swizzle.py; this module only parses and prints.

  python -m ptxgemm swizzle-probe --mode all --direction both
  python -m ptxgemm swizzle-probe --simulate --mode 128B --rows 8 --cols 64 --direction both --json
"""
from __future__ import annotations

import json
import sys

import numpy as np

from ..errors import ConfigError
from ..kernel.swizzle import MODES, format_grid, tile_grid
from ..runtime import driver
from ..tools.probes import DIRECTIONS, check_tile, default_cols, run_swizzle_probe


#: the command's --help text (its one-line summary is in ptxgemm/cli/main.py's table)
DESCRIPTION = ("Where does TMA put my bytes? Run one TMA store and one TMA load of a tile of "
               "16-bit indices with the swizzle and compare where they landed with "
               "ptxgemm.kernel.swizzle's model. Exit status 1 when the hardware disagrees anywhere, 2 "
               "on bad input or without a GPU (unless --simulate).")


def add_arguments(p) -> None:
    p.add_argument("--mode", default="128B",
                   help=f"swizzle mode: {', '.join(MODES)} or all (default 128B)")
    p.add_argument("--direction", default="both", help="TMA store, load or both (default both)")
    p.add_argument("--rows", type=int, default=8, help="tile rows, 1..256 (default 8)")
    p.add_argument("--cols", type=int, default=None,
                   help="tile columns of 16-bit elements (default: one swizzle span, 64 for 128B and none)")
    p.add_argument("--simulate", action="store_true",
                   help="no GPU: print the model's prediction (default off: probe the hardware)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON list of {mode, direction, rows, cols, grid} (default off: the grids as text)")


def plan(args) -> list[tuple[str, str, int, int]]:
    """The (mode, direction, rows, cols) cases to run; raises ConfigError on bad input."""
    if args.mode != "all" and args.mode not in MODES:
        raise ConfigError(f"--mode: must be one of {', '.join(MODES)} or all, got {args.mode!r}")
    if args.direction not in (*DIRECTIONS, "both"):
        raise ConfigError(f"--direction: must be store, load or both, got {args.direction!r}")
    modes = MODES if args.mode == "all" else (args.mode,)
    directions = DIRECTIONS if args.direction == "both" else (args.direction,)
    cases = []
    for mode in modes:
        cols = args.cols if args.cols is not None else default_cols(mode)
        check_tile(mode, args.rows, cols)
        cases.extend((mode, d, args.rows, cols) for d in directions)
    return cases


def run(args) -> int:
    cases = plan(args)
    if not args.simulate:
        reason = driver.no_device_reason()
        if reason is not None:
            raise ConfigError(f"no GPU to probe ({reason}); use --simulate for the model's prediction")
    results, mismatches = [], 0
    for mode, direction, rows, cols in cases:
        model = tile_grid(rows, cols, mode)
        grid = model if args.simulate else run_swizzle_probe(mode, direction, rows, cols)
        bad = 0 if args.simulate else int(np.count_nonzero(grid != model))
        mismatches += bad
        results.append({"mode": mode, "direction": direction, "rows": rows, "cols": cols,
                        "grid": grid.tolist(), "mismatches": bad})
    if args.json:
        print(json.dumps([{k: r[k] for k in ("mode", "direction", "rows", "cols", "grid")} for r in results]))
    else:
        for r in results:
            if args.simulate:  # nothing was measured: say so, rather than compare the model with itself
                verdict = "the model's prediction (simulated; no hardware was probed)"
            else:
                verdict = ("hardware, matches the model" if r["mismatches"] == 0
                           else f"hardware, {r['mismatches']} MISMATCHES vs the model")
            print(f"== {r['mode']} swizzle, TMA {r['direction']}, {r['rows']}x{r['cols']} x 16-bit: {verdict}")
            print(format_grid(np.array(r["grid"])))
            print()
    if mismatches:
        print(f"swizzle-probe: {mismatches} element(s) differ from ptxgemm.kernel.swizzle's model", file=sys.stderr)
        return 1
    return 0
