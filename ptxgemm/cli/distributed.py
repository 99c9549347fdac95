"""`python -m ptxgemm distributed`'s options and the launch of its ranks; the benchmark (issue 50: Llama tensor
parallel and FSDP2, Mixtral FSDP2, stock against ptxgemm on two GPUs) is ptxgemm/bench/distributed.py.

Run as it is, the command starts its own ranks: torchrun (`python -m torch.distributed.run --standalone`) with
`--gpus` processes, each running this command again with the options checked and spelled out, NVLink multicast off
in their environment (ptxgemm.bench.ranks.SAFE_ENV). Started by torchrun already (`torchrun --nproc-per-node 2 -m
ptxgemm distributed ...`), it is a rank itself and runs the benchmark."""
from __future__ import annotations

import dataclasses
import re

from ..bench import distributed as bench_dist
from ..bench import ranks
from ..bench.distributed import CONFIGS, MODES, QUICK, Sizes
from ..bench.transformer_models import parse_list
from ..errors import ConfigError
from .options import flag

DEFAULT = Sizes()
#: the options that set a Sizes field of the same name (None: the default's, or --quick's)
SIZE_HELP = {
    "layers": "decoder layers",
    "batch": "training sequences per rank per step (tensor parallel: every rank runs the same ones)",
    "seq": "tokens per training sequence",
    "accuracy_batch": "sequences of the accuracy pass, over all ranks (a multiple of --gpus)",
    "accuracy_seq": "tokens per sequence of the accuracy pass",
    "iters": "timed training steps per window (and as many untimed before it)",
    "repeats": "windows per peer and mode, the peers' order alternating",
}

DESCRIPTION = ("Train transformers' Llama (Llama-3-8B's widths) tensor parallel and under FSDP2, and the "
               "Mixtral-shaped MoE under FSDP2, on --gpus GPUs (default 2), stock and with ptxgemm's GEMMs under the "
               "same parallelism: the loss's, logits' and gradients' relative errors against a single-GPU run of the "
               "same weights, then training-step tokens/s eager and with each decoder layer compiled, min/median/max "
               "over repeats. Writes distributed_<gpu>_<parallel>_<model>_<mode>[_<name>].json per configuration "
               "and mode and prints a table; exit status 1 if a mode failed. Starts its own ranks through torchrun "
               "(or runs as one where torchrun started it). Needs torch, transformers and the GPUs; one "
               "configuration takes one to two minutes, torch.compile most of it (--modes eager skips it).")


def add_arguments(p) -> None:
    p.add_argument("--config", default="all", metavar="CONFIG,...",
                   help=f"which of {', '.join(CONFIGS)} (or all) (default all)")
    p.add_argument("--gpus", type=int, default=2, help="ranks, one GPU each (default 2)")
    p.add_argument("--modes", default=",".join(MODES), metavar="MODE,...",
                   help=f"eager and/or compiled (each decoder layer nn.Module.compile'd, dynamic=False) (default "
                        f"{','.join(MODES)})")
    for field, what in SIZE_HELP.items():
        p.add_argument(flag(field), type=int, default=None,
                       help=f"{what} (default {getattr(DEFAULT, field)}; {getattr(QUICK, field)} with --quick)")
    p.add_argument("--quick", action="store_true",
                   help=f"smoke-test sizes: {QUICK.layers} layer, {QUICK.batch} x {QUICK.seq} tokens per rank, "
                        f"{QUICK.iters} steps per window (the widths stay the models') (default off)")
    p.add_argument("--out", default=None,
                   help="directory for the JSON files (default docs/results/<gpu>/distributed)")
    p.add_argument("--name", default=None,
                   help="run name appended to the file names, letters, digits, '.', '_' or '-' (default: none)")


def check_name(args) -> None:
    if args.name is not None and not re.fullmatch(r"[\w.-]+", args.name):
        raise ConfigError(f"--name: letters, digits, '.', '_' or '-' only, got {args.name!r}")


def sizes_from(args) -> Sizes:
    base = QUICK if args.quick else DEFAULT
    given = {f: getattr(args, f) for f in SIZE_HELP if getattr(args, f) is not None}
    return bench_dist.check_sizes(dataclasses.replace(base, **given), args.gpus)


def rank_argv(args, configs, modes, sizes: Sizes) -> list[str]:
    """The command line each rank runs: this command with every option checked and spelled out."""
    argv = ["-m", "ptxgemm", "distributed", "--config", ",".join(configs), "--gpus", str(args.gpus), "--modes",
            ",".join(modes)]
    for field in SIZE_HELP:
        argv += [flag(field), str(getattr(sizes, field))]
    if args.out is not None:
        argv += ["--out", args.out]
    if args.name is not None:
        argv += ["--name", args.name]
    return argv


def run(args) -> int:
    configs = bench_dist.parse_configs(args.config)
    modes = parse_list(args.modes, MODES, "--modes")
    check_name(args)
    sizes = sizes_from(args)
    if not ranks.in_rank():
        return ranks.launch(args.gpus, rank_argv(args, configs, modes, sizes))
    return run_rank(args, configs, modes, sizes)


def run_rank(args, configs, modes, sizes: Sizes) -> int:
    """One rank's run: every configuration in turn; rank 0 writes the files and prints the table."""
    torch, dist, mesh = ranks.init("cuda")
    rank = dist.get_rank()
    rows, failures = [], []
    for config in configs:
        arch, parallel = CONFIGS[config]
        got, errors = bench_dist.run_config(torch, dist, mesh, arch, parallel, sizes, modes=modes,
                                            log=lambda s: print(s, flush=True))
        failures += [{"config": config, **e} for e in errors]
        rows += got
        if rank == 0:
            for row in got:
                path = bench_dist.write_row(row, args.out or bench_dist.default_out(row["gpu"]), args.name)
                print(f"wrote {path}", flush=True)
    if rank == 0:
        print(bench_dist.format_table(rows))
        for f in failures:
            print(f"FAILED {f['config']} {f['mode']}: {f['error']}")
    dist.barrier()
    dist.destroy_process_group()
    return 1 if failures else 0
