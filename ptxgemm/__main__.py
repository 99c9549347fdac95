"""ptxgemm's command line.

    python -m ptxgemm dump [--kernel gemm] --m M --n N --k K [GEMM config options] --out DIR
    python -m ptxgemm dump --kernel swizzle_probe [--mode 128B] [--rows R] [--cols C] --out DIR
    python -m ptxgemm info
    python -m ptxgemm mutants [--preset default --preset cluster | GEMM config options] [--list] [--json PATH]
    python -m ptxgemm trace --m M --n N --k K [GEMM config options] --out DIR

`dump` needs no GPU: it renders the PTX, assembles it with ptxas and writes PTX, cubin, SASS and report.json.
`info` prints the toolchain (ptxas, nvdisasm), the cubin cache directory and the GPU, if there is one.
Errors are one line on stderr (ptxas failures add ptxas's own log) and exit status 2.
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
    from . import codegen, compiler, toolchain

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
    from . import driver

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
    from . import dump
    from .config import GemmConfig

    p = sub.add_parser("dump", help="write a kernel's PTX, cubin, SASS and report.json (no GPU needed)",
                       description="Render a kernel, assemble it with ptxas and write NAME.ptx, NAME.cubin, NAME.sass, "
                                   "ptxas.log and report.json to --out. No GPU needed.")
    p.add_argument("--kernel", choices=dump.KERNELS, default="gemm", help="which kernel (default gemm)")
    p.add_argument("--out", required=True, help="output directory (created if missing)")
    GemmConfig.add_cli_arguments(p.add_argument_group("GEMM configuration (--kernel gemm)"))
    shape = p.add_argument_group("GEMM problem shape (--kernel gemm)")
    for dim in SHAPE_OPTIONS:
        shape.add_argument(f"--{dim}", type=int, default=None, help=f"problem size {dim.upper()}")
    probe = p.add_argument_group("swizzle probe (--kernel swizzle_probe)")
    probe.add_argument("--mode", default=None, help="none, 32B, 64B or 128B (default 128B)")
    probe.add_argument("--rows", type=int, default=None, help="tile rows (default 8)")
    probe.add_argument("--cols", type=int, default=None,
                       help="tile columns of 16-bit elements (default: one swizzle span, 64 for 128B)")
    p.set_defaults(func=cmd_dump)


def cmd_dump(args) -> int:
    from . import dump
    from .errors import ConfigError

    if args.kernel == "swizzle_probe":
        given = [f"--{o}" for o in SHAPE_OPTIONS if getattr(args, o, None) is not None]
        if given:
            raise ConfigError(f"{', '.join(given)}: GEMM options, not options of --kernel swizzle_probe")
    else:
        given = [f"--{o}" for o in PROBE_OPTIONS if getattr(args, o, None) is not None]
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

MUTANT_PRESETS = {"default": {}, "cluster": {"cluster_m": 2}}


def _add_mutants_parser(sub) -> None:
    from . import mutants
    from .config import GemmConfig

    p = sub.add_parser("mutants", help="delete or weaken each synchronization instruction and show the GPU catches it",
                       description="Mutation testing of the GEMM's barriers, fences and waits (see ptxgemm/mutants.py). "
                                   "--list needs no GPU; a run needs an sm_90 GPU.")
    p.add_argument("--preset", action="append", choices=sorted(MUTANT_PRESETS), default=None,
                   help="a named config to mutate (repeatable; default: the config options below, i.e. the default "
                        "kernel); 'cluster' is the default kernel with cluster_m=2")
    p.add_argument("--list", action="store_true", help="enumerate the mutants without a GPU and without running them")
    p.add_argument("--build", action="store_true", help="with --list: also assemble every mutant (kills the ones "
                                                          "ptxas rejects, finds equivalent ones)")
    p.add_argument("--kind", action="append", default=None,
                   help="only mutants of this instruction kind (repeatable; e.g. bar.sync); default: all")
    p.add_argument("--json", default=None, help="write the results as JSON to this path (default: none)")
    p.add_argument("--timeout", type=float, default=mutants.DEFAULT_TIMEOUT_S,
                   help=f"seconds a mutant may run before it counts as hung (default {mutants.DEFAULT_TIMEOUT_S:.0f})")
    p.add_argument("--repeats", type=int, default=2, help="launches per workload per mutant (default 2)")
    GemmConfig.add_cli_arguments(p.add_argument_group("GEMM configuration (when no --preset is given)"))
    p.set_defaults(func=cmd_mutants)


def cmd_mutants(args) -> int:
    import dataclasses

    from . import mutants
    from .config import GemmConfig
    from .errors import ConfigError

    if args.repeats < 1 or args.timeout <= 0:
        raise ConfigError("--repeats must be >= 1 and --timeout > 0")
    known = {k.name for k in mutants.SYNC_KINDS}
    for kind in args.kind or ():
        if kind not in known:
            raise ConfigError(f"--kind: must be one of {', '.join(sorted(known))}, got {kind!r}")
    configs = ([GemmConfig(**MUTANT_PRESETS[p]) for p in args.preset] if args.preset else [GemmConfig.from_cli(args)])
    if not args.list:
        from . import driver

        driver.require_sm90("running mutants (use --list to enumerate them without a GPU)")
    result = {"configs": []}
    unexplained = 0
    for config in configs:
        ptx, found = mutants.enumerate_mutants(config)
        if args.kind:
            found = [m for m in found if m.kind in args.kind]
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
                                                   f"{mutants.DEBUG_TIMEOUT_NS // 1_000_000} ms)",
                                  **extra, "mutants": [m.record() for m in found]})
    if not args.list:
        from . import driver

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
    from .config import GemmConfig

    p = sub.add_parser("trace", help="record a per-warpgroup timeline of one GEMM launch on the GPU",
                       description="Run the GEMM once with GemmConfig(trace=True) and write what every warpgroup did "
                                   "and when: trace.json.gz (Chrome trace / Perfetto: a process per SM, a track per "
                                   "role), summary.json, sm<N>.png and overview.png (with the 'plot' extra); then "
                                   "time the traced kernel against the untraced one. Needs an sm_90 GPU.")
    for dim in SHAPE_OPTIONS:
        p.add_argument(f"--{dim}", type=int, required=True, help=f"problem size {dim.upper()} (required)")
    p.add_argument("--out", required=True, help="output directory (created if missing)")
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
    GemmConfig.add_cli_arguments(p.add_argument_group("GEMM configuration"))
    p.set_defaults(func=cmd_trace)


def cmd_trace(args) -> int:
    from pathlib import Path

    from . import driver, trace, tracing
    from .config import GemmConfig
    from .errors import ConfigError

    for dim in SHAPE_OPTIONS:
        if getattr(args, dim) < 1:
            raise ConfigError(f"--{dim}: must be >= 1, got {getattr(args, dim)}")
    if args.rounds < 0 or args.sets < 1:
        raise ConfigError(f"--rounds must be >= 0 and --sets >= 1, got {args.rounds} and {args.sets}")
    config = GemmConfig.from_cli(args)
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="ptxgemm: Hopper GEMM from PTX templates.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_dump_parser(sub)
    _add_mutants_parser(sub)
    _add_trace_parser(sub)
    info = sub.add_parser("info", help="print the toolchain, the cache directory and the GPU",
                          description="Print ptxas/nvdisasm paths and versions, the cubin cache directory and the GPU.")
    info.add_argument("--json", action="store_true", help="print JSON")
    info.set_defaults(func=cmd_info)
    demo = sub.add_parser("demo", help="multiply random matrices on the GPU, check and time it (no GPU: build only)")
    for dim, default in (("--m", 4096), ("--n", 4096), ("--k", 4096)):
        demo.add_argument(dim, type=int, default=default)
    demo.set_defaults(func=cmd_demo)
    return parser


def cmd_demo(args) -> int:
    from .demo import run_demo

    return run_demo(args.m, args.n, args.k)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except PtxgemmError as e:
        print(f"{PROG} {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
