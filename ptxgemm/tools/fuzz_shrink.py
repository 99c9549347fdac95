"""Shrinking a failing fuzz spec to a smaller one that still fails, and the coverage categories a spec falls in."""
from __future__ import annotations

import copy
import json
from typing import Callable

from .fuzz_build import kwarg_names
from .fuzz_cases import (TILE_EDGES, VECTOR_SCALES, a_shape, b_shape, batch_shape, config_family, elements, is_valid,
                         layouts_for, result_shape)


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
    if spec.get("ctas") is not None:     # the full grid
        yield _variant(spec, lambda s: s.update(ctas=None))
    if spec.get("config") is not None:   # the selection's own pick instead of the fuzzer's tile
        yield _variant(spec, lambda s: s.update(config=None, ctas=None))
    if spec["scale_a"] is not None and spec["scale_a"]["form"] == "block":
        yield _variant(spec, lambda s: s.update(scale_a=None, scale_b=None, config=None))
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
    if spec.get("training"):
        cats.add(f"training:{spec['training']}")
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
    config = spec.get("config")
    if config is not None:
        cats.add("config:" + config_family(config))
    if spec.get("ctas") is not None:
        cats.add("ctas")
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
