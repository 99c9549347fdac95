"""The GEMM's entry points and bound plans: run, matmul and GemmPlan, each planned by ptxgemm.plan.call and launched
with its kernel loaded, its tensor maps encoded and its arguments packed once.

Two ways in:
- `run(a, b)` on numpy arrays: numpy's `a @ b` (any shapes, batches, layouts); uploads, launches, copies back.
- `matmul(a, b, out)` / `GemmPlan` on device arrays (DeviceArray, DLPack, __cuda_array_interface__): no host
  copies, no recompilation; a plan encodes its tensor maps, packs its arguments and allocates its staging buffers
  once, so `plan.launch()` only enqueues; `matmul` keeps plans in a cache keyed by the operands' signatures.

What the kernel reads in place and what is staged is ptxgemm.plan.operands' decision. Every rule is checked before
anything reaches the GPU, and a broken one raises ConfigError naming the argument and the rule.

A call runs on its arrays' device (`run`: the thread's current device, ptxgemm.device): its plan holds that device's
kernel, buffers and context, and makes the context current around its launches where the process has more than one
(ptxgemm.runtime.devices; docs/gemm.md, "Devices").
"""
from __future__ import annotations

import ctypes
import dataclasses
import math
import numbers
import threading

import ml_dtypes  # noqa: F401 - registers numpy's 'bfloat16' dtype name
import numpy as np

from .errors import ConfigError
from .kernel import fast_div, schedule, trace_format
from .kernel.config import GemmConfig, default_out_dtype
from .kernel.layout import FLAG_BYTES
from .kernel.params import entry_maps
from .plan import binding, operands
from .plan.cache import COUNTERS, PlanCache, now_ns
from .plan.call import CallPlan, parse_epilogue, plan_call
from .plan.epilogue import Epilogue, check_values
from .plan.checks import check_config, check_dtypes, check_out_dtype, dtype_name, result_shape
from .runtime import arrays, devices, driver, patch, relayout, tensormap
from .runtime.arrays import as_device_array, call_device
from .runtime.debug import StallRecords
from .runtime.launches import BoundLaunches
from .runtime.tensormap import TensorMapSpec
from .toolchain import compiler
from .toolchain.kernels import compile_gemm

# L2 promotion of the operand loads. 128B measured as fast as 256B or faster everywhere on the H100 and up to 10%
# faster where lines are not 128-byte multiples (3000x5000x2048 with B row-major, 1000^3): a 256-byte promotion of a
# line that straddles two 128-byte lines fetches sectors nobody asked for (docs/perf-notes.md, issue 11)
LOAD_L2_PROMOTION = "128B"


# --------------------------------------------------------------------------------------------------------------
# Compilation
# --------------------------------------------------------------------------------------------------------------


class GemmKernel:
    """A compiled kernel for one config, loaded on device `ordinal` (None: the thread's current device) and ready to
    launch there (kept in a per-process cache, per device).

    `ptx` defaults to the config's own rendering; the mutation tester (ptxgemm.tools.mutants) passes an edited copy of it,
    which must keep the kernel's name, parameters and shared-memory map.
    """

    def __init__(self, config: GemmConfig, ptx: str | None = None, ordinal: int | None = None):
        self.config = config
        self.compiled = compile_gemm(config) if ptx is None else compiler.compile_ptx(ptx)
        self.module = driver.load_module(self.compiled, f"GEMM module ({config.describe()})", ordinal)
        self.ordinal = self.module.ordinal
        self.function = self.module.function(config.kernel_name)
        self.function.set_max_dynamic_smem(config.smem_bytes)


_kernels: dict[tuple[GemmConfig, int], GemmKernel] = {}   # by (config, device ordinal): a module is one context's
_kernels_lock = threading.Lock()


def get_kernel(config: GemmConfig, ordinal: int | None = None) -> GemmKernel:
    """The config's kernel loaded on device `ordinal` (None: the thread's current device), made once per device."""
    ordinal = devices.resolve(ordinal)
    with _kernels_lock:
        if (config, ordinal) not in _kernels:
            _kernels[(config, ordinal)] = GemmKernel(config, ordinal=ordinal)
        return _kernels[(config, ordinal)]


# --------------------------------------------------------------------------------------------------------------
# Operand rules (shapes and strides: ptxgemm.plan.operands)
# --------------------------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------------------------
# Plans and launches
# --------------------------------------------------------------------------------------------------------------


MN_PANEL = 64  # elements of an MN-major operand per 128-byte swizzle row: one TMA box (and smem panel) each


def _operand_map(op: operands.Operand, k_major: bool, k_major_rows: int, block_k: int, dtype):
    """The rank-3 TMA map of an input (innermost first: contiguous axis, the other, batch). K-major: box
    {block_k, k_major_rows, 1}; MN-major: one {64, block_k, 1} box per 64-element panel (M or N innermost), the layout
    wgmma reads with its transpose bit."""
    box = (block_k, k_major_rows, 1) if k_major else (MN_PANEL, block_k, 1)
    return _map_spec(op, box, dtype, l2_promotion=LOAD_L2_PROMOTION)


def _map_spec(op: operands.Operand, box, dtype, **options):
    return TensorMapSpec(op.view.ptr, np.dtype(dtype), op.place.map_dims(op.view), (op.place.lead, op.place.batch),
                         tuple(box), **options)


