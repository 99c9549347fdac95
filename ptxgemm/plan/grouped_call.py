"""The rest of a grouped call's planning on descriptors alone (ptxgemm.plan.grouped has the argument rules,
ptxgemm.plan.grouped_layout what is read in place and what is staged): which parts of the grouped GEMM have run on
a GPU, the default tile, the epilogue's grouped shapes mapped onto the dense epilogue's, and the kernel's scalar
arguments. ptxgemm.grouped builds the tensor maps and the launch from these."""
from __future__ import annotations

import ctypes
import dataclasses
import math

import numpy as np

from ..errors import ConfigError
from ..kernel import fast_div
from ..kernel.config import SCALE_BLOCK, GemmConfig
from ..select.cost_model import MULTICAST_DTYPES, MULTICAST_MIN_K
from ..select.predict import SK_DTYPES, SK_MIN_K_TILES
from . import epilogue, grouped

# The grouped kernel's tiles (cooperative, single CTAs, whole output panels) and how fast each runs a full tile,
# relative to the widest, on the H100's dense GEMM: the default config takes the one that finishes the mean group's
# units soonest over all SMs (whole waves of units, each as long as its tile's area over its efficiency).
GROUPED_TILES = {"coop128x256": 1.0, "coop256x128": 0.97, "coop128x192": 0.95, "coop128x128": 0.85}
# Pairs along M (cluster_m 2: each CTA loads half of the group's B panel and multicasts it) for groups as tall as
# dense problems that take the pair (select.cost_model's MULTICAST_* rule: 16-bit inputs, a k-loop of at least
# MULTICAST_MIN_K): the mean group (M_max when masked; the output's M in the k form) at least PAIR_MIN_ROWS rows.
# Measured beside the single CTA in the same rounds (H100, bf16, burst; grouped/bench_h100_grouped_bf16_pair_r1.json):
# DeepGEMM's contiguous groups of 4096 and 8192 rows 0.2-2.9% faster, Mixtral's (4096 rows, K 4096) within 0.6%;
# DeepSeek-V3's 256 experts (128 rows on average) 1-2% slower, the masked batches of 256-1024 rows 0.5-3% slower,
# and the k form's 128-row K ranges 4-5% slower (each unit's k-loop is two k-tiles: the pair only adds a wait).
PAIR_MIN_ROWS = 2048
# The stream-K tail (GemmConfig.stream_k) in the contiguous and masked forms: where the dense selection would
# weigh it (16-bit inputs, a k-loop of SK_MIN_K_TILES), the default config carries it, and the kernel itself
# decides each launch whether its last partial wave is cut (streamk.ptx.j2's split_on_device; only the device
# knows the unit count). Whole units left the last wave of 5 of the bench's 11 shapes 1-3% idle (perf-notes,
# issue 25 "where the last percent is"). Not where the mean group is one unit row (its units stream their B
# panels: memory-bound, so the last wave's idle SMs cost nothing; DeepSeek-V3's experts and decode batches), nor
# where the counts can never fill a wave (the kernel would run whole units anyway, and the tail's code measured
# 0.5-1.3% slower on DeepGEMM's masked batches of 128 units on 132 SMs; H100, perf-notes issue 25 step 12).
# The tables' size is rounded up to a power of two from G, at least this: few kernels serve every G.
MIN_GROUP_CAPACITY = 16
# Parts of the grouped GEMM that are rendered, assembled and planned but have not run on a GPU yet: each is refused
# (a ConfigError naming its argument) until its GPU tests (tests/test_grouped_gpu.py, which clear this for
# themselves) have passed on the device, and is then taken out of this table. Empty since the k-grouped form,
# the rowwise scales with a bias per group and the blockwise scales per expert passed theirs (H100, 2026-11-25).
UNVERIFIED: dict[str, tuple[str, str]] = {}


def check_verified(feature: str) -> None:
    if feature in UNVERIFIED:
        argument, what = UNVERIFIED[feature]
        raise ConfigError(f"{argument}: the grouped GEMM's {what} is built but has not yet run on a GPU; it is "
                          f"taken once its GPU tests pass (ptxgemm.plan.grouped_call.UNVERIFIED)")


