"""A GEMM problem as config selection and tuning see it: sizes, dtypes and operand layouts, validated once.

Selection (ptxgemm.select.cost_model), the tune cache (ptxgemm.select.tune_cache) and tuning (ptxgemm.tuning) all
take the same seven arguments; checking them here means each bad one raises the same ConfigError, naming the
argument and the rule, wherever it comes in.
"""
from __future__ import annotations

import dataclasses
import operator

import numpy as np

from ..errors import ConfigError
from ..kernel.config import INPUT_DTYPES, MAJORS, OUTPUT_DTYPES, default_out_dtype


def _size(name: str, value) -> int:
    # operator.index takes numpy integers too, but not floats or strings (4096.0 is a mistake, not a size)
    if isinstance(value, bool):
        raise ConfigError(f"{name}: must be a positive whole number, got {value!r}")
    try:
        v = operator.index(value)
    except TypeError:
        raise ConfigError(f"{name}: must be a positive whole number, got {value!r}") from None
    if v < 1:
        raise ConfigError(f"{name}: must be >= 1, got {v}")
    return v


def _dtype(name: str, value, allowed: tuple[str, ...]) -> str:
    import ml_dtypes  # noqa: F401 - registers 'bfloat16' with numpy

    try:
        d = np.dtype(value).name
    except TypeError:
        raise ConfigError(f"{name}: must be one of {allowed}, got {value!r}") from None
    if d not in allowed:
        raise ConfigError(f"{name}: must be one of {allowed}, got {d}")
    return d


def _major(name: str, value) -> str:
    if value not in MAJORS:
        raise ConfigError(f"{name}: must be one of {MAJORS} (which GEMM dimension is contiguous), got {value!r}")
    return value


@dataclasses.dataclass(frozen=True)
class Problem:
    """C (m x n) = A (m x k) . B (k x n); out_dtype None means in_dtype."""

    m: int
    n: int
    k: int
    in_dtype: str = "bfloat16"
    out_dtype: str | None = None
    a_major: str = "k"
    b_major: str = "mn"

    def __post_init__(self):
        for dim in ("m", "n", "k"):
            object.__setattr__(self, dim, _size(dim, getattr(self, dim)))
        in_dtype = _dtype("in_dtype", self.in_dtype, INPUT_DTYPES)
        object.__setattr__(self, "in_dtype", in_dtype)
        out = default_out_dtype(in_dtype) if self.out_dtype is None else self.out_dtype
        object.__setattr__(self, "out_dtype", _dtype("out_dtype", out, OUTPUT_DTYPES))
        object.__setattr__(self, "a_major", _major("a_major", self.a_major))
        object.__setattr__(self, "b_major", _major("b_major", self.b_major))

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    def config_fields(self) -> dict:
        """The GemmConfig fields the operands decide (a config's tag says the rest)."""
        return {"in_dtype": self.in_dtype, "out_dtype": self.out_dtype, "a_major": self.a_major,
                "b_major": self.b_major}

    def describe(self) -> str:
        return (f"{self.m}x{self.n}x{self.k} {self.in_dtype}->{self.out_dtype}, A {self.a_major}-major, "
                f"B {self.b_major}-major")
