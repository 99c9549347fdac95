"""The grouped GEMM's entry points (issue 25; docs/design/grouped-gemm-issue25.md): `grouped_matmul` and
`GroupedPlan`, one launch over every group, the counts read by the kernel on the device, and `grouped_run`, their
door for numpy arrays (issue 48).

    contiguous   a (total_M, K), b (G, K, N), offs (G,) cumulative row ends      -> (total_M, N)
    masked       a (G, M_max, K), b (G, K, N), masked_m (G,) rows per group     -> (G, M_max, N)
    k-grouped    a (M, total_K), b (total_K, N), offs (G,) cumulative K ends    -> (G, M, N)

Any layout and size of the arrays: what TMA can read (write) as the kernel wants it stays in place, the rest is
staged through buffers of the plan's own by the strided copy kernel, as matmul stages
(ptxgemm.plan.grouped_layout). Rows outside every group (contiguous: past offs[-1]; masked: past masked_m[g]) never
change. A plan depends on the shapes, never on the counts' values, so one plan serves every step and a CUDA graph
that captured its launch replays correctly after the counts change in place. The argument rules are
ptxgemm.plan.grouped's, the rest of the planning on descriptors ptxgemm.plan.grouped_call's and grouped_layout's;
here the tensor maps and the launch. Every rule is checked on the host (check_call) before anything is allocated,
uploaded or asked of the GPU.
"""
from __future__ import annotations

import dataclasses
import numbers
import threading

import numpy as np

from .errors import ConfigError
from .gemm import (LOAD_L2_PROMOTION, MN_PANEL, cached_plan, check_stream, copy_launches, encode_bound, fix_up_buffers,
                   get_kernel, map_arguments, own_scratch, scale_a_map, stream_key, upload_site, uploaded,
                   without_caller_arrays)
from .kernel.config import GemmConfig
from .plan import binding, grouped, grouped_call, grouped_layout
from .plan.cache import COUNTERS, now_ns
from .plan.epilogue import Epilogue, check_values
from .plan.checks import check_config, check_ctas, check_out_dtype
from .runtime import arrays, devices, driver, patch
from .runtime.arrays import as_device_array, call_device
from .runtime.debug import StallRecords
from .runtime.launches import BoundLaunches
from .runtime.tensormap import TensorMapSpec
from .select.predict import sk_fixup_k_tiles
from .toolchain.kernels import spills

@dataclasses.dataclass
class CheckedCall:
    """A grouped call whose every argument has passed its rules (check_call), before anything is allocated, uploaded
    or asked of the GPU: the problem, the epilogue, the arrays as the backend's (host counts still numpy; `out` None
    when the call gives none) and how the kernel reads A and B."""

    problem: grouped.GroupedProblem
    epilogue: Epilogue
    group_strides: dict
    a: object
    b: object
    out: object
    counts: object
    rows: int
    layout: grouped_layout.GroupedLayout   # what is read in place and what is staged (C: once out is known)

    @property
    def empty(self) -> bool:
        """Nothing to compute: no rows or no columns."""
        return self.rows == 0 or self.problem.n == 0

    @property
    def a_major(self) -> str:
        return self.layout.a_major

    @property
    def b_major(self) -> str:
        return self.layout.b_major


@dataclasses.dataclass
class GroupedLaunch(CheckedCall):
    """What a grouped launch is, decided without a GPU (plan_launch): the checked call (its `out` and `counts` now
    the device's, its layout bound: staged operands at their buffers), the config, the tensor maps as validated
    specs and C's row pitch, the staging buffers (`buffers`, by operand: the plan keeps them) and the copies around
    the kernel (operands.Copy's: `copies_in` before it, `copies_out` after it). `config` is None when there is
    nothing to compute (no rows or columns)."""

    config: GemmConfig | None = None
    specs: dict | None = None
    c_pitch: int = 0
    buffers: dict = dataclasses.field(default_factory=dict)
    copies_in: tuple = ()
    copies_out: tuple = ()

    def scalars(self, debug_ptr: int = 0, fix_up: tuple = ()) -> list:
        """The kernel's arguments after its tensor maps (gemm.map_arguments), in the entry's order (`fix_up`: the
        stream-K tail's, grouped_call.kernel_arguments). C's address is the one the kernel writes: out's, or its
        staging buffer's."""
        p = self.problem
        return [*self.epilogue.kernel_args(False, p.k),
                *grouped_call.kernel_arguments(self.config, self.rows, p.n, p.k, p, self.counts.ptr,
                                               self.layout.c.view.ptr, self.c_pitch, debug_ptr, self.group_strides,
                                               fix_up)]


