"""The plan emulator: ptxgemm's calls carried out on host memory, numpy standing in for the GPU.

Everything a call decides before the GPU is decided by the library's own code: the argument checks (gemm.plan_run,
epilogue.parse), the whole plan, made as the library makes it on symbolic addresses (gemm.plan_symbolic: layout,
swap, fold, staging, K = 0, the selected config with the kernel's dtypes, the epilogue in the kernel's frame), the
staging copies (operands.bind), the tensor maps (gemm.tensor_map_specs, which validate every driver rule), the
schedule and the kernel's epilogue parameters (Epilogue.kernel_params); then bound to the host addresses by
rebasing every address the plan computed, as a GPU plan's address slots are written (ptxgemm.plan.binding). Only
what the GPU does is emulated, each as its own definition says:

- an upload (run): DeviceArray.from_numpy's copy of an operand's span into a fresh buffer, strides kept;
- a strided copy (ptxgemm.runtime.relayout): element by element between two byte-strided layouts; source address 0 is zeros;
- the kernel: per problem, A's bytes read through its map as `config.in_dtype` and B's as `config.b_type`, the
  product in float64 (per 128-wide k-block scaled and summed under blockwise scales), then the epilogue in the
  kernel's frame with every value read from the parameter its config says it reads (by name, so a parameter packed
  in the wrong slot, or a row vector taken for a column one, shows), then the cast to `config.out_dtype`, stored
  through C's map. A parameter the config does not read is an error. The store writes each line's last 16-byte
  chunk whole, as TMA's store did on the H200 (`chunk_tails`: junk past a line's end up to the next chunk).

What it does not model: the PTX (tiles, pipelines, barriers, fp32 rounding order), TMA's swizzles, streams. The GPU
fuzzer covers those; this one lets CI find planning bugs without a GPU (python -m ptxgemm fuzz --emulate).

`run`, `matmul`, `GemmPlan`, `grouped_matmul` and `grouped_run` here take the library's arguments; for `matmul`,
`GemmPlan` and `grouped_matmul` numpy arrays play the device arrays, read and written in place at their own (host)
addresses, misaligned ones included (a grouped call's numpy counts and per-tensor scales stay on the host, as the
library holds them).
"""
from __future__ import annotations

import ctypes
import dataclasses
import functools
import math

import numpy as np

from .. import gemm
from ..accuracy import DTYPES, activation64
from ..errors import ConfigError
from ..kernel import schedule
from ..kernel.config import SCALE_BLOCK, default_out_dtype
from ..plan import binding, operands
from ..plan.call import parse_epilogue
from ..plan.checks import check_config, check_dtypes, check_out_dtype, result_shape
from ..plan.epilogue import check_values, is_host_scalar
from ..runtime.arrays import byte_span, c_strides
from ..select.cost_model import DEFAULT_DEVICE

ALLOC_ALIGN = 256   # cuMemAlloc's alignment, which a fresh DeviceArray has


class HostArray:
    """A device array's header (ptr, shape, byte strides, dtype) over host memory; `keep` holds the memory."""

    def __init__(self, ptr: int, shape, strides, dtype, keep=None, region=None):
        self.ptr, self.shape, self.strides = int(ptr), tuple(int(x) for x in shape), tuple(int(x) for x in strides)
        self.dtype, self.keep = np.dtype(dtype), keep
        self.region = region   # [start, end) of the allocation it lives in (Memory's bounds)

    @classmethod
    def of(cls, arr: np.ndarray) -> "HostArray":
        """A numpy array in place: its own address, misaligned or not (a zero-size one has address 0, as on the
        device)."""
        owner = _owner(arr)
        return cls(0 if arr.size == 0 else arr.ctypes.data, arr.shape, arr.strides, arr.dtype, arr,
                   (owner.ctypes.data, owner.ctypes.data + owner.nbytes))

    @classmethod
    def empty(cls, shape, dtype, strides=None) -> "HostArray":
        """A fresh, 256-byte aligned allocation poisoned with 0xFF bytes (NaN in every float type here)."""
        dtype = np.dtype(dtype)
        strides = c_strides(tuple(shape), dtype.itemsize) if strides is None else strides
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes == 0:
            return cls(0, shape, strides, dtype)
        raw, ptr = _aligned(nbytes)
        return cls(ptr, shape, strides, dtype, raw, (ptr, ptr + nbytes))

    def view(self, shape, strides=None, offset: int = 0, dtype=None) -> "HostArray":
        """DeviceArray.view here: the same memory seen with another shape, byte strides (C order when None),
        byte offset and dtype."""
        dtype = np.dtype(dtype) if dtype is not None else self.dtype
        strides = c_strides(tuple(shape), dtype.itemsize) if strides is None else strides
        return HostArray(self.ptr + offset, shape, strides, dtype, self.keep, self.region)

    def region_bytes(self) -> np.ndarray:
        """The allocation this array lives in, as a uint8 view (no copy) that keeps it alive: an upload's span."""
        lo, hi = self.region
        view = _at(lo, (hi - lo,), (1,), np.uint8)
        view.base.keep = self.keep
        return view

    def numpy(self) -> np.ndarray:
        """A numpy view of the memory (no copy), which keeps the memory alive (`HostArray.empty(...).numpy()` of a
        temporary stays valid)."""
        if math.prod(self.shape) == 0:
            return np.empty(self.shape, self.dtype)
        view = _at(self.ptr, self.shape, self.strides, self.dtype)
        view.base.keep = self.keep   # the ctypes buffer the view reads: holding the allocation
        return view


