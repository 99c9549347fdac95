"""ptxgemm.tools.fuzz_cases on the CPU: the specs are valid, deterministic and cover every category; the reference, the
verdict, the shrinker, the snippets and the catalog of illegal calls do what they say."""
from __future__ import annotations

import copy
import io
import json
import math
import sys
import types
from contextlib import redirect_stdout

import ml_dtypes
import numpy as np
import pytest

import ptxgemm
from ptxgemm.accuracy import DTYPES, activation64
from ptxgemm.errors import ConfigError
from ptxgemm.tools import fuzz_build, fuzz_cases as fc, fuzz_illegal, fuzz_shrink, fuzz_snippets

MAX_FLOPS = 2e7
#: (seed, array kinds) of the 500 random specs: 100 per seed
SEEDS = [(0, ("host",)), (1, ("host",)), (2, ("host", "torch")), (3, ("torch",)), (4, ("host", "device"))]


def _specs():
    out = []
    for seed, kinds in SEEDS:
        rng = np.random.default_rng(seed)
        out += [fc.draw_spec(rng, max_flops=MAX_FLOPS, array_kinds=kinds) for _ in range(100)]
    return out


SPECS = _specs()


def _arrays(case) -> dict:
    arrs = {"a": case.a, "b": case.b, **{k: v for k, v in case.kwargs.items() if isinstance(v, np.ndarray)}}
    if case.out is not None:
        arrs["out"] = case.out
    return arrs


def _fingerprint(x: np.ndarray) -> tuple:
    return (x.shape, x.strides, x.dtype.name, np.ascontiguousarray(x).tobytes())


def _numpy_shape(a, b) -> tuple:
    """numpy's own shape of a @ b, on zero-stride stand-ins with K = 1 (K does not change the shape)."""
    z = np.zeros((), np.float32)
    a_shape = a.shape[:-1] + (1,)
    b_shape = (1,) if b.ndim == 1 else b.shape[:-2] + (1, b.shape[-1])
    if a.shape[-1] != (b.shape[0] if b.ndim == 1 else b.shape[-2]):
        raise ValueError("K differs")
    return np.matmul(np.broadcast_to(z, a_shape), np.broadcast_to(z, b_shape)).shape


def _check_layout(x: np.ndarray, layout: str, role: str) -> None:
    """The array's strides are what its layout's name says."""
    item = x.itemsize
    if x.size <= 1 or x.ndim == 0:
        return
    st, sh = x.strides, x.shape
    if layout == "C":
        assert x.flags.c_contiguous, (role, sh, st)
    elif layout == "reversed":
        assert all(s < 0 for s, e in zip(st, sh) if e > 1), (role, sh, st)
    elif layout == "broadcast":
        assert st[0] == 0, (role, sh, st)
    elif layout == "offset":   # one element into an aligned allocation
        assert x.ctypes.data % (2 * item) == item, (role, sh, st)
    elif layout == "sliced":
        assert st[-1] == 2 * item or sh[-1] == 1, (role, sh, st)
    elif layout == "transposed":   # base.T: every axis reversed in memory order
        assert x.flags.f_contiguous, (role, sh, st)
    elif layout == "F" and sh[-2] > 1:
        assert st[-2] == item, (role, sh, st)


REQUIRED = (
    {f"layout:{x}" for x in fc.LAYOUTS}
    | {f"dtype:{a}x{b}" for a, b in fc.DTYPE_PAIRS}
    | {f"out_dtype:{x}" for x in (None, *ptxgemm.kernel.config.OUTPUT_DTYPES)}
    | {"vector:a", "vector:b", "vector:both", "batch:1", "batch:2", "batch:broadcast", "batch:stride0",
       "size:K=0", "size:M=0", "size:N=0", "size:tile_edge", "size:unaligned"}
    | {f"{s}:{f}" for s in ("scale_a", "scale_b") for f in fc.SCALE_FORMS}
    | {f"{s}_layout:{x}" for s in ("scale_a", "scale_b") for x in fc.VECTOR_LAYOUTS}
    | {f"bias:{x}" for x in fc.BIAS_SHAPES} | {f"bias_dtype:{x}" for x in ptxgemm.kernel.config.VECTOR_DTYPES}
    | {f"bias_layout:{x}" for x in fc.VECTOR_LAYOUTS}
    | {f"c_dtype:{x}" for x in ptxgemm.kernel.config.OUTPUT_DTYPES} | {f"c_layout:{x}" for x in fc.LAYOUTS}
    | {f"out_layout:{x}" for x in fc.LAYOUTS if x != "broadcast"}
    | {f"activation:{x}" for x in (None, "relu", "gelu", "silu")}
    | {"alpha:1", "alpha:other", "c_is_out", "out:allocated", "entry:run", "entry:matmul", "entry:plan",
       "kind:host", "kind:torch", "kind:device", "config:swap-ab-blockwise", "config:deep-ring-blockwise",
       "config:split-pair", "config:stream-k", "config:serpentine", "config:fp8-wave",
       "ctas"}
)


