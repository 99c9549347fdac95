"""fp8 quantization in DeepSeek-V3's blockwise recipe, as torch ops: a weight per 128x128 block, activations per
token per 128 columns, each block scaled so its largest magnitude maps to fp8's largest finite value.

The scales are float32 and multiply back: x ~ scale * q. Their layouts are the ones ptxgemm::scaled_mm reads:
activations (M, ceil(K/128)); a weight W (N, K) gives (ceil(N/128), ceil(K/128)), and the product X @ W^T takes
its transpose (ceil(K/128), ceil(N/128)), C-contiguous (Fp8Linear keeps that copy)."""
from __future__ import annotations

import torch

from ..errors import ConfigError
from ..kernel.config import SCALE_BLOCK
from . import tensors

#: the smallest amax a block is scaled for: an all-zero block would otherwise divide by zero (DeepGEMM's 1e-4)
MIN_AMAX = 1e-4


def _fp8_max(dtype: torch.dtype) -> float:
    if dtype not in tensors.FP8_DTYPES:
        raise ConfigError(f"dtype: an fp8 dtype (torch.float8_e4m3fn, torch.float8_e5m2), got {dtype}")
    return float(torch.finfo(dtype).max)


def _padded(x: torch.Tensor, rows_to: int, cols_to: int) -> torch.Tensor:
    pad_r, pad_c = -x.shape[0] % rows_to, -x.shape[1] % cols_to
    return torch.nn.functional.pad(x, (0, pad_c, 0, pad_r)) if pad_r or pad_c else x


def quantize_activations(x: torch.Tensor, dtype: torch.dtype = torch.float8_e4m3fn):
    """x (M, K) -> (q (M, K) fp8, scale (M, ceil(K/128)) float32): one scale per token per 128 columns."""
    if x.dim() != 2:
        raise ConfigError(f"x: activations (M, K), got shape {tuple(x.shape)}")
    top = _fp8_max(dtype)
    m, k = x.shape
    blocks = _padded(x.float(), 1, SCALE_BLOCK).view(m, -1, SCALE_BLOCK)
    amax = blocks.abs().amax(-1).clamp(min=MIN_AMAX)
    scale = amax / top
    q = (blocks / scale.unsqueeze(-1)).view(m, -1)[:, :k].to(dtype)
    return q.contiguous(), scale


def quantize_weight(w: torch.Tensor, dtype: torch.dtype = torch.float8_e4m3fn):
    """w (N, K) -> (q (N, K) fp8, scale (ceil(N/128), ceil(K/128)) float32): one scale per 128x128 block."""
    if w.dim() != 2:
        raise ConfigError(f"w: a weight (N, K), got shape {tuple(w.shape)}")
    top = _fp8_max(dtype)
    n, k = w.shape
    p = _padded(w.float(), SCALE_BLOCK, SCALE_BLOCK)
    nb, kb = p.shape[0] // SCALE_BLOCK, p.shape[1] // SCALE_BLOCK
    blocks = p.view(nb, SCALE_BLOCK, kb, SCALE_BLOCK)
    amax = blocks.abs().amax((1, 3)).clamp(min=MIN_AMAX)
    scale = amax / top
    q = (blocks / scale[:, None, :, None]).view(p.shape)[:n, :k].to(dtype)
    return q.contiguous(), scale


def dequantize_weight(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The float32 values a quantized weight stands for (for checking)."""
    n, k = q.shape
    full = scale.repeat_interleave(SCALE_BLOCK, 0)[:n].repeat_interleave(SCALE_BLOCK, 1)[:, :k]
    return q.float() * full


def dequantize_activations(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    k = q.shape[1]
    return q.float() * scale.repeat_interleave(SCALE_BLOCK, 1)[:, :k]
