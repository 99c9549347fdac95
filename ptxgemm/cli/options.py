"""The GEMM config's command-line options, shared by `dump`, `trace`, `mutants` and `bank-conflicts`.

Every option defaults to None ("not given") and its help states the value GemmConfig uses instead, so a command can
tell a choice the user made from a default: `dump` selects the config itself when no tile option is given.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import ConfigError
from ..kernel.hardware import MAX_STAGES
from ..kernel.layout import FILL_STAGES
from ..kernel.config import (FP8_DTYPES, GemmConfig, INPUT_DTYPES, MAJORS, OUTPUT_DTYPES, RASTERS, SCHEDULES,
                             default_out_dtype)

#: options that choose the tile and its walk: what a config tag (GemmConfig.from_tag) names
TILE_OPTIONS = ("schedule", "block_m", "block_n", "stages", "group_m", "cluster_m", "cluster_n", "raster",
                "stream_k", "sk_wave")
#: options the operands decide (selection takes them as part of the problem)
OPERAND_OPTIONS = ("in_dtype", "out_dtype", "a_major", "b_major")
#: build switches that apply to whichever config runs
BUILD_FLAGS = ("debug", "trace")

SHAPE_OPTIONS = ("m", "n", "k")   # the problem size options of dump, trace, select and tune


def flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def add_config_arguments(group) -> None:
    """GemmConfig's fields as options of an argparse parser or argument group (every default None or off)."""
    d = GemmConfig()
    group.add_argument("--schedule", default=None, choices=SCHEDULES,
                       help=f"how the two consumer warpgroups share tiles: pingpong (they alternate whole tiles) or "
                            f"cooperative (both compute every tile, half each) (default {d.schedule})")
    group.add_argument("--block-m", type=int, default=None,
                       help=f"tile rows: pingpong 64 or 128, cooperative 128 or 256 (default {d.block_m})")
    group.add_argument("--block-n", type=int, default=None,
                       help=f"tile columns, a multiple of 16 in 16..256 (default {d.block_n})")
    group.add_argument("--stages", type=int, default=None,
                       help=f"load pipeline stages, 2..{MAX_STAGES} where they fit (default: as many as fit in "
                            f"shared memory, up to {FILL_STAGES})")
    group.add_argument("--group-m", type=int, default=None,
                       help=f"tile-rows (raster m) or tile-columns (raster n) per rasterization group, 1..64 "
                            f"(default {d.group_m})")
    group.add_argument("--cluster-m", type=int, default=None, choices=(1, 2),
                       help=f"CTAs per cluster along M; 2: the pair shares B by multicast (default {d.cluster_m})")
    group.add_argument("--cluster-n", type=int, default=None, choices=(1, 2),
                       help=f"CTAs per cluster along N; 2: the pair shares A by multicast (default {d.cluster_n})")
    group.add_argument("--raster", default=None, choices=RASTERS,
                       help="tile walk: grouped down group_m tile-rows (m), across group_m tile-columns (n), or "
                            f"along a generalized Hilbert curve (hilbert) (default {d.raster})")
    group.add_argument("--stream-k", action="store_true", default=None,
                       help="the stream-K tail: the last partial wave's k-tiles shared by every cluster (cooperative "
                            "schedule only) (default off)")
    group.add_argument("--sk-wave", action="store_true", default=None,
                       help="with --stream-k: the tail takes one full wave with it, so each cluster's share is a "
                            "unit or more (default off)")
    add_operand_arguments(group)
    group.add_argument("--debug", action="store_true",
                       help="bounded barrier waits that report which barrier stalled (default off)")
    group.add_argument("--trace", action="store_true",
                       help="record a per-warpgroup timeline (ptxgemm.tools.trace) (default off; `python -m ptxgemm "
                            "trace` turns it on itself)")


def add_operand_arguments(group) -> None:
    """--in-dtype, --out-dtype, --a-major and --b-major, every default None: operand_fields fills them in, by the
    one rule every command shares (fp8 reads both operands K-major)."""
    d = GemmConfig()
    group.add_argument("--in-dtype", default=None, choices=INPUT_DTYPES,
                       help=f"A and B's dtype: {', '.join(INPUT_DTYPES)} (default {d.in_dtype})")
    group.add_argument("--out-dtype", default=None, choices=OUTPUT_DTYPES,
                       help=f"C's dtype: {', '.join(OUTPUT_DTYPES)} (default: the same as --in-dtype)")
    group.add_argument("--a-major", default=None, choices=MAJORS,
                       help=f"A's contiguous dimension: k (row-major (M, K)) or mn (default {d.a_major}; fp8 "
                            f"--in-dtype: k only)")
    group.add_argument("--b-major", default=None, choices=MAJORS,
                       help=f"B's contiguous dimension: mn (row-major (K, N)) or k (default {d.b_major}; k for an "
                            f"fp8 --in-dtype, which reads both operands K-major only)")


def given(args, dests) -> list[str]:
    """The flags among `dests` the command line set (a value other than None / off)."""
    return [flag(d) for d in dests if getattr(args, d, None) not in (None, False)]


