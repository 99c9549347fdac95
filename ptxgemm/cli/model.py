"""`python -m ptxgemm model`'s options and their checks; the benchmark (transformers' Llama and Mixtral, stock
against ptxgemm's GEMMs, issue 27) is ptxgemm/bench/transformer_models.py.

Issue 46 added Qwen2's small widths (--arch qwen2-0.5b, qwen2-1.5b, all) and the preset sweep (--sweep), whose
entries set their own sizes: a size option given with it is refused, --arch picks entries."""
from __future__ import annotations

import dataclasses
import re

from ..bench import model_summary
from ..bench import transformer_models as bench_model
from ..bench.transformer_models import ARCHS, BOTH, DIMS, MAX_LAYERS, MODES, PHASES, QUICK, SWEEP, SWEEP_PHASES, Sizes
from ..errors import ConfigError
from .options import flag

DEFAULT_OUT = "docs/results"
#: --reference's values; "first": the float32 copy for each arch's first report only (with_fp32)
REFERENCES = ("fp32", "first", "none")
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
               "or Qwen2ForCausalLM (Qwen2-0.5B's and -1.5B's), "
               "a few layers deep with random bf16 weights, stock (cuBLAS; Mixtral's experts through "
               "torch._grouped_mm and transformers' eager loop) and with ptxgemm's GEMMs (ptxgemm.torch: "
               "replace_linear, the 'ptxgemm' experts implementation), side by side in one process: the logits', "
               "loss's and gradients' relative errors against the stock model (and both against a float32 copy), "
               "then prefill, training-step and CUDA-graph decode tokens/s, eager and under torch.compile, "
               "min/median/max over repeats, with the host's milliseconds per step and the GEMM plans ptxgemm "
               "made per step. Writes model_<gpu>_<model>[_<name>].json per model and prints a "
               "table; a phase that fails is recorded there, the others still run, and the exit status is 1. "
               "--sweep runs a preset list of models and token counts instead (issue 46). "
               "Needs torch, transformers and a GPU; the defaults take minutes, torch.compile most of them "
               "(--modes eager skips it).")

#: sweep's entries as --help shows them
SWEEP_TEXT = ", ".join(f"{bench_model.model_name(e.arch, e.sizes.layers)} {e.sizes.prefill_batch}x{e.sizes.prefill_seq}"
                       for e in SWEEP)


def add_arguments(p) -> None:
    p.add_argument("--arch", choices=(*ARCHS, "both", "all"), default=None,
                   help="llama (Llama-3-8B's widths: hidden 4096, MLP 14336, 32/8 heads, vocab 128256), mixtral "
                        "(Mixtral-8x7B's: 8 experts top-2, vocab 32000), qwen2-0.5b (hidden 896, MLP 4864, 14/2 "
                        "heads, vocab 151936, tied LM head), qwen2-1.5b (hidden 1536, MLP 8960, 12/2 heads), both "
                        "(llama and mixtral) or all; with --sweep it picks the sweep's entries of those archs "
                        "(default: both; with --sweep every entry)")
    p.add_argument("--sweep", action="store_true",
                   help=f"run the preset sweep instead of one size per model: {SWEEP_TEXT}, 2 layers each, prefill "
                        f"and training at those tokens per step (decode only if --phases names it), one "
                        "model_<gpu>_<model>_<name>-<tokens>.json per entry (name 'sweep' unless --name); --repeats, "
                        "--modes, --phases, --reference, --tune and --quick (each arch once at the smoke sizes) "
                        "apply, the size options do not (default off)")
    p.add_argument("--layers", type=int, default=None,
                   help=f"decoder layers, 1 to {MAX_LAYERS} (default {DEFAULT.layers}; {QUICK.layers} with --quick)")
    p.add_argument("--modes", default=",".join(MODES), metavar="MODE,...",
                   help="eager and/or compiled (torch.compile(model), mode 'default', dynamic=False; compile time "
                        "recorded per peer) for prefill and the training step; decode is always eager in a CUDA "
                        f"graph (default {','.join(MODES)})")
    p.add_argument("--phases", default=None, metavar="PHASE,...",
                   help="prefill (forward under inference_mode, logits included), train (forward with labels, "
                        "backward, SGD step), decode (one token per sequence against a StaticCache, replayed from a "
                        f"CUDA graph) (default {','.join(PHASES)}; with --sweep {','.join(SWEEP_PHASES)})")
    p.add_argument("--repeats", type=int, default=None,
                   help=f"timed repeats per peer and phase, the peers' order alternating, >= 1; the ratio is read over "
                        f"pairs of repeats, so an even count uses every one (default {DEFAULT.repeats})")
    for field, what in SIZE_HELP.items():
        p.add_argument(flag(field), type=int, default=None,
                       help=f"{what} (default {getattr(DEFAULT, field)}; {getattr(QUICK, field)} with --quick)")
    p.add_argument("--reference", choices=REFERENCES, default=None,
                   help="fp32: also measure every peer's errors against a float32 copy of the stock model (TF32 "
                        "off), the scale of bf16's own error; first: so only for each arch's first report (the "
                        "sweep's other entries of that arch, same widths at other token counts, skip the copy); "
                        "none: only against the stock model, no float32 copy built (default fp32; with --sweep "
                        "first)")
    p.add_argument("--tune", action="store_true",
                   help="first tune every dense GEMM of the prefill and training phases (ptxgemm tune --method b2b "
                        "over the large cooperative tiles; the winners go to the tune cache, which the ptxgemm peer "
                        "then reads; the report lists them under 'tuned') (default off: the selection alone; either "
                        "way the report says what the tune cache held)")
    p.add_argument("--out", default=DEFAULT_OUT,
                   help=f"directory for model_<gpu>_<model>[_<name>].json (default {DEFAULT_OUT})")
    p.add_argument("--name", default=None,
                   help="run name appended to the file names, letters, digits, '.', '_' or '-' (default: none)")
    p.add_argument("--summarize", nargs="+", default=None, metavar="FILE",
                   help="run nothing: read these model reports (as the command writes them, or kept together as "
                        "{'runs': [{'report': ...}]}) and print min/median/max over the runs of each row's ratio "
                        "(the order-balanced one), the plans made per step and the host ms per step; no GPU, no "
                        "torch (default off)")
    p.add_argument("--quick", action="store_true",
                   help=f"smoke-test sizes that still run every phase: {QUICK.layers} layer, prefill "
                        f"{QUICK.prefill_batch}x{QUICK.prefill_seq}, training {QUICK.train_batch}x{QUICK.train_seq}, "
                        f"decode {QUICK.decode_batch} after {QUICK.decode_prefix} tokens, fewer iterations; the "
                        "models keep their widths (default off)")


