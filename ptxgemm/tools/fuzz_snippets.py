"""A fuzz case as text: a one-line description and a standalone Python snippet that reproduces the call (what a
report of a wrong result carries)."""
from __future__ import annotations

import json

from ..kernel.config import SCALE_BLOCK
from .fuzz_build import array_code, kwarg_names
from .fuzz_cases import VALUES_SOURCE, a_shape, b_shape, frame_shape, out_dtype_of, result_shape


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
        elif name == "config":
            keywords.append(f"config=ptxgemm.GemmConfig.from_tag({spec[name]!r})")
        elif name == "ctas":
            keywords.append(f"ctas={spec[name]}")
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
        spanned = spec["out"] is not None and not host
        if spec["out"] is not None:
            call.append(f"d_out = {dev('out')}")
        if spanned:   # an out with gaps is a view into its upload's span: only out's own bytes there may change
            imports += "from ptxgemm.tools.fuzz import span_bytes, written_outside\n"
            call.append("span = span_bytes(d_out)  # out's upload span before the call (None: no gaps)")
        positional = [dev("a"), dev("b")] + (["d_out"] if spec["out"] is not None else [])
        if entry == "matmul":
            got = _call(func, positional, keywords, "" if host else ".to_numpy()")
            call.append(f"got = np.asarray({got})" if host else f"got = {got}")
        else:
            call.append(_call(func, positional, keywords, ".launch()"))
            call.append("got = np.asarray(d_out)" if host else "got = d_out.to_numpy()")
        if spanned:
            call.append("print(\"bytes outside out's elements written:\", written_outside(d_out, out, span))")
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
    if spec.get("device") and not host:   # a case drawn on another GPU: its uploads and its call there
        call = [f"with ptxgemm.device({spec['device']}):"] + ["    " + line for text in call
                                                              for line in text.splitlines()]
    head = (f'"""ptxgemm fuzz case: {describe(spec)}"""\n'
            f"# spec: {json.dumps(spec, separators=(',', ':'))}\n")
    return (head + "import ml_dtypes\nimport numpy as np\n\n" + imports + f"\n\n{VALUES_SOURCE}\n\n"
            + array_code(spec) + "\n" + "\n".join(call) + "\n" + "\n".join(ref) + "\n")