def check_call(a, b, *, offs=None, masked_m=None, out=None, alpha=1.0, scale_a=None, scale_b=None, bias=None,
               activation=None, out_dtype=None, config: GemmConfig | None = None, convert,
               ctas: int | None = None) -> CheckedCall:
    """Every rule of a grouped call's arguments, on the host (ConfigError names the argument and the rule): the
    numbers and the activation, the form and its shapes (ptxgemm.plan.grouped), host counts by value, the epilogue's
    shapes, which arrays are read in place and which are staged (an out that would hold two results in one element
    refused), a given config against the operands. Nothing here
    allocates, uploads or asks the GPU anything: plan_launch does that after, so a refused call never reaches the
    GPU. `convert(x, name)`: an argument as the backend's array (read in place, never copied)."""
    check_config(config)
    check_ctas(ctas, 1 if config is None else config.cluster_size)   # a default config's pair is fitted to it later
    # before any array is read: a tuple scale is refused as such, not as something that is not a device array
    check_values(alpha=alpha, activation=activation, scale_a=scale_a, scale_b=scale_b)
    # any framework's device arrays, read in place; host counts are checked by value (in parse) and uploaded once
    # by plan_launch, then read by every launch
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
    if not isinstance(counts, np.ndarray) and counts.shape[0] > 1 and counts.strides[0] != 4:
        raise ConfigError(f"{name}: must be contiguous (stride 4 bytes), got strides {counts.strides}")
    fused, strides = grouped_call.grouped_epilogue(problem, alpha, scale_a, scale_b, bias, activation, convert)
    groups, k = problem.groups, problem.k
    rows = problem.m * groups if problem.form == "masked" else problem.m   # A and C as 2-D matrices (k: M)
    if problem.form == "k" and problem.in_dtype.startswith("float8"):
        raise ConfigError("a, b: the k-grouped form reads A and B MN-major, which wgmma does not take for "
                          "fp8; use bfloat16 or float16")
    # any layout: what TMA cannot read (or write) as the kernel wants it is staged (ptxgemm.plan.grouped_layout)
    layout = grouped_layout.plan(problem.form, a, b, out, b_fp8=b.dtype.itemsize == 1)
    call = CheckedCall(problem, fused, strides, a, b, out, counts, rows, layout)
    if config is not None and config.group_capacity is not None and config.group_capacity < groups:
        raise ConfigError(f"config.group_capacity: {config.group_capacity} groups fit its tables, these "
                          f"operands have {groups}")
    if not call.empty and k == 0:
        raise ConfigError("a, b: K is 0; the grouped GEMM needs K >= 1 (the product would be zeros)")
    return call


