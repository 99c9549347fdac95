"""ptxgemm from PyTorch: custom ops that compile, capture and differentiate, drop-in linear layers, fp8 blockwise
quantization and an MoE experts implementation for transformers (the optional extra `ptxgemm[torch]`).

    import torch, ptxgemm.torch as pt
    y = pt.mm(x, w.t(), bias=b)                  # torch.ops.ptxgemm.mm: autograd, torch.compile, CUDA graphs
    pt.replace_linear(model)                      # every nn.Linear on ptxgemm, parameters shared
    pt.use_in_transformers(); model.set_experts_implementation("ptxgemm")   # MoE experts: one grouped launch

`import ptxgemm` never imports torch; this subpackage does (it is what it is for)."""
import importlib.util

if importlib.util.find_spec("torch") is None:   # the message is the point
    raise ImportError("ptxgemm.torch needs PyTorch: pip install 'ptxgemm[torch]' (or torch itself)")

from .autograd import activation_derivative   # importing it registers the ops' gradients
from .linear import Fp8Linear, Linear, replace_linear
from .moe import experts_forward, use_in_transformers
from .ops import clear_plan_cache, grouped_mm, mm, plan_stats, scaled_mm, use_config
from .quant import dequantize_activations, dequantize_weight, quantize_activations, quantize_weight
from . import sharding
from .sharding import register as register_dtensor_rules

sharding.register_if_loaded()   # DTensor's rules for the ops now if torch.distributed.tensor is loaded, else later

__all__ = ["mm", "scaled_mm", "grouped_mm", "Linear", "Fp8Linear", "replace_linear", "use_in_transformers",
           "experts_forward", "quantize_weight", "quantize_activations", "dequantize_weight",
           "dequantize_activations", "clear_plan_cache", "plan_stats", "use_config", "activation_derivative",
           "register_dtensor_rules"]