def test_random_specs_are_valid_deterministic_and_cover_every_category():
    seen = set()
    for spec in SPECS:
        assert fc.is_valid(spec), fc.problems(spec)
        assert json.loads(json.dumps(spec)) == spec          # JSON-ready, nothing lost
        assert fc.flops(spec) <= MAX_FLOPS
        seen |= fuzz_shrink.categories(spec)
        one, two = fuzz_build.build(spec), fuzz_build.build(copy.deepcopy(spec))
        arrs = _arrays(one)
        assert arrs.keys() == _arrays(two).keys()
        for name, x in arrs.items():
            assert _fingerprint(x) == _fingerprint(_arrays(two)[name]), name
        assert one.a.shape == fc.a_shape(spec) and one.b.shape == fc.b_shape(spec)
        assert one.a.dtype.name == spec["a"]["dtype"] and one.b.dtype.name == spec["b"]["dtype"]
        _check_layout(one.a, spec["a"]["layout"], "a")
        _check_layout(one.b, spec["b"]["layout"], "b")
        shape = _numpy_shape(one.a, one.b)
        assert fc.result_shape(spec) == shape
        ref, bound = fuzz_build.reference(one)
        assert ref.shape == bound.shape == shape
        assert np.all(np.isfinite(ref)) and np.all(bound > 0)
        if "c" in one.kwargs:
            assert one.kwargs["c"].shape == shape
            _check_layout(one.kwargs["c"], spec["c"]["layout"], "c")
        if one.out is not None:
            assert one.out.shape == shape and one.out.dtype.name == spec["out"]["dtype"]
            _check_layout(one.out, spec["out"]["layout"], "out")
            assert one.out.size == 0 or 0 not in [s for s, e in zip(one.out.strides, one.out.shape) if e > 1]
        if one.c_is_out:
            assert one.out is one.kwargs["c"] and "out_dtype" not in one.kwargs
        elif one.out is not None:
            assert np.all(np.isnan(one.out.astype(np.float32)))
        if spec["entry"] == "plan":
            assert one.out is not None and "out_dtype" not in one.kwargs
        if spec["entry"] == "run":
            assert one.out is None
        if spec["array_kind"] == "torch":
            assert all(s >= 0 for x in arrs.values() for s in x.strides), fuzz_snippets.describe(spec)
        for name in ("alpha", "beta", "activation", "out_dtype"):
            assert name not in one.kwargs or one.kwargs[name] == spec[name]
        assert ("c" in one.kwargs) == ("beta" in one.kwargs) == (spec["c"] is not None)
    missing = REQUIRED - seen
    assert not missing, sorted(map(str, missing))


def test_scales_and_values_are_in_their_ranges():
    for spec in SPECS[:150]:
        case = fuzz_build.build(spec)
        for name in ("scale_a", "scale_b"):
            s = case.kwargs.get(name)
            if isinstance(s, np.ndarray):
                assert s.dtype == np.float32 and np.all((s >= 0.25) & (s <= 4)), (name, s)
            elif s is not None:
                assert 0.25 <= float(s) <= 4
        for name in ("alpha", "beta"):
            if name in case.kwargs:
                assert 0.25 <= abs(case.kwargs[name]) < 2
        assert not np.any(case.a.astype(np.float32) == 0) and not np.any(case.b.astype(np.float32) == 0)


