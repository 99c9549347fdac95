"""The fp8 peers of the benchmark: torch._scaled_mm (cuBLAS) on the very operand bytes and scale values ptxgemm
runs, per tensor, per row, or blockwise (1x128 per row of A, 128x128 per block of B, DeepSeek-V3's recipe) where the
device's torch takes blockwise scales. torch is imported by the caller, only while a bench runs."""
from __future__ import annotations

import numpy as np

from .suite import rel_err, sample_rows, torch_rows

SCALED_MM_PEER = "torch._scaled_mm (cuBLAS)"
SCALED_MM_BLOCK_PEER = "torch scaled_mm blockwise (cuBLAS)"
# A blockwise call form is taken only when its output agrees with the float64 reference to this relative error
# (bf16 output rounds at 2^-9 ~ 0.002; a misread scale layout is off by the scales' spread, tens of percent)
PEER_AGREEMENT = 0.02


class PeerRefused(Exception):
    """The peer does not run this problem (torch refused it); the row records why and goes on without it."""


def torch_fp8(torch, x: np.ndarray, dtype: str):
    """A C-contiguous numpy fp8 array as a CUDA torch tensor of the same bytes (neither numpy nor DLPack knows the
    other's fp8 types, so it goes as uint8)."""
    return torch.from_numpy(np.ascontiguousarray(x).view(np.uint8)).cuda().view(getattr(torch, dtype))


def peer_dtype_pairs(in_dtype: str) -> list[tuple[str, str]]:
    """(A, B) dtypes to try with torch._scaled_mm, in order: the bench's own; for e5m2 then A e4m3 x B e5m2 (cuBLAS
    has no e5m2 x e5m2 kernel, and torch refuses the pair)."""
    pairs = [(in_dtype, in_dtype)]
    if in_dtype == "float8_e5m2":
        pairs.append(("float8_e4m3fn", "float8_e5m2"))
    return pairs


