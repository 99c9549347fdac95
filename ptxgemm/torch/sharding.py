"""DTensor sharding rules for the ptxgemm ops (issue 50): which input placements each op takes and what output
placement they give, so tensor-parallel layers (torch's ColwiseParallel / RowwiseParallel over `pt.Linear`, or
DTensors handed to the ops directly) run on ptxgemm with the collectives DTensor inserts, eager and under
torch.compile.

What DTensor dispatches. DTensor is a tensor subclass: it sees an op at the dispatcher's Python key, which comes
after Autograd. The public ops (ptxgemm::mm, ::scaled_mm, ::grouped_mm) have Autograd kernels
(ptxgemm.torch.autograd) that record the gradient and call the launch ops (ptxgemm::dense_launch,
::grouped_launch), so in eager training and in everything AOTAutograd traces (a compiled step's forward and
backward) DTensor sees the launch ops; under torch.inference_mode, which skips Autograd kernels, it sees the public
ops. Every one of the five has a rule here, the public op's the same as its launch op's.

The rules, per mesh dimension (DTensor expands them over every dimension of the mesh and picks the candidate whose
input redistributions cost least), for C = act(alpha * (scale_a . A) @ (B . scale_b) + beta * c + bias):

  dense (mm, scaled_mm, dense_launch), A (..., M, K), B (..., K, N):
    everything Replicate                     -> C Replicate
    A Shard(M), B Replicate                  -> C Shard(M)          (sequence / row parallel)
    A Replicate, B Shard(N)                  -> C Shard(N)          (ColwiseParallel: W (N, K) Shard(0) read as W^T)
    A Shard(K), B Shard(K), no activation    -> C Partial           (RowwiseParallel: W Shard(1), x Shard(-1))
    A or B Shard(batch axis)                 -> C Shard(batch axis) (the other operand broadcast or sharded alike)
  bias and c follow C's placement where they span that axis (bias (N,) with C Shard(N): Shard(0)) and are
  Replicate where they broadcast along it; with C Partial they are Partial, which DTensor makes of a Replicate
  bias by dividing it by the mesh size: the bias is added once in the sum, as torch's aten.addmm rule (the one
  RowwiseParallel's nn.Linear takes) does. An activation is not linear, so a Partial C is offered only without one.
  Scales: per tensor (one element) Replicate everywhere; rowwise scale_a (M, 1) follows A's M and scale_b (1, N)
  B's N; blockwise tables (M, ceil(K/128)) and (ceil(K/128), ceil(N/128)) follow M, K and N, an axis of them
  sharded only where each shard is whole 128-blocks (K or N a multiple of 128 x the mesh's size).

  grouped (grouped_mm, grouped_launch), by form:
    contiguous A (T, K), B (G, K, N), offs: Replicate; B Shard(N) -> C Shard(N); A Shard(K), B Shard(K) -> Partial
    masked A (G, M, K), B (G, K, N), masked_m: A, B, masked_m Shard(G) -> C Shard(G) (each rank its own groups);
      B Shard(N) -> C Shard(N); A Shard(K), B Shard(K) -> Partial
    k-grouped A (M, total K), B (total K, N), offs: A Shard(M) -> C (G, M, N) Shard(M); B Shard(N) -> C Shard(N)
  The counts (offs, masked_m) are global row or K ends, so the rows of a contiguous form and the K of the k form are
  never sharded; a bias follows N (its last axis) and, per group, the masked form's groups. A scaled (fp8) grouped
  call, inference only, takes the Replicate rule alone.

Registration (`register`, idempotent) goes through DTensor's op-strategy registry with the non-tensor arguments
(activation, alpha, beta, out_dtype) in the sharding cache's key: torch's register_sharding keys only int
arguments, and these ops have none, so a rule cached for a call without an activation would be reused for one with
it (a Partial before gelu) and an output dtype cached for the next out_dtype. It imports torch.distributed.tensor,
about 0.75 s that `import ptxgemm.torch` does not pay up front: `register_if_loaded` registers as soon as that module
is in sys.modules (a DTensor cannot exist before it is), and is called at `import ptxgemm.torch`, by the ops'
autograd kernels and on the layers' dispatcher path (ptxgemm.torch.ops.eager_path) -- one list lookup once done.
`register()` directly is for the one path none of those sees: torch.ops.ptxgemm.* called on DTensors under
inference_mode in a process that imported torch.distributed.tensor after ptxgemm.torch and ran no op since."""
from __future__ import annotations

import math
import sys

import torch

from ..errors import ConfigError
from ..kernel.config import SCALE_BLOCK
from . import tensors

#: [True] until `register` has run; the ops' autograd kernels and eager_path read it (a list: bound once, read fast)
PENDING = [True]
#: the module whose presence means a DTensor may exist
DTENSOR_MODULE = "torch.distributed.tensor"
#: the ops with rules: (op name, the rule family)
OPS = (("mm", "dense"), ("scaled_mm", "dense"), ("dense_launch", "dense"), ("grouped_mm", "grouped"),
       ("grouped_launch", "grouped"))
