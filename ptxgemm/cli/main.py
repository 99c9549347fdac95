"""ptxgemm's command line (installed with the wheel: `python -m ptxgemm` or `ptxgemm`): the top-level parser and
the dispatch to one module per command.

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
    python -m ptxgemm bench --set training [--quick | --tokens 4096,16384 --models NAME,...] [--variants TAG,...]
    python -m ptxgemm bench --summarize FILE... [--summarize-out F.json]
    python -m ptxgemm bench --host [ways|layer] [--shape MxNxK] [--run-shape MxNxK] [--calls N] [--repeats R]
                            [--json PATH]
    python -m ptxgemm trace --m M --n N --k K [GEMM config options] --out DIR
    python -m ptxgemm mutants [--preset default --preset cluster | GEMM config options] [--list] [--json PATH]
    python -m ptxgemm fuzz [--cases N] [--seed S] [--out DIR] [--emulate] [--max-flops F] [--no-shrink]
    python -m ptxgemm swizzle-probe [--simulate] [--mode 128B|all] [--direction both] [--rows R] [--cols C] [--json]
    python -m ptxgemm bank-conflicts --op OP --addresses A0,A1,... | --pattern stmatrix-tile | --kernel [...]
    python -m ptxgemm bank-probe --list | --run | --measure [--only TEXT] [--results F.md] [--ncu PATH]
    python -m ptxgemm model [--arch llama|mixtral|qwen2-0.5b|qwen2-1.5b|both|all] [--sweep] [--layers N]
                            [--modes eager,compiled] [--phases prefill,train,decode] [--repeats R]
                            [--reference fp32|first|none] [--out DIR] [--name RUN] [--quick]
    python -m ptxgemm distributed [--config llama-tp,llama-fsdp,mixtral-fsdp] [--gpus 2] [--modes eager,compiled]
                                  [--layers N] [--batch B --seq S] [--repeats R] [--out DIR] [--name RUN] [--quick]

No GPU needed: `dump` (renders the PTX, assembles it with ptxas, writes PTX, cubin, SASS and report.json, and says
what M, N and K decide), `select` (the config select_config picks and the cost model's table), `info` (the
toolchain, the cubin cache directory and the GPU, if there is one), `bench --summarize`, `mutants --list`,
`swizzle-probe --simulate`, `fuzz --emulate`, `bank-conflicts` and `bank-probe --list`. `tune` runs every candidate
on the GPU, checks and times them, and stores the winner in the tune cache, where select finds it. Each command's
--help gives every option's default. Errors are one line on stderr (ptxas failures add ptxas's own log) and exit
status 2. A reader that closes the pipe early (`... | head -1`) ends the command quietly, with status 141.

Each command is a module of ptxgemm/cli/ (COMMANDS below) with
    DESCRIPTION                 the text of its --help
    add_arguments(parser)       its options
    run(args) -> int            the command itself; its return value is the exit status
    prepare_argv(argv) -> list  optional: rewrites the command line before argparse sees it
The work itself lives in the library (ptxgemm.tools, ptxgemm.bench, ptxgemm.select, ...); a command module parses,
checks and prints. Only the module of the command that runs is imported, so `--version` and `--help` stay fast and
one command's imports (the GPU driver, the benchmark's peers) never load for another.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from types import ModuleType
from typing import Iterable, Sequence

from .. import __version__
from ..errors import PtxgemmError

PROG = "python -m ptxgemm"
#: the exit status when stdout's reader closed the pipe: a shell's for a process SIGPIPE ended (128 + 13)
PIPE_CLOSED_STATUS = 141

#: command -> (its module in ptxgemm/cli/, the one line `--help` shows for it), in the order of `--help`; the line
#: lives here, not in the module, so that listing the commands imports none of them
COMMANDS = {
    "demo": ("demo", "multiply random matrices on the GPU, check and time it (no GPU: build only)"),
    "info": ("info", "print the toolchain, the cache directory and the GPU"),
    "dump": ("dump", "write a kernel's PTX, cubin, SASS and report.json (no GPU needed)"),
    "select": ("select", "print the config ptxgemm picks for a problem and the cost model's table (no GPU needed)"),
    "tune": ("tune", "time the candidate configs of a problem on the GPU and store the fastest"),
    "fit": ("fit", "refit the selection's cost model from bench runs or a tune cache (no GPU needed)"),
    "bench": ("bench", "time ptxgemm against cuBLAS side by side (--summarize: summarize runs, no GPU)"),
    "trace": ("trace", "record a per-warpgroup timeline of one GEMM launch on the GPU"),
    "mutants": ("mutants", "delete or weaken each synchronization instruction and show the GPU catches it"),
    "fuzz": ("fuzz", "random calls of run/matmul/GemmPlan against float64; shrinks what fails (--emulate: the plan "
                     "emulator, no GPU)"),
    "swizzle-probe": ("swizzle", "run TMA's swizzle on the GPU and compare with ptxgemm's model (--simulate: the "
                                 "model alone, no GPU)"),
    "bank-conflicts": ("banks", "predict the shared-memory bank conflicts of one warp-wide instruction (no GPU "
                                "needed)"),
    "bank-probe": ("bank_probe", "check the bank-conflict model against ncu's counters (--list: no GPU)"),
    "model": ("model", "run transformers' Llama and Mixtral stock and with ptxgemm's GEMMs: accuracy and tokens/s "
                       "(issue 27; needs torch, transformers and a GPU)"),
    "distributed": ("distributed", "train Llama (tensor parallel, FSDP2) and Mixtral (FSDP2) on 2 GPUs, stock and "
                                   "with ptxgemm's GEMMs: accuracy against one GPU and tokens/s (issue 50)"),
}


class Parser(argparse.ArgumentParser):
    """argparse's errors (a missing option, an invalid choice) as one line on stderr and exit status 2, like every
    other bad input; argparse's own way adds the usage text, which buries the one line that matters."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def command_module(name: str) -> ModuleType:
    return importlib.import_module(f"{__package__}.{COMMANDS[name][0]}")


