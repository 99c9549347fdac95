"""The fuzzer's grouped cases (issue 25): random calls of ptxgemm.grouped_matmul on the GPU against a float64
reference per group, and the grouped API's illegal inputs.

A case draws the form (contiguous or masked), G from 1 to 256 with sizes that are empty, single rows, unaligned
to the tile or tall, rows left after the last group, N and K (K tails included), the dtype (bf16, fp16, fp8 e4m3),
B's major, a tile of the grouped kernel or the default, the grid (every SM, or a few CTAs), per-tensor scales and an
activation, and the arrays' framework (ptxgemm's device arrays, or torch's). `out` is poisoned first: each group's rows must lie within
ptxgemm.accuracy's bound and every other row must still hold its poison, bit for bit.
"""
from __future__ import annotations

import time
import traceback
from typing import Callable

import numpy as np

from .. import accuracy
from ..errors import ConfigError

DTYPES = ("bfloat16", "float16", "float8_e4m3fn")
TILES = (None, "coop128x256", "coop128x128", "coop256x128", "coop128x192", "coop128x256c2", "coop256x128c2",
         "coop128x256sk", "coop128x256c2sk")   # sk: the stream-K tail, cut where the device finds it pays
K_TILES = tuple(t for t in TILES if not (t or "").endswith("sk"))   # the k form's k-loops differ: no tail
# the grid: one CTA per SM, or a few (even: a pair along M takes two), so that small cases run several waves and
# the stream-K tiles' tail is cut
CTAS = (None, None, 4, 6, 10)
ACTIVATIONS = (None, "relu", "gelu", "silu")
SCALINGS = ("tensor", "row", "block")     # fp8 cases' scale_a / scale_b
BIASES = (None, None, "shared", "group")
BLOCK_TILES = (None, "coop128x128", "coop128x128c2")
# rows x K plus G x K x N: on the GPU a case runs in a few ms and its reference in well under a second; emulated
# (numpy computes the kernel's products too) a case stays small enough that hundreds run in CI's minute
MAX_ELEMENTS = {"gpu": 6e6, "emulate": 2.5e5}


def _sizes(rng, groups: int, cap: int) -> list[int]:
    kind = rng.integers(4)
    if kind == 0:     # many small and empty groups
        s = rng.integers(0, 40, groups)
    elif kind == 1:   # Zipf-skewed, as routed experts are
        s = np.minimum(rng.zipf(1.4, groups) * rng.integers(1, 20), cap)
    elif kind == 2:   # around the tile: 127, 128, 129, 255, 256, 257 ...
        s = rng.choice([0, 1, 63, 64, 65, 127, 128, 129, 255, 256, 257], groups)
    else:
        s = rng.integers(0, cap + 1, groups)
    s = np.asarray(s, dtype=np.int64)
    s[rng.random(groups) < 0.15] = 0
    return [int(x) for x in s]