def plan_launch(a, b, *, offs=None, masked_m=None, out=None, alpha=1.0, scale_a=None, scale_b=None, bias=None,
                activation=None, out_dtype=None, config: GemmConfig | None = None, convert, upload, allocate,
                sm_count, spill_check=None, ctas: int | None = None, scratch=None) -> GroupedLaunch:
    """Every decision of a grouped call: first every argument's rule (check_call, on the host), then what needs
    memory or the device: host counts uploaded, `out` allocated when not given, the config, the staging buffers of
    the operands TMA cannot use in place (ptxgemm.plan.grouped_layout) with the copies around the kernel, and the
    tensor maps. The backend supplies `convert(x, name)` (an argument as its array), `upload(numpy int32)`,
    `allocate(shape, dtype)`, `sm_count()` (asked only when the config is chosen here), `spill_check(config)` and
    `scratch(nbytes)` (a staging buffer: anything with .ptr; default allocate((nbytes,), uint8)). `ctas`, the
    caller's cap on the grid: a default pair along M that it cannot hold whole runs on single CTAs instead (as the
    dense selection does); a given config's clusters must fit it (check_ctas)."""
    call = check_call(a, b, offs=offs, masked_m=masked_m, out=out, alpha=alpha, scale_a=scale_a, scale_b=scale_b,
                      bias=bias, activation=activation, out_dtype=out_dtype, config=config, convert=convert,
                      ctas=ctas)
    problem, fused, counts, out = call.problem, call.epilogue, call.counts, call.out
    if isinstance(counts, np.ndarray):
        counts = upload(np.ascontiguousarray(counts, dtype=np.int32))
    if out is None:
        out = allocate(problem.out_shape, problem.out_dtype)
    n = problem.n
    cfg = config if config is not None else grouped_call.default_config(problem, call.b_major, sm_count(),
                                                           fused.config_fields(False, n), spill_check)
    if config is None and ctas is not None and ctas % cfg.cluster_size:
        cfg = dataclasses.replace(cfg, cluster_m=1)
    check_ctas(ctas, cfg.cluster_size)
    cfg = dataclasses.replace(cfg, **fused.config_fields(False, n), grouped=problem.form,
                              in_dtype=problem.in_dtype, b_dtype=problem.b_dtype, out_dtype=problem.out_dtype,
                              a_major=call.a_major, b_major=call.b_major,
                              group_capacity=cfg.group_capacity or grouped_call.group_capacity(problem.groups))
    grouped_call.check_stream_k(cfg, problem)
    grouped_call.check_ring_positions(cfg, problem)
    launch = GroupedLaunch(**{**vars(call), "out": out, "counts": counts}, config=cfg)
    if call.empty:
        launch.config = None
        return launch
    # C's placement now that out exists (a fresh one is C-contiguous: staged only when its rows are not 16-byte
    # multiples); each staged operand's buffer allocated once, for every launch of the plan
    layout = grouped_layout.plan(problem.form, call.a, call.b, out, b_fp8=call.b.dtype.itemsize == 1)
    scratch = scratch or (lambda nbytes: allocate((nbytes,), np.uint8))
    launch.buffers = {op.name: scratch(op.staging.nbytes) for op in layout.operands if op.staged}
    launch.layout, copies_in, copies_out = grouped_layout.bind(layout, {name: int(buf.ptr) for name, buf in
                                                                        launch.buffers.items()})
    launch.copies_in, launch.copies_out = tuple(copies_in), tuple(copies_out)
    launch.specs, launch.c_pitch = _specs(cfg, problem, launch.layout, (call.a.dtype, call.b.dtype, out.dtype),
                                          launch.epilogue)
    return launch


