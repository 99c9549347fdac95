"""Drop-in linear layers on ptxgemm: `Linear` (bfloat16/float16, with gradients), `Fp8Linear` (fp8 blockwise
inference: the weight quantized per 128x128 once, activations per token per 128 on every call) and
`replace_linear`, which swaps a model's torch.nn.Linear modules for them in place."""
from __future__ import annotations

import torch
from torch import nn

from ..errors import ConfigError
from . import ops, quant


def _rows(x: torch.Tensor, features: int, name: str) -> torch.Tensor:
    if x.shape[-1] != features:
        raise ConfigError(f"{name}: its last axis must be in_features = {features}, got shape {tuple(x.shape)}")
    return x.reshape(-1, features)   # a view for the contiguous activations of a model


class Linear(nn.Linear):
    """torch.nn.Linear whose product runs on ptxgemm: y = x @ W^T + b in one kernel (the bias fused), the weight
    read in place as the K-major operand (no transpose copy). Gradients of x, W and b come from ptxgemm too
    (ptxgemm.torch.autograd). x must have the weight's dtype (bfloat16 or float16): no silent cast."""

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> "Linear":
        """A Linear sharing `linear`'s parameters (the same tensors: an optimizer holding them keeps working)."""
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.in_features, new.out_features = linear.in_features, linear.out_features
        new.weight, new.bias = linear.weight, linear.bias
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # the parameters read from the module's table: Module.__getattr__ costs about 1 us per name on every call
        # (a parametrized name is not in the table, and takes it)
        params = self._parameters
        w = params["weight"] if "weight" in params else self.weight
        bias = params["bias"] if "bias" in params else self.bias
        if x.dim() == 2 and x.shape[1] == self.in_features:   # already the rows: no reshape either way
            return ops.linear_mm(x, w, bias)
        y = ops.linear_mm(_rows(x, self.in_features, "x"), w, bias)
        return y.reshape(*x.shape[:-1], self.out_features)


class Fp8Linear(nn.Module):
    """Inference in DeepSeek-V3's fp8 recipe: the weight held as e4m3 with one float32 scale per 128x128 block;
    each call quantizes the activations per token per 128 columns (ptxgemm.torch.quant) and runs ptxgemm::scaled_mm
    with both scale tables, the bias fused, the output in the activations' dtype. No gradients."""

    def __init__(self, weight_q: torch.Tensor, weight_scale_kn: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.out_features, self.in_features = weight_q.shape
        self.register_buffer("weight_q", weight_q)             # (N, K) e4m3, row-major: read K-major as W^T
        self.register_buffer("weight_scale", weight_scale_kn)  # (ceil(K/128), ceil(N/128)), C-contiguous
        self.register_buffer("bias", bias)

    @classmethod
    @torch.no_grad()
    def from_linear(cls, linear: nn.Linear, dtype: torch.dtype = torch.float8_e4m3fn) -> "Fp8Linear":
        q, scale = quant.quantize_weight(linear.weight.detach(), dtype)
        bias = None if linear.bias is None else linear.bias.detach().clone()
        return cls(q, scale.t().contiguous(), bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xq, sx = quant.quantize_activations(_rows(x, self.in_features, "x"), self.weight_q.dtype)
        args = (xq, self.weight_q.t(), sx, self.weight_scale, self.bias, None, 1.0, x.dtype)
        y = ops.scaled_mm_impl(*args) if ops.eager_ok(xq, self.weight_q, sx, self.bias) else ops.scaled_mm(*args)
        return y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def replace_linear(model: nn.Module, *, fp8: bool = False, include=None) -> int:
    """Swap every torch.nn.Linear in `model` (exactly that class, not subclasses; `include(name, module)` filters)
    for `Linear` (sharing its parameters) or, with fp8=True, `Fp8Linear` (a quantized copy of the weight: for
    inference). In place; returns how many were swapped."""
    swapped = 0
    for parent_name, parent in list(model.named_modules()):
        for child_name, child in list(parent.named_children()):
            if type(child) is not nn.Linear:
                continue
            name = f"{parent_name}.{child_name}" if parent_name else child_name
            if include is not None and not include(name, child):
                continue
            setattr(parent, child_name, Fp8Linear.from_linear(child) if fp8 else Linear.from_linear(child))
            swapped += 1
    return swapped