def tensor_map_specs(lay: operands.MatmulPlan, cfg: GemmConfig, epi: Epilogue | None = None) -> dict:
    """The kernel's tensor maps as validated specs (ptxgemm.runtime.tensormap checks every driver rule on construction,
    without a GPU), by kernel parameter name, for a layout bound to memory (operands.bind); `epi`, the call's
    epilogue, where the config reads one of its tables by TMA (A's M-major blockwise scales)."""
    specs = {"tmap_a": _operand_map(lay.a, cfg.a_major == "k", cfg.a_rows_per_cta, cfg.block_k, cfg.in_dtype),
             "tmap_b": _operand_map(lay.b, cfg.b_major == "k", cfg.b_rows_per_cta, cfg.block_k, cfg.b_type),
             # one store box per panel: of one consumer's rows (the whole tile in pingpong, a half in cooperative),
             # or, transposed, of the tile's block_n columns (C's inner axis is then M)
             "tmap_c": _map_spec(lay.c, (cfg.epi_panel_cols, cfg.epi_box_rows, 1), cfg.out_dtype, l2_promotion="none")}
    if cfg.epi_tail_cols:   # a tile's last panel when block_n is not a whole number of panels: that narrow, unswizzled
        specs["tmap_c_tail"] = _map_spec(lay.c, (cfg.epi_tail_cols, cfg.consumer_m, 1), cfg.out_dtype,
                                         swizzle="none", l2_promotion="none")
    if cfg.has_source:  # the epilogue's S: one box per 128-byte panel of the whole tile's rows, 128B-swizzled
        specs["tmap_source"] = _map_spec(lay.s, (cfg.src_panel_cols, cfg.block_m, 1), cfg.source_dtype,
                                         l2_promotion=LOAD_L2_PROMOTION)
    if cfg.block_scale_a_mn:
        specs["tmap_scale_a"] = scale_a_map(epi.block_a, cfg)
    return specs


def map_arguments(maps: dict, cfg: GemmConfig) -> list:
    """The kernel's leading arguments: its tensor maps (`maps`, by parameter name) in the order its `.entry` declares
    them, read from the list the template declares them by (kernel.params.entry_maps), so that neither the dense
    nor the grouped launch keeps an order of its own."""
    return [maps[name] for name in entry_maps(cfg)]


def scale_a_map(table, cfg: GemmConfig) -> TensorMapSpec:
    """A's blockwise scales M-major (M rows adjacent, each k-block's column a multiple of 16 bytes on), as the
    producer loads them: boxes of cfg.bs_a_box_rows rows of one k-block per stage (rows past M zero-filled), the
    tile's block_m rows in the dense kernel; the contiguous grouped kernel's tile rows are rows of the whole table
    from any row, so its boxes start on the quad of rows holding it and span a quad more (cfg.bs_a_quads)."""
    return TensorMapSpec(table.ptr, np.dtype(np.float32), tuple(int(e) for e in table.shape),
                         (int(table.strides[1]),), (cfg.bs_a_box_rows, 1), swizzle="none",
                         l2_promotion=LOAD_L2_PROMOTION)


_tile_orders: dict[tuple[int, int, int], object] = {}
_tile_orders_lock = threading.Lock()


def _tile_order(rows: int, cols: int, ordinal: int):
    """The Hilbert walk over a rows x cols grid of units as a table on device `ordinal` (u32 row << 16 | col per
    unit), made once per grid shape and device and kept for the process (a plan's launches read it; it is a few
    KB)."""
    with _tile_orders_lock:
        if (rows, cols, ordinal) not in _tile_orders:
            if rows >= 1 << 16 or cols >= 1 << 16:
                raise ConfigError(f"config.raster: the Hilbert table packs rows and columns in 16 bits each; "
                                  f"{rows} x {cols} units do not fit")
            order = np.array([(r << 16) | c for r, c in schedule.hilbert_order(rows, cols)], dtype=np.uint32)
            _tile_orders[(rows, cols, ordinal)] = arrays.DeviceArray.from_numpy(order, device=ordinal)
        return _tile_orders[(rows, cols, ordinal)]


def copy_launches(copies, ordinal: int) -> list:
    """operands.Copy's as prepared relayout launches on device `ordinal` (a source address 0 means zeros): the
    staging steps of a plan (GemmPlan's, and GroupedPlan's around the grouped kernel)."""
    out = []
    for c in copies:
        launch = (relayout.prepare_fill(c.dst_ptr, c.dst_strides, c.shape, c.itemsize, ordinal) if c.src_ptr == 0
                  else relayout.prepare(c.dst_ptr, c.dst_strides, c.src_ptr, c.src_strides, c.shape, c.itemsize,
                                        ordinal))
        if launch is not None:
            out.append(launch)
    return out


def stream_key(stream):
    """A ptxgemm Stream, None or a raw handle is its own key; other stream objects are keyed by their handle (torch
    makes a new object for the same stream on every current_stream())."""
    return stream if stream is None or type(stream) in _OWN_KEY_STREAMS else driver.stream_handle(stream)


_OWN_KEY_STREAMS = (int, driver.Stream)


def own_scratch(stream, ordinal: int):
    """A plan's scratch allocator when the caller gives none: ptxgemm's own memory on device `ordinal`, ordered on
    `stream`."""
    return lambda nbytes: arrays.DeviceArray.empty((nbytes,), np.uint8, stream=stream, device=ordinal)


