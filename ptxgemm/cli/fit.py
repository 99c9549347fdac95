"""`python -m ptxgemm fit`: the cost model's constants refitted from measured runs (ptxgemm.select.fitting)."""
from __future__ import annotations

import json
from pathlib import Path

from ..errors import ConfigError

#: the command's --help text (its one-line summary is in ptxgemm/cli/main.py's table)
DESCRIPTION = ("Refit the selection's cost model from runs: 'tiles' fits each config tag's k-tile and epilogue costs "
               "(KTILE_NS, EPILOGUE_NS) to bench runs with --variants or a tune cache; 'memory' fits the memory "
               "model and the transposed tiles' costs (needs scipy). Prints what to paste into "
               "ptxgemm/select/tile_costs.py (tiles) or memory_model.py (memory). No GPU needed.")


def add_arguments(p) -> None:
    p.add_argument("what", choices=("tiles", "memory"), help="which constants to fit")
    p.add_argument("files", nargs="+", help="bench JSON files (python -m ptxgemm bench --variants ...) or, for "
                                            "'tiles', a tune cache (tune.json)")
    p.add_argument("--sm-count", type=int, default=132,
                   help="SMs of the GPU the files were measured on, >= 1 (default 132)")
    p.add_argument("--json", default=None, help="also write the fit here (default: none)")


def run(args) -> int:
    from ..select import fitting

    if args.sm_count < 1:
        raise ConfigError(f"--sm-count: must be >= 1, got {args.sm_count}")
    if args.what == "tiles":
        result = fitting.fit_tiles(args.files, args.sm_count)
        for tag, (kt, epi, err, shapes) in result.items():
            print(f"{tag:<16} k-tile {kt:8.1f} ns  epilogue {epi:7.0f} ns  RMS log error {err:.3f}  ({shapes} shapes)")
        print("KTILE_NS = {" + ", ".join(f'"{t}": {v[0]:.0f}' for t, v in result.items()) + "}")
        print("EPILOGUE_NS = {" + ", ".join(f'"{t}": {v[1]:.0f}' for t, v in result.items()) + "}")
    else:
        result = fitting.fit_memory(args.files, args.sm_count)
        print(f"# {result['gpu']}: {result['samples']} samples, RMS log error {result['rms_log_error']:.3f}")
        for name, v in result.items():
            if name not in ("gpu", "samples", "rms_log_error"):
                print(f"{name:<24} {v:10.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0
