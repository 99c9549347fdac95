"""`python -m ptxgemm bench --in-dtype / --scaling / --epilogue`: the fp8 and fused-epilogue benchmarks.

The timing method is ptxgemm.runtime.timing's, as for the bf16 bench (ptxgemm/bench/suite.py): L2 flushed before each launch,
CUDA events around the launch, every implementation of a shape in one set of interleaved rounds, median. Each row
records the config ptxgemm ran (plan.config.tag) and rel_err against a float64 reference of the dequantized inputs
on bench.sample_rows' fixed rows.

fp8 (--in-dtype float8_e4m3fn or float8_e5m2; A row-major (M, K), B column-major (K-major), random standard-normal
values cast to the fp8 type; bf16 output), by --scaling:
    tensor   one random positive fp32 scale per operand, as 0-d fp32 CUDA tensors that ptxgemm (through DLPack) and
             torch._scaled_mm both read on the device; the peer is torch._scaled_mm (cuBLAS)
    row      scale_a (M, 1) and scale_b (1, N), random positive fp32 (the shapes torch._scaled_mm's rowwise scaling
             takes), the same tensors for both; the peer is torch._scaled_mm
    block    ptxgemm's blockwise scales (M, ceil(K/128)) and (ceil(K/128), ceil(N/128)) (DeepSeek-V3's recipe); the
             peer is cuBLAS's blockwise fp8 GEMM through torch on the same values, in the first call form the
             device's torch takes and that agrees with the float64 reference (bench/fp8_peers.py; each row names
             it, or says why each form was refused). Without torch the peer is ptxgemm bf16 on bf16 copies of the
             same values (the ratio is then fp8's speed over bf16's). On DeepGEMM's shapes (`--set deepgemm`)
             each row also carries DeepGEMM's published TFLOP/s and ptxgemm's over it (bench/deepgemm.py says
             what those figures are)
cuBLAS multiplies no e5m2 x e5m2: for float8_e5m2 the peer runs e5m2 x e5m2 when torch accepts it, else A e4m3 (the
same values cast) x B e5m2, and each row says which ("peer_dtypes").

--epilogue bias-<act> (any in-dtype; tensor or row scaling for fp8) times three implementations instead: ptxgemm
with the bias (float32, (N,)) and the activation fused, the plain ptxgemm GEMM, and the plain GEMM followed by a
separate elementwise pass in torch (act(out + bias) on a bf16 copy of the same bias values: the values are bf16
numbers, so both see the same bias). The row's ratio is separate ms / fused ms.

torch is imported here only while the bench runs (never by `import ptxgemm`); without it the fp8 peer and the
separate pass are left out (their fields None) and the scales are ptxgemm device arrays.
"""
from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np

from .. import gemm
from ..accuracy import activation64, dequantize
from ..errors import ConfigError
from ..kernel.config import SCALE_BLOCK
from ..plan.epilogue import m_major_table
from ..runtime import arrays, driver, timing
from .fp8_peers import (SCALED_MM_BLOCK_PEER, SCALED_MM_PEER, PeerRefused, ScaledMmBlockImpl, ScaledMmImpl)
from . import deepgemm, deepgemm_peer, kernel_time
from .row_log import RowLog
from .suite import (PtxgemmImpl, QUICK_SHAPES, SAMPLE_ROWS, SAMPLE_SEED, SQUARE_LLM_SHAPES, float64_reference, geomean,
                    geomeans, gpu_slug, group_of, max_err, read_clocks, rel_err, require_device, sample_rows, torch_rows)

IN_DTYPES = ("bfloat16", "float8_e4m3fn", "float8_e5m2")
FP8 = ("float8_e4m3fn", "float8_e5m2")
SCALINGS = ("tensor", "row", "block")
EPILOGUES = ("none", "bias-gelu", "bias-relu", "bias-silu")
# the issue's bar: a geomean over 8192^3 and the square/LLM shapes (8192^3 is one of them: listed once, first)
FP8_SHAPES = ((8192, 8192, 8192),) + tuple(s for s in SQUARE_LLM_SHAPES if s != (8192, 8192, 8192))
FP8_QUICK_SHAPES = ((8192, 8192, 8192), (4096, 4096, 4096), (4096, 14336, 4096))
SCALE_RANGE = (0.5, 2.0)          # random positive scales: uniform in [0.5, 2), so no product over- or underflows
FP8_LINE_ELEMENTS = 16            # fp8 elements per 16-byte line (group_of's unaligned rule)
BF16_PEER = "ptxgemm bf16"
SEPARATE_PEER = "ptxgemm plain GEMM + separate torch elementwise pass"
# the separate pass as an eager torch user writes it (two elementwise kernels: the add, then the activation)
SEPARATE_PASS = {"gelu": "torch.nn.functional.gelu(out + bias, approximate='tanh')",
                 "relu": "torch.nn.functional.relu(out + bias)",
                 "silu": "torch.nn.functional.silu(out + bias)"}
METHOD = "L2 flushed before each launch, CUDA events around the launch, interleaved rounds, median"
# DeepGEMM's shapes are also timed back to back (ptxgemm.runtime.timing.time_back_to_back), the way its published
# figures were taken, in runs of this many launches; the rows' *_b2b_* fields
BACK_TO_BACK_LAUNCHES = 20
METHOD_B2B = (f"back to back: no L2 flush, {BACK_TO_BACK_LAUNCHES} launches queued back to back, CUDA events around "
              "the run, mean per launch, median of 3 interleaved rounds (DeepGEMM's shapes only)")