def check_stream(stream, ordinal: int) -> None:
    """ConfigError unless `stream`, when it is a ptxgemm Stream (which knows its device), is of device `ordinal`, the
    call's (a launch on another device's stream fails in the driver, after the plan was made)."""
    if isinstance(stream, driver.Stream) and stream.device != ordinal:
        raise ConfigError(f"stream: a stream of CUDA device {stream.device}, but the arrays are on device {ordinal}; "
                          f"make it inside `with ptxgemm.device({ordinal}):`")


def fix_up_buffers(scratch, partials: int, flags: int, cfg: GemmConfig, stream) -> tuple:
    """Split-K's and stream-K's fix-up memory from `scratch(nbytes)`: a workspace of `partials` fp32 partial tiles
    and `flags` u32 flags (never empty, so the pointers are real). The flags are zeroed once here, and every
    launch leaves them zero. Returns (workspace, flags), which the plan keeps as long as it launches."""
    workspace = scratch(max(partials * cfg.partial_bytes, 16))
    count = max(flags, 1)
    buf = scratch(count * FLAG_BYTES)
    flag_array = arrays.DeviceArray(buf.ptr, (count,), np.uint32, owner=False, base=buf)
    flag_array.fill_bytes(0, FLAG_BYTES, stream=stream)
    return workspace, flag_array


#: the arguments a dense call binds, in the order of their roles (ptxgemm.plan.binding): the operands, the result,
#: and the epilogue's arrays, each an address slot wherever the plan reads or writes it
ROLES = ("a", "b", "out", "c", "bias", "scale_a", "scale_b")
EPILOGUE_ARGS = ROLES[3:]


def stays_on_host(name: str, x) -> bool:
    """Whether epilogue argument `name` is held by a plan as a value rather than bound as memory: None, a number
    (numpy's scalar types included) and a host per-tensor scale (folded into alpha). Anything else is an array."""
    return x is None or isinstance(x, numbers.Number) or (isinstance(x, np.ndarray) and not uploaded(name, x))


def _epilogue_arg(x, name: str, stream):
    """An epilogue argument as a plan takes it: a value as it is (stays_on_host), else a device array read in
    place."""
    return x if stays_on_host(name, x) else as_device_array(x, name, stream)


def _is_array(name: str, x) -> bool:
    return x is not None and hasattr(x, "ptr")


def plan_symbolic(args: dict, config: GemmConfig | None, *, alpha=1.0, beta=0.0, activation=None, device,
                  ctas: int | None = None, spill_check=None) -> CallPlan:
    """The plan of a call on `args` (by ROLES name: descriptors with shape, strides, dtype and ptr, or numbers),
    made on symbolic stand-ins (ptxgemm.plan.binding): every rule checked, every address it computes a role's
    base plus an offset, no GPU touched. The epilogue's arrays go through epilogue.parse as they are."""
    s = binding.stand_ins(args, ROLES, _is_array)
    fused = parse_epilogue(s["a"], s["b"], lambda x, name: x, c=s.get("c"), alpha=alpha, beta=beta,
                           bias=s.get("bias"), activation=activation, scale_a=s.get("scale_a"),
                           scale_b=s.get("scale_b"))
    return plan_call(s["a"], s["b"], s["out"], config, fused, device=device, ctas=ctas, spill_check=spill_check)


def signatures(args: dict) -> tuple:
    """What a plan depends on of its arguments (ROLES order): binding.signature of each."""
    return tuple(binding.signature(args.get(name)) for name in ROLES)


def _array_signature(x) -> tuple:
    """binding.signature of a DeviceArray, on matmul's per-call path (its fields are already tuples, a dtype and an
    ordinal)."""
    return binding.array_signature(x.shape, x.strides, dtype_name(x.dtype), x.ptr, x.device)


def addresses(args: dict) -> tuple:
    """Each role's device address (0 for a number or nothing), in ROLES order: what a bound plan is bound to."""
    return tuple(int(args[n].ptr) if _is_array(n, args.get(n)) else 0 for n in ROLES)


