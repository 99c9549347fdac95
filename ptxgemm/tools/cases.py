"""Random matmul cases in every shape and layout numpy's `a @ b` takes, for the tests and the CLI.

A case is two numpy operands (random values, never zeros) built as views of larger arrays, so that their layouts
are what a caller hands over in practice: C or Fortran order, transposes, strided slices, reversed (negative-stride)
axes, broadcast batch axes (zero strides), misaligned starts, 1-D vectors, empty and K = 0 sizes, unaligned extents.
The same generator drives the CPU check of the launch plans (tests/test_operands.py) and the GPU check of the
results (tests/test_matmul_any_gpu.py).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..accuracy import DTYPES

LAYOUTS = ("C", "F", "sliced", "reversed", "offset", "transposed-batch")


@dataclasses.dataclass
class Case:
    a: np.ndarray
    b: np.ndarray
    out_dtype: str
    out_layout: str  # "new" (ptxgemm allocates), "C", "F", "sliced", "reversed"
    note: str


def _values(rng, shape, dtype: str) -> np.ndarray:
    x = rng.standard_normal(shape, dtype=np.float32).astype(DTYPES[dtype])
    x[x == 0] = 1  # a value too small for fp16 rounds to zero; zeros would hide unwritten outputs
    return x


def random_operand(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, layout: str) -> np.ndarray:
    """Random values of `shape` laid out as `layout` (a view of a larger array where the layout needs one)."""
    shape = tuple(shape)
    if layout == "C" or len(shape) < 2:
        if layout == "reversed" and len(shape) == 1:
            return _values(rng, shape, dtype)[::-1]
        return _values(rng, shape, dtype)
    if layout == "F":  # each matrix column-major (the transpose of a C-order array)
        x = _values(rng, shape[:-2] + shape[-1:] + shape[-2:-1], dtype)
        return np.swapaxes(x, -1, -2)
    if layout == "sliced":  # every other column and row of a bigger array: no unit stride at all
        x = _values(rng, shape[:-2] + (2 * shape[-2] + 1, 2 * shape[-1] + 1), dtype)
        return x[..., 1::2, 1::2]
    if layout == "reversed":  # every axis walked backwards
        x = _values(rng, shape, dtype)
        return x[tuple(slice(None, None, -1) for _ in shape)]
    if layout == "offset":  # rows of a wider array, starting one element in: misaligned base and padded rows
        x = _values(rng, shape[:-1] + (shape[-1] + 3,), dtype)
        return x[..., 1:shape[-1] + 1]
    if layout == "transposed-batch":  # the batch axis innermost of the three in memory
        if len(shape) < 3:
            return random_operand(rng, shape, dtype, "F")
        x = _values(rng, shape[:-3] + (shape[-2], shape[-1], shape[-3]), dtype)
        return np.moveaxis(x, -1, -3)
    raise ValueError(f"layout: one of {LAYOUTS}, got {layout!r}")


def _dim(rng, big: bool) -> int:
    r = rng.random()
    if r < 0.06:
        return 0
    if r < 0.2:
        return int(rng.integers(1, 9))
    hi = 700 if big else 260
    if r < 0.35:   # a multiple of 8: whole 16-byte lines of 16-bit elements, the sizes models use
        return 8 * int(rng.integers(1, hi // 8))
    return int(rng.integers(1, hi))


def random_case(rng: np.random.Generator, big: bool = False) -> Case:
    """One random case: sizes (0 and unaligned included), batch broadcasting, layouts, dtypes."""
    in_dtype = str(rng.choice(["bfloat16", "float16"]))
    out_dtype = str(rng.choice([in_dtype, in_dtype, "float32"]))
    m, n, k = _dim(rng, big), _dim(rng, big), _dim(rng, big)
    nbatch = int(rng.choice([0, 0, 1, 2]))
    batch = tuple(int(rng.integers(1, 4)) for _ in range(nbatch))
    a_batch = tuple(e if rng.random() < 0.7 else 1 for e in batch)
    b_batch = tuple(e if rng.random() < 0.7 else 1 for e in batch)
    if batch and rng.random() < 0.3:  # (L, M, K) @ (K, N): one B for every problem
        b_batch = ()
    a_shape, b_shape = a_batch + (m, k), b_batch + (k, n)
    if not batch and rng.random() < 0.08:
        a_shape = (k,)
    if not batch and rng.random() < 0.08:
        b_shape = (k,)
    a = random_operand(rng, a_shape, in_dtype, str(rng.choice(LAYOUTS)))
    b = random_operand(rng, b_shape, in_dtype, str(rng.choice(LAYOUTS)))
    if rng.random() < 0.15 and len(a_shape) >= 3:  # a batch axis of stride 0, as np.broadcast_to makes
        a = np.broadcast_to(a[:1], a.shape)
    out_layout = str(rng.choice(["new", "new", "C", "F", "sliced", "reversed"]))
    return Case(a, b, out_dtype, out_layout, f"{a.shape}{a.strides} @ {b.shape}{b.strides} -> {out_dtype} "
                                              f"({out_layout} out)")


def make_out(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, layout: str) -> np.ndarray:
    """A poisoned (NaN) host array of `shape` laid out as `layout`, for an `out` argument."""
    x = random_operand(rng, shape, dtype, layout if layout != "new" else "C")
    x[...] = np.nan
    return x
