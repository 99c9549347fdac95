"""The fuzzer's grouped cases (issue 25): random calls of ptxgemm.grouped_matmul (and, issue 48, of grouped_run on
numpy arrays) on the GPU against a float64 reference per group, and the grouped API's illegal inputs.

A case draws the form (contiguous, masked or k-grouped), G from 1 to 256 with sizes that are empty, single rows,
unaligned to the tile or tall, rows left after the last group, N and K (K tails included), the dtype (bf16, fp16,
fp8 e4m3), B's major, a tile of the grouped kernel or the default, the grid (every SM, or a few CTAs), per-tensor
scales and an activation, and the arrays' framework (ptxgemm's device arrays, or torch's). Then, from a random stream
of its own (so that a seed's earlier draws stay what they were: `draw`'s `layout_rng`), what issue 48 made legal:
sizes whose rows are not 16-byte multiples (N, K, or the k form's M and N), each operand's layout (row- or
column-major, rows of a wider buffer, a base off the 16-byte grid; every layout of the k form's a and b; fp8 B
N-major), out's (dense, rows of a wider buffer, off the grid), and a share of the cases through grouped_run on numpy
arrays. `out` is poisoned first: each group's rows must lie within ptxgemm.accuracy's bound and every other row,
and every byte of out's allocation outside out, must still hold its poison, bit for bit (grouped_run's result: zeros
outside the groups).
"""
from __future__ import annotations

import math
import time
import traceback
from typing import Callable

import numpy as np

from .. import accuracy
from ..errors import ConfigError
from ..plan.epilogue import m_major_table
from ..runtime.arrays import c_strides

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
# issue 48's draws (`layout_rng`): an operand's layout ("row": C order; "col": its last two axes transposed in
# memory; "pitched": rows of a wider buffer, a 16-byte multiple long; "ragged": rows `pad` elements longer than its
# own; "offset": one element past a 16-byte boundary; "reversed": its rows in reverse order in memory, a negative
# stride), out's, and the share of the cases run through grouped_run on numpy arrays
A_LAYOUTS = ("row", "row", "row", "col", "pitched", "ragged", "offset", "reversed")
K_A_LAYOUTS = ("mn", "mn", "k", "pitched", "ragged")   # the k form's a (M, total_K): x.T of row-major x, row-major,
K_B_LAYOUTS = ("mn", "mn", "k", "pitched", "ragged")   # x padded; its b (total_K, N): row-, column-major, padded
OUT_LAYOUTS = ("dense", "dense", "dense", "pitched", "ragged", "offset")
PLAIN = 0.3        # the share of the cases drawn as before issue 48 (aligned, plain layouts: everything in place)
NUMPY_SHARE = 0.2  # ... and of the others, through grouped_run on numpy arrays
UNALIGNED = 0.3    # the chance of each size drawn off the 16-byte grid


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


def draw(rng, forms=("contiguous", "masked"), max_elements: float = MAX_ELEMENTS["gpu"], layout_rng=None) -> dict:
    """One case; `forms` adds the k-grouped form once it is verified (not in ptxgemm.plan.grouped_call.UNVERIFIED).
    `layout_rng`: issue 48's draws (unaligned sizes, every layout, numpy arrays), from a stream of their own, so
    that `rng`'s draws are the ones an earlier seed made (None: none of them, every array as before)."""
    form = "masked" if rng.random() < 0.35 else "contiguous"
    if "k" in forms and rng.random() < 0.3:
        spec = _draw_k(rng, max_elements)
        return spec if layout_rng is None or layout_rng.random() < PLAIN else _vary_k(spec, layout_rng)
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
    if layout_rng is not None and layout_rng.random() >= PLAIN:
        _vary_rows(spec, layout_rng)
    if spec["scaling"] == "block" and groups > 1 and spec["n"] <= 128 and spec["k"] <= 128:
        spec["n"] = 136   # one block per group is refused by name (grouped_call.grouped_epilogue): not drawn
    if spec["scaling"] == "block" and form == "contiguous":
        # scale_a C-contiguous or M-major (DeepGEMM's and torch's layout, read by the producer's TMA box), drawn
        # from the case's seed so that the draws above stay what they were
        spec["scale_a_layout"] = "M" if np.random.default_rng(spec["seed"] + 7).random() < 0.5 else "C"
    return spec