class GroupedPlan(BoundLaunches):
    """A grouped GEMM bound to its arrays, with tensor maps encoded, arguments packed and staging buffers allocated
    once: `launch()` only enqueues (the staging copies in, the kernel, the copy out: each only where the layout
    needs it; `layout.describe()` says which). The counts array is read by every launch, on the device, so it may
    change between launches; so may the values of a, b and out, which every launch stages afresh."""

    def __init__(self, a, b, *, offs=None, masked_m=None, out=None, alpha=1.0, scale_a=None, scale_b=None,
                 bias=None, activation=None, out_dtype=None, config: GemmConfig | None = None, ctas: int | None = None,
                 stream=None, kernel=None, scratch=None):
        """`ctas` caps the grid (default: one CTA per SM; fewer give each CTA more units, as the tests and mutants
        want); `kernel` replaces the config's compiled kernel (ptxgemm.tools.mutants runs edited PTX this way; its
        config must be the plan's). `scratch(nbytes)`: where the staging buffers and the stream-K tail's workspace
        and flags come from, as GemmPlan's (a framework's allocator, so that a plan made during a graph capture
        takes memory the graph may keep)."""
        check_config(config)
        # the rules of the numbers and the scales' forms before any argument is read as a device array (plan_launch
        # checks every other rule, all before it allocates, uploads or asks the GPU anything)
        check_values(alpha=alpha, activation=activation, scale_a=scale_a, scale_b=scale_b)
        real = {"a": device_array(a, "a", stream), "b": device_array(b, "b", stream)}
        counts_name = "offs" if offs is not None else "masked_m"   # the counts' role, under the caller's name
        for name, x in (("out", out), ("counts", masked_m if offs is None else offs), ("scale_a", scale_a),
                        ("scale_b", scale_b), ("bias", bias)):
            real[name] = (x if host_or_number(x) else
                          device_array(x, counts_name if name == "counts" else name, stream))
        self.signature = signatures(real)
        # the call's device, from its arrays: one on another device is refused by name before anything is allocated
        self.device = call_device_of(real, counts_name)
        check_stream(stream, self.device)
        self.context = None   # the context its launches need (devices.in_context); none without a launch
        # made with the arrays' device the thread's current one (its kernel, buffers and tables go there), and the
        # thread's own context put back after
        with devices.device(self.device):
            self._make(real, offs, masked_m, alpha, activation, out_dtype, config, ctas, stream, kernel, scratch)

    def _make(self, real, offs, masked_m, alpha, activation, out_dtype, config, ctas, stream, kernel, scratch):
        """The plan on the thread's current device, its arrays' (`real`, by role): planned, buffers allocated, kernel
        loaded, maps encoded and launches prepared, bound to `real`."""
        def device():   # asked for only when there is a kernel to pick or launch: a clear error off Hopper
            return driver.require_sm90("running the grouped GEMM", self.device)

        ptrs = binding.check_real(ROLES, addresses(real))
        # planned on symbolic stand-ins (ptxgemm.plan.binding): every address the plan computes is a role's base plus
        # an offset, rewritten per call by `bind` / `launch_at`
        s = binding.stand_ins(real, ROLES, lambda name, x: not host_or_number(x))
        counts = s["counts"]
        plan = plan_launch(s["a"], s["b"], offs=None if offs is None else counts,
                           masked_m=None if masked_m is None else counts, out=s["out"], alpha=alpha,
                           scale_a=s["scale_a"], scale_b=s["scale_b"], bias=s["bias"], activation=activation,
                           out_dtype=out_dtype, config=config,
                           convert=lambda x, nm: x if isinstance(x, binding.StandIn) else device_array(x, nm, stream),
                           upload=lambda x: arrays.DeviceArray.from_numpy(x, stream=stream, device=self.device),
                           allocate=lambda shape, dt: arrays.DeviceArray.empty(shape, dt, stream=stream,
                                                                               device=self.device),
                           sm_count=lambda: device().sm_count, spill_check=spills, ctas=ctas,
                           scratch=scratch or own_scratch(stream, self.device))
        self.plan = plan
        self.problem, self.epilogue, self.group_strides = plan.problem, plan.epilogue, plan.group_strides
        self.layout = plan.layout   # what is read in place and what is staged (layout.describe() says it in words)
        self.rows = plan.rows
        self.a, self.b, self.counts = real["a"], real["b"], real["counts"]
        self.out = real["out"] if real["out"] is not None else plan.out   # a result allocated here when none given
        self.config = cfg = plan.config
        self.records = self._launch = self.workspace = self.flags = self.sk_fixup = None
        self.buffers = plan.buffers   # the staging buffers: the plan's own, kept as long as it launches
        self._steps: list = []        # what a launch enqueues: the copies in, the kernel, the copies out
        self._slots, self._lock = patch.AddressSlots(), threading.Lock()
        if cfg is None:
            return
        if kernel is not None and kernel.config != cfg:
            raise ConfigError(f"kernel: built for {kernel.config.describe()}, but these operands need "
                              f"{cfg.describe()}")
        if kernel is not None and kernel.ordinal != self.device:
            raise ConfigError(f"kernel: loaded on CUDA device {kernel.ordinal}, but the arrays are on device "
                              f"{self.device}")
        self.specs = plan.specs
        info = device()
        self.kernel = kernel if kernel is not None else get_kernel(cfg, self.device)
        self._maps = maps = encode_bound(plan.specs, ptrs, self._slots)
        limit = info.sm_count if ctas is None else min(ctas, info.sm_count)
        self.grid = limit - limit % cfg.cluster_size     # whole clusters: a pair along M takes two SMs
        debug_ptr = 0
        if cfg.debug:   # bounded waits that report the stalled barrier (ptxgemm.runtime.debug)
            self.records = StallRecords(self.grid, cfg.threads)
            debug_ptr = self.records.device_pointer
        fix_up = ()
        if cfg.stream_k:   # the tail's fix-up: a partial tile per CTA and consumer half, a flag per tail unit and half
            halves = self.grid * cfg.consumers_per_tile    # clusters x CTAs of a cluster x consumer halves
            self.workspace, self.flags = fix_up_buffers(scratch or own_scratch(stream, self.device), halves, halves,
                                                        cfg, stream)
            self.sk_fixup = sk_fixup_k_tiles(cfg, str(info.name))   # what the device weighs its tail with
            fix_up = (self.sk_fixup, self.workspace.ptr, self.flags.ptr)
        args = [*map_arguments(maps, cfg), *plan.scalars(debug_ptr, fix_up)]
        self._launch = driver.PreparedLaunch(self.kernel.function, (self.grid,), (cfg.threads,), args,
                                             smem_bytes=cfg.smem_bytes,
                                             cluster=(cfg.cluster_size, 1, 1) if cfg.cluster_size > 1 else None,
                                             programmatic=driver.PROGRAMMATIC_LAUNCH)   # the kernel waits for it
        # the staging copies read and write the caller's arrays at symbolic addresses (bound per call, as the
        # kernel's maps are) and the plan's own buffers at real ones
        self._steps = (copy_launches(plan.copies_in, self.device) + [self._launch]
                       + copy_launches(plan.copies_out, self.device))
        self.context = driver.context_of(self.device)
        self._slots.collect(self._steps, binding.decode)
        if real["out"] is None:   # the result allocated by plan_launch is the plan's own: bound to it for good
            ptrs = ptrs[:2] + (int(self.out.ptr),) + ptrs[3:]
        self._slots.bind(ptrs)

    @property
    def flops(self) -> int:
        """2 x K x N per row of A that the counts may cover (the rows actually computed depend on the counts)."""
        return 2 * self.rows * self.problem.n * self.problem.k


