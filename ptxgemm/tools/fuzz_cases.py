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
  (contiguous or offset), or blockwise tables (both; fp8, 2-D operands; scale_a C-contiguous or M-major with its
  columns padded to 16 bytes); each independently often absent;
- an explicit `config` only where blockwise scales (scale_a C-contiguous) and no c: one of the swap-AB blockwise tiles (BLOCK_SWAP_TAGS,
  of which the selection picks only unsplit pp64x32t, at M <= 32) in 40% of those cases, drawn from a stream of
  its own so that every other field of a seed is what it was before configs were drawn; in 40% of the other
  blockwise cases without c, one of the deep-ring one-set tiles (BLOCK_DEEP_TAGS), from a stream of its own; and
  where neither
  blockwise scales nor c: a stream-K tile (STREAM_K_TAGS: at the fuzzer's sizes the selection rarely takes the
  tail, and these small problems make every launch all tail, units cut into shares) or a serpentine one
  (SERPENTINE_TAGS) in 15% of those cases (40% of the GemmPlan ones), from a stream of its own too. A serpentine tile's GemmPlan case also
  caps the grid (`ctas`, one of SERPENTINE_CTAS): at these sizes a full grid never makes the second pass, the one
  that loads K backward. The WIDE_ACC_TAGS tiles only where the epilogue has no bias, activation or vector scale;
  in SPLIT_PAIR_P of the rest, a pair under split-K (SPLIT_PAIR_TAGS), from a stream of its own; in FP8_WAVE_P of
  the fp8 ones still without a config, one of the per-tensor fp8 wave rule's deep-ring forms (FP8_WAVE_TAGS), from a
  stream of its own; in SPLIT_LEAD_P of those still without one, a split tile whose final runs longer than its
  partials (SPLIT_LEAD_TAGS), from a stream of its own; in ONE_WAVE_P of those still without one, a short grid's
  one-wave form (ONE_WAVE_TAGS), from a stream of its own;
- the GEMM classes of a training step (TRAINING_CLASSES: narrow N with a K-major B, weight gradients with an M-major
  A and a long K, short K) in TRAINING_P of the plain 2-D cases, from a stream of their own;
