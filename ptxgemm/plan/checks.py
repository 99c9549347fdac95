"""The rules an operand's dtype and a launch's knobs must follow, each checked here and only here, before anything
reaches the GPU. Shapes and strides are ptxgemm.plan.operands' rules; a config's own consistency is GemmConfig's."""
from __future__ import annotations

from ..errors import ConfigError
from ..kernel.config import FP8_DTYPES, GemmConfig, INPUT_DTYPES, OUTPUT_DTYPES, dtype_name
from . import operands


def check_dtype(name: str, dtype) -> str:
    d = dtype_name(dtype)
    if d in INPUT_DTYPES:
        return d
    if d in ("float32", "float64"):
        raise ConfigError(f"{name}: dtype {d} is not supported; ptxgemm multiplies bfloat16, float16 or fp8 "
                          f"(float8_e4m3fn, float8_e5m2) with fp32 accumulation. Convert explicitly: "
                          f"{name}.astype(ml_dtypes.bfloat16) or {name}.astype(numpy.float16)")
    raise ConfigError(f"{name}: dtype {d} is not supported (inputs: {', '.join(INPUT_DTYPES)})")


def check_dtypes(a, b) -> str:
    """A's input dtype (numpy or device arrays); ConfigError unless B has the same INPUT_DTYPES type, or both are
    fp8 (e4m3 x e5m2 mixes: b_dtype_of gives B's)."""
    in_dtype = check_dtype("a", a.dtype)
    bd = dtype_name(b.dtype)
    if bd != in_dtype and not (in_dtype in FP8_DTYPES and bd in FP8_DTYPES):
        raise ConfigError(f"b: dtype {bd} differs from a's {in_dtype}; both operands must have the same dtype "
                          f"(or be two fp8 types: {' x '.join(FP8_DTYPES)})")
    return in_dtype


def b_dtype_of(a, b) -> str | None:
    """B's dtype where it differs from A's (a mixed fp8 pair), else None."""
    bd = dtype_name(b.dtype)
    return None if bd == dtype_name(a.dtype) else bd


def check_out_dtype(out_dtype, name: str = "out_dtype") -> str:
    try:
        d = dtype_name(out_dtype)
    except TypeError:
        raise ConfigError(f"{name}: must be bfloat16, float16 or float32, got {out_dtype!r}, which is not a dtype "
                          f"numpy knows") from None
    if d not in OUTPUT_DTYPES:
        raise ConfigError(f"{name}: must be bfloat16, float16 or float32, got {d}")
    return d


def result_shape(a, b) -> tuple[int, ...]:
    """numpy's shape of `a @ b` (ConfigError naming the rule when the shapes do not multiply)."""
    if (len(a.shape) == 2 and len(b.shape) == 2 and a.shape[1] == b.shape[0]    # the common case, on the hot path
            and min(a.shape[0], a.shape[1], b.shape[1]) >= 0):                  # (plan_matmul names a negative one)
        return (a.shape[0], b.shape[1])
    return operands.plan_matmul(a.shape, a.strides, 0, b.shape, b.strides, 0, a.dtype.itemsize, 4).out_shape


def check_ctas(ctas, cluster_size: int) -> None:
    if ctas is None:
        return
    if isinstance(ctas, bool) or not isinstance(ctas, int) or ctas < cluster_size or ctas % cluster_size:
        raise ConfigError(f"ctas: must be a positive whole number of {cluster_size}-CTA clusters (None: one CTA per "
                          f"SM), got {ctas!r}")


def check_config(config) -> None:
    if config is not None and not isinstance(config, GemmConfig):
        raise ConfigError(f"config: must be a ptxgemm.GemmConfig or None (select_config picks), got "
                          f"{type(config).__name__} {config!r}")