class ScaledMmImpl:
    """torch._scaled_mm (cuBLAS) with bf16 output and torch's default use_fast_accum=False, on the same operand
    bytes (B column-major: the transposed view of a row-major (N, K) tensor) and the same scale tensors."""

    name = SCALED_MM_PEER

    def __init__(self, torch):
        self.torch = torch
        self.out = None
        self.dtypes = None       # (A, B) dtypes it ran
        self.a_values = None     # the A it ran when not the bench's own (e4m3 for an e5m2 bench), else None

    def prepare(self, p):
        import ml_dtypes

        torch = self.torch
        tb = torch_fp8(torch, p.b.T, p.mode.in_dtype).t()   # p.b is column-major: p.b.T is row-major (N, K)
        sa, sb = p.dscale_a, p.dscale_b
        refusals = []
        for a_dtype, b_dtype in peer_dtype_pairs(p.mode.in_dtype):
            a = p.a if a_dtype == p.mode.in_dtype else p.a.astype(np.float32).astype(getattr(ml_dtypes, a_dtype))
            ta = torch_fp8(torch, a, a_dtype)
            try:   # once, synchronously: torch's checks raise here, and this is one more warm-up
                self.out = torch._scaled_mm(ta, tb, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
                torch.cuda.synchronize()
            except (RuntimeError, NotImplementedError, TypeError, ValueError) as e:
                first_line = (str(e).strip().splitlines() or [repr(e)])[0]   # torch appends C++ frames below it
                refusals.append(f"{a_dtype} x {b_dtype}: {first_line}")
                continue
            self.dtypes = (a_dtype, b_dtype)
            self.a_values = None if a is p.a else a

            def launch():
                self.out = torch._scaled_mm(ta, tb, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
            return launch
        raise PeerRefused("; ".join(refusals))

    def result(self, rows):
        return torch_rows(self.torch, self.out, rows)

    def reference(self, p, rows):
        return p.reference(rows, scaled=True, fused=False, a=self.a_values)


def _block_forms(torch, ta, tb, scale_a: np.ndarray, scale_b: np.ndarray):
    """(description, call) for each way torch may take blockwise scales, most specific first. scale_a is ptxgemm's
    (M, ceil(K/128)) table, scale_b its (ceil(K/128), ceil(N/128)) one. cuBLAS wants A's scales M-major (the
    transpose of a contiguous (Kb, M)) and B's as the transpose of a contiguous (Nb, Kb), K blocks padded to a
    multiple of 4: torch.nn.functional.scaled_mm with explicit recipes (torch >= 2.10), else torch._scaled_mm,
    which infers the recipe from the shapes."""
    kb = scale_a.shape[1]
    sa = torch.from_numpy(np.ascontiguousarray(scale_a.T)).cuda().t()               # (M, Kb), M-major
    sb_nk = np.ascontiguousarray(scale_b.T)                                          # (Nb, Kb)
    sb = torch.from_numpy(sb_nk).cuda().t()                                          # (Kb, Nb), Kb-major
    padded = np.zeros((sb_nk.shape[0], -(-kb // 4) * 4), np.float32)
    padded[:, :kb] = sb_nk
    sb_pad = torch.from_numpy(padded).cuda().t()                                     # (Kb padded, Nb)
    forms = []
    F = torch.nn.functional
    if hasattr(F, "scaled_mm") and hasattr(F, "ScalingType"):
        st = F.ScalingType
        for what, b_scales in (("K blocks padded to 4", sb_pad), ("K blocks as they are", sb)):
            forms.append((f"torch.nn.functional.scaled_mm, BlockWise1x128 x BlockWise128x128, {what}",
                          lambda b_scales=b_scales: F.scaled_mm(ta, tb, sa, st.BlockWise1x128, b_scales,
                                                                st.BlockWise128x128, output_dtype=torch.bfloat16)))
    for what, b_scales in (("K blocks as they are", sb), ("K blocks padded to 4", sb_pad)):
        forms.append((f"torch._scaled_mm, recipe inferred from the scale shapes, {what}",
                      lambda b_scales=b_scales: torch._scaled_mm(ta, tb, scale_a=sa, scale_b=b_scales,
                                                                 out_dtype=torch.bfloat16)))
    return forms


class ScaledMmBlockImpl:
    """cuBLAS's blockwise-scaled fp8 GEMM through torch, on the same operand bytes and scale values as ptxgemm
    (relaid out as cuBLAS wants them: the copies are made once, outside the timed launches). The first call form
    that runs and agrees with the float64 reference is timed; if none does, PeerRefused says why for each."""

    name = SCALED_MM_BLOCK_PEER

    def __init__(self, torch):
        self.torch = torch
        self.out = None
        self.form = None    # the call form that ran
        self.dtypes = None

    def prepare(self, p):
        torch = self.torch
        ta = torch_fp8(torch, p.a, p.mode.in_dtype)
        tb = torch_fp8(torch, p.b.T, p.mode.in_dtype).t()   # p.b is column-major: p.b.T is row-major (N, K)
        rows = sample_rows(p.m)     # the rows the bench checks too: their float64 reference is computed once
        want = p.reference(rows)
        refusals = []
        for what, call in _block_forms(torch, ta, tb, p.scale_a, p.scale_b):
            try:
                self.out = call()
                torch.cuda.synchronize()
            except (RuntimeError, NotImplementedError, TypeError, ValueError, AttributeError) as e:
                refusals.append(f"{what}: {(str(e).strip().splitlines() or [repr(e)])[0]}")
                continue
            err = rel_err(self.result(rows), want)
            if err > PEER_AGREEMENT:
                refusals.append(f"{what}: ran, but disagrees with the reference (rel_err {err:.3g})")
                continue
            self.form, self.dtypes = what, (p.mode.in_dtype, p.mode.in_dtype)

            def launch(call=call):
                self.out = call()
            return launch
        raise PeerRefused("; ".join(refusals))

    def result(self, rows):
        return torch_rows(self.torch, self.out, rows)

    def reference(self, p, rows):
        return p.reference(rows, scaled=True, fused=False)