class GemmPlan(BoundLaunches):
    """numpy's `a @ b` into `out` on device memory, planned by shape and bound to memory: every tensor map encoded,
    every argument packed and every staging buffer allocated once, so `launch()` only enqueues (staging copies, the
    GEMM, the copy-out, on one stream).

    A plan depends on its arrays' shapes, byte strides, dtypes and address classes (address mod 16), the epilogue's
    numbers and the config, never on the addresses (ptxgemm.plan.binding): `bind(a, b, out, ...)` points it at other
    arrays of the same signature in microseconds, rewriting only the address slots of its tensor maps and kernel
    arguments. Any shapes numpy's matmul takes (batches with broadcasting, vectors, empty sizes) and any strides:
    what TMA can read or write in place runs in place; the rest goes through dense buffers (ptxgemm.plan.operands
    decides; `layout` says what it decided, at symbolic addresses)."""

    def __init__(self, a, b, out, config: GemmConfig | None = None, *, c=None, alpha=1.0, beta=0.0, bias=None,
                 activation=None, scale_a=None, scale_b=None, ctas: int | None = None,
                 kernel: GemmKernel | None = None, stream=None, scratch=None, planned: CallPlan | None = None):
        """out = act(alpha * (scale_a . a) @ (b . scale_b) + beta * c + bias), cast to out's dtype (ptxgemm.plan.epilogue
        has the rules of the epilogue arguments; all left out: out = a @ b). `ctas` caps the grid (default: one CTA
        per SM): fewer CTAs give each consumer more tiles, which is how the tests make every consumer run the
        pingpong several times on small problems. `kernel` replaces the config's compiled kernel (ptxgemm.tools.mutants
        runs edited PTX this way); its config must be the plan's. `stream`: where staging buffers are allocated
        (stream-ordered); launch on the same stream. `scratch(nbytes)`: where the plan's own device memory (staging
        buffers, split-K's and stream-K's workspace and flags) comes from, a DeviceArray of nbytes bytes usable on
        `stream`; default ptxgemm's stream-ordered pool. A framework passes its own allocator, so that a plan made
        while its stream is captured into a CUDA graph takes memory the graph may keep (ptxgemm.torch: torch's
        caching allocator). `planned`: the call already planned on these arguments' signatures (run plans before
        it uploads anything)."""
        check_config(config)
        # any framework's device arrays, read in place (DLPack or __cuda_array_interface__); never a copy
        a, b, out = (as_device_array(x, name, stream) for x, name in ((a, "a"), (b, "b"), (out, "out")))
        check_dtypes(a, b)
        check_out_dtype(out.dtype, "out")
        args = {"a": a, "b": b, "out": out}
        args.update((name, _epilogue_arg(x, name, stream)) for name, x in
                    (("c", c), ("bias", bias), ("scale_a", scale_a), ("scale_b", scale_b)))
        self.signature = signatures(args)
        # the call's device, from its arrays: one on another device is refused by name before anything is allocated
        self.device = call_device(args, _is_array)
        check_stream(stream, self.device)
        self.config = self.kernel = self.schedule = self._launch = self.context = None
        self.buffers = {}
        self.records = self.trace_buffer = self.workspace = self.flags = None
        self._steps: list = []  # what launch() enqueues, in order, each a driver.PreparedLaunch
        self._slots = patch.AddressSlots()
        self._lock = threading.Lock()   # a bind and the launch that reads it, together
        # made with the arrays' device the thread's current one (its kernel, buffers and tables go there), and the
        # thread's own context put back after
        with devices.device(self.device):
            self._make(args, config, alpha, beta, activation, ctas, kernel, stream, scratch, planned)
        self.a, self.b, self.out = a, b, out

    def _make(self, args, config, alpha, beta, activation, ctas, kernel, stream, scratch, planned) -> None:
        """The plan on the thread's current device, its arrays': selected (unless `planned`), its kernel loaded,
        buffers allocated, maps encoded and launches prepared, bound to `args`."""
        # the GPU is asked for only when there is a kernel to pick: before loading, a clear error on a non-Hopper GPU
        if planned is None:
            planned = plan_symbolic(args, config, alpha=alpha, beta=beta, activation=activation,
                                    device=lambda: driver.require_sm90("running the GEMM", self.device), ctas=ctas)
        elif planned.signature and planned.signature != self.signature:
            raise ConfigError(f"planned: made for arguments {planned.signature}, given {self.signature}")
        self.planned = planned
        self.layout = lay = planned.layout
        self.epilogue, cfg = planned.epilogue, planned.config
        ptrs = binding.check_real(ROLES, addresses(args))
        if cfg is None:  # nothing to multiply: an empty result, or zeros (K = 0)
            self._steps = copy_launches(lay.fill, self.device)
        else:
            self.config = cfg
            self._scratch = scratch or own_scratch(stream, self.device)
            if kernel is not None and kernel.config != cfg:
                raise ConfigError(f"kernel: built for {kernel.config.describe()}, but these operands need "
                                  f"{cfg.describe()}")
            if kernel is not None and kernel.ordinal != self.device:
                raise ConfigError(f"kernel: loaded on CUDA device {kernel.ordinal}, but the arrays are on device "
                                  f"{self.device}")
            self.kernel = kernel if kernel is not None else get_kernel(cfg, self.device)
            info = driver.require_sm90("running the GEMM", self.device)
            for op in lay.operands:  # staging buffers, allocated in stream order (no synchronization)
                if op.staged:
                    self.buffers[op.name] = self._scratch(op.staging.nbytes)
            bound, copies_in, copies_out = operands.bind(lay, {k: v.ptr for k, v in self.buffers.items()})
            self._encode(bound, cfg, info, ctas, stream, ptrs)
            self._steps = (copy_launches(copies_in, self.device) + [self._launch]
                           + copy_launches(copies_out, self.device))
        if self._steps:   # the context its launches need current (devices.in_context); none without a launch
            self.context = driver.context_of(self.device)
        self._slots.collect(self._steps, binding.decode)
        self._slots.bind(ptrs)

    # the problem the kernel runs (after any swap or fold): the layout's
    m = property(lambda self: self.layout.m)
    n = property(lambda self: self.layout.n)
    k = property(lambda self: self.layout.k)
    batches = property(lambda self: self.layout.batches)

    def _encode(self, lay: operands.MatmulPlan, cfg: GemmConfig, info, ctas, stream, ptrs) -> None:
        """Tensor maps (each encoded at this call's address, its slot kept), schedule and packed arguments of the
        GEMM launch."""

        # the encoded maps by the entry's parameter names (map_arguments packs them in its order)
        self.tmaps = maps = encode_bound(tensor_map_specs(lay, cfg, self.epilogue), ptrs, self._slots)
        self.schedule = sched = schedule.plan_for(cfg, lay.m, lay.n, lay.k, info.sm_count, ctas, lay.batches)
        self.tiles_m, self.tiles_n, self.k_tiles = sched.tiles_m, sched.tiles_n, sched.k_tiles
        self.clusters, self.grid = sched.clusters, sched.grid
        debug_ptr = 0
        if cfg.debug:
            self.records = StallRecords(self.grid, cfg.threads)
            debug_ptr = self.records.device_pointer
        args = [*map_arguments(maps, cfg),
                *self.epilogue.kernel_args(lay.swapped, lay.k),
                ctypes.c_uint32(lay.m), ctypes.c_uint32(lay.n),
                ctypes.c_uint32(sched.cluster_rows), ctypes.c_uint32(sched.cluster_cols), ctypes.c_uint32(self.k_tiles),
                ctypes.c_uint32(lay.batches), ctypes.c_uint32(int(lay.a.view.count > 1)),
                ctypes.c_uint32(int(lay.b.view.count > 1))]
        if cfg.raster == "hilbert":
            self.tile_order = _tile_order(sched.cluster_rows, sched.cluster_cols, self.device)
            args.append(ctypes.c_uint64(self.tile_order.ptr))
        args += [ctypes.c_uint32(v) for v in fast_div.walk_divisors(sched.cluster_rows, sched.cluster_cols,
                                                                      lay.batches, cfg.group_m, cfg.raster,
                                                                      self.k_tiles)]
        if cfg.split_k:
            args += self._split_arguments(cfg, sched, stream)
        if cfg.stream_k:
            args += self._stream_k_arguments(cfg, sched, stream)
        args.append(ctypes.c_uint64(debug_ptr))
        if cfg.trace:
            args += self._trace_arguments()
        self._launch = driver.PreparedLaunch(self.kernel.function, (self.grid,), (cfg.threads,), args,
                                             smem_bytes=cfg.smem_bytes,
                                             cluster=(cfg.cluster_size, 1, 1) if cfg.cluster_size > 1 else None,
                                             programmatic=driver.PROGRAMMATIC_LAUNCH)   # the kernel waits for it

    def _split_arguments(self, cfg: GemmConfig, sched, stream) -> list:
        """Split-K's splits (and under a split lead the last split's k-tiles), and its fix-up buffers: a partial tile
        per split but the last, per output tile and consumer half; a flag per output tile and consumer half (a
        cluster's CTAs each hold a tile of the unit's)."""
        halves = sched.work_tiles * cfg.cluster_size * cfg.consumers_per_tile
        lead = [ctypes.c_uint32(sched.final_k_tiles)] if cfg.split_lead else []   # param_k_last
        return [ctypes.c_uint32(sched.splits), *map(ctypes.c_uint32, fast_div.magic(sched.splits)), *lead,
                *self._fix_up_buffers(halves * (sched.splits - 1), halves, cfg, stream)]

    def _stream_k_arguments(self, cfg: GemmConfig, sched, stream) -> list:
        """The stream-K tail's split (units run whole, k-tiles per cluster's share), and its fix-up buffers: a
        partial tile per CTA and consumer half (a share holds at most one partial); a flag per tail unit, CTA of the
        cluster and consumer half."""
        halves = cfg.cluster_size * cfg.consumers_per_tile
        return [ctypes.c_uint32(sched.dp_units), ctypes.c_uint32(sched.sk_per),
                *self._fix_up_buffers(sched.clusters * halves, sched.sk_units * halves, cfg, stream)]

    def _fix_up_buffers(self, partials: int, flags: int, cfg: GemmConfig, stream) -> list:
        """fix_up_buffers for this plan, kept by it; [workspace, flags] as kernel arguments."""
        self.workspace, self.flags = fix_up_buffers(self._scratch, partials, flags, cfg, stream)
        return [ctypes.c_uint64(self.workspace.ptr), ctypes.c_uint64(self.flags.ptr)]

    def _trace_arguments(self) -> list:
        """Allocate the trace buffer (ptxgemm.kernel.trace_format) with room for every event this plan's schedule makes:
        the busiest producer's k-tiles and the busiest consumer's tiles (every tile in the cooperative schedule; a
        split-K tile's or stream-K segment's fix-up events too). Zeroed once; each launch rewrites it."""
        sched = self.schedule
        self.trace_capacity = trace_format.capacity_for(sched.max_tiles_per_consumer, sched.ring_passes,
                                                        self.config.schedule,
                                                        self.config.split_k or self.config.stream_k)
        total = self.grid * trace_format.ROLES * self.trace_capacity
        if total >= 2 ** 32:
            raise ConfigError(f"config.trace: {total} trace records do not fit the kernel's 32-bit record numbers; "
                              f"trace a smaller problem")
        nbytes = trace_format.buffer_bytes(self.grid, self.trace_capacity)
        self.trace_buffer = buf = arrays.DeviceArray.empty((nbytes,), np.uint8, device=self.device)
        buf.fill_bytes(0, 1)
        return [ctypes.c_uint64(buf.ptr), ctypes.c_uint64(buf.ptr + trace_format.header_bytes(self.grid)),
                ctypes.c_uint32(self.trace_capacity), ctypes.c_uint32(total)]

    @property
    def flops(self) -> int:
        return 2 * self.batches * self.m * self.n * self.k

    def bind(self, a, b, out, *, c=None, bias=None, scale_a=None, scale_b=None, stream=None) -> "GemmPlan":
        """Point the plan at other arrays of the same signature (shapes, byte strides, dtypes, address classes):
        the next `launch()` reads and writes them. ConfigError names an argument whose signature differs (that
        call needs a plan of its own). Returns the plan."""
        args = {"a": as_device_array(a, "a", stream), "b": as_device_array(b, "b", stream),
                "out": as_device_array(out, "out", stream)}
        args.update((name, _epilogue_arg(x, name, stream)) for name, x in
                    (("c", c), ("bias", bias), ("scale_a", scale_a), ("scale_b", scale_b)))
        for name, want, got in zip(ROLES, self.signature, signatures(args)):
            if want != got:
                raise ConfigError(f"{name}: this plan was made for {_describe(want)}, got {_describe(got)}; "
                                  f"make a plan for it (or call ptxgemm.matmul, which keeps one per signature)")
        ptrs = binding.check_real(ROLES, addresses(args))
        with self._lock:
            self._slots.bind(ptrs)
        self.a, self.b, self.out = args["a"], args["b"], args["out"]
        return self


