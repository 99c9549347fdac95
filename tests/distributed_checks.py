"""The distributed checks of issue 50, run on every rank of a torchrun job by tests/test_distributed_gpu.py (cuda:
nccl, ptxgemm's kernels) and tests/test_distributed.py (cpu: gloo, with reference kernels registered for the ops'
CPU key in place of ptxgemm's, so the sharding rules, the collectives DTensor and FSDP2 insert and the gradients'
placements are checked without a GPU):

    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/distributed_checks.py --device cuda --out F

Each check builds a small model of ptxgemm layers, runs it sharded (tensor parallel with torch's ColwiseParallel /
RowwiseParallel styles, DTensor experts, FSDP2's fully_shard; eager and torch.compile), and compares its outputs and
gradients with the same model unsharded on the rank's own device (the single-device run of the same weights) and,
for the linear checks, with float64:

- linear checks: every element within C_BOUND * u * |the same computation on absolute values| of float64 (u the
  dtype's unit roundoff: each bf16 rounding of a value, partial sums included, is within u of the magnitudes that
  made it; C_BOUND = 8 covers the roundings a two-layer chain adds up, sharded or not). A missing or doubled
  partial sum, a bias added on every rank, a shard in the wrong place are off by O(|value|), far outside it.
- nonlinear checks (an activation, a loss and an optimizer step): relative Frobenius error against the unsharded run
  within REL_BOUND = 4u (a few bf16 roundings, the sharded run's reductions in bf16 among them).
- each check counts the ops' calls (ptxgemm.plan_stats()["calls"] on the GPU, the reference kernels' own count on
  the CPU): a check passes only if at least the GEMMs its model has ran on ptxgemm, not a silent fallback to aten.

Rank 0 writes {check: {"ok", "detail", "calls", "want_calls", "seconds"}} to --out."""
from __future__ import annotations

import argparse
import copy
import json
import sys
import time
import traceback

C_BOUND = 8.0
UNIT = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}
REL_BOUND_UNITS = 4.0
SEED = 50


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--device", choices=("cuda", "cpu"), required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--only", default=None, help="comma-separated check names (default: all)")
    args = p.parse_args(argv)

    from ptxgemm.bench import ranks

    torch, dist, mesh = ranks.init(args.device)
    dev = ranks.rank_device(torch, args.device)
    count = install_cpu_kernels(torch) if args.device == "cpu" else gpu_counter()
    ctx = Context(torch, dist, mesh, dev, count, args.device)
    names = list(CHECKS) if args.only is None else args.only.split(",")
    results = {}
    for name in names:
        start = time.perf_counter()
        try:
            ok, detail, calls, want = CHECKS[name](ctx)
        except Exception:   # a check that raised fails with its traceback; the others still run
            ok, detail, calls, want = False, traceback.format_exc(limit=8), None, None
        if want is not None and calls < want:
            ok, detail = False, f"{detail}; only {calls} ptxgemm op calls, {want} wanted (a fallback to aten?)"
        flag = torch.tensor([1 if ok else 0], device=dev)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)      # every rank's verdict
        if ok and not int(flag.item()):
            ok, detail = False, f"{detail}; failed on another rank"
        results[name] = {"ok": bool(ok), "detail": detail, "calls": calls, "want_calls": want,
                         "seconds": round(time.perf_counter() - start, 3)}
        if dist.get_rank() == 0:
            print(f"{name}: {'ok' if ok else 'FAILED'} ({detail})", flush=True)
    if dist.get_rank() == 0:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()
    return 0


class Context:
    def __init__(self, torch, dist, mesh, dev, count, device):
        self.torch, self.dist, self.mesh, self.dev, self.count = torch, dist, mesh, dev, count
        self.backend = "inductor" if device == "cuda" else "aot_eager"   # inductor on the CPU needs a C++ compiler
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.dtype = torch.bfloat16
        self.u = UNIT["bfloat16"]


def gpu_counter():
    import ptxgemm

    return lambda: ptxgemm.plan_stats()["calls"]


