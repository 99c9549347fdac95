"""A fuzz case made real: the numpy code that builds its arrays (random values, never zeros; the layouts the spec
names), the arrays themselves, and the float64 reference with its elementwise bound (ptxgemm.accuracy)."""
from __future__ import annotations

import copy
import dataclasses
import math
from typing import Callable

import numpy as np

from .. import accuracy
from ..kernel.config import GemmConfig, SCALE_BLOCK
from ..plan.epilogue import m_major_ld
from .fuzz_cases import (BASE_NS, DTYPE_EXPR, LAYOUTS, a_shape, b_shape, frame_shape, out_dtype_of, problems,
                         result_shape)


def _array_expr(shape: tuple, dtype: str, layout: str, poison: bool = False) -> str:
    dt = DTYPE_EXPR[dtype]

    def src(base):
        return f"np.full({tuple(base)!r}, np.nan, {dt})" if poison else f"values(rng, {tuple(base)!r}, {dt})"

    nd = len(shape)
    if layout == "C":
        return src(shape)
    if layout == "F":
        if nd == 2:
            return f"{src((shape[1], shape[0]))}.T"
        return f"np.swapaxes({src(shape[:-2] + (shape[-1], shape[-2]))}, -1, -2)"
    if layout == "transposed":
        return f"{src(shape[::-1])}.T"
    if layout == "sliced":
        if nd == 1:
            return f"{src((2 * shape[0] + 1,))}[1::2]"
        return f"{src(shape[:-2] + (2 * shape[-2] + 1, 2 * shape[-1] + 1))}[..., 1::2, 1::2]"
    if layout == "reversed":
        return f"{src(shape)}[{', '.join(['::-1'] * nd)}]"
    if layout == "offset":
        return f"{src(shape[:-1] + (shape[-1] + 3,))}[..., 1:{shape[-1] + 1}]"
    if layout == "broadcast":
        return f"np.broadcast_to({src((1,) + shape[1:])}, {shape!r})"
    raise ValueError(f"layout: one of {LAYOUTS}, got {layout!r}")


def _vector_expr(shape: tuple, layout: str, make: Callable[[tuple], str]) -> str:
    """A vector of `shape` ((L,), (1, L) or (L, 1)) with unit stride along L, contiguous or starting 1 element in."""
    if layout == "C":
        return make(shape)
    if len(shape) == 1:
        return f"{make((shape[0] + 3,))}[1:{shape[0] + 1}]"
    if shape[0] == 1 and len(shape) == 2 and shape != (1, 1):
        return f"{make((1, shape[1] + 3))}[:, 1:{shape[1] + 1}]"
    return f"{make((shape[0] + 3, 1))}[1:{shape[0] + 1}]"