def encode_bound(specs: dict, ptrs: tuple, slots: patch.AddressSlots) -> dict:
    """Encode tensor map specs made at symbolic addresses (ptxgemm.plan.binding) at the real ones of `ptrs` (by
    role), each map's slot added to `slots`; a spec at a real address (a plan's own buffer) is encoded as it is."""
    maps = {}
    for name, spec in specs.items():
        place = binding.decode(spec.address)
        if place is None:
            maps[name] = tensormap.encode(spec)
            continue
        maps[name] = tensormap.encode(dataclasses.replace(spec, address=binding.rebase(spec.address, ptrs)))
        slots.add_map(maps[name], *place)
    return maps


def _describe(sig) -> str:
    """A signature (binding.signature) in words, for an error message."""
    if sig is None:
        return "nothing"
    if sig[0] in ("number", "host"):
        return "a number" if sig[0] == "number" else "a host scale"
    shape, strides, dtype, device, cls = sig
    where = "null" if cls < 0 else f"address = {cls} mod {binding.ADDRESS_CLASS}"
    return f"shape {shape}, strides {strides}, {dtype}, CUDA device {device}, {where}"


# --------------------------------------------------------------------------------------------------------------
# The plan cache: a repeated matmul on the same memory costs one dictionary lookup more than plan.launch()
# --------------------------------------------------------------------------------------------------------------

