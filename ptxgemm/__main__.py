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
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from .errors import PtxgemmError

PROG = "python -m ptxgemm"


# ---------------------------------------------------------------------------------------------------------------
# info
# ---------------------------------------------------------------------------------------------------------------

def collect_info() -> dict:
    from .kernel import codegen
    from .build import compiler, toolchain

    info: dict = {"tools": {}}
    for tool in ("ptxas", "nvdisasm"):
        try:
            path = toolchain.find_tool(tool)
        except PtxgemmError as e:
            info["tools"][tool] = {"path": None, "version": None, "error": str(e)}
            continue
        info["tools"][tool] = {"path": str(path) if path else None,
                               "version": toolchain.tool_version(str(path)) if path else None,
                               "override": toolchain.ENV_VARS[tool] if os.environ.get(toolchain.ENV_VARS[tool]) else None}
    info["cache_dir"] = str(compiler.cache_dir())
    info["cache_dir_from"] = "PTXGEMM_CACHE_DIR" if os.environ.get("PTXGEMM_CACHE_DIR") else "default"
    info["templates"] = str(codegen._template_dir())
    try:
        from cuda.bindings import __version__ as bindings_version
    except ImportError:
        bindings_version = None
    info["cuda_bindings"] = bindings_version
    from .runtime import driver

    reason = driver.no_device_reason()
    if reason is None:
        d = driver.device_info()
        info["device"] = {"name": d.name, "compute_capability": "%d.%d" % d.compute_capability,
                          "sm_count": d.sm_count, "l2_bytes": d.l2_bytes,
                          "max_smem_per_block_optin": d.max_smem_per_block_optin, "clock_khz": d.clock_khz,
                          "driver": d.driver_version_str}
    else:
        info["device"] = None
        info["no_device_reason"] = reason
    return info


def format_info(info: dict) -> str:
    lines = []
    for tool, t in info["tools"].items():
        if t.get("error"):
            lines.append(f"{tool:<10} error: {t['error']}")
        elif t["path"] is None:
            lines.append(f"{tool:<10} not found")
        else:
            via = f", from {t['override']}" if t.get("override") else ""
            lines.append(f"{tool:<10} {t['path']} (version {t['version']}{via})")
    lines.append(f"{'cache':<10} {info['cache_dir']} ({info['cache_dir_from']})")
    lines.append(f"{'templates':<10} {info['templates']}")
    lines.append(f"{'bindings':<10} cuda-bindings {info['cuda_bindings']}")
    d = info["device"]
    if d is None:
        lines.append(f"{'device':<10} none: {info['no_device_reason']}")
    else:
        lines.append(f"{'device':<10} {d['name']}, compute capability {d['compute_capability']}, {d['sm_count']} SMs, "
                     f"{d['max_smem_per_block_optin']} B shared memory per block (opt-in), driver CUDA {d['driver']}")
    return "\n".join(lines)


def cmd_info(args) -> int:
    info = collect_info()
    print(json.dumps(info, indent=2) if args.json else format_info(info))
    return 0


# ---------------------------------------------------------------------------------------------------------------
# dump
# ---------------------------------------------------------------------------------------------------------------

PROBE_OPTIONS = ("mode", "rows", "cols")
SHAPE_OPTIONS = ("m", "n", "k")


