"""Random calls of run, matmul and GemmPlan for the differential fuzzer (ptxgemm.tools.fuzz): seeded, shrinkable, printable.

A case is a *spec*, a small JSON-ready dict (sizes, dtypes, layouts, epilogue arguments, entry point, value seed).
`build` turns it into arrays by evaluating one Python statement per array (`array_code`), the very statements
`snippet` prints, so a failure is reported as a program anyone can paste and run. `reference` gives the float64
answer and ptxgemm.accuracy's elementwise bound, `verdict` judges a result against them, `shrink` walks a failing
spec down to a small one that fails the same way, `bad_specs` lists illegal calls with the argument their error must
name.

What the strategies cover (draw_spec):
- sizes M, N, K: 0, 1, 2..16, 17..200, the tile edges 63..257 (multiples of 64 and one either side), 201..4096;
  halved (largest first) until 2*batches*M*N*K <= max_flops and a, b and the result hold at most
  max_flops/40 (and 2^24) elements;
- batches: 0, 1 or 2 axes of extent 0..8 (mostly 1..4); each operand may lack leading axes or hold extent 1
  where the other does not (numpy's broadcasting), or have a stride-0 batch axis (np.broadcast_to); 1-D a and/or
  b (without batch axes: then M or N is 1 and numpy drops the axis);
- layouts (LAYOUTS) of a, b, c and a given out: C; F (each matrix column-major); sliced (every other row and
  column of a bigger array); reversed (every axis walked backwards: negative strides); offset (rows of a wider
  array starting one element in: a misaligned start); transposed (`base.T` of a C-order array: for a batch the
  batch axis innermost); broadcast (a stride-0 first batch axis: a, b and c only, never out). 1-D arrays take C,
  sliced, reversed and offset, 0-d ones (the result of 1-D @ 1-D) C only;
- dtypes: bfloat16, float16, float8_e4m3fn, float8_e5m2 and both mixed fp8 pairs; out_dtype None or each of
  OUTPUT_DTYPES; a given out has any output dtype;
- the epilogue: alpha (1.0 or +-[0.25, 2)), c with beta (+-[0.25, 2), any output dtype and layout), bias (N,),
  (1, N) or (M, 1) in every VECTOR_DTYPES, contiguous or starting one element in, each activation, scale_a and
  scale_b as a Python float, a numpy float32, a float32 array of shape (1,) or (1, 1), rowwise 1-D or 2-D vectors
  (contiguous or offset), or blockwise tables (both; fp8, 2-D operands); each independently often absent;
- entries "run", "matmul" (with a NaN-poisoned out, or none) and "plan" (GemmPlan(...).launch(), out required);
  c aliasing out (matmul and plan: out *is* c, with c's dtype, layout and values);
- array kinds (the backend's business: "host", "device", "torch", "cupy"); "torch" cases hold no negative strides.

What they do not cover: `stream`, `ctas`, `kernel`, an explicit `config` (always None), out_dtype given as a
dtype object rather than its name, values other than standard normal (rounded to the dtype, zeros replaced by 1:
no inf, NaN, huge or subnormal-heavy inputs, no all-zero rows), scales other than uniform [0.25, 4), non-unit
strides of bias or scale vectors (illegal), 1-D operands against batched ones, blockwise scales on 1-D operands,
per-tensor scales that are device arrays of another framework's dtype, concurrency and repeated calls (the plan
cache), sizes beyond max_flops. Very large |ref| (fp16 overflow) is possible in principle but vanishingly rare
for these values.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import math
from typing import Callable

import ml_dtypes
import numpy as np

from .. import accuracy
from ..kernel.config import (ACTIVATIONS, FP8_DTYPES, OUTPUT_DTYPES, SCALE_BLOCK, VECTOR_DTYPES,
                             default_out_dtype)

ENTRIES = ("run", "matmul", "plan")
ARRAY_KINDS = ("host", "device", "torch", "cupy")
LAYOUTS = ("C", "F", "sliced", "reversed", "offset", "transposed", "broadcast")
VECTOR_LAYOUTS = ("C", "offset")              # bias and scale vectors: unit stride along their length
TILE_EDGES = (63, 64, 65, 127, 128, 129, 191, 192, 193, 255, 256, 257)
DTYPE_PAIRS = (("bfloat16", "bfloat16"), ("float16", "float16"), ("float8_e4m3fn", "float8_e4m3fn"),
               ("float8_e5m2", "float8_e5m2"), ("float8_e4m3fn", "float8_e5m2"), ("float8_e5m2", "float8_e4m3fn"))
DTYPE_PAIR_P = (0.28, 0.22, 0.16, 0.1, 0.12, 0.12)
TENSOR_SCALES = ("float", "np32", "arr1", "arr11")   # per tensor: 1.5, np.float32(1.5), [1.5], [[1.5]]
VECTOR_SCALES = ("vec", "vec2")                      # rowwise: (M,) / (N,), and (M, 1) / (1, N)
SCALE_FORMS = TENSOR_SCALES + VECTOR_SCALES + ("block",)
BIAS_SHAPES = ("n", "1n", "m1")                      # (N,), (1, N), (M, 1)
MAX_ELEMENTS = 2 ** 24            # the most elements of a, b and the result of one case together ...
ELEMENTS_PER_FLOP = 40            # ... and at most max_flops / 40 of them (K = 0 or N = 0 has no flops)

DTYPE_EXPR = {"bfloat16": "ml_dtypes.bfloat16", "float16": "np.float16", "float32": "np.float32",
              "float8_e4m3fn": "ml_dtypes.float8_e4m3fn", "float8_e5m2": "ml_dtypes.float8_e5m2"}

#: the values of every operand, c and bias; printed as is by `snippet`, and this module's own `values` is made from it
VALUES_SOURCE = '''\
def values(rng, shape, dtype):
    """Standard normal values rounded to dtype; zeros (an fp8/fp16 underflow) replaced by 1."""
    x = rng.standard_normal(shape, dtype=np.float32).astype(dtype)
    x[x == 0] = 1
    return x
'''
_BASE_NS = {"np": np, "ml_dtypes": ml_dtypes}
exec(VALUES_SOURCE, _BASE_NS)
values = _BASE_NS["values"]


# --- the shapes a spec implies ---------------------------------------------------------------------------------

def batch_shape(spec: dict) -> tuple[int, ...]:
    """The result's batch axes (numpy's broadcast of a's and b's)."""
    return tuple(np.broadcast_shapes(tuple(spec["a"]["batch"]), tuple(spec["b"]["batch"])))


def a_shape(spec: dict) -> tuple[int, ...]:
    return (spec["k"],) if spec["a"]["vector"] else tuple(spec["a"]["batch"]) + (spec["m"], spec["k"])


def b_shape(spec: dict) -> tuple[int, ...]:
    return (spec["k"],) if spec["b"]["vector"] else tuple(spec["b"]["batch"]) + (spec["k"], spec["n"])


def result_shape(spec: dict) -> tuple[int, ...]:
    """numpy's shape of a @ b."""
    return (batch_shape(spec) + (() if spec["a"]["vector"] else (spec["m"],))
            + (() if spec["b"]["vector"] else (spec["n"],)))