# --- hand-made specs -------------------------------------------------------------------------------------------

def make_spec(m=5, n=6, k=7, dtype="bfloat16", b_dtype=None, **kw) -> dict:
    spec = {"seed": 11, "entry": "run", "array_kind": "host", "m": m, "n": n, "k": k,
            "a": {"dtype": dtype, "batch": [], "vector": False, "layout": "C"},
            "b": {"dtype": b_dtype or dtype, "batch": [], "vector": False, "layout": "C"},
            "out_dtype": None, "alpha": 1.0, "beta": 0.0, "c": None, "bias": None, "activation": None,
            "scale_a": None, "scale_b": None, "out": None, "c_is_out": False}
    for key, value in kw.items():
        if key in ("a", "b"):
            spec[key].update(value)
        else:
            spec[key] = value
    assert fc.is_valid(spec), fc.problems(spec)
    return spec


def test_reference_of_a_plain_product_is_numpys_in_float64():
    spec = make_spec(m=70, n=33, k=129, a={"layout": "F"}, b={"layout": "reversed"})
    case = fuzz_build.build(spec)
    ref, bound = fuzz_build.reference(case)
    assert np.array_equal(ref, case.a.astype(np.float64) @ case.b.astype(np.float64))
    absprod = np.abs(case.a.astype(np.float64)) @ np.abs(case.b.astype(np.float64))
    want = 2.0 ** -8 * np.abs(ref) + (1 + 2.0 ** -8) * 1.13 * (8 * 2.0 ** -23 * np.sqrt(129) * absprod
                                                               + 5 * 2.0 ** -24 * absprod)
    assert np.allclose(bound, want, rtol=1e-9, atol=1e-30)


def test_reference_of_an_epilogue_against_a_direct_formula():
    spec = make_spec(m=9, n=13, k=40, dtype="float16", a={"batch": [3], "layout": "transposed"},
                     b={"batch": [1], "layout": "sliced"}, alpha=-1.25, beta=0.75,
                     c={"dtype": "float16", "layout": "F"}, bias={"shape": "m1", "dtype": "bfloat16",
                                                                 "layout": "offset"},
                     activation="gelu", scale_a={"form": "vec", "value": None, "layout": "offset"},
                     scale_b={"form": "arr11", "value": 1.5, "layout": "C"}, out_dtype="float32")
    case = fuzz_build.build(spec)
    kw = case.kwargs
    assert set(kw) == {"c", "alpha", "beta", "bias", "activation", "scale_a", "scale_b", "out_dtype"}
    ref, _ = fuzz_build.reference(case)
    want = np.empty((3, 9, 13))
    for p in range(3):
        for i in range(9):
            for j in range(13):
                acc = sum(float(case.a[p, i, q]) * float(kw["scale_a"][i]) * float(case.b[0, q, j]) * 1.5
                          for q in range(40))
                v = -1.25 * acc + 0.75 * float(kw["c"][p, i, j]) + float(kw["bias"][i, 0])
                want[p, i, j] = 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))
    assert np.allclose(ref, want, rtol=1e-12, atol=1e-12)


def test_reference_of_blockwise_scales_against_a_loop_over_blocks():
    spec = make_spec(m=6, n=140, k=300, dtype="float8_e4m3fn", b_dtype="float8_e5m2",
                     scale_a={"form": "block", "value": None, "layout": "C"},
                     scale_b={"form": "block", "value": None, "layout": "C"}, bias={"shape": "n", "dtype": "float32",
                                                                                  "layout": "C"})
    case = fuzz_build.build(spec)
    sa, sb = case.kwargs["scale_a"], case.kwargs["scale_b"]
    assert sa.shape == (6, 3) and sb.shape == (3, 2)
    a, b = case.a.astype(np.float64), case.b.astype(np.float64)
    want = np.zeros((6, 140))
    for kb in range(3):
        ks = slice(128 * kb, 128 * (kb + 1))
        part = a[:, ks] @ b[ks, :]
        want += part * sa[:, kb][:, None] * np.repeat(sb[kb], 128)[None, :140]
    want += case.kwargs["bias"].astype(np.float64)
    ref, bound = fuzz_build.reference(case)
    assert np.allclose(ref, want, rtol=1e-12, atol=1e-12)
    absprod = np.abs(a * np.repeat(sa, 128, 1)[:, :300]) @ np.abs(b * np.repeat(np.repeat(sb, 128, 0), 128, 1)[:300,
                                                                                                         :140])
    assert np.all(bound >= 2.0 ** -9 * absprod)   # the fp8 accumulation rule (mixed pair included)


