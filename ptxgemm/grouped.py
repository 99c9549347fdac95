"""The grouped GEMM's entry points (issue 25; docs/design/grouped-gemm-issue25.md): `grouped_matmul` and
`GroupedPlan`, one launch over every group, the counts read by the kernel on the device.

    contiguous   a (total_M, K), b (G, K, N), offs (G,) cumulative row ends      -> (total_M, N)
    masked       a (G, M_max, K), b (G, K, N), masked_m (G,) rows per group     -> (G, M_max, N)

Rows outside every group (contiguous: past offs[-1]; masked: past masked_m[g]) are never written. A plan depends
on the shapes, never on the counts' values, so one plan serves every step and a CUDA graph that captured its
launch replays correctly after the counts change in place. The argument rules are ptxgemm.plan.grouped's; the
memory rules (what the kernel reads in place) are checked here, each naming its argument.
"""
from __future__ import annotations

import ctypes
import dataclasses
import math

import numpy as np

from .errors import ConfigError, CudaError
from .build.kernels import spills
from .gemm import LOAD_L2_PROMOTION, MN_PANEL, get_kernel
from .kernel.config import GemmConfig
from .plan import epilogue, grouped
from .plan.checks import check_config
from .runtime import arrays, driver, tensormap
from .runtime.arrays import as_device_array
from .runtime.debug import StallRecords
from .runtime.tensormap import TensorMapSpec

# The grouped kernel's tiles (cooperative, single CTAs, whole output panels) and how fast each runs a full tile,
# relative to the widest, on the H100's dense GEMM: the default config takes the one that finishes the mean group's
# units soonest over all SMs (whole waves of units, each as long as its tile's area over its efficiency).
GROUPED_TILES = {"coop128x256": 1.0, "coop256x128": 0.97, "coop128x192": 0.95, "coop128x128": 0.85}
# The tables' size is rounded up to a power of two from G, at least this: few kernels serve every G.
MIN_GROUP_CAPACITY = 16
# Parts of the grouped GEMM that are rendered, assembled and planned but have not run on a GPU yet: each is refused
# (a ConfigError naming its argument) until its GPU tests (tests/test_grouped_gpu.py, which clear this for
# themselves) have passed on the device, and is then taken out of this table.
UNVERIFIED = {
    "k": ("offs", "the k-grouped form (a (M, total_K), b (total_K, N))"),
    "vectors": ("scale_a, scale_b, bias", "rowwise scales (per token of a, per channel of each group's b) and a "
                "bias (shared, or per group)"),
    "blockwise": ("scale_a, scale_b", "blockwise scales (1x128 per token, 128x128 per block of each group's b)"),
}


def _check_verified(feature: str) -> None:
    if feature in UNVERIFIED:
        argument, what = UNVERIFIED[feature]
        raise ConfigError(f"{argument}: the grouped GEMM's {what} is built but has not yet run on a GPU; it is "
                          f"taken once its GPU tests pass (ptxgemm.grouped.UNVERIFIED)")


def group_capacity(groups: int) -> int:
    return max(MIN_GROUP_CAPACITY, 1 << (groups - 1).bit_length())


def _rows_view(x, name: str, rows: int, cols: int) -> int:
    """The row pitch in bytes of `x` read as a (rows, cols) matrix with unit column stride (a 2-D array, or a 3-D
    one whose leading axes fold into rows); ConfigError names `x` where it cannot be read so in place."""
    item = x.dtype.itemsize
    shape, strides = tuple(x.shape), tuple(x.strides)
    if cols > 1 and strides[-1] != item:
        raise ConfigError(f"{name}: its last axis must be contiguous (stride {item} bytes), got strides {strides}; "
                          f"pass a contiguous array")
    pitch = strides[-2] if len(shape) >= 2 and shape[-2] > 1 else cols * item
    if len(shape) == 3 and shape[0] > 1 and shape[1] > 0 and strides[0] != shape[1] * pitch:
        raise ConfigError(f"{name}: its groups' matrices must follow each other (stride of axis 0 = rows x row "
                          f"pitch = {shape[1] * pitch} bytes), got strides {strides}")
    if pitch % 16 or x.ptr % 16:
        raise ConfigError(f"{name}: rows must start on 16-byte boundaries (TMA): row pitch {pitch} bytes, address "
                          f"0x{x.ptr:x}; a row of a {item}-byte dtype must hold a multiple of {16 // item} elements")
    return pitch


