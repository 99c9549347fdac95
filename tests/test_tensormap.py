"""Tensor-map rules: each broken driver rule is a ConfigError that names it, checked without a GPU."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ptxgemm.errors import ConfigError
from ptxgemm.runtime import tensormap
from ptxgemm.runtime.tensormap import TensorMapSpec

BASE = 0x7F00_0000_0000  # 1024-byte aligned; validation never dereferences it

# A valid 2-D bf16 map: a 1024 x 512 row-major matrix (row = 1024 B), boxes of 64 x 128 elements, 128B swizzle.
GOOD = dict(address=BASE, dtype=ml_dtypes.bfloat16, dims=(512, 1024), strides=(1024,), box=(64, 128),
            swizzle="128B", l2_promotion="256B", oob_fill="zero")


def spec(**changes) -> TensorMapSpec:
    return TensorMapSpec(**{**GOOD, **changes})


def test_valid_spec():
    s = spec()
    assert s.dtype == np.dtype(ml_dtypes.bfloat16)
    assert s.box_bytes == 64 * 128 * 2
    for swz, inner in (("none", 256), ("32B", 16), ("64B", 32), ("128B", 64)):
        assert spec(swizzle=swz, box=(inner, 8)).box == (inner, 8)


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


@pytest.mark.parametrize("changes, rule", [
    (dict(address=BASE + 8), r"global address: must be non-null and 16-byte aligned, got 0x7f0000000008"),
    (dict(address=0), r"global address: must be non-null"),
    (dict(strides=(1000,)), r"strides\[1\]: global strides must be multiples of 16 bytes, got 1000"),
    (dict(dims=(500, 1024), strides=(1000,)), r"strides\[1\]: global strides must be multiples of 16"),
    (dict(strides=(512,)), r"strides\[1\]: a stride must cover the dimension inside it \(1024 bytes\), got 512"),
    (dict(box=(64, 257)), r"box\[1\]: each box extent must be in 1\.\.256, got 257"),
    (dict(box=(64, 0)), r"box\[1\]: each box extent must be in 1\.\.256, got 0"),
    (dict(box=(300, 8), swizzle="none"), r"box\[0\]: each box extent must be in 1\.\.256, got 300"),
    (dict(box=(4, 8), swizzle="none"), r"box\[0\]: the inner box extent must be a multiple of 16 bytes, "
                                       r"got 4 x 2 B = 8 B"),
    (dict(box=(12, 8), swizzle="none"), r"inner box extent must be a multiple of 16 bytes"),
    (dict(box=(128, 8)), r"box\[0\]: with 128B swizzle the inner box extent must be at most the swizzle span "
                         r"\(128 B\), got 256 B"),
    (dict(box=(64, 8), swizzle="64B"), r"with 64B swizzle .* at most the swizzle span \(64 B\), got 128 B"),
    (dict(box=(32, 8), swizzle="32B"), r"with 32B swizzle .* \(32 B\), got 64 B"),
    (dict(swizzle="256B"), r"swizzle: must be one of \['none', '32B', '64B', '128B'\], got '256B'"),
    (dict(swizzle="128b"), r"swizzle: must be one of"),
    (dict(l2_promotion="512B"), r"l2_promotion: must be one of"),
    (dict(oob_fill="inf"), r"oob_fill: must be one of"),
    (dict(dtype=np.uint16, oob_fill="nan"), r"oob_fill: 'nan' needs a floating-point dtype, got uint16"),
    (dict(dtype=np.int32, dims=(256, 1024), box=(32, 8), oob_fill="nan"),
     r"oob_fill: 'nan' needs a floating-point dtype, got int32"),
    (dict(dims=(), strides=(), box=()), r"rank: must be 1\.\.5, got 0"),
    (dict(dims=(8,) * 6, strides=(16,) * 5, box=(8,) * 6), r"rank: must be 1\.\.5, got 6"),
    (dict(box=(64,)), r"box: needs one extent per dimension \(2\), got 1"),
    (dict(strides=()), r"strides: needs rank-1 = 1 byte strides, got 0"),
    (dict(dims=(512, 0)), r"dims\[1\]: each global dimension must be in 1\.\.2\^32, got 0"),
    (dict(dims=(512, 1 << 33)), r"dims\[1\]: each global dimension must be in 1\.\.2\^32"),
])
def test_rule_violation_names_the_rule(changes, rule):
    with pytest.raises(ConfigError, match=rule):
        spec(**changes)


def test_stride_cover_rule_uses_the_previous_extent_for_rank3():
    # dims (64, 32, 4) of 2-byte elements: dim 1 stride must be >= 128 B, dim 2 stride >= 128 * 32 = 4096 B
    ok = dict(dims=(64, 32, 4), strides=(128, 4096), box=(64, 8, 1))
    assert spec(**ok).dims == (64, 32, 4)
    with pytest.raises(ConfigError, match=r"strides\[2\]: a stride must cover the dimension inside it \(4096 bytes\), "
                                          r"got 4080"):
        spec(**{**ok, "strides": (128, 4080)})


def test_nan_fill_is_fine_for_floats():
    for dt in (np.float16, np.float32, ml_dtypes.bfloat16):
        assert spec(dtype=dt, dims=(256, 1024), box=(16, 8), oob_fill="nan").oob_fill == "nan"


def test_unknown_dtype_names_the_rule():
    with pytest.raises(ConfigError, match=r"tensor map dtype: complex64 has no TMA element type"):
        tensormap._dtype_enum(np.complex64)


def test_encode_tiled_validates_before_touching_the_gpu():
    # a misaligned raw address fails in validation, so this raises ConfigError even on a machine with no GPU
    with pytest.raises(ConfigError, match="16-byte aligned"):
        tensormap.encode_tiled(BASE + 2, dims=(64, 64), strides=(128,), box=(64, 64), dtype=np.uint16)
    with pytest.raises(ConfigError, match="swizzle span"):
        tensormap.encode_tiled(BASE, dims=(64, 64), strides=(256,), box=(64, 64), dtype=np.float32)