#: non-tensor arguments from this position on are in the sharding cache's key (activation is position 3 of mm and
#: dense_launch, 5 of scaled_mm, 7 of the grouped ops; 2 covers all)
STATIC_ARGNUM = 2


def register_if_loaded() -> None:
    """Register the rules if torch.distributed.tensor is imported (so a DTensor may exist), else nothing."""
    if PENDING[0] and DTENSOR_MODULE in sys.modules:
        register()


def register() -> None:
    """Register every ptxgemm op's sharding rule with DTensor (idempotent)."""
    if not PENDING[0]:
        return
    if not torch.distributed.is_available():
        raise ConfigError("torch.distributed: this torch build has no distributed package, so no DTensor to shard "
                          "the ptxgemm ops over")
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._op_schema import RuntimeSchemaInfo

    propagator = DTensor._op_dispatcher.sharding_propagator
    for name, family in OPS:
        op = getattr(torch.ops.ptxgemm, name).default
        propagator.register_op_strategy(op, _strategy(family), RuntimeSchemaInfo(static_argnum=STATIC_ARGNUM))
    PENDING[0] = False


# ------------------------------------------------------------------------------------------------------------------
# The rules, on shapes and values alone: [(output placement, {argument: placement})], one mesh dimension
# ------------------------------------------------------------------------------------------------------------------

def _placements():
    from torch.distributed.tensor import Partial, Replicate, Shard
    return Replicate(), Shard, Partial()


def follow(out_placement, shape: tuple, out_shape: tuple):
    """An operand broadcast against the output (numpy's rule, aligned at the last axis): the output's placement
    where the operand spans the sharded axis, Replicate where it broadcasts along it; Partial stays Partial."""
    R, Shard, _ = _placements()
    if not isinstance(out_placement, Shard):
        return out_placement
    d = out_placement.dim - (len(out_shape) - len(shape))
    return Shard(d) if d >= 0 and shape[d] == out_shape[out_placement.dim] else R


def _kind(shape, vector_shapes, block_shape) -> str:
    """A scale's kind by shape, as ptxgemm.plan.epilogue classifies it (before the pairing of two tables)."""
    if math.prod(shape) == 1 and len(shape) <= 2:
        return "tensor"
    if shape in vector_shapes:
        return "vector"
    return "block" if shape == block_shape else "other"