@dataclasses.dataclass(frozen=True)
class Mode:
    """What the bench compares: input dtype, fp8 scaling (None for bf16) and the epilogue ("none" or bias-<act>)."""

    in_dtype: str = "bfloat16"
    scaling: str | None = None
    epilogue: str = "none"
    scale_a_major: str = "k"      # blockwise: ptxgemm's scale_a C-contiguous ("k") or M-major ("m": DeepGEMM's and
    #                               torch's layout, its columns padded to 16 bytes), the same values either way

    @property
    def fp8(self) -> bool:
        return self.in_dtype in FP8

    def b_major(self, requested: str | None) -> str:
        """B's layout in this mode's problems: K-major for fp8 (wgmma reads 8-bit B K-major only), else the one
        asked for (default MN-major)."""
        return "k" if self.fp8 else requested or "mn"

    @property
    def fused(self) -> bool:
        return self.epilogue != "none"

    @property
    def activation(self) -> str | None:
        return self.epilogue.removeprefix("bias-") if self.fused else None

    @property
    def is_default(self) -> bool:
        """The bf16 bench of ptxgemm/bench/suite.py (run_bench), whose output stays as it always was."""
        return self == Mode()

    @property
    def slug(self) -> str:
        """The file-name part: 'fp8_tensor', 'fp8e5m2_row', 'bf16_bias-gelu', 'fp8_row_bias-silu'."""
        parts = [{"bfloat16": "bf16", "float8_e4m3fn": "fp8", "float8_e5m2": "fp8e5m2"}[self.in_dtype]]
        if self.scaling:
            parts.append(self.scaling)
        if self.fused:
            parts.append(self.epilogue)
        if self.scale_a_major == "m":
            parts.append("amn")
        return "_".join(parts)

    @property
    def line_elements(self) -> int:
        return FP8_LINE_ELEMENTS if self.fp8 else 8

    def describe(self) -> str:
        text = self.in_dtype + (f", {self.scaling} scaling" if self.scaling else "")
        text += ", scale_a M-major" if self.scale_a_major == "m" else ""
        return text + (f", epilogue {self.epilogue}" if self.fused else "")


def mode_from_options(in_dtype: str | None, scaling: str | None, epilogue: str | None,
                      scale_a_major: str | None = None) -> Mode:
    """The Mode of bench's --in-dtype, --scaling, --epilogue and --scale-a-major (None: not given); ConfigError
    naming the option of a combination that is not benchmarked. Called before any GPU work."""
    in_dtype = in_dtype or "bfloat16"
    fp8 = in_dtype in FP8
    if scaling is not None and not fp8:
        raise ConfigError(f"--scaling: only with an fp8 --in-dtype ({' or '.join(FP8)}); {in_dtype} inputs are "
                          f"not scaled")
    scaling = scaling or ("tensor" if fp8 else None)
    epilogue = epilogue or "none"
    if scaling == "block" and epilogue != "none":
        raise ConfigError(f"--scaling block: not with --epilogue {epilogue}: the blockwise bench's peer is ptxgemm "
                          f"bf16, and the epilogue bench times tensor or row scaling (--scaling tensor or row)")
    if scale_a_major is not None and scaling != "block":
        raise ConfigError("--scale-a-major: the layout of blockwise scale_a tables, only with --scaling block")
    return Mode(in_dtype, scaling, epilogue, scale_a_major or "k")


def default_shapes(mode: Mode, quick: bool, bf16_default, bf16_quick=QUICK_SHAPES) -> list:
    """The suite when --shapes and --small-m are not given: fp8's own, else bf16's (`bf16_default()`)."""
    if mode.fp8:
        return list(FP8_QUICK_SHAPES if quick else FP8_SHAPES)
    return list(bf16_quick) if quick else bf16_default()


# --------------------------------------------------------------------------------------------------------------
# Operands: one problem's host values, device copies and float64 references, shared by every implementation
# --------------------------------------------------------------------------------------------------------------

