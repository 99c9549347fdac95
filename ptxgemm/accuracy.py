"""Is a GEMM result right? Random operands, a float64 reference and a bound on every output element.

The bound, for output element (i, j) of C = A·B with K terms, fp32 accumulation and output dtype `out`:
    |out_ij - ref_ij| <= u_out·|ref_ij| + (1 + u_out)·C_ACC·2^-23·sqrt(K)·sum_k |a_ik|·|b_kj| + tiny_out

- ref is the float64 product of the exact (already rounded) inputs; its own error (~K·2^-53) is negligible.
- Products of two bf16 or fp16 values are exact in fp32 (16 or 22 significant bits), so all the error before the
  output cast comes from adding them up. One fp32 addition that truncates (the rounding tensor cores are
  reported to use; round-to-nearest is half of it) loses less than 2^-23 of the running sum, and every running
  sum is below sum_k |a_ik b_kj|. The worst case over K additions is K times that; for the zero-mean random
  operands every test uses, the running sums are a random walk of size ~sqrt(K), and the errors add up to
  ~sqrt(K)·2^-23·sum|ab|. A simulation that truncates every fp32 add of K = 64..16384 bf16 products stayed below
  0.43 of sqrt(K)·2^-23·sum|ab| (4000 sums each); C_ACC = 8 leaves an 18x margin over it.
- The cast to the output dtype rounds to nearest: at most u_out = 2^-p of the value, p the dtype's precision
  (bf16 8 bits, fp16 11; fp32 output is the accumulator itself, u_out = 0); tiny_out covers underflow to the
  output's subnormals (half its smallest subnormal).

What it catches: a wrong 16x16 block. One missing or repeated 64-wide k-tile changes an element by ~sqrt(64) = 8
standard deviations of a product against a bound of about 0.03 (K = 1024) to 0.45 (K = 8192) plus the output's
half ulp; a block moved, transposed, stale or unwritten (NaN poison) is off by O(|ref|). A Frobenius-norm
relative error over the whole matrix cannot see one block among thousands; this bound is per element.
"""
from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np

from .kernel.config import FP8_DTYPES, SCALE_BLOCK

DTYPES = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float32": np.float32,
          "float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2}
#: fp8 inputs (provisional, issue 12): Hopper's fp8 wgmma adds each k32 block of products into the fp32
#: accumulator with only ~14 significant bits (DeepSeek-V3's report; DeepGEMM promotes to fp32 registers for it), so
#: the error grows with the running sum, far beyond fp32's. Measured on the H200 (docs/results/h200/fp8/fp8_probe_h200_
#: issue12.json, 64 sampled rows, standard-normal e4m3): max |err| / sum|ab| = 5.5e-4 .. 6.7e-4 at K = 4096 .. 8192
#: without promotion (cuBLAS's _scaled_mm, which promotes: 2.0e-4 .. 3.8e-4). This unit, 2^-9 = 1.95e-3, is 3x the
#: worst measured; a missing 128-wide k-tile at K = 2304 (the GPU tests' largest) is ~4x it. It stays empirical: a
#: simulation of 13-bit truncating adds of k32 block sums (4000 sums per K) gives at most 3.2e-4 and 4.2e-4 at
#: K = 4096 and 8192, under the 5.5-6.7e-4 the hardware showed on far fewer sums, so that model does not bound it. Blockwise scaling promotes every k-tile (128 products), which
#: only lowers the error; the same unit bounds it.
FP8_ACCUMULATION_UNIT = 2.0 ** -9
#: precision p (significant bits) of each output dtype; u_out = 2^-p is its round-to-nearest unit roundoff
OUTPUT_PRECISION_BITS = {"bfloat16": 8, "float16": 11}
FP32_TRUNCATION_UNIT = 2.0 ** -23      # one truncating fp32 add loses less than this fraction of the sum
C_ACC = 8.0                            # margin over the simulated worst case (see the module docstring)
BLOCK = 16                             # the granularity of a wrong result this check must catch


def random_matrix(rng: np.random.Generator, rows: int, cols: int, dtype: str, order: str = "C") -> np.ndarray:
    """Standard-normal values rounded to `dtype` (zero mean, as the bound assumes); never zeros, which would hide
    unwritten outputs."""
    x = rng.standard_normal((rows, cols), dtype=np.float32).astype(DTYPES[dtype])
    x[x == 0] = 1  # a value too small for fp16 rounds to zero
    return np.asarray(x, order=order)


def _matmul64(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) @ b.astype(np.float64)


def reference(a: np.ndarray, b: np.ndarray, matmul64=_matmul64) -> tuple[np.ndarray, np.ndarray]:
    """(a @ b, |a| @ |b|) in float64 from the exact input values. `matmul64(x, y)` computes one float64 product
    (numpy by default; a test may pass one that runs on the GPU)."""
    return matmul64(a, b), matmul64(np.abs(a.astype(np.float32)), np.abs(b.astype(np.float32)))