def _specs(cfg: GemmConfig, problem, lay: grouped_layout.GroupedLayout, dtypes: tuple,
           epi: Epilogue | None = None) -> tuple[dict, int]:
    """The kernel's tensor maps, for a bound layout (each operand in place or at its staging buffer), and C's
    row pitch; with A's blockwise scales M-major (contiguous form, `epi` the call's epilogue), their map too
    (gemm.scale_a_map). Contiguous and masked forms: A and C as 2-D matrices of every row (a masked form's groups
    stacked), B one matrix per group (its batch coordinate). k form: A (M, total_K) with M contiguous, B
    (total_K, N) with N contiguous, C (G, M, N), the group its batch coordinate; K is the outer axis of both
    operands' boxes (MN-major), so a group's K range starts at any element."""
    a, b, c = lay.a, lay.b, lay.c
    da, db, dc = dtypes
    ka = ((cfg.block_k, cfg.a_rows_per_cta, 1) if cfg.a_major == "k" else (MN_PANEL, cfg.block_k, 1))
    kb = ((cfg.block_k, cfg.b_rows_per_cta, 1) if cfg.b_major == "k" else (MN_PANEL, cfg.block_k, 1))
    if problem.form == "k":
        dims_a, strides_a = a.place.map_dims(a.view), (a.place.lead, a.place.batch)
        dims_c, strides_c = c.place.map_dims(c.view), (c.place.lead, c.place.batch)
    else:   # A and C read and written as one 2-D matrix of every row
        rows = a.view.count * a.view.rows
        dims_a, strides_a = (problem.k, rows, 1), (a.place.lead, rows * a.place.lead)
        dims_c, strides_c = (problem.n, rows, 1), (c.place.lead, rows * c.place.lead)
    specs = {
        "tmap_a": TensorMapSpec(a.view.ptr, da, dims_a, strides_a, ka, l2_promotion=LOAD_L2_PROMOTION),
        "tmap_b": TensorMapSpec(b.view.ptr, db, b.place.map_dims(b.view), (b.place.lead, b.place.batch), kb,
                                l2_promotion=LOAD_L2_PROMOTION),
        "tmap_c": TensorMapSpec(c.view.ptr, dc, dims_c, strides_c, (cfg.epi_panel_cols, cfg.epi_box_rows, 1),
                                l2_promotion="none"),
    }
    if cfg.block_scale_a_mn:
        specs["tmap_scale_a"] = scale_a_map(epi.block_a, cfg)
    return specs, c.place.lead