def _add_dump_parser(sub) -> None:
    from .cli import options as config_cli
    from .tools import dump

    p = sub.add_parser("dump", help="write a kernel's PTX, cubin, SASS and report.json (no GPU needed)",
                       description="Render a kernel, assemble it with ptxas and write NAME.ptx, NAME.cubin, NAME.sass, "
                                   "ptxas.log and report.json to --out. No GPU needed. For the GEMM, --m, --n and --k "
                                   "decide the tiles, the grid and the waves (for this GPU's SM count, or 132 without "
                                   "one), and the config unless you give one: --config TAG, or tile options "
                                   "(GemmConfig's defaults for the rest); with neither, the config ptxgemm selects "
                                   "for the shape, as GemmPlan would. The operand options and --debug/--trace apply "
                                   "either way.")
    p.add_argument("--kernel", choices=dump.KERNELS, default="gemm",
                   help=f"which kernel: {' or '.join(dump.KERNELS)} (default gemm)")
    p.add_argument("--out", required=True, help="output directory, created if missing (required; no default)")
    shape = p.add_argument_group("GEMM problem shape (--kernel gemm; required there)")
    for dim in SHAPE_OPTIONS:
        shape.add_argument(f"--{dim}", type=int, default=None,
                           help=f"problem size {dim.upper()}, >= 1 (required with --kernel gemm; no default)")
    group = p.add_argument_group("GEMM configuration (--kernel gemm)")
    group.add_argument("--config", default=None, metavar="TAG",
                       help="the config as a GemmConfig tag <pp|coop><block_m>x<block_n>[c2][cn2][g<group_m>]"
                            "[r<m|n|h>][s<stages>], e.g. pp128x128 or coop256x128c2; not with tile options "
                            "(default: the tile options below if any is given, else ptxgemm's selection)")
    config_cli.add_config_arguments(group)
    probe = p.add_argument_group("swizzle probe (--kernel swizzle_probe)")
    probe.add_argument("--mode", default=None, help="none, 32B, 64B or 128B (default 128B)")
    probe.add_argument("--rows", type=int, default=None, help="tile rows (default 8)")
    probe.add_argument("--cols", type=int, default=None,
                       help="tile columns of 16-bit elements (default: one swizzle span, 64 for 128B)")
    p.set_defaults(func=cmd_dump)


def cmd_dump(args) -> int:
    from .cli import options as config_cli
    from .tools import dump
    from .errors import ConfigError

    if args.kernel == "swizzle_probe":
        gemm_options = (*SHAPE_OPTIONS, "config", *config_cli.TILE_OPTIONS, *config_cli.OPERAND_OPTIONS,
                        *config_cli.BUILD_FLAGS)
        given = config_cli.given(args, gemm_options)
        if given:
            raise ConfigError(f"{', '.join(given)}: GEMM options, not options of --kernel swizzle_probe")
    else:
        given = config_cli.given(args, PROBE_OPTIONS)
        if given:
            raise ConfigError(f"{', '.join(given)}: options of --kernel swizzle_probe, not of --kernel {args.kernel}")
    report = dump.dump(args)
    print(dump.summary(report, args.out))
    return 0


# ---------------------------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------------------------

# ---------------------------------------------------------------------------------------------------------------
# mutants
# ---------------------------------------------------------------------------------------------------------------

MUTANT_PRESETS = {"default": {}, "cluster": {"cluster_m": 2},
                  "cooperative": {"schedule": "cooperative", "block_m": 256},
                  "cooperative-cluster": {"schedule": "cooperative", "block_m": 256, "cluster_m": 2},
                  "cooperative-cluster-n": {"schedule": "cooperative", "block_m": 128, "block_n": 256, "cluster_n": 2},
                  "split": {"splits": 3},
                  "cooperative-split": {"schedule": "cooperative", "block_m": 128, "block_n": 256, "splits": 3},
                  # the fused epilogue's source tile (its full/empty mbarriers), and blockwise fp8 promotion
                  # (col_pairs: the workloads' N are even and their bias a fresh allocation, so plans read it in pairs)
                  "epilogue": {"source_dtype": "bfloat16", "bias": "col", "activation": "gelu", "col_pairs": True},
                  "cooperative-epilogue": {"schedule": "cooperative", "block_m": 256, "source_dtype": "float16",
                                           "bias": "row", "activation": "silu"},
                  # the shape of the fuzzer's case that showed the source tile's read-then-reload race (issue 22):
                  # 64-row pingpong tiles, fp32 S and out (the longest S reads), column scales
                  "epilogue-fp32": {"block_m": 64, "in_dtype": "float16", "out_dtype": "float32",
                                    "source_dtype": "float32", "alpha": True, "col_scale": True, "activation": "relu",
                                    "col_pairs": True},
                  "blockwise": {"schedule": "cooperative", "block_m": 128, "block_n": 128,
                                "in_dtype": "float8_e4m3fn", "b_major": "k", "block_scale": True}}


