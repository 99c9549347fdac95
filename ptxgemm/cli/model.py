"""`python -m ptxgemm model`'s options and their checks; the benchmark (transformers' Llama and Mixtral, stock
against ptxgemm's GEMMs, issue 27) is ptxgemm/bench/model.py."""
from __future__ import annotations

import dataclasses
import re

from ..bench import model as bench_model
from ..bench.model import ARCHS, DIMS, MAX_LAYERS, MODES, PHASES, QUICK, Sizes
from ..errors import ConfigError
from .options import flag

DEFAULT_OUT = "docs/results"
DEFAULT = Sizes()
#: the options that set a Sizes field of the same name (default None: the defaults', or --quick's)
SIZE_OPTIONS = ("layers", "prefill_batch", "prefill_seq", "train_batch", "train_seq", "decode_batch", "decode_prefix",
                "repeats")

#: the size options besides --layers and --repeats, each a Sizes field: what it counts
SIZE_HELP = {
    "prefill_batch": "prefill sequences",
    "prefill_seq": "prefill tokens per sequence, also the accuracy pass's",
    "train_batch": "training-step sequences",
    "train_seq": "training-step tokens per sequence",
    "decode_batch": "decode sequences, one new token each per step",
    "decode_prefix": "tokens prefilled into the static cache before decoding",
}

#: the command's --help text (its one-line summary is in ptxgemm/cli/main.py's table)
DESCRIPTION = ("Run transformers' LlamaForCausalLM (Llama-3-8B's widths) and MixtralForCausalLM (Mixtral-8x7B's), "
               "a few layers deep with random bf16 weights, stock (cuBLAS; Mixtral's experts through "
               "torch._grouped_mm and transformers' eager loop) and with ptxgemm's GEMMs (ptxgemm.torch: "
               "replace_linear, the 'ptxgemm' experts implementation), side by side in one process: the logits', "
               "loss's and gradients' relative errors against the stock model (and both against a float32 copy), "
               "then prefill, training-step and CUDA-graph decode tokens/s, eager and under torch.compile, "
               "min/median/max over repeats. Writes model_<gpu>_<model>[_<name>].json per model and prints a "
               "table; a phase that fails is recorded there, the others still run, and the exit status is 1. "
               "Needs torch, transformers and a GPU; the defaults take minutes, torch.compile most of them "
               "(--modes eager skips it).")


def add_arguments(p) -> None:
    p.add_argument("--arch", choices=(*ARCHS, "both"), default="both",
                   help="llama (Llama-3-8B's widths: hidden 4096, MLP 14336, 32/8 heads, vocab 128256), mixtral "
                        "(Mixtral-8x7B's: 8 experts top-2, vocab 32000) or both (default both)")
    p.add_argument("--layers", type=int, default=None,
                   help=f"decoder layers, 1 to {MAX_LAYERS} (default {DEFAULT.layers}; {QUICK.layers} with --quick)")
    p.add_argument("--modes", default=",".join(MODES), metavar="MODE,...",
                   help="eager and/or compiled (torch.compile(model), mode 'default', dynamic=False; compile time "
                        "recorded per peer) for prefill and the training step; decode is always eager in a CUDA "
                        f"graph (default {','.join(MODES)})")
    p.add_argument("--phases", default=",".join(PHASES), metavar="PHASE,...",
                   help="prefill (forward under inference_mode, logits included), train (forward with labels, "
                        "backward, SGD step), decode (one token per sequence against a StaticCache, replayed from a "
                        f"CUDA graph) (default {','.join(PHASES)})")
    p.add_argument("--repeats", type=int, default=None,
                   help=f"timed repeats per peer and phase, the peers' order alternating, >= 1 (default "
                        f"{DEFAULT.repeats})")
    for field, what in SIZE_HELP.items():
        p.add_argument(flag(field), type=int, default=None,
                       help=f"{what} (default {getattr(DEFAULT, field)}; {getattr(QUICK, field)} with --quick)")
    p.add_argument("--reference", choices=("fp32", "none"), default="fp32",
                   help="fp32: also measure every peer's errors against a float32 copy of the stock model (TF32 "
                        "off), the scale of bf16's own error; none: only against the stock model (default fp32)")
    p.add_argument("--tune", action="store_true",
                   help="first tune every dense GEMM of the prefill and training phases (ptxgemm tune --method b2b "
                        "over the large cooperative tiles; the winners go to the tune cache, which the ptxgemm peer "
                        "then reads; the report lists them under 'tuned') (default off: the selection alone; either "
                        "way the report says what the tune cache held)")
    p.add_argument("--out", default=DEFAULT_OUT,
                   help=f"directory for model_<gpu>_<model>[_<name>].json (default {DEFAULT_OUT})")
    p.add_argument("--name", default=None,
                   help="run name appended to the file names, letters, digits, '.', '_' or '-' (default: none)")
    p.add_argument("--quick", action="store_true",
                   help=f"smoke-test sizes that still run every phase: {QUICK.layers} layer, prefill "
                        f"{QUICK.prefill_batch}x{QUICK.prefill_seq}, training {QUICK.train_batch}x{QUICK.train_seq}, "
                        f"decode {QUICK.decode_batch} after {QUICK.decode_prefix} tokens, fewer iterations; the "
                        "models keep their widths (default off)")


def archs_of(args) -> tuple:
    return ARCHS if args.arch == "both" else (args.arch,)


def sizes_from(args) -> Sizes:
    """The run's Sizes: the defaults (--quick's with --quick), each given option over them, checked against the
    positions of every model the run builds."""
    base = QUICK if args.quick else DEFAULT
    given = {field: getattr(args, field) for field in SIZE_OPTIONS if getattr(args, field) is not None}
    positions = min(DIMS[a]["max_position_embeddings"] for a in archs_of(args))
    return bench_model.check_sizes(dataclasses.replace(base, **given), positions)


def run(args) -> int:
    sizes = sizes_from(args)
    modes = bench_model.parse_list(args.modes, MODES, "--modes")
    phases = bench_model.parse_list(args.phases, PHASES, "--phases")
    if args.name is not None and not re.fullmatch(r"[\w.-]+", args.name):
        raise ConfigError(f"--name: letters, digits, '.', '_' or '-' only, got {args.name!r}")
    reports = []
    for arch in archs_of(args):
        report = bench_model.run_arch(arch, sizes, modes=modes, phases=phases, reference=args.reference == "fp32",
                                      log=lambda s: print(s, flush=True), tune=args.tune)
        path = bench_model.write_report(report, args.out, args.name)
        print(f"wrote {path}", flush=True)
        reports.append(report)
    print(bench_model.format_table(reports))
    return 1 if any(r["errors"] for r in reports) else 0