@pytest.mark.parametrize("act", [None, "relu", "silu", "gelu"])
def test_k0_gives_the_activation_of_c_and_bias(act):
    spec = make_spec(m=4, n=6, k=0, alpha=1.75, beta=-0.5, c={"dtype": "float32", "layout": "reversed"},
                     bias={"shape": "1n", "dtype": "float16", "layout": "C"}, activation=act,
                     scale_a={"form": "vec2", "value": None, "layout": "C"})
    case = fuzz_build.build(spec)
    ref, bound = fuzz_build.reference(case)
    pre = -0.5 * case.kwargs["c"].astype(np.float64) + case.kwargs["bias"].astype(np.float64)
    assert np.allclose(ref, activation64(act, pre), rtol=1e-14, atol=0)
    assert np.all(bound <= 2.0 ** -8 * np.abs(ref) + 2.0 ** -10 * np.abs(pre) + 1e-30)   # no product term


def test_vectors_and_empty_results():
    spec = make_spec(m=1, n=1, k=37, a={"vector": True, "layout": "reversed"}, b={"vector": True, "layout": "sliced"},
                     c={"dtype": "bfloat16", "layout": "C"}, beta=2.0 - 1 / 64, out_dtype="float16")
    case = fuzz_build.build(spec)
    ref, bound = fuzz_build.reference(case)
    assert ref.shape == () == bound.shape
    want = np.dot(case.a.astype(np.float64), case.b.astype(np.float64)) + (2 - 1 / 64) * float(case.kwargs["c"])
    assert np.isclose(float(ref), want, rtol=1e-14)
    assert fuzz_build.verdict(case, ref.astype(np.float16)).ok
    spec = make_spec(m=0, n=6, k=9, a={"batch": [2, 1]}, b={"batch": [3]}, bias={"shape": "n", "dtype": "float32",
                                                                                "layout": "C"})
    case = fuzz_build.build(spec)
    ref, bound = fuzz_build.reference(case)
    assert ref.shape == (2, 3, 0, 6)
    assert fuzz_build.verdict(case, np.zeros((2, 3, 0, 6), ml_dtypes.bfloat16)).ok
    spec = make_spec(m=5, n=1, k=3, b={"vector": True})
    ref, _ = fuzz_build.reference(fuzz_build.build(spec))
    assert ref.shape == (5,)


# --- the verdict -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("out_dtype", ["bfloat16", "float16", "float32"])
def test_verdict_passes_the_exact_answer_and_catches_a_wrong_block_or_a_nan(out_dtype):
    spec = make_spec(m=64, n=80, k=256, dtype="bfloat16", a={"batch": [2]}, out_dtype=out_dtype, alpha=0.5,
                     activation="silu", bias={"shape": "n", "dtype": "float32", "layout": "C"})
    case = fuzz_build.build(spec)
    ref, _ = fuzz_build.reference(case)
    dt = DTYPES[out_dtype]
    assert fuzz_build.verdict(case, ref.astype(dt)).ok
    wrong = ref.copy()
    wrong[1, 16:32, 48:64] *= 1.03
    v = fuzz_build.verdict(case, wrong.astype(dt))
    assert not v.ok and v.bad_blocks == [(5, 3)]   # problem 1's rows come after problem 0's 64
    nan = ref.astype(dt)
    nan[0, 3, 7] = np.nan
    v = fuzz_build.verdict(case, nan)
    assert not v.ok and v.nan_elements == 1
    with pytest.raises(ValueError):
        fuzz_build.verdict(case, ref[0])