def _torch():
    """torch when it can run on this GPU, else None (a peer is optional; ptxgemm never needs torch)."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def scaled_reference(a_rows: np.ndarray, b: np.ndarray, scaling: str | None, sa_rows=None, sb=None) -> np.ndarray:
    """(sa . A_rows) @ (B . sb) in float64 from the exact input values (ptxgemm.accuracy.dequantize): `scaling` None
    (no scales), "tensor" (0-d scales), "row" (sa_rows (rows, 1), sb (1, N)) or "block" (sa_rows (rows,
    ceil(K/128)), sb (ceil(K/128), ceil(N/128)): every element times its block's scale, as the kernel promotes
    per k-tile)."""
    if scaling is None:
        return float64_reference(a_rows, b)
    return float64_reference(*dequantize(a_rows, b, sa_rows, sb, block=scaling == "block"))


class Problem:
    """One shape's operands for `mode`: A (M, K) row-major and B (K, N) (column-major for fp8, else `b_major`),
    standard-normal values cast to the input type; the scales and the bias; their device copies; and the float64
    references on sampled rows (cached: several implementations share one)."""

    def __init__(self, m: int, n: int, k: int, mode: Mode, b_major: str, rng, torch):
        import ml_dtypes


        self.m, self.n, self.k, self.mode, self.torch = m, n, k, mode, torch
        dtype = getattr(ml_dtypes, mode.in_dtype)
        self.a = rng.standard_normal((m, k), dtype=np.float32).astype(dtype)
        b = rng.standard_normal((k, n), dtype=np.float32).astype(dtype)
        self.b = np.asfortranarray(b) if mode.fp8 or b_major == "k" else b
        self.da, self.db = arrays.DeviceArray.from_numpy(self.a), arrays.DeviceArray.from_numpy(self.b)
        lo, hi = SCALE_RANGE
        shapes = {None: None, "tensor": ((), ()), "row": ((m, 1), (1, n)),
                  "block": ((m, -(-k // SCALE_BLOCK)), (-(-k // SCALE_BLOCK), -(-n // SCALE_BLOCK)))}[mode.scaling]
        self.scale_a = self.scale_b = self.dscale_a = self.dscale_b = None
        if shapes:
            self.scale_a, self.scale_b = (rng.uniform(lo, hi, s).astype(np.float32) for s in shapes)
            # tensor and row scales: the very tensors torch._scaled_mm reads, ptxgemm reading them through DLPack
            as_device = (lambda x: torch.from_numpy(x).cuda()) if torch is not None and mode.scaling != "block" \
                else (lambda x: arrays.DeviceArray.from_numpy(x.reshape(1) if x.ndim == 0 else x))
            self.dscale_a, self.dscale_b = as_device(self.scale_a), as_device(self.scale_b)
            if mode.scale_a_major == "m":   # the same values M-major: the padded table, viewed (M, kb)
                table = m_major_table(self.scale_a)
                self._scale_a_table = arrays.DeviceArray.from_numpy(table)
                self.dscale_a = self._scale_a_table.view(self.scale_a.shape, (4, 4 * table.shape[1]))
        self.bias = self.dbias = None
        if mode.fused:
            # bf16 numbers stored as float32: the fused kernel reads float32, the separate torch pass a bf16 copy,
            # and both add exactly the same values
            self.bias = rng.standard_normal(n, dtype=np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)
            self.dbias = arrays.DeviceArray.from_numpy(self.bias)
        self._bf16 = None
        self._products: dict = {}

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k

    def bf16_operands(self):
        """bf16 copies of A and B on the device, same values and layouts (the blockwise bench's peer)."""
        if self._bf16 is None:
            import ml_dtypes


            b16 = self.b.astype(ml_dtypes.bfloat16)   # astype keeps B's order
            self._bf16 = (arrays.DeviceArray.from_numpy(self.a.astype(ml_dtypes.bfloat16)), arrays.DeviceArray.from_numpy(b16))
        return self._bf16

    def product(self, rows: np.ndarray, scaled: bool, a: np.ndarray | None = None) -> np.ndarray:
        """(scale_a . A)[rows] @ (B . scale_b) in float64 (`scaled` False: A[rows] @ B); `a` replaces A (a peer
        that ran other A values)."""
        key = (scaled and self.mode.scaling is not None, a is not None, rows.tobytes())
        if key in self._products:
            return self._products[key]
        a = self.a if a is None else a
        sa = self.scale_a[rows] if key[0] and self.scale_a.ndim else self.scale_a   # tensor scales are 0-d
        ref = scaled_reference(a[rows], self.b, self.mode.scaling if key[0] else None, sa, self.scale_b)
        self._products[key] = ref
        return ref

    def reference(self, rows: np.ndarray, scaled: bool = True, fused: bool = False, a=None) -> np.ndarray:
        ref = self.product(rows, scaled, a)
        return activation64(self.mode.activation, ref + self.bias) if fused else ref


# --------------------------------------------------------------------------------------------------------------
# Implementations: prepare(problem) -> a launcher that enqueues one run; result(rows) -> the sampled output rows;
# reference(problem, rows) -> what that output should be
# --------------------------------------------------------------------------------------------------------------

class PlanImpl(PtxgemmImpl):
    """A ptxgemm GemmPlan on the problem's device arrays: scaled as the mode says (`scaled`), with the bias and the
    activation fused (`fused`), or on the bf16 copies of the operands, unscaled (`bf16`: the blockwise peer).
    The bf16 bench's PtxgemmImpl gives `tag` and `result`."""

    def __init__(self, name: str, config, scaled: bool = True, fused: bool = False, bf16: bool = False,
                 variant: bool = False):
        super().__init__(config, name)
        self.scaled, self.fused, self.bf16 = scaled and not bf16, fused, bf16
        self.variant = variant   # a fixed config timed beside the selection's (bench --variants)
        self.plan = self.out = None

    def prepare(self, p: Problem):
        import ml_dtypes


        a, b = p.bf16_operands() if self.bf16 else (p.da, p.db)
        self.out = arrays.DeviceArray.empty((p.m, p.n), np.dtype(ml_dtypes.bfloat16))
        self.out.poison()
        kwargs = {}
        if self.scaled and p.mode.scaling:
            kwargs.update(scale_a=p.dscale_a, scale_b=p.dscale_b)
        if self.fused:
            kwargs.update(bias=p.dbias, activation=p.mode.activation)
        self.plan = gemm.GemmPlan(a, b, self.out, self.config, **kwargs)
        self._made = (a, b, kwargs)
        return self.plan.launch

    def unchained_launcher(self):
        """The same plan (its config, arrays and output) made without the programmatic launch attribute, for the
        kernel-duration method (kernel_time's rule)."""
        a, b, kwargs = self._made
        with driver.programmatic_launches(False):
            return gemm.GemmPlan(a, b, self.out, self.plan.config, **kwargs).launch

    def reference(self, p: Problem, rows):
        return p.reference(rows, scaled=self.scaled, fused=self.fused)


TORCH_ACTIVATIONS = {"gelu": lambda F, x: F.gelu(x, approximate="tanh"), "relu": lambda F, x: F.relu(x),
                     "silu": lambda F, x: F.silu(x)}


class SeparateImpl:
    """The plain ptxgemm GEMM (`plain`, prepared first), then act(out + bias) in torch: what fusing saves."""

    name = "ptxgemm plain + torch pass"

    def __init__(self, torch, plain: PlanImpl):
        self.torch, self.plain = torch, plain
        self.out = None

    def prepare(self, p: Problem):
        torch = self.torch
        gemm_out = torch.from_dlpack(self.plain.out)   # the plain plan's output, read in place
        bias = torch.from_numpy(p.bias).cuda().to(torch.bfloat16)   # exact: the values are bf16 numbers
        act, F, launch_gemm = TORCH_ACTIVATIONS[p.mode.activation], torch.nn.functional, self.plain.plan.launch

        def launch():
            launch_gemm()
            self.out = act(F, gemm_out + bias)
        return launch

    def result(self, rows):
        return torch_rows(self.torch, self.out, rows)

    def reference(self, p: Problem, rows):
        return p.reference(rows, scaled=True, fused=True)


# --------------------------------------------------------------------------------------------------------------
# The bench
# --------------------------------------------------------------------------------------------------------------

def peer_name(mode: Mode, torch) -> str | None:
    if mode.fused:
        return SEPARATE_PEER if torch is not None else None
    if mode.scaling == "block":
        return SCALED_MM_BLOCK_PEER if torch is not None else BF16_PEER
    return SCALED_MM_PEER if torch is not None else None


def ratio_means(mode: Mode, torch_present: bool = True) -> str:
    """What a row's ratio is, for the table, the JSON and --summarize."""
    if mode.fused:
        return "separate ms / fused ms (the GEMM plus a separate torch pass over the fused kernel): above 1, fusing " \
               "is faster"
    if mode.scaling == "block" and not torch_present:
        return f"{BF16_PEER} ms / ptxgemm {mode.in_dtype} ms (speed vs bf16, not a comparison with another " \
               "library): above 1, fp8 is faster"
    peer = SCALED_MM_BLOCK_PEER if mode.scaling == "block" else SCALED_MM_PEER
    return f"{peer} ms / ptxgemm ms: above 1, ptxgemm is faster"


def _impls(mode: Mode, config, torch, variants=(), dg=None) -> list:
    """The implementations of one shape, ptxgemm's first, then the peer, then DeepGEMM (`dg`, the deep_gemm module,
    blockwise only), then ptxgemm's fixed `variants` (a fresh set per shape: each holds that shape's memory)."""
    if mode.fused:
        plain = PlanImpl("ptxgemm plain", config)
        impls = [PlanImpl("ptxgemm fused", config, fused=True), plain]
        return impls + ([SeparateImpl(torch, plain)] if torch is not None else [])
    main = PlanImpl(f"ptxgemm {mode.in_dtype}", config)
    extra = [PlanImpl(f"ptxgemm {v.tag}", v, variant=True) for v in variants]
    if mode.scaling == "block":
        third = [deepgemm_peer.DeepGemmDenseImpl(dg, torch)] if dg is not None else []
        return [main, ScaledMmBlockImpl(torch) if torch is not None else PlanImpl(BF16_PEER, None, bf16=True)] + \
            third + extra
    return [main] + ([ScaledMmImpl(torch)] if torch is not None else []) + extra


def _prepare(impls, p: Problem) -> tuple[dict, dict]:
    """({name: launcher}, {name: why the peer or a variant refused}); only a PeerRefused, or a ConfigError of a
    --variants config, is tolerated."""
    launchers, refused = {}, {}
    for impl in impls:
        try:
            launchers[impl.name] = impl.prepare(p)
        except PeerRefused as e:   # torch's peers', and DeepGEMM's (deepgemm_peer.DeepGemmRefused)
            refused[impl.name] = str(e)
        except ConfigError as e:   # a fixed variant that cannot run this shape is left out of its row
            if not getattr(impl, "variant", False):
                raise
            refused[impl.name] = str(e)
    return launchers, refused


def _tflops(p: Problem, ms):
    return p.flops / ms / 1e9 if ms else None


def _ratio(num, den):
    return num / den if num and den else None


def peer_row(p: Problem, impls, times: dict, errs: dict, refused: dict, worst: dict | None = None,
             warm: dict | None = None, kernel: dict | None = None) -> dict:
    main = impls[0]
    peer = next((i for i in impls[1:] if not getattr(i, "variant", False) and not getattr(i, "extra", False)), None)
    dg = next((i for i in impls if getattr(i, "extra", False)), None)
    worst = worst or {}
    ours = times[main.name]
    theirs = times.get(peer.name) if peer else None
    row = {"ptxgemm": main.name, "peer": peer.name if peer else None, "config": main.tag,
           "ptxgemm_ms": ours, "peer_ms": theirs, "ratio": _ratio(theirs, ours),
           "ptxgemm_tflops": _tflops(p, ours), "peer_tflops": _tflops(p, theirs),
           "rel_err": errs[main.name], "peer_rel_err": errs.get(peer.name) if peer else None,
           "max_err": worst.get(main.name), "peer_max_err": worst.get(peer.name) if peer else None}
    if isinstance(peer, (ScaledMmImpl, ScaledMmBlockImpl)):
        row["peer_dtypes"] = " x ".join(peer.dtypes) if peer.dtypes else None
        if isinstance(peer, ScaledMmBlockImpl):
            row["peer_form"] = peer.form
    elif isinstance(peer, PlanImpl):
        row["peer_config"] = peer.tag
        row["peer_dtypes"] = "bfloat16 x bfloat16"
    if peer and peer.name in refused:
        row["peer_error"] = refused[peer.name]
    variants = [i for i in impls if getattr(i, "variant", False) and i.name in times]
    if variants:
        row["variants"] = {i.tag: {"ms": times[i.name], "tflops": _tflops(p, times[i.name]),
                                   "rel_err": errs.get(i.name)} for i in variants}
        for i in variants:
            if warm and warm.get(i.name):
                row["variants"][i.tag].update(b2b_ms=warm[i.name], b2b_tflops=_tflops(p, warm[i.name]))
            for suffix, ms in (kernel or {}).items():
                if ms.get(i.name):
                    row["variants"][i.tag].update({f"kernel{suffix}_ms": ms[i.name],
                                                   f"kernel{suffix}_tflops": _tflops(p, ms[i.name])})
    if warm:   # the back-to-back figures (timing.time_back_to_back), beside the burst ones
        row["ptxgemm_b2b_ms"], row["peer_b2b_ms"] = warm.get(main.name), warm.get(peer.name) if peer else None
        row["ptxgemm_b2b_tflops"], row["peer_b2b_tflops"] = _tflops(p, row["ptxgemm_b2b_ms"]), _tflops(p, row["peer_b2b_ms"])
        row["b2b_ratio"] = _ratio(row["peer_b2b_ms"], row["ptxgemm_b2b_ms"])
    published = deepgemm.published(p.m, p.n, p.k) if p.mode.scaling == "block" else None
    if published is not None:
        row["published_tflops"] = published
        row["published_source"] = "DeepGEMM README (2025-02), H800; see ptxgemm/bench/deepgemm.py"
        row["vs_published"] = _ratio(row["ptxgemm_tflops"], published)
        if row.get("ptxgemm_b2b_tflops"):
            row["vs_published_b2b"] = _ratio(row["ptxgemm_b2b_tflops"], published)
    for suffix, ms in (kernel or {}).items():   # the kernel-duration method (kernel_time), DeepGEMM's own
        ours_k, theirs_k = ms.get(main.name), ms.get(peer.name) if peer else None
        row[f"ptxgemm_kernel{suffix}_ms"], row[f"peer_kernel{suffix}_ms"] = ours_k, theirs_k
        row[f"ptxgemm_kernel{suffix}_tflops"] = _tflops(p, ours_k)
        row[f"peer_kernel{suffix}_tflops"] = _tflops(p, theirs_k)
        row[f"kernel{suffix}_ratio"] = _ratio(theirs_k, ours_k)
        if published is not None and ours_k:
            row[f"vs_published_kernel{suffix}"] = _ratio(_tflops(p, ours_k), published)
    if dg is not None:   # DeepGEMM measured here, beside ptxgemm, by every method the row has
        row["deepgemm"] = dg.name
        if dg.name in refused:
            row["deepgemm_error"] = refused[dg.name]
        row["deepgemm_ms"], row["deepgemm_rel_err"] = times.get(dg.name), errs.get(dg.name)
        row["deepgemm_max_err"] = worst.get(dg.name)
        row["vs_deepgemm"] = _ratio(times.get(dg.name), ours)
        if warm:
            row["deepgemm_b2b_ms"] = warm.get(dg.name)
            row["vs_deepgemm_b2b"] = _ratio(warm.get(dg.name), warm.get(main.name))
        for suffix, ms in (kernel or {}).items():
            row[f"deepgemm_kernel{suffix}_ms"] = ms.get(dg.name)
            row[f"deepgemm_kernel{suffix}_tflops"] = _tflops(p, ms.get(dg.name))
            row[f"vs_deepgemm_kernel{suffix}"] = _ratio(ms.get(dg.name), ms.get(main.name))
    return row


def epilogue_row(p: Problem, impls, times: dict, errs: dict, refused: dict) -> dict:
    fused, plain = impls[0], impls[1]
    separate = impls[2] if len(impls) > 2 else None
    f_ms, p_ms = times[fused.name], times[plain.name]
    s_ms = times.get(separate.name) if separate else None
    return {"ptxgemm": fused.name, "plain": plain.name, "separate": separate.name if separate else None,
            "config": fused.tag, "plain_config": plain.tag,
            "fused_ms": f_ms, "plain_ms": p_ms, "separate_ms": s_ms, "ratio": _ratio(s_ms, f_ms),
            "overhead_vs_plain": f_ms / p_ms - 1.0, "saved_vs_separate": 1.0 - f_ms / s_ms if s_ms else None,
            "fused_tflops": _tflops(p, f_ms), "plain_tflops": _tflops(p, p_ms), "separate_tflops": _tflops(p, s_ms),
            "rel_err": errs[fused.name], "plain_rel_err": errs[plain.name],
            "separate_rel_err": errs.get(separate.name) if separate else None}


def _fmt(x, spec: str) -> str:
    """x formatted by spec, or '-' in the same width where there is no value (no peer, no separate pass)."""
    return format(x, spec) if x is not None else format("-", spec.split(".")[0].replace("+", ""))


def _header(mode: Mode, peer: str | None) -> tuple[str, str]:
    if mode.fused:
        return ((f"{'M':>6} {'N':>6} {'K':>6} | {'config':<14} | {'fused ms':>9} {'TFLOP/s':>8} | {'plain ms':>9} | "
                 f"{'separate ms':>11} | {'vs peer':>7} | {'overhead':>8} {'saved':>7} | {'rel_err':>9}"),
                "(vs peer = separate ms / fused ms; overhead = fused/plain - 1; saved = 1 - fused/separate)")
    return ((f"{'M':>6} {'N':>6} {'K':>6} | {'config':<14} | {'ptxgemm ms':>10} {'TFLOP/s':>8} | {'peer ms':>10} "
             f"{'TFLOP/s':>8} | {'ratio':>6} | {'rel_err':>9} {'peer err':>9}"),
            f"(peer: {peer or 'none'}; ratio = {ratio_means(mode, peer != BF16_PEER)})")


def _line(mode: Mode, r: dict) -> str:
    head = f"{r['M']:>6} {r['N']:>6} {r['K']:>6} | {r['config']:<14} | "
    if mode.fused:
        return head + (f"{r['fused_ms']:>9.4f} {r['fused_tflops']:>8.1f} | {r['plain_ms']:>9.4f} | "
                       f"{_fmt(r['separate_ms'], '>11.4f')} | {_fmt(r['ratio'], '>7.3f')} | "
                       f"{r['overhead_vs_plain']:>+8.1%} {_fmt(r['saved_vs_separate'], '>7.1%')} | "
                       f"{r['rel_err']:>9.2e}")
    text = head + (f"{r['ptxgemm_ms']:>10.4f} {r['ptxgemm_tflops']:>8.1f} | {_fmt(r['peer_ms'], '>10.4f')} "
                   f"{_fmt(r['peer_tflops'], '>8.1f')} | {_fmt(r['ratio'], '>6.3f')} | {r['rel_err']:>9.2e} "
                   f"{_fmt(r['peer_rel_err'], '>9.2e')}")
    if r.get("peer") == SCALED_MM_PEER and r.get("peer_dtypes") not in (None, f"{mode.in_dtype} x {mode.in_dtype}"):
        text += f" | peer ran {r['peer_dtypes']}"
    if r.get("b2b_ratio") is not None:
        text += f" | b2b {r['ptxgemm_b2b_tflops']:.0f} vs {r['peer_b2b_tflops']:.0f}: {r['b2b_ratio']:.3f}"
    if r.get("vs_published") is not None:
        text += f" | DeepGEMM {r['published_tflops']:.0f} -> {r['vs_published']:.3f}"
        if r.get("vs_published_b2b") is not None:
            text += f" (b2b {r['vs_published_b2b']:.3f})"
    if r.get("deepgemm"):   # measured here: kernel durations, back to back and flushed (DeepGEMM's two harnesses)
        text += (f" | DeepGEMM here: kernel {_fmt(r.get('deepgemm_kernel_tflops'), '.0f')} TFLOP/s, DeepGEMM ms / ours "
                 f"{_fmt(r.get('vs_deepgemm_kernel'), '.3f')} (flushed {_fmt(r.get('vs_deepgemm_kernel_flushed'), '.3f')}"
                 f"), err {_fmt(r.get('deepgemm_rel_err'), '.1e')}")
        if r.get("deepgemm_error"):
            text += f" refused: {r['deepgemm_error']}"
    for tag, v in (r.get("variants") or {}).items():
        text += f" | {tag} {v['tflops']:.0f}"
    if r.get("peer_error"):
        text += f" | peer refused: {r['peer_error']}"
    return text


def run_mode_bench(shapes, rounds: int, mode: Mode, config=None, out="bench_out", name: str | None = None,
                   tune_cache: str = "off", b_major: str = "mn", variants=(), deepgemm_dir: str | None = None) -> int:
    """Time every shape in `mode` (see the module's docstring) with all its implementations, and the fixed configs
    `variants` (not with --epilogue), in one set of interleaved rounds; print the table and write
    bench_<gpu>_<mode.slug>[_<name>].json and .png to `out`. `b_major` applies to bf16 inputs (fp8's B is always
    column-major)."""

    info = require_device()
    torch = _torch()
    dg = deepgemm_peer.load(deepgemm_dir) if deepgemm_dir is not None else None
    peer = peer_name(mode, torch)
    b_major = mode.b_major(b_major)
    config_desc = config.describe() if config else f"library selection (select_config; tune cache {tune_cache})"
    print(f"# {info.name}, {info.sm_count} SMs, driver {info.driver_version_str}; {mode.describe()}; peer: "
          f"{peer or 'none'}{'; ' + deepgemm_peer.describe(dg) if dg is not None else ''}; ptxgemm config: "
          f"{config_desc}; {rounds} rounds, median", flush=True)
    header, legend = _header(mode, peer)
    print(header)
    print("-" * len(header))
    print(legend)
    rows, peer_dtypes = [], []
    stem = f"bench_{gpu_slug(info.name)}_{mode.slug}" + (f"_{name}" if name else "")
    log = RowLog(out, stem, {"gpu": info.name, "mode": mode.slug, "peer": peer, "config": config_desc,
                             "rounds": rounds, "deepgemm": deepgemm_peer.describe(dg) if dg is not None else None})
    rng = np.random.default_rng(0)
    for m, n, k in shapes:
        p = Problem(m, n, k, mode, b_major, rng, torch)
        impls = _impls(mode, config, torch, variants, dg)
        launchers, refused = _prepare(impls, p)
        times = timing.time_interleaved(launchers, rounds, warmup=3)
        # ptxgemm's selection, the peer and any --variants
        compared = [i.name for j, i in enumerate(impls) if i.name in launchers and
                    (j < 2 or getattr(i, "variant", False) or getattr(i, "extra", False))]
        warm = (timing.time_back_to_back({n: launchers[n] for n in compared}, BACK_TO_BACK_LAUNCHES, rounds=3)
                if mode.scaling and deepgemm.published(m, n, k) is not None else {})
        # DeepGEMM's own method (kernel durations from the profiler, L2 flushed), beside the published figures
        kernel = {}
        if torch is not None and mode.scaling and deepgemm.published(m, n, k) is not None:
            unchained = {i.name: i.unchained_launcher() if hasattr(i, "unchained_launcher") else launchers[i.name]
                         for i in impls if i.name in compared}   # ptxgemm's plans without PDL (kernel_time)
            kernel = {"": kernel_time.kernel_ms(unchained, torch),   # --variants and DeepGEMM too
                      "_flushed": kernel_time.kernel_ms(unchained, torch, flush=True)}
        picked = sample_rows(m)
        errs, worst = {}, {}
        for i in impls:
            if i.name in launchers:
                got, want = i.result(picked), i.reference(p, picked)
                errs[i.name], worst[i.name] = rel_err(got, want), max_err(got, want)
        row = {"M": m, "N": n, "K": k, "group": group_of(m, n, k, mode.line_elements), "in_dtype": mode.in_dtype,
               "scaling": mode.scaling, "epilogue": mode.epilogue,
               **({"scale_a_major": mode.scale_a_major} if mode.scaling == "block" else {}),
               "config_source": "fixed (--config)" if config is not None else f"library selection (tune cache "
                                                                               f"{tune_cache})",
               **(epilogue_row(p, impls, times, errs, refused) if mode.fused else
                  peer_row(p, impls, times, errs, refused, worst, warm, kernel)), "rel_err_rows": len(picked)}
        rows.append(row)
        log.add(row)
        if row.get("peer_dtypes") and row["peer_dtypes"] not in peer_dtypes:
            peer_dtypes.append(row["peer_dtypes"])
        print(_line(mode, row), flush=True)
        del launchers, impls, p   # this shape's memory goes before the next shape's is allocated

    means = geomeans(rows)
    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    min_ratio = min(ratios) if ratios else None
    summary = {}
    if ratios:
        summary = {"geomean_ratio": means["all"], "min_ratio": min_ratio}
        print("-" * len(header))
        print("geomean ratio: " + ", ".join(f"{g} {v:.3f}" if v is not None else f"{g} -" for g, v in means.items())
              + f"; min {min_ratio:.3f}")
    published = [r for r in rows if r.get("vs_published") is not None]
    if published:
        summary["published"] = deepgemm.PUBLISHED_SOURCE
        summary["geomean_vs_published"] = geomean([r["vs_published"] for r in published])
        summary["min_vs_published"] = min(r["vs_published"] for r in published)
        summary["vs_published_shapes"] = len(published)
        print(f"ptxgemm TFLOP/s over DeepGEMM's published, {len(published)} shapes: geomean "
              f"{summary['geomean_vs_published']:.3f}, min {summary['min_vs_published']:.3f} (burst)")
        b2b = [r["vs_published_b2b"] for r in published if r.get("vs_published_b2b")]
        if b2b:
            summary["geomean_vs_published_b2b"], summary["min_vs_published_b2b"] = geomean(b2b), min(b2b)
            print(f"... back to back ({BACK_TO_BACK_LAUNCHES} launches, L2 warm): geomean "
                  f"{summary['geomean_vs_published_b2b']:.3f}, min {summary['min_vs_published_b2b']:.3f}")
        for suffix, what in (("", "back to back: DeepGEMM's 2025-02 method"), ("_flushed", "L2 flushed")):
            kern = [r[f"vs_published_kernel{suffix}"] for r in published if r.get(f"vs_published_kernel{suffix}")]
            if kern:
                summary[f"geomean_vs_published_kernel{suffix}"] = geomean(kern)
                summary[f"min_vs_published_kernel{suffix}"] = min(kern)
                print(f"... kernel durations (profiler, {what}): geomean {geomean(kern):.3f}, min {min(kern):.3f}")
    for suffix in ("", "_flushed"):
        kernel_ratios = [r[f"kernel{suffix}_ratio"] for r in rows if r.get(f"kernel{suffix}_ratio")]
        if kernel_ratios:
            summary[f"geomean_kernel{suffix}_ratio"] = geomean(kernel_ratios)
            summary[f"min_kernel{suffix}_ratio"] = min(kernel_ratios)
            print(f"geomean ratio by kernel durations{' (L2 flushed)' if suffix else ''}: "
                  f"{geomean(kernel_ratios):.3f}; min {min(kernel_ratios):.3f}")
    for key in ("vs_deepgemm_kernel", "vs_deepgemm_kernel_flushed", "vs_deepgemm", "vs_deepgemm_b2b"):
        vs = [r[key] for r in rows if r.get(key)]
        if vs:   # DeepGEMM's time over ptxgemm's, measured side by side: above 1, ptxgemm is faster
            large = [r[key] for r in rows if r.get(key) and r["M"] >= 4096]
            summary[f"geomean_{key}"], summary[f"min_{key}"] = geomean(vs), min(vs)
            summary[f"shapes_{key}"] = len(vs)
            if large:
                summary[f"min_{key}_m4096"] = min(large)
            print(f"{key} (DeepGEMM ms / ptxgemm ms, this GPU): geomean {geomean(vs):.3f} over {len(vs)} shapes, "
                  f"min {min(vs):.3f}" + (f", M >= 4096 min {min(large):.3f}" if large else ""))
    if dg is not None:
        summary["deepgemm"] = deepgemm_peer.describe(dg)
    b2b_ratios = [r["b2b_ratio"] for r in rows if r.get("b2b_ratio")]
    if b2b_ratios:
        summary["geomean_b2b_ratio"], summary["min_b2b_ratio"] = geomean(b2b_ratios), min(b2b_ratios)
        print(f"geomean ratio back to back: {summary['geomean_b2b_ratio']:.3f}; min {summary['min_b2b_ratio']:.3f}")
    if mode.fused:
        summary["geomean_fused_over_plain"] = geomean([r["fused_ms"] / r["plain_ms"] for r in rows])
        print(f"geomean fused ms / plain ms: {summary['geomean_fused_over_plain']:.3f}")
    result = {"gpu": info.name, "driver": info.driver_version_str, "sm_count": info.sm_count, "clocks": read_clocks(),
              "tune_cache": tune_cache, "in_dtype": mode.in_dtype, "scaling": mode.scaling, "epilogue": mode.epilogue,
              **({"scale_a_major": mode.scale_a_major} if mode.scaling == "block" else {}),
              "mode": mode.slug, "peer": peer, "peer_dtypes": peer_dtypes or None,
              "ratio_means": ratio_means(mode, torch is not None),
              "implementations": [i.name for i in _impls(mode, config, torch, variants, dg)],
              "torch": torch.__version__ if torch is not None else None,
              "config": config_desc, "rounds": rounds, "a_major": "k", "b_major": b_major,
              "operands": _operands_text(mode),
              "method": METHOD, "method_b2b": METHOD_B2B if any(r.get("b2b_ratio") for r in rows) else None,
              "method_kernel": kernel_time.METHOD_KERNEL if any(r.get("ptxgemm_kernel_ms") for r in rows) else None,
              "rel_err_method": f"{SAMPLE_ROWS} fixed rows (seed {SAMPLE_SEED}) against float64 of the dequantized "
                                f"inputs each implementation ran" + (", then act(. + bias)" if mode.fused else ""),
              "date": time.strftime("%Y-%m-%d %H:%M:%S"), "geomeans": means, "min_ratio": min_ratio,
              "summary": summary, "rows": rows}
    if mode.fused:
        result["separate_pass"] = SEPARATE_PASS[mode.activation] + " in bf16 (after the plain ptxgemm GEMM)"
    if peer == SCALED_MM_PEER:
        result["peer_options"] = "out_dtype=torch.bfloat16, use_fast_accum=False (torch's default)"
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{stem}.json").write_text(json.dumps(result, indent=1))
    log.close()
    plot(rows, mode, out_dir / f"{stem}.png", info.name)
    print(f"wrote {out_dir / (stem + '.json')} and {out_dir / (stem + '.png')}")
    return 0


def _operands_text(mode: Mode) -> str:
    text = (f"standard normal cast to {mode.in_dtype}; A row-major (M, K), B "
            + ("column-major (K-major)" if mode.fp8 else "per b_major"))
    if mode.scaling:
        text += f"; {mode.scaling} scales uniform in [{SCALE_RANGE[0]}, {SCALE_RANGE[1]}), float32"
    if mode.fused:
        text += f"; bias (N,) float32 holding bf16 numbers, activation {mode.activation}"
    return text + "; bf16 output"


# the TFLOP/s series of the plot: (label, row field)
def _series(mode: Mode, rows) -> list[tuple[str, str]]:
    if mode.fused:
        return [("ptxgemm fused", "fused_tflops"), ("ptxgemm plain", "plain_tflops"),
                ("plain + torch pass", "separate_tflops")]
    peer = next((r["peer"] for r in rows if r.get("peer")), None)
    return [(f"ptxgemm {mode.in_dtype}", "ptxgemm_tflops"), (peer, "peer_tflops")]


def plot(rows, mode: Mode, path: Path, gpu: str):
    """TFLOP/s per shape, one bar per implementation."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        import sys

        print("matplotlib not installed: no plot", file=sys.stderr)
        return
    series = [(label, key) for label, key in _series(mode, rows) if any(r.get(key) for r in rows)]  # ran at all
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(rows) + 2), 4.5))
    x = np.arange(len(rows))
    width = 0.8 / len(series)
    for i, (label, key) in enumerate(series):
        ax.bar(x + (i - (len(series) - 1) / 2) * width, [r.get(key) or 0.0 for r in rows], width, label=label)
    ax.set_xticks(x, [f"{r['M']}x{r['N']}x{r['K']}\n{r.get('config', '')}" for r in rows], rotation=20, fontsize=7)
    ax.set_ylabel("TFLOP/s (2MNK / time)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    ax.set_title(f"{mode.describe()} on {gpu}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
