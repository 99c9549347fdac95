"""`python -m ptxgemm bench`'s options and their checks; the benchmark is ptxgemm/bench/suite.py, --summarize
ptxgemm/bench/summary.py, --host (host microseconds per call instead of GPU time) ptxgemm/bench/host_cost.py and
host_layer.py."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

from ..bench import (deepgemm, host_cost, host_layer, launch_ab, modes as bench_modes, suite as bench,
                     summary as bench_summary, training)
from ..bench.modes import EPILOGUES, FP8_QUICK_SHAPES, FP8_SHAPES, IN_DTYPES, SCALINGS
from ..bench.suite import QUICK_SHAPES, SEED_M, SEED_N, SMALL_M_MAX, default_shapes, parse_tag
from ..errors import ConfigError

DEFAULT_OUT = "bench_out"
# the GPU-time bench's own options, which mean nothing to --host (dest, flag); compared with their defaults below
SHAPE_SETS = ("deepgemm", "grouped", "square-llm", "training")
#: the shortest sustained window: the clock needs about a second at the power limit to settle
MIN_SUSTAINED_S = 2.0
DEFAULT_SUSTAINED_S = 3.0
GPU_BENCH_OPTIONS = (("quick", "--quick"), ("rounds", "--rounds"), ("shapes", "--shapes"), ("set", "--set"), ("name", "--name"),
                     ("config", "--config"), ("variants", "--variants"), ("summarize", "--summarize"),
                     ("summarize_out", "--summarize-out"), ("b_major", "--b-major"), ("in_dtype", "--in-dtype"),
                     ("scaling", "--scaling"), ("scale_a_major", "--scale-a-major"), ("epilogue", "--epilogue"),
                     ("sustained", "--sustained"),
                     ("sustained_gap", "--sustained-gap"), ("fastcu", "--fastcu"), ("deepgemm", "--deepgemm"),
                     ("tokens", "--tokens"), ("models", "--models"))
# --set training's own options (dest, flag): which of its GEMMs to time
TRAINING_OPTIONS = (("tokens", "--tokens"), ("models", "--models"))
# what the benchmark compares; --summarize reads it from each file instead
MODE_OPTIONS = (("in_dtype", "--in-dtype"), ("scaling", "--scaling"), ("epilogue", "--epilogue"),
                ("scale_a_major", "--scale-a-major"))
# --host's options, which mean nothing without it; all default to None so that "given" is visible
HOST_WAYS, HOST_LAYER = "ways", "layer"   # --host's tables: the ways in on a small shape; a linear layer's GEMM
HOST_TABLES = (HOST_WAYS, HOST_LAYER)
HOST_OPTIONS = (("shape", "--shape"), ("run_shape", "--run-shape"), ("calls", "--calls"), ("repeats", "--repeats"),
                ("json", "--json"))


#: the command's --help text (its one-line summary is in ptxgemm/cli/main.py's table)
DESCRIPTION = ("Time ptxgemm and cuBLAS (torch.matmul, else CuPy) on the same shapes in one "
               "process with one method: L2 flushed before each launch, CUDA events around the "
               "launch, interleaved rounds, median. ptxgemm runs the config it selects itself, "
               "with the tune cache off unless --use-tune-cache. Writes bench_<gpu>[_<name>].json "
               "and .png. --in-dtype float8_* compares fp8 with torch._scaled_mm (--scaling tensor "
               "or row) or with cuBLAS's blockwise fp8 GEMM through torch (--scaling block; ptxgemm bf16 "
               "on the same values where torch is absent); --epilogue bias-<act> compares the "
               "fused epilogue with the plain GEMM and with the plain GEMM plus a separate torch "
               "pass; those write bench_<gpu>_<mode>[_<name>].json. --set training times a training "
               "step's linear-layer GEMMs in autograd's layouts. --host measures host "
               "microseconds per call instead, --pdl programmatic dependent launch on and off. Needs an sm_90 GPU, "
               "except --summarize.")


def add_arguments(p) -> None:
    p.add_argument("--quick", action="store_true",
                   help=f"{len(QUICK_SHAPES)} shapes ({len(FP8_QUICK_SHAPES)} for fp8: 8192^3, 4096^3, "
                        f"4096x14336x4096) and 7 rounds, about a minute (default off: the full suite of "
                        f"{len(default_shapes())} shapes ({len(FP8_SHAPES)} square/LLM for fp8), 25 rounds)")
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds, >= 1 (default 25, 7 with --quick)")
    p.add_argument("--shapes", default=None, metavar="MxNxK,...",
                   help="MxNxK,MxNxK,... instead of the suite (default: the suite: seed K sweep, square/LLM, small-M; "
                        "fp8: 8192^3 and the square/LLM shapes); "
                        f"grouped for geomeans as seed_sweep (M,N = {SEED_M},{SEED_N}), small_m (M <= {SMALL_M_MAX}) "
                        "or square_llm")
    p.add_argument("--set", default=None, choices=SHAPE_SETS,
                   help=f"a named shape set instead of the suite: deepgemm, DeepGEMM's {len(deepgemm.SHAPES)} dense "
                        "fp8 shapes (M in {64, 128, 4096}); with --scaling block each row carries DeepGEMM's "
                        "published TFLOP/s beside ptxgemm's (an H800 figure from its README, not measured here: "
                        "ptxgemm/bench/deepgemm.py); grouped, the MoE expert GEMMs of ptxgemm/bench/grouped_shapes.py "
                        "through ptxgemm.grouped_matmul against torch._grouped_mm / torch.bmm / a loop of matmul "
                        "per group (bf16, or --in-dtype float8_e4m3fn against torch._scaled_grouped_mm); "
                        "square-llm, the 6 square and LLM shapes of the suite (the sustained bar's); training, the "
                        "forward, dX and dW GEMMs of every linear layer of Qwen2-0.5B, Qwen2-1.5B, Llama-3-8B and "
                        f"Mistral-7B at {' and '.join(map(str, training.TOKENS))} tokens, as autograd lays them out "
                        "(x·Wᵀ: B a transposed view; dY·W: B N-major; dYᵀ·X: A a transposed view), ptxgemm against "
                        "torch.matmul on the same torch tensors, with issue 47's checks (geomean >= "
                        f"{training.GEOMEAN_BAR}, no row below {training.ROW_FLOOR}); --quick: qwen2-1.5b at 4096 "
                        "tokens; writes bench_<gpu>_training[_<name>].json (default: none)")
    p.add_argument("--tokens", default=None, metavar="T,...",
                   help=f"with --set training: the token counts to time, of {','.join(map(str, training.TOKENS))} "
                        "(default: both)")
    p.add_argument("--models", default=None, metavar="NAME,...",
                   help=f"with --set training: the models whose layers to time, of {','.join(training.MODELS)} "
                        "(default: all four)")
    p.add_argument("--sustained", type=float, nargs="?", const=DEFAULT_SUSTAINED_S, default=None, metavar="SECONDS",
                   help="also time each implementation back to back for SECONDS (>= "
                        f"{MIN_SUSTAINED_S:g}; {DEFAULT_SUSTAINED_S:g} when given bare) per shape, as a training step "
                        "runs it: the board reaches its power limit and the clock falls; rows gain *_sustained_tflops, "
                        "the SM clock, watts and joules per TFLOP (NVML through nvidia-ml-py, when installed), the "
                        "summary a sustained geomean beside the burst one. bf16 against cuBLAS only (default off)")
    p.add_argument("--sustained-gap", type=float, default=None, metavar="SECONDS",
                   help="with --sustained: idle seconds before each window, so each starts cool (default 1)")
    p.add_argument("--fastcu", default=None, metavar="DIR",
                   help="also time fast.cu's kernel 12 (a checkout of github.com/pranjalssh/fast.cu at DIR; built "
                        "with the CUDA toolkit's nvcc, never shipped) as a second bf16 peer, burst and with "
                        "--sustained; its own layouts (B K-major, C column-major), shapes with M and N multiples of "
                        "256 and K of 64 (others: refused, and the row says why). bf16 suite only (default off)")
    p.add_argument("--deepgemm", default=None, metavar="DIR",
                   help="also time DeepGEMM (a checkout of github.com/deepseek-ai/DeepGEMM with its submodules at DIR, "
                        "its extension built there once; or 'installed': the deep_gemm this Python imports) beside "
                        "ptxgemm in the same process, on the same values, by kernel durations with and without the L2 "
                        "flush (its bench_kineto's method) and burst; fp8 e4m3 blockwise only: --in-dtype "
                        "float8_e4m3fn --scaling block, with --set deepgemm, --shapes or --set grouped (then "
                        "DeepGEMM's 10 grouped shapes only). The command starts again once with libstdc++ preloaded "
                        "(ptxgemm/bench/deepgemm_peer.py says why) (default off)")
    p.add_argument("--small-m", action="store_true",
                   help="the small-M suite: M in {1, 16, 64, 128, 256, 512} x (N, K) in {(4096, 4096), (8192, 8192), "
                        "(14336, 4096), (4096, 14336)} (default off)")
    p.add_argument("--b-major", choices=("mn", "k"), default=None,
                   help="B's layout for every implementation: row-major (K, N) as numpy's C order ('mn', default) or "
                        "column-major ('k', K contiguous); fp8 inputs: k only (the default there)")
    p.add_argument("--in-dtype", choices=IN_DTYPES, default=None,
                   help="A and B's dtype: bfloat16 (default), float8_e4m3fn or float8_e5m2. fp8: random normal values "
                        "cast to it, A row-major, B column-major, bf16 output; the peer is torch._scaled_mm (cuBLAS; "
                        "for e5m2 it runs A e4m3 x B e5m2 when torch refuses e5m2 x e5m2, and says so per row)")
    p.add_argument("--scaling", choices=SCALINGS, default=None,
                   help="fp8 only: tensor (one fp32 scale per operand, a device scalar both read; the default with an "
                        "fp8 --in-dtype), row (scale_a (M,1), scale_b (1,N)) or block (1x128 per row of A, 128x128 per "
                        "block of B; the peer is then cuBLAS's blockwise fp8 GEMM through torch, or, where torch is "
                        "absent, ptxgemm bf16 on the same values: the ratio is then speed vs bf16)")
    p.add_argument("--scale-a-major", choices=("k", "m"), default=None,
                   help="with --scaling block: ptxgemm's scale_a C-contiguous (k, default) or M-major (m: its rows "
                        "adjacent and its columns padded to 16 bytes, the layout DeepGEMM and torch's blockwise "
                        "scaled_mm read, and the very bytes DeepGEMM gets), read by the kernel's TMA; same values. "
                        "With --set grouped: the contiguous cases' (the masked form takes C-contiguous tables)")
    p.add_argument("--epilogue", choices=EPILOGUES, default=None,
                   help="none (default), bias-gelu, bias-relu or bias-silu: time ptxgemm with a float32 (N,) bias and "
                        "the activation fused, the plain GEMM, and the plain GEMM plus a separate torch pass "
                        "act(out + bias); the row's ratio is separate ms / fused ms. Any --in-dtype; not with "
                        "--scaling block")
    p.add_argument("--out", default=DEFAULT_OUT,
                   help="directory for bench_<gpu>[_<name>].json and .png, bench_<gpu>_<mode>[_<name>].* with "
                        "--in-dtype fp8 or --epilogue (mode e.g. fp8_tensor, fp8e5m2_row, bf16_bias-gelu) "
                        "(default bench_out)")
    p.add_argument("--name", default=None,
                   help="run name in the file names, letters, digits, '.', '_' or '-' (default: none, "
                        "bench_<gpu>.json)")
    p.add_argument("--config", default=None, metavar="TAG",
                   help="run this fixed ptxgemm config instead of the library's selection, as a GemmConfig tag "
                        "<pp|coop><block_m>x<block_n>[c2], e.g. pp128x128 or coop256x128c2 (a bare 128x192 means "
                        "pingpong); with --epilogue both the fused and the plain GEMM run it, with --scaling block "
                        "the bf16 peer keeps its selection (default: none, i.e. GemmPlan's own selection)")
    p.add_argument("--variants", default="", metavar="TAG,...",
                   help="extra fixed ptxgemm configs timed in the same rounds, as tags, e.g. pp128x192,coop256x128c2 "
                        "(reported per row under 'variants'; default: none); --set grouped also takes 'all' "
                        "(every grouped tile, and both L2 hints toggled), 'hint' (the hint of one-row groups' B "
                        "loads toggled), 'store-hint' (the hint of C's stores toggled), 'stream-k' (the "
                        "stream-K tail toggled) or 'sort' (the k form's group order toggled)")
    p.add_argument("--use-tune-cache", action="store_true",
                   help="let the selection use the tune cache (default off: the bench sets PTXGEMM_TUNE_CACHE=off "
                        "so it measures the untuned heuristic)")
    p.add_argument("--summarize", nargs="+", default=None, metavar="FILE",
                   help="summarize bench JSON files instead of running (no GPU needed): per GPU, per shape and per "
                        "geomean group, min/median/max of the ratio across the runs; --set training files per GEMM, "
                        "with issue 47's checks on the per-row medians; --set grouped files per case and peer "
                        "(default: run the bench)")
    p.add_argument("--summarize-out", default=None, metavar="F.json",
                   help="with --summarize: also write the summary as JSON here (default: print only)")
    host = p.add_argument_group("host cost (--host)")
    host.add_argument("--host", nargs="?", const=HOST_WAYS, default=None, choices=HOST_TABLES,
                      help="measure host microseconds per call instead of GPU time (default off: the GPU-time bench). "
                           f"Bare or '{HOST_WAYS}': run, matmul (same arrays and new out), plan.launch, graph replay "
                           "and torch.matmul (when torch is importable) on a small shape, timed by perf_counter around "
                           "loops of calls, min/median over repeats; prints PASS/FAIL for "
                           f"'{host_cost.CHECK_MATMUL}' and '{host_cost.CHECK_TORCH}'. '{HOST_LAYER}': a linear "
                           f"layer's GEMM ({host_cost.shape_str(host_layer.LAYER_SHAPE)} bf16, the weight (N, K) as "
                           "nn.Linear stores it; needs torch) through F.linear, nn.Linear, pt.Linear, pt.mm, "
                           "ptxgemm.matmul on DeviceArrays and on torch tensors, and ptxgemm.run, on the same x every "
                           "call and on an x at a new address every call: the wall time of back-to-back calls "
                           "(perf_counter from a loop's start to the end of the synchronize after it), median over "
                           "repeats, ptxgemm's plan counters, and the binding choices (encode, replace_address by "
                           "each route, launch, launch_at); prints PASS/FAIL for "
                           f"'{host_layer.CHECK_LINEAR}' and '{host_layer.CHECK_MATMUL_US}' (each on same and new "
                           f"addresses) and '{host_layer.CHECK_PLANS}'. Either exits 1 if a check fails")
    host.add_argument("--shape", default=None, metavar="MxNxK",
                      help="with --host: the problem of every row but run's, positive M, N, K "
                           f"(default {host_cost.shape_str(host_cost.DEFAULT_SHAPE)}; with --host {HOST_LAYER}: "
                           f"every row's, x (M, K) and the weight (N, K), default "
                           f"{host_cost.shape_str(host_layer.LAYER_SHAPE)})")
    host.add_argument("--run-shape", default=None, metavar="MxNxK",
                      help="with --host: the problem of the run (host arrays) row, which copies both ways "
                           f"(default {host_cost.shape_str(host_cost.RUN_SHAPE)}; not with --host {HOST_LAYER}, whose "
                           "ptxgemm.run row runs the layer's shape)")
    host.add_argument("--calls", type=int, default=None,
                      help=f"with --host: calls per timed loop, >= 1 (default {host_cost.DEFAULT_CALLS}; keep it "
                           f"modest so the GPU queue never fills; with --host {HOST_LAYER}: default "
                           f"{host_layer.LAYER_CALLS}, and ptxgemm.run's row gets calls // {host_layer.RUN_DIVISOR})")
    host.add_argument("--repeats", type=int, default=None,
                      help=f"with --host: timed loops per row, >= 1 (default {host_cost.DEFAULT_REPEATS})")
    host.add_argument("--json", default=None, metavar="PATH",
                      help="with --host or --pdl: also write the rows (and --host's checks) as JSON here (default: "
                           f"none, print only; the committed --host {HOST_LAYER} runs: "
                           "docs/results/<gpu>/host/host_<gpu>_<name>.json)")
    p.add_argument("--pdl", action="store_true",
                   help="time programmatic dependent launch on and off instead (default off: the GPU-time bench; "
                        "ptxgemm/bench/launch_ab.py): two plans "
                        "of each problem, with and without the launch attribute, interleaved, burst and back to back; "
                        f"takes --shapes (default {len(launch_ab.SHAPES)} training GEMMs), --rounds (default "
                        f"{launch_ab.DEFAULT_ROUNDS}) and --json (default none)")


def _tags(option: str, specs, **fields) -> list:
    try:
        return [parse_tag(s, **fields) for s in specs]
    except ConfigError as e:
        raise ConfigError(f"{option}: {e}") from None


def run(args) -> int:
    # First of all: every selection in this process reads it (on every plan), and the bench decides it for its own
    # process so that it measures the untuned heuristic unless told otherwise.
    os.environ["PTXGEMM_TUNE_CACHE"] = tune_cache = "on" if args.use_tune_cache else "off"

    if args.pdl:
        return run_pdl(args)
    if args.host:
        return run_host(args)
    for dest, flag in HOST_OPTIONS:
        if getattr(args, dest) is not None:
            raise ConfigError(f"{flag}: only with --host")
    for dest, flag in TRAINING_OPTIONS:
        if getattr(args, dest) is not None and args.set != "training":
            raise ConfigError(f"{flag}: only with --set training")
    if args.summarize_out and not args.summarize:
        raise ConfigError("--summarize-out: only with --summarize")
    if args.summarize:
        for dest, flag in MODE_OPTIONS:
            if getattr(args, dest) is not None:
                raise ConfigError(f"{flag}: not with --summarize (each file records its own mode; runs of different "
                                  f"modes are summarized apart)")
        summary = bench_summary.summarize(bench_summary.read_runs(args.summarize))
        print(bench_summary.format_summary(summary))
        if args.summarize_out:
            Path(args.summarize_out).write_text(json.dumps(summary, indent=1))
            print(f"wrote {args.summarize_out}")
        return 0
    if args.rounds is not None and args.rounds < 1:
        raise ConfigError(f"--rounds: must be >= 1, got {args.rounds}")
    if args.name is not None and not re.fullmatch(r"[\w.-]+", args.name):
        raise ConfigError(f"--name: letters, digits, '.', '_' or '-' only, got {args.name!r}")
    if args.small_m and (args.shapes or args.quick):
        raise ConfigError("--small-m: a suite of its own; not with --shapes or --quick")
    if args.set and (args.shapes or (args.quick and args.set != "training") or args.small_m):
        raise ConfigError(f"--set: the shape set {args.set} is the run's shapes; not with --shapes, --quick or "
                          f"--small-m")
    if args.sustained_gap is not None and args.sustained is None:
        raise ConfigError("--sustained-gap: only with --sustained")
    if args.sustained is not None:
        if not args.sustained >= MIN_SUSTAINED_S:
            raise ConfigError(f"--sustained: at least {MIN_SUSTAINED_S:g} seconds per window (the clock needs about "
                              f"a second at the power limit to settle), got {args.sustained:g}")
        if args.sustained_gap is not None and not args.sustained_gap >= 0:
            raise ConfigError(f"--sustained-gap: seconds >= 0, got {args.sustained_gap:g}")
        if args.set in ("grouped", "deepgemm", "training") or args.in_dtype not in (None, "bfloat16") or \
                args.scaling or args.epilogue:
            raise ConfigError("--sustained: the bf16 benchmark against cuBLAS only (no --set grouped/deepgemm/"
                              "training, --in-dtype fp8, --scaling or --epilogue)")
    if args.fastcu and (args.set in ("grouped", "deepgemm", "training") or args.in_dtype not in (None, "bfloat16") or
                        args.scaling or args.epilogue):
        raise ConfigError("--fastcu: a bf16 peer of the bf16 benchmark only (no --set grouped/deepgemm/training, "
                          "--in-dtype fp8, --scaling or --epilogue)")
    if args.fastcu:
        from ..bench import fastcu as fastcu_peer

        fastcu_peer.source_dir(args.fastcu)   # before anything reaches the GPU
    if args.deepgemm:
        from ..bench import deepgemm_peer

        if args.in_dtype != "float8_e4m3fn" or args.scaling != "block" or args.epilogue or args.sustained is not None \
                or args.fastcu or args.set in ("training", "square-llm"):
            raise ConfigError("--deepgemm: a peer of the fp8 blockwise bench only: give --in-dtype float8_e4m3fn "
                              "--scaling block, with --set deepgemm, --shapes or --set grouped (no --epilogue, "
                              "--sustained, --fastcu or --set training/square-llm)")
        deepgemm_peer.source_dir(args.deepgemm)       # a bad DIR is named before anything reaches the GPU
        deepgemm_peer.ensure_libstdcxx_first()        # before torch is imported (see that module)
    if args.set == "training":
        return run_training(args, tune_cache)
    if args.set == "grouped":
        from ..bench import grouped_bench   # imports torch when it runs: only this set needs it

        if args.variants not in ("", "all") + grouped_bench.TOGGLES:
            _tags("--variants", args.variants.split(","))   # names a malformed tag
        if args.scaling not in (None, "tensor", "row", "block") or args.epilogue or args.config:
            raise ConfigError("--set grouped: takes --in-dtype (bfloat16, float16 or float8_e4m3fn), --scaling "
                              "tensor, row or block (fp8), --rounds, --name and --variants all (every grouped tile, "
                              "and both L2 hints toggled, timed beside the default), hint (the hint of one-row "
                              "groups' B toggled only), store-hint (the hint of C's stores toggled only), stream-k "
                              "(the stream-K tail toggled only), sort (the k form's group order toggled only) or "
                              "tags only")
        if args.scaling in ("row", "block") and args.in_dtype != "float8_e4m3fn":
            raise ConfigError(f"--scaling: {args.scaling} with --set grouped scales fp8 operands; give --in-dtype "
                              "float8_e4m3fn")
        if args.scale_a_major is not None and args.scaling != "block":
            raise ConfigError("--scale-a-major: with --scaling block only (the layout of blockwise scale_a)")
        import importlib.util

        if importlib.util.find_spec("torch") is None:   # its peers and inputs are torch's
            raise ConfigError("--set grouped: times torch._grouped_mm and torch._scaled_grouped_mm beside ptxgemm and "
                              "makes its inputs with torch, so it needs torch (pip install 'ptxgemm[torch]')")
        return grouped_bench.run(args.rounds or 7, args.in_dtype or "bfloat16", args.out, args.name,
                                 variants=args.variants, scaling=args.scaling or "tensor", deepgemm_dir=args.deepgemm,
                                 scale_a_major=args.scale_a_major or "k")
    mode = _mode(args)
    shapes = (bench.parse_shapes(args.shapes) if args.shapes else list(bench.SMALL_M_SUITE) if args.small_m else
              list(deepgemm.SHAPES) if args.set == "deepgemm" else
              list(bench.SQUARE_LLM_SHAPES) if args.set == "square-llm" else
              bench_modes.default_shapes(mode, args.quick, bench.default_shapes))
    # the tags with the B layout the bench gives (fp8: K-major only), so a tile that only K-major B allows is a tag
    operands = {"b_major": mode.b_major(args.b_major)}
    config = _tags("--config", [args.config], **operands)[0] if args.config else None
    variants = _tags("--variants", filter(None, args.variants.split(",")), **operands)
    rounds = args.rounds or (7 if args.quick else 25)
    if mode.is_default:
        return bench.run_bench(shapes, rounds, config, variants, out=args.out, name=args.name, tune_cache=tune_cache,
                               b_major=operands["b_major"], sustained=args.sustained,
                               sustained_gap=1.0 if args.sustained_gap is None else args.sustained_gap,
                               fastcu=args.fastcu)
    return bench_modes.run_mode_bench(shapes, rounds, mode, config, out=args.out, name=args.name,
                                      tune_cache=tune_cache, b_major=operands["b_major"], variants=variants,
                                      deepgemm_dir=args.deepgemm)


def run_training(args, tune_cache: str) -> int:
    """`bench --set training`: its options' checks (before torch and the GPU), then ptxgemm/bench/training.py."""
    bad = [flag for dest, flag in (("in_dtype", "--in-dtype"), ("scaling", "--scaling"), ("epilogue", "--epilogue"),
                                   ("b_major", "--b-major")) if getattr(args, dest) not in (None, "bfloat16", "none")]
    if bad:
        raise ConfigError(f"{bad[0]}: not with --set training (bf16 GEMMs in autograd's own layouts)")
    if args.quick and (args.tokens or args.models):
        raise ConfigError("--quick: --set training's quick run is qwen2-1.5b at 4096 tokens; not with --tokens or "
                          "--models")
    models, tokens = training.QUICK if args.quick else (training.parse_models(args.models),
                                                        training.parse_tokens(args.tokens))
    config = _tags("--config", [args.config])[0] if args.config else None
    variants = _tags("--variants", filter(None, args.variants.split(",")))
    return training.run(args.rounds or (7 if args.quick else 25), args.out, args.name, models, tokens,
                        config=config, variant_configs=variants, tune_cache=tune_cache)