def frame_shape(spec: dict) -> tuple[int, ...]:
    """The result as (batch..., M, N), vector axes kept (extent 1)."""
    return batch_shape(spec) + (spec["m"], spec["n"])


def flops(spec: dict) -> int:
    return 2 * math.prod(batch_shape(spec)) * spec["m"] * spec["n"] * spec["k"]


def elements(spec: dict) -> int:
    return math.prod(a_shape(spec)) + math.prod(b_shape(spec)) + math.prod(result_shape(spec))


def out_dtype_of(spec: dict) -> str:
    """The dtype of the result: out's when given, else out_dtype, else the default for a's dtype."""
    if spec.get("out") is not None:
        return spec["out"]["dtype"]
    return spec["out_dtype"] or default_out_dtype(spec["a"]["dtype"])


def layouts_for(ndim: int, role: str, array_kind: str = "host") -> tuple[str, ...]:
    """The layouts an array of `ndim` axes may take in `role` ("a", "b", "c" or "out")."""
    if ndim == 0:
        allowed = ("C",)
    elif ndim == 1:
        allowed = ("C", "sliced", "reversed", "offset")
    else:
        allowed = ("C", "F", "sliced", "reversed", "offset", "transposed")
        if ndim >= 3 and role != "out":
            allowed += ("broadcast",)
    if array_kind == "torch":   # torch has no negative strides
        allowed = tuple(x for x in allowed if x != "reversed")
    return allowed


# --- validity ------------------------------------------------------------------------------------------------

def problems(spec: dict) -> list[str]:
    """What makes `spec` illegal (for numpy, for the API, or for this generator's own rules); [] when valid."""
    p = []
    try:
        for key in ("m", "n", "k", "seed"):
            if not isinstance(spec[key], int) or isinstance(spec[key], bool) or spec[key] < 0:
                p.append(f"{key}: a whole number >= 0")
        if spec["entry"] not in ENTRIES:
            p.append(f"entry {spec['entry']!r}")
        kind = spec["array_kind"]
        ad, bd = spec["a"]["dtype"], spec["b"]["dtype"]
        if (ad, bd) not in DTYPE_PAIRS:
            p.append(f"dtypes {ad} x {bd}")
        for name in ("a", "b"):
            op = spec[name]
            if any((not isinstance(e, int)) or e < 0 for e in op["batch"]):
                p.append(f"{name}: batch extents")
            if op["vector"] and (spec["a"]["batch"] or spec["b"]["batch"]):
                p.append(f"{name}: 1-D only without batch axes")
        if spec["a"]["vector"] and spec["m"] != 1:
            p.append("a is 1-D: M must be 1")
        if spec["b"]["vector"] and spec["n"] != 1:
            p.append("b is 1-D: N must be 1")
        try:
            batch_shape(spec)
        except ValueError:
            p.append("batch axes do not broadcast")
            return p
        for name, shape in (("a", a_shape(spec)), ("b", b_shape(spec))):
            if spec[name]["layout"] not in layouts_for(len(shape), name, kind):
                p.append(f"{name}: layout {spec[name]['layout']} for {len(shape)}-D ({kind})")
        rnd = len(result_shape(spec))
        if spec["out_dtype"] is not None and spec["out_dtype"] not in OUTPUT_DTYPES:
            p.append("out_dtype")
        alpha, beta = spec["alpha"], spec["beta"]
        if not isinstance(alpha, float) or not isinstance(beta, float):
            p.append("alpha, beta: floats")
        c = spec["c"]
        if (c is None) != (beta == 0.0):
            p.append("c is given iff beta != 0")
        if c is not None:
            if c["dtype"] not in OUTPUT_DTYPES:
                p.append("c: dtype")
            if c["layout"] not in layouts_for(rnd, "c", kind):
                p.append(f"c: layout {c['layout']} for {rnd}-D ({kind})")
        bias = spec["bias"]
        if bias is not None and (bias["shape"] not in BIAS_SHAPES or bias["dtype"] not in VECTOR_DTYPES
                                 or bias["layout"] not in VECTOR_LAYOUTS):
            p.append("bias")
        if spec["activation"] is not None and spec["activation"] not in ACTIVATIONS:
            p.append("activation")
        forms = []
        for name, op in (("scale_a", "a"), ("scale_b", "b")):
            s = spec[name]
            forms.append(None if s is None else s["form"])
            if s is None:
                continue
            if s["form"] not in SCALE_FORMS or s.get("layout", "C") not in VECTOR_LAYOUTS:
                p.append(f"{name}: form")
            if s["form"] in TENSOR_SCALES and not (isinstance(s["value"], float) and 0 < s["value"]):
                p.append(f"{name}: value")
            if s["form"] in VECTOR_SCALES + ("block",) and spec[op]["vector"]:
                p.append(f"{name}: rowwise and blockwise scales here are for 2-D (or batched) operands")
        if "block" in forms:
            if forms != ["block", "block"]:
                p.append("scale_a, scale_b: blockwise needs both tables")
            if ad not in FP8_DTYPES or bd not in FP8_DTYPES:
                p.append("scale_a, scale_b: blockwise is for fp8")
            if batch_shape(spec) or spec["a"]["batch"] or spec["b"]["batch"]:
                p.append("scale_a, scale_b: blockwise takes no batch")
        out, entry = spec["out"], spec["entry"]
        if entry == "run" and out is not None:
            p.append("run takes no out")
        if entry == "plan" and out is None:
            p.append("GemmPlan needs an out")
        if entry == "plan" and spec["out_dtype"] is not None:
            p.append("GemmPlan takes no out_dtype")
        if out is not None:
            if out["dtype"] not in OUTPUT_DTYPES:
                p.append("out: dtype")
            if out["layout"] not in layouts_for(rnd, "out", kind):
                p.append(f"out: layout {out['layout']} for {rnd}-D ({kind})")
            if spec["out_dtype"] is not None and spec["out_dtype"] != out["dtype"]:
                p.append("out_dtype contradicts out's dtype")
        if spec["c_is_out"]:
            if c is None or out is None:
                p.append("c is out: both needed")
            elif (out["dtype"], out["layout"]) != (c["dtype"], c["layout"]) or spec["out_dtype"] is not None:
                p.append("c is out: out takes c's dtype and layout, out_dtype None")
    except (KeyError, TypeError) as e:
        p.append(f"malformed: {type(e).__name__}: {e}")
    return p