PLAN_CACHE_SIZE = 256   # distinct signatures, not arrays: a model's step has a few dozen
_cache = PlanCache(PLAN_CACHE_SIZE)
_plans = _cache.plans          # matmul's repeated-call path reads it directly

#: the attributes through which a plan could keep its caller's arrays alive (GemmPlan's and GroupedPlan's)
CALLER_ARRAYS = ("a", "b", "out", "plan", "counts")


def without_caller_arrays(plan):
    """`plan` with no reference left to the caller's arrays, as a cached plan must be (the caller's memory must be
    free to go; the plan keeps only its own buffers and the addresses it was last bound to)."""
    for name in CALLER_ARRAYS:
        if hasattr(plan, name):
            setattr(plan, name, None)
    return plan


def cached_plan(key: tuple, make):
    """The plan under `key` in the library's cache, made once by `make()` (the dense plans here and the grouped
    ones, ptxgemm.grouped, share it and clear_plan_cache)."""
    return _cache.get(key, make)


def clear_plan_cache() -> None:
    _cache.clear()


def matmul(a, b, out=None, *, c=None, alpha=1.0, beta=0.0, bias=None, activation=None, scale_a=None, scale_b=None,
           out_dtype=None, config: GemmConfig | None = None, stream=None):
    """numpy's `a @ b` on device arrays (asynchronous on `stream`): ptxgemm.DeviceArray, or any object with
    __dlpack__ or __cuda_array_interface__ (torch, CuPy, JAX, ...), read in place. Any shapes numpy's matmul takes
    and any strides (see GemmPlan). With the epilogue arguments, act(alpha * (scale_a . a) @ (b . scale_b) +
    beta * c + bias) in one kernel (ptxgemm.plan.epilogue; `c` may be `out` itself). Allocates `out` (a C-order
    DeviceArray, stream-ordered, exporting both protocols) when not given. `stream`: None, a raw CUstream handle or
    an object with __cuda_stream__, of the arrays' device.

    The call runs on its arrays' device (DeviceArray.device, DLPack's device; an array that names none, through
    __cuda_array_interface__, is taken on the thread's current device and checked to lie there): arrays on two devices
    are refused, naming the argument and both devices, before anything is allocated or launched.

    Plans are cached by signature (shapes, byte strides, dtypes, devices and address classes of every array, the
    epilogue's numbers, out_dtype, config, stream), never by address: a call like an earlier one, on any memory, binds
    that plan to its arrays and launches (ptxgemm.plan_stats() counts plans made and found)."""
    start = now_ns()
    if (type(a) is type(b) is arrays.DeviceArray and (out is None or type(out) is arrays.DeviceArray)
            and c is None and bias is None and scale_a is None and scale_b is None):
        # the plain call on ptxgemm's own arrays: its key and addresses without the general path's loops
        sig_out = ("new", out_dtype) if out is None else _array_signature(out)
        key = ((_array_signature(a), _array_signature(b), sig_out, None, None, None, None), alpha, beta, activation,
               config, stream_key(stream))
        try:
            entry = _plans.get(key)
        except TypeError:   # an array or a list among the key's values: refused by its rule, not by the dict
            _check_key_values(alpha, beta, activation, config, out_dtype)
            raise
        if entry is not None:
            _cache.found(entry)
            if out is None:
                out = entry.allocate()
            entry.plan.launch_at((a.ptr, b.ptr, out.ptr, 0, 0, 0, 0), stream)
            COUNTERS.call(start)
            return out
    args = {"a": as_device_array(a, "a", stream), "b": as_device_array(b, "b", stream),
            "out": None if out is None else as_device_array(out, "out", stream)}
    for name, x in (("c", c), ("bias", bias), ("scale_a", scale_a), ("scale_b", scale_b)):
        args[name] = None if x is None else _epilogue_arg(x, name, stream)
    sig = signatures(args)
    key = (sig if out is not None else sig[:2] + (("new", out_dtype),) + sig[3:], alpha, beta, activation, config,
           stream_key(stream))
    # a new signature: every rule checked and the plan made, `out` allocated there when not given
    try:
        entry = _cache.get(key, lambda: _matmul_plan(args, out_dtype, alpha, beta, activation, config, stream))
    except TypeError:
        _check_key_values(alpha, beta, activation, config, out_dtype)
        raise
    if args["out"] is None:
        args["out"] = entry.allocate()
    entry.plan.launch_at(addresses(args), stream)
    COUNTERS.call(start)
    return args["out"]