def _owner(x: np.ndarray) -> np.ndarray:
    while isinstance(x.base, np.ndarray):
        x = x.base
    return x


class Memory:
    """The allocations one launch may touch, as [start, end) byte ranges: a read or write outside all of them is
    out of bounds (on the GPU: garbage read, or somebody else's memory written), and raises."""

    def __init__(self, arrays):
        self.ranges = [h.region for h in arrays if isinstance(h, HostArray) and h.region is not None and h.ptr]

    def at(self, ptr: int, shape, strides, dtype, what: str) -> np.ndarray:
        dtype = np.dtype(dtype)
        low, span = byte_span(shape, strides, dtype.itemsize)
        if span and not any(lo <= ptr + low and ptr + low + span <= hi for lo, hi in self.ranges):
            raise AssertionError(f"{what}: bytes [{ptr + low:#x}, {ptr + low + span:#x}) lie outside every "
                                 f"allocation of the launch")
        return _at(ptr, shape, strides, dtype)


def _aligned(nbytes: int) -> tuple[np.ndarray, int]:
    raw = np.full(nbytes + ALLOC_ALIGN, 0xFF, np.uint8)
    ptr = raw.ctypes.data
    return raw, ptr + (-ptr) % ALLOC_ALIGN


def _at(ptr: int, shape, strides, dtype) -> np.ndarray:
    """A numpy view of host memory at `ptr` with byte strides (negative and zero ones included)."""
    dtype = np.dtype(dtype)
    low, span = byte_span(shape, strides, dtype.itemsize)
    raw = (ctypes.c_uint8 * span).from_address(ptr + low)
    return np.ndarray(tuple(shape), dtype, buffer=raw, offset=-low, strides=tuple(strides))


def upload(arr: np.ndarray) -> HostArray:
    """DeviceArray.from_numpy on host memory: a C- or F-contiguous array becomes a fresh array in that order;
    any other layout, the smallest span holding its elements, with numpy's strides kept."""
    if arr.flags.c_contiguous or arr.flags.f_contiguous:
        strides = (c_strides(arr.shape, arr.itemsize) if arr.flags.c_contiguous
                   else tuple(np.empty(arr.shape, arr.dtype, order="F").strides))
        out = HostArray.empty(arr.shape, arr.dtype, strides)
        if arr.size:
            out.numpy()[...] = arr
        return out
    low, span = byte_span(arr.shape, arr.strides, arr.itemsize)
    raw, ptr = _aligned(max(span, 1))
    raw_view = np.ndarray((span,), np.uint8, buffer=(ctypes.c_uint8 * span).from_address(arr.ctypes.data + low))
    np.ndarray((span,), np.uint8, buffer=(ctypes.c_uint8 * span).from_address(ptr))[...] = raw_view
    return HostArray(ptr - low, arr.shape, arr.strides, arr.dtype, raw, (ptr, ptr + span))


def _as_host(x, name: str) -> HostArray:
    """arrays.as_device_array's part here: numpy arrays are the device arrays."""
    if isinstance(x, HostArray):
        return x
    if isinstance(x, np.ndarray):
        return HostArray.of(x)
    raise ConfigError(f"{name}: a {type(x).__name__} is neither a ptxgemm.DeviceArray nor an object with "
                      f"__dlpack__ or __cuda_array_interface__")