def _b_layout(b, in_fp8: bool) -> tuple[str, int, int]:
    """B (G, K, N) as the kernel reads it: ("mn", K-row pitch, group stride) when N is contiguous, ("k", N-row
    pitch, group stride) when K is (a transposed view of a (G, N, K) array); fp8 must be K-major."""
    g, k, n = b.shape
    item = b.dtype.itemsize
    sg, sk, sn = b.strides
    if (sn == item or n == 1) and not (in_fp8 and n > 1):
        major, pitch = "mn", (sk if k > 1 else n * item)
    elif sk == item or k == 1:
        major, pitch = "k", (sn if n > 1 else k * item)
    else:
        raise ConfigError(f"b: one of its last two axes must be contiguous (N: b is (G, K, N) row-major; K: b is a "
                          f"transposed (G, N, K) array), got strides {b.strides}"
                          + ("; fp8 B must be K-major (wgmma reads 8-bit types only so)" if in_fp8 else ""))
    rows = k if major == "mn" else n
    if g > 1 and sg < rows * pitch:
        raise ConfigError(f"b: its groups' matrices overlap (stride of axis 0 = {sg} bytes < {rows * pitch})")
    if pitch % 16 or sg % 16 or b.ptr % 16:
        raise ConfigError(f"b: rows and groups must start on 16-byte boundaries (TMA): row pitch {pitch}, group "
                          f"stride {sg}, address 0x{b.ptr:x}")
    return major, pitch, max(sg, rows * pitch)


def default_config(problem: grouped.GroupedProblem, b_major: str, sm_count: int = 132, fused: dict | None = None,
                   spill_check=None) -> GemmConfig:
    """The tile for a grouped problem whose counts the host does not know: each group taken as the mean one (M_max
    rows when masked), the tile whose waves of units over `sm_count` SMs cost least (GROUPED_TILES). With a fused
    epilogue (`fused`: Epilogue.config_fields), a tile that ptxas spills yields to the next one, as the dense
    selection's picks do (`spill_check`: build.kernels.spills)."""
    rows = problem.m if problem.form in ("masked", "k") else problem.m / problem.groups

    def cost(tag):
        t = GemmConfig.from_tag(tag)
        units = problem.groups * math.ceil(rows / t.block_m) * math.ceil(problem.n / t.block_n)
        return math.ceil(units / sm_count) * t.block_m * t.block_n / GROUPED_TILES[tag]

    configs = [GemmConfig.from_tag(tag, in_dtype=problem.in_dtype, b_dtype=problem.b_dtype,
                                   out_dtype=problem.out_dtype, a_major="mn" if problem.form == "k" else "k",
                                   b_major=b_major, grouped=problem.form,
                                   group_capacity=group_capacity(problem.groups), **(fused or {}))
               for tag in sorted(GROUPED_TILES, key=cost)]
    if spill_check is not None:
        for cfg in configs:
            if not cfg.fused or not spill_check(cfg):
                return cfg
    return configs[0]


@dataclasses.dataclass
class GroupedLaunch:
    """What a grouped launch is, decided without a GPU (plan_launch): the problem, the config, the epilogue in the
    kernel's frame, the arrays (the backend's own: device arrays, or the emulator's host ones), the tensor maps as
    validated specs and C's row pitch. `config` is None when there is nothing to compute (no rows or columns)."""

    problem: grouped.GroupedProblem
    config: GemmConfig | None
    epilogue: epilogue.Epilogue
    group_strides: dict
    a: object
    b: object
    out: object
    counts: object
    rows: int
    specs: dict | None = None
    c_pitch: int = 0

    def scalars(self, debug_ptr: int = 0) -> list:
        """The kernel's arguments after its three tensor maps, in the entry's order."""
        p = self.problem
        return [*self.epilogue.kernel_args(False, p.k, p.n),
                *kernel_arguments(self.config, self.rows, p.n, p.k, p, self.counts.ptr, self.out.ptr, self.c_pitch,
                                  debug_ptr, self.group_strides)]