def is_valid(spec: dict) -> bool:
    return not problems(spec)


# --- drawing -------------------------------------------------------------------------------------------------

def _dim(rng) -> int:
    r = rng.random()
    if r < 0.05:
        return 0
    if r < 0.13:
        return 1
    if r < 0.33:
        return int(rng.integers(2, 17))
    if r < 0.61:
        return int(rng.integers(17, 201))
    if r < 0.92:
        return int(rng.choice(TILE_EDGES))
    return int(rng.integers(201, 4097))


def _extent(rng) -> int:
    r = rng.random()
    if r < 0.04:
        return 0
    if r < 0.9:
        return int(rng.integers(1, 5))
    return int(rng.integers(5, 9))


def _signed(rng) -> float:
    """+-[0.25, 2), a multiple of 1/64 (exact in every float type, short to print)."""
    v = min(round(rng.uniform(0.25, 2.0) * 64) / 64, 127 / 64)
    return float(v if rng.random() < 0.5 else -v)


def _scale_value(rng) -> float:
    return float(min(round(rng.uniform(0.25, 4.0) * 64) / 64, 255 / 64))


def _layout(rng, ndim: int, role: str, kind: str) -> str:
    allowed = layouts_for(ndim, role, kind)
    weights = np.array([2.0 if x == "C" else 1.0 for x in allowed])
    return str(rng.choice(allowed, p=weights / weights.sum()))


def _element_cap(max_flops: float) -> float:
    return max(4096.0, min(max_flops / ELEMENTS_PER_FLOP, MAX_ELEMENTS))


def _fit(spec: dict, max_flops: float) -> None:
    """Halve the largest free size until the case fits max_flops and the element cap."""
    cap = _element_cap(max_flops)
    while flops(spec) > max_flops or elements(spec) > cap:
        free = [d for d in ("m", "n", "k") if not (d == "m" and spec["a"]["vector"])
                and not (d == "n" and spec["b"]["vector"])]
        d = max(free, key=lambda x: spec[x])
        if spec[d] <= 1:   # only the batch is left to give (a max_flops below 2 * 64)
            if not (spec["a"]["batch"] or spec["b"]["batch"]):
                break
            spec["a"]["batch"], spec["b"]["batch"] = [], []
            continue
        spec[d] //= 2