# ------------------------------------------------------------------------------------------------------------------
# The CPU's stand-ins for ptxgemm's kernels: float32 products rounded to the output dtype, as the kernels compute
# ------------------------------------------------------------------------------------------------------------------

def install_cpu_kernels(torch):
    """Reference implementations of the five ops for the CPU dispatch key (which takes precedence over the ops'
    CompositeExplicitAutograd implementation, whose rule refuses host tensors); returns the call counter."""
    from ptxgemm.torch import sharding

    calls = [0]

    def scaled(a, b, scale_a, scale_b):
        af, bf = a.float(), b.float()
        m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
        ka, kb = sharding.scale_kinds(None if scale_a is None else tuple(scale_a.shape),
                                      None if scale_b is None else tuple(scale_b.shape), m, k, n)
        blk = sharding.SCALE_BLOCK
        if ka == "block":
            af = af * scale_a.repeat_interleave(blk, 1)[:, :k]
            bf = bf * scale_b.repeat_interleave(blk, 0)[:k].repeat_interleave(blk, 1)[:, :n]
        else:
            if scale_a is not None:
                af = af * (scale_a.reshape(-1, 1) if ka == "vector" else scale_a.reshape(()))
            if scale_b is not None:
                bf = bf * (scale_b.reshape(1, -1) if kb == "vector" else scale_b.reshape(()))
        return af, bf

    def finish(p, a, bias, activation, out_dtype):
        if bias is not None:
            p = p + bias.float()
        if activation is not None:
            p = _act(torch, activation, p)
        fp8 = a.dtype in (torch.float8_e4m3fn, torch.float8_e5m2)
        return p.to(out_dtype or (torch.bfloat16 if fp8 else a.dtype))

    def dense(a, b, bias=None, activation=None, alpha=1.0, c=None, beta=0.0, out_dtype=None, scale_a=None,
              scale_b=None):
        calls[0] += 1
        af, bf = scaled(a, b, scale_a, scale_b)
        p = alpha * (af @ bf)
        if c is not None:
            p = p + beta * c.float()
        return finish(p, a, bias, activation, out_dtype)

    def scaled_mm(a, b, scale_a, scale_b, bias=None, activation=None, alpha=1.0, out_dtype=None):
        return dense(a, b, bias, activation, alpha, None, 0.0, out_dtype, scale_a, scale_b)

    def grouped(a, b, offs=None, masked_m=None, scale_a=None, scale_b=None, bias=None, activation=None, alpha=1.0,
                out_dtype=None):
        calls[0] += 1
        if scale_a is not None or scale_b is not None:
            raise NotImplementedError("the CPU stand-in has no scaled grouped form")
        af, bf = a.float(), b.float()
        if masked_m is not None:                                   # (G, M, K) @ (G, K, N)
            out = torch.zeros(a.shape[0], a.shape[1], b.shape[-1])
            for g, rows in enumerate(masked_m.tolist()):
                out[g, :rows] = alpha * af[g, :rows] @ bf[g] + (0 if bias is None else _group_bias(bias, g))
        elif b.dim() == 3:                                         # contiguous: (T, K) @ (G, K, N)
            out = torch.zeros(a.shape[0], b.shape[-1])
            start = 0
            for g, end in enumerate(offs.tolist()):
                out[start:end] = alpha * af[start:end] @ bf[g] + (0 if bias is None else _group_bias(bias, g))
                start = end
        else:                                                      # k-grouped: (M, total K) @ (total K, N)
            out = torch.zeros(offs.shape[0], a.shape[0], b.shape[-1])
            start = 0
            for g, end in enumerate(offs.tolist()):
                out[g] = alpha * af[:, start:end] @ bf[start:end] + (0 if bias is None else _group_bias(bias, g))
                start = end
        return finish(out, a, None, activation, out_dtype)

    lib = torch.library.Library("ptxgemm", "IMPL")
    for name, fn in (("mm", dense), ("dense_launch", dense), ("scaled_mm", scaled_mm), ("grouped_mm", grouped),
                     ("grouped_launch", grouped)):
        lib.impl(name, fn, "CPU")
    install_cpu_kernels.lib = lib          # kept alive: dropping the Library object unregisters its kernels
    return lambda: calls[0]