def group_capacity(groups: int) -> int:
    return max(MIN_GROUP_CAPACITY, 1 << (groups - 1).bit_length())


def max_units(cfg: GemmConfig, problem: grouped.GroupedProblem) -> int:
    """The most units any counts give a contiguous or masked problem: every group's matrix full (masked), or every
    row of A in groups that each start a unit row of their own (contiguous)."""
    rows = (problem.groups * -(-problem.m // cfg.unit_rows) if problem.form == "masked" else
            -(-problem.m // cfg.unit_rows) + problem.groups - 1)
    return rows * -(-problem.n // cfg.block_n)


def check_ring_positions(cfg: GemmConfig, problem: grouped.GroupedProblem) -> None:
    """A CTA's ring position counts the k-tiles it has walked and is divided by the stage count with a multiply-high
    (intdiv.ptx.j2): the most units any counts can give times the k-tiles of each (the k form: K's k-tiles plus
    one partial k-tile per group) is what fast_div.check_walk bounds."""
    units = (max_units(cfg, problem) if problem.form != "k" else
             -(-problem.m // cfg.block_m) * -(-problem.n // cfg.block_n))
    k_tiles = -(-problem.k // cfg.block_k) + (problem.groups if problem.form == "k" else 0)
    fast_div.check_walk(units * k_tiles, f"up to {units} units of {k_tiles} k-tiles")


def check_stream_k(cfg: GemmConfig, problem: grouped.GroupedProblem) -> None:
    """The stream-K tail numbers k-tiles of the launch in 32 bits (streamk.ptx.j2): the most units any counts can
    give (max_units) times the k-tiles of each must fit; ConfigError names config.stream_k where they may not."""
    if not cfg.stream_k:
        return
    units, k_tiles = max_units(cfg, problem), -(-problem.k // cfg.block_k)
    if units * k_tiles >= 2 ** 32:
        raise ConfigError(f"config.stream_k: up to {units} units of {k_tiles} k-tiles overflow the kernel's 32-bit "
                          f"k-tile numbers; leave the stream-K tail off for this problem")


def default_config(problem: grouped.GroupedProblem, b_major: str, sm_count: int = 132, fused: dict | None = None,
                   spill_check=None) -> GemmConfig:
    """The tile for a grouped problem whose counts the host does not know: each group taken as the mean one (M_max
    rows when masked), the tile whose waves of units over `sm_count` SMs cost least (GROUPED_TILES), on pairs along
    M where the mean group is tall and its k-loop long (PAIR_MIN_ROWS). With a fused
    epilogue (`fused`: Epilogue.config_fields), a tile that ptxas spills or that the epilogue does not take yields
    to the next one, as the dense selection's picks do (`spill_check`: toolchain.kernels.spills)."""
    rows = problem.m if problem.form in ("masked", "k") else problem.m / problem.groups
    k_loop = problem.k / problem.groups if problem.form == "k" else problem.k    # the mean unit's K
    pair = (problem.in_dtype in MULTICAST_DTYPES and k_loop >= MULTICAST_MIN_K and rows >= PAIR_MIN_ROWS)

    def with_tail(cfg):   # the stream-K tail where the dense rule would weigh it (see SK_DTYPES above)
        if (problem.form == "k" or problem.in_dtype not in SK_DTYPES
                or -(-problem.k // cfg.block_k) < SK_MIN_K_TILES or rows <= cfg.unit_rows
                or max_units(cfg, problem) < sm_count // cfg.cluster_size):
            return cfg
        try:
            tail = dataclasses.replace(cfg, stream_k=True)
            check_stream_k(tail, problem)
        except ConfigError:
            return cfg
        return tail

    def cost(tag):
        t = GemmConfig.from_tag(tag)
        units = problem.groups * math.ceil(rows / t.block_m) * math.ceil(problem.n / t.block_n)
        return math.ceil(units / sm_count) * t.block_m * t.block_n / GROUPED_TILES[tag]

    configs, refused = [], []
    for tag in sorted(GROUPED_TILES, key=cost):
        try:   # a tile the epilogue does not take (blockwise scales: block_n divides 128) yields to the next
            cfg = GemmConfig.from_tag(tag, in_dtype=problem.in_dtype, b_dtype=problem.b_dtype,
                                      out_dtype=problem.out_dtype, a_major="mn" if problem.form == "k" else "k",
                                      b_major=b_major, grouped=problem.form,
                                      group_capacity=group_capacity(problem.groups), **(fused or {}))
        except ConfigError as e:
            refused.append(e)
            continue
        if pair:
            try:   # a tile the pair cannot split (GemmConfig's cluster rules) stays a single CTA
                cfg = dataclasses.replace(cfg, cluster_m=2)
            except ConfigError:
                pass
        configs.append(with_tail(cfg))
    if not configs:
        raise refused[0]
    if spill_check is not None:
        for cfg in configs:
            if not cfg.fused or not spill_check(cfg):
                return cfg
    return configs[0]


def _flat(x, name: str, shape: tuple, rule: str):
    """`x` (a device array) seen as `shape` (its leading axes folded), where its elements lie as a C-order array
    of that many would; else ConfigError naming `name`."""
    item = x.dtype.itemsize
    want = tuple(int(np.prod(x.shape[i + 1:])) * item for i in range(len(x.shape)))
    if tuple(x.strides) != want and int(np.prod(x.shape)) > 1:
        raise ConfigError(f"{name}: {rule} must be C-contiguous, got strides {x.strides}")
    return x.view(shape, None)


def grouped_epilogue(problem: grouped.GroupedProblem, alpha, scale_a, scale_b, bias, activation, convert):
    """The epilogue of a grouped call, and the elements between consecutive groups' column vectors (bias, column
    scales: N for one vector per group, 0 for one shared by all). The grouped shapes are turned into the dense
    epilogue's (ptxgemm.plan.epilogue checks them there):
      scale_a  a number or 1 element (per tensor); one per row of a, (total_M,) or (G, M_max) [+ a trailing 1]
               (rowwise); (total_M, kb) or (G, M_max, kb) (blockwise, kb = ceil(K / SCALE_BLOCK)), the
               contiguous form's (total_M, kb) C-contiguous or M-major (DeepGEMM's and torch's layout)
      scale_b  per tensor; (N,) shared or (G, N) one per group (rowwise); (G, kb, ceil(N / SCALE_BLOCK)) (blockwise)
      bias     (N,) shared or (G, N) one per group."""
    g, n, k = problem.groups, problem.n, problem.k
    rows = problem.m * g if problem.form == "masked" else problem.m
    kb, nb = -(-k // SCALE_BLOCK), -(-n // SCALE_BLOCK)
    strides = {}

    def is_array(x):   # not a per-tensor scale held on the host (the epilogue's rule: a (1, 1, 1) table is a table)
        return x is not None and not epilogue.is_host_scalar(x)

    if problem.form != "k":
        if is_array(scale_a):
            sa = convert(scale_a, "scale_a")
            shape = tuple(sa.shape)
            if problem.form == "masked" and shape[:2] == (g, problem.m) and len(shape) in (2, 3):
                sa = _flat(sa, "scale_a", (rows,) + shape[2:], "a masked scale table (G, M_max[, kb])")
            scale_a = sa
        if is_array(scale_b):
            sb = convert(scale_b, "scale_b")
            shape = tuple(sb.shape)
            if shape in ((g, n), (g, 1, n)) and g > 1:
                scale_b, strides["col_scale"] = _flat(sb, "scale_b", (g * n,), "a per-group scale table").view((n,)), n
            elif len(shape) == 3 and shape == (g, kb, nb):
                if kb * nb == 1 and g > 1:   # group 0's one block would read as a per-tensor scale for all groups
                    raise ConfigError(f"scale_b: a blockwise table of one block per group ({shape}: K <= {SCALE_BLOCK} "
                                      f"and N <= {SCALE_BLOCK}) is one scale per group, which the grouped kernel takes as rowwise "
                                      f"scales: pass scale_b as (G, N) = ({g}, {n}) and scale_a per row of a")
                scale_b = _flat(sb, "scale_b", (g * kb, nb), "a blockwise table (G, kb, nb)").view((kb, nb))
            else:
                scale_b = sb
        if bias is not None:
            bv = convert(bias, "bias")
            shape = tuple(bv.shape)
            if shape not in ((n,), (1, n), (g, n)):   # not the dense rule's: a bias per row is not taken here
                raise ConfigError(f"bias: the grouped GEMM adds a bias per column: (N,) = ({n},) shared, or (G, N) = "
                                  f"({g}, {n}) one per group; got {shape}")
            if shape == (g, n) and g > 1:
                bias, strides["bias"] = _flat(bv, "bias", (g * n,), "a per-group bias (G, N)").view((n,)), n
            else:
                bias = bv
    fused = epilogue.parse(alpha=alpha, scale_a=scale_a, scale_b=scale_b, bias=bias, activation=activation,
                           m=rows if problem.form != "k" else problem.m, n=n, k=k, in_dtype=problem.in_dtype,
                           batched=False, convert=convert)
    if fused.bias is not None and fused.bias_axis != "col":
        raise ConfigError(f"bias: the grouped GEMM adds a bias per column: (N,) = ({n},) shared, or (G, N) = "
                          f"({g}, {n}) one per group; got {tuple(fused.bias.shape)}")
    if fused.block_a_mn and problem.form != "contiguous":
        raise ConfigError(f"scale_a: an M-major blockwise table (rows adjacent) is read by TMA in the contiguous "
                          f"form only; a masked group's rows start at its own matrix, so pass the masked table "
                          f"(G, M_max, kb) = ({g}, {problem.m}, {kb}) C-contiguous")
    if fused.block_a is not None:
        check_verified("blockwise")
    elif fused.row_scale is not None or fused.col_scale is not None or fused.bias is not None:
        if problem.form == "k":
            raise ConfigError("scale_a, scale_b, bias: the k-grouped form takes per-tensor scales only")
        check_verified("vectors")
    return fused, strides


def kernel_arguments(cfg: GemmConfig, rows: int, n: int, k: int, problem: grouped.GroupedProblem, counts_ptr: int,
                     c_ptr: int, c_pitch: int, debug_ptr: int = 0, group_strides: dict | None = None,
                     fix_up: tuple = ()) -> list:
    """The grouped kernel's scalar arguments after the tensor maps and the epilogue's, in gemm_roles.ptx.j2's and
    grouped_scheduler.ptx.j2's order (pure: tests check them without a GPU). `fix_up`: with the stream-K tail, (the
    fix-up's cost in k-tiles, the workspace's address, the flags' address) (streamk.ptx.j2's params)."""
    if bool(fix_up) != cfg.stream_k:
        raise ConfigError(f"fix_up: the stream-K tail's arguments are given exactly when config.stream_k is on "
                          f"(stream_k={cfg.stream_k}, fix_up={fix_up!r})")
    tail = ([ctypes.c_uint32(fix_up[0]), ctypes.c_uint64(fix_up[1]), ctypes.c_uint64(fix_up[2])] if fix_up else [])
    group_rows = {"masked": problem.m, "k": problem.k}.get(problem.form, 0)   # M_max; total_K; unused
    return [ctypes.c_uint32(rows), ctypes.c_uint32(n), ctypes.c_uint32(-(-rows // cfg.unit_rows)),  # unit rows
            ctypes.c_uint32(-(-n // cfg.block_n)), ctypes.c_uint32(-(-k // cfg.block_k)),
            ctypes.c_uint32(1), ctypes.c_uint32(0),                          # one A (2-D)
            ctypes.c_uint32(0 if problem.form == "k" else 1),                # B: one matrix per group, or one (k)
            ctypes.c_uint64(counts_ptr), ctypes.c_uint32(problem.groups), ctypes.c_uint32(group_rows),
            ctypes.c_uint64(c_ptr), ctypes.c_uint32(c_pitch),
            *[ctypes.c_uint32((group_strides or {}).get(name, 0)) for name, on in
              (("bias", cfg.bias == "col"), ("col_scale", cfg.col_scale)) if on],   # per-group column vectors
            *tail,                                                            # the stream-K tail's fix-up
            ctypes.c_uint64(debug_ptr)]                                       # debug records (0: none)
