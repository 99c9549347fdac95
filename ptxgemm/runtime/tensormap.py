"""TMA tensor maps (CUtensorMap) built with cuTensorMapEncodeTiled, every driver rule checked first.

The driver answers a broken rule with a bare CUDA_ERROR_INVALID_VALUE; `encode_tiled` checks each rule itself
and raises ConfigError naming it. Dimensions are given the way the driver and PTX coordinates use them:
**innermost (contiguous) dimension first**. Strides are in bytes for dimensions 1..rank-1 (dimension 0 is
contiguous by definition).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import ConfigError
from . import libcuda
from .driver import check, context

SWIZZLE_SPAN = {"none": None, "32B": 32, "64B": 64, "128B": 128}
L2_PROMOTION = ("none", "64B", "128B", "256B")
OOB_FILL = ("zero", "nan")
MAX_BOX = 256
MAX_RANK = 5
STRIDE_ALIGN = 16
BASE_ALIGN = 16
MAX_STRIDE = 1 << 40
MAX_DIM = 1 << 32


def _dtype_enum(dtype):
    from cuda.bindings import driver as cu

    T = cu.CUtensorMapDataType
    name = np.dtype(dtype).name
    table = {
        "uint8": T.CU_TENSOR_MAP_DATA_TYPE_UINT8, "int8": T.CU_TENSOR_MAP_DATA_TYPE_UINT8,
        "float8_e4m3fn": T.CU_TENSOR_MAP_DATA_TYPE_UINT8, "float8_e5m2": T.CU_TENSOR_MAP_DATA_TYPE_UINT8,
        "uint16": T.CU_TENSOR_MAP_DATA_TYPE_UINT16, "int16": T.CU_TENSOR_MAP_DATA_TYPE_UINT16,
        "float16": T.CU_TENSOR_MAP_DATA_TYPE_FLOAT16, "bfloat16": T.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        "uint32": T.CU_TENSOR_MAP_DATA_TYPE_UINT32, "int32": T.CU_TENSOR_MAP_DATA_TYPE_INT32,
        "float32": T.CU_TENSOR_MAP_DATA_TYPE_FLOAT32, "float64": T.CU_TENSOR_MAP_DATA_TYPE_FLOAT64,
        "uint64": T.CU_TENSOR_MAP_DATA_TYPE_UINT64, "int64": T.CU_TENSOR_MAP_DATA_TYPE_INT64,
    }
    if name not in table:
        raise ConfigError(f"tensor map dtype: {name} has no TMA element type")
    return table[name]


def _is_float(dtype) -> bool:
    return np.dtype(dtype).kind == "f" or np.dtype(dtype).name == "bfloat16"


@dataclasses.dataclass(frozen=True)
class TensorMapSpec:
    """Everything that defines a tiled tensor map, validated on construction (no GPU needed)."""

    address: int
    dtype: np.dtype
    dims: tuple[int, ...]      # innermost first, elements
    strides: tuple[int, ...]   # bytes, for dims[1:]
    box: tuple[int, ...]       # innermost first, elements
    swizzle: str = "128B"
    l2_promotion: str = "256B"
    oob_fill: str = "zero"

    def __post_init__(self):
        object.__setattr__(self, "dtype", np.dtype(self.dtype))
        validate(self)

    @property
    def box_bytes(self) -> int:
        n = self.dtype.itemsize
        for b in self.box:
            n *= b
        return n


def validate(spec: TensorMapSpec) -> None:
    """Raise ConfigError naming the first driver rule `spec` breaks."""
    esize = spec.dtype.itemsize
    rank = len(spec.dims)
    if not 1 <= rank <= MAX_RANK:
        raise ConfigError(f"tensor map rank: must be 1..{MAX_RANK}, got {rank}")
    if len(spec.box) != rank:
        raise ConfigError(f"tensor map box: needs one extent per dimension ({rank}), got {len(spec.box)}")
    if len(spec.strides) != rank - 1:
        raise ConfigError(f"tensor map strides: needs rank-1 = {rank - 1} byte strides, got {len(spec.strides)}")
    if spec.address == 0 or spec.address % BASE_ALIGN:
        raise ConfigError(f"tensor map global address: must be non-null and {BASE_ALIGN}-byte aligned, "
                          f"got 0x{spec.address:x}")
    for i, d in enumerate(spec.dims):
        if not 1 <= d <= MAX_DIM:
            raise ConfigError(f"tensor map dims[{i}]: each global dimension must be in 1..2^32, got {d}")
    prev_extent = spec.dims[0] * esize
    for i, s in enumerate(spec.strides, start=1):
        if s % STRIDE_ALIGN:
            raise ConfigError(f"tensor map strides[{i}]: global strides must be multiples of {STRIDE_ALIGN} bytes, "
                              f"got {s} (a row of a 2-byte matrix must hold a multiple of 8 elements)")
        if not 0 < s < MAX_STRIDE:
            raise ConfigError(f"tensor map strides[{i}]: must be in 1..2^40-1 bytes, got {s}")
        if s < prev_extent:
            raise ConfigError(f"tensor map strides[{i}]: a stride must cover the dimension inside it "
                              f"({prev_extent} bytes), got {s}")
        prev_extent = s * spec.dims[i]
    for i, b in enumerate(spec.box):
        if not 1 <= b <= MAX_BOX:
            raise ConfigError(f"tensor map box[{i}]: each box extent must be in 1..{MAX_BOX}, got {b}")
    inner_bytes = spec.box[0] * esize
    if inner_bytes % 16:
        raise ConfigError(f"tensor map box[0]: the inner box extent must be a multiple of 16 bytes, "
                          f"got {spec.box[0]} x {esize} B = {inner_bytes} B")
    if spec.swizzle not in SWIZZLE_SPAN:
        raise ConfigError(f"tensor map swizzle: must be one of {list(SWIZZLE_SPAN)}, got {spec.swizzle!r}")
    span = SWIZZLE_SPAN[spec.swizzle]
    if span is not None and inner_bytes > span:
        raise ConfigError(f"tensor map box[0]: with {spec.swizzle} swizzle the inner box extent must be at most the "
                          f"swizzle span ({span} B), got {inner_bytes} B")
    if spec.l2_promotion not in L2_PROMOTION:
        raise ConfigError(f"tensor map l2_promotion: must be one of {L2_PROMOTION}, got {spec.l2_promotion!r}")
    if spec.oob_fill not in OOB_FILL:
        raise ConfigError(f"tensor map oob_fill: must be one of {OOB_FILL}, got {spec.oob_fill!r}")
    if spec.oob_fill == "nan" and not _is_float(spec.dtype):
        raise ConfigError(f"tensor map oob_fill: 'nan' needs a floating-point dtype, got {spec.dtype}")


@dataclasses.dataclass
class TensorMap:
    """An encoded map. `cu_map` is passed to kernels by value (a `.param .align 64 .b8 name[128]`); `host_ptr` is
    the host address of its 128 bytes (not `ptr`: that names a device array's address, and driver.kernel_params
    would pass the map as one). `spec.address` is the address it was encoded with; replace_address moves it."""

    spec: TensorMapSpec
    cu_map: object
    host_ptr: int = 0

    def __post_init__(self):
        if not self.host_ptr:
            self.host_ptr = int(self.cu_map.getPtr())


def encode(spec: TensorMapSpec) -> TensorMap:
    """Encode a validated spec with cuTensorMapEncodeTiled."""
    from cuda.bindings import driver as cu


    context()
    rank = len(spec.dims)
    swz = {"none": "NONE", "32B": "32B", "64B": "64B", "128B": "128B"}[spec.swizzle]
    l2 = {"none": "NONE", "64B": "64B", "128B": "128B", "256B": "256B"}[spec.l2_promotion]
    oob = {"zero": "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE",
           "nan": "CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA"}[spec.oob_fill]
    cu_map = check(cu.cuTensorMapEncodeTiled(
        _dtype_enum(spec.dtype), rank, spec.address,
        [cu.cuuint64_t(d) for d in spec.dims],
        [cu.cuuint64_t(s) for s in spec.strides],
        [cu.cuuint32_t(b) for b in spec.box],
        [cu.cuuint32_t(1)] * rank,
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(cu.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{swz}"),
        getattr(cu.CUtensorMapL2promotion, f"CU_TENSOR_MAP_L2_PROMOTION_{'L2_' if l2 != 'NONE' else ''}{l2}"),
        getattr(cu.CUtensorMapFloatOOBfill, oob),
    ), f"encoding a tensor map (dims {spec.dims}, box {spec.box}, swizzle {spec.swizzle})")
    return TensorMap(spec, cu_map)


def encode_tiled(buffer, dims, strides, box, *, dtype=None, swizzle="128B", l2_promotion="256B",
                 oob_fill="zero") -> TensorMap:
    """Build a CUtensorMap for `buffer` (a DeviceArray, or a raw address with `dtype` given).

    dims, box: innermost dimension first, in elements; strides: bytes, for dims[1:].
    """
    address = buffer.ptr if hasattr(buffer, "ptr") else int(buffer)
    dtype = dtype if dtype is not None else buffer.dtype
    spec = TensorMapSpec(address, np.dtype(dtype), tuple(int(d) for d in dims), tuple(int(s) for s in strides),
                         tuple(int(b) for b in box), swizzle, l2_promotion, oob_fill)
    return encode(spec)


# --------------------------------------------------------------------------------------------------------------
# Moving an encoded map to new memory (a plan bound to a call's arrays): cuTensorMapReplaceAddress
# --------------------------------------------------------------------------------------------------------------

def replace_address(tmap: TensorMap, address: int, route: str = "ctypes") -> None:
    """Point an encoded map at `address` (everything else -- dims, strides, box, swizzle -- kept), in place. `route`:
    "ctypes" calls libcuda's cuTensorMapReplaceAddress directly (one foreign call, no argument objects; 0.6-1.2 us
    on an H200), "bindings" the same function through cuda.bindings' wrapper (1.25-2.6 us; `bench --host layer`
    times both, and encoding anew). The address must keep the alignment the map was encoded with (a plan's key
    holds every address's class, so a bound plan's always does). Kernel parameters are copied at launch, so
    rewriting a map after its launch was enqueued (or captured into a CUDA graph) changes only later launches."""
    fn = libcuda.function("cuTensorMapReplaceAddress") if route == "ctypes" else None
    if fn:
        err = fn(tmap.host_ptr, address)
        if err:
            from cuda.bindings import driver as cu
            check((cu.CUresult(err),), f"moving a tensor map to 0x{address:x} (cuTensorMapReplaceAddress)")
        return
    from cuda.bindings import driver as cu
    check(cu.cuTensorMapReplaceAddress(tmap.cu_map, address),
          f"moving a tensor map to 0x{address:x} (cuTensorMapReplaceAddress)")