def _group_bias(bias, g):
    return (bias[g] if bias.dim() == 2 else bias).float()


def _act(torch, activation, p):
    if activation == "relu":
        return torch.relu(p)
    if activation == "silu":
        return torch.nn.functional.silu(p)
    return torch.nn.functional.gelu(p, approximate="tanh")


# ------------------------------------------------------------------------------------------------------------------
# Comparisons
# ------------------------------------------------------------------------------------------------------------------

def full(t):
    """A DTensor's global value (gathered), a tensor itself."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def within(ctx, name: str, got, ref64, abs64) -> tuple[bool, str]:
    """Every element of `got` within C_BOUND * u * abs64 (+ the smallest normal) of the float64 `ref64`; the worst
    element's error over its bound."""
    torch = ctx.torch
    got = full(got).detach().double()
    bound = C_BOUND * ctx.u * abs64 + torch.finfo(torch.float32).tiny
    ratio = float(((got - ref64).abs() / bound).max())
    return ratio <= 1.0, f"{name} {ratio:.3f}"


def rel(ctx, got, ref) -> float:
    torch = ctx.torch
    g, r = full(got).detach().double(), full(ref).detach().double()
    den = float(torch.linalg.vector_norm(r))
    return float(torch.linalg.vector_norm(g - r)) / den if den else float(torch.linalg.vector_norm(g))


def close(ctx, name: str, got, ref) -> tuple[bool, str]:
    e = rel(ctx, got, ref)
    return e <= REL_BOUND_UNITS * ctx.u, f"{name} {e:.2e}"


def verdict(parts) -> tuple[bool, str]:
    """(all parts ok, their texts, each failed one marked FAILED)."""
    return all(ok for ok, _ in parts), ", ".join(text if ok else f"FAILED {text}" for ok, text in parts)


# ------------------------------------------------------------------------------------------------------------------
# Tensor parallel: two pt.Linear layers, ColwiseParallel then RowwiseParallel (a transformer MLP's or attention's)
# ------------------------------------------------------------------------------------------------------------------

K_IN, HIDDEN, BATCH, SEQ = 256, 512, 4, 32


def _two_linears(ctx):
    import torch.nn as nn

    import ptxgemm.torch as pt

    torch = ctx.torch
    torch.manual_seed(SEED)
    net = nn.Sequential(nn.Linear(K_IN, HIDDEN), nn.Linear(HIDDEN, K_IN)).to(ctx.dev, ctx.dtype)
    with torch.no_grad():
        for m in net:
            m.weight.normal_(0.0, m.in_features ** -0.5)
            m.bias.normal_(0.0, 4.0)             # large: a bias added on every rank would stand out
    pt.replace_linear(net)
    x = torch.randn(BATCH, SEQ, K_IN, dtype=ctx.dtype, device=ctx.dev)
    dy = torch.randn(BATCH, SEQ, K_IN, dtype=ctx.dtype, device=ctx.dev)
    return net, x, dy


def _float64_chain(torch, net, x, dy, absolute: bool):
    """The two layers' forward and backward in float64 (of |everything| when `absolute`): y, dx and the
    parameters' gradients."""
    f = (lambda t: t.detach().double().abs()) if absolute else (lambda t: t.detach().double())
    w1, b1, w2, b2 = f(net[0].weight), f(net[0].bias), f(net[1].weight), f(net[1].bias)
    x2, dy2 = f(x).reshape(-1, K_IN), f(dy).reshape(-1, K_IN)
    h = x2 @ w1.t() + b1
    y = h @ w2.t() + b2
    dh = dy2 @ w2
    dx = dh @ w1
    return {"y": y.reshape(x.shape), "dx": dx.reshape(x.shape), "dw1": dh.t() @ x2, "db1": dh.sum(0),
            "dw2": dy2.t() @ h, "db2": dy2.sum(0)}