#: the arguments a grouped call binds, in the order of their roles (ptxgemm.plan.binding): counts is offs or masked_m
ROLES = ("a", "b", "out", "counts", "scale_a", "scale_b", "bias")


def device_array(x, name: str, stream=None):
    """arrays.as_device_array, with numpy's door named: a numpy array is refused pointing at grouped_run."""
    if isinstance(x, np.ndarray):
        raise ConfigError(f"{name}: a numpy array lives in host memory; use ptxgemm.grouped_run for numpy arrays, "
                          f"or ptxgemm.to_device to upload it once")
    return as_device_array(x, name, stream)


def host_or_number(x) -> bool:
    """None, a number, or host memory (counts checked by value, a host scale): not bound per call."""
    return x is None or isinstance(x, (numbers.Number, str, np.ndarray))


def signatures(args: dict) -> tuple:
    return tuple(binding.signature(args.get(name)) for name in ROLES)


def call_device_of(args: dict, counts_name: str) -> int:
    """The one device of a grouped call's arrays (`args` by role: arrays.call_device), the counts named as the caller
    passed them (offs or masked_m)."""
    return call_device({counts_name if name == "counts" else name: x for name, x in args.items()},
                       lambda name, x: not host_or_number(x))


def addresses(args: dict) -> tuple:
    return tuple(0 if host_or_number(x) else int(x.ptr) for x in (args.get(name) for name in ROLES))