def _no_spills(config) -> bool:
    """The emulator's spill check: none (asking ptxas only moves the selection to another tile, which computes the
    same numbers; the GPU fuzzer runs the real walk)."""
    return False


# --- the library's entry points --------------------------------------------------------------------------------

def run(a, b, c=None, *, alpha=1.0, beta=0.0, bias=None, activation=None, scale_a=None, scale_b=None,
        out_dtype=None, config=None, device=DEFAULT_DEVICE) -> np.ndarray:
    """ptxgemm.run, emulated: the same checks, uploads, plan and result."""
    args, od, shape, planned = gemm.plan_run(a, b, c, alpha=alpha, beta=beta, bias=bias, activation=activation,
                                             scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype, config=config,
                                             device=device, spill_check=_no_spills)
    da, db = upload(a), upload(b)
    args = {name: upload(x) if gemm.uploaded(name, x) else x for name, x in args.items()}
    out = HostArray.empty(shape, od)
    GemmPlan(da, db, out, planned=planned, device=device, **args).launch()
    return out.numpy().copy()


def matmul(a, b, out=None, *, c=None, alpha=1.0, beta=0.0, bias=None, activation=None, scale_a=None, scale_b=None,
           out_dtype=None, config=None, device=DEFAULT_DEVICE):
    """ptxgemm.matmul, emulated on numpy arrays read and written in place (returns `out`, or a new array)."""
    check_config(config)
    a, b = _as_host(a, "a"), _as_host(b, "b")
    in_dtype = check_dtypes(a, b)
    od = None if out_dtype is None else check_out_dtype(out_dtype)
    plain = (c is None and bias is None and activation is None and scale_a is None and scale_b is None
             and alpha == 1.0 and beta == 0.0)
    if not plain:   # the epilogue's rules before anything is allocated, as matmul checks them
        parse_epilogue(a, b, _as_host, c=c, alpha=alpha, beta=beta, bias=bias, activation=activation,
                       scale_a=scale_a, scale_b=scale_b)
    if out is None:
        result = HostArray.empty(result_shape(a, b), od or default_out_dtype(in_dtype))
    else:
        result = _as_host(out, "out")
        if od is not None and od != result.dtype.name:
            raise ConfigError(f"out_dtype: {od} contradicts out.dtype {result.dtype.name}")
    GemmPlan(a, b, result, config, c=c, alpha=alpha, beta=beta, bias=bias, activation=activation, scale_a=scale_a,
             scale_b=scale_b, device=device).launch()
    return out if out is not None else result.numpy().copy()


class GemmPlan:
    """ptxgemm.GemmPlan, emulated: planned as the library plans, on symbolic addresses (gemm.plan_symbolic), and
    bound to the arrays' host addresses by rebasing every address the plan computed (tensor maps, staging copies,
    the epilogue's pointers), the binding a GPU plan's address slots do; every map validated; `launch()` carries it
    out. An address left symbolic lies outside every allocation, and Memory refuses it."""

    def __init__(self, a, b, out, config=None, *, c=None, alpha=1.0, beta=0.0, bias=None, activation=None,
                 scale_a=None, scale_b=None, ctas=None, planned=None, device=DEFAULT_DEVICE):
        check_config(config)
        a, b, out = _as_host(a, "a"), _as_host(b, "b"), _as_host(out, "out")
        check_dtypes(a, b)
        check_out_dtype(out.dtype, "out")
        args = {"a": a, "b": b, "out": out}
        for name, x in (("c", c), ("bias", bias), ("scale_a", scale_a), ("scale_b", scale_b)):
            args[name] = x if gemm.stays_on_host(name, x) else _as_host(x, name)
        if planned is None:
            planned = gemm.plan_symbolic(args, config, alpha=alpha, beta=beta, activation=activation, device=device,
                                         ctas=ctas, spill_check=_no_spills)
        elif planned.signature and planned.signature != gemm.signatures(args):
            raise ConfigError(f"planned: made for arguments {planned.signature}, given {gemm.signatures(args)}")
        self.planned = planned
        ptrs = gemm.addresses(args)

        def rebased(value: int) -> int:
            return binding.rebase(value, ptrs)

        def rebased_copy(copy: operands.Copy) -> operands.Copy:
            return dataclasses.replace(copy, dst_ptr=rebased(copy.dst_ptr), src_ptr=rebased(copy.src_ptr))

        self.layout, self.config, self.epilogue = planned.layout, planned.config, planned.epilogue
        self.buffers = {}
        arrays = [x for x in args.values() if isinstance(x, HostArray)]
        if self.config is None:
            self.bound, self.copies_in = None, []
            self.copies_out = [rebased_copy(copy) for copy in self.layout.fill]
            self.memory = Memory(arrays)
            return
        for op in self.layout.operands:   # staging buffers: fresh allocations, poisoned
            if op.staged:
                self.buffers[op.name] = HostArray.empty((op.staging.nbytes,), np.uint8)
        self.bound, copies_in, copies_out = operands.bind(
            self.layout, {name: buf.ptr for name, buf in self.buffers.items()})
        self.copies_in, self.copies_out = [rebased_copy(c) for c in copies_in], [rebased_copy(c) for c in copies_out]
        self.memory = Memory(arrays + list(self.buffers.values()))
        self.maps = {name: dataclasses.replace(spec, address=rebased(spec.address))
                     for name, spec in gemm.tensor_map_specs(self.bound, self.config, self.epilogue).items()}
        lay = self.bound
        self.schedule = schedule.plan_for(self.config, lay.m, lay.n, lay.k, device.sm_count, ctas, lay.batches)
        self.params = [(name, type(value)(rebased(value.value)) if isinstance(value, ctypes.c_uint64) else value)
                       for name, value in self.epilogue.kernel_params(lay.swapped, lay.k)]

    def launch(self):
        for copy in self.copies_in:
            relayout(copy, self.memory)
        if self.config is not None:
            kernel(self.bound, self.config, self.maps, self.params, self.memory)
        for copy in self.copies_out:
            relayout(copy, self.memory)


