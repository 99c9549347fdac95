"""The autograd kernels of the public ops (ptxgemm.torch.ops): `ptxgemm::mm` and `ptxgemm::grouped_mm` record
their gradient (an autograd.Function whose forward is the launch op) or, with no gradient to record, call the
launch op directly; `ptxgemm::scaled_mm` refuses a gradient by name. The gradients are computed by ptxgemm's own
launch ops, so a traced backward holds launch ops only:

    C = act(alpha * A @ B + beta * c + bias)       dP = dC * act'(P)  (P recomputed: one more GEMM, in float32)
    dA = alpha * dP @ B^T                          dB = alpha * A^T @ dP  (for a transposed view B = W^T: dB^T =
    dbias = the sum of dP over what bias spans      alpha * dP^T @ A, written in W's own layout, with no copy)
    dc = beta * dP

    grouped, contiguous form: dA = grouped_mm(dP, B^T, offs); dB = the k-grouped form (A^T @ dP over each group's
    rows), the expert weights' gradient in one launch; dbias per expert = dP's rows summed per group.

The gradient GEMMs run in the inputs' dtype (bfloat16 or float16): an upstream gradient in another dtype (a float32
out_dtype) is cast to it first, as cuBLAS's bf16 training does. fp8 products (scaled_mm, fp8 grouped) are
inference: their scales are not differentiated, and a gradient through them is refused by name. The masked and
k-grouped forms have no gradient here (the masked form serves decode, the k form is itself a gradient)."""
from __future__ import annotations

import math

import torch

from ..errors import ConfigError
from . import ops, sharding, tensors

#: whether the DTensor sharding rules still wait for torch.distributed.tensor (ptxgemm.torch.sharding): each
#: autograd kernel asks first, as a DTensor reaches the launch ops through it
_RULES_PENDING = sharding.PENDING

_GELU_C = math.sqrt(2.0 / math.pi)   # the tanh form's constants, as the kernel's epilogue computes gelu
_GELU_CUBIC = 0.044715


def activation_derivative(activation: str, pre: torch.Tensor) -> torch.Tensor:
    """act'(pre), elementwise in float32."""
    if activation == "relu":
        return (pre > 0).to(pre.dtype)
    if activation == "silu":
        s = torch.sigmoid(pre)
        return s * (1 + pre * (1 - s))
    if activation == "gelu":
        t = torch.tanh(_GELU_C * (pre + _GELU_CUBIC * pre ** 3))
        return 0.5 * (1 + t) + 0.5 * pre * (1 - t * t) * _GELU_C * (1 + 3 * _GELU_CUBIC * pre * pre)
    raise ConfigError(f"activation: no derivative for {activation!r}")


def reduce_to(x: torch.Tensor, shape) -> torch.Tensor:
    """Sum `x` over the axes numpy's broadcasting added or stretched to reach its shape from `shape`."""
    shape = tuple(shape)
    lead = x.dim() - len(shape)
    if lead:
        x = x.sum(tuple(range(lead)))
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and x.shape[i] != 1)
    return x.sum(stretched, keepdim=True) if stretched else x


# ------------------------------------------------------------------------------------------------------------------
# mm
# ------------------------------------------------------------------------------------------------------------------

def _dense_product(*args, **kwargs) -> torch.Tensor:
    """A gradient formula's GEMM: the launch op, or the public op where the backward itself is being
    differentiated (create_graph=True), so that a second derivative exists."""
    return (ops.mm if torch.is_grad_enabled() else ops.DENSE_LAUNCH)(*args, **kwargs)


def _grouped_product(*args, **kwargs) -> torch.Tensor:
    return (ops.grouped_mm if torch.is_grad_enabled() else ops.GROUPED_LAUNCH)(*args, **kwargs)


class _MmFunction(torch.autograd.Function):
    """ptxgemm::mm with its gradient: the forward is the launch op."""

    @staticmethod
    def forward(ctx, a, b, bias, activation, alpha, c, beta, out_dtype):
        ctx.save_for_backward(a, b, bias, c)
        ctx.activation, ctx.alpha, ctx.beta = activation, alpha, beta
        return ops.DENSE_LAUNCH(a, b, bias, activation, alpha, c, beta, out_dtype)

    @staticmethod
    def backward(ctx, grad):
        return _mm_backward(ctx, grad)