def plan_launch(a, b, *, offs=None, masked_m=None, out=None, alpha=1.0, scale_a=None, scale_b=None, bias=None,
                activation=None, out_dtype=None, config: GemmConfig | None = None, convert, upload, allocate,
                sm_count, spill_check=None) -> GroupedLaunch:
    """Every decision of a grouped call, each rule checked (ConfigError names the argument): the form and its
    shapes (ptxgemm.plan.grouped), the memory each array is read in place from, the epilogue, the config and the
    tensor maps. The backend supplies `convert(x, name)` (an argument as its array), `upload(numpy int32)`, `allocate
    (shape, dtype)`, `sm_count()` (asked only when the config is chosen here) and `spill_check(config)`."""
    check_config(config)
    # any framework's device arrays, read in place; host counts are checked by value (in parse) and uploaded once,
    # then read by every launch
    a, b = convert(a, "a"), convert(b, "b")
    offs, masked_m = (x if x is None or isinstance(x, np.ndarray) else convert(x, nm)
                      for x, nm in ((offs, "offs"), (masked_m, "masked_m")))
    if out is not None:
        out = convert(out, "out")
    problem = grouped.parse(a, b, offs=offs, masked_m=masked_m, out=out, out_dtype=out_dtype)
    name = problem.counts_name
    counts = masked_m if name == "masked_m" else offs
    if problem.form == "k":
        _check_verified("k")
    if isinstance(counts, np.ndarray):
        counts = upload(np.ascontiguousarray(counts, dtype=np.int32))
    if counts.shape[0] > 1 and counts.strides[0] != 4:
        raise ConfigError(f"{name}: must be contiguous (stride 4 bytes), got strides {counts.strides}")
    if out is None:
        out = allocate(problem.out_shape, problem.out_dtype)
    fused, strides = _grouped_epilogue(problem, alpha, scale_a, scale_b, bias, activation, convert)
    groups, n, k = problem.groups, problem.n, problem.k
    rows = problem.m * groups if problem.form == "masked" else problem.m   # A and C as 2-D matrices (k: M)
    in_fp8 = problem.in_dtype.startswith("float8")
    if problem.form == "k":
        if in_fp8:
            raise ConfigError("a, b: the k-grouped form reads A and B MN-major, which wgmma does not take for "
                              "fp8; use bfloat16 or float16")
        a_major, b_major = "mn", "mn"
    else:
        a_major = "k"
        b_major, b_pitch, b_group = _b_layout(b, in_fp8)
    cfg = config if config is not None else default_config(problem, b_major, sm_count(),
                                                           fused.config_fields(False, n), spill_check)
    if config is not None and config.group_capacity is not None and config.group_capacity < problem.groups:
        raise ConfigError(f"config.group_capacity: {config.group_capacity} groups fit its tables, these "
                          f"operands have {problem.groups}")
    cfg = GemmConfig(**{**_fields(cfg), **fused.config_fields(False, n), "grouped": problem.form,
                        "in_dtype": problem.in_dtype, "b_dtype": problem.b_dtype,
                        "out_dtype": problem.out_dtype, "a_major": a_major, "b_major": b_major,
                        "group_capacity": cfg.group_capacity or group_capacity(problem.groups)})
    launch = GroupedLaunch(problem, cfg, fused, strides, a, b, out, counts, rows)
    if rows == 0 or n == 0:
        launch.config = None
        return launch
    if k == 0:
        raise ConfigError("a, b: K is 0; the grouped GEMM needs K >= 1 (the product would be zeros)")
    launch.specs, launch.c_pitch = (_k_form_specs(cfg, problem, a, b, out) if problem.form == "k" else
                                    _row_form_specs(cfg, problem, a, b, out, rows, b_major, b_pitch, b_group))
    return launch