def scale_kinds(sa, sb, m: int, k: int, n: int) -> tuple:
    """(kind of scale_a, kind of scale_b): None (absent), "tensor", "vector", "block" or "other" (a shape ptxgemm
    refuses: its own error then names it); a vector or one-element scale that is also the block shape, beside a
    table, is a table (epilogue.parse's pairing)."""
    kb, nb = -(-k // SCALE_BLOCK), -(-n // SCALE_BLOCK)
    ka = None if sa is None else _kind(sa, ((m,), (m, 1)), (m, kb))
    kbk = None if sb is None else _kind(sb, ((n,), (1, n)), (kb, nb))
    if ka == "block" and kbk in ("vector", "tensor") and sb == (kb, nb):
        kbk = "block"
    if kbk == "block" and ka in ("vector", "tensor") and sa == (m, kb):
        ka = "block"
    return ka, kbk


def dense_rules(shapes: dict, values: dict, mesh_size: int) -> list:
    """The dense ops' candidates (the module's docstring): `shapes` {argument: global shape} of the tensors given,
    `values` the other arguments, `mesh_size` the mesh's device count (the blockwise scales' divisibility)."""
    R, Shard, P = _placements()
    a, b = shapes["a"], shapes["b"]
    out = tensors.mm_shape(a, b)
    nb = len(out) - 2
    m, k, n = a[-2], a[-1], b[-1]
    linear = values.get("activation") is None
    # (kind, output placement, a, b): the GEMM's own axes
    cands = [("replicate", R, R, R), ("rows", Shard(nb), Shard(len(a) - 2), R),
             ("cols", Shard(nb + 1), R, Shard(len(b) - 1))]
    if linear:
        cands.append(("k", P, Shard(len(a) - 1), Shard(len(b) - 2)))
    for d in range(nb):
        pa, pb = follow(Shard(d), a[:-2], out[:-2]), follow(Shard(d), b[:-2], out[:-2])
        if pa != R or pb != R:
            cands.append(("batch", Shard(d), pa, pb))
    ka, kbk = scale_kinds(shapes.get("scale_a"), shapes.get("scale_b"), m, k, n)
    rules = []
    for kind, po, pa, pb in cands:
        inputs = {"a": pa, "b": pb}
        for name in ("bias", "c"):
            if name in shapes:
                inputs[name] = follow(po, shapes[name], out)
        scales = _dense_scales(kind, ka, kbk, shapes, k, n, mesh_size)
        if scales is None:
            continue
        inputs.update(scales)
        rules.append((po, inputs))
    return rules


def _dense_scales(kind: str, ka, kbk, shapes: dict, k: int, n: int, mesh_size: int) -> dict | None:
    """The scales' placements under one candidate (`kind`: replicate, rows, cols, k or batch), or None where they
    cannot follow it: a blockwise axis that would split a 128-block, blockwise scaling over a batch axis (ptxgemm
    refuses it), a scale of a shape ptxgemm refuses (only the Replicate candidate: the op's own error names it)."""
    R, Shard, _ = _placements()
    if "other" in (ka, kbk) and kind != "replicate":
        return None
    if "block" in (ka, kbk) and kind == "batch":
        return None
    whole = SCALE_BLOCK * mesh_size
    if "block" in (ka, kbk) and ((kind == "k" and k % whole) or (kind == "cols" and n % whole)):
        return None
    # per candidate, the axis each scale is sharded on where it spans the sharded GEMM axis (None: Replicate); a
    # per-tensor scale, and a rowwise one under a sharded K, multiplies every partial product alike
    axis_a = {"rows": 0, "k": 1 if ka == "block" else None}.get(kind)
    axis_b = {"cols": len(shapes.get("scale_b", ())) - 1, "k": 0 if kbk == "block" else None}.get(kind)
    out = {}
    for name, kind_of, axis in (("scale_a", ka, axis_a), ("scale_b", kbk, axis_b)):
        if kind_of is not None:
            out[name] = Shard(axis) if axis is not None and kind_of in ("vector", "block") else R
    return out


def grouped_form(shapes: dict, values: dict) -> str:
    """"contiguous", "masked" or "k" (ptxgemm.torch.ops.grouped_form on shapes; its ConfigError names a bad call
    when the op itself runs)."""
    if "masked_m" in shapes:
        return "masked"
    return "k" if len(shapes["a"]) == 2 and len(shapes["b"]) == 2 else "contiguous"


def grouped_rules(shapes: dict, values: dict, mesh_size: int) -> list:
    """The grouped ops' candidates (the module's docstring), in the same form as dense_rules'."""
    R, Shard, P = _placements()
    rules = [(R, {})]
    if "scale_a" in shapes or "scale_b" in shapes:
        return rules
    form = grouped_form(shapes, values)
    a, b = shapes["a"], shapes["b"]
    linear = values.get("activation") is None
    bias = shapes.get("bias")
    n_axis = {"contiguous": 1, "masked": 2, "k": 2}[form]
    cols = {"b": Shard(len(b) - 1)}
    if bias is not None:
        cols["bias"] = Shard(len(bias) - 1)
    rules.append((Shard(n_axis), cols))
    if form == "masked":
        groups = {"a": Shard(0), "b": Shard(0), "masked_m": Shard(0)}
        if bias is not None:
            groups["bias"] = Shard(0) if len(bias) == 2 else R
        rules.append((Shard(0), groups))
    if form == "k":
        rules.append((Shard(1), {"a": Shard(0)}))
    elif linear:
        k_rule = {"a": Shard(len(a) - 1), "b": Shard(len(b) - 2)}
        if bias is not None:
            k_rule["bias"] = P
        rules.append((P, k_rule))
    return rules


RULES = {"dense": dense_rules, "grouped": grouped_rules}


# ------------------------------------------------------------------------------------------------------------------
# The rules as DTensor strategies
# ------------------------------------------------------------------------------------------------------------------

def _strategy(family: str):
    rules_of = RULES[family]

    def strategy(op_schema):
        """The op's OpStrategy: each rule as one placement per argument (None for a non-tensor or absent one),
        expanded over the mesh's dimensions by DTensor's own helper (the one register_sharding uses)."""
        from torch.distributed.tensor import Replicate
        from torch.distributed.tensor._op_schema import OpStrategy
        from torch.distributed.tensor._ops.utils import expand_to_full_mesh_op_strategy

        mesh = op_schema.get_mesh_from_args()
        names = [arg.name for arg in op_schema.op._schema.arguments]
        given = dict(zip(names, op_schema.args_schema))
        given.update(op_schema.kwargs_schema)
        shapes = {n: tuple(v.shape) for n, v in given.items() if isinstance(v, OpStrategy)}
        values = {n: v for n, v in given.items() if not isinstance(v, OpStrategy)}
        order = [n for n, _ in zip(names, op_schema.args_schema)] + list(op_schema.kwargs_schema)
        placements = []
        for out, inputs in rules_of(shapes, values, mesh.size()):
            placements.append([out] + [inputs.get(n, Replicate()) if n in shapes else None for n in order])
        return expand_to_full_mesh_op_strategy(mesh, op_schema, placements, input_index=1)
    return strategy