def _scale_expr(spec: dict, name: str) -> str:
    s = spec[name]
    form = s["form"]
    m, n, k = spec["m"], spec["n"], spec["k"]
    if form == "float":
        return repr(float(s["value"]))
    if form == "np32":
        return f"np.float32({s['value']!r})"
    if form == "arr1":
        return f"np.array([{s['value']!r}], np.float32)"
    if form == "arr11":
        return f"np.array([[{s['value']!r}]], np.float32)"

    def uniform(shape):
        return f"rng.uniform(0.25, 4, {tuple(shape)!r}).astype(np.float32)"

    kb = -(-k // SCALE_BLOCK)
    if form == "block":
        if name == "scale_a" and s["layout"] == "M":   # M-major: a (kb, M padded to 4) table's transpose
            return f"{uniform((kb, m_major_ld(m)))}.T[:{m}]"
        return uniform((m, kb) if name == "scale_a" else (kb, -(-n // SCALE_BLOCK)))
    length = m if name == "scale_a" else n
    if form == "vec":
        shape = (length,)
    else:
        shape = (length, 1) if name == "scale_a" else (1, length)
    return _vector_expr(shape, s["layout"], uniform)


def array_lines(spec: dict) -> list[tuple[str, str]]:
    """(name, Python expression) of every value of the case, in the order they are made: rng, a, b, then c, bias,
    scale_a, scale_b, out where the spec has them. Evaluated in order with np, ml_dtypes and `values` at hand."""
    lines = [("rng", f"np.random.default_rng({spec['seed']})"),
             ("a", _array_expr(a_shape(spec), spec["a"]["dtype"], spec["a"]["layout"])),
             ("b", _array_expr(b_shape(spec), spec["b"]["dtype"], spec["b"]["layout"]))]
    shape = result_shape(spec)
    if spec["c"] is not None:
        lines.append(("c", _array_expr(shape, spec["c"]["dtype"], spec["c"]["layout"])))
    if spec["bias"] is not None:
        bias = spec["bias"]
        m, n = spec["m"], spec["n"]
        bshape = {"n": (n,), "1n": (1, n), "m1": (m, 1)}[bias["shape"]]
        dt = DTYPE_EXPR[bias["dtype"]]
        lines.append(("bias", _vector_expr(bshape, bias["layout"], lambda s: f"values(rng, {tuple(s)!r}, {dt})")))
    for name in ("scale_a", "scale_b"):
        if spec[name] is not None:
            lines.append((name, _scale_expr(spec, name)))
    if spec["out"] is not None:
        lines.append(("out", "c" if spec["c_is_out"] else
                      _array_expr(shape, spec["out"]["dtype"], spec["out"]["layout"], poison=True)))
    return lines


def array_code(spec: dict) -> str:
    """The statements that make the case's values (one per array), as build runs them and snippet prints them."""
    return "".join(f"{name} = {expr}\n" for name, expr in array_lines(spec))


def kwarg_names(spec: dict) -> list[str]:
    """The keyword arguments of the call, in order, each left out at its default."""
    names = []
    if spec["c"] is not None:
        names.append("c")
    if spec["alpha"] != 1.0:
        names.append("alpha")
    if spec["c"] is not None:
        names.append("beta")
    for name in ("bias", "activation", "scale_a", "scale_b", "out_dtype"):
        if spec[name] is not None:
            names.append(name)
    if spec.get("config") is not None:   # specs drawn before configs were have no such key
        names.append("config")
    if spec.get("ctas") is not None:     # GemmPlan's grid cap (serpentine cases only)
        names.append("ctas")
    return names


@dataclasses.dataclass
class Case:
    """A built spec: the operands, the keyword arguments as `run` takes them (epilogue and out_dtype, each left out
    at its default), and out (NaN-poisoned; the very object kwargs["c"] when c_is_out; None for run and a matmul
    that allocates)."""

    entry: str
    array_kind: str
    a: np.ndarray
    b: np.ndarray
    kwargs: dict
    out: np.ndarray | None
    c_is_out: bool
    spec: dict
    c_values: np.ndarray | None = None   # a copy of c's values as built (c may be out, which the call overwrites)


def build(spec: dict) -> Case:
    """The case's arrays, deterministically (the same spec gives bitwise-identical arrays)."""
    bad = problems(spec)
    if bad:
        raise ValueError(f"invalid spec ({'; '.join(bad)})")
    ns = dict(BASE_NS)
    exec(array_code(spec), ns)
    kwargs = {}
    for name in kwarg_names(spec):
        if name in ("c", "bias", "scale_a", "scale_b"):
            kwargs[name] = ns[name]
        elif name == "config":
            kwargs[name] = GemmConfig.from_tag(spec[name])
        else:
            kwargs[name] = spec[name]
    c = ns.get("c")
    return Case(entry=spec["entry"], array_kind=spec["array_kind"], a=ns["a"], b=ns["b"], kwargs=kwargs,
                out=ns.get("out"), c_is_out=bool(spec["c_is_out"]), spec=copy.deepcopy(spec),
                c_values=None if c is None else np.array(c, copy=True))


def dequantize(a: np.ndarray, b: np.ndarray, scale_a=None, scale_b=None, block: bool = False):
    """accuracy.dequantize for any operands: (A, B) in float64 as (batch..., M, K) and (batch..., K, N) (a 1-D a is
    one row, a 1-D b one column) with the scales applied: per tensor (one element), per row of A and column of B
    (shared by every problem of a batch), or blockwise (2-D)."""
    # C order: numpy's matmul of strided float64 batches can miss BLAS
    a64, b64 = np.asarray(a).astype(np.float64, order="C"), np.asarray(b).astype(np.float64, order="C")
    if a64.ndim == 1:
        a64 = a64[None, :]
    if b64.ndim == 1:
        b64 = b64[:, None]
    m, k = a64.shape[-2:]
    n = b64.shape[-1]
    sa = None if scale_a is None else np.asarray(scale_a, np.float64)
    sb = None if scale_b is None else np.asarray(scale_b, np.float64)
    if block:
        a64 = a64 * np.repeat(sa, SCALE_BLOCK, axis=1)[:, :k]
        b64 = b64 * np.repeat(np.repeat(sb, SCALE_BLOCK, axis=0), SCALE_BLOCK, axis=1)[:k, :n]
        return a64, b64
    if sa is not None:
        a64 = a64 * (sa.reshape(()) if sa.size == 1 else sa.reshape(m, 1))
    if sb is not None:
        b64 = b64 * (sb.reshape(()) if sb.size == 1 else sb.reshape(1, n))
    return a64, b64


def reference(case: Case) -> tuple[np.ndarray, np.ndarray]:
    """(ref, bound) in float64, numpy's result shape: act(alpha * (scale_a . A) @ (B . scale_b) + beta * c + bias)
    from the exact inputs (c's values as built), and ptxgemm.accuracy's elementwise bound for the effective output
    dtype. K = 0: the product is exactly 0 (the result is act(beta * c + bias))."""
    spec, kw = case.spec, case.kwargs
    block = spec["scale_a"] is not None and spec["scale_a"]["form"] == "block"
    a64, b64 = dequantize(case.a, case.b, kw.get("scale_a"), kw.get("scale_b"), block)
    k = a64.shape[-1]
    frame = frame_shape(spec)
    prod = np.matmul(a64, b64)
    absprod = np.matmul(np.abs(a64), np.abs(b64))
    alpha = float(kw.get("alpha", 1.0))
    pre = alpha * prod
    addends = abs(alpha) * absprod
    if "c" in kw:
        term = float(kw["beta"]) * case.c_values.astype(np.float64).reshape(frame)
        pre, addends = pre + term, addends + np.abs(term)
    if "bias" in kw:
        bias = np.asarray(kw["bias"]).astype(np.float64)
        bias = bias.reshape(spec["m"], 1) if spec["bias"]["shape"] == "m1" else bias.reshape(1, spec["n"])
        pre, addends = pre + bias, addends + np.abs(bias)
    pre, addends = np.broadcast_to(pre, frame), np.broadcast_to(addends, frame)
    gemm_error = abs(alpha) * accuracy.accumulation_error(absprod, k, spec["a"]["dtype"])
    with np.errstate(over="ignore"):   # silu's exp(-v) of a large negative v: inf, and v / inf = -0 is right
        ref, bound = accuracy.fused_bound(pre, gemm_error, addends, spec["activation"], out_dtype_of(spec))
    shape = result_shape(spec)
    return np.asarray(ref).reshape(shape), np.asarray(bound).reshape(shape)


def _as_2d(x: np.ndarray) -> np.ndarray:
    if x.ndim >= 2:
        return x.reshape(math.prod(x.shape[:-1]), x.shape[-1])
    return x.reshape(1, x.size)


def verdict(case: Case, got) -> accuracy.Verdict:
    """A host result against reference(case), element by element (N-D results as (rows of all problems, N); 0-d and
    1-d as one row). Raises ValueError when got's shape is not numpy's."""
    ref, bound = reference(case)
    got = np.asarray(got)
    if got.shape != ref.shape:
        raise ValueError(f"result shape {got.shape}, numpy's is {ref.shape}")
    return accuracy.check_bound(_as_2d(got), _as_2d(ref), _as_2d(bound))