def _off_grid(rng, size: int, item: int) -> int:
    """`size` moved off the 16-byte grid (a row of that many `item`-byte elements is no multiple of 16 bytes) with
    chance UNALIGNED, at least 1."""
    if rng.random() >= UNALIGNED:
        return size
    step = 16 // item
    return max(1, size + int(rng.integers(1, step)) * (1 if rng.random() < 0.6 or size <= step else -1))


def _vary_common(spec: dict, rng) -> None:
    """out's layout, its padding, the entry (grouped_run on numpy arrays for a share) and the framework: torch's
    arrays only where every layout is the plain one (the GPU fuzzer's torch cases test the interop, not these)."""
    spec["out_layout"] = OUT_LAYOUTS[rng.integers(len(OUT_LAYOUTS))]
    spec["pad"] = int(rng.integers(1, 12))   # elements a pitched array's rows are longer than its own
    spec["entry"] = "numpy" if rng.random() < NUMPY_SHARE else "device"
    plain = (spec.get("a_layout", "row") in ("row", "mn") and spec.get("b_layout", "mn") == "mn"
             and spec["out_layout"] == "dense")
    if spec["entry"] == "numpy" or not plain:
        spec["array"] = "device"


def _vary_rows(spec: dict, rng) -> None:
    """Issue 48's draws for a contiguous or masked case: N and K off the grid, a's layout, fp8 B N-major, B's rows
    padded, out's layout, the entry."""
    item = np.dtype(accuracy.DTYPES[spec["dtype"]]).itemsize
    spec["n"], spec["k"] = _off_grid(rng, spec["n"], item), _off_grid(rng, spec["k"], item)
    spec["a_layout"] = A_LAYOUTS[rng.integers(len(A_LAYOUTS))]
    if item == 1 and rng.random() < 0.4:   # fp8 B N-major: staged K-major
        spec["b_major"] = "mn"
    # rows of B (along its contiguous axis) in a wider buffer
    spec["b_layout"] = ("pitched", "ragged")[rng.integers(2)] if rng.random() < 0.2 else "mn"
    _vary_common(spec, rng)


def _vary_k(spec: dict, rng) -> dict:
    """Issue 48's draws for a k-grouped case: M and N off the grid, every layout of a and b, out's layout, the
    entry."""
    item = np.dtype(accuracy.DTYPES[spec["dtype"]]).itemsize
    spec["m"], spec["n"] = _off_grid(rng, spec["m"], item), _off_grid(rng, spec["n"], item)
    spec["a_layout"] = K_A_LAYOUTS[rng.integers(len(K_A_LAYOUTS))]
    spec["b_layout"] = K_B_LAYOUTS[rng.integers(len(K_B_LAYOUTS))]
    _vary_common(spec, rng)
    return spec