def error_bound(ref: np.ndarray, abs_product: np.ndarray, k: int, out_dtype: str, in_dtype: str) -> np.ndarray:
    """The elementwise bound of the module docstring, as a float64 array shaped like `ref` (fp8 inputs: the
    accumulation term is FP8_ACCUMULATION_UNIT x sum|ab|). `in_dtype` has no default: the 16-bit inputs' bound
    taken for fp8 ones refuses right kernels (trace and tune did, until run 120)."""
    out_dtype = np.dtype(DTYPES.get(out_dtype, out_dtype)).name
    bits = OUTPUT_PRECISION_BITS.get(out_dtype)
    u_out = 0.0 if bits is None else 2.0 ** -bits
    info = ml_dtypes.finfo(DTYPES[out_dtype])
    tiny_out = float(info.smallest_subnormal) / 2
    accumulation = accumulation_error(abs_product, k, in_dtype)
    return u_out * np.abs(ref) + (1.0 + u_out) * accumulation + tiny_out


# --- the fused epilogue: D = act(p), p = alpha * r[m] * c[n] * acc + beta * S + bias ------------------------------
#: max |act'(v)|: relu 1, silu 1.0998, gelu (tanh form) 1.1289. An error e in p moves act(p) by at most this times e.
ACTIVATION_SLOPE = 1.13
#: the kernel's approximations, relative to |p|: gelu's tanh.approx.f32 (max relative error 2^-10.987, scaled by
#: p / 2), silu's ex2.approx and rcp.approx (2^-22 and 2^-23 relative)
ACTIVATION_APPROX = {None: 0.0, "relu": 0.0, "gelu": 2.0 ** -11, "silu": 2.0 ** -20}
#: the epilogue's fp32 operations (up to three multiplies, an fma and an add), each rounding to nearest
EPILOGUE_ROUNDINGS = 5
FP32_UNIT = 2.0 ** -24


def activation64(name: str | None, v: np.ndarray) -> np.ndarray:
    """The activation in float64, as the kernel defines it (gelu: the tanh form)."""
    if name is None:
        return v
    if name == "relu":
        return np.maximum(v, 0.0)
    if name == "gelu":
        return 0.5 * v * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (v + 0.044715 * v ** 3)))
    if name == "silu":
        with np.errstate(over="ignore"):   # exp(-v) overflows for v below -709: v / inf = -0, the right limit
            return v / (1.0 + np.exp(-v))
    raise ValueError(f"activation: {name!r}")


