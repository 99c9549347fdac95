"""Test helper: torch as the GPU tests' optional peer — the module or a skip that says why, and a tensor's exact
values as numpy (16-bit and fp8 through their bit patterns, as ml_dtypes types)."""
from __future__ import annotations

import pytest


def require_torch_cuda(what: str):
    """torch, or a skip naming `what` needs it, or saying that torch sees no CUDA device."""
    torch = pytest.importorskip("torch", reason=f"torch is not installed: {what} need it")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    return torch


def host_values(t):
    """A tensor's exact values as a numpy array of the same dtype (bfloat16 and fp8 as ml_dtypes types)."""
    import ml_dtypes
    import torch

    t = t.detach().cpu().contiguous()
    bits = {torch.bfloat16: (torch.int16, ml_dtypes.bfloat16),
            torch.float8_e4m3fn: (torch.int8, ml_dtypes.float8_e4m3fn),
            torch.float8_e5m2: (torch.int8, ml_dtypes.float8_e5m2)}
    if t.dtype in bits:
        int_type, np_type = bits[t.dtype]
        return t.view(int_type).numpy().view(np_type)
    return t.numpy()