def _add_mutants_parser(sub) -> None:
    from .cli import options as config_cli
    from .tools import mutant_catalog, mutants

    p = sub.add_parser("mutants", help="delete or weaken each synchronization instruction and show the GPU catches it",
                       description="Mutation testing of the GEMM's barriers, fences and waits (see ptxgemm/tools/mutants.py). "
                                   "--list needs no GPU; a run needs an sm_90 GPU.")
    p.add_argument("--preset", action="append", choices=sorted(MUTANT_PRESETS), default=None,
                   help="a named config to mutate (repeatable; default: the config options below, i.e. the default "
                        "kernel); 'cluster' is the default kernel with cluster_m=2, 'cooperative' the "
                        "cooperative 256x128 one, 'cooperative-cluster' that with cluster_m=2, "
                        "'cooperative-cluster-n' the cooperative 128x256 with cluster_n=2 (A multicast), 'split' the "
                        "default kernel with split-K 3, 'cooperative-split' the cooperative 128x256 with split-K 3, "
                        "'epilogue' the default kernel adding a bf16 source tile, a column bias and gelu, "
                        "'cooperative-epilogue' the cooperative 256x128 with an fp16 source, a row bias and silu, "
                        "'epilogue-fp32' the pingpong 64x128 fp16 -> fp32 with an fp32 source, column scales and "
                        "relu, "
                        "'blockwise' the fp8 cooperative 128x128 with blockwise scales")
    p.add_argument("--list", action="store_true",
                   help="enumerate the mutants without a GPU and without running them (default off: run them)")
    p.add_argument("--build", action="store_true", help="with --list: also assemble every mutant (kills the ones "
                                                          "ptxas rejects, finds equivalent ones) (default off)")
    p.add_argument("--kind", action="append", default=None,
                   help="only mutants of this instruction kind, one of "
                        f"{', '.join(sorted(k.name for k in mutant_catalog.SYNC_KINDS))} (repeatable; default: all)")
    p.add_argument("--template", default=None,
                   help="only mutants of lines a template wrote, itself or through its macros, e.g. splitk.ptx.j2 "
                        "(default: all)")
    p.add_argument("--json", default=None, help="write the results as JSON to this path (default: none)")
    p.add_argument("--timeout", type=float, default=mutants.DEFAULT_TIMEOUT_S,
                   help=f"seconds a mutant may run before it counts as hung (default {mutants.DEFAULT_TIMEOUT_S:.0f})")
    p.add_argument("--repeats", type=int, default=2, help="launches per workload per mutant (default 2)")
    config_cli.add_config_arguments(p.add_argument_group("GEMM configuration (when no --preset is given)"))
    p.set_defaults(func=cmd_mutants)