# --- what the GPU does -----------------------------------------------------------------------------------------

def relayout(copy: operands.Copy, memory: Memory) -> None:
    """ptxgemm.runtime.relayout's strided copy (a fill of zeros from source address 0); destinations walk forwards."""
    assert all(s >= 0 for s in copy.dst_strides), copy   # relayout's rule (Copy.normalized)
    if 0 in copy.shape:
        return
    shape = tuple(copy.shape) + (copy.itemsize,)
    dst = memory.at(copy.dst_ptr, shape, tuple(copy.dst_strides) + (1,), np.uint8, "relayout's destination")
    dst[...] = 0 if copy.src_ptr == 0 else memory.at(copy.src_ptr, shape, tuple(copy.src_strides) + (1,), np.uint8,
                                                     "relayout's source")


def _map_matrix(memory: Memory, name: str, spec, problem: int, rows: int, cols: int, dtype, inner: str) -> np.ndarray:
    """rows x cols of problem `problem` through a rank-3 map (innermost first), as `dtype`: the elements the kernel
    reads or writes (the problem's extents equal the map's, so no element past them is touched)."""
    item = np.dtype(dtype).itemsize
    lead, batch = spec.strides
    assert spec.dims[2] > problem or spec.dims[2] == 1, (spec, problem)
    z = problem if spec.dims[2] > 1 else 0
    ptr = spec.address + z * batch
    if inner == "cols":
        assert spec.dims[:2] == (cols, rows), (spec.dims, rows, cols)
        return memory.at(ptr, (rows, cols), (lead, item), dtype, name)
    assert spec.dims[:2] == (rows, cols), (spec.dims, rows, cols)
    return memory.at(ptr, (rows, cols), (item, lead), dtype, name)