class GroupedPlan:
    """A grouped GEMM bound to its arrays, with tensor maps encoded and arguments packed once: `launch()` only
    enqueues. The counts array is read by every launch, on the device, so it may change between launches."""

    def __init__(self, a, b, *, offs=None, masked_m=None, out=None, alpha=1.0, scale_a=None, scale_b=None,
                 bias=None, activation=None, out_dtype=None, config: GemmConfig | None = None, ctas: int | None = None,
                 stream=None, kernel=None):
        """`ctas` caps the grid (default: one CTA per SM; fewer give each CTA more units, as the tests and mutants
        want); `kernel` replaces the config's compiled kernel (ptxgemm.tools.mutants runs edited PTX this way; its
        config must be the plan's)."""
        info = []

        def sm_count():
            info.append(driver.require_sm90("running the grouped GEMM"))
            return info[-1].sm_count

        plan = plan_launch(a, b, offs=offs, masked_m=masked_m, out=out, alpha=alpha, scale_a=scale_a,
                           scale_b=scale_b, bias=bias, activation=activation, out_dtype=out_dtype, config=config,
                           convert=lambda x, nm: as_device_array(x, nm, stream),
                           upload=lambda x: arrays.DeviceArray.from_numpy(x, stream=stream),
                           allocate=lambda shape, dt: arrays.DeviceArray.empty(shape, dt, stream=stream),
                           sm_count=sm_count, spill_check=spills)
        self.plan = plan
        self.problem, self.epilogue, self.group_strides = plan.problem, plan.epilogue, plan.group_strides
        self.a, self.b, self.out, self.counts, self.rows = plan.a, plan.b, plan.out, plan.counts, plan.rows
        self.config = cfg = plan.config
        self.records = self._launch = None
        if cfg is None:
            return
        if kernel is not None and kernel.config != cfg:
            raise ConfigError(f"kernel: built for {kernel.config.describe()}, but these operands need "
                              f"{cfg.describe()}")
        self.specs = plan.specs
        device = info[-1] if info else driver.require_sm90("running the grouped GEMM")
        self.kernel = kernel if kernel is not None else get_kernel(cfg)
        self._maps = maps = {nm: tensormap.encode(spec) for nm, spec in plan.specs.items()}
        self.grid = device.sm_count if ctas is None else max(1, min(int(ctas), device.sm_count))
        debug_ptr = 0
        if cfg.debug:   # bounded waits that report the stalled barrier (ptxgemm.runtime.debug)
            self.records = StallRecords(self.grid, cfg.threads)
            debug_ptr = self.records.device_pointer
        args = [maps["tmap_a"], maps["tmap_b"], maps["tmap_c"], *plan.scalars(debug_ptr)]
        self._launch = driver.PreparedLaunch(self.kernel.function, (self.grid,), (cfg.threads,), args,
                                             smem_bytes=cfg.smem_bytes)

    @property
    def flops(self) -> int:
        """2 x K x N per row of A that the counts may cover (the rows actually computed depend on the counts)."""
        return 2 * self.rows * self.problem.n * self.problem.k

    def launch(self, stream=None):
        if self._launch is not None:
            self._launch(stream)
        if self.records is not None:  # debug: wait here so a stall becomes an exception that names the barrier
            what = f"running {self.config.describe()}"
            try:
                driver.synchronize(what)
            except CudaError as e:
                self.records.raise_if_stalled(what, e)
                raise


def _row_form_specs(cfg: GemmConfig, problem, a, b, out, rows: int, b_major: str, b_pitch: int, b_group: int):
    """Tensor maps of the contiguous and masked forms: A and C as 2-D matrices of `rows` rows, B one matrix per
    group (its batch coordinate); and C's row pitch."""
    n, k, groups = problem.n, problem.k, problem.groups
    a_pitch = _rows_view(a, "a", rows, k)
    c_pitch = _rows_view(out, "out", rows, n)
    if c_pitch != n * out.dtype.itemsize:
        raise ConfigError(f"out: must be C-contiguous (rows of {n * out.dtype.itemsize} bytes), got strides "
                          f"{out.strides}")
    return {
        "tmap_a": TensorMapSpec(a.ptr, a.dtype, (k, rows, 1), (a_pitch, rows * a_pitch),
                                (cfg.block_k, cfg.a_rows_per_cta, 1), l2_promotion=LOAD_L2_PROMOTION),
        "tmap_b": (TensorMapSpec(b.ptr, b.dtype, (k, n, groups), (b_pitch, b_group),
                                 (cfg.block_k, cfg.b_rows_per_cta, 1), l2_promotion=LOAD_L2_PROMOTION)
                   if b_major == "k" else
                   TensorMapSpec(b.ptr, b.dtype, (n, k, groups), (b_pitch, b_group), (MN_PANEL, cfg.block_k, 1),
                                 l2_promotion=LOAD_L2_PROMOTION)),
        "tmap_c": TensorMapSpec(out.ptr, out.dtype, (n, rows, 1), (c_pitch, rows * c_pitch),
                                (cfg.epi_panel_cols, cfg.epi_box_rows, 1), l2_promotion="none"),
    }, c_pitch