- entries "run", "matmul" (with a NaN-poisoned out, or none) and "plan" (GemmPlan(...).launch(), out required);
  c aliasing out (matmul and plan: out *is* c, with c's dtype, layout and values);
- array kinds (the backend's business: "host", "device", "torch", "cupy"); "torch" cases hold no negative strides.

What they do not cover: `stream`, `ctas` but for the serpentine cases, `kernel`, an explicit `config` other than those above, out_dtype given as a
dtype object rather than its name, values other than standard normal (rounded to the dtype, zeros replaced by 1:
no inf, NaN, huge or subnormal-heavy inputs, no all-zero rows), scales other than uniform [0.25, 4), non-unit
strides of bias or scale vectors (illegal), 1-D operands against batched ones, blockwise scales on 1-D operands,
per-tensor scales that are device arrays of another framework's dtype, concurrency and repeated calls (the plan
cache), sizes beyond max_flops. Very large |ref| (fp16 overflow) is possible in principle but vanishingly rare
for these values.
"""
from __future__ import annotations

import json
import math

import ml_dtypes
import numpy as np

from ..kernel.config import ACTIVATIONS, FP8_DTYPES, OUTPUT_DTYPES, VECTOR_DTYPES, default_out_dtype
from ..kernel.tile import Tile
from ..select.tiles import BLOCK_SCALE_SPLITS, BLOCK_SCALE_TRANSPOSED_TILES

ENTRIES = ("run", "matmul", "plan")
ARRAY_KINDS = ("host", "device", "torch", "cupy")
LAYOUTS = ("C", "F", "sliced", "reversed", "offset", "transposed", "broadcast")
VECTOR_LAYOUTS = ("C", "offset")              # bias and scale vectors: unit stride along their length
#: blockwise scale_a tables: C-contiguous, or M-major with its columns padded to 16 bytes (DeepGEMM's and torch's
#: layout, which the kernel reads by TMA)
BLOCK_A_LAYOUTS = ("C", "M")
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
#: the names a case's array code runs with (numpy, ml_dtypes, values): fuzz_build.build executes each case's code in
#: a copy of it, so the arrays are made by the very statements a snippet prints
BASE_NS = {"np": np, "ml_dtypes": ml_dtypes}
exec(VALUES_SOURCE, BASE_NS)
values = BASE_NS["values"]


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
        for key in ("m", "n", "k", "seed") + (("device",) if "device" in spec else ()):
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
            layouts = BLOCK_A_LAYOUTS if (s["form"], name) == ("block", "scale_a") else VECTOR_LAYOUTS
            if s["form"] not in SCALE_FORMS or s.get("layout", "C") not in layouts:
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
        config = spec.get("config")
        if config is not None and c is not None:
            p.append("config: only without c")
        elif config is not None and (config in BLOCK_TAGS) != ("block" in forms):
            p.append("config: a tag of " + ", ".join(n for n, tags in CONFIG_FAMILIES if set(tags) <= set(BLOCK_TAGS))
                     + " with blockwise scales, else of " + ", ".join(n for n, tags in CONFIG_FAMILIES
                                                               if not set(tags) & set(BLOCK_TAGS)))
        elif config in BLOCK_SWAP_TAGS and spec["scale_a"].get("layout") == "M":
            p.append("config: a swap-AB tile reads A's scales per thread, so scale_a C-contiguous")
        elif config is not None and not any(config in tags for _, tags in CONFIG_FAMILIES):
            p.append("config: a tag of one of the fuzzer's families ("
                     + ", ".join(name for name, _ in CONFIG_FAMILIES) + ")")
        elif config in WIDE_ACC_TAGS and not _plain_epilogue(spec):
            p.append(f"config: {config} carries no fused bias, activation or vector scale")
        ctas = spec.get("ctas")
        if ctas is not None and (spec["entry"] != "plan" or config not in SERPENTINE_TAGS or ctas not in
                                 SERPENTINE_CTAS):
            p.append(f"ctas: one of {SERPENTINE_CTAS}, for GemmPlan with a serpentine tile only")
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


#: The swap-AB blockwise tiles with every split count: reached only through `config=` or the tune cache, so the
#: fuzzer passes them itself (GemmConfig.block_scale_swapped where the out is row-major).
BLOCK_SWAP_TAGS = tuple(Tile(schedule=s, block_m=bm, block_n=bn, splits=k, c_major="m").tag
                        for s, bm, bn in BLOCK_SCALE_TRANSPOSED_TILES for k in BLOCK_SCALE_SPLITS)
CONFIG_STREAM = 0x5A17   # the config's draw: seed ^ this (its own stream)
#: The narrow unsplit blockwise tiles in a deep ring, which take the one-set loop (GemmConfig.bs_product_sets): the
#: small-M selection runs pp64x64 at its deepest ring (select/unsplit_wave.py), but only at M <= 128 with N of several
#: thousand and K >= 4096, past most of the fuzzer's sizes, so the fuzzer passes them itself. 12 stages for the 64x64
#: and 13 for the 64x32, the most that every out dtype and operand layout leaves room for (a float32 out's epilogue
#: buffer, a swapped problem's stages).
BLOCK_DEEP_TAGS = ("pp64x64s12", "pp64x32s13")
BLOCK_DEEP_P = 0.4
BLOCK_DEEP_STREAM = 0xD335   # the deep tile's draw: seed ^ this (its own stream)
BLOCK_TAGS = BLOCK_SWAP_TAGS + BLOCK_DEEP_TAGS
#: Stream-K tiles (GemmConfig.stream_k): single CTAs of both shapes, a pair sharing B, a narrow tile; the last two
#: with the full wave folded into the tail (GemmConfig.sk_wave), at the fuzzer's sizes mostly with a capped grid.
STREAM_K_TAGS = ("coop128x256sk", "coop256x128sk", "coop128x256c2sk", "coop128x128sk", "coop128x128skw",
                 "coop128x256c2skw")
#: Serpentine tiles (GemmConfig.k_serpentine): small ones, so that a capped grid makes several passes, and the lean
#: 256x192 tile that the selection takes for long k-loops.
SERPENTINE_TAGS = ("coop128x128skz", "pp64x128z", "coop256x192skz")
#: Tiles with 192 accumulators per consumer thread, which leave no registers for a fused bias, activation or vector
#: scale (GemmConfig refuses those: FUSED_REGISTER_BUDGET): drawn only for cases whose epilogue is alpha and
#: per-tensor scales.
WIDE_ACC_TAGS = ("coop256x192skz",)
SERPENTINE_CTAS = (1, 2, 3)    # GemmPlan(ctas=) of a serpentine tile's "plan" case: a second pass from 2-6 units
WALK_TAGS = STREAM_K_TAGS + SERPENTINE_TAGS
#: Pairs under split-K (a cluster's two CTAs on the same split of adjacent tiles, sharing B along M or A along N, each
#: with its own flag and partial slots): no selection table offers them yet, so the fuzzer passes them itself, in
#: SPLIT_PAIR_P of the cases without c or blockwise scales that drew no other config, from a stream of their own.
SPLIT_PAIR_TAGS = ("pp64x128c2k2", "pp128x128c2k3", "coop128x256cn2k2", "coop128x128c2k4")
SPLIT_PAIR_P = 0.1
SPLIT_PAIR_STREAM = 0x5B1D   # the pair's draw: seed ^ this
#: The per-tensor fp8 wave rule's forms (select/unsplit_wave.fp8_wave_splits): the 64x64 pingpong at the deepest ring,
#: unsplit and in two splits. The selection runs them only at M <= 128 with K >= 4096 and N of a few thousand, past
#: most of the fuzzer's sizes, so the fuzzer passes them itself in FP8_WAVE_P of the fp8 cases without c or blockwise
#: scales that drew no other config, from a stream of their own. 13 stages fit every out dtype and layout.
FP8_WAVE_TAGS = ("pp64x64s13", "pp64x64k2s13")
FP8_WAVE_P = 0.3
FP8_WAVE_STREAM = 0xF8A5   # the wave form's draw: seed ^ this
#: Split picks whose last split runs longer than each partial (GemmConfig.split_lead): the selection's own forms
#: (select/split_lead.py: the 64x64 pingpong, fp8's and 16-bit's leads) and ones it does not make (a 64x128 and a
#: 128x128 pingpong, a cooperative tile), so each role's per-unit count is checked on both schedules. At the fuzzer's
#: sizes a lead often exceeds K's k-tiles, which leaves the partials one k-tile each and the final the rest. In
#: SPLIT_LEAD_P of the cases without c or blockwise scales that drew no other config, from a stream of their own.
SPLIT_LEAD_TAGS = ("pp64x64k2l9s13", "pp64x64k3l8s13", "pp64x128k2l3", "pp128x128k4l2", "coop128x128k3l5")
SPLIT_LEAD_P = 0.3
SPLIT_LEAD_STREAM = 0x11EAD   # the lead's draw: seed ^ this
#: The short grids' one-wave forms (select/short_grid.py): the cooperative 128x160 tile (a column panel and a half of
#: B, its last output panel 32 wide) and the cooperative 128x128 tile in two and three splits. The selection runs
#: them only at about 900-2000 square with K of 2048-32768, past the fuzzer's sizes, so the fuzzer passes them itself
#: in ONE_WAVE_P of the cases without c or blockwise scales that drew no other config, from a stream of their own.
ONE_WAVE_TAGS = ("coop128x160", "coop128x128k2", "coop128x128k3")
ONE_WAVE_P = 0.2
ONE_WAVE_STREAM = 0x1A7E   # the one-wave form's draw: seed ^ this
WALK_P, WALK_PLAN_P = 0.15, 0.4   # how often a case takes one of WALK_TAGS: more often for GemmPlan, whose ctas let
#                                   the serpentine tiles make a second pass
STREAM_K_STREAM = 0x5C7A   # the stream-K or serpentine config's draw: seed ^ this
#: Every tag the fuzzer passes as `config`, by the family a failing case's categories name (fuzz_shrink.categories).
CONFIG_FAMILIES = (("serpentine", SERPENTINE_TAGS), ("stream-k", STREAM_K_TAGS),
                   ("deep-ring-blockwise", BLOCK_DEEP_TAGS), ("swap-ab-blockwise", BLOCK_SWAP_TAGS),
                   ("split-pair", SPLIT_PAIR_TAGS), ("fp8-wave", FP8_WAVE_TAGS), ("split-lead", SPLIT_LEAD_TAGS),
                   ("one-wave", ONE_WAVE_TAGS))


def config_family(config: str) -> str:
    """The family of a tag the fuzzer draws (CONFIG_FAMILIES)."""
    return next(name for name, tags in CONFIG_FAMILIES if config in tags)


#: The GEMM classes of a training step (issue 47; ptxgemm.bench.training), drawn in TRAINING_P of the 2-D cases from
#: a stream of their own (seed ^ TRAINING_STREAM), so every other field of a seed is what it was before: their sizes
#: and operand layouts replace the drawn ones (then halved to max_flops like any case).
#:   narrow_n: a GQA k/v projection, x @ W^T: M tokens, N 64-384 (a few heads), K a hidden width; B = W^T K-major;
#:   dw: a weight gradient, dY^T @ x: M and N layer widths, K the tokens; A = dY^T M-major (a transposed view);
#:   short_k: dX of a narrow layer, dY @ W: K 64-320 (its few outputs), M tokens, N a hidden width.
TRAINING_CLASSES = ("narrow_n", "dw", "short_k")
TRAINING_P = 0.15
TRAINING_STREAM = 0x7A11


def _plain_epilogue(spec: dict) -> bool:
    """No bias, activation or vector scale: what a WIDE_ACC_TAGS tile's registers leave room for."""
    return spec["bias"] is None and spec["activation"] is None and all(
        spec[op] is None or spec[op]["form"] in TENSOR_SCALES for op in ("scale_a", "scale_b"))


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
        spec["scale_a"] = {"form": "block", "value": None, "layout": str(rng.choice(BLOCK_A_LAYOUTS))}
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
    blockwise = spec["scale_a"] is not None and spec["scale_a"]["form"] == "block"
    if blockwise and spec["c"] is None:
        # a swap-AB tile reads A's scales per thread: not M-major
        pick = np.random.default_rng(spec["seed"] ^ CONFIG_STREAM)
        if spec["scale_a"]["layout"] == "C" and pick.random() < 0.4:
            spec["config"] = str(pick.choice(BLOCK_SWAP_TAGS))
        # any scale_a layout: the deep tiles read A's scales with the stage
        _draw_family(spec, BLOCK_DEEP_STREAM, BLOCK_DEEP_P, BLOCK_DEEP_TAGS)
    if spec["c"] is None and not blockwise:
        pick = np.random.default_rng(spec["seed"] ^ STREAM_K_STREAM)
        if pick.random() < (WALK_PLAN_P if spec["entry"] == "plan" else WALK_P):
            spec["config"] = str(pick.choice(WALK_TAGS if _plain_epilogue(spec) else
                                             tuple(t for t in WALK_TAGS if t not in WIDE_ACC_TAGS)))
            if spec["config"] in SERPENTINE_TAGS and spec["entry"] == "plan":
                spec["ctas"] = int(pick.choice(SERPENTINE_CTAS))
        _draw_family(spec, SPLIT_PAIR_STREAM, SPLIT_PAIR_P, SPLIT_PAIR_TAGS)
        if spec["a"]["dtype"] in FP8_DTYPES and spec["b"]["dtype"] in FP8_DTYPES:
            _draw_family(spec, FP8_WAVE_STREAM, FP8_WAVE_P, FP8_WAVE_TAGS)
        _draw_family(spec, SPLIT_LEAD_STREAM, SPLIT_LEAD_P, SPLIT_LEAD_TAGS)
        _draw_family(spec, ONE_WAVE_STREAM, ONE_WAVE_P, ONE_WAVE_TAGS)
    _training_class(spec, max_flops)
    bad = problems(spec)
    if bad:   # a bug of this generator
        raise AssertionError(f"draw_spec drew an invalid spec ({'; '.join(bad)}): {json.dumps(spec)}")
    return spec


def _draw_family(spec: dict, stream: int, p: float, tags: tuple) -> None:
    """Where the case drew no config yet: in `p` of the cases one of `tags`, from the seed's stream `stream`, so every
    other field of a seed is what it was before the family was drawn."""
    pick = np.random.default_rng(spec["seed"] ^ stream)
    if spec.get("config") is None and pick.random() < p:
        spec["config"] = str(pick.choice(tags))


def _training_class(spec: dict, max_flops: float) -> None:
    """In TRAINING_P of the plain 2-D cases, the sizes and operand layouts of one of TRAINING_CLASSES (in place);
    a drawn class that the case's other fields make invalid leaves the case as it was."""
    pick = np.random.default_rng(spec["seed"] ^ TRAINING_STREAM)
    if (pick.random() >= TRAINING_P or spec["a"]["batch"] or spec["b"]["batch"] or spec["a"]["vector"]
            or spec["b"]["vector"]):
        return
    cls = str(pick.choice(TRAINING_CLASSES))
    def side(lo, hi):   # mostly whole 64-wide tiles, sometimes not
        v = int(pick.integers(lo, hi + 1))
        return v - v % 64 if pick.random() < 0.7 and v >= 64 else v
    if cls == "narrow_n":
        sizes, layouts = (side(1024, 4096), side(64, 384), side(512, 2048)), ("C", "transposed")
    elif cls == "dw":
        sizes, layouts = (side(256, 2048), side(256, 2048), side(2048, 8192)), ("transposed", "C")
    else:
        sizes, layouts = (side(1024, 4096), side(512, 2048), side(64, 320)), ("C", "C")
    trial = json.loads(json.dumps(spec))
    trial["m"], trial["n"], trial["k"] = sizes
    trial["a"]["layout"], trial["b"]["layout"] = layouts
    trial["training"] = cls
    _fit(trial, max_flops)
    if not problems(trial):
        spec.clear()
        spec.update(trial)


# --- arrays from code ----------------------------------------------------------------------------------------


# --- the reference -------------------------------------------------------------------------------------------


# --- snippets ------------------------------------------------------------------------------------------------


# --- shrinking -----------------------------------------------------------------------------------------------


# --- coverage ------------------------------------------------------------------------------------------------


# --- illegal calls -------------------------------------------------------------------------------------------

