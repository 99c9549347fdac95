"""Mixture-of-Experts layers on ptxgemm's grouped GEMM: an experts forward for transformers' experts interface
(`use_in_transformers`, then `model.set_experts_implementation("ptxgemm")`), one grouped launch per projection with
the group offsets computed on the device (no host synchronization, so it compiles and captures).

The token routing is the one of transformers' own "grouped_mm" implementation: the (token, expert) pairs sorted
by expert, each expert's rows one contiguous group. ptxgemm differs in the two projections (ptxgemm::grouped_mm, the
bias per expert fused into the kernel) and in the group ends, found by a binary search on the sorted ids."""
from __future__ import annotations

import torch

from . import ops

NAME = "ptxgemm"


def group_ends(sorted_ids: torch.Tensor, groups: int) -> torch.Tensor:
    """offs: the int32 cumulative row ends of each group, from the sorted expert ids (ids >= groups, the
    expert-parallel sentinels, fall past offs[-1])."""
    experts = torch.arange(groups, device=sorted_ids.device, dtype=sorted_ids.dtype)
    return torch.searchsorted(sorted_ids, experts, right=True).to(torch.int32)


def _project(x, weight, offs, bias, transposed: bool):
    """x (S, in) through each group's weight: (G, in, out) when `transposed`, else (G, out, in) read K-major."""
    b = weight if transposed else weight.transpose(-1, -2)
    if ops.eager_ok(x, weight, offs, bias):   # inference outside torch.compile: no dispatcher
        return ops.grouped_mm_impl(x, b, offs, None, None, None, bias)
    return ops.grouped_mm(x, b, offs=offs, bias=bias)


def experts_forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                    top_k_weights: torch.Tensor) -> torch.Tensor:
    """transformers' experts forward signature (an experts module with gate_up_proj / up_proj and down_proj of
    shape (E, out, in), or (E, in, out) when `is_transposed`, optional per-expert biases)."""
    top_k = top_k_index.size(-1)
    tokens, hidden = hidden_states.shape
    ids = top_k_index.reshape(-1)
    sorted_ids, perm = torch.sort(ids)
    offs = group_ends(sorted_ids, self.num_experts)
    outside = (sorted_ids >= self.num_experts).unsqueeze(-1)      # no expert here (expert parallelism)
    x = hidden_states[perm // top_k].masked_fill(outside, 0.0)
    if self.has_gate:
        up_w, up_b = self.gate_up_proj, getattr(self, "gate_up_proj_bias", None) if self.has_bias else None
    else:
        up_w, up_b = self.up_proj, getattr(self, "up_proj_bias", None) if self.has_bias else None
    h = _project(x, up_w, offs, up_b, self.is_transposed).masked_fill(outside, 0.0)
    h = self._apply_gate(h) if self.has_gate else self.act_fn(h)
    down_b = getattr(self, "down_proj_bias", None) if self.has_bias else None
    y = _project(h, self.down_proj, offs, down_b, self.is_transposed).masked_fill(outside, 0.0)
    y = y * top_k_weights.reshape(-1)[perm].unsqueeze(-1).to(y.dtype)
    unsorted = torch.empty_like(y).index_copy(0, perm, y)      # back to (token, k) order
    return unsorted.view(tokens, top_k, hidden).sum(1).to(hidden_states.dtype)


def use_in_transformers() -> None:
    """Register `experts_forward` as transformers' experts implementation "ptxgemm"; then
    `model.set_experts_implementation("ptxgemm")` routes a model's MoE experts through ptxgemm."""
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS
    ALL_EXPERTS_FUNCTIONS.register(NAME, experts_forward)