def _run_chain(module, x, dy, call=None):
    """`call` (the module, or its compiled form) on a copy of x and its backward with dy; the result and gradients."""
    xt = x.clone().requires_grad_(True)
    y = (call or module)(xt)
    y.backward(dy)
    return {"y": y, "dx": xt.grad, "dw1": module[0].weight.grad, "db1": module[0].bias.grad,
            "dw2": module[1].weight.grad, "db2": module[1].bias.grad}


def _tp_linear(ctx, compiled: bool):
    from torch.distributed.tensor import DTensor, Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    torch = ctx.torch
    net, x, dy = _two_linears(ctx)
    tp = parallelize_module(copy.deepcopy(net), ctx.mesh, {"0": ColwiseParallel(), "1": RowwiseParallel()})
    placed = [tuple(tp[0].weight.placements), tuple(tp[0].bias.placements), tuple(tp[1].weight.placements),
              tuple(tp[1].bias.placements)]
    want = [(Shard(0),), (Shard(0),), (Shard(1),), (Replicate(),)]
    run = torch.compile(tp, backend=ctx.backend) if compiled else tp
    before = ctx.count()
    got = _run_chain(tp, x, dy, run)
    calls = ctx.count() - before
    ref = _float64_chain(torch, net, x, dy, False)
    mag = _float64_chain(torch, net, x, dy, True)
    single = _run_chain(net, x, dy)
    parts = [(placed == want, f"placements {'ok' if placed == want else placed}"),
             (not isinstance(got["y"], DTensor), "output a local tensor")]
    parts += [within(ctx, k, got[k], ref[k], mag[k]) for k in ref]
    parts += [within(ctx, "single " + k, single[k], ref[k], mag[k]) for k in ("y", "dx")]
    return (*verdict(parts), calls, 6)   # per rank: 2 forward, 2 x (dX, dW) backward


def check_tp_linear(ctx):
    return _tp_linear(ctx, compiled=False)


def check_tp_linear_compiled(ctx):
    return _tp_linear(ctx, compiled=True)


def check_tp_dispatches(ctx):
    """Eager tensor parallelism pays DTensor's dispatch per op (in Python on torch 2.11), so the layers' training
    step must not issue more DTensor ops than the stock nn.Linear's: the two layers' forward and backward, counted
    at DTensor's level (a dispatch mode sees each op on DTensors once), ptxgemm's at most the stock's, its 6 GEMMs
    (2 forward, dX and dW each) among them."""
    import collections

    import torch.nn as nn
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = collections.Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if any(isinstance(t, DTensor) for t in tree_flatten((args, kwargs or {}))[0]):
                self.ops[str(func)] += 1
            return func(*args, **(kwargs or {}))

    net, x, dy = _two_linears(ctx)
    stock = nn.Sequential(*(nn.Linear(m.in_features, m.out_features) for m in net)).to(ctx.dev, ctx.dtype)
    stock.load_state_dict(net.state_dict())
    counted, calls = {}, 0
    for name, module in (("stock", stock), ("ptxgemm", net)):
        tp = parallelize_module(copy.deepcopy(module), ctx.mesh, {"0": ColwiseParallel(), "1": RowwiseParallel()})
        _run_chain(tp, x, dy)   # warm: plans, sharding rules
        before = ctx.count()
        with Count() as mode:
            _run_chain(tp, x, dy)
        if name == "ptxgemm":
            calls = ctx.count() - before
        counted[name] = mode.ops
    gemms = {"stock": counted["stock"]["aten.mm.default"] + counted["stock"]["aten.addmm.default"],
             "ptxgemm": counted["ptxgemm"]["ptxgemm.dense_launch.default"]}
    total = {k: sum(v.values()) for k, v in counted.items()}
    ops = {k: dict(sorted(v.items())) for k, v in counted.items()}
    parts = [(total["ptxgemm"] <= total["stock"], f"DTensor ops per step: ptxgemm {total['ptxgemm']}, stock "
                                                   f"{total['stock']} ({ops})"),
             (gemms["ptxgemm"] == 6 and gemms["stock"] == 6, f"GEMMs among them {gemms} (6 each: the backward "
                                                              f"counted)")]
    return (*verdict(parts), calls, 6)


