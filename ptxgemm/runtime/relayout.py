"""The strided relayout kernel's host side: a raw bit copy between two byte-strided layouts of up to 3 dimensions.

Why: a transposed, reversed, stepped or broadcast view cannot be moved with one memcpy. `copy` moves any such view
into any non-overlapping destination (a dense buffer, a padded one, another view) on a stream, with no host wait;
`DeviceArray.to_numpy` and `copy_from_host` (ptxgemm.runtime.driver) use it for arrays that are not one dense block, and
`fill_zero` writes zeros through a strided destination.

The kernel (templates/relayout.ptx.j2) copies bits, never converts: one cubin per element size (1, 2, 4 or 8 bytes),
compiled through ptxgemm.toolchain.compiler (cached on disk) and loaded once per process and device. Before launching,
`copy` drops dimensions of extent 1, orders the rest by the destination's strides (so the walk follows the
destination's memory and writes coalesce for any dense destination), merges dimensions that step evenly in both
layouts (a contiguous copy becomes one long row) and moves unit-stride runs as wider elements where alignment allows
(`widen`).

Every rule is checked before anything reaches the GPU; a broken one raises ConfigError naming the argument.
"""
from __future__ import annotations

import ctypes
import math
import threading

from ..toolchain import compiler
from ..errors import ConfigError
from ..kernel import codegen
from . import devices, driver

TEMPLATE = "relayout.ptx.j2"
PTX_VERSION = "8.0"
THREADS = 256          # per CTA
UNROLL = 4             # elements per thread per pass: loads in flight before the first store
CTAS_PER_SM = 4        # 1024 threads per SM: enough loads in flight to cover DRAM latency, registers to spare
MAX_RANK = 3
#: element size in bytes -> (ld/st type, data register type). 8-bit loads go to a 16-bit register: PTX has no
#: 8-bit registers for ld/st.
ELEMENT_TYPES = {1: ("u8", "b16"), 2: ("b16", "b16"), 4: ("b32", "b32"), 8: ("b64", "b64")}
_S64_MIN, _S64_MAX = -(1 << 63), (1 << 63) - 1


def kernel_name(itemsize: int) -> str:
    return f"relayout_copy_b{itemsize * 8}"


def relayout_ptx(itemsize: int) -> str:
    """The PTX of the copy kernel for `itemsize`-byte elements (no GPU needed)."""
    _check_itemsize(itemsize)
    ld_type, reg_type = ELEMENT_TYPES[itemsize]
    return codegen.render(TEMPLATE, template_name=TEMPLATE, ptx_version=PTX_VERSION, kernel_name=kernel_name(itemsize),
                          summary=f"strided relayout (raw copy) of {itemsize}-byte elements, up to {MAX_RANK} "
                                  f"dimensions",
                          itemsize=itemsize, ld_type=ld_type, reg_type=reg_type, threads=THREADS, unroll=UNROLL,
                          ctas_per_sm=CTAS_PER_SM)


# --------------------------------------------------------------------------------------------------------------
# Argument rules and the layout arithmetic (pure: tested on the CPU)
# --------------------------------------------------------------------------------------------------------------

def _check_itemsize(itemsize) -> int:
    if isinstance(itemsize, bool) or not isinstance(itemsize, int) or itemsize not in ELEMENT_TYPES:
        raise ConfigError(f"itemsize: the relayout kernel copies elements of {', '.join(map(str, ELEMENT_TYPES))} "
                          f"bytes (raw bits, no conversion), got {itemsize!r}")
    return itemsize


def _int_tuple(name: str, values, rule: str) -> tuple[int, ...]:
    try:
        out = tuple(values)
    except TypeError:
        raise ConfigError(f"{name}: must be a sequence of ints ({rule}), got {values!r}") from None
    for v in out:
        if isinstance(v, bool) or not isinstance(v, int) and not hasattr(v, "__index__"):
            raise ConfigError(f"{name}: must be a sequence of ints ({rule}), got {values!r}")
    return tuple(int(v) for v in out)


def _check_pointer(name: str, ptr, itemsize: int) -> int:
    if isinstance(ptr, bool) or not hasattr(ptr, "__index__"):
        raise ConfigError(f"{name}: must be a device address (an int), got {type(ptr).__name__}")
    ptr = int(ptr)
    if not 0 <= ptr < 1 << 64:
        raise ConfigError(f"{name}: a device address is a 64-bit unsigned value, got {ptr}")
    if ptr % itemsize:
        raise ConfigError(f"{name}: must be aligned to the element size ({itemsize} bytes), got 0x{ptr:x}")
    return ptr


