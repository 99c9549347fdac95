"""`python -m ptxgemm dump`: a kernel's PTX, cubin, SASS and report.json written to a folder (no GPU needed)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from ..errors import ConfigError
from ..kernel import schedule
from ..plan.grouped_call import GROUPED_TILES
from ..kernel.config import GROUPED_FORMS, GemmConfig
from ..select import cost_model as select
from ..toolchain import compiler
from ..toolchain.kernels import compile_gemm
from ..tools import dump, probes
from ..tools.dump import k_loop_report, write_dump, write_ptx
from . import options
from .options import SHAPE_OPTIONS

KERNELS = ("gemm", "swizzle_probe")
PROBE_OPTIONS = ("mode", "rows", "cols")


#: the command's --help text (its one-line summary is in ptxgemm/cli/main.py's table)
DESCRIPTION = ("Render a kernel, assemble it with ptxas and write NAME.ptx, NAME.cubin, NAME.sass, "
               "ptxas.log and report.json to --out. No GPU needed. For the GEMM, --m, --n and --k "
               "decide the tiles, the grid and the waves (for this GPU's SM count, or 132 without "
               "one), and the config unless you give one: --config TAG, or tile options "
               "(GemmConfig's defaults for the rest); with neither, the config ptxgemm selects "
               "for the shape, as GemmPlan would. The operand options and --debug/--trace apply "
               "either way.")


def add_arguments(p) -> None:
    p.add_argument("--kernel", choices=KERNELS, default="gemm",
                   help=f"which kernel: {' or '.join(KERNELS)} (default gemm)")
    p.add_argument("--out", required=True, help="output directory, created if missing (required; no default)")
    shape = p.add_argument_group("GEMM problem shape (--kernel gemm; required there)")
    for dim in SHAPE_OPTIONS:
        shape.add_argument(f"--{dim}", type=int, default=None,
                           help=f"problem size {dim.upper()}, >= 1 (required with --kernel gemm; no default)")
    group = p.add_argument_group("GEMM configuration (--kernel gemm)")
    options.add_config_tag_argument(group)
    options.add_config_arguments(group)
    group.add_argument("--grouped", default=None, choices=GROUPED_FORMS,
                       help="the grouped kernel (gemm_grouped.ptx.j2) of this form: contiguous, masked or k (the "
                            "k-grouped form, A and B MN-major), on the tile given or on 128x256 cooperative; the "
                            "counts are the device's, so the dump has no schedule (default: the dense kernel)")
    probe = p.add_argument_group("swizzle probe (--kernel swizzle_probe)")
    probe.add_argument("--mode", default=None, help="none, 32B, 64B or 128B (default 128B)")
    probe.add_argument("--rows", type=int, default=None, help="tile rows (default 8)")
    probe.add_argument("--cols", type=int, default=None,
                       help="tile columns of 16-bit elements (default: one swizzle span, 64 for 128B)")


def run(args) -> int:
    if args.kernel == "swizzle_probe":
        gemm_options = (*SHAPE_OPTIONS, "config", *options.TILE_OPTIONS, *options.OPERAND_OPTIONS,
                        *options.BUILD_FLAGS, "grouped")
        given = options.given(args, gemm_options)
        if given:
            raise ConfigError(f"{', '.join(given)}: GEMM options, not options of --kernel swizzle_probe")
    else:
        given = options.given(args, PROBE_OPTIONS)
        if given:
            raise ConfigError(f"{', '.join(given)}: options of --kernel swizzle_probe, not of --kernel {args.kernel}")
    options.check_output_dir(args.out)   # an unusable --out fails here, before the build (write_dump creates it)
    report = DUMPERS[args.kernel](args)
    print(dump.summary(report, args.out))
    return 0


def dump_swizzle_probe(args) -> dict:
    """--kernel swizzle_probe [--mode M] [--rows R] [--cols C]. The mode only picks the default columns and the
    rules the tile must meet: the swizzle itself lives in the tensor map, not in the PTX."""
    mode = args.mode or "128B"
    rows = args.rows if args.rows is not None else 8
    cols = args.cols if args.cols is not None else probes.default_cols(mode) if mode in probes.MODES else 0
    probes.check_tile(mode, rows, cols)
    out = Path(args.out)
    ptx = probes.swizzle_probe_ptx(rows, cols)
    write_ptx("swizzle_probe", ptx, out)
    kernel = compiler.compile_ptx(ptx)
    extras = {
        "params": {"mode": mode, "rows": rows, "cols": cols, "elem_bytes": probes.ELEM_BYTES,
                   "threads": probes.PROBE_THREADS, "debug": True,
                   # as launched by probes.run_swizzle_probe: the tile, then the load's 8-byte mbarrier (16 B
                   # reserved)
                   "dynamic_shared_bytes": rows * cols * probes.ELEM_BYTES + 16},
    }
    return write_dump("swizzle_probe", kernel, out, extras)


def check_shape(args) -> tuple[int, int, int]:
    """--m, --n and --k of --kernel gemm: all given, each >= 1."""
    missing = [f"--{d}" for d in SHAPE_OPTIONS if getattr(args, d, None) is None]
    if missing:
        raise ConfigError(f"{', '.join(missing)}: --kernel gemm needs --m, --n and --k (they decide the tiles, the "
                          f"grid and, without --config or tile options, the config)")
    for d in SHAPE_OPTIONS:
        if getattr(args, d) < 1:
            raise ConfigError(f"--{d}: must be >= 1, got {getattr(args, d)}")
    return args.m, args.n, args.k


def gemm_config(args, m: int, n: int, k: int, device) -> tuple[GemmConfig, str]:
    """(config, where it came from). --config TAG names one; tile options describe one (GemmConfig's defaults for
    the rest); with neither, ptxgemm.select.cost_model picks it for this shape, as GemmPlan would. The operand options
    (dtypes, majors) and --debug/--trace apply in every case."""
    operands, build = options.operand_fields(args), options.build_fields(args)
    if args.grouped:   # the grouped kernel: its own default tile (the k form reads both operands MN-major)
        if args.grouped == "k":
            operands.update(a_major=args.a_major or "mn", b_major=args.b_major or "mn")
        named = options.named_config(args, operands, grouped=args.grouped)
        if named is not None:
            return named[0], f"{named[1]}, --grouped"
        return (GemmConfig.from_tag(GROUPED_DEFAULT_TAG, **operands, **build, grouped=args.grouped),
                f"--grouped: the grouped kernel's widest tile, {GROUPED_DEFAULT_TAG}")
    named = options.named_config(args, operands)
    if named is not None:
        return named
    config, source = select.choose(m, n, k, **operands, device=device)
    return dataclasses.replace(config, **build), f"selected: {source}"


def dump_gemm(args) -> dict:
    """--kernel gemm --m M --n N --k K [--config TAG | tile options]: compile the GEMM and dump it, with what the
    shape decides."""
    m, n, k = check_shape(args)
    device = select.resolve_device(None)  # the GPU's SM count; without one, select's 132-SM default
    config, source = gemm_config(args, m, n, k, device)
    kernel = compile_gemm(config)
    predicted = config.report_extras()
    fields = predicted.pop("config")
    modeled = device is select.DEFAULT_DEVICE
    extras = {
        "config": {"tag": config.tag, "source": source, "description": config.describe(), "fields": fields},
        "predicted": predicted,
        "problem": {"m": m, "n": n, "k": k},
        "schedule": ({"grouped": "the walk depends on the group counts, which only the device reads"}
                     if config.grouped else
                     {**schedule.plan_for(config, m, n, k, device.sm_count).describe(), "sm_count": device.sm_count,
                      "device": (f"no GPU here: {device.sm_count} SMs assumed" if modeled else str(device.name))}),
    }
    if kernel.cubin is not None:
        extras["measured"] = {"consumer_k_loop_sass": k_loop_report(kernel.sass())}
    return write_dump("gemm", kernel, Path(args.out), extras)


GROUPED_DEFAULT_TAG = next(iter(GROUPED_TILES))   # the grouped kernel's default tile where groups are tall

DUMPERS = {"gemm": dump_gemm, "swizzle_probe": dump_swizzle_probe}
