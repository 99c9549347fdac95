"""Calls that must be refused: each bad argument with the rule its ConfigError must name, before any GPU work."""
from __future__ import annotations

from typing import Callable

import ml_dtypes
import numpy as np

from ..kernel.config import SCALE_BLOCK


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
        ("a block table with its rows 2 elements apart (neither C-contiguous nor M-major)", "scale_a",
         lazy(lambda: {"scale_a": f32((kb, 8)).T[::2], "scale_b": f32((kb, 1))}, e4m3, 200)),
        ("an M-major block table whose columns are 20 bytes apart (TMA needs 16-byte multiples)", "scale_a",
         lazy(lambda: {"scale_a": f32((kb, 5)).T[:4], "scale_b": f32((kb, 1))}, e4m3, 200)),
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
        # issue 48: numbers the kernel would turn into NaN or inf outputs, and forms no rule takes
        ("alpha nan", "alpha", with_ab(alpha=float("nan"))),
        ("alpha -inf", "alpha", with_ab(alpha=float("-inf"))),
        ("alpha 1e39 (past float32)", "alpha", with_ab(alpha=1e39)),
        ("beta nan with c", "beta", lazy(lambda: {"c": f32((4, 4)), "beta": float("nan")})),
        ("beta inf with c", "beta", lazy(lambda: {"c": f32((4, 4)), "beta": float("inf")})),
        ("scale_a nan", "scale_a", with_ab(scale_a=float("nan"))),
        ("scale_b inf", "scale_b", with_ab(scale_b=float("inf"))),
        ("scale_a a 0-d float32 array holding nan", "scale_a",
         lazy(lambda: {"scale_a": np.array(np.nan, np.float32)})),
        ("per-tensor scales whose product is past float32", "scale_a, scale_b", with_ab(scale_a=1e20, scale_b=1e20)),
        ("scale_a a tuple", "scale_a", with_ab(scale_a=(3, 3))),
        ("scale_b a list", "scale_b", with_ab(scale_b=[1.0, 2.0, 3.0, 4.0])),
        ("activation a list", "activation", with_ab(activation=["relu"])),
        ("activation a 0-d string array", "activation", lazy(lambda: {"activation": np.array("relu")})),
    ]
