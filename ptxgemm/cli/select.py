"""`python -m ptxgemm select`: the config ptxgemm picks for a problem and the cost model's table (no GPU needed)."""
from __future__ import annotations

import json

from ..errors import ConfigError
from ..select import cost_model as select
from .options import add_problem_arguments, problem_args


#: the command's --help text (its one-line summary is in ptxgemm/cli/main.py's table)
DESCRIPTION = ("Print the config select_config picks (the tune cache's winner for this GPU, or "
               "else the cost model's) and the cost model's table of candidates, fastest first. "
               "No GPU needed: without one the model assumes 132 SMs.")


def add_arguments(p) -> None:
    add_problem_arguments(p)
    p.add_argument("--sm-count", type=int, default=None,
                   help="model a GPU with this many SMs, >= 1 (default: the GPU's own count, or 132 without one); "
                        "skips the tune cache, which is keyed by a real GPU")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table (default: the table)")


def run(args) -> int:
    device = None
    if args.sm_count is not None:
        if args.sm_count < 1:
            raise ConfigError(f"--sm-count: must be >= 1, got {args.sm_count}")
        device = select.DeviceModel(f"model with {args.sm_count} SMs", args.sm_count)
    device = select.resolve_device(device)
    config, source = select.choose(*problem_args(args), device=device)
    rows = select.explain(*problem_args(args), device=device)
    if args.json:
        print(json.dumps({"config": config.tag, "source": source, "description": config.describe(),
                          "device": {"name": device.name, "sm_count": device.sm_count}, "candidates": rows}, indent=1))
        return 0
    print(f"{config.tag}  ({source}; {device.name}, {device.sm_count} SMs)")
    print(f"  {config.describe()}")
    print(select.format_table(rows, chosen=config.tag))
    return 0
