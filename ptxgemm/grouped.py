"""The grouped GEMM's entry points (issue 25; docs/design/grouped-gemm-issue25.md): `grouped_matmul` and
`GroupedPlan`, one launch over every group, the counts read by the kernel on the device.

    contiguous   a (total_M, K), b (G, K, N), offs (G,) cumulative row ends      -> (total_M, N)
    masked       a (G, M_max, K), b (G, K, N), masked_m (G,) rows per group     -> (G, M_max, N)

Rows outside every group (contiguous: past offs[-1]; masked: past masked_m[g]) are never written. A plan depends
on the shapes, never on the counts' values, so one plan serves every step and a CUDA graph that captured its
launch replays correctly after the counts change in place. The argument rules are ptxgemm.plan.grouped's, the
rest of the planning on descriptors ptxgemm.plan.grouped_call's; here the tensor maps and the launch.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .errors import ConfigError, CudaError
from .build.kernels import spills
from .gemm import LOAD_L2_PROMOTION, MN_PANEL, get_kernel
from .kernel.config import GemmConfig
from .plan import grouped, grouped_call
from .plan.epilogue import Epilogue
from .plan.checks import check_config
from .runtime import arrays, driver, tensormap
from .runtime.arrays import as_device_array
from .runtime.debug import StallRecords
from .runtime.tensormap import TensorMapSpec

@dataclasses.dataclass
class GroupedLaunch:
    """What a grouped launch is, decided without a GPU (plan_launch): the problem, the config, the epilogue in the
    kernel's frame, the arrays (the backend's own: device arrays, or the emulator's host ones), the tensor maps as
    validated specs and C's row pitch. `config` is None when there is nothing to compute (no rows or columns)."""

    problem: grouped.GroupedProblem
    config: GemmConfig | None
    epilogue: Epilogue
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
                *grouped_call.kernel_arguments(self.config, self.rows, p.n, p.k, p, self.counts.ptr, self.out.ptr,
                                               self.c_pitch, debug_ptr, self.group_strides)]


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
        grouped_call.check_verified("k")
    if isinstance(counts, np.ndarray):
        counts = upload(np.ascontiguousarray(counts, dtype=np.int32))
    if counts.shape[0] > 1 and counts.strides[0] != 4:
        raise ConfigError(f"{name}: must be contiguous (stride 4 bytes), got strides {counts.strides}")
    if out is None:
        out = allocate(problem.out_shape, problem.out_dtype)
    fused, strides = grouped_call.grouped_epilogue(problem, alpha, scale_a, scale_b, bias, activation, convert)
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
        b_major, b_pitch, b_group = grouped_call.b_layout(b, in_fp8)
    cfg = config if config is not None else grouped_call.default_config(problem, b_major, sm_count(),
                                                           fused.config_fields(False, n), spill_check)
    if config is not None and config.group_capacity is not None and config.group_capacity < problem.groups:
        raise ConfigError(f"config.group_capacity: {config.group_capacity} groups fit its tables, these "
                          f"operands have {problem.groups}")
    cfg = GemmConfig(**{**_fields(cfg), **fused.config_fields(False, n), "grouped": problem.form,
                        "in_dtype": problem.in_dtype, "b_dtype": problem.b_dtype,
                        "out_dtype": problem.out_dtype, "a_major": a_major, "b_major": b_major,
                        "group_capacity": cfg.group_capacity or grouped_call.group_capacity(problem.groups)})
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
    a_pitch = grouped_call.rows_view(a, "a", rows, k)
    c_pitch = grouped_call.rows_view(out, "out", rows, n)
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


def _k_form_specs(cfg: GemmConfig, problem, a, b, out):
    """Tensor maps of the k form: A (M, total_K) with M contiguous, i.e. the (total_K, M) activations seen through
    a transpose; B (total_K, N) with N contiguous; C (G, M, N) C-contiguous, the group its batch coordinate. K is
    the outer axis of both operands' boxes (MN-major), so a group's K range starts at any element."""
    m, n, k, groups = problem.m, problem.n, problem.k, problem.groups
    a_t = a.view((k, m), (a.strides[1], a.strides[0]))   # the (total_K, M) array a is the transpose of
    lda = grouped_call.mn_pitch(a_t, "a", "a (M, total_K) with M contiguous (x.T of row-major (total_K, M) "
                                          "activations)")
    ldb = grouped_call.mn_pitch(b, "b", "b (total_K, N) with N contiguous (row-major gradients)")
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


def _fields(cfg: GemmConfig) -> dict:
    import dataclasses

    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}


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