def check_tp_inference(ctx):
    """The same layers under torch.inference_mode, where no autograd kernel runs and DTensor meets the public op
    (ptxgemm::mm) itself rather than the launch op."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    torch = ctx.torch
    net, x, _ = _two_linears(ctx)
    tp = parallelize_module(copy.deepcopy(net), ctx.mesh, {"0": ColwiseParallel(), "1": RowwiseParallel()})
    before = ctx.count()
    with torch.inference_mode():
        y = tp(x)
    calls = ctx.count() - before
    ref, mag = _float64_chain(torch, net, x, x, False), _float64_chain(torch, net, x, x, True)
    return (*verdict([within(ctx, "y", y, ref["y"], mag["y"])]), calls, 2)


def check_tp_activation(ctx):
    """pt.mm with a fused activation on DTensors: the N-sharded rule (column parallel), forward and backward (the
    backward recomputes the pre-activation, sharded alike); against the same call unsharded."""
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

    import ptxgemm.torch as pt

    torch = ctx.torch
    torch.manual_seed(SEED + 1)
    x = torch.randn(128, K_IN, dtype=ctx.dtype, device=ctx.dev)
    w = torch.randn(HIDDEN, K_IN, dtype=ctx.dtype, device=ctx.dev) * K_IN ** -0.5
    b = torch.randn(HIDDEN, dtype=ctx.dtype, device=ctx.dev)
    dy = torch.randn(128, HIDDEN, dtype=ctx.dtype, device=ctx.dev)
    xd = DTensor.from_local(x.clone(), ctx.mesh, [Replicate()]).requires_grad_(True)
    wd = distribute_tensor(w.clone(), ctx.mesh, [Shard(0)]).requires_grad_(True)
    bd = distribute_tensor(b.clone(), ctx.mesh, [Shard(0)]).requires_grad_(True)
    before = ctx.count()
    y = pt.mm(xd, wd.t(), bias=bd, activation="gelu")
    y.backward(distribute_tensor(dy, ctx.mesh, [Shard(1)]))
    calls = ctx.count() - before
    xs, ws, bs = (t.clone().requires_grad_(True) for t in (x, w, b))
    ys = pt.mm(xs, ws.t(), bias=bs, activation="gelu")
    ys.backward(dy)
    parts = [(tuple(y.placements) == (Shard(1),), f"output {tuple(y.placements)}"), close(ctx, "y", y, ys),
             close(ctx, "dx", xd.grad, xs.grad), close(ctx, "dw", wd.grad, ws.grad),
             close(ctx, "db", bd.grad, bs.grad)]
    return (*verdict(parts), calls, 4)   # forward, the pre-activation, dX, dW


# ------------------------------------------------------------------------------------------------------------------
# Tensor parallel experts: pt.grouped_mm on DTensors (column-parallel up projection, row-parallel down)
# ------------------------------------------------------------------------------------------------------------------

EXPERTS, TOKENS, EXPERT_HIDDEN = 4, 96, 256


def check_tp_grouped(ctx):
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

    import ptxgemm.torch as pt

    torch = ctx.torch
    torch.manual_seed(SEED + 2)
    x = torch.randn(TOKENS, K_IN, dtype=ctx.dtype, device=ctx.dev)
    w1 = torch.randn(EXPERTS, EXPERT_HIDDEN, K_IN, dtype=ctx.dtype, device=ctx.dev) * K_IN ** -0.5
    w2 = torch.randn(EXPERTS, K_IN, EXPERT_HIDDEN, dtype=ctx.dtype, device=ctx.dev) * EXPERT_HIDDEN ** -0.5
    dy = torch.randn(TOKENS, K_IN, dtype=ctx.dtype, device=ctx.dev)
    offs = torch.tensor([20, 20, 70, TOKENS], dtype=torch.int32, device=ctx.dev)   # an empty group among them

    def layer(x, w1, w2, offs):
        h = pt.grouped_mm(x, w1.transpose(-1, -2), offs=offs)
        return pt.grouped_mm(h, w2.transpose(-1, -2), offs=offs)

    xd = DTensor.from_local(x.clone(), ctx.mesh, [Replicate()]).requires_grad_(True)
    w1d = distribute_tensor(w1.clone(), ctx.mesh, [Shard(1)]).requires_grad_(True)   # (E, N, K): N sharded
    w2d = distribute_tensor(w2.clone(), ctx.mesh, [Shard(2)]).requires_grad_(True)   # (E, K_out, N): N sharded
    before = ctx.count()
    yd = layer(xd, w1d, w2d, DTensor.from_local(offs, ctx.mesh, [Replicate()]))
    placement = tuple(yd.placements)
    y = yd.redistribute(ctx.mesh, [Replicate()]).to_local()
    y.backward(dy)
    calls = ctx.count() - before
    xs, w1s, w2s = (t.clone().requires_grad_(True) for t in (x, w1, w2))
    ys = layer(xs, w1s, w2s, offs)
    ys.backward(dy)
    # float64, per group, of the values and of their magnitudes
    ref, mag = _grouped_float64(torch, x, w1, w2, dy, offs, False), _grouped_float64(torch, x, w1, w2, dy, offs, True)
    got = {"y": y, "dx": xd.grad, "dw1": w1d.grad, "dw2": w2d.grad}
    parts = [(placement == (_partial(),), f"output {placement}")]
    parts += [within(ctx, k, got[k], ref[k], mag[k]) for k in ref]
    parts += [within(ctx, "single " + k, v, ref[k], mag[k]) for k, v in (("y", ys), ("dx", xs.grad))]
    return (*verdict(parts), calls, 6)   # 2 forward, per projection dA and dB backward


def _partial():
    from torch.distributed.tensor import Partial
    return Partial()


def _grouped_float64(torch, x, w1, w2, dy, offs, absolute: bool):
    f = (lambda t: t.detach().double().abs()) if absolute else (lambda t: t.detach().double())
    x, w1, w2, dy = f(x), f(w1), f(w2), f(dy)
    y, dx = torch.zeros_like(x), torch.zeros_like(x)
    dw1, dw2 = torch.zeros_like(w1), torch.zeros_like(w2)
    start = 0
    for g, end in enumerate(offs.tolist()):
        xs, gs = x[start:end], dy[start:end]
        h = xs @ w1[g].t()
        y[start:end] = h @ w2[g].t()
        dh = gs @ w2[g]
        dx[start:end] = dh @ w1[g]
        dw2[g], dw1[g] = gs.t() @ h, dh.t() @ xs
        start = end
    return {"y": y, "dx": dx, "dw1": dw1, "dw2": dw2}


# ------------------------------------------------------------------------------------------------------------------
# FSDP2: a small model of pt.Linear layers and an MoE experts layer (pt.experts_forward, the grouped GEMMs),
# fully_shard per layer and at the root, one SGD step on each rank's half of a batch
# ------------------------------------------------------------------------------------------------------------------

def _tiny_model(ctx):
    import torch.nn as nn

    import ptxgemm.torch as pt

    torch = ctx.torch

    class Experts(nn.Module):
        """transformers' experts interface as pt.experts_forward reads it: gate_up_proj (E, 2I, H), down_proj
        (E, H, I), SiLU gate."""

        def __init__(self):
            super().__init__()
            self.num_experts, self.has_gate, self.has_bias, self.is_transposed = EXPERTS, True, False, False
            self.gate_up_proj = nn.Parameter(torch.randn(EXPERTS, 2 * EXPERT_HIDDEN, K_IN) * K_IN ** -0.5)
            self.down_proj = nn.Parameter(torch.randn(EXPERTS, K_IN, EXPERT_HIDDEN) * EXPERT_HIDDEN ** -0.5)
            self.act_fn = nn.SiLU()

        def _apply_gate(self, h):
            gate, up = h.chunk(2, dim=-1)
            return self.act_fn(gate) * up

        def forward(self, x):
            flat = x.reshape(-1, K_IN)
            tokens = torch.arange(flat.shape[0], device=flat.device)
            top = torch.stack([tokens % EXPERTS, (tokens // EXPERTS + 1) % EXPERTS], -1)   # fixed routing
            top = torch.where(top[:, :1] == top[:, 1:], (top + 1) % EXPERTS, top)        # two distinct experts
            weights = torch.full(top.shape, 0.5, dtype=flat.dtype, device=flat.device)
            return pt.experts_forward(self, flat, top, weights).reshape(x.shape)

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.Linear(K_IN, HIDDEN)
            self.down = nn.Linear(HIDDEN, K_IN)
            self.experts = Experts()

        def forward(self, x):
            h = x + self.down(torch.nn.functional.silu(self.up(x)))
            return h + self.experts(h)

    torch.manual_seed(SEED + 3)
    model = Tiny()
    with torch.no_grad():
        for lin in (model.up, model.down):
            lin.weight.normal_(0.0, lin.in_features ** -0.5)
    model = model.to(ctx.dev, ctx.dtype)
    pt.replace_linear(model)
    return model


def _fsdp(ctx, compiled: bool):
    from torch.distributed.fsdp import fully_shard

    torch = ctx.torch
    model = _tiny_model(ctx)
    single = copy.deepcopy(model)
    sharded = copy.deepcopy(model)
    for m in (sharded.up, sharded.down, sharded.experts, sharded):
        fully_shard(m, mesh=ctx.mesh)
    torch.manual_seed(SEED + 4)
    x = torch.randn(ctx.world * 2, SEQ, K_IN, dtype=ctx.dtype, device=ctx.dev)   # the global batch
    mine = x.chunk(ctx.world)[ctx.rank]

    def loss_of(out):
        return out.float().square().mean()

    run = torch.compile(sharded, backend=ctx.backend) if compiled else sharded
    opt = torch.optim.SGD(sharded.parameters(), lr=0.5)
    before = {n: full(p).detach().clone() for n, p in sharded.named_parameters()}
    counted = ctx.count()
    loss = loss_of(run(mine))
    loss.backward()
    calls = ctx.count() - counted
    grads = {n: full(p.grad) for n, p in sharded.named_parameters()}
    opt.step()
    moved = all(not torch.equal(full(p).detach(), before[n]) for n, p in sharded.named_parameters())
    global_loss = loss.detach().clone()
    ctx.dist.all_reduce(global_loss, op=ctx.dist.ReduceOp.AVG)

    ref_loss = loss_of(single(x))
    ref_loss.backward()
    ref_loss = ref_loss.detach()
    parts = [(abs(float(global_loss) - float(ref_loss)) <= REL_BOUND_UNITS * ctx.u * abs(float(ref_loss)),
              f"loss {float(global_loss):.6f} vs {float(ref_loss):.6f}"), (moved, "the step moved every shard")]
    parts += [close(ctx, n, grads[n], p.grad) for n, p in single.named_parameters()]
    # per rank: forward 2 dense + 2 grouped; backward dW of each linear, dX of the second (x needs no gradient),
    # dA and dB of each grouped projection
    return (*verdict(parts), calls, 11)


def check_fsdp_step(ctx):
    return _fsdp(ctx, compiled=False)


def check_fsdp_step_compiled(ctx):
    return _fsdp(ctx, compiled=True)


CHECKS = {"tp_linear": check_tp_linear, "tp_linear_compiled": check_tp_linear_compiled,
          "tp_dispatches": check_tp_dispatches, "tp_inference": check_tp_inference, "tp_activation": check_tp_activation, "tp_grouped": check_tp_grouped,
          "fsdp_step": check_fsdp_step, "fsdp_step_compiled": check_fsdp_step_compiled}


if __name__ == "__main__":
    sys.exit(main())