def draw_spec(rng: np.random.Generator, *, max_flops: float, entries=ENTRIES, array_kinds=("host",)) -> dict:
    """A random valid case (see the module docstring for what it covers)."""
    entry = str(rng.choice(list(entries)))
    kind = str(rng.choice(list(array_kinds)))
    ad, bd = DTYPE_PAIRS[int(rng.choice(len(DTYPE_PAIRS), p=DTYPE_PAIR_P))]
    nb = int(rng.choice([0, 1, 2], p=[0.55, 0.3, 0.15]))
    template = [_extent(rng) for _ in range(nb)]

    def operand_batch():
        bt = list(template)
        if bt and rng.random() < 0.25:               # lacks leading axes
            bt = bt[int(rng.integers(1, len(bt) + 1)):]
        return [1 if e != 1 and rng.random() < 0.2 else e for e in bt]   # extent 1 against the other's

    a_b, b_b = operand_batch(), operand_batch()
    a_vec = not a_b and not b_b and rng.random() < 0.12
    b_vec = not a_b and not b_b and rng.random() < 0.12
    spec = {
        "seed": int(rng.integers(0, 2 ** 31)), "entry": entry, "array_kind": kind,
        "m": 1 if a_vec else _dim(rng), "n": 1 if b_vec else _dim(rng), "k": _dim(rng),
        "a": {"dtype": ad, "batch": a_b, "vector": bool(a_vec), "layout": "C"},
        "b": {"dtype": bd, "batch": b_b, "vector": bool(b_vec), "layout": "C"},
        "out_dtype": None, "alpha": 1.0, "beta": 0.0, "c": None, "bias": None, "activation": None,
        "scale_a": None, "scale_b": None, "out": None, "c_is_out": False,
    }
    _fit(spec, max_flops)
    spec["a"]["layout"] = _layout(rng, len(a_shape(spec)), "a", kind)
    spec["b"]["layout"] = _layout(rng, len(b_shape(spec)), "b", kind)
    rnd = len(result_shape(spec))
    # the epilogue
    if rng.random() < 0.45:
        spec["alpha"] = _signed(rng)
    if rng.random() < 0.3:
        spec["beta"] = _signed(rng)
        spec["c"] = {"dtype": str(rng.choice(OUTPUT_DTYPES)), "layout": _layout(rng, rnd, "c", kind)}
    if rng.random() < 0.3:
        spec["bias"] = {"shape": str(rng.choice(BIAS_SHAPES)), "dtype": str(rng.choice(VECTOR_DTYPES)),
                        "layout": str(rng.choice(VECTOR_LAYOUTS))}
    if rng.random() < 0.35:
        spec["activation"] = str(rng.choice(ACTIVATIONS))
    blockable = (ad in FP8_DTYPES and bd in FP8_DTYPES and not a_b and not b_b and not a_vec and not b_vec)
    if blockable and rng.random() < 0.25:
        spec["scale_a"] = {"form": "block", "value": None, "layout": "C"}
        spec["scale_b"] = {"form": "block", "value": None, "layout": "C"}
    else:
        for name, vec in (("scale_a", a_vec), ("scale_b", b_vec)):
            if rng.random() < 0.35:
                forms = TENSOR_SCALES + (() if vec else VECTOR_SCALES)
                form = str(rng.choice(forms))
                spec[name] = {"form": form, "value": _scale_value(rng) if form in TENSOR_SCALES else None,
                              "layout": str(rng.choice(VECTOR_LAYOUTS)) if form in VECTOR_SCALES else "C"}
    if rng.random() < 0.6:
        spec["out_dtype"] = str(rng.choice(OUTPUT_DTYPES))
    # the entry's out
    if entry == "plan" or (entry == "matmul" and rng.random() < 0.65):
        c = spec["c"]
        if c is not None and rng.random() < 0.4:     # c is out
            if c["layout"] not in layouts_for(rnd, "out", kind):
                c["layout"] = _layout(rng, rnd, "out", kind)
            spec["out"] = dict(c)
            spec["c_is_out"], spec["out_dtype"] = True, None
        else:
            od = spec["out_dtype"] or str(rng.choice(OUTPUT_DTYPES))
            spec["out"] = {"dtype": od, "layout": _layout(rng, rnd, "out", kind)}
            if entry == "plan" or rng.random() < 0.5:
                spec["out_dtype"] = None
    bad = problems(spec)
    if bad:   # a bug of this generator
        raise AssertionError(f"draw_spec drew an invalid spec ({'; '.join(bad)}): {json.dumps(spec)}")
    return spec


# --- arrays from code ----------------------------------------------------------------------------------------

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
    ns = dict(_BASE_NS)
    exec(array_code(spec), ns)
    kwargs = {}
    for name in kwarg_names(spec):
        if name in ("c", "bias", "scale_a", "scale_b"):
            kwargs[name] = ns[name]
        else:
            kwargs[name] = spec[name]
    c = ns.get("c")
    return Case(entry=spec["entry"], array_kind=spec["array_kind"], a=ns["a"], b=ns["b"], kwargs=kwargs,
                out=ns.get("out"), c_is_out=bool(spec["c_is_out"]), spec=copy.deepcopy(spec),
                c_values=None if c is None else np.array(c, copy=True))


# --- the reference -------------------------------------------------------------------------------------------

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


# --- snippets ------------------------------------------------------------------------------------------------

def describe(spec: dict) -> str:
    """One line: what the case calls."""
    def arr(name, shape):
        return f"{spec[name]['dtype']}{shape}[{spec[name]['layout']}]"

    parts = [f"{spec['entry']}: {arr('a', a_shape(spec))} @ {arr('b', b_shape(spec))} -> {out_dtype_of(spec)}"
             f"{result_shape(spec)}"]
    if spec["out"] is not None:
        parts.append("into c" if spec["c_is_out"] else f"into out[{spec['out']['layout']}]")
    for name in kwarg_names(spec):
        if name in ("c", "out_dtype"):
            continue
        v = spec[name]
        if isinstance(v, dict):
            v = v.get("form") or v.get("shape")
            if name == "bias":
                v = f"{spec['bias']['shape']} {spec['bias']['dtype']}"
        parts.append(f"{name}={v}")
    if spec["c"] is not None:
        parts.append(f"c {spec['c']['dtype']}[{spec['c']['layout']}]")
    return ", ".join(str(p) for p in parts)


def snippet_arrays(spec: dict) -> str:
    """The runnable array-building part of `snippet`: imports, `values` and the case's statements (no ptxgemm)."""
    return f"import ml_dtypes\nimport numpy as np\n\n{VALUES_SOURCE}\n\n{array_code(spec)}"


def _call(func: str, positional: list[str], keywords: list[str], suffix: str = "", width: int = 100) -> str:
    """func(args...)suffix, wrapped into lines of at most `width` characters (4-space continuation)."""
    line = f"{func}({', '.join(positional + keywords)}){suffix}"
    if len(line) <= width:
        return line
    lines, cur = [], f"{func}("
    for i, arg in enumerate(positional + keywords):
        piece = arg + ("," if i < len(positional) + len(keywords) - 1 else f"){suffix}")
        if len(cur) + 1 + len(piece) > width and cur.strip() and not cur.endswith("("):
            lines.append(cur)
            cur = "    " + piece
        else:
            cur += ("" if cur.endswith("(") or not cur.strip() else " ") + piece
    lines.append(cur)
    return "\n".join(lines)