def cmd_mutants(args) -> int:
    import dataclasses

    from .cli import options as config_cli
    from .tools import mutant_catalog, mutants
    from .kernel.config import GemmConfig
    from .errors import ConfigError

    if args.repeats < 1 or args.timeout <= 0:
        raise ConfigError("--repeats must be >= 1 and --timeout > 0")
    known = {k.name for k in mutant_catalog.SYNC_KINDS}
    for kind in args.kind or ():
        if kind not in known:
            raise ConfigError(f"--kind: must be one of {', '.join(sorted(known))}, got {kind!r}")
    configs = ([GemmConfig(**MUTANT_PRESETS[p]) for p in args.preset] if args.preset
               else [config_cli.config_from_args(args)])
    if not args.list:
        from .runtime import driver

        driver.require_sm90("running mutants (use --list to enumerate them without a GPU)")
    result = {"configs": []}
    unexplained = 0
    for config in configs:
        ptx, found = mutant_catalog.enumerate_mutants(config)
        if args.kind:
            found = [m for m in found if m.kind in args.kind]
        if args.template:
            found = [m for m in found if mutant_catalog.in_template(m, args.template)]
        extra = {}
        if args.build or not args.list:
            texts = mutants.build(ptx, found, progress=lambda s: print(s, file=sys.stderr, flush=True))
            if not args.list:
                extra = mutants.run_on_gpu(config, ptx, found, texts, timeout_s=args.timeout, repeats=args.repeats,
                                           progress=lambda s: print(s, file=sys.stderr, flush=True))
        print(mutants.format_table(config, found), flush=True)
        unexplained += sum(m.reason.startswith("unexplained") for m in found)
        result["configs"].append({"config": dataclasses.asdict(config), "description": config.describe(),
                                  "mutated_build": "debug (bounded waits, "
                                                   f"{mutant_catalog.DEBUG_TIMEOUT_NS // 1_000_000} ms)",
                                  **extra, "mutants": [m.record() for m in found]})
    if not args.list:
        from .runtime import driver

        info = driver.device_info()
        result = {"gpu": info.name, "driver": info.driver_version_str, "sm_count": info.sm_count, **result}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 1 if unexplained else 0


# ---------------------------------------------------------------------------------------------------------------
# trace
# ---------------------------------------------------------------------------------------------------------------

def _add_trace_parser(sub) -> None:
    from .cli import options as config_cli

    p = sub.add_parser("trace", help="record a per-warpgroup timeline of one GEMM launch on the GPU",
                       description="Run the GEMM once with GemmConfig(trace=True) and write what every warpgroup did "
                                   "and when: trace.json.gz (Chrome trace / Perfetto: a process per SM, a track per "
                                   "role), summary.json, sm<N>.png and overview.png (with the 'plot' extra); then "
                                   "time the traced kernel against the untraced one. Needs an sm_90 GPU.")
    for dim in SHAPE_OPTIONS:
        p.add_argument(f"--{dim}", type=int, required=True,
                       help=f"problem size {dim.upper()}, >= 1 (required; no default)")
    p.add_argument("--out", required=True, help="output directory, created if missing (required; no default)")
    p.add_argument("--ctas", type=int, default=None, help="cap the grid (default: one CTA per SM)")
    p.add_argument("--sm", type=int, default=None, help="the SM to draw in sm<N>.png (default: the SM whose CTA "
                                                        "finished at the median time)")
    p.add_argument("--rounds", type=int, default=20,
                   help="interleaved rounds per overhead set (default 20; 0 skips the overhead measurement)")
    p.add_argument("--sets", type=int, default=3, help="independent overhead sets, for min/median/max (default 3)")
    p.add_argument("--seed", type=int, default=0, help="random inputs' seed (default 0)")
    p.add_argument("--also", action="append", default=[], metavar="NAME=VALUE[,...]",
                   help="also trace this variant of the config on the same problem and draw it under the first in "
                        "compare.png (repeatable; e.g. --also block_n=192 --also cluster_m=2; default: none)")
    config_cli.add_config_arguments(p.add_argument_group("GEMM configuration"))
    p.set_defaults(func=cmd_trace)