def _mm_autograd(a, b, bias=None, activation=None, alpha=1.0, c=None, beta=0.0, out_dtype=None):
    if _RULES_PENDING[0]:
        sharding.register_if_loaded()
    if tensors.needs_grad(a, b, bias, c):
        return _MmFunction.apply(a, b, bias, activation, alpha, c, beta, out_dtype)
    return ops.DENSE_LAUNCH(a, b, bias, activation, alpha, c, beta, out_dtype)


def _scaled_mm_autograd(a, b, scale_a, scale_b, bias=None, activation=None, alpha=1.0, out_dtype=None):
    if _RULES_PENDING[0]:
        sharding.register_if_loaded()
    ops._check_fp8(a, b)
    if tensors.needs_grad(a, b, scale_a, scale_b, bias):
        raise ConfigError("a, b: ptxgemm::scaled_mm is inference only (fp8 scales are not differentiated): run it "
                          "under torch.no_grad() or detach its inputs")
    return ops.DENSE_LAUNCH(a, b, bias, activation, alpha, None, 0.0, out_dtype, scale_a, scale_b)


def _weight_grad(a: torch.Tensor, g: torch.Tensor, b: torch.Tensor, alpha: float) -> torch.Tensor:
    """dB = alpha * A^T @ dP, summed over the batch where B is shared; for a K-major B (W^T of a row-major W) as
    (alpha * dP^T @ A)^T, so the gradient lands in W's layout."""
    if b.dim() == 2:
        k, n = b.shape
        # a shared B: the batch folds into the rows (2-D operands as they are: under DTensor a reshape is one more
        # dispatch per gradient, a no-op's worth of tens of microseconds)
        a2 = a if a.dim() == 2 else a.reshape(-1, k)
        g2 = g if g.dim() == 2 else g.reshape(-1, n)
        if b.stride(0) == 1 and n > 1:
            return _dense_product(g2.mT, a2, alpha=alpha, out_dtype=b.dtype).mT
        return _dense_product(a2.mT, g2, alpha=alpha, out_dtype=b.dtype)
    return reduce_to(_dense_product(a.mT, g, alpha=alpha, out_dtype=b.dtype), b.shape)


def _mm_backward(ctx, grad):
    a, b, bias, c = ctx.saved_tensors
    tensors.check_differentiable(a, "ptxgemm::mm")
    g32 = grad
    if ctx.activation is not None:   # the pre-activation, recomputed rather than kept (one GEMM, no memory)
        pre = _dense_product(a, b, bias=bias, alpha=ctx.alpha, c=c, beta=ctx.beta, out_dtype=torch.float32)
        g32 = grad.float() * activation_derivative(ctx.activation, pre)
    g = g32.to(a.dtype)
    need = ctx.needs_input_grad
    grad_a = grad_b = grad_bias = grad_c = None
    if need[0]:
        grad_a = reduce_to(_dense_product(g, b.mT, alpha=ctx.alpha, out_dtype=a.dtype), a.shape)
    if need[1]:
        grad_b = _weight_grad(a, g, b, ctx.alpha)
    if bias is not None and need[2]:
        grad_bias = tensors.bias_grad(g32, bias)
    if c is not None and need[5]:
        grad_c = reduce_to(g32 * ctx.beta, c.shape).to(c.dtype)
    return grad_a, grad_b, grad_bias, None, None, grad_c, None, None


ops.LIBRARY.impl("mm", _mm_autograd, "Autograd")
ops.LIBRARY.impl("scaled_mm", _scaled_mm_autograd, "Autograd")


# ------------------------------------------------------------------------------------------------------------------
# grouped_mm (contiguous form)
# ------------------------------------------------------------------------------------------------------------------