_ACTIVATION_CODE = {
    "relu": "want = np.maximum(want, 0)",
    "gelu": "want = 0.5 * want * (1 + np.tanh(np.sqrt(2 / np.pi) * (want + 0.044715 * want**3)))  # tanh form",
    "silu": "want = want / (1 + np.exp(-want))",
}


def snippet(spec: dict, entry_call: str | None = None) -> str:
    """A self-contained program that rebuilds the case (the statements build runs), makes the call and prints the
    worst error against a float64 reference. By default run takes the host arrays, and matmul and GemmPlan device
    arrays made by ptxgemm.to_device. `entry_call`, e.g. "ptxgemm.tools.emulator.matmul": the function (for entry "plan",
    the plan class) to call instead, with the host arrays themselves (a backend that takes numpy arrays)."""
    host = entry_call is not None
    entry = spec["entry"]
    func = entry_call or {"run": "ptxgemm.run", "matmul": "ptxgemm.matmul", "plan": "ptxgemm.GemmPlan"}[entry]
    module = func.rsplit(".", 1)[0] if "." in func else None
    imports = "import ptxgemm\n" + (f"import {module}\n" if module and module != "ptxgemm" else "")
    arrays = {"c", "bias"} | {name for name in ("scale_a", "scale_b")
                              if spec[name] is not None and spec[name]["form"] not in ("float", "np32")}
    dev = (lambda x: x) if host or entry == "run" else (lambda x: f"dev({x})")
    keywords = []
    for name in kwarg_names(spec):
        if name in ("alpha", "beta"):
            keywords.append(f"{name}={spec[name]!r}")
        elif name in ("activation", "out_dtype"):
            keywords.append(f"{name}={json.dumps(spec[name])}")
        elif name == "c" and spec["c_is_out"]:
            keywords.append("c=d_out")
        else:
            keywords.append(f"{name}={dev(name) if name in arrays else name}")
    call = []
    if spec["c_is_out"]:
        call.append("c0 = c.copy()  # c is out: its values before the call")
    if entry == "run":
        call.append("got = " + _call(func, ["a", "b"], keywords))
    else:
        if not host:
            call.append("dev = ptxgemm.to_device  # uploads a numpy array, strides kept")
        if spec["out"] is not None:
            call.append(f"d_out = {dev('out')}")
        positional = [dev("a"), dev("b")] + (["d_out"] if spec["out"] is not None else [])
        if entry == "matmul":
            got = _call(func, positional, keywords, "" if host else ".to_numpy()")
            call.append(f"got = np.asarray({got})" if host else f"got = {got}")
        else:
            call.append(_call(func, positional, keywords, ".launch()"))
            call.append("got = np.asarray(d_out)" if host else "got = d_out.to_numpy()")
    # the float64 reference
    ref = ["", "# float64 reference"]
    a_part = "a.astype(np.float64)" + ("[None, :]" if spec["a"]["vector"] else "")
    b_part = "b.astype(np.float64)" + ("[:, None]" if spec["b"]["vector"] else "")
    sa, sb = spec["scale_a"], spec["scale_b"]
    k, n = spec["k"], spec["n"]
    if sa is not None:
        a_part += {"block": f" * np.repeat(scale_a, {SCALE_BLOCK}, axis=1)[:, :{k}]",
                   "vec": " * scale_a.reshape(-1, 1)"}.get(sa["form"], " * scale_a")
    if sb is not None:
        b_part += {"block": f" * np.repeat(np.repeat(scale_b, {SCALE_BLOCK}, axis=0), {SCALE_BLOCK}, axis=1)"
                            f"[:{k}, :{n}]"}.get(sb["form"], " * scale_b")
    ref += [f"A = {a_part}", f"B = {b_part}"]
    vectors = spec["a"]["vector"] or spec["b"]["vector"]
    want = "A @ B" if spec["alpha"] == 1.0 else f"{spec['alpha']!r} * (A @ B)"
    if spec["c"] is not None:
        c_name = "c0" if spec["c_is_out"] else "c"
        beta = spec["beta"]
        want += f" {'-' if beta < 0 else '+'} {abs(beta)!r} * {c_name}.astype(np.float64)"
        if vectors:
            want += f".reshape({frame_shape(spec)!r})"
    if spec["bias"] is not None:
        want += " + bias.astype(np.float64)"
    ref.append(f"want = {want}")
    if spec["activation"] is not None:
        ref.append(_ACTIVATION_CODE[spec["activation"]])
    if vectors:
        ref.append(f"want = want.reshape({result_shape(spec)!r})")
    ref += ["err = np.abs(got.astype(np.float64) - want)",
            'print(got.shape, got.dtype, "worst |got - want|:", err.max(initial=0), "of max |want|:", '
            'np.abs(want).max(initial=0), "NaN:", np.isnan(err).sum())']
    head = (f'"""ptxgemm fuzz case: {describe(spec)}"""\n'
            f"# spec: {json.dumps(spec, separators=(',', ':'))}\n")
    return (head + "import ml_dtypes\nimport numpy as np\n\n" + imports + f"\n\n{VALUES_SOURCE}\n\n"
            + array_code(spec) + "\n" + "\n".join(call) + "\n" + "\n".join(ref) + "\n")


# --- shrinking -----------------------------------------------------------------------------------------------