def kernel(lay: operands.MatmulPlan, cfg, maps: dict, params: list[tuple[str, object]], memory: Memory) -> None:
    """The GEMM kernel's result, as its config and parameters define it (see the module docstring)."""
    p = {name: value.value for name, value in params}
    read = set()

    def _vector(ptr: int, length: int, dtype, what: str = "a vector") -> np.ndarray:
        assert ptr, f"{what}: a null pointer"
        return memory.at(ptr, (length,), (np.dtype(dtype).itemsize,), dtype, what).astype(np.float64)

    def param(name):
        read.add(name)
        return p[name]   # KeyError: the config reads a parameter the host did not pass

    m, n, k = lay.m, lay.n, lay.k
    in_t, b_t, out_t = DTYPES[cfg.in_dtype], DTYPES[cfg.b_type], DTYPES[cfg.out_dtype]
    scale = param("param_alpha") if cfg.alpha else 1.0
    if cfg.device_scales:
        for operand in ("a", "b"):
            ptr = param(f"param_scale_{operand}_ptr")
            scale *= float(_vector(ptr, 1, np.float32, f"scale_{operand}")[0]) if ptr else 1.0
    rows = _vector(param("param_row_scale"), m, np.float32, "the row scales") if cfg.row_scale else None
    cols = _vector(param("param_col_scale"), n, np.float32, "the column scales") if cfg.col_scale else None
    beta = param("param_beta") if cfg.has_source else None
    bias = None
    if cfg.bias is not None:
        bias = _vector(param("param_bias"), m if cfg.bias == "row" else n, cfg.bias_dtype, "the bias")
        bias = bias.reshape(m, 1) if cfg.bias == "row" else bias.reshape(1, n)
    blocks = None
    if cfg.block_scale:
        kb = -(-k // SCALE_BLOCK)
        # the caller's M and N: swapped (C^T = B^T A^T), the kernel's columns and rows
        caller_m, caller_n = (n, m) if cfg.block_scale_swapped else (m, n)
        nb = -(-caller_n // SCALE_BLOCK)
        assert param("param_scale_a_ld") == kb and param("param_scale_b_ld") == nb
        # scale_a C-contiguous, or M-major through its map (whose address the host passes as param_scale_a too)
        a_strides = (4, maps["tmap_scale_a"].strides[0]) if cfg.block_scale_a_mn else (4 * kb, 4)
        blocks = (memory.at(param("param_scale_a"), (caller_m, kb), a_strides, np.float32, "scale_a's table"),
                  memory.at(param("param_scale_b"), (kb, nb), (4 * nb, 4), np.float32, "scale_b's table"))
        blocks = tuple(t.astype(np.float64) for t in blocks)
    unread = set(p) - read
    assert not unread, f"parameters the {cfg.describe()} kernel does not read: {sorted(unread)}"

    a_inner, b_inner = lay.a.place.inner, lay.b.place.inner
    for z in range(lay.batches):
        a = _map_matrix(memory, "A", maps["tmap_a"], z, m, k, in_t, a_inner).astype(np.float64)
        b = _map_matrix(memory, "B", maps["tmap_b"], z, k, n, b_t, b_inner).astype(np.float64)
        if blocks is None:
            acc = a @ b
        else:
            acc = np.zeros((m, n))
            for j in range(blocks[0].shape[1]):
                ks = slice(j * SCALE_BLOCK, (j + 1) * SCALE_BLOCK)
                if cfg.block_scale_swapped:   # rows: B's block of the caller's column; columns: A's row scale
                    factor = blocks[1][j, np.arange(m) // SCALE_BLOCK][:, None] * blocks[0][None, :, j]
                else:
                    factor = blocks[0][:, j:j + 1] * blocks[1][j, np.arange(n) // SCALE_BLOCK][None, :]
                acc += factor * (a[:, ks] @ b[ks, :])
        v = acc * scale
        if rows is not None:
            v = v * rows[:, None]
        if cols is not None:
            v = v * cols[None, :]
        if beta is not None:
            v = v + beta * _map_matrix(memory, "S", maps["tmap_source"], z, m, n, DTYPES[cfg.source_dtype],
                                       lay.s.place.inner).astype(np.float64)
        if bias is not None:
            v = v + bias
        v = activation64(cfg.activation, v)
        _map_matrix(memory, "C", maps["tmap_c"], z, m, n, out_t, lay.c.place.inner)[...] = \
            v.astype(np.float32).astype(out_t)
        chunk_tails(memory, "C", maps["tmap_c"], z, np.dtype(out_t).itemsize)


#: what the emulated store leaves in the bytes past a line's end that its last chunk covers
CHUNK_TAIL_BYTE = 0x5A


def chunk_tails(memory: Memory, name: str, spec, problem: int, itemsize: int) -> None:
    """TMA's store as measured on the H200: a line whose bytes end inside a 16-byte chunk gets that chunk written
    whole (ptxgemm.plan.operands.stores_whole_chunks). Writes CHUNK_TAIL_BYTE there, through Memory's bounds: past
    an allocation it raises, inside someone else's elements the fuzzer's check of out's span sees it."""
    line = spec.dims[0] * itemsize
    tail = -line % 16
    if not tail:
        return
    lead, batch = spec.strides
    z = problem if spec.dims[2] > 1 else 0
    memory.at(spec.address + z * batch + line, (spec.dims[1], tail), (lead, 1), np.uint8,
              f"{name}'s chunk tails")[...] = CHUNK_TAIL_BYTE


# --- the grouped GEMM ------------------------------------------------------------------------------------------

def grouped_matmul(a, b, *, offs=None, masked_m=None, out=None, alpha=1.0, scale_a=None, scale_b=None, bias=None,
                   activation=None, out_dtype=None, config=None, device=DEFAULT_DEVICE):
    """ptxgemm.grouped_matmul, emulated as GroupedPlan runs it: the same checks and plan (ptxgemm.grouped.plan_launch
    on stand-ins at symbolic addresses, with numpy arrays as the device arrays), bound to the arrays' host addresses
    by rebasing every address the plan computed (tensor maps, staging copies, the kernel's pointer arguments); then
    the copies in, the grouped kernel's result (grouped_kernel) and the copies out. Host numpy counts are checked
    and uploaded as the library does; pass a HostArray to have them read as device counts (clamped, never
    checked). Staging buffers are fresh allocations, filled with a pattern of their own (_staging_buffer)."""
    from .. import grouped as grouped_api

    check_config(config)
    check_values(alpha=alpha, activation=activation, scale_a=scale_a, scale_b=scale_b)
    counts_name = "offs" if offs is not None else "masked_m"
    real = {"a": _as_host(a, "a"), "b": _as_host(b, "b")}
    for name, x in (("out", out), ("counts", masked_m if offs is None else offs), ("scale_a", scale_a),
                    ("scale_b", scale_b), ("bias", bias)):
        # numpy arrays play the device arrays, but for what the library holds on the host: counts (checked by
        # value, uploaded) and per-tensor scales
        held = (name == "counts" or name.startswith("scale") and is_host_scalar(x) if isinstance(x, np.ndarray)
                else grouped_api.host_or_number(x))
        real[name] = x if held else _as_host(x, counts_name if name == "counts" else name)
    s = binding.stand_ins(real, grouped_api.ROLES, lambda name, x: isinstance(x, HostArray))
    plan = grouped_api.plan_launch(s["a"], s["b"], offs=None if offs is None else s["counts"],
                                   masked_m=None if masked_m is None else s["counts"], out=s["out"], alpha=alpha,
                                   scale_a=s["scale_a"], scale_b=s["scale_b"], bias=s["bias"], activation=activation,
                                   out_dtype=out_dtype, config=config,
                                   convert=lambda x, nm: x if isinstance(x, binding.StandIn) else _as_host(x, nm),
                                   upload=upload, allocate=HostArray.empty, sm_count=lambda: device.sm_count,
                                   spill_check=_no_spills,
                                   scratch=_staging_buffer)
    result = real["out"] if real["out"] is not None else plan.out   # a fresh result: the plan's own allocation
    if plan.config is None:
        return result
    ptrs = grouped_api.addresses({**real, "out": result})

    def rebased(value: int) -> int:
        return binding.rebase(value, ptrs)

    def rebased_copy(copy: operands.Copy) -> operands.Copy:
        return dataclasses.replace(copy, dst_ptr=rebased(copy.dst_ptr), src_ptr=rebased(copy.src_ptr))

    specs = {name: dataclasses.replace(spec, address=rebased(spec.address)) for name, spec in plan.specs.items()}
    params = _grouped_params(plan, rebased)
    # the launch's allocations: the caller's arrays, and the plan's own (uploaded counts, staging buffers, a result)
    memory = Memory([x for x in (*real.values(), plan.counts, *plan.buffers.values(), result)
                     if isinstance(x, HostArray)])
    for copy in plan.copies_in:
        relayout(rebased_copy(copy), memory)
    grouped_kernel(plan.config, params, specs, memory)
    for copy in plan.copies_out:
        relayout(rebased_copy(copy), memory)
    return result


def _staging_buffer(nbytes: int) -> HostArray:
    """A grouped plan's staging buffer: a fresh allocation filled with 0xA5 bytes, apart from an output's poison
    (0xFF), so that bytes copied out of it that nothing wrote show as changed."""
    buf = HostArray.empty((nbytes,), np.uint8)
    buf.numpy()[...] = 0xA5
    return buf


def grouped_run(a, b, *, offs=None, masked_m=None, alpha=1.0, scale_a=None, scale_b=None, bias=None,
                activation=None, out_dtype=None, config=None, device=DEFAULT_DEVICE) -> np.ndarray:
    """ptxgemm.grouped_run, emulated: the same checks (grouped.check_run, before any upload), the uploads, a result
    zeroed first (rows outside every group are zeros), the emulated grouped call, the result as a new array."""
    from .. import grouped as grouped_api

    problem = grouped_api.check_run(a, b, offs=offs, masked_m=masked_m, alpha=alpha, scale_a=scale_a,
                                    scale_b=scale_b, bias=bias, activation=activation, out_dtype=out_dtype,
                                    config=config).problem
    vectors = {name: upload(x) if gemm.uploaded(name, x) else x
               for name, x in (("scale_a", scale_a), ("scale_b", scale_b), ("bias", bias))}
    out = HostArray.empty(problem.out_shape, problem.out_dtype)
    if out.ptr:
        out.numpy().view(np.uint8)[...] = 0
    grouped_matmul(upload(a), upload(b), **{problem.counts_name: masked_m if offs is None else offs}, out=out,
                   alpha=alpha, activation=activation, config=config, device=device, **vectors)
    return out.numpy().copy()


@functools.lru_cache(maxsize=64)
def _scalar_names(config) -> tuple[str, ...]:
    """The names of a kernel's scalar parameters after its tensor maps, as its PTX entry declares them
    (rendered once per config: the fuzzer's cases share a few configs)."""
    from ..toolchain.kernels import render_gemm
    from ..kernel.codegen import entry_params

    return tuple(nm for _, nm in entry_params(render_gemm(config)) if not nm.startswith("tmap_"))


def _grouped_params(plan, rebased) -> dict:
    """The kernel's scalar arguments by the names its PTX entry declares (the template, rendered), so that a value
    packed in the wrong slot is read as the kernel would read it; each address (a c_uint64) bound by `rebased`."""
    from ..select.predict import sk_fixup_k_tiles

    names = _scalar_names(plan.config)
    # the stream-K tail's fix-up memory is the device's own (the emulated result does not read it): null addresses
    values = plan.scalars(fix_up=(sk_fixup_k_tiles(plan.config), 0, 0) if plan.config.stream_k else ())
    assert len(names) == len(values), (names, values)
    return {nm: rebased(v.value) if isinstance(v, ctypes.c_uint64) else v.value for nm, v in zip(names, values)}


def grouped_kernel(cfg, p: dict, specs: dict, memory: Memory) -> None:
    """The grouped kernel's result, as its config and parameters define it: the counts read from the address the
    kernel is given and clamped as its scan clamps them (ptxgemm.kernel.grouped_walk.ranges), each group's rows of A
    (contiguous, masked) or K range (k form) times its B through the tensor maps, the epilogue (alpha, the rowwise
    scales with each group's column vectors at its group stride, the blockwise tables with each group's B table after
    the previous one's, the activation), the cast, and C written only on the groups' rows (in the contiguous and
    masked forms with the bytes up to the end of each row's last 16-byte chunk, as the row store writes them)."""
    from ..kernel import grouped_walk

    form, groups, n = cfg.grouped, p["param_groups"], p["param_n"]
    if cfg.has_source:
        raise NotImplementedError("the grouped GEMM takes no source matrix")
    counts = memory.at(p["param_counts"], (groups,), (4,), np.int32, "the counts").tolist()
    total = {"masked": p["param_group_rows"], "k": p["param_group_rows"]}.get(form, p["param_m"])
    spans = grouped_walk.ranges(form, counts, total)
    alpha = p.get("param_alpha", 1.0)
    if cfg.device_scales:   # per-tensor scales on the device, read once by every consumer (one for all groups)
        for operand in ("a", "b"):
            ptr = p[f"param_scale_{operand}_ptr"]
            alpha *= float(memory.at(ptr, (1,), (4,), np.float32, f"scale_{operand}")[0]) if ptr else 1.0
    rows_2d = p["param_m"]          # A's and C's rows as the kernel sees them (2-D)

    def column_vector(name: str, g: int, dtype) -> np.ndarray:
        """Group g's column vector: the kernel adds g x its group stride (elements) to the vector's address."""
        item = np.dtype(dtype).itemsize
        ptr = p[f"param_{name}"] + g * p[f"param_{name}_group_stride"] * item
        return memory.at(ptr, (n,), (item,), dtype, f"group {g}'s {name}").astype(np.float64)

    row_scale = (memory.at(p["param_row_scale"], (rows_2d,), (4,), np.float32, "the row scales").astype(np.float64)
                 if cfg.row_scale else None)
    kb = nb = 0
    if cfg.block_scale:
        kb, nb = p["param_scale_a_ld"], p["param_scale_b_ld"]
        # read as the kernel reads it: row-major per thread, or M-major through its tensor map (contiguous form)
        a_strides = (4, specs["tmap_scale_a"].strides[0]) if cfg.block_scale_a_mn else (4 * kb, 4)
        table_a = memory.at(p["param_scale_a"], (rows_2d, kb), a_strides, np.float32,
                            "scale_a's table").astype(np.float64)
    sa, sb, sc = specs["tmap_a"], specs["tmap_b"], specs["tmap_c"]
    ia, ib, ic = sa.dtype.itemsize, sb.dtype.itemsize, sc.dtype.itemsize
    assert p["param_c_ptr"] == sc.address and p["param_ldc"] == sc.strides[0], (p, sc)
    out_type = DTYPES[cfg.out_dtype]
    for g, (s, e) in enumerate(spans):
        if form == "k":
            m = p["param_m"]
            # A (M, total_K) M-major: dims (M, total_K); B (total_K, N) N-major: dims (N, total_K); C batch g
            a_g = memory.at(sa.address + s * sa.strides[0], (e - s, m), (sa.strides[0], ia), sa.dtype, "A")
            b_g = memory.at(sb.address + s * sb.strides[0], (e - s, n), (sb.strides[0], ib), sb.dtype, "B")
            acc = a_g.astype(np.float64).T @ b_g.astype(np.float64)
            rows = slice(0, m)
            c = memory.at(sc.address + g * sc.strides[1], (m, n), (sc.strides[0], ic), sc.dtype, "C")
        else:
            if form == "masked":
                s, e = s + g * p["param_group_rows"], e + g * p["param_group_rows"]
            if e == s:
                continue
            k = sa.dims[0]
            a_g = memory.at(sa.address + s * sa.strides[0], (e - s, k), (sa.strides[0], ia), sa.dtype, "A")
            if cfg.b_major == "k":   # dims (K, N, G): row n of group g holds its K
                b_g = memory.at(sb.address + g * sb.strides[1], (n, k), (sb.strides[0], ib), sb.dtype, "B").T
            else:                    # dims (N, K, G)
                b_g = memory.at(sb.address + g * sb.strides[1], (k, n), (sb.strides[0], ib), sb.dtype, "B")
            a64, b64 = a_g.astype(np.float64), b_g.astype(np.float64)
            if cfg.block_scale:   # each k-block's product promoted with its row's and its column block's scales
                table_b = memory.at(p["param_scale_b"] + g * kb * nb * 4, (kb, nb), (4 * nb, 4), np.float32,
                                    f"group {g}'s scale_b table").astype(np.float64)
                col_block = np.arange(n) // SCALE_BLOCK
                acc = np.zeros((e - s, n))
                for j in range(kb):
                    ks = slice(j * SCALE_BLOCK, (j + 1) * SCALE_BLOCK)
                    acc += table_a[s:e, j:j + 1] * table_b[j, col_block][None, :] * (a64[:, ks] @ b64[ks, :])
            else:
                acc = a64 @ b64
            rows = slice(s, e)
            c = memory.at(sc.address, (sc.dims[1], n), (sc.strides[0], ic), sc.dtype, "C")
            if row_scale is not None:
                acc = acc * row_scale[s:e, None]
            if cfg.col_scale:
                acc = acc * column_vector("col_scale", g, np.float32)[None, :]
        v = alpha * acc
        if cfg.bias == "col":     # the k form takes no vectors (GemmConfig refuses them)
            v = v + column_vector("bias", g, cfg.bias_dtype)[None, :]
        v = activation64(cfg.activation, v)
        c[rows] = v.astype(np.float32).astype(out_type).view(sc.dtype)
        tail = -(n * ic) % 16
        if form != "k" and tail and e > s:
            # a tile that runs past its group's end is stored in 16-byte chunks of whole rows (grouped_store.ptx.j2),
            # the last chunk of a row reaching past N: which rows go so depends on the tile, so every row of the
            # group's writes its chunk's tail here (bytes no result lies in: 0x5A, not the poison)
            memory.at(p["param_c_ptr"] + s * p["param_ldc"] + n * ic, (e - s, tail), (p["param_ldc"], 1), np.uint8,
                      "C's last chunk of a row")[...] = 0x5A
