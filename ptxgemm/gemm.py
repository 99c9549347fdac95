"""Host side of the pingpong GEMM: operand checks, compilation (cached), tensor maps and the launch.

Two ways in:
- `run(a, b)` on numpy arrays: numpy's `a @ b` for 2-D bf16/fp16 matrices; copies in, launches, copies out.
- `matmul(a, b, out)` / `GemmPlan` on DeviceArrays: no host copies, no recompilation; a plan encodes its tensor
  maps and packs its arguments once, so `plan.launch()` only enqueues the kernel.

Every rule is checked here, before anything reaches the GPU, and a broken one raises ConfigError naming the
argument and the rule.
"""
from __future__ import annotations

import ctypes
import dataclasses
import threading

import ml_dtypes  # noqa: F401 - registers numpy's 'bfloat16' dtype name
import numpy as np

from . import codegen, compiler, schedule
from .config import GemmConfig
from .errors import ConfigError, CudaError

TMA_STRIDE_ALIGN = 16


def _round_up_stride(nbytes: int) -> int:
    """The smallest legal TMA stride covering `nbytes` (for a dimension of extent 1, which is never stepped)."""
    return -(-nbytes // TMA_STRIDE_ALIGN) * TMA_STRIDE_ALIGN
LOAD_L2_PROMOTION = "256B"


# --------------------------------------------------------------------------------------------------------------
# Compilation
# --------------------------------------------------------------------------------------------------------------

def render_gemm(config: GemmConfig) -> str:
    return codegen.render("gemm.ptx.j2", **config.template_params())


def compile_gemm(config: GemmConfig) -> compiler.CompiledKernel:
    """PTX → cubin for `config` (the cubin is cached on disk by PTX text, ptxas version and flags)."""
    return compiler.compile_ptx(render_gemm(config))


class GemmKernel:
    """A compiled and loaded kernel for one config, ready to launch (kept in a per-process cache).

    `ptx` defaults to the config's own rendering; the mutation tester (ptxgemm.mutants) passes an edited copy of it,
    which must keep the kernel's name, parameters and shared-memory map.
    """

    def __init__(self, config: GemmConfig, ptx: str | None = None):
        from . import driver

        self.config = config
        self.compiled = compile_gemm(config) if ptx is None else compiler.compile_ptx(ptx)
        self.module = driver.load_module(self.compiled, f"GEMM module ({config.describe()})")
        self.function = self.module.function(config.kernel_name)
        self.function.set_max_dynamic_smem(config.smem_bytes)


_kernels: dict[GemmConfig, GemmKernel] = {}
_kernels_lock = threading.Lock()


def get_kernel(config: GemmConfig) -> GemmKernel:
    with _kernels_lock:
        if config not in _kernels:
            _kernels[config] = GemmKernel(config)
        return _kernels[config]


# --------------------------------------------------------------------------------------------------------------
# Operand rules
# --------------------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Operand:
    """A 2-D operand as TMA sees it: which dimension is contiguous and the byte stride of the other."""

    name: str
    rows: int
    cols: int
    major: str          # "k" or "mn": which GEMM dimension is contiguous
    lead_bytes: int     # byte stride between consecutive lines of the contiguous dimension


def _dtype_name(dtype) -> str:
    return np.dtype(dtype).name


def check_dtype(name: str, dtype) -> str:
    d = _dtype_name(dtype)
    if d in ("bfloat16", "float16"):
        return d
    if d in ("float32", "float64"):
        raise ConfigError(f"{name}: dtype {d} is not supported; ptxgemm multiplies bfloat16 or float16 with fp32 "
                          f"accumulation. Convert explicitly: {name}.astype(ml_dtypes.bfloat16) or "
                          f"{name}.astype(numpy.float16)")
    raise ConfigError(f"{name}: dtype {d} is not supported (bfloat16 or float16 inputs)")


def _layout(name: str, shape, strides, itemsize: int, k_axis: int) -> Operand:
    """Classify a 2-D operand. `k_axis` is the axis that runs along K (1 for A (M, K), 0 for B (K, N))."""
    mn_axis = 1 - k_axis
    extents = {k_axis: shape[k_axis], mn_axis: shape[mn_axis]}

    def unit(axis):  # a dimension of extent 1 has no meaningful stride: it may serve as the contiguous one
        return strides[axis] == itemsize or extents[axis] == 1

    # Prefer the layout numpy's default order gives: A K-major (row-major (M, K)), B MN-major (row-major (K, N)).
    order = (k_axis, mn_axis) if k_axis == 1 else (mn_axis, k_axis)
    for inner in order:
        if not unit(inner):
            continue
        outer = 1 - inner
        lead = strides[outer]
        if extents[outer] == 1:  # never stepped over: any legal stride will do
            lead = _round_up_stride(extents[inner] * itemsize)
        if lead % TMA_STRIDE_ALIGN or lead <= 0:
            continue
        return Operand(name, shape[0], shape[1], "k" if inner == k_axis else "mn", lead)
    raise ConfigError(
        f"{name}: shape {tuple(shape)} with byte strides {tuple(strides)} is not usable by TMA: one dimension must "
        f"be contiguous and the other's stride a positive multiple of {TMA_STRIDE_ALIGN} bytes "
        f"(a 16-bit matrix needs rows of a multiple of 8 elements); a fast fallback for other strides is later work")


def check_operands(a_shape, a_strides, b_shape, b_strides, itemsize: int) -> tuple[Operand, Operand]:
    for name, shape in (("a", a_shape), ("b", b_shape)):
        if len(shape) != 2:
            raise ConfigError(f"{name}: must be a 2-D matrix, got ndim={len(shape)} (batched GEMM is later work)")
        if min(shape) < 1:
            raise ConfigError(f"{name}: every dimension must be >= 1, got shape {tuple(shape)}")
    if a_shape[1] != b_shape[0]:
        raise ConfigError(f"a @ b: a is {tuple(a_shape)} and b is {tuple(b_shape)}; a.shape[1] (K) must equal "
                          f"b.shape[0]")
    return (_layout("a", a_shape, a_strides, itemsize, k_axis=1),
            _layout("b", b_shape, b_strides, itemsize, k_axis=0))


def check_inputs(a, b) -> tuple[str, Operand, Operand]:
    """(input dtype, A's layout, B's layout) of two arrays (numpy or DeviceArray); ConfigError on any broken rule."""
    in_dtype = check_dtype("a", a.dtype)
    if _dtype_name(b.dtype) != in_dtype:
        raise ConfigError(f"b: dtype {_dtype_name(b.dtype)} differs from a's {in_dtype}; both operands must have "
                          f"the same dtype")
    op_a, op_b = check_operands(a.shape, a.strides, b.shape, b.strides, np.dtype(in_dtype).itemsize)
    return in_dtype, op_a, op_b


def check_output(m: int, n: int, out_dtype) -> str:
    d = _dtype_name(out_dtype)
    if d not in ("bfloat16", "float16", "float32"):
        raise ConfigError(f"out_dtype: must be bfloat16, float16 or float32, got {d}")
    row_bytes = n * np.dtype(out_dtype).itemsize
    if m > 1 and row_bytes % TMA_STRIDE_ALIGN:
        raise ConfigError(f"out: a row of the {m}x{n} {d} output is {row_bytes} bytes; TMA stores need a multiple of "
                          f"{TMA_STRIDE_ALIGN} (N a multiple of {TMA_STRIDE_ALIGN // np.dtype(out_dtype).itemsize})")
    return d


def check_ctas(ctas, cluster_size: int) -> None:
    if ctas is None:
        return
    if isinstance(ctas, bool) or not isinstance(ctas, int) or ctas < cluster_size or ctas % cluster_size:
        raise ConfigError(f"ctas: must be a positive whole number of {cluster_size}-CTA clusters (None: one CTA per "
                          f"SM), got {ctas!r}")


# --------------------------------------------------------------------------------------------------------------
# Plans and launches
# --------------------------------------------------------------------------------------------------------------

def _resolve_config(config: GemmConfig | None, in_dtype: str, out_dtype: str, a_major: str, b_major: str,
                    shape: tuple[int, int, int], device=None, ctas: int | None = None):
    """The arrays decide dtypes and layouts; `config` contributes the tile choice (block sizes, stages, ...).
    Without one, ptxgemm.select_config picks it for this shape and GPU (the tune cache's winner or the cost model's).
    A picked cluster that the caller's `ctas` cannot hold whole is dropped (a single CTA): `ctas` is a test knob
    and must not turn a default choice into an error."""
    if config is None:
        from .select import select_config

        base = select_config(*shape, in_dtype, out_dtype, a_major, b_major, device=device)
        if ctas is not None and ctas % base.cluster_size:
            base = dataclasses.replace(base, cluster_m=1, cluster_n=1)
    else:
        base = config  # GemmPlan checked that it is a GemmConfig before asking for the GPU
    return dataclasses.replace(base, in_dtype=in_dtype, out_dtype=out_dtype, a_major=a_major, b_major=b_major)


MN_PANEL = 64  # elements of an MN-major operand per 128-byte swizzle row: one TMA box (and smem panel) each


def _operand_map(array, op: Operand, mn_extent: int, k: int, k_major_rows: int, block_k: int):
    """The TMA map of an operand. K-major: box {block_k, k_major_rows} (K innermost); MN-major: one
    {64, block_k} box per 64-element panel (M or N innermost), the layout wgmma reads with its transpose bit."""
    from . import tensormap

    if op.major == "k":
        dims, box = (k, mn_extent), (block_k, k_major_rows)
    else:
        dims, box = (mn_extent, k), (MN_PANEL, block_k)
    return tensormap.encode_tiled(array, dims, (op.lead_bytes,), box, l2_promotion=LOAD_L2_PROMOTION)


_tile_orders: dict[tuple[int, int], object] = {}
_tile_orders_lock = threading.Lock()


def _tile_order(rows: int, cols: int):
    """The Hilbert walk over a rows x cols grid of units as a device table (u32 row << 16 | col per unit), made once
    per grid shape and kept for the process (a plan's launches read it; it is a few KB)."""
    from . import driver

    with _tile_orders_lock:
        if (rows, cols) not in _tile_orders:
            if rows >= 1 << 16 or cols >= 1 << 16:
                raise ConfigError(f"config.raster: the Hilbert table packs rows and columns in 16 bits each; "
                                  f"{rows} x {cols} units do not fit")
            order = np.array([(r << 16) | c for r, c in schedule.hilbert_order(rows, cols)], dtype=np.uint32)
            _tile_orders[(rows, cols)] = driver.DeviceArray.from_numpy(order)
        return _tile_orders[(rows, cols)]


class GemmPlan:
    """C = A·B on device arrays with every tensor map encoded and every argument packed: `launch()` just enqueues."""

    def __init__(self, a, b, out, config: GemmConfig | None = None, *, ctas: int | None = None,
                 kernel: GemmKernel | None = None):
        """`ctas` caps the grid (default: one CTA per SM): fewer CTAs give each consumer more tiles, which is how
        the tests make every consumer run the pingpong several times on small problems. `kernel` replaces the
        config's compiled kernel (ptxgemm.mutants runs edited PTX this way); its config must be the plan's."""
        from . import driver, tensormap
        from .interop import as_device_array

        # any framework's device arrays, read in place (DLPack or __cuda_array_interface__); never a copy
        a, b, out = (as_device_array(x, name) for x, name in ((a, "a"), (b, "b"), (out, "out")))
        in_dtype, op_a, op_b = check_inputs(a, b)
        m, k = a.shape
        n = b.shape[1]
        if tuple(out.shape) != (m, n):
            raise ConfigError(f"out: shape must be ({m}, {n}), got {tuple(out.shape)}")
        out_dtype = check_output(m, n, out.dtype)
        if not out.is_c_contiguous:
            raise ConfigError("out: must be a C-contiguous (row-major) device array")
        if config is not None and not isinstance(config, GemmConfig):
            raise ConfigError(f"config: must be a ptxgemm.GemmConfig or None (select_config picks), got "
                              f"{type(config).__name__}")
        info = driver.require_sm90("running the GEMM")  # before loading: a clear error on a non-Hopper GPU
        self.config = cfg = _resolve_config(config, in_dtype, out_dtype, op_a.major, op_b.major, (m, n, k),
                                            device=info, ctas=ctas)
        check_ctas(ctas, cfg.cluster_size)
        if kernel is not None and kernel.config != cfg:
            raise ConfigError(f"kernel: built for {kernel.config.describe()}, but these operands need "
                              f"{cfg.describe()}")
        self.m, self.n, self.k = m, n, k
        self.a, self.b, self.out = a, b, out
        self.kernel = kernel if kernel is not None else get_kernel(cfg)

        self.tmap_a = _operand_map(a, op_a, mn_extent=m, k=k, k_major_rows=cfg.a_rows_per_cta, block_k=cfg.block_k)
        self.tmap_b = _operand_map(b, op_b, mn_extent=n, k=k, k_major_rows=cfg.b_rows_per_cta, block_k=cfg.block_k)
        ldc = _round_up_stride(n * cfg.out_itemsize)  # = the row bytes (check_output), or legal filler if m == 1
        # one store box per panel of one consumer's rows (the whole tile in pingpong, a half in cooperative)
        self.tmap_c = tensormap.encode_tiled(out, (n, m), (ldc,), (cfg.epi_panel_cols, cfg.consumer_m),
                                             l2_promotion="none")
        # a tile's last panel when block_n is not a whole number of panels: a box only that wide, staged unswizzled
        self.tmap_c_tail = (tensormap.encode_tiled(out, (n, m), (ldc,), (cfg.epi_tail_cols, cfg.consumer_m),
                                                   swizzle="none", l2_promotion="none") if cfg.epi_tail_cols else None)

        self.schedule = sched = schedule.plan_for(cfg, m, n, k, info.sm_count, ctas)
        self.tiles_m, self.tiles_n, self.k_tiles = sched.tiles_m, sched.tiles_n, sched.k_tiles
        self.clusters, self.grid = sched.clusters, sched.grid
        self.records = None
        debug_ptr = 0
        if cfg.debug:
            from .debug import StallRecords

            self.records = StallRecords(self.grid, cfg.threads)
            debug_ptr = self.records.device_pointer
        args = [self.tmap_a, self.tmap_b, self.tmap_c, *([self.tmap_c_tail] if self.tmap_c_tail else []),
                ctypes.c_uint32(m), ctypes.c_uint32(n),
                ctypes.c_uint32(sched.cluster_rows), ctypes.c_uint32(sched.cluster_cols), ctypes.c_uint32(self.k_tiles),
                ctypes.c_uint64(debug_ptr)]
        if cfg.raster == "hilbert":  # its parameter comes right before debug_records_param
            self.tile_order = _tile_order(sched.cluster_rows, sched.cluster_cols)
            args.insert(-1, ctypes.c_uint64(self.tile_order.ptr))
        self.trace_buffer = None
        if cfg.trace:
            args += self._trace_arguments()
        self._launch = driver.PreparedLaunch(self.kernel.function, (self.grid,), (cfg.threads,), args,
                                             smem_bytes=cfg.smem_bytes,
                                             cluster=(cfg.cluster_size, 1, 1) if cfg.cluster_size > 1 else None)

    def _trace_arguments(self) -> list:
        """Allocate the trace buffer (ptxgemm.trace's format) with room for every event this plan's schedule makes:
        the busiest producer's k-tiles and the busiest consumer's tiles. Zeroed once; each launch rewrites it."""
        from . import driver, trace

        sched = self.schedule
        self.trace_capacity = trace.capacity_for(sched.max_tiles_per_consumer, sched.ring_passes)
        total = self.grid * trace.ROLES * self.trace_capacity
        if total >= 2 ** 32:
            raise ConfigError(f"config.trace: {total} trace records do not fit the kernel's 32-bit record numbers; "
                              f"trace a smaller problem")
        nbytes = trace.buffer_bytes(self.grid, self.trace_capacity)
        self.trace_buffer = buf = driver.DeviceArray.empty((nbytes,), np.uint8)
        buf.fill_bytes(0, 1)
        return [ctypes.c_uint64(buf.ptr), ctypes.c_uint64(buf.ptr + trace.header_bytes(self.grid)),
                ctypes.c_uint32(self.trace_capacity), ctypes.c_uint32(total)]

    def read_trace(self, meta: dict | None = None):
        """The timeline of the last launch as a ptxgemm.trace.Trace (waits for the GPU). Needs config.trace."""
        from . import driver, trace

        if self.trace_buffer is None:
            raise ConfigError("read_trace: this plan's config was built without trace=True; use "
                              "GemmConfig(trace=True)")
        raw = self.trace_buffer.to_numpy()
        info = driver.device_info()
        base = {"shape": (self.m, self.n, self.k), "config": self.config.describe(), "gpu": info.name,
                "grid": self.grid, "schedule": self.schedule.describe()}
        return trace.Trace.from_buffer(raw, self.grid, self.trace_capacity, {**base, **(meta or {})})

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    def launch(self, stream=None):
        self._launch(stream)
        if self.records is not None:  # debug: wait here so a stall becomes an exception that names the barrier
            from . import driver

            try:
                driver.synchronize(f"running {self.config.describe()}")
            except CudaError as e:
                self.records.raise_if_stalled(f"running {self.config.describe()}", e)
                raise


def matmul(a, b, out=None, *, out_dtype=None, config: GemmConfig | None = None, stream=None):
    """C = A·B on device arrays (asynchronous on `stream`): ptxgemm.DeviceArray, or any object with __dlpack__ or
    __cuda_array_interface__ (torch, CuPy, JAX, ...), read in place. Allocates `out` (a C-order DeviceArray, which
    exports both protocols) when not given. `stream`: None, a raw CUstream handle or an object with __cuda_stream__."""
    from . import driver
    from .interop import as_device_array

    a, b = as_device_array(a, "a", stream), as_device_array(b, "b", stream)
    if out is not None:
        out = as_device_array(out, "out", stream)
    if out is None:
        in_dtype, _, _ = check_inputs(a, b)
        od = check_output(a.shape[0], b.shape[1], out_dtype if out_dtype is not None else in_dtype)
        out = driver.DeviceArray.empty((a.shape[0], b.shape[1]), np.dtype(od))
    elif out_dtype is not None and _dtype_name(out_dtype) != _dtype_name(out.dtype):
        raise ConfigError(f"out_dtype: {_dtype_name(out_dtype)} contradicts out.dtype {_dtype_name(out.dtype)}")
    GemmPlan(a, b, out, config).launch(stream)
    return out


def run(a, b, out_dtype=None, config: GemmConfig | None = None) -> np.ndarray:
    """numpy's `a @ b` for 2-D bfloat16/float16 arrays on the GPU; returns a new C-order numpy array.

    `a` must be C- or Fortran-contiguous, like `b`: a C-order (K, N) `b` runs as wgmma's MN-major operand and a
    Fortran-order one (or `x.T` of a C-order (N, K) `x`) as K-major, both without any copy beyond the upload.
    `out_dtype` (bfloat16, float16 or float32) defaults to the inputs' dtype.
    """
    from . import driver

    for name, x in (("a", a), ("b", b)):
        if not isinstance(x, np.ndarray):
            raise ConfigError(f"{name}: run takes numpy arrays, got {type(x).__name__}")
    in_dtype, _, _ = check_inputs(a, b)  # everything before the upload; GemmPlan derives the rest
    for name, x in (("a", a), ("b", b)):
        if not (x.flags.c_contiguous or x.flags.f_contiguous):
            raise ConfigError(f"{name}: a host array must be C- or Fortran-contiguous to upload in one copy; "
                              f"make it so explicitly, e.g. numpy.ascontiguousarray({name})")
    od = check_output(a.shape[0], b.shape[1], out_dtype if out_dtype is not None else in_dtype)
    driver.require_sm90("running the GEMM")
    da, db = driver.DeviceArray.from_numpy(a), driver.DeviceArray.from_numpy(b)
    out = driver.DeviceArray.empty((a.shape[0], b.shape[1]), np.dtype(od))
    matmul(da, db, out, config=config)
    return out.to_numpy()
