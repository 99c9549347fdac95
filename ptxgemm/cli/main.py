"""ptxgemm's command line (installed with the wheel: `python -m ptxgemm` or `ptxgemm`).

    python -m ptxgemm --version
    python -m ptxgemm demo [--m M --n N --k K]
    python -m ptxgemm info [--json]
    python -m ptxgemm dump [--kernel gemm] --m M --n N --k K [--config TAG | GEMM config options] --out DIR
    python -m ptxgemm dump --kernel swizzle_probe [--mode 128B] [--rows R] [--cols C] --out DIR
    python -m ptxgemm select --m M --n N --k K [--in-dtype D --out-dtype D --a-major X --b-major X] [--sm-count N]
    python -m ptxgemm tune --m M --n N --k K [--in-dtype D --out-dtype D --a-major X --b-major X]
                           [--candidates TAG,TAG,...] [--rounds R] [--no-store] [--json PATH]
    python -m ptxgemm bench [--quick] [--shapes MxNxK,...] [--variants TAG,...] [--out DIR --name RUN]
    python -m ptxgemm bench --in-dtype float8_e4m3fn|float8_e5m2 [--scaling tensor|row|block] [--quick] [...]
    python -m ptxgemm bench --epilogue bias-gelu|bias-relu|bias-silu [--in-dtype D [--scaling tensor|row]] [...]
    python -m ptxgemm bench --summarize FILE... [--summarize-out F.json]
    python -m ptxgemm bench --host [--shape MxNxK] [--run-shape MxNxK] [--calls N] [--repeats R] [--json PATH]
    python -m ptxgemm trace --m M --n N --k K [GEMM config options] --out DIR
    python -m ptxgemm mutants [--preset default --preset cluster | GEMM config options] [--list] [--json PATH]
    python -m ptxgemm fuzz [--cases N] [--seed S] [--out DIR] [--emulate] [--max-flops F] [--no-shrink]
    python -m ptxgemm swizzle-probe [--simulate] [--mode 128B|all] [--direction both] [--rows R] [--cols C] [--json]
    python -m ptxgemm bank-conflicts --op OP --addresses A0,A1,... | --pattern stmatrix-tile | --kernel [...]

No GPU needed: `dump` (renders the PTX, assembles it with ptxas, writes PTX, cubin, SASS and report.json, and says
what M, N and K decide), `select` (the config select_config picks and the cost model's table), `info` (the
toolchain, the cubin cache directory and the GPU, if there is one), `bench --summarize`, `mutants --list`,
`swizzle-probe --simulate`, `fuzz --emulate` and `bank-conflicts`. `tune` runs every candidate on the GPU, checks
and times them, and stores the winner in the tune cache, where select finds it. Each command's --help gives every
option's default. Errors are one line on stderr (ptxas failures add ptxas's own log) and exit status 2. bench,
fuzz, swizzle-probe and bank-conflicts bring their own subparsers (bench_cli, fuzz, swizzle_cli, bank_cli); the
work of every command lives in a module of its own (dump, bench, bench_modes, bench_summary, host_cost, probes, banks, mutants, tracing, tuning, ...).

The parser lives here; each command is a module of ptxgemm/cli/ with `add_parser(sub)` and its `cmd_*`; errors
become one line on stderr and exit status 2 here alone.
"""
from __future__ import annotations

import argparse
import sys

from .. import __version__
from ..errors import PtxgemmError
from . import bank_probe, banks, bench, demo, dump, fuzz, info, mutants, select, swizzle, trace, tune
from .banks import glue_address_list

PROG = "python -m ptxgemm"

#: every command, one module each: add_parser(sub) adds its subparser, whose `func` runs it
COMMANDS = (demo, info, dump, select, tune, bench, trace, mutants, fuzz, swizzle, banks, bank_probe)


class Parser(argparse.ArgumentParser):
    """argparse's errors (a missing option, an invalid choice) as one line on stderr and exit status 2, like every
    other bad input; argparse's own way adds the usage text, which buries the one line that matters."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog=PROG, description="ptxgemm: Hopper GEMM from PTX templates. Every command's --help lists "
                                           "its options with their defaults.")
    parser.add_argument("--version", action="version", version=f"ptxgemm {__version__}",
                        help="print 'ptxgemm <version>' and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:   # the order of `--help`
        command.add_parser(sub)
    return parser


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    # bank-conflicts' --addresses may start with '-' (a negative address), which argparse would take for an option;
    # no other command has --addresses, so the rewrite touches nothing else
    args = parser.parse_args(glue_address_list(argv))
    try:
        return args.func(args)
    except PtxgemmError as e:
        print(f"{PROG} {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