def test_verdict_on_vectors_and_0d():
    spec = make_spec(m=1, n=7, k=20, a={"vector": True})
    case = fuzz_build.build(spec)
    ref, _ = fuzz_build.reference(case)
    assert fuzz_build.verdict(case, ref.astype(ml_dtypes.bfloat16)).ok
    bad = ref.copy()
    bad[3] = -bad[3] - 1
    assert not fuzz_build.verdict(case, bad).ok


# --- shrinking -------------------------------------------------------------------------------------------------

def _big_failing_spec():
    return make_spec(m=200, n=129, k=257, dtype="float8_e5m2", b_dtype="float8_e4m3fn",
                     a={"batch": [3, 1], "layout": "transposed"}, b={"batch": [2], "layout": "broadcast"},
                     alpha=1.5, beta=-0.25, c={"dtype": "float16", "layout": "sliced"},
                     bias={"shape": "m1", "dtype": "float16", "layout": "offset"}, activation="relu",
                     scale_a={"form": "vec", "value": None, "layout": "offset"},
                     scale_b={"form": "np32", "value": 2.5, "layout": "C"}, out_dtype="float32",
                     entry="matmul", out={"dtype": "float32", "layout": "reversed"})


def test_shrink_finds_a_small_spec_that_still_fails():
    calls = []

    def fails(s):
        assert fc.is_valid(s), fc.problems(s)
        calls.append(s)
        if s["k"] == 3:
            raise RuntimeError("an exception counts as not failing")
        return s["a"]["dtype"] == "float8_e5m2" and s["m"] > 3

    start = _big_failing_spec()
    assert fails(start)
    small = fuzz_shrink.shrink(start, fails)
    assert fails(small) and fc.is_valid(small)
    assert len(calls) <= 300 + 2
    assert (small["m"], small["n"], small["k"]) == (4, 0, 0)
    assert small["a"]["dtype"] == small["b"]["dtype"] == "float8_e5m2"
    assert not small["a"]["batch"] and not small["b"]["batch"]
    assert small["a"]["layout"] == small["b"]["layout"] == "C"
    assert fuzz_build.kwarg_names(small) == []
    assert small["entry"] == "run" and small["out"] is None
    assert small["array_kind"] == start["array_kind"] and small["seed"] == start["seed"]
    assert fuzz_shrink.size(small) < fuzz_shrink.size(start)
    assert start == _big_failing_spec()      # the input is left alone


def test_shrink_respects_max_tries_and_keeps_what_fails():
    calls = []

    def fails(s):
        calls.append(1)
        return True   # everything fails: each try is kept

    start = _big_failing_spec()
    small = fuzz_shrink.shrink(start, fails, max_tries=5)
    assert len(calls) == 5 and fc.is_valid(small)
    assert fuzz_shrink.shrink(start, lambda s: False, max_tries=50) == start


def test_shrink_keeps_c_and_beta_and_both_block_tables_together():
    spec = make_spec(m=130, n=140, k=300, dtype="float8_e4m3fn", scale_a={"form": "block", "value": None,
                                                                         "layout": "C"},
                     scale_b={"form": "block", "value": None, "layout": "C"}, beta=0.5,
                     c={"dtype": "float32", "layout": "C"}, entry="matmul", out={"dtype": "float32", "layout": "C"},
                     c_is_out=True)
    spec["out"] = dict(spec["c"])
    assert fc.is_valid(spec)

    def fails(s):
        assert fc.is_valid(s), fc.problems(s)
        return s["scale_a"] is not None and s["m"] >= 2

    small = fuzz_shrink.shrink(spec, fails)
    assert small["scale_a"]["form"] == small["scale_b"]["form"] == "block" and small["m"] == 2
    assert small["c"] is None and small["beta"] == 0.0 and not small["c_is_out"]


# --- snippets --------------------------------------------------------------------------------------------------

def _stub_ptxgemm(result_shape):
    """A stand-in for ptxgemm where the snippet's call returns zeros: only its reference is looked at."""
    stub = types.ModuleType("ptxgemm")

    class Dev:
        def __init__(self, x):
            self.x = x

        def to_numpy(self):
            return np.zeros(result_shape, np.float32)

    class Plan:
        def __init__(self, *args, **kwargs):
            pass

        def launch(self):
            pass

    stub.to_device = Dev
    stub.run = lambda *args, **kwargs: np.zeros(result_shape, np.float32)
    stub.matmul = lambda *args, **kwargs: Dev(None)
    stub.GemmPlan = Plan
    stub.GemmConfig = types.SimpleNamespace(from_tag=lambda tag: tag)   # a drawn swap-AB config's tag
    return stub