def check_copy(dst_ptr, dst_strides, src_ptr, src_strides, shape, itemsize):
    """The validated arguments of `copy` as ints and tuples; ConfigError naming the argument and the rule."""
    itemsize = _check_itemsize(itemsize)
    shape = _int_tuple("shape", shape, f"1 to {MAX_RANK} extents")
    if not 1 <= len(shape) <= MAX_RANK:
        raise ConfigError(f"shape: 1 to {MAX_RANK} extents, got {len(shape)} ({shape})")
    dst_strides, src_strides = check_layouts(shape, dst_strides, src_strides, itemsize)
    dst_ptr = _check_pointer("dst_ptr", dst_ptr, itemsize)
    src_ptr = _check_pointer("src_ptr", src_ptr, itemsize)
    return dst_ptr, dst_strides, src_ptr, src_strides, shape, itemsize


def check_layouts(shape, dst_strides, src_strides, itemsize: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The stride rules of a copy of `shape` (any rank): one signed 64-bit byte stride per dimension in each layout,
    each a multiple of the element size; the destination's positive where the extent is > 1, its elements distinct.
    Returns both stride tuples as ints."""
    if any(n < 0 for n in shape):
        raise ConfigError(f"shape: extents must be >= 0, got {tuple(shape)}")
    dst_strides = _int_tuple("dst_strides", dst_strides, "byte strides, one per dimension")
    src_strides = _int_tuple("src_strides", src_strides, "byte strides, one per dimension")
    for name, strides in (("dst_strides", dst_strides), ("src_strides", src_strides)):
        if len(strides) != len(shape):
            raise ConfigError(f"{name}: one byte stride per dimension of shape {tuple(shape)}, got {len(strides)} "
                              f"({strides})")
        for s in strides:
            if not _S64_MIN <= s <= _S64_MAX:
                raise ConfigError(f"{name}: byte strides are signed 64-bit values, got {s}")
            if s % itemsize:
                raise ConfigError(f"{name}: every byte stride must be a multiple of the element size ({itemsize}) "
                                  f"so that every element is aligned, got {strides}")
    for axis, (n, s) in enumerate(zip(shape, dst_strides)):
        if n > 1 and s <= 0:
            raise ConfigError(f"dst_strides: must be positive for every dimension of extent > 1 (each destination "
                              f"element is written once, walking forwards), got {s} for dimension {axis} "
                              f"(extent {n})")
    if 0 not in shape and _overlaps(shape, dst_strides, itemsize):
        raise ConfigError(f"dst_strides: the destination's elements overlap (shape {tuple(shape)}, byte strides "
                          f"{dst_strides}, {itemsize}-byte elements): ordered by stride, each dimension's stride "
                          f"must be at least the span of the dimensions below it")
    return dst_strides, src_strides


def _overlaps(shape, strides, itemsize) -> bool:
    """True unless, ordered by stride, each dimension's stride clears the span of those below it (a sufficient
    rule for distinct addresses: it accepts every dense, padded or transposed layout)."""
    span = itemsize
    for n, s in sorted(((n, s) for n, s in zip(shape, strides) if n > 1), key=lambda d: d[1]):
        if s < span:
            return True
        span = s * (n - 1) + span
    return False


def normalize(shape, dst_strides, src_strides) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """The same copy in as few dimensions as possible: extent-1 dimensions dropped (their strides are never
    used), the rest ordered by destination stride, largest first (the kernel walks the last dimension fastest, so
    writes follow the destination's memory), and neighbours merged where both layouts step evenly across them.
    Any rank in; at least one dimension out. A copy with an extent 0 comes back unchanged."""
    if 0 in shape:
        return tuple(shape), tuple(dst_strides), tuple(src_strides)
    dims = [(n, d, s) for n, d, s in zip(shape, dst_strides, src_strides) if n != 1]
    dims.sort(key=lambda dim: -dim[1])  # stable: equal destination strides keep their order
    merged: list[tuple[int, int, int]] = []
    for n, d, s in dims:
        if merged:
            outer_n, outer_d, outer_s = merged[-1]
            if outer_d == d * n and outer_s == s * n:  # the outer dimension steps over exactly this one
                merged[-1] = (outer_n * n, d, s)
                continue
        merged.append((n, d, s))
    if not merged:
        return (1,), (0,), (0,)
    return tuple(m[0] for m in merged), tuple(m[1] for m in merged), tuple(m[2] for m in merged)


def grid_size(count: int, sm_count: int) -> int:
    """CTAs for `count` elements: one pass of threads * unroll elements each, at most CTAS_PER_SM per SM (the
    grid strides over the rest)."""
    return max(1, min(-(-count // (THREADS * UNROLL)), sm_count * CTAS_PER_SM))


# --------------------------------------------------------------------------------------------------------------
# Kernels: one cubin per element size, loaded once per process and device
# --------------------------------------------------------------------------------------------------------------

class RelayoutKernel:
    """The copy kernel for one element size loaded on device `ordinal`, and the address of its module's zero
    element (that device's memory)."""

    def __init__(self, itemsize: int, ordinal: int):
        driver.require_sm90("running the relayout kernel", ordinal)
        self.itemsize, self.ordinal = itemsize, ordinal
        self.compiled = compiler.compile_ptx(relayout_ptx(itemsize))
        self.module = driver.load_module(self.compiled, f"relayout module ({itemsize}-byte elements)", ordinal)
        self.function = self.module.function(kernel_name(itemsize))
        self.zero_ptr = self.module.global_address("relayout_zero")


_kernels: dict[tuple[int, int], RelayoutKernel] = {}   # by (element size, device ordinal)
_kernels_lock = threading.Lock()


def get_kernel(itemsize: int, ordinal: int | None = None) -> RelayoutKernel:
    """The copy kernel for `itemsize`-byte elements on device `ordinal` (None: the thread's current device)."""
    itemsize = _check_itemsize(itemsize)
    ordinal = devices.resolve(ordinal)
    with _kernels_lock:
        if (itemsize, ordinal) not in _kernels:
            _kernels[(itemsize, ordinal)] = RelayoutKernel(itemsize, ordinal)
        return _kernels[(itemsize, ordinal)]


# --------------------------------------------------------------------------------------------------------------
# Copies
# --------------------------------------------------------------------------------------------------------------

def copy(dst_ptr: int, dst_strides, src_ptr: int, src_strides, shape, itemsize: int, stream=None) -> None:
    """dst[i] = src[i] bit for bit for every index i of `shape` (1 to 3 extents), enqueued on `stream` (None: the
    legacy default stream; a ptxgemm Stream, a raw handle or an object with __cuda_stream__) of the thread's current
    device, whose context is current. Strides are in bytes: the source's may be negative or 0 (broadcast), the
    destination's must be positive (where the extent is > 1) and its elements distinct. The two must not overlap.
    Nothing is launched when an extent is 0."""
    launch = prepare(dst_ptr, dst_strides, src_ptr, src_strides, shape, itemsize)
    if launch is not None:
        launch(stream)


def widen(dst_ptr: int, dst_strides, src_ptr: int, src_strides, shape, itemsize: int):
    """The same copy with runs of k neighbours moved as one element of k * itemsize bytes (k a power of two, up to
    the widest element the kernel has), when the innermost dimension is unit-stride in both layouts and its extent,
    both base addresses and every other stride allow it. Fewer, wider accesses: a warp moves 256 bytes per
    instruction instead of 64 for 2-byte elements, which is what a copy needs to approach DRAM bandwidth.
    Returns (shape, dst_strides, src_strides, itemsize)."""
    shape, dst_strides, src_strides = tuple(shape), tuple(dst_strides), tuple(src_strides)
    unchanged = shape, dst_strides, src_strides, itemsize
    if dst_strides[-1] != itemsize or src_strides[-1] != itemsize:
        return unchanged
    k = max(ELEMENT_TYPES) // itemsize
    while k > 1:
        wide = k * itemsize
        outer_ok = all(d % wide == 0 and s % wide == 0
                       for n, d, s in zip(shape[:-1], dst_strides[:-1], src_strides[:-1]) if n > 1)
        if shape[-1] % k == 0 and dst_ptr % wide == 0 and src_ptr % wide == 0 and outer_ok:
            return shape[:-1] + (shape[-1] // k,), dst_strides[:-1] + (wide,), src_strides[:-1] + (wide,), wide
        k //= 2
    return unchanged


def launch_parameters(dst_ptr: int, dst_strides, src_ptr: int, src_strides, shape, itemsize: int,
                      sm_count: int) -> tuple[int, int, list]:
    """(element size, grid, kernel arguments) of a validated, non-empty copy on a GPU with `sm_count` SMs: the
    dimensions normalized, contiguous runs widened, and the shape padded on the left to (L, R, C) with extent-1
    dimensions of stride 0 (never stepped). Pure: the CPU tests run the kernel's PTX on these arguments."""
    shape, dst_strides, src_strides = normalize(shape, dst_strides, src_strides)
    shape, dst_strides, src_strides, itemsize = widen(dst_ptr, dst_strides, src_ptr, src_strides, shape, itemsize)
    count = math.prod(shape)
    pad = MAX_RANK - len(shape)
    shape, dst_strides, src_strides = ((1,) * pad + shape, (0,) * pad + dst_strides, (0,) * pad + src_strides)
    args = [ctypes.c_uint64(dst_ptr), ctypes.c_uint64(src_ptr), *(ctypes.c_uint64(n) for n in shape),
            *(ctypes.c_int64(s) for s in dst_strides), *(ctypes.c_int64(s) for s in src_strides),
            ctypes.c_uint64(count)]
    return itemsize, grid_size(count, sm_count), args


def _prepared(dst_ptr, dst_strides, src_ptr, src_strides, shape, itemsize, ordinal=None):
    if math.prod(shape) == 0:
        return None
    itemsize, grid, args = launch_parameters(dst_ptr, dst_strides, src_ptr, src_strides, shape, itemsize,
                                             driver.device_info(ordinal).sm_count)
    return driver.PreparedLaunch(get_kernel(itemsize, ordinal).function, (grid,), (THREADS,), args)


def prepare(dst_ptr: int, dst_strides, src_ptr: int, src_strides, shape, itemsize: int, ordinal: int | None = None):
    """`copy` with its arguments checked and packed once: a driver.PreparedLaunch on device `ordinal` (None: the
    thread's current device) to call with a stream, as often as needed (GemmPlan's staging copies), or None when
    there is nothing to copy."""
    return _prepared(*check_copy(dst_ptr, dst_strides, src_ptr, src_strides, shape, itemsize), ordinal)


def prepare_fill(dst_ptr: int, dst_strides, shape, itemsize: int, ordinal: int | None = None):
    """`fill_zero` packed once (see `prepare`): a copy from the kernel module's one zero element (on device `ordinal`)
    with all source strides 0."""
    shape_t = _int_tuple("shape", shape, f"1 to {MAX_RANK} extents")
    zeros = (0,) * len(shape_t)
    dst_ptr, dst_strides, _, _, shape_t, itemsize = check_copy(dst_ptr, dst_strides, 0, zeros, shape_t, itemsize)
    if math.prod(shape_t) == 0:
        return None
    return _prepared(dst_ptr, dst_strides, get_kernel(itemsize, ordinal).zero_ptr, zeros, shape_t, itemsize, ordinal)


def fill_zero(dst_ptr: int, dst_strides, shape, itemsize: int, stream=None) -> None:
    """Zero every element of a strided destination (rules as for `copy`'s destination), on `stream`."""
    launch = prepare_fill(dst_ptr, dst_strides, shape, itemsize)
    if launch is not None:
        launch(stream)


def copy_array(dst, src, stream=None) -> None:
    """dst[...] = src for two DeviceArrays of the same shape and dtype, on `stream`, on dst's device (whose context
    is current): any rank and any layouts that `copy` accepts once merged into at most 3 dimensions (see
    `normalize`)."""
    if tuple(dst.shape) != tuple(src.shape):
        raise ConfigError(f"dst: shape {tuple(dst.shape)} differs from the source's {tuple(src.shape)}")
    if dst.dtype != src.dtype:
        raise ConfigError(f"dst: dtype {dst.dtype} differs from the source's {src.dtype}; relayout copies bits and "
                          f"never converts")
    devices.common((("dst", dst.device), ("src", src.device)))   # one kernel, on one device
    itemsize = _check_itemsize(dst.dtype.itemsize)
    dst_strides, src_strides = check_layouts(tuple(dst.shape), dst.strides, src.strides, itemsize)
    dst_ptr = _check_pointer("dst_ptr", dst.ptr, itemsize)
    src_ptr = _check_pointer("src_ptr", src.ptr, itemsize)
    if math.prod(dst.shape) == 0:
        return
    shape, merged_dst, merged_src = normalize(dst.shape, dst_strides, src_strides)
    if len(shape) > MAX_RANK:
        raise ConfigError(f"dst: shape {tuple(dst.shape)} with byte strides {dst_strides} (source strides "
                          f"{src_strides}) still has {len(shape)} dimensions after merging; the relayout kernel "
                          f"walks at most {MAX_RANK}")
    _prepared(dst_ptr, merged_dst, src_ptr, merged_src, shape, itemsize, dst.device)(stream)