def grouped_matmul(a, b, *, offs=None, masked_m=None, out=None, alpha=1.0, scale_a=None, scale_b=None, bias=None,
                   activation=None, out_dtype=None, config: GemmConfig | None = None, stream=None):
    """One launch over G groups (asynchronous on `stream`), torch._grouped_mm's forms:

    contiguous  a (total_M, K), b (G, K, N), offs (G,) int32 cumulative row ends  -> (total_M, N)
    masked      a (G, M_max, K), b (G, K, N), masked_m (G,) int32 rows per group  -> (G, M_max, N)
    k-grouped   a (M, total_K), b (total_K, N), offs (G,) int32 cumulative K ends  -> (G, M, N)

    out = act(alpha * scale_a * scale_b * a_g @ b_g) on each group's rows (k-grouped: on each group's K range,
    per-tensor scales only; an empty group's matrix is zeros); rows outside every group keep their values (a new
    `out` holds whatever the allocator gave there). Device arrays of any framework, read in place (numpy arrays:
    grouped_run), in any layout and size: row- or column-major, strided, offset, rows that are no multiple of 16
    bytes (N or K not a multiple of 8 in 16-bit types, of 16 in fp8), fp8 b stored N-major; what the kernel
    cannot read (or write) in place is staged through the plan's own buffers, copied on every launch (an out
    staged in the contiguous or masked form is first loaded with out's values, so the copy back leaves the rows
    outside the groups as they were; GroupedPlan(...).layout.describe() says what was staged). The counts are
    device int32 vectors read by the kernel (host numpy ones are checked by value and uploaded). Any group sizes,
    0 included; K >= 1. Returns `out`.
    Plans are cached as matmul's are, by signature (shapes, strides, dtypes and address classes of the device
    arrays; the epilogue's numbers), so a call like an earlier one binds that plan and launches; a call with host
    counts or host vectors plans anew (their values are the plan's). Every argument is checked on the host
    (check_call: ConfigError names it and the rule) before anything is allocated or asked of the GPU. The call runs
    on its arrays' device, as matmul's does (arrays on two devices: ConfigError naming the argument)."""
    start = now_ns()
    check_config(config)
    # the numbers' rules first: the cache key below holds their values (alpha True would find alpha 1.0's plan, a
    # NaN or an array no plan at all), and a tuple scale is refused as such rather than as a non-device array
    check_values(alpha=alpha, activation=activation, scale_a=scale_a, scale_b=scale_b)
    od = None if out_dtype is None else check_out_dtype(out_dtype)
    form = "offs" if offs is not None else "masked_m"
    args = {"a": device_array(a, "a", stream), "b": device_array(b, "b", stream)}
    for name, x in (("counts", masked_m if offs is None else offs), ("scale_a", scale_a), ("scale_b", scale_b),
                    ("bias", bias)):   # the counts' role, named as the caller passed it
        args[name] = x if host_or_number(x) else device_array(x, form if name == "counts" else name, stream)
    if offs is not None and masked_m is not None:
        grouped.parse(args["a"], args["b"], offs=offs, masked_m=masked_m, out_dtype=out_dtype)   # names the rule
    args["out"] = None if out is None else device_array(out, "out", stream)
    kwargs = dict(alpha=alpha, activation=activation, out_dtype=out_dtype, config=config, stream=stream)

    def allocate(problem, ordinal) -> None:   # the call's own result on its device, never a cached plan's
        args["out"] = arrays.DeviceArray.empty(problem.out_shape, problem.out_dtype, stream=stream, device=ordinal)

    def make():
        if args["out"] is None:   # every rule checked on the host before the result is allocated on the arrays' device
            ordinal = call_device_of(args, form)
            allocate(check_call(args["a"], args["b"], **{form: args["counts"]}, alpha=alpha, scale_a=args["scale_a"],
                                scale_b=args["scale_b"], bias=args["bias"], activation=activation,
                                out_dtype=out_dtype, config=config,
                                convert=lambda x, nm: device_array(x, nm, stream)).problem, ordinal)
        return GroupedPlan(args["a"], args["b"], **{form: args["counts"]}, out=args["out"], scale_a=args["scale_a"],
                           scale_b=args["scale_b"], bias=args["bias"], **kwargs)

    if any(uploaded(name, args[name]) for name in ("counts", "scale_a", "scale_b")):
        # host memory the plan uploads (counts checked by value, a host vector): planned anew on every call
        COUNTERS.plans_made += 1
        make().launch(stream)
    else:
        # a call that gives no out is keyed by out_dtype (out's signature None): a fresh result's signature follows
        # from the others' (its shape from the operands', C order, an aligned allocation)
        key = ("grouped", form, signatures(args), alpha, activation, od, config, stream_key(stream))
        plan = cached_plan(key, lambda: without_caller_arrays(make()))
        if args["out"] is None:   # a plan found: its arguments passed every rule when it was made
            allocate(plan.problem, plan.device)
        plan.launch_at(addresses(args), stream)
    COUNTERS.call(start)
    return args["out"]


def _host_stand_in(x, name: str):
    """A numpy argument of grouped_run as the device array its upload will be (DeviceArray.from_numpy: the span of
    its elements, numpy's strides kept, element 0 where arrays.upload_offset puts it); a stand-in already made (the
    epilogue's rules convert the views they take of one) as it is."""
    if isinstance(x, binding.StandIn):
        return x
    if not isinstance(x, np.ndarray):
        raise ConfigError(f"{name}: grouped_run takes numpy arrays (and numbers for alpha and per-tensor scales), got "
                          f"{type(x).__name__}; use ptxgemm.grouped_matmul for device arrays")
    return binding.StandIn(*upload_site(x))