def _check_key_values(alpha, beta, activation, config, out_dtype) -> None:
    """The rules of the values a matmul cache key holds as given, for a key that could not be hashed: the
    ConfigError naming the argument (an array alpha, a list activation) rather than the dictionary's TypeError.
    Not on the hit path: a key that hashes and is found was made from values that passed these rules."""
    check_values(alpha=alpha, beta=beta, activation=activation)
    check_config(config)
    if out_dtype is not None:
        check_out_dtype(out_dtype)


class _MatmulEntry:
    """A cached matmul plan and what a call that gives no `out` allocates (`fresh`: the plan was made for such a
    call): derived once, so such a call allocates with one driver call (DeviceArray.allocate, from the pool of the
    plan's device)."""

    __slots__ = ("plan", "shape", "dtype", "strides", "nbytes", "device", "allocation")

    def __init__(self, plan: GemmPlan, out, stream, fresh: bool):
        self.plan, self.shape, self.dtype, self.strides = plan, tuple(out.shape), out.dtype, tuple(out.strides)
        self.nbytes, self.device = out.nbytes, out.device
        # DeviceArray.allocate's arguments, in its order
        self.allocation = ((self.shape, self.dtype, self.strides, self.nbytes, stream, driver.cu_stream(stream),
                            self.device, driver.memory_pool(self.device)) if fresh and self.nbytes else None)

    def allocate(self):
        if not self.nbytes:   # an empty result owns no memory
            return arrays.DeviceArray(0, self.shape, self.dtype, self.strides, 0, device=self.device)
        # the legacy stream is the current context's: the plan's, for the allocation
        return devices.in_own_context(self.plan.context, arrays.DeviceArray.allocate, *self.allocation)


def _matmul_plan(args: dict, out_dtype, alpha, beta, activation, config, stream) -> tuple:
    """matmul's plan for `args` (their out allocated here when None), with every rule checked, as a cache entry; the
    plan holds no reference to the arrays (it is cached)."""
    check_config(config)
    a, b = args["a"], args["b"]
    in_dtype = check_dtypes(a, b)
    od = None if out_dtype is None else check_out_dtype(out_dtype)
    ordinal = call_device(args, _is_array)   # arrays on two devices refused by name, before out is allocated
    fresh = args["out"] is None
    with devices.device(ordinal):   # the thread's own context back after
        if fresh:
            # the epilogue's rules on the host before the result is allocated (a refused call never reaches the
            # GPU; a fresh C-order result breaks none of out's)
            parse_epilogue(a, b, lambda x, name: x, alpha=alpha, beta=beta, activation=activation,
                           **{name: args[name] for name in EPILOGUE_ARGS})
            args["out"] = arrays.DeviceArray.empty(result_shape(a, b), np.dtype(od or default_out_dtype(in_dtype)),
                                                   stream=stream, device=ordinal)
        elif od is not None and od != dtype_name(args["out"].dtype):
            raise ConfigError(f"out_dtype: {od} contradicts out.dtype {dtype_name(args['out'].dtype)}")
        out = args["out"]
        plan = GemmPlan(a, b, out, config, alpha=alpha, beta=beta, activation=activation, stream=stream,
                        **{name: args[name] for name in EPILOGUE_ARGS})
        return _MatmulEntry(without_caller_arrays(plan), out, stream, fresh)


_ANY_ALIGNED = 1 << 32   # a stand-in device address for planning a layout before the upload (fresh allocations align)


@dataclasses.dataclass(frozen=True)
class _HostStandIn:
    """A numpy array as the planner sees the device array run() will upload it to: its shape, strides and dtype,
    where its element 0 will lie from an aligned allocation (arrays.upload_offset), so the plan made before the
    upload holds for the uploaded array's address class, and the device it goes to (None: the emulator's host)."""

    shape: tuple
    strides: tuple
    dtype: np.dtype
    ptr: int = _ANY_ALIGNED
    device: int | None = None


def upload_site(x: np.ndarray) -> tuple:
    """(shape, byte strides, dtype, address) of the device array DeviceArray.from_numpy will make of `x`, for a
    plan made before the upload: numpy's strides (or the order's own, arrays.upload_strides) and element 0 where
    arrays.upload_offset puts it in an aligned allocation (0 for an empty array: no allocation)."""
    offset = arrays.upload_offset(x)
    return x.shape, arrays.upload_strides(x), x.dtype, 0 if offset is None else _ANY_ALIGNED + offset