def fused_bound(pre: np.ndarray, gemm_error: np.ndarray, addends: np.ndarray, activation: str | None,
                out_dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(reference, bound) of a fused epilogue's output: `pre` is p in float64 from the exact inputs, `gemm_error` the
    bound on the scaled accumulator's error (|alpha r c| times accumulation_error), `addends` the sum of |each term
    of p| (for the fp32 roundings of the epilogue itself)."""
    out_dtype = np.dtype(DTYPES.get(out_dtype, out_dtype)).name
    bits = OUTPUT_PRECISION_BITS.get(out_dtype)
    u_out = 0.0 if bits is None else 2.0 ** -bits
    tiny_out = float(ml_dtypes.finfo(DTYPES[out_dtype]).smallest_subnormal) / 2
    ref = activation64(activation, pre)
    pre_error = gemm_error + EPILOGUE_ROUNDINGS * FP32_UNIT * addends
    bound = (u_out * np.abs(ref) + (1.0 + u_out) * (ACTIVATION_SLOPE * pre_error
                                                    + ACTIVATION_APPROX[activation] * np.abs(pre)) + tiny_out)
    return ref, bound


def accumulation_error(abs_product: np.ndarray, k: int, in_dtype: str) -> np.ndarray:
    """error_bound's accumulation term alone (before the output cast)."""
    if in_dtype in FP8_DTYPES:
        return FP8_ACCUMULATION_UNIT * abs_product
    return C_ACC * FP32_TRUNCATION_UNIT * np.sqrt(max(k, 1)) * abs_product


def dequantize(a: np.ndarray, b: np.ndarray, scale_a=None, scale_b=None, block: bool = False):
    """(A, B) in float64 with their scales applied elementwise: per tensor (one element), per row of A / column of B,
    or (`block`) per 1 x SCALE_BLOCK of A and SCALE_BLOCK x SCALE_BLOCK of B. Exact: an fp8/16-bit value times an
    fp32 scale fits in float64's 53 bits."""

    (m, k), n = a.shape, b.shape[1]
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    sa = None if scale_a is None else np.asarray(scale_a, np.float64)
    sb = None if scale_b is None else np.asarray(scale_b, np.float64)
    if block:
        a64 *= np.repeat(sa, SCALE_BLOCK, axis=1)[:, :k]
        b64 *= np.repeat(np.repeat(sb, SCALE_BLOCK, axis=0), SCALE_BLOCK, axis=1)[:k, :n]
        return a64, b64
    if sa is not None:
        a64 *= sa.reshape(()) if sa.size == 1 else sa.reshape(m, 1)
    if sb is not None:
        b64 *= sb.reshape(()) if sb.size == 1 else sb.reshape(1, n)
    return a64, b64


def fused_reference(a: np.ndarray, b: np.ndarray, args: dict, out_dtype: str, block: bool = False,
                    matmul64=_matmul64) -> tuple[np.ndarray, np.ndarray]:
    """(reference, bound) of act(alpha * (scale_a . A) @ (B . scale_b) + beta * c + bias) for 2-D operands, from the
    exact inputs in float64. `args` holds the epilogue arguments as run() takes them (numbers and numpy arrays);
    `block`: the scales are blockwise tables (1 x block for A, block x block for B)."""
    m, k = a.shape
    n = b.shape[1]
    alpha = float(args.get("alpha", 1.0))
    a64, b64 = dequantize(a, b, args.get("scale_a"), args.get("scale_b"), block)
    absprod = matmul64(np.abs(a64), np.abs(b64))
    pre = alpha * matmul64(a64, b64)
    addends = abs(alpha) * absprod
    if args.get("c") is not None:
        term = args["beta"] * np.asarray(args["c"]).astype(np.float64)
        pre, addends = pre + term, addends + np.abs(term)
    if args.get("bias") is not None:
        bias = np.asarray(args["bias"]).astype(np.float64)
        bias = bias.reshape(m, 1) if bias.shape == (m, 1) else bias.reshape(1, n)
        pre, addends = pre + bias, addends + np.abs(bias)
    gemm_error = abs(alpha) * accumulation_error(absprod, k, np.dtype(a.dtype).name)
    return fused_bound(pre, gemm_error, addends, args.get("activation"), out_dtype)


@dataclasses.dataclass
class Verdict:
    """The outcome of `check`: `ok`, and where it went wrong when it did."""

    ok: bool
    shape: tuple[int, int]
    worst_ratio: float          # max |out - ref| / bound (NaN counts as infinite); <= 1 when ok
    bad_elements: int           # elements over their bound, NaN included
    nan_elements: int           # never written (NaN poison survived) or NaN computed
    bad_blocks: list            # [(block_row, block_col)] of 16x16 blocks holding a bad element (first 16)
    first_bad: tuple | None     # (row, col, out, ref, bound) of the first bad element in row-major order

    def __str__(self) -> str:
        if self.ok:
            return f"all {self.shape[0]}x{self.shape[1]} elements within bound (worst error/bound {self.worst_ratio:.3g})"
        r, c, got, want, bound = self.first_bad
        return (f"{self.bad_elements} of {self.shape[0]}x{self.shape[1]} elements over their bound "
                f"({self.nan_elements} NaN) in {len(self.bad_blocks)}{'+' if len(self.bad_blocks) == 16 else ''} "
                f"16x16 block(s), first at block {self.bad_blocks[0]}; element ({r}, {c}) = {got!r}, reference "
                f"{want:.6g}, bound {bound:.3g}")


def check(out: np.ndarray, ref: np.ndarray, abs_product: np.ndarray, k: int, out_dtype: str | None = None, *,
          in_dtype: str) -> Verdict:
    """Every element of `out` against its bound (see the module docstring). `out_dtype` defaults to out's dtype;
    `in_dtype`, the inputs' (error_bound), must be given."""
    out_dtype = np.dtype(out.dtype if out_dtype is None else DTYPES.get(out_dtype, out_dtype)).name
    return check_bound(out, ref, error_bound(ref, abs_product, k, out_dtype, in_dtype))


def check_bound(out: np.ndarray, ref: np.ndarray, bound: np.ndarray) -> Verdict:
    """Every element of `out` against a precomputed `error_bound` (NaN anywhere is a failure)."""
    got = np.asarray(out).astype(np.float64)
    err = np.abs(got - ref)
    nan = np.isnan(err)
    bad = nan | (err > bound)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(nan, np.inf, err / bound)
    worst = float(ratio.max()) if ratio.size else 0.0
    n_bad = int(bad.sum())
    if not n_bad:
        return Verdict(True, tuple(out.shape), worst, 0, 0, [], None)
    rows, cols = np.nonzero(bad)
    blocks = sorted({(int(r) // BLOCK, int(c) // BLOCK) for r, c in zip(rows[:4096], cols[:4096])})[:16]
    r, c = int(rows[0]), int(cols[0])
    first = (r, c, float(got[r, c]), float(ref[r, c]), float(bound[r, c]))
    return Verdict(False, tuple(out.shape), worst, n_bad, int(nan.sum()), blocks, first)