def test_snippets_compile_rebuild_the_arrays_and_compute_the_same_reference(monkeypatch):
    for spec in SPECS[::3]:
        text = fuzz_snippets.snippet(spec)
        compile(text, "<snippet>", "exec")
        emulated = {"run": "ptxgemm.tools.emulator.run", "matmul": "ptxgemm.tools.emulator.matmul",
                    "plan": "ptxgemm.tools.emulator.GemmPlan"}[spec["entry"]]
        compile(fuzz_snippets.snippet(spec, entry_call=emulated), "<snippet>", "exec")
        assert fuzz_build.array_code(spec) in text and "ptxgemm" not in fuzz_snippets.snippet_arrays(spec)
        ns = {}
        exec(fuzz_snippets.snippet_arrays(spec), ns)
        case = fuzz_build.build(spec)
        for name, x in _arrays(case).items():
            assert _fingerprint(ns[name]) == _fingerprint(x), (name, fuzz_snippets.describe(spec))
        # the whole program, with a stand-in ptxgemm: its own float64 reference agrees with fuzz_cases.reference
        monkeypatch.setitem(sys.modules, "ptxgemm", _stub_ptxgemm(fc.result_shape(spec)))
        ns = {"__name__": "__main__"}
        with redirect_stdout(io.StringIO()) as printed, np.errstate(over="ignore", invalid="ignore"):
            exec(compile(text, "<snippet>", "exec"), ns)
        monkeypatch.setitem(sys.modules, "ptxgemm", ptxgemm)
        assert "worst |got - want|:" in printed.getvalue()
        ref, _ = fuzz_build.reference(case)
        assert ns["want"].shape == ref.shape
        assert np.allclose(ns["want"], ref, rtol=1e-10, atol=1e-10), fuzz_snippets.describe(spec)


def test_a_snippet_reads_like_a_bug_report():
    spec = _big_failing_spec()
    text = fuzz_snippets.snippet(spec)
    assert text.count("\n") < 40
    for needle in ("import ptxgemm", "def values(rng, shape, dtype)", "rng = np.random.default_rng(11)",
                   "ptxgemm.to_device", "ptxgemm.matmul(dev(a), dev(b), d_out", "np.maximum(want, 0)"):
        assert needle in text, needle
    run = fuzz_snippets.snippet(make_spec(c={"dtype": "float32", "layout": "C"}, beta=0.5))
    assert "got = ptxgemm.run(a, b, c=c, beta=0.5)" in run and "to_device" not in run


# --- illegal calls ---------------------------------------------------------------------------------------------

#: labels of bad_specs whose call ptxgemm.run does not refuse with a ConfigError naming the argument (none today)
KNOWN_MISNAMED: set[str] = set()

BAD = fuzz_illegal.bad_specs()


def test_bad_specs_catalog_is_complete():
    labels = [label for label, _, _ in BAD]
    assert len(set(labels)) == len(labels)
    named = {arg for _, arg, _ in BAD}
    assert {"a", "b", "a @ b", "out_dtype", "c", "beta", "bias", "scale_a", "scale_b", "scale_a, scale_b",
            "activation", "alpha", "config"} <= named
    for _, _, make in BAD:
        args, kwargs = make()
        assert isinstance(args, tuple) and isinstance(kwargs, dict)
        assert all(x.size <= 2000 for x in (*args, *kwargs.values()) if isinstance(x, np.ndarray))


@pytest.mark.parametrize("label,argument,make", [
    pytest.param(*entry, marks=[pytest.mark.xfail(strict=False)] if entry[0] in KNOWN_MISNAMED else [], id=entry[0])
    for entry in BAD])
def test_an_illegal_call_is_refused_naming_its_argument(label, argument, make):
    args, kwargs = make()
    with pytest.raises(ConfigError) as err:
        ptxgemm.run(*args, **kwargs)
    assert str(err.value).startswith(f"{argument}:"), str(err.value)
