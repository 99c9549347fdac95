"""The elementwise bound of ptxgemm.accuracy on the CPU: a correct fp32-accumulated result passes, and a result
with one wrong 16x16 block fails, however large the matrix (the Frobenius check it replaces did not)."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from ptxgemm import accuracy

M, N, K = 512, 384, 1024


@pytest.fixture(scope="module", params=["bfloat16", "float16", "float32"])
def problem(request):
    out_dtype = request.param
    rng = np.random.default_rng(7)
    in_dtype = "float16" if out_dtype == "float16" else "bfloat16"
    a = accuracy.random_matrix(rng, M, K, in_dtype)
    b = accuracy.random_matrix(rng, K, N, in_dtype)
    ref, absp = accuracy.reference(a, b)
    # what a correct kernel returns: an fp32-accumulated product (numpy's sgemm), rounded to the output dtype
    good = (a.astype(np.float32) @ b.astype(np.float32)).astype(accuracy.DTYPES[out_dtype])
    return a, b, ref, absp, good, out_dtype


def _frobenius(out, ref):
    return np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref)


def test_a_correct_result_passes(problem):
    a, b, ref, absp, good, out_dtype = problem
    verdict = accuracy.check(good, ref, absp, K, in_dtype="bfloat16")
    assert verdict.ok, str(verdict)
    if out_dtype == "float32":  # the accumulation term alone: it has the 18x margin, so a correct result sits low
        assert verdict.worst_ratio < 0.5
    # (a 16-bit output's round-to-nearest can use nearly all of u_out·|ref|, so its ratio may approach 1)


def _corruptions(a, b, good):
    """One 16x16 block at block (5, 7) wrong in the ways a broken pipeline makes it wrong."""
    r, c = slice(80, 96), slice(112, 128)
    out = {}
    x = good.copy(); x[r, c] = good[96:112, 112:128]; out["taken from the block below"] = x
    x = good.copy(); x[r, c] = good[r, c].T; out["transposed"] = x
    x = good.copy(); x[r, c] = np.nan; out["never written"] = x
    k0 = 3 * 64  # one k-tile (a ring stage) read too early or twice
    part = a[r, k0:k0 + 64].astype(np.float64) @ b[k0:k0 + 64, c].astype(np.float64)
    x = good.copy(); x[r, c] = (good[r, c].astype(np.float64) - part).astype(good.dtype); out["one k-tile missing"] = x
    x = good.copy(); x[r, c] = (good[r, c].astype(np.float64) + part).astype(good.dtype); out["one k-tile twice"] = x
    x = good.copy(); x[84, 119] = -good[84, 119]; out["one element's sign"] = x
    return out


def test_one_wrong_block_fails(problem):
    a, b, ref, absp, good, out_dtype = problem
    for what, bad in _corruptions(a, b, good).items():
        verdict = accuracy.check(bad, ref, absp, K, in_dtype="bfloat16")
        assert not verdict.ok, what
        assert verdict.bad_blocks == [(5, 7)], (what, verdict.bad_blocks)


def test_the_old_frobenius_check_missed_a_wrong_block(problem):
    """Why the bound is per element: a block missing one k-tile moved ‖out−ref‖/‖ref‖ by less than the 1e-2 the
    suite used to allow for bf16 output."""
    a, b, ref, absp, good, out_dtype = problem
    if out_dtype != "bfloat16":
        pytest.skip("the old bound was per output dtype; bf16 shows it")
    bad = _corruptions(a, b, good)["one k-tile missing"]
    assert _frobenius(bad, ref) < 1e-2
    assert not accuracy.check(bad, ref, absp, K, in_dtype="bfloat16").ok


def test_bound_terms():
    ref = np.array([[1.0, -300.0]])
    absp = np.array([[10.0, 1000.0]])
    acc = accuracy.C_ACC * 2.0 ** -23 * 32 * absp
    assert np.allclose(accuracy.error_bound(ref, absp, 1024, "float32", "bfloat16"),
                       acc + accuracy.error_bound(ref * 0, absp * 0, 1, "float32", "bfloat16"))
    bf = accuracy.error_bound(ref, absp, 1024, "bfloat16", "bfloat16")
    assert np.allclose(bf, 2.0 ** -8 * np.abs(ref) + (1 + 2.0 ** -8) * acc, rtol=1e-12, atol=1e-30)


def test_random_matrix_never_holds_zero():
    rng = np.random.default_rng(0)
    x = accuracy.random_matrix(rng, 1000, 1000, "float16")
    assert not (x == 0).any()


def _accuracy_names(tree) -> dict:
    """{local name: accuracy function} for `from ... accuracy import check, error_bound [as x]` in a module."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1] == "accuracy":
            for alias in node.names:
                if alias.name in ("check", "error_bound"):
                    names[alias.asname or alias.name] = alias.name
    return names


def test_every_call_names_the_inputs_dtype():
    """accuracy.check and error_bound take the inputs' dtype with no default, so a call that leaves it out fails only
    when it runs: on a GPU, for the GPU tests (run 130 found one in test_gemm_gpu.py). Every call in the package and
    the tests is read here instead: check passes in_dtype by keyword, error_bound passes five arguments."""
    root = Path(__file__).resolve().parent.parent
    missing = []
    for path in sorted([*root.glob("ptxgemm/**/*.py"), *root.glob("tests/*.py")]):
        tree = ast.parse(path.read_text(), str(path))
        names = _accuracy_names(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if isinstance(f, ast.Name) and f.id in names:
                which = names[f.id]
            elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "accuracy" \
                    and f.attr in ("check", "error_bound"):
                which = f.attr
            else:
                continue
            keywords = {k.arg for k in node.keywords}
            if (which == "check" and "in_dtype" not in keywords) or \
                    (which == "error_bound" and len(node.args) + len(keywords) < 5):
                missing.append(f"{path.relative_to(root)}:{node.lineno} {which}")
    assert not missing, "calls without the inputs' dtype: " + ", ".join(missing)