class _GroupedFunction(torch.autograd.Function):
    """ptxgemm::grouped_mm with its gradient: the forward is the launch op."""

    @staticmethod
    def forward(ctx, a, b, offs, masked_m, scale_a, scale_b, bias, activation, alpha, out_dtype):
        ctx.form = ops.grouped_form(a, b, offs, masked_m)
        ctx.save_for_backward(a, b, offs, bias)
        ctx.activation, ctx.alpha = activation, alpha
        ctx.scaled = scale_a is not None or scale_b is not None
        return ops.GROUPED_LAUNCH(a, b, offs, masked_m, scale_a, scale_b, bias, activation, alpha, out_dtype)

    @staticmethod
    def backward(ctx, grad):
        return _grouped_backward(ctx, grad)


def _grouped_autograd(a, b, offs=None, masked_m=None, scale_a=None, scale_b=None, bias=None, activation=None,
                      alpha=1.0, out_dtype=None):
    if _RULES_PENDING[0]:
        sharding.register_if_loaded()
    args = (a, b, offs, masked_m, scale_a, scale_b, bias, activation, alpha, out_dtype)
    if tensors.needs_grad(a, b, scale_a, scale_b, bias):
        return _GroupedFunction.apply(*args)
    return ops.GROUPED_LAUNCH(*args)


def group_of_rows(offs: torch.Tensor, rows: int) -> torch.Tensor:
    """Each row's group (G for rows past offs[-1]), from the cumulative ends on the device."""
    return torch.searchsorted(offs, torch.arange(rows, device=offs.device, dtype=offs.dtype), right=True)


def _grouped_bias_grad(g32: torch.Tensor, offs: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    groups = offs.shape[0]
    gid = group_of_rows(offs, g32.shape[0])
    inside = (gid < groups).unsqueeze(-1).to(g32.dtype)          # rows past offs[-1] belong to no group
    g32 = g32 * inside
    if bias.dim() == 1:                                           # (N,): shared by every group
        return g32.sum(0).to(bias.dtype)
    out = torch.zeros((groups, g32.shape[1]), dtype=torch.float32, device=g32.device)
    return out.index_add_(0, gid.clamp(max=groups - 1), g32).to(bias.dtype)


def _grouped_backward(ctx, grad):
    a, b, offs, bias = ctx.saved_tensors
    if ctx.form != "contiguous":
        raise ConfigError(f"grouped_mm: gradients are taken for the contiguous form (an MoE layer's experts); the "
                          f"{ctx.form} form is {'for decode' if ctx.form == 'masked' else 'itself a gradient'}: "
                          f"run it under torch.no_grad()")
    if ctx.scaled:
        raise ConfigError("scale_a, scale_b: a scaled grouped_mm is inference only; run it under torch.no_grad()")
    tensors.check_differentiable(a, "ptxgemm::grouped_mm")
    g32 = grad
    if ctx.activation is not None:
        pre = _grouped_product(a, b, offs=offs, bias=bias, alpha=ctx.alpha, out_dtype=torch.float32)
        g32 = grad.float() * activation_derivative(ctx.activation, pre)
    g = g32.to(a.dtype).contiguous()
    need = ctx.needs_input_grad
    grad_a = grad_b = grad_bias = None
    if need[0]:   # rows past offs[-1] are not written, as in the forward
        grad_a = _grouped_product(g, b.transpose(-1, -2), offs=offs, alpha=ctx.alpha, out_dtype=a.dtype)
    if need[1]:   # the k-grouped form: each group's rows are its K
        a_rows = a.contiguous()
        if b.stride(-2) == 1:   # b is (G, N, K) weights seen transposed: their gradient in their own layout
            grad_b = _grouped_product(g.t(), a_rows, offs=offs, alpha=ctx.alpha, out_dtype=b.dtype).transpose(-1, -2)
        else:
            grad_b = _grouped_product(a_rows.t(), g, offs=offs, alpha=ctx.alpha, out_dtype=b.dtype)
    if bias is not None and need[6]:
        grad_bias = _grouped_bias_grad(g32.float(), offs, bias)
    return grad_a, grad_b, None, None, None, None, grad_bias, None, None, None


ops.LIBRARY.impl("grouped_mm", _grouped_autograd, "Autograd")