def operand_fields(args) -> dict:
    """in_dtype, out_dtype, a_major and b_major as GemmConfig takes them; an unset out_dtype follows in_dtype, as
    ptxgemm.run's output does. fp8 inputs default both majors to k (wgmma reads 8-bit types only K-major, so
    GemmConfig's default B mn-major could never build); asking for mn with them is a ConfigError naming the option."""
    d = GemmConfig()
    in_dtype = args.in_dtype or d.in_dtype
    a_major, b_major = args.a_major or d.a_major, args.b_major or d.b_major
    if in_dtype in FP8_DTYPES:
        for option, major in (("--a-major", args.a_major), ("--b-major", args.b_major)):
            if major not in (None, "k"):
                raise ConfigError(f"{option}: {major} with --in-dtype {in_dtype}: fp8 operands are K-major only "
                                  f"(wgmma has no transpose for 8-bit types); leave {option} out (k) or give k")
        a_major = b_major = "k"
    return {"in_dtype": in_dtype, "out_dtype": args.out_dtype or default_out_dtype(in_dtype), "a_major": a_major,
            "b_major": b_major}


def build_fields(args) -> dict:
    return {name: bool(getattr(args, name, False)) for name in BUILD_FLAGS}


def add_config_tag_argument(group) -> None:
    """--config TAG: the tile as a GemmConfig tag, instead of the tile options (named_config)."""
    group.add_argument("--config", default=None, metavar="TAG",
                       help="the config as a GemmConfig tag <pp|coop><block_m>x<block_n>[t][c2][cn2][g<group_m>]"
                            "[r<m|n|h>][k<splits>][sk[w]][z][s<stages>], e.g. pp128x128, coop256x128c2 or "
                            "pp64x64k3s13; not with tile options (default: the tile options if any is given, else "
                            "ptxgemm's selection for the shape)")


def named_config(args, operands: dict | None = None, **fields) -> tuple[GemmConfig, str] | None:
    """(config, where it came from) as --config TAG or the tile options name it, with `operands` (default: the
    operand options, operand_fields), the build switches and `fields`; None where neither is given. Both at once is a
    ConfigError naming --config: the tag names the tile options itself."""
    tiles = given(args, TILE_OPTIONS)
    tag = getattr(args, "config", None)
    if tag is not None and tiles:
        raise ConfigError(f"--config: the tag names the tile options itself; give --config or {', '.join(tiles)}, "
                          f"not both")
    if tag is not None:
        ops = operand_fields(args) if operands is None else operands
        return GemmConfig.from_tag(tag, **ops, **build_fields(args), **fields), "--config"
    if tiles:
        return config_from_args(args, operands, **fields), f"tile options {' '.join(tiles)}"
    return None


def config_from_args(args, operands: dict | None = None, **fields) -> GemmConfig:
    """The GemmConfig the options describe, with `operands` (default: the operand options, operand_fields) and
    `fields`: GemmConfig's defaults for every option not given (ConfigError names a bad value)."""
    tile = {d: getattr(args, d) for d in TILE_OPTIONS if getattr(args, d, None) is not None}
    ops = operand_fields(args) if operands is None else operands
    return GemmConfig(**tile, **ops, **build_fields(args), **fields)


def add_problem_arguments(p) -> None:
    """The problem of `select` and `tune`: its size and its operands, whose defaults are dump's (operand_fields)."""
    for dim in SHAPE_OPTIONS:
        p.add_argument(f"--{dim}", type=int, required=True,
                       help=f"problem size {dim.upper()}, >= 1 (required; no default)")
    add_operand_arguments(p)


def problem_args(args) -> tuple:
    """(m, n, k, in_dtype, out_dtype, a_major, b_major) as select_config and tune take them, the operands filled in
    by operand_fields, so that `select` and `tune` read B K-major for fp8 as `dump` does."""
    f = operand_fields(args)
    return (args.m, args.n, args.k, f["in_dtype"], f["out_dtype"], f["a_major"], f["b_major"])


def check_output_dir(path: str, option: str = "--out") -> Path:
    """The directory an --out option names, checked before any work and without creating it: it must be a
    directory, or creatable as one (its nearest existing parent a writable directory). A path that cannot be one (an
    existing file, a file among its parents, no permission) is a one-line ConfigError naming the option and the rule
    rather than an OSError's traceback after the build; the command creates the directory when it writes."""
    out = Path(path)
    rule = f"{option} names a directory, created if missing"
    if out.exists():
        if not out.is_dir():
            raise ConfigError(f"{option}: {path} is an existing file; {rule} (give a new or a directory path)")
        where = out
    else:
        where = next(p for p in out.absolute().parents if p.exists())
        if not where.is_dir():
            raise ConfigError(f"{option}: {path} cannot be created, {where} is a file; {rule}")
    if not os.access(where, os.W_OK | os.X_OK):
        raise ConfigError(f"{option}: {path} cannot be written, {where} is not writable; {rule}")
    return out