def row_width(cols: int, itemsize: int, layout: str, pad: int) -> int:
    """The elements of a row of a "pitched" array (the next 16-byte multiple past `cols`: a pitch TMA takes) or a
    "ragged" one (`pad` elements more: a pitch off the grid, mostly)."""
    if layout == "pitched":
        return -(-(cols + 1) * itemsize // 16) * 16 // itemsize
    return cols + pad


def laid_out(x: np.ndarray, layout: str, pad: int = 0) -> np.ndarray:
    """`x`'s values in a host array of `layout`: "row"/"mn"/"dense" C order; "col"/"k" its last two axes
    transposed in memory (column-major matrices); "pitched" and "ragged" C order in rows of a wider buffer
    (row_width); "offset" C order one element into its buffer (its base off the 16-byte grid); "reversed" its rows
    last to first in memory (a negative row stride)."""
    if layout == "col" or layout == "k":
        return np.ascontiguousarray(x.swapaxes(-1, -2)).swapaxes(-1, -2)
    if layout in ("pitched", "ragged"):
        wide = np.zeros(x.shape[:-1] + (row_width(x.shape[-1], x.dtype.itemsize, layout, pad),), x.dtype)
        wide[..., :x.shape[-1]] = x
        return wide[..., :x.shape[-1]]
    if layout == "offset":
        flat = np.zeros(x.size + 1, x.dtype)
        flat[1:] = x.ravel()
        return flat[1:].reshape(x.shape)
    if layout == "reversed":
        return np.ascontiguousarray(x[..., ::-1, :])[..., ::-1, :]
    return np.ascontiguousarray(x)


def _transposed(x):
    """A 2-D array's transpose as a view (a device array's, or numpy's)."""
    if isinstance(x, np.ndarray):
        return x.T
    return x.view(tuple(x.shape)[::-1], tuple(x.strides)[::-1])


class _Backend:
    """Where a case runs: `upload(numpy)` a device (or emulated) copy, `empty(shape, dtype)` a poisoned output,
    `read(array)` its numpy copy, `entry` grouped_matmul itself, `run` grouped_run."""

    def __init__(self, name: str):
        self.name = name
        if name == "emulate":
            from . import emulator

            self.upload = emulator.upload
            # the emulated kernel's result does not depend on the grid
            self.entry = lambda *args, ctas=None, **kw: emulator.grouped_matmul(*args, **kw)
            self.run = emulator.grouped_run
            self.empty = emulator.HostArray.empty          # 0xFF bytes: NaN in every float type
            self.read = lambda x: x.numpy().copy()
        else:
            import ptxgemm

            self.upload = ptxgemm.to_device
            self.run = ptxgemm.grouped_run
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

    def place(self, x: np.ndarray, layout: str, pad: int = 0):
        """`x` on the device in `layout` (laid_out's), its strides and its base's distance from the 16-byte grid
        kept (an upload keeps a layout's strides, but puts a dense array at a fresh, aligned address)."""
        if layout == "offset":
            flat = np.zeros(x.size + 1, x.dtype)
            flat[1:] = x.ravel()
            return self.upload(flat).view(x.shape, c_strides(x.shape, x.dtype.itemsize), x.dtype.itemsize)
        return self.upload(laid_out(x, layout, pad))

    def out(self, shape: tuple, dtype, layout: str, pad: int):
        """(out, whole): a poisoned output in `layout` ("dense", "pitched", "ragged", "offset") and the allocation
        it lies in (`whole`, read to check that nothing outside out was written)."""
        item = np.dtype(dtype).itemsize
        if layout in ("pitched", "ragged"):
            whole = self.empty(shape[:-1] + (row_width(shape[-1], item, layout, pad),), dtype)
            return whole.view(shape, whole.strides), whole
        if layout == "offset":
            whole = self.empty((math.prod(shape) + 1,), dtype)
            return whole.view(shape, c_strides(shape, item), item), whole
        whole = self.empty(shape, dtype)
        return whole, whole


def _parts(whole: np.ndarray, shape: tuple, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """(out's elements, every other element of its allocation) from the allocation read back (_Backend.out)."""
    if layout in ("pitched", "ragged"):
        return whole[..., :shape[-1]], whole[..., shape[-1]:]
    if layout == "offset":
        return whole[1:].reshape(shape), whole[:1]
    return whole, whole[..., :0]


def _bits(x: np.ndarray) -> np.ndarray:
    return x.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[x.dtype.itemsize])


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
    """A k-grouped case: a (M, total_K) as x.T of row-major x (total_K, M), row-major itself, or x.T of x in a
    wider buffer (spec's a_layout); b (total_K, N) row-major, column-major or in a wider buffer (b_layout); out
    (G, M, N) in out_layout."""
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
    a_layout, b_layout, pad = spec.get("a_layout", "mn"), spec.get("b_layout", "mn"), spec.get("pad", 0)

    def operands(place):   # a and b through `place(array, layout, pad)`: numpy's own, or the backend's upload
        a = place(x.T, "row", 0) if a_layout == "k" else _transposed(place(x, "row" if a_layout == "mn" else
                                                                            a_layout, pad))
        return a, place(b, {"mn": "row", "k": "col"}.get(b_layout, b_layout), pad)

    be = _Backend(backend)
    try:
        got, _ = _execute(be, spec, operands, {"offs": offs}, (spec["groups"], m, n), dt,
                          activation=spec["activation"], config=config, **kw)
    except ConfigError as e:
        return "refused", f"ConfigError: {e}"
    except _Outside as e:
        return "wrong", str(e)
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


class _Outside(Exception):
    """A byte of out's allocation outside out was written."""


def _execute(be: _Backend, spec: dict, operands, counts: dict, out_shape: tuple, out_dtype: str, vectors=None,
             ctas=None, **kw) -> tuple[np.ndarray, np.ndarray]:
    """The case's call and its result: grouped_run on numpy arrays (spec's entry "numpy"; host counts), or
    grouped_matmul on the backend's arrays (device counts) into a poisoned out of spec's out_layout. `operands(place)`
    makes (a, b) through `place(array, layout, pad)`. Returns (the result, what a row outside every group must
    hold: out's poison, or grouped_run's zeros); raises _Outside when a byte of out's allocation outside out
    changed."""
    vectors = vectors or {}
    dtype = accuracy.DTYPES[out_dtype]
    if spec.get("entry") == "numpy":
        a, b = operands(lambda x, layout, pad: laid_out(x, layout, pad))
        got = be.run(a, b, **counts, **vectors, **kw)
        return got, np.zeros(out_shape, dtype)
    a, b = operands(be.place)
    layout = spec.get("out_layout", "dense")
    out, whole = be.out(out_shape, dtype, layout, spec.get("pad", 1))
    poisoned, rest = _parts(be.read(whole), out_shape, layout)
    args = (a, b, {name: be.upload(c) for name, c in counts.items()}, out)
    if spec.get("array") == "torch" and be.name == "gpu":
        import torch

        args = (torch.from_dlpack(args[0]), torch.from_dlpack(args[1]),
                {name: torch.from_dlpack(c) for name, c in args[2].items()}, torch.from_dlpack(args[3]))
    be.entry(args[0], args[1], **args[2], out=args[3], ctas=ctas, **{n: be.upload(v) for n, v in vectors.items()},
             **kw)
    got, after = _parts(be.read(whole), out_shape, layout)
    if not np.array_equal(_bits(after), _bits(rest)):
        raise _Outside(f"a byte of out's allocation outside out ({layout}) was written")
    return got, poisoned


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
        if spec.get("scale_a_layout") == "M":   # the same values, rows adjacent (the padding NaN, never read)
            out["scale_a"] = m_major_table(out["scale_a"], np.nan).T[:out["scale_a"].shape[0]]
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
    a_layout, pad = spec.get("a_layout", "row"), spec.get("pad", 0)
    # B: (G, K, N) with N contiguous ("mn") or K ("k"), its lines padded when b_layout says so
    wide = spec.get("b_layout", "mn")   # "mn" (plain), "pitched" or "ragged": B's lines in a wider buffer
    b_layout = ("col" if spec["b_major"] == "k" else "row") if wide == "mn" else wide

    def operands(place):
        if wide != "mn" and spec["b_major"] == "k":   # K contiguous, in lines longer than K: (G, N, K), padded
            b_placed = place(np.ascontiguousarray(b.swapaxes(1, 2)), wide, pad)
            g, n, k = b_placed.shape
            b_placed = (b_placed.swapaxes(1, 2) if isinstance(b_placed, np.ndarray) else
                        b_placed.view((g, k, n), (b_placed.strides[0], b_placed.strides[2], b_placed.strides[1])))
        else:
            b_placed = place(b, b_layout, pad)
        return place(a, a_layout, pad), b_placed

    vectors = _epilogue_arrays(spec, a)
    kw = {}
    if spec["scale"] != 1.0:   # per tensor: in scale_a, or in alpha beside vector scales
        if "scale_a" in vectors:
            kw["alpha"] = spec["scale"]
        else:
            kw["scale_a"], kw["scale_b"] = spec["scale"], 1.0
    config = GemmConfig.from_tag(spec["tile"]) if spec["tile"] else None
    be = _Backend(backend)
    try:
        got, poisoned = _execute(be, spec, operands, {"offs" if spec["form"] == "contiguous" else "masked_m": counts},
                                 out_shape, out_dtype, vectors, ctas=spec.get("ctas"), activation=spec["activation"],
                                 config=config, **kw)
    except ConfigError as e:
        return "refused", f"ConfigError: {e}"
    except _Outside as e:
        return "wrong", str(e)
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
        ("out shape", "out", lambda: ((dev((64, 32)), dev((2, 32, 64))), {"offs": dev((2,), i32),
                                                                          "out": dev((64, 65))})),
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
        # an M-major blockwise table (rows adjacent) in the masked form, whose groups' rows start at their own
        # matrices: read by TMA in the contiguous form only
        ("scale_a M-major in the masked form", "scale_a", lambda: (
            (dev((2, 16, 256), "float8_e4m3fn"), dev((2, 256, 256), "float8_e4m3fn")),
            {"masked_m": dev((2,), i32), "scale_a": dev((2, 32), np.float32).view((32, 2), (4, 128)),
             "scale_b": dev((2, 2, 2), np.float32)})),
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
        # issue 48: every layout is taken (what TMA cannot use is staged), but not an out that holds two results in
        # one element
        ("out with a zero row stride", "out", contiguous(out=lambda: dev((64, 64)).view((64, 64), (0, 2)))),
        ("out whose rows overlap", "out", contiguous(out=lambda: dev((64, 64)).view((64, 64), (64, 2)))),
    ]
    return cases