def _mode(args):
    """The comparison --in-dtype, --scaling and --epilogue ask for, and what does not combine with it (all checked
    before the GPU)."""
    mode = bench_modes.mode_from_options(args.in_dtype, args.scaling, args.epilogue, args.scale_a_major)
    if mode.is_default:
        return mode
    if args.variants and mode.fused:
        raise ConfigError(f"--variants: not with --epilogue (this run: {mode.describe()}); use --config TAG to time "
                          f"one fixed config")
    if mode.fp8 and args.b_major not in (None, "k"):
        raise ConfigError(f"--b-major: {args.b_major} with --in-dtype {mode.in_dtype}: fp8 operands are K-major only "
                          f"(B column-major, as torch._scaled_mm takes it); leave --b-major out")
    return mode


def run_pdl(args) -> int:
    """`bench --pdl`: the options' checks (all before the GPU), launch_ab.measure, the report and --json."""
    taken = ("shapes", "rounds", "json")
    for dest, flag in GPU_BENCH_OPTIONS + HOST_OPTIONS:
        if dest not in taken and getattr(args, dest) not in (None, False, ""):
            raise ConfigError(f"{flag}: not with --pdl (--pdl takes --shapes, --rounds, --json)")
    if args.host:
        raise ConfigError("--host: not with --pdl (each is a benchmark of its own)")
    if args.out != DEFAULT_OUT:
        raise ConfigError("--out: not with --pdl (use --json PATH)")
    shapes = bench.parse_shapes(args.shapes) if args.shapes else launch_ab.SHAPES
    rounds = launch_ab.DEFAULT_ROUNDS if args.rounds is None else args.rounds
    if rounds < 1:
        raise ConfigError(f"--rounds: >= 1, got {rounds}")
    result = launch_ab.measure(shapes, rounds)
    print(launch_ab.format_report(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
        print(f"wrote {args.json}")
    return 0


def run_host(args) -> int:
    """`bench --host [ways|layer]`: the options' checks (all before the GPU), host_cost.measure (ways) or
    host_layer.measure_calls (layer), the report and --json."""
    for dest, flag in GPU_BENCH_OPTIONS:
        if getattr(args, dest) not in (None, False, ""):
            raise ConfigError(f"{flag}: not with --host (--host takes --shape, --run-shape, --calls, --repeats, "
                              f"--json)")
    if args.out != DEFAULT_OUT:
        raise ConfigError("--out: not with --host (use --json PATH)")
    layer = args.host == HOST_LAYER
    if layer and args.run_shape is not None:
        raise ConfigError(f"--run-shape: not with --host {HOST_LAYER} (its ptxgemm.run row runs the layer's shape, "
                          f"--shape)")
    default_shape = host_layer.LAYER_SHAPE if layer else host_cost.DEFAULT_SHAPE
    shape = host_cost.parse_shape(args.shape, "--shape") if args.shape else default_shape
    run_shape = host_cost.parse_shape(args.run_shape, "--run-shape") if args.run_shape else host_cost.RUN_SHAPE
    calls = (host_layer.LAYER_CALLS if layer else host_cost.DEFAULT_CALLS) if args.calls is None else args.calls
    repeats = host_cost.DEFAULT_REPEATS if args.repeats is None else args.repeats
    host_cost.check_counts(calls, repeats)
    if layer:
        result = host_layer.measure_calls(shape, calls, repeats)
    else:
        result = host_cost.measure(shape, run_shape, calls, repeats)
    result["tune_cache"] = os.environ.get("PTXGEMM_TUNE_CACHE")
    print(host_layer.format_layer_report(result) if layer else host_cost.format_report(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
        print(f"wrote {args.json}")
    return 0 if host_cost.checks_passed(result["checks"]) else 1