def _mn_pitch(x, name: str, what: str) -> int:
    """The pitch in bytes between the K rows of a 2-D operand of the k form whose last axis is contiguous (a read
    as its transpose: see _k_form_specs)."""
    item = x.dtype.itemsize
    rows, cols = x.shape
    if cols > 1 and x.strides[1] != item:
        raise ConfigError(f"{name}: the k-grouped form reads {what}; got strides {x.strides}")
    pitch = x.strides[0] if rows > 1 else cols * item
    if pitch % 16 or x.ptr % 16:
        raise ConfigError(f"{name}: rows must start on 16-byte boundaries (TMA): pitch {pitch} bytes, address "
                          f"0x{x.ptr:x}")
    return pitch


def _k_form_specs(cfg: GemmConfig, problem, a, b, out):
    """Tensor maps of the k form: A (M, total_K) with M contiguous, i.e. the (total_K, M) activations seen through
    a transpose; B (total_K, N) with N contiguous; C (G, M, N) C-contiguous, the group its batch coordinate. K is
    the outer axis of both operands' boxes (MN-major), so a group's K range starts at any element."""
    m, n, k, groups = problem.m, problem.n, problem.k, problem.groups
    a_t = a.view((k, m), (a.strides[1], a.strides[0]))   # the (total_K, M) array a is the transpose of
    lda = _mn_pitch(a_t, "a", "a (M, total_K) with M contiguous (x.T of row-major (total_K, M) activations)")
    ldb = _mn_pitch(b, "b", "b (total_K, N) with N contiguous (row-major gradients)")
    item = out.dtype.itemsize
    if tuple(out.strides) != (m * n * item, n * item, item):
        raise ConfigError(f"out: must be C-contiguous (G, M, N), got strides {out.strides}")
    return {
        "tmap_a": TensorMapSpec(a.ptr, a.dtype, (m, k, 1), (lda, k * lda), (MN_PANEL, cfg.block_k, 1),
                                l2_promotion=LOAD_L2_PROMOTION),
        "tmap_b": TensorMapSpec(b.ptr, b.dtype, (n, k, 1), (ldb, k * ldb), (MN_PANEL, cfg.block_k, 1),
                                l2_promotion=LOAD_L2_PROMOTION),
        "tmap_c": TensorMapSpec(out.ptr, out.dtype, (n, m, groups), (n * item, m * n * item),
                                (cfg.epi_panel_cols, cfg.epi_box_rows, 1), l2_promotion="none"),
    }, n * item


def _flat(x, name: str, shape: tuple, rule: str):
    """`x` (a device array) seen as `shape` (its leading axes folded), where its elements lie as a C-order array
    of that many would; else ConfigError naming `name`."""
    item = x.dtype.itemsize
    want = tuple(int(np.prod(x.shape[i + 1:])) * item for i in range(len(x.shape)))
    if tuple(x.strides) != want and int(np.prod(x.shape)) > 1:
        raise ConfigError(f"{name}: {rule} must be C-contiguous, got strides {x.strides}")
    return x.view(shape, None)