def build_parser(commands: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The whole parser: every command is listed, but only those in `commands` (all of them for None) get their
    module imported and their options added; the others' subparsers stay empty, which is all `--help` shows."""
    full = set(COMMANDS) if commands is None else set(commands)
    parser = Parser(prog=PROG, description="ptxgemm: Hopper GEMM from PTX templates. Every command's --help lists "
                                           "its options with their defaults.")
    parser.add_argument("--version", action="version", version=f"ptxgemm {__version__}",
                        help="print 'ptxgemm <version>' and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (_, summary) in COMMANDS.items():
        p = sub.add_parser(name, help=summary)
        if name in full:
            module = command_module(name)
            p.description = module.DESCRIPTION
            module.add_arguments(p)
    return parser


def chosen_command(argv: Sequence[str]) -> str | None:
    """The command the command line names: its first word that is not an option (the top-level options, -h and
    --version, take no value), if that is a command."""
    word = next((a for a in argv if not a.startswith("-")), None)
    return word if word in COMMANDS else None


def main(argv=None) -> int:
    """Every command's entry, with the one rule for a reader that went away (`... | head -1`): the command stops
    quietly, as a C tool killed by SIGPIPE does, instead of printing a BrokenPipeError traceback."""
    try:
        try:
            return dispatch(argv)
        finally:
            # the last buffered lines are written here, inside the try, rather than by the interpreter's exit flush,
            # where a closed pipe could only be reported as "Exception ignored"; --help's SystemExit passes too
            sys.stdout.flush()
    except BrokenPipeError:
        return reader_gone()


def dispatch(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    name = chosen_command(argv)
    module = command_module(name) if name else None
    prepare = getattr(module, "prepare_argv", None)
    args = build_parser([name] if name else []).parse_args(prepare(argv) if prepare else argv)
    try:
        return module.run(args)
    except PtxgemmError as e:
        print(f"{PROG} {args.command}: error: {e}", file=sys.stderr)
        return 2


def reader_gone() -> int:
    """stdout's reader closed the pipe: what is still buffered goes to devnull (so the interpreter's final flush
    cannot raise again) and the status is PIPE_CLOSED_STATUS."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return PIPE_CLOSED_STATUS


if __name__ == "__main__":
    sys.exit(main())