def _fix_layouts(spec: dict) -> dict:
    """Layouts the spec's new shapes no longer take become "C"."""
    kind = spec["array_kind"]
    for name, nd in (("a", len(a_shape(spec))), ("b", len(b_shape(spec)))):
        if spec[name]["layout"] not in layouts_for(nd, name, kind):
            spec[name]["layout"] = "C"
    try:
        rnd = len(result_shape(spec))
    except ValueError:
        return spec
    for name in ("c", "out"):
        if spec[name] is not None and spec[name]["layout"] not in layouts_for(rnd, name, kind):
            spec[name]["layout"] = "C"
    if spec["c_is_out"] and spec["c"] is not None:
        spec["out"]["layout"] = spec["c"]["layout"]
    return spec


def _variant(spec: dict, edit: Callable[[dict], None]) -> dict:
    s = copy.deepcopy(spec)
    edit(s)
    return _fix_layouts(s)


def _smaller_sizes(v: int) -> list[int]:
    out = [0, 1] + [x for x in (2, 4, 8, 16, 32, 64, 128) if x < v] + [v // 2, v - 1]
    seen, res = set(), []
    for x in out:
        if 0 <= x < v and x not in seen:
            seen.add(x)
            res.append(x)
    return res


def _moves(spec: dict):
    """Simpler variants of `spec`, roughly most simplifying first (not all valid)."""
    def to_run(s):
        if s["out"] is not None and s["out_dtype"] is None:
            s["out_dtype"] = s["out"]["dtype"]
        s["entry"], s["out"], s["c_is_out"] = "run", None, False

    if spec["entry"] != "run":
        yield _variant(spec, to_run)
    if spec["entry"] == "plan":
        yield _variant(spec, lambda s: s.update(entry="matmul"))
    if spec["a"]["batch"] or spec["b"]["batch"]:
        yield _variant(spec, lambda s: (s["a"].update(batch=[]), s["b"].update(batch=[])))
        nbatch = len(batch_shape(spec))
        for i in range(nbatch):
            def drop(s, i=i):
                for op in (s["a"], s["b"]):
                    j = i - (nbatch - len(op["batch"]))
                    if j >= 0:
                        op["batch"] = op["batch"][:j] + op["batch"][j + 1:]
            yield _variant(spec, drop)
        for i in range(nbatch):
            def one(s, i=i):
                for op in (s["a"], s["b"]):
                    j = i - (nbatch - len(op["batch"]))
                    if j >= 0:
                        op["batch"][j] = 1
            yield _variant(spec, one)
    for name in ("a", "b"):
        if spec[name]["vector"]:
            yield _variant(spec, lambda s, name=name: s[name].update(vector=False))
    # the epilogue
    if spec["c"] is not None:
        def drop_c(s):
            s["c"], s["beta"] = None, 0.0
            if s["c_is_out"]:
                s["c_is_out"] = False
        yield _variant(spec, drop_c)
    if spec["c_is_out"]:
        yield _variant(spec, lambda s: s.update(c_is_out=False))
    for name in ("bias", "activation"):
        if spec[name] is not None:
            yield _variant(spec, lambda s, name=name: s.update({name: None}))
    if spec["scale_a"] is not None and spec["scale_a"]["form"] == "block":
        yield _variant(spec, lambda s: s.update(scale_a=None, scale_b=None))
    else:
        for name in ("scale_a", "scale_b"):
            if spec[name] is not None:
                yield _variant(spec, lambda s, name=name: s.update({name: None}))
            if spec[name] is not None and spec[name]["form"] != "float":
                yield _variant(spec, lambda s, name=name: s.update(
                    {name: {"form": "float", "value": s[name]["value"] or 1.0, "layout": "C"}}))
    if spec["alpha"] != 1.0:
        yield _variant(spec, lambda s: s.update(alpha=1.0))
    if spec["out_dtype"] is not None:
        yield _variant(spec, lambda s: s.update(out_dtype=None))
    if spec["entry"] == "matmul" and spec["out"] is not None:
        yield _variant(spec, lambda s: s.update(out=None, c_is_out=False))
    # sizes
    for d in ("m", "n", "k"):
        for v in _smaller_sizes(spec[d]):
            yield _variant(spec, lambda s, d=d, v=v: s.update({d: v}))
    # layouts and dtypes
    for name in ("a", "b"):
        if spec[name]["layout"] != "C":
            yield _variant(spec, lambda s, name=name: s[name].update(layout="C"))
    for name in ("c", "out"):
        if spec[name] is not None and spec[name]["layout"] != "C":
            def c_layout(s, name=name):
                s[name]["layout"] = "C"
                if s["c_is_out"]:
                    s["c"]["layout"] = s["out"]["layout"] = "C"
            yield _variant(spec, c_layout)
    for name in ("scale_a", "scale_b", "bias"):
        if spec[name] is not None and spec[name].get("layout", "C") != "C":
            yield _variant(spec, lambda s, name=name: s[name].update(layout="C"))
    if spec["a"]["dtype"] != spec["b"]["dtype"]:
        yield _variant(spec, lambda s: s["b"].update(dtype=s["a"]["dtype"]))
    if spec["a"]["dtype"] != "bfloat16":
        yield _variant(spec, lambda s: (s["a"].update(dtype="bfloat16"), s["b"].update(dtype="bfloat16")))


def shrink(spec: dict, still_fails: Callable[[dict], bool], max_tries: int = 300) -> dict:
    """Greedy shrinking: try simpler valid variants (`_moves`), keep the first for which still_fails(variant) is
    True (an exception counts as False), start over from it; stop when no move helps or max_tries calls are spent.
    array_kind and seed are kept."""
    best = copy.deepcopy(spec)
    tries = 0
    tried = set()
    while tries < max_tries:
        for cand in _moves(best):
            key = json.dumps(cand, sort_keys=True)
            if cand == best or key in tried or not is_valid(cand):
                continue
            tried.add(key)
            tries += 1
            try:
                ok = bool(still_fails(copy.deepcopy(cand)))
            except Exception:
                ok = False
            if ok:
                best = cand
                break
            if tries >= max_tries:
                return best
        else:
            return best
    return best


def size(spec: dict) -> tuple:
    """A measure of a spec's complexity (smaller is simpler), for tests of shrink."""
    return (elements(spec), len(batch_shape(spec)), len(kwarg_names(spec)),
            sum(spec[x]["layout"] != "C" for x in ("a", "b")))


# --- coverage ------------------------------------------------------------------------------------------------

def categories(spec: dict) -> set[str]:
    """The categories a spec falls in (the tests and the fuzzer's report count them)."""
    cats = {f"entry:{spec['entry']}", f"kind:{spec['array_kind']}",
            f"dtype:{spec['a']['dtype']}x{spec['b']['dtype']}", f"out_dtype:{spec['out_dtype']}",
            f"a_layout:{spec['a']['layout']}", f"b_layout:{spec['b']['layout']}",
            f"layout:{spec['a']['layout']}", f"layout:{spec['b']['layout']}",
            f"activation:{spec['activation']}", f"alpha:{'1' if spec['alpha'] == 1.0 else 'other'}"}
    batch = batch_shape(spec)
    cats.add(f"batch:{len(batch)}")
    for op in (spec["a"], spec["b"]):
        own = tuple(op["batch"])
        if batch and (len(own) < len(batch) or any(e == 1 and r != 1 for e, r in zip(own[::-1], batch[::-1]))):
            cats.add("batch:broadcast")
        if op["layout"] == "broadcast":
            cats.add("batch:stride0")
    if spec["a"]["vector"] and spec["b"]["vector"]:
        cats.add("vector:both")
    elif spec["a"]["vector"]:
        cats.add("vector:a")
    elif spec["b"]["vector"]:
        cats.add("vector:b")
    m, n, k = spec["m"], spec["n"], spec["k"]
    if k == 0:
        cats.add("size:K=0")
    if m == 0:
        cats.add("size:M=0")
    if n == 0:
        cats.add("size:N=0")
    if 0 in batch:
        cats.add("size:batch=0")
    if {m, n, k} & set(TILE_EDGES):
        cats.add("size:tile_edge")
    if max(m, n, k) > 512:
        cats.add("size:large")
    if any(1 < x < 200 and x % 8 for x in (m, n, k)):
        cats.add("size:unaligned")
    for name in ("scale_a", "scale_b"):
        if spec[name] is not None:
            cats.add(f"{name}:{spec[name]['form']}")
            if spec[name]["form"] in VECTOR_SCALES:
                cats.add(f"{name}_layout:{spec[name]['layout']}")
    if spec["bias"] is not None:
        cats |= {f"bias:{spec['bias']['shape']}", f"bias_dtype:{spec['bias']['dtype']}",
                 f"bias_layout:{spec['bias']['layout']}"}
    if spec["c"] is not None:
        cats |= {"c", f"c_dtype:{spec['c']['dtype']}", f"c_layout:{spec['c']['layout']}"}
    if spec["out"] is not None:
        cats |= {f"out_layout:{spec['out']['layout']}", f"out_given_dtype:{spec['out']['dtype']}"}
    elif spec["entry"] == "matmul":
        cats.add("out:allocated")
    if spec["c_is_out"]:
        cats.add("c_is_out")
    return cats


# --- illegal calls -------------------------------------------------------------------------------------------

def bad_specs() -> list[tuple[str, str, Callable[[], tuple[tuple, dict]]]]:
    """Illegal calls of ptxgemm.run: (label, the argument the ConfigError must name first, a builder of (args,
    kwargs)). Tiny arrays: each must be refused before anything reaches a GPU."""
    bf16, e4m3 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn

    def arr(shape, dtype=bf16):
        return np.ones(shape, dtype)

    def f32(shape):
        return np.ones(shape, np.float32)

    def ab(dtype=bf16, b_dtype=None, m=4, k=8, n=4):
        return arr((m, k), dtype), arr((k, n), dtype if b_dtype is None else b_dtype)

    def with_ab(dtype=bf16, b_dtype=None, m=4, k=8, n=4, **kwargs):
        return lambda: (ab(dtype, b_dtype, m, k, n), kwargs)

    def lazy(make_kwargs, dtype=bf16, k=8, batch=()):
        def make():
            a = arr(tuple(batch) + (4, k), dtype)
            b = arr((k, 4), dtype)
            return (a, b), make_kwargs()
        return make

    kb = -(-200 // SCALE_BLOCK)   # K = 200: two blocks, so no table is also a vector shape
    return [
        ("a is float32", "a", lambda: ((f32((4, 8)), f32((8, 4))), {})),
        ("a is float64", "a", lambda: ((np.ones((4, 8)), np.ones((8, 4))), {})),
        ("a is int8", "a", lambda: ((np.ones((4, 8), np.int8), np.ones((8, 4), np.int8)), {})),
        ("b is float32 against a bfloat16 a", "b", lambda: ((arr((4, 8)), f32((8, 4))), {})),
        ("bfloat16 x float16", "b", with_ab(bf16, np.float16)),
        ("float16 x bfloat16", "b", with_ab(np.float16, bf16)),
        ("bfloat16 x float8_e4m3fn", "b", with_ab(bf16, e4m3)),
        ("float8_e5m2 x bfloat16", "b", with_ab(ml_dtypes.float8_e5m2, bf16)),
        ("a is a list", "a", lambda: (([[1.0] * 8] * 4, arr((8, 4))), {})),
        ("K mismatch (8 vs 7)", "a @ b", lambda: ((arr((4, 8)), arr((7, 4))), {})),
        ("K mismatch against a 1-D b", "a @ b", lambda: ((arr((4, 8)), arr((7,))), {})),
        ("a is 0-d", "a", lambda: ((arr(()), arr((8, 4))), {})),
        ("b is 0-d", "b", lambda: ((arr((4, 8)), arr(())), {})),
        ("batch axes 2 and 3 do not broadcast", "a @ b", lambda: ((arr((2, 4, 8)), arr((3, 8, 4))), {})),
        ("out_dtype 'float99'", "out_dtype", with_ab(out_dtype="float99")),
        ("out_dtype 'int8'", "out_dtype", with_ab(out_dtype="int8")),
        ("out_dtype float64", "out_dtype", with_ab(out_dtype=np.float64)),
        ("out_dtype float8_e4m3fn", "out_dtype", with_ab(out_dtype=e4m3)),
        ("out_dtype 3 (not a dtype)", "out_dtype", with_ab(out_dtype=3)),
        ("c without beta", "c", lazy(lambda: {"c": f32((4, 4))})),
        ("beta without c", "beta", with_ab(beta=0.5)),
        ("c of shape (4, 5) for a (4, 4) result", "c", lazy(lambda: {"c": f32((4, 5)), "beta": 1.0})),
        ("c of shape (4,) for a (4, 4) result (broadcastable, but not the result's shape)", "c",
         lazy(lambda: {"c": f32((4,)), "beta": 1.0})),
        ("c of shape (1, 4, 4) for a (2, 4, 4) result", "c",
         lazy(lambda: {"c": f32((1, 4, 4)), "beta": 1.0}, batch=(2,))),
        ("c of dtype int32", "c", lazy(lambda: {"c": np.ones((4, 4), np.int32), "beta": 1.0})),
        ("c of dtype float64", "c", lazy(lambda: {"c": np.ones((4, 4)), "beta": 1.0})),
        ("c is a list", "c", lazy(lambda: {"c": [[1.0] * 4] * 4, "beta": 1.0})),
        ("bias of shape (5,)", "bias", lazy(lambda: {"bias": f32((5,))})),
        ("bias of shape (4, 4)", "bias", lazy(lambda: {"bias": f32((4, 4))})),
        ("bias of shape (1, 4, 1)", "bias", lazy(lambda: {"bias": f32((1, 4, 1))})),
        ("bias of dtype int32", "bias", lazy(lambda: {"bias": np.ones((4,), np.int32)})),
        ("bias of dtype float64", "bias", lazy(lambda: {"bias": np.ones((4,))})),
        ("bias with stride 2 elements", "bias", lazy(lambda: {"bias": f32((8,))[::2]})),
        ("(M, 1) bias with stride 2 elements", "bias", lazy(lambda: {"bias": f32((8, 1))[::2]})),
        ("scale_a a float64 vector", "scale_a", lazy(lambda: {"scale_a": np.ones((4,))})),
        ("scale_a a 1-element float64 array", "scale_a", lazy(lambda: {"scale_a": np.ones((1,))})),
        ("scale_b a bfloat16 vector", "scale_b", lazy(lambda: {"scale_b": arr((4,))})),
        ("scale_a of shape (5,)", "scale_a", lazy(lambda: {"scale_a": f32((5,))})),
        ("scale_b of shape (4, 1) (a's form)", "scale_b", lazy(lambda: {"scale_b": f32((4, 1))})),
        ("scale_a with stride 2 elements", "scale_a", lazy(lambda: {"scale_a": f32((8,))[::2]})),
        ("scale_a a string", "scale_a", lazy(lambda: {"scale_a": "2"})),
        ("only scale_a's block table", "scale_a, scale_b",
         lazy(lambda: {"scale_a": f32((4, kb))}, e4m3, 200)),
        ("only scale_b's block table", "scale_a, scale_b",
         lazy(lambda: {"scale_b": f32((kb, 1))}, e4m3, 200)),
        ("rowwise scale_a with a block table scale_b", "scale_a, scale_b",
         lazy(lambda: {"scale_a": f32((4,)), "scale_b": f32((kb, 1))}, e4m3, 200)),
        ("scale_a's block table of shape (4, 3) for K = 200", "scale_a",
         lazy(lambda: {"scale_a": f32((4, 3)), "scale_b": f32((kb, 1))}, e4m3, 200)),
        ("blockwise scales with bfloat16 inputs", "scale_a, scale_b",
         lazy(lambda: {"scale_a": f32((4, kb)), "scale_b": f32((kb, 1))}, bf16, 200)),
        ("blockwise scales with a batch", "scale_a, scale_b",
         lazy(lambda: {"scale_a": f32((4, kb)), "scale_b": f32((kb, 1))}, e4m3, 200, (2,))),
        ("a block table in Fortran order", "scale_a",
         lazy(lambda: {"scale_a": np.asfortranarray(f32((4, kb))), "scale_b": f32((kb, 1))}, e4m3, 200)),
        ("activation 'tanh'", "activation", with_ab(activation="tanh")),
        ("activation '' (an empty name)", "activation", with_ab(activation="")),
        ("activation 'GELU' (case matters)", "activation", with_ab(activation="GELU")),
        ("alpha '2' (a string)", "alpha", with_ab(alpha="2")),
        ("alpha True", "alpha", with_ab(alpha=True)),
        ("alpha a 1-element array", "alpha", with_ab(alpha=np.ones(1, np.float32))),
        ("alpha a complex number", "alpha", with_ab(alpha=1j)),
        ("beta '1' (a string) with c", "beta", lazy(lambda: {"c": f32((4, 4)), "beta": "1"})),
        ("config 'pp128x128' (a str)", "config", with_ab(config="pp128x128")),
        ("config 3", "config", with_ab(config=3)),
    ]