def _grouped_epilogue(problem: grouped.GroupedProblem, alpha, scale_a, scale_b, bias, activation, convert):
    """The epilogue of a grouped call, and the elements between consecutive groups' column vectors (bias, column
    scales: N for one vector per group, 0 for one shared by all). The grouped shapes are turned into the dense
    epilogue's (ptxgemm.plan.epilogue checks them there):
      scale_a  a number or 1 element (per tensor); one per row of a, (total_M,) or (G, M_max) [+ a trailing 1]
               (rowwise); (total_M, kb) or (G, M_max, kb) (blockwise, kb = ceil(K / 128))
      scale_b  per tensor; (N,) shared or (G, N) one per group (rowwise); (G, kb, ceil(N / 128)) (blockwise)
      bias     (N,) shared or (G, N) one per group."""
    g, n, k = problem.groups, problem.n, problem.k
    rows = problem.m * g if problem.form == "masked" else problem.m
    kb, nb = -(-k // 128), -(-n // 128)
    strides = {}

    def is_array(x):
        return x is not None and not (isinstance(x, (int, float)) or (isinstance(x, np.ndarray) and x.size == 1))

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
                scale_b = _flat(sb, "scale_b", (g * kb, nb), "a blockwise table (G, kb, nb)").view((kb, nb))
            else:
                scale_b = sb
        if bias is not None:
            bv = convert(bias, "bias")
            if tuple(bv.shape) == (g, n) and g > 1:
                bias, strides["bias"] = _flat(bv, "bias", (g * n,), "a per-group bias (G, N)").view((n,)), n
            else:
                bias = bv
    fused = epilogue.parse(alpha=alpha, scale_a=scale_a, scale_b=scale_b, bias=bias, activation=activation,
                           m=rows if problem.form != "k" else problem.m, n=n, k=k, in_dtype=problem.in_dtype,
                           batched=False, convert=convert)
    if fused.bias is not None and fused.bias_axis != "col":
        raise ConfigError(f"bias: the grouped GEMM adds a bias per column: (N,) = ({n},) shared, or (G, N) = "
                          f"({g}, {n}) one per group; got {tuple(fused.bias.shape)}")
    if fused.block_a is not None:
        _check_verified("blockwise")
    elif fused.row_scale is not None or fused.col_scale is not None or fused.bias is not None:
        if problem.form == "k":
            raise ConfigError("scale_a, scale_b, bias: the k-grouped form takes per-tensor scales only")
        _check_verified("vectors")
    return fused, strides


def _fields(cfg: GemmConfig) -> dict:
    import dataclasses

    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}


def kernel_arguments(cfg: GemmConfig, rows: int, n: int, k: int, problem: grouped.GroupedProblem, counts_ptr: int,
                     c_ptr: int, c_pitch: int, debug_ptr: int = 0, group_strides: dict | None = None) -> list:
    """The grouped kernel's scalar arguments after the tensor maps and the epilogue's, in gemm_roles.ptx.j2's and
    grouped_scheduler.ptx.j2's order (pure: tests check them without a GPU)."""
    group_rows = {"masked": problem.m, "k": problem.k}.get(problem.form, 0)   # M_max; total_K; unused
    return [ctypes.c_uint32(rows), ctypes.c_uint32(n), ctypes.c_uint32(-(-rows // cfg.block_m)),
            ctypes.c_uint32(-(-n // cfg.block_n)), ctypes.c_uint32(-(-k // cfg.block_k)),
            ctypes.c_uint32(1), ctypes.c_uint32(0),                          # one A (2-D)
            ctypes.c_uint32(0 if problem.form == "k" else 1),                # B: one matrix per group, or one (k)
            ctypes.c_uint64(counts_ptr), ctypes.c_uint32(problem.groups), ctypes.c_uint32(group_rows),
            ctypes.c_uint64(c_ptr), ctypes.c_uint32(c_pitch),
            *[ctypes.c_uint32((group_strides or {}).get(name, 0)) for name, on in
              (("bias", cfg.bias == "col"), ("col_scale", cfg.col_scale)) if on],   # per-group column vectors
            ctypes.c_uint64(debug_ptr)]                                       # debug records (0: none)


def grouped_matmul(a, b, *, offs=None, masked_m=None, out=None, alpha=1.0, scale_a=None, scale_b=None, bias=None,
                   activation=None, out_dtype=None, config: GemmConfig | None = None, stream=None):
    """One launch over G groups (asynchronous on `stream`), torch._grouped_mm's forms:

    contiguous  a (total_M, K), b (G, K, N), offs (G,) int32 cumulative row ends  -> (total_M, N)
    masked      a (G, M_max, K), b (G, K, N), masked_m (G,) int32 rows per group  -> (G, M_max, N)

    out = act(alpha * scale_a * scale_b * a_g @ b_g) on each group's rows; rows outside every group are not
    written (a new `out` holds whatever the allocator gave there). The counts are device int32 vectors read by the
    kernel (host numpy ones are checked by value and uploaded). Any group sizes, 0 included. Returns `out`."""
    plan = GroupedPlan(a, b, offs=offs, masked_m=masked_m, out=out, alpha=alpha, scale_a=scale_a, scale_b=scale_b,
                       bias=bias, activation=activation, out_dtype=out_dtype, config=config, stream=stream)
    plan.launch(stream)
    return plan.out if out is None else out