def _stand_in(x, name: str, ordinal: int | None = None) -> _HostStandIn:
    if not isinstance(x, np.ndarray):
        raise ConfigError(f"{name}: run takes numpy arrays (or numbers for alpha, beta and per-tensor scales), got "
                          f"{type(x).__name__}; use ptxgemm.matmul for device arrays")
    return _HostStandIn(*upload_site(x), device=ordinal)


def run(a, b, c=None, *, alpha=1.0, beta=0.0, bias=None, activation=None, scale_a=None, scale_b=None,
        out_dtype=None, config: GemmConfig | None = None) -> np.ndarray:
    """numpy's `a @ b` for bfloat16/float16/fp8 (float8_e4m3fn, float8_e5m2, or one of each) numpy arrays, on the
    GPU; returns a new C-order numpy array. With the epilogue arguments, act(alpha * (scale_a . a) @ (b . scale_b)
    + beta * c + bias), fused into the GEMM (ptxgemm.plan.epilogue has the rules: scalings per tensor, per row/column or
    per 128-block; a bias per row or column; activation "relu", "gelu" (tanh form) or "silu").

    Any shapes numpy's matmul takes and any layout: each operand is uploaded as the one span of memory its
    elements occupy, strides kept (no host copy), and the device reads it in place or stages it (see GemmPlan; an
    fp8 operand that is not K-major is staged transposed). `out_dtype` (bfloat16, float16 or float32) defaults to
    the inputs' dtype (bfloat16 for fp8 inputs). The call is planned once, before anything is uploaded, and the
    plan is bound to the uploads. It runs on the thread's current device (`with ptxgemm.device(n):`; default 0).
    """
    start = now_ns()
    ordinal = devices.current()   # numpy arrays name no device: the thread's (ptxgemm.device)
    args, od, shape, planned = plan_run(a, b, c, alpha=alpha, beta=beta, bias=bias, activation=activation,
                                        scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype, config=config,
                                        device=lambda: driver.require_sm90("running the GEMM", ordinal),
                                        ordinal=ordinal)
    with devices.device(ordinal):   # the thread's own context back after
        driver.require_sm90("running the GEMM", ordinal)
        da, db = (arrays.DeviceArray.from_numpy(x, device=ordinal) for x in (a, b))
        args = {name: arrays.DeviceArray.from_numpy(x, device=ordinal) if uploaded(name, x) else x
                for name, x in args.items()}
        out = arrays.DeviceArray.empty(shape, np.dtype(od), device=ordinal)
        COUNTERS.plans_made += 1
        GemmPlan(da, db, out, planned=planned, **args).launch()
        result = out.to_numpy()
    COUNTERS.call(start)
    return result


def uploaded(name: str, x) -> bool:
    """Whether run() uploads epilogue argument `name`: arrays do; numbers and 0-d or (1,) scales stay on the host
    (folded into alpha; epilogue._host_scalar)."""
    return isinstance(x, np.ndarray) and not (name.startswith("scale") and x.size == 1 and x.ndim < 2)


def plan_run(a, b, c=None, *, alpha=1.0, beta=0.0, bias=None, activation=None, scale_a=None, scale_b=None,
             out_dtype=None, config=None, device=None, spill_check=None,
             ordinal: int | None = None) -> tuple[dict, str, tuple, CallPlan]:
    """run()'s checks and plan, all made before anything is uploaded: (the epilogue arguments, the output dtype, the
    result shape, the call's plan on stand-ins for the uploads to device `ordinal`). `device` (or a callable giving
    it: the facts the selection reads) is asked only when a kernel must be picked, after every argument has passed.
    GemmPlan binds the plan to the uploads, so the selection is made once."""
    for name, x in (("a", a), ("b", b)):
        if not isinstance(x, np.ndarray):
            raise ConfigError(f"{name}: run takes numpy arrays, got {type(x).__name__}")
    check_config(config)
    in_dtype = check_dtypes(a, b)
    od = check_out_dtype(out_dtype if out_dtype is not None else default_out_dtype(in_dtype))
    shape = result_shape(a, b)
    args = dict(c=c, alpha=alpha, beta=beta, bias=bias, activation=activation, scale_a=scale_a, scale_b=scale_b)
    parse_epilogue(a, b, _stand_in, **args)   # every epilogue rule, with run's own messages for what is not numpy
    out = _HostStandIn(shape, arrays.c_strides(shape, np.dtype(od).itemsize), np.dtype(od),
                       _ANY_ALIGNED if math.prod(shape) else 0, ordinal)   # run's C-order out
    stand = {"a": _stand_in(a, "a", ordinal), "b": _stand_in(b, "b", ordinal), "out": out}
    stand.update((name, _stand_in(args[name], name, ordinal) if uploaded(name, args[name]) else args[name])
                 for name in EPILOGUE_ARGS)
    planned = plan_symbolic(stand, config, alpha=alpha, beta=beta, activation=activation, device=device,
                            spill_check=spill_check)
    return args, od, shape, dataclasses.replace(
        planned, signature=signatures(stand))


def check_run(a, b, c=None, *, alpha=1.0, beta=0.0, bias=None, activation=None, scale_a=None, scale_b=None,
              out_dtype=None, config=None, device=None, spill_check=None) -> tuple[dict, str, tuple, GemmConfig | None]:
    """plan_run with the plan's config alone (None when there is nothing to launch), for a backend that plans on
    its own memory (ptxgemm.tools.emulator)."""
    args, od, shape, planned = plan_run(a, b, c, alpha=alpha, beta=beta, bias=bias, activation=activation,
                                        scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype, config=config,
                                        device=device, spill_check=spill_check)
    return args, od, shape, planned.config