def cmd_trace(args) -> int:
    from pathlib import Path

    from .cli import options as config_cli
    from .runtime import driver
    from .tools import trace, tracing
    from .errors import ConfigError

    for dim in SHAPE_OPTIONS:
        if getattr(args, dim) < 1:
            raise ConfigError(f"--{dim}: must be >= 1, got {getattr(args, dim)}")
    if args.rounds < 0 or args.sets < 1:
        raise ConfigError(f"--rounds must be >= 0 and --sets >= 1, got {args.rounds} and {args.sets}")
    config = config_cli.config_from_args(args)
    variants = [tracing.config_variant(config, spec) for spec in args.also]  # bad specs fail before the GPU
    reason = driver.no_device_reason()
    if reason is not None:
        raise ConfigError(f"trace runs the kernel, so it needs an sm_90 GPU (H100/H200), and there is none here: "
                          f"{reason.rstrip('.')}. `python -m ptxgemm dump` shows the traced build without one (add --trace)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rec = tracing.record(args.m, args.n, args.k, config, ctas=args.ctas, seed=args.seed)
    t = rec.trace
    print(f"{t.meta['gpu']}: {args.m}x{args.n}x{args.k}, {t.meta['config']}, grid {t.meta['grid']}")
    print(f"result check on sampled rows: {rec.verdict}")
    summary = t.summary()
    print(trace.format_summary(summary))
    agreement = tracing.span_agreement(rec)
    print(f"traced launch {rec.event_ms * 1e3:.1f} us by CUDA events; first to last event {t.kernel_end_ns / 1e3:.1f} "
          f"us ({agreement:+.1%})")
    if rec.ptxas:
        print(f"traced build: {rec.ptxas['registers']} registers at entry, {rec.ptxas['spill_store_bytes']} B "
              f"spill stores")
    result = {"meta": t.meta, "summary": summary, "event_ms": rec.event_ms, "span_vs_events": agreement,
              "check": str(rec.verdict), "check_ok": rec.verdict.ok, "traced_build": rec.ptxas}
    if args.rounds:
        ovh = tracing.overhead(args.m, args.n, args.k, config, rounds=args.rounds, sets=args.sets, seed=args.seed)
        print(ovh)
        result["overhead"] = ovh.as_dict()
    others = []
    for variant in variants:
        other = tracing.record(args.m, args.n, args.k, variant, ctas=args.ctas, seed=args.seed)
        print(f"\n--also {variant.describe()}: check {other.verdict}")
        print(trace.format_summary(other.trace.summary()))
        others.append(other)
        result.setdefault("also", []).append({"meta": other.trace.meta, "summary": other.trace.summary(),
                                              "event_ms": other.event_ms, "check_ok": other.verdict.ok})
    t.to_chrome(out / "trace.json.gz")
    written = ["trace.json.gz"]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("no PNGs: matplotlib is not installed (pip install 'ptxgemm[plot]')")
    else:
        sm = t.default_sm() if args.sm is None else args.sm
        t.plot_sm(out / f"sm{sm}.png", sm)
        t.plot_overview(out / "overview.png")
        written += [f"sm{sm}.png", "overview.png"]
        if others:
            trace.plot_compare([t] + [o.trace for o in others], out / "compare.png",
                               labels=[r.trace.meta["config"] for r in [rec] + others])
            written.append("compare.png")
    with open(out / "summary.json", "w") as f:
        json.dump(result, f, indent=1, default=str)
    written.append("summary.json")
    print(f"wrote {', '.join(written)} to {out}")
    return 0 if rec.verdict.ok and all(o.verdict.ok for o in others) else 1


# ---------------------------------------------------------------------------------------------------------------
# select and tune
# ---------------------------------------------------------------------------------------------------------------

def _add_problem_arguments(p) -> None:
    from .kernel.config import INPUT_DTYPES, MAJORS, OUTPUT_DTYPES

    for dim in SHAPE_OPTIONS:
        p.add_argument(f"--{dim}", type=int, required=True,
                       help=f"problem size {dim.upper()}, >= 1 (required; no default)")
    p.add_argument("--in-dtype", default="bfloat16", choices=INPUT_DTYPES,
                   help=f"A and B's dtype: {', '.join(INPUT_DTYPES)} (default bfloat16)")
    p.add_argument("--out-dtype", default=None, choices=OUTPUT_DTYPES,
                   help=f"C's dtype: {', '.join(OUTPUT_DTYPES)} (default: the same as --in-dtype)")
    p.add_argument("--a-major", default="k", choices=MAJORS,
                   help="A's contiguous dimension: k (row-major (M, K)) or mn (default k)")
    p.add_argument("--b-major", default="mn", choices=MAJORS,
                   help="B's contiguous dimension: mn (row-major (K, N)) or k (default mn)")


def _problem_args(args) -> tuple:
    return (args.m, args.n, args.k, args.in_dtype, args.out_dtype, args.a_major, args.b_major)


def _add_select_parser(sub) -> None:
    p = sub.add_parser("select", help="print the config ptxgemm picks for a problem and the cost model's table "
                                      "(no GPU needed)",
                       description="Print the config select_config picks (the tune cache's winner for this GPU, or "
                                   "else the cost model's) and the cost model's table of candidates, fastest first. "
                                   "No GPU needed: without one the model assumes 132 SMs.")
    _add_problem_arguments(p)
    p.add_argument("--sm-count", type=int, default=None,
                   help="model a GPU with this many SMs, >= 1 (default: the GPU's own count, or 132 without one); "
                        "skips the tune cache, which is keyed by a real GPU")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table (default: the table)")
    p.set_defaults(func=cmd_select)


def cmd_select(args) -> int:
    from .select import model as select
    from .errors import ConfigError

    device = None
    if args.sm_count is not None:
        if args.sm_count < 1:
            raise ConfigError(f"--sm-count: must be >= 1, got {args.sm_count}")
        device = select.DeviceModel(f"model with {args.sm_count} SMs", args.sm_count)
    device = select.resolve_device(device)
    config, source = select.choose(*_problem_args(args), device=device)
    rows = select.explain(*_problem_args(args), device=device)
    if args.json:
        print(json.dumps({"config": config.tag, "source": source, "description": config.describe(),
                          "device": {"name": device.name, "sm_count": device.sm_count}, "candidates": rows}, indent=1))
        return 0
    print(f"{config.tag}  ({source}; {device.name}, {device.sm_count} SMs)")
    print(f"  {config.describe()}")
    print(select.format_table(rows, chosen=config.tag))
    return 0


def _add_tune_parser(sub) -> None:
    from .select import model as select
    from .bench import tune as tuning
    from .kernel.config import TAG_SCHEDULE

    p = sub.add_parser("tune", help="time the candidate configs of a problem on the GPU and store the fastest",
                       description="Run every candidate config once and check its result on sampled rows against "
                                   "float64 (a wrong one is reported and never chosen), time the rest together "
                                   "(ptxgemm.runtime.timing: L2 flushed before each launch, interleaved rounds, median) and "
                                   "store the winner in <cache dir>/tune.json, where select_config finds it "
                                   "(PTXGEMM_TUNE_CACHE=off disables both). Needs an sm_90 GPU. Exit status 1 when a "
                                   "candidate failed to run or produced a wrong result.")
    _add_problem_arguments(p)
    tags = [f"{TAG_SCHEDULE[sched]}{bm}x{bn}" for sched, bm, bn in select.CANDIDATE_TILES]
    p.add_argument("--candidates", default=None, metavar="TAG,TAG,...",
                   help="configs to try, as GemmConfig tags <pp|coop><block_m>x<block_n>[c2] (e.g. "
                        f"{tags[0]},{tags[-3]}c2) (default: select's candidates: every one of {', '.join(tags)}, "
                        f"with and without c2, that GemmConfig accepts)")
    p.add_argument("--rounds", type=int, default=20, help="interleaved timing rounds, >= 1 (default 20)")
    p.add_argument("--no-store", action="store_true", help="do not write the tune cache (default: store the winner)")
    p.add_argument("--seed", type=int, default=0, help="random operands' seed (default 0)")
    p.add_argument("--check-rows", type=int, default=tuning.CHECK_ROWS,
                   help=f"rows checked against float64, >= 1 (default {tuning.CHECK_ROWS})")
    p.add_argument("--json", default=None, metavar="PATH",
                   help="also write the winner and every candidate's record as JSON here (default: none)")
    p.set_defaults(func=cmd_tune)


def cmd_tune(args) -> int:
    import dataclasses

    from .runtime import driver
    from .bench import tune as tuning
    from .errors import ConfigError
    from .select.problem import Problem

    problem = Problem(*_problem_args(args))  # bad arguments fail before the GPU question
    for name in ("rounds", "check_rows"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')}: must be >= 1, got {getattr(args, name)}")
    if args.candidates is not None:
        tuning.candidate_configs(problem, args.candidates)
    reason = driver.no_device_reason()
    if reason is not None:
        raise ConfigError(f"tune runs the kernel, so it needs an sm_90 GPU (H100/H200), and there is none here: "
                          f"{reason.rstrip('.')}. `python -m ptxgemm select` shows the cost model's choice without one")
    winner, records = tuning.tune(*_problem_args(args), candidates=args.candidates, rounds=args.rounds,
                                  store=not args.no_store, progress=lambda line: print(line, flush=True),
                                  seed=args.seed, check_rows=args.check_rows)
    if args.json:
        info = driver.device_info()
        with open(args.json, "w") as f:
            json.dump({"gpu": info.name, "sm_count": info.sm_count, "driver": info.driver_version_str,
                       "problem": dataclasses.asdict(problem), "winner": winner.tag, "rounds": args.rounds,
                       "candidates": records}, f, indent=1)
    return 0 if all(r["ok"] for r in records) else 1  # a candidate that failed or computed wrong is a bug


class Parser(argparse.ArgumentParser):
    """argparse's errors (a missing option, an invalid choice) as one line on stderr and exit status 2, like every
    other bad input; argparse's own way adds the usage text, which buries the one line that matters."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    from .cli import banks as bank_cli, bench as bench_cli, swizzle as swizzle_cli
    from .tools import fuzz

    parser = Parser(prog=PROG, description="ptxgemm: Hopper GEMM from PTX templates. Every command's --help lists "
                                           "its options with their defaults.")
    parser.add_argument("--version", action="version", version=f"ptxgemm {__version__}",
                        help="print 'ptxgemm <version>' and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    demo = sub.add_parser("demo", help="multiply random matrices on the GPU, check and time it (no GPU: build only)",
                          description="Multiply random bf16 matrices with ptxgemm.run, check the result against "
                                      "float64 and time the kernel; without an H100/H200, build the kernel, show what "
                                      "ptxas made of it and say why nothing ran.")
    for dim in ("m", "n", "k"):
        demo.add_argument(f"--{dim}", type=int, default=4096, help=f"problem size {dim.upper()} (default 4096)")
    demo.set_defaults(func=cmd_demo)
    info = sub.add_parser("info", help="print the toolchain, the cache directory and the GPU",
                          description="Print ptxas/nvdisasm paths and versions, the cubin cache directory and the GPU.")
    info.add_argument("--json", action="store_true", help="print JSON (default off: lines of text)")
    info.set_defaults(func=cmd_info)
    _add_dump_parser(sub)
    _add_select_parser(sub)
    _add_tune_parser(sub)
    bench_cli.add_parser(sub)
    _add_trace_parser(sub)
    _add_mutants_parser(sub)
    fuzz.add_parser(sub)
    swizzle_cli.add_parser(sub)
    bank_cli.add_parser(sub)
    return parser


def cmd_demo(args) -> int:
    from .cli.demo import run_demo

    return run_demo(args.m, args.n, args.k)


def main(argv=None) -> int:
    from .cli.banks import glue_address_list

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