def archs_of(args) -> tuple:
    """The archs the run builds: --arch's (both: llama and mixtral; all: every arch); without --arch, both, or
    with --sweep every arch the sweep has."""
    arch = args.arch or ("all" if getattr(args, "sweep", False) else "both")
    return {"both": BOTH, "all": ARCHS}.get(arch, (arch,))


def sizes_from(args) -> Sizes:
    """The run's Sizes: the defaults (--quick's with --quick), each given option over them, checked against the
    positions of every model the run builds."""
    base = QUICK if args.quick else DEFAULT
    given = {field: getattr(args, field) for field in SIZE_OPTIONS if getattr(args, field) is not None}
    positions = min(DIMS[a]["max_position_embeddings"] for a in archs_of(args))
    return bench_model.check_sizes(dataclasses.replace(base, **given), positions)


def sweep_from(args) -> list:
    """The sweep's entries for these options (--arch filters them, --quick shrinks them, --repeats sets each one's),
    each entry's sizes checked against its model's positions; a ConfigError naming a size option given with
    --sweep, whose entries set the sizes themselves."""
    for field in SIZE_OPTIONS:
        if field != "repeats" and getattr(args, field) is not None:
            raise ConfigError(f"{flag(field)}: --sweep sets each entry's sizes itself (SWEEP in "
                              f"ptxgemm/bench/transformer_models.py); give {flag(field)} without --sweep, or --sweep "
                              f"without it")
    entries = bench_model.sweep_entries(quick=args.quick, repeats=args.repeats, archs=archs_of(args))
    for e in entries:
        bench_model.check_sizes(e.sizes, DIMS[e.arch]["max_position_embeddings"])
    return entries


def check_name(args) -> None:
    if args.name is not None and not re.fullmatch(r"[\w.-]+", args.name):
        raise ConfigError(f"--name: letters, digits, '.', '_' or '-' only, got {args.name!r}")


def with_fp32(reference: str, arch: str, done: set) -> bool:
    """Whether this report builds the float32 reference: `reference` (--reference's value) for `arch`, given the
    archs `done` already had one (which this call adds `arch` to when it says yes)."""
    if reference == "none" or (reference == "first" and arch in done):
        return False
    done.add(arch)
    return True


def run(args) -> int:
    if args.summarize:
        print(model_summary.format_summary(model_summary.summarize(model_summary.read_reports(args.summarize))))
        return 0
    if args.sweep:
        return run_sweep(args)
    sizes = sizes_from(args)
    reports = _run_reports(args, [(arch, sizes, None, args.name) for arch in archs_of(args)], PHASES, "fp32")
    print(bench_model.format_table(reports))
    return 1 if any(r["errors"] for r in reports) else 0


def run_sweep(args) -> int:
    """--sweep: every entry of sweep_from, one run_arch and one report each (written as it finishes, so an entry
    that fails later leaves the earlier files), then the sweep's table."""
    entries = [(e.arch, e.sizes, e.tag, bench_model.sweep_name(e, args.name)) for e in sweep_from(args)]
    reports = _run_reports(args, entries, SWEEP_PHASES, "first")
    print(bench_model.format_sweep_table(reports))
    return 1 if any(r["errors"] for r in reports) else 0


def _run_reports(args, entries, default_phases, default_reference) -> list:
    """One run_arch per (arch, sizes, sweep tag or None, file name part) entry, each report written as it
    finishes; the options' checks first."""
    modes = bench_model.parse_list(args.modes, MODES, "--modes")
    phases = bench_model.parse_list(args.phases or ",".join(default_phases), PHASES, "--phases")
    check_name(args)
    reference, done = args.reference or default_reference, set()
    reports = []
    for arch, sizes, tag, name in entries:
        report = bench_model.run_arch(arch, sizes, modes=modes, phases=phases,
                                      reference=with_fp32(reference, arch, done),
                                      log=lambda s: print(s, flush=True), tune=args.tune)
        if tag is not None:
            report["sweep"] = tag
        path = bench_model.write_report(report, args.out, name)
        print(f"wrote {path}", flush=True)
        reports.append(report)
    return reports