def bad_run_calls() -> list[tuple[str, str, Callable[[], tuple[tuple, dict]]]]:
    """Illegal calls of grouped_run: (label, the argument its ConfigError must name first, a builder of (args,
    kwargs)) on numpy arrays; each refused before anything is uploaded (on any machine: a GPU is asked for only
    after every rule). `device` arrays here are headers at a made-up address (never read)."""
    from ..runtime.arrays import DeviceArray

    bf16, fp8, i32 = accuracy.DTYPES["bfloat16"], accuracy.DTYPES["float8_e4m3fn"], np.int32

    def device(shape, dtype=bf16):
        return DeviceArray(1 << 32, shape, dtype, owner=False)

    def contiguous(**kwargs):
        return lambda: ((np.ones((64, 30), bf16), np.ones((2, 30, 60), bf16)),
                        {"offs": np.array([20, 64], i32), **{k: v() if callable(v) else v for k, v in kwargs.items()}})

    return [
        ("a device array a", "a", lambda: ((device((64, 30)), np.ones((2, 30, 60), bf16)),
                                           {"offs": np.array([20, 64], i32)})),
        ("a list b", "b", lambda: ((np.ones((64, 30), bf16), [[1.0]]), {"offs": np.array([20, 64], i32)})),
        ("a float32 a (never converted)", "a", lambda: ((np.ones((64, 30), np.float32), np.ones((2, 30, 60), bf16)),
                                                        {"offs": np.array([20, 64], i32)})),
        ("fp8 a with a bf16 b", "b", lambda: ((np.ones((64, 32), fp8), np.ones((2, 32, 64), bf16)),
                                             {"offs": np.array([20, 64], i32)})),
        ("device offs", "offs", contiguous(offs=lambda: device((2,), i32))),
        ("offs a list", "offs", contiguous(offs=[20, 64])),
        ("offs int64 (never converted)", "offs", contiguous(offs=np.array([20, 64], np.int64))),
        ("offs past total_M", "offs", contiguous(offs=np.array([20, 65], i32))),
        ("masked_m past M_max", "masked_m", lambda: ((np.ones((2, 16, 30), bf16), np.ones((2, 30, 60), bf16)),
                                                     {"masked_m": np.array([3, 17], i32)})),
        ("no counts", "offs, masked_m", lambda: ((np.ones((64, 30), bf16), np.ones((2, 30, 60), bf16)), {})),
        ("a device scale_b", "scale_b", contiguous(scale_b=lambda: device((2, 60), np.float32))),
        ("a float64 bias (never converted)", "bias", contiguous(bias=lambda: np.ones(60, np.float64))),
        ("a bias one short of N", "bias", contiguous(bias=lambda: np.ones(59, np.float32))),
        ("alpha nan", "alpha", contiguous(alpha=float("nan"))),
        ("scale_a a tuple", "scale_a", contiguous(scale_a=(3, 3))),
        ("activation 'nope'", "activation", contiguous(activation="nope")),
        ("out_dtype int8", "out_dtype", contiguous(out_dtype=np.int8)),
        ("config a string", "config", contiguous(config="coop128x256")),
        ("k-grouped fp8", "a, b", lambda: ((np.ones((64, 96), fp8), np.ones((96, 64), fp8)),
                                           {"offs": np.array([40, 96], i32)})),
        ("k-grouped with total_K differing", "a, b", lambda: ((np.ones((64, 96), bf16), np.ones((90, 64), bf16)),
                                                              {"offs": np.array([40, 90], i32)})),
    ]


def illegal_checks(backend: str = "gpu") -> list[dict]:
    """The illegal grouped calls of bad_calls (on device arrays, or the emulator's; nothing reaches the kernel) and
    of bad_run_calls (grouped_run's): each ConfigError must start with the argument it names."""
    be = _Backend(backend)
    results = []
    walks = [(be.entry, case) for case in bad_calls(be.empty)] + [(be.run, case) for case in bad_run_calls()]
    for entry, (label, argument, make) in walks:
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
    layout_rng = np.random.default_rng([seed, 25, 48])   # issue 48's draws: a stream of their own
    forms = ("contiguous", "masked") + (("k",) if "k" not in grouped_call.UNVERIFIED else ())
    counts = {"correct": 0, "wrong": 0, "refused": 0, "crashed": 0}
    failures, start = [], time.perf_counter()
    for i in range(cases):
        spec = draw(rng, forms, MAX_ELEMENTS[backend], layout_rng)
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