def check_run(a, b, *, offs=None, masked_m=None, alpha=1.0, scale_a=None, scale_b=None, bias=None, activation=None,
              out_dtype=None, config: GemmConfig | None = None) -> CheckedCall:
    """grouped_run's rules, every one on the host before anything is uploaded (check_call on stand-ins for the
    uploads): a, b and every array argument numpy (ConfigError naming the first that is not), the counts host int32
    vectors checked by value, and every rule of grouped_matmul. Returns the checked call (its problem says the
    result's shape and dtype). ptxgemm.tools.emulator's grouped_run calls it too."""
    for name, x in (("a", a), ("b", b)):
        if not isinstance(x, np.ndarray):
            raise ConfigError(f"{name}: grouped_run takes numpy arrays, got {type(x).__name__}; use "
                              f"ptxgemm.grouped_matmul for device arrays")
    return check_call(a, b, offs=offs, masked_m=masked_m, alpha=alpha, scale_a=scale_a, scale_b=scale_b, bias=bias,
                      activation=activation, out_dtype=out_dtype, config=config, convert=_host_stand_in)


def grouped_run(a, b, *, offs=None, masked_m=None, alpha=1.0, scale_a=None, scale_b=None, bias=None,
                activation=None, out_dtype=None, config: GemmConfig | None = None) -> np.ndarray:
    """grouped_matmul for numpy arrays, as `run` is matmul's: uploads, computes on the GPU (the thread's current
    device, ptxgemm.device), downloads, and returns a new C-order numpy array. The same three forms:

    contiguous  a (total_M, K), b (G, K, N), offs (G,) int32 cumulative row ends  -> (total_M, N)
    masked      a (G, M_max, K), b (G, K, N), masked_m (G,) int32 rows per group  -> (G, M_max, N)
    k-grouped   a (M, total_K), b (total_K, N), offs (G,) int32 cumulative K ends  -> (G, M, N)

    a and b are bfloat16, float16 or fp8 numpy arrays of any layout (each uploaded as the span its elements
    occupy, strides kept; what the kernel cannot read in place is staged on the device, as grouped_matmul stages
    it), never converted: another dtype is refused by name. The counts are host int32 numpy vectors, checked by
    value. The epilogue arguments as grouped_matmul's: numbers, or float32 numpy arrays (uploaded; a 1-element
    scale stays on the host, folded into alpha). `out_dtype` defaults to the inputs' dtype (bfloat16 for fp8).
    Rows outside every group (contiguous: past offs[-1]; masked: past masked_m[g]) are zeros in the result: its
    device memory is zeroed before the launch, which never writes them. Every rule is checked before anything is
    uploaded (check_run)."""
    start = now_ns()
    call = check_run(a, b, offs=offs, masked_m=masked_m, alpha=alpha, scale_a=scale_a, scale_b=scale_b, bias=bias,
                     activation=activation, out_dtype=out_dtype, config=config)
    problem = call.problem
    ordinal = devices.current()   # numpy arrays name no device: the thread's (ptxgemm.device)
    with devices.device(ordinal):   # the thread's own context back after
        driver.require_sm90("running the grouped GEMM", ordinal)
        da, db = (arrays.DeviceArray.from_numpy(x, device=ordinal) for x in (a, b))
        vectors = {name: arrays.DeviceArray.from_numpy(x, device=ordinal) if uploaded(name, x) else x
                   for name, x in (("scale_a", scale_a), ("scale_b", scale_b), ("bias", bias))}
        out = arrays.DeviceArray.empty(problem.out_shape, problem.out_dtype, device=ordinal)
        out.fill_bytes(0, 1)   # the rows no group covers: zeros, not whatever the allocator left there
        COUNTERS.plans_made += 1
        GroupedPlan(da, db, **{problem.counts_name: masked_m if offs is None else offs}, out=out, alpha=alpha,
                    activation=activation, config=config, **vectors).launch()
        result = out.to_numpy()
    COUNTERS.call(start)
    return result