def draw(rng, forms=("contiguous", "masked"), max_elements: float = MAX_ELEMENTS["gpu"]) -> dict:
    """One case; `forms` adds the k-grouped form once it is verified (not in ptxgemm.plan.grouped_call.UNVERIFIED)."""
    form = "masked" if rng.random() < 0.35 else "contiguous"
    if "k" in forms and rng.random() < 0.3:
        return _draw_k(rng, max_elements)
    groups = int(rng.choice([1, 2, 3, 4, 7, 8, 16, 33, 64, 128, 256]))
    dtype = str(rng.choice(DTYPES))
    n = int(rng.choice([16, 64, 128, 136, 192, 256, 384, 520, 1024]))
    k = int(rng.choice([16, 64, 72, 128, 200, 512, 1000, 1536]))
    if dtype.startswith("float8"):
        k = max(16, k // 16 * 16)
    cap = int(rng.choice([8, 64, 300, 700]))
    sizes = _sizes(rng, groups, cap)
    m_max = max(max(sizes), 1) + int(rng.choice([0, 0, 5, 130])) if form == "masked" else None
    spec = {"form": form, "groups": groups, "sizes": sizes, "m_max": m_max, "n": n, "k": k, "dtype": dtype,
            "b_major": "k" if dtype.startswith("float8") or rng.random() < 0.5 else "mn",
            "tile": TILES[rng.integers(len(TILES))], "extra_rows": int(rng.choice([0, 0, 9])),
            "scale": float(rng.choice([1.0, 0.5, 1.75])), "activation": ACTIVATIONS[rng.integers(len(ACTIVATIONS))],
            "array": "torch" if rng.random() < 0.3 else "device", "seed": int(rng.integers(1 << 31)),
            "ctas": CTAS[rng.integers(len(CTAS))]}
    # the epilogue's vectors: fp8 takes rowwise (per token of a, per channel of each group's b) or blockwise scales
    # (1x128 per token, 128x128 per block of each group's b); any dtype a bias shared by the groups or one per group
    spec["scaling"] = str(rng.choice(SCALINGS)) if dtype.startswith("float8") else "tensor"
    spec["bias"] = None if spec["scaling"] == "block" else BIASES[rng.integers(len(BIASES))]
    if spec["scaling"] == "block":   # the tiles that carry block scales (block_n | 128), or the default's pick
        spec["tile"] = BLOCK_TILES[rng.integers(len(BLOCK_TILES))]
    rows = groups * m_max if form == "masked" else sum(sizes) + spec["extra_rows"]
    while rows * k + groups * k * n > max_elements and k > 16:   # keep the case small
        k = max(16, k // 2 // 16 * 16)
    while rows * k + groups * k * n > max_elements and spec["n"] > 16:
        spec["n"] = n = max(16, n // 2 // 16 * 16)
    spec["k"] = k
    if spec["scaling"] == "block" and groups > 1 and spec["n"] <= 128 and k <= 128:
        spec["n"] = 136   # one block per group is refused by name (grouped_call.grouped_epilogue): not drawn
    return spec


class _Backend:
    """Where a case runs: `upload(numpy)` a device (or emulated) copy, `empty(shape, dtype)` a poisoned output,
    `read(array)` its numpy copy, `entry` grouped_matmul itself."""

    def __init__(self, name: str):
        self.name = name
        if name == "emulate":
            from . import emulator

            self.upload = emulator.upload
            # the emulated kernel's result does not depend on the grid
            self.entry = lambda *args, ctas=None, **kw: emulator.grouped_matmul(*args, **kw)
            self.empty = emulator.HostArray.empty          # 0xFF bytes: NaN in every float type
            self.read = lambda x: x.numpy().copy()
        else:
            import ptxgemm

            self.upload = ptxgemm.to_device
            self.read = lambda x: x.to_numpy()

            def entry(*args, ctas=None, **kw):   # a capped grid is a plan's argument (GroupedPlan), not the call's
                if ctas is None:
                    return ptxgemm.grouped_matmul(*args, **kw)
                plan = ptxgemm.GroupedPlan(*args, ctas=ctas, **kw)
                plan.launch()
                return plan.out
            self.entry = entry

            def empty(shape, dtype):
                out = ptxgemm.DeviceArray.empty(shape, dtype)
                out.poison()
                return out
            self.empty = empty

    def k_major(self, b: np.ndarray):
        """b (G, K, N) uploaded as (G, N, K) and seen as (G, K, N): K contiguous."""
        d = self.upload(np.ascontiguousarray(b.transpose(0, 2, 1)))
        g, n, k = d.shape
        item = d.dtype.itemsize
        return d.view((g, k, n), (n * k * item, item, k * item))


def _draw_k(rng, max_elements: float) -> dict:
    """A k-grouped case: K per group (empty and unaligned ones), M (a multiple of 8: the rows of x (total_K, M)
    start on 16-byte boundaries), N; 16-bit only (MN-major operands)."""
    groups = int(rng.choice([1, 2, 3, 5, 8, 16, 33]))
    ks = _sizes(rng, groups, int(rng.choice([16, 100, 300])))
    if not sum(ks):   # total_K = 0 is refused (no tensor map of an empty K): keep one K row
        ks[-1] = 1
    while sum(ks) * 300 > max_elements and max(ks) > 1:
        ks = [x // 2 for x in ks]
        ks[-1] = max(ks[-1], 1)
    return {"form": "k", "groups": groups, "sizes": ks, "m_max": None, "n": int(rng.choice([16, 64, 136, 256, 520])),
            "k": sum(ks), "m": int(rng.choice([8, 64, 136, 256, 304])), "dtype": str(rng.choice(DTYPES[:2])),
            "b_major": "mn", "tile": K_TILES[rng.integers(len(K_TILES))], "extra_rows": 0,
            "scale": float(rng.choice([1.0, 0.5])), "activation": ACTIVATIONS[rng.integers(len(ACTIVATIONS))],
            "array": "device", "seed": int(rng.integers(1 << 31)),
            # the groups walked longest k-loop first (GemmConfig.group_sort, the default) or in index order
            "sort": bool(rng.random() < 0.75)}


def _run_k(spec: dict, backend: str) -> tuple[str, str]:
    """A k-grouped case: a = x.T of row-major x (total_K, M), b (total_K, N) row-major, out (G, M, N)."""
    from ..kernel.config import GemmConfig

    rng = np.random.default_rng(spec["seed"])
    total, m, n, dt = spec["k"], spec["m"], spec["n"], spec["dtype"]
    x = accuracy.random_matrix(rng, max(total, 1), m, dt)[:total]
    b = accuracy.random_matrix(rng, max(total, 1), n, dt)[:total]
    offs = np.cumsum(spec["sizes"]).astype(np.int32)
    kw = {"scale_a": spec["scale"], "scale_b": 1.0} if spec["scale"] != 1.0 else {}
    config = GemmConfig.from_tag(spec["tile"]) if spec["tile"] else None
    if not spec.get("sort", True):   # a config of the k form itself: the field belongs to the grouped kernel only
        config = GemmConfig.from_tag(spec["tile"] or "coop128x256", in_dtype=dt, out_dtype=dt, grouped="k",
                                     a_major="mn", b_major="mn", group_sort=False)
    be = _Backend(backend)
    try:
        dx = be.upload(np.ascontiguousarray(x))
        item = dx.dtype.itemsize
        out = be.empty((spec["groups"], m, n), accuracy.DTYPES[dt])
        be.entry(dx.view((m, total), (item, m * item)), be.upload(np.ascontiguousarray(b)), offs=be.upload(offs),
                 out=out, activation=spec["activation"], config=config, **kw)
        got = be.read(out)
    except ConfigError as e:
        return "refused", f"ConfigError: {e}"
    except Exception:  # noqa: BLE001
        return "crashed", traceback.format_exc(limit=4)
    start = 0
    for g, size in enumerate(spec["sizes"]):
        xs, bs = x[start:start + size], b[start:start + size]
        start += size
        ref, absp = accuracy.reference(xs.T, bs) if size else (np.zeros((m, n)), np.zeros((m, n)))
        pre = spec["scale"] * ref
        err = spec["scale"] * accuracy.accumulation_error(absp, max(size, 1), dt)
        ref, bound = accuracy.fused_bound(pre, err, np.abs(pre), spec["activation"], dt)
        v = accuracy.check_bound(got[g].astype(np.float64), ref, bound)
        if not v.ok:
            return "wrong", f"group {g} (K {size}): {v}"
    return "correct", ""


def _arrays(spec: dict):
    """(a, b as (G, K, N), counts, poisoned out) as numpy arrays."""
    rng = np.random.default_rng(spec["seed"])
    g, n, k, dt = spec["groups"], spec["n"], spec["k"], spec["dtype"]
    if spec["form"] == "contiguous":
        a = accuracy.random_matrix(rng, sum(spec["sizes"]) + spec["extra_rows"], k, dt)
        counts = np.cumsum(spec["sizes"]).astype(np.int32)
        out_shape = (a.shape[0], n)
    else:
        a = accuracy.random_matrix(rng, g * spec["m_max"], k, dt).reshape(g, spec["m_max"], k)
        counts = np.array(spec["sizes"], dtype=np.int32)
        out_shape = (g, spec["m_max"], n)
    b = np.stack([accuracy.random_matrix(rng, k, n, dt) for _ in range(g)])
    return a, b, counts, out_shape


def _epilogue_arrays(spec: dict, a: np.ndarray) -> dict:
    """The case's epilogue arrays (numpy, float32), drawn from its seed: scale_a shaped like a's rows (rowwise) or
    with ceil(K/128) per row (blockwise), scale_b (G, N) or (G, ceil(K/128), ceil(N/128)), bias (N,) or (G, N)."""
    rng = np.random.default_rng(spec["seed"] + 1)
    g, n, k = spec["groups"], spec["n"], spec["k"]
    kb, nb = -(-k // accuracy.SCALE_BLOCK), -(-n // accuracy.SCALE_BLOCK)
    out = {}
    if spec.get("scaling") == "row":
        out["scale_a"] = rng.uniform(0.5, 2.0, a.shape[:-1]).astype(np.float32)
        out["scale_b"] = rng.uniform(0.5, 2.0, (g, n)).astype(np.float32)
    elif spec.get("scaling") == "block":
        out["scale_a"] = rng.uniform(0.5, 2.0, (*a.shape[:-1], kb)).astype(np.float32)
        out["scale_b"] = rng.uniform(0.5, 2.0, (g, kb, nb)).astype(np.float32)
    if spec.get("bias"):
        out["bias"] = rng.standard_normal((n,) if spec["bias"] == "shared" else (g, n)).astype(np.float32)
    return out


def run_case(spec: dict, backend: str = "gpu") -> tuple[str, str]:
    """("correct" | "wrong" | "refused" | "crashed", detail) of one case on the GPU, or emulated (the library's
    plan and the kernel's result in numpy: ptxgemm.tools.emulator.grouped_matmul; device counts there too, so they
    are clamped by the kernel, never checked)."""
    if spec["form"] == "k":
        return _run_k(spec, backend)
    from ..kernel.config import GemmConfig

    a, b, counts, out_shape = _arrays(spec)
    out_dtype = "bfloat16" if spec["dtype"].startswith("float8") else spec["dtype"]
    be = _Backend(backend)
    try:
        db = be.k_major(b) if spec["b_major"] == "k" else be.upload(b)
        out = be.empty(out_shape, accuracy.DTYPES[out_dtype])
        poisoned = be.read(out)
        args = (be.upload(a), db, be.upload(counts), out)
        if spec["array"] == "torch" and backend == "gpu":
            import torch

            args = tuple(torch.from_dlpack(x) for x in args)
        kw = {"offs" if spec["form"] == "contiguous" else "masked_m": args[2]}
        vectors = _epilogue_arrays(spec, a)
        kw.update({name: be.upload(x) for name, x in vectors.items()})
        if spec["scale"] != 1.0:   # per tensor: in scale_a, or in alpha beside vector scales
            if "scale_a" in kw:
                kw["alpha"] = spec["scale"]
            else:
                kw["scale_a"], kw["scale_b"] = spec["scale"], 1.0
        config = GemmConfig.from_tag(spec["tile"]) if spec["tile"] else None
        be.entry(args[0], args[1], out=args[3], activation=spec["activation"], config=config,
                 ctas=spec.get("ctas"), **kw)
        got = be.read(out)
    except ConfigError as e:
        return "refused", f"ConfigError: {e}"
    except Exception:  # noqa: BLE001 - a crash is an outcome
        return "crashed", traceback.format_exc(limit=4)
    return _verdict(spec, a, b, counts, poisoned, got, out_dtype, vectors)


def _verdict(spec, a, b, counts, poisoned, got, out_dtype, vectors=None) -> tuple[str, str]:
    covered = np.zeros(got.shape[:-1], dtype=bool)
    start = 0
    for g, size in enumerate(spec["sizes"]):
        if spec["form"] == "contiguous":
            s, e = start, start + size
            start = e
            rows, idx = a[s:e], (slice(s, e),)
        else:
            rows, idx = a[g, :size], (g, slice(0, size))
        if not size:
            continue
        covered[idx] = True
        if vectors:   # the fused epilogue's reference, group g's own vectors
            args = {"alpha": spec["scale"] if "scale_a" in vectors else 1.0, "activation": spec["activation"]}
            if "scale_a" in vectors:
                args["scale_a"], args["scale_b"] = vectors["scale_a"][idx], vectors["scale_b"][g]
            else:
                args["scale_a"], args["scale_b"] = spec["scale"], 1.0
            if "bias" in vectors:
                args["bias"] = vectors["bias"] if vectors["bias"].ndim == 1 else vectors["bias"][g]
            ref, bound = accuracy.fused_reference(rows, b[g], args, out_dtype, spec.get("scaling") == "block")
            v = accuracy.check_bound(got[idx].astype(np.float64), ref, bound)
            if not v.ok:
                return "wrong", f"group {g} ({size} rows, {spec.get('scaling')} scaling, bias {spec.get('bias')}): {v}"
            continue
        ref, absp = accuracy.reference(rows, b[g])
        if spec["scale"] == 1.0 and spec["activation"] is None:
            bound = accuracy.error_bound(ref, absp, spec["k"], out_dtype, spec["dtype"])
        else:
            pre = spec["scale"] * ref
            err = spec["scale"] * accuracy.accumulation_error(absp, spec["k"], spec["dtype"])
            ref, bound = accuracy.fused_bound(pre, err, np.abs(pre), spec["activation"], out_dtype)
        v = accuracy.check_bound(got[idx].astype(np.float64), ref, bound)
        if not v.ok:
            return "wrong", f"group {g} ({size} rows): {v}"
    bits, pbits = (x.view(np.uint16 if x.dtype.itemsize == 2 else np.uint32) for x in (got, poisoned))
    if not np.array_equal(bits[~covered], pbits[~covered]):
        return "wrong", "a row outside every group was written"
    return "correct", ""


def bad_calls(alloc) -> list[tuple[str, str, Callable[[], tuple[tuple, dict]]]]:
    """Illegal calls of grouped_matmul: (label, the argument its ConfigError must name first, a builder of (args,
    kwargs)), the arrays made by `alloc(shape, numpy dtype)` (the backend's device arrays; tests/test_grouped_checks.py
    passes arrays at made-up addresses, on a machine without a GPU: each call must be refused before the GPU)."""
    def dev(shape, dtype="bfloat16"):
        return alloc(shape, accuracy.DTYPES.get(dtype, dtype))

    from ..plan import grouped_call

    i32 = np.int32

    def contiguous(**kwargs):
        """A contiguous call (total_M 64, K 32, 2 groups, N 64) with `kwargs` (a callable's value made at call time:
        arrays are allocated only when the case runs)."""
        return lambda: ((dev((64, 32)), dev((2, 32, 64))),
                        {"offs": dev((2,), i32), **{k: v() if callable(v) else v for k, v in kwargs.items()}})

    k_enabled = "k" not in grouped_call.UNVERIFIED   # until then the k form is refused as such, first
    cases = [
        ("no counts", "offs, masked_m", lambda: ((dev((64, 32)), dev((2, 32, 64))), {})),
        ("both counts", "offs, masked_m", lambda: ((dev((64, 32)), dev((2, 32, 64))),
                                                   {"offs": dev((2,), i32), "masked_m": dev((2,), i32)})),
        ("offs float", "offs", lambda: ((dev((64, 32)), dev((2, 32, 64))), {"offs": dev((2,), np.float32)})),
        ("offs one short", "offs", lambda: ((dev((64, 32)), dev((2, 32, 64))), {"offs": dev((1,), i32)})),
        ("K differs", "a, b", lambda: ((dev((64, 32)), dev((2, 40, 64))), {"offs": dev((2,), i32)})),
        ("host offs decreasing", "offs", lambda: ((dev((64, 32)), dev((2, 32, 64))),
                                                  {"offs": np.array([40, 30], dtype=i32)})),
        ("host offs past total", "offs", lambda: ((dev((64, 32)), dev((2, 32, 64))),
                                                  {"offs": np.array([40, 65], dtype=i32)})),
        ("masked_m past M_max", "masked_m", lambda: ((dev((2, 16, 32)), dev((2, 32, 64))),
                                                     {"masked_m": np.array([3, 17], dtype=i32)})),
        ("mixed dtypes", "b", lambda: ((dev((64, 32)), dev((2, 32, 64), "float16")), {"offs": dev((2,), i32)})),
        ("fp8 B N-major", "b", lambda: ((dev((64, 32), "float8_e4m3fn"), dev((2, 32, 64), "float8_e4m3fn")),
                                        {"offs": dev((2,), i32)})),
        ("out shape", "out", lambda: ((dev((64, 32)), dev((2, 32, 64))), {"offs": dev((2,), i32),
                                                                          "out": dev((64, 65))})),
        ("rows not 16-byte", "a", lambda: ((dev((64, 36)).view((64, 30), (72, 2)), dev((2, 30, 64))),
                                           {"offs": dev((2,), i32)})),
        ("bias per row", "bias", lambda: ((dev((64, 32)), dev((2, 32, 64))),
                                          {"offs": dev((2,), i32), "bias": dev((64, 1), np.float32)})),
        ("k-grouped fp8", "a, b" if k_enabled else "offs", lambda: ((dev((64, 96), "float8_e4m3fn"), dev((96, 64), "float8_e4m3fn")),
                                          {"offs": dev((2,), i32)})),
        ("too many groups", "offs", lambda: ((dev((64, 32)), dev((1025, 32, 16))), {"offs": dev((1025,), i32)})),
        # issue 48: every argument refused on the host, naming it, before anything is allocated or launched
        ("alpha nan", "alpha", contiguous(alpha=float("nan"))),
        ("alpha inf", "alpha", contiguous(alpha=float("inf"))),
        ("alpha 1e39 (past float32)", "alpha", contiguous(alpha=1e39)),
        ("alpha '1' (a string)", "alpha", contiguous(alpha="1")),
        ("alpha True", "alpha", contiguous(alpha=True)),
        ("alpha a 1-element array", "alpha", contiguous(alpha=np.ones(1, np.float32))),
        ("scale_a nan", "scale_a", contiguous(scale_a=float("nan"))),
        ("scale_b -inf", "scale_b", contiguous(scale_b=float("-inf"))),
        ("scale_a a 1-element float32 array holding nan", "scale_a",
         contiguous(scale_a=np.full(1, np.nan, np.float32))),
        ("per-tensor scales whose product is past float32", "scale_a, scale_b",
         contiguous(scale_a=1e30, scale_b=1e30)),
        ("scale_a a tuple", "scale_a", contiguous(scale_a=(3, 3))),
        ("scale_b a string", "scale_b", contiguous(scale_b="2")),
        ("scale_a one row short", "scale_a", contiguous(scale_a=lambda: dev((63,), np.float32))),
        ("scale_b of the wrong dtype", "scale_b", contiguous(scale_b=lambda: dev((2, 64), "bfloat16"))),
        ("activation 'nope'", "activation", contiguous(activation="nope")),
        ("activation a list", "activation", contiguous(activation=["relu"])),
        ("bias one short of N", "bias", contiguous(bias=lambda: dev((63,), np.float32))),
        ("bias per group for G + 1 groups", "bias", contiguous(bias=lambda: dev((3, 64), np.float32))),
        ("bias of dtype int32", "bias", contiguous(bias=lambda: dev((64,), i32))),
        ("bias a tuple", "bias", contiguous(bias=(1.0, 2.0))),
        ("out_dtype 'float99'", "out_dtype", contiguous(out_dtype="float99")),
        ("out_dtype int8", "out_dtype", contiguous(out_dtype=np.int8)),
        ("config a string", "config", contiguous(config="coop128x256")),
        ("offs a list", "offs", lambda: ((dev((64, 32)), dev((2, 32, 64))), {"offs": [32, 64]})),
        ("offs a number", "offs", lambda: ((dev((64, 32)), dev((2, 32, 64))), {"offs": 64})),
        ("host offs int64", "offs", lambda: ((dev((64, 32)), dev((2, 32, 64))),
                                            {"offs": np.array([32, 64], np.int64)})),
        ("host offs negative", "offs", lambda: ((dev((64, 32)), dev((2, 32, 64))),
                                               {"offs": np.array([-1, 64], dtype=i32)})),
        ("host masked_m negative", "masked_m", lambda: ((dev((2, 16, 32)), dev((2, 32, 64))),
                                                        {"masked_m": np.array([3, -1], dtype=i32)})),
        ("a of negative total_M", "a", lambda: ((dev((64, 32)).view((-64, 32)), dev((2, 32, 64))),
                                                {"offs": np.array([0, 0], dtype=i32)})),
        ("b of negative N", "b", lambda: ((dev((64, 32)), dev((2, 32, 64)).view((2, 32, -64))),
                                          {"offs": dev((2,), i32)})),
        ("a of negative M_max", "a", lambda: ((dev((2, 16, 32)).view((2, -16, 32)), dev((2, 32, 64))),
                                              {"masked_m": dev((2,), i32)})),
        ("out of negative N", "out", lambda: ((dev((64, 32)), dev((2, 32, 64))),
                                              {"offs": dev((2,), i32), "out": dev((64, 64)).view((64, -64))})),
        ("masked b has one group more than a and masked_m", "a, b",
         lambda: ((dev((2, 16, 32)), dev((3, 32, 64))), {"masked_m": dev((2,), i32)})),
    ]
    return cases


def illegal_checks(backend: str = "gpu") -> list[dict]:
    """The illegal grouped calls of bad_calls (on device arrays, or the emulator's; nothing reaches the kernel): each
    ConfigError must start with the argument it names."""
    be = _Backend(backend)
    entry = be.entry
    results = []
    for label, argument, make in bad_calls(be.empty):
        args, kwargs = make()
        try:
            entry(*args, **kwargs)
            results.append({"label": label, "argument": argument, "ok": False, "error": "accepted"})
        except ConfigError as e:
            ok = str(e).startswith(f"{argument}:") or str(e).startswith(f"{argument} ")
            results.append({"label": label, "argument": argument, "ok": ok, "error": f"ConfigError: {e}"})
        except Exception as e:  # noqa: BLE001
            results.append({"label": label, "argument": argument, "ok": False, "error": f"{type(e).__name__}: {e}"})
    return results


def fuzz_grouped(cases: int, seed: int, log=print, backend: str = "gpu") -> dict:
    """`cases` grouped cases from `seed` (a stream of its own, apart from the dense cases'), on the GPU or emulated;
    the report part."""
    from ..plan import grouped_call

    rng = np.random.default_rng([seed, 25])
    forms = ("contiguous", "masked") + (("k",) if "k" not in grouped_call.UNVERIFIED else ())
    counts = {"correct": 0, "wrong": 0, "refused": 0, "crashed": 0}
    failures, start = [], time.perf_counter()
    for i in range(cases):
        spec = draw(rng, forms, MAX_ELEMENTS[backend])
        if backend == "emulate":
            spec["array"] = "device"
        kind, detail = run_case(spec, backend)
        counts[kind] += 1
        if kind != "correct":
            failures.append({"case": i, "outcome": kind, "detail": detail, "spec": spec})
            log(f"grouped case {i}: {kind}: {detail.splitlines()[0] if detail else ''}  spec {spec}")
    bad = illegal_checks(backend)
    return {"cases": cases, "backend": backend, **counts, "seconds": round(time.perf_counter() - start, 1),
            "bad_inputs": {"checked": len(bad), "named": sum(r["ok"] for r in bad),
                           "misnamed": [r for r in bad if not r["ok"]]},
            "failures": failures}
