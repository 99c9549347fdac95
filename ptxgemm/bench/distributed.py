"""The distributed model benchmark of issue 50 (`python -m ptxgemm distributed`): the model benchmark's
transformers models (ptxgemm.bench.transformer_models: its builders, peers, timing and errors, reused) trained on
two GPUs, tensor parallel or under FSDP2, stock against ptxgemm under the same parallelism, with the loss and
gradients checked against a single-GPU run of the same weights.

Configurations (CONFIGS): Llama-3-8B's widths with tensor parallelism ("llama-tp": torch's ColwiseParallel on
q/k/v and gate/up, RowwiseParallel on o and down, per decoder layer -- the Megatron layout, two all-reduces a layer
forward and two backward; the embedding, final norm and LM head stay whole on every rank, each computing the same
values), Llama with FSDP2 ("llama-fsdp": fully_shard per decoder layer and at the root, each rank its own batch,
gradients reduce-scattered as averages), and the Mixtral-shaped MoE with FSDP2 ("mixtral-fsdp": the experts
sharded with their layer, ptxgemm's peer on pt.grouped_mm). Peers: the stock model ("cublas"; Mixtral's
"grouped_mm", torch._grouped_mm) and "ptxgemm" (transformer_models.ptxgemm_prepare: pt.replace_linear, Mixtral's
experts implementation "ptxgemm"), deep copies of one seeded model, parallelized alike. pt.Linear takes the stock
parallel styles as they are (it is an nn.Linear): DTensor runs its GEMMs through ptxgemm's sharding rules
(ptxgemm.torch.sharding).

Accuracy (before any timing, eager): every rank builds the seeded stock model and runs it whole on its own GPU on
the global batch (`accuracy_batch` x `accuracy_seq` tokens): the single-GPU reference, its gradients kept on the
host. Then each peer, parallelized, runs the same batch (tensor parallel: every rank all of it; FSDP: each rank its
share of the sequences) and is compared with it: loss_rel_err (FSDP: the ranks' mean loss), logits_rel_err (FSDP:
over the ranks' slices together), grad_rel_err and the worst parameter's, each gradient gathered whole
(DTensor.full_tensor). The row's errors are ptxgemm's; the stock peer's own, under the same parallelism, are in
`accuracy` (the scale of what the parallelism's reductions in bf16 change), and the ptxgemm model's own errors run
whole on one GPU, the same comparison, in `single_gpu_ptxgemm`. inside_bound (distributed_bound): the logits' and
gradients' errors within the model benchmark's bound against the stock model (transformer_models.BOUND: logits
2**-7, gradients 0.02) or, where the single-GPU ptxgemm model is itself past it (Llama's logits are, by 8.1e-3 at 2
layers: its k-loop sums half the tiles backward, a rounding order, not an error; the model benchmark's docstring),
within the single-GPU ptxgemm model's error plus the parallelism's own (the stock peer's), 1 + 2**-7 over;
inside_bound_vs_stock is the first test alone.

Timing (METHOD): training steps (forward with labels, backward, SGD step, zero_grad) as transformer_models.measure
times them -- first call untimed (compile_s when compiled), then `repeats` windows per peer, the peers' order
alternating, each window `iters` untimed steps and `iters` timed ones between CUDA events -- on every rank in step;
a window's seconds are the slowest rank's (an all-reduce of the maximum), tokens/s the global tokens per step (TP:
the batch, which every rank shares; FSDP: the batch times the ranks) over them. Compiled rows compile each decoder
layer in place (nn.Module.compile, regional compilation: one compiled layer serves all, and FSDP2's hooks, which
torch.compile skips, stay around it), embedding, norm, LM head and loss eager, for both peers alike.

Output: one JSON per (configuration, mode), <out>/distributed_<gpu>_<parallel>_<model>_<mode>[_<name>].json (out
by default docs/results/<gpu>/distributed), the issue's fields at the top (gpu, gpus, parallel, model, compiled,
ptxgemm_tokens_per_s, stock_tokens_per_s, loss_rel_err, grad_rel_err) beside the model benchmark's row fields
(peers with min/median/max, ratio, logits_rel_err, inside_bound, host-path counters) and the run's header (date,
torch, transformers, method, dims, sizes, accuracy).

torch and transformers are imported inside the functions that run a model (importing this module, for the CLI's
--help and the CPU tests, needs neither); `run_config(..., device="cpu", dims=..., backend="aot_eager")` runs the
whole harness on gloo with tiny models, which is how the CPU tests check it."""
from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

from ..errors import ConfigError
from . import ranks, transformer_models as tm

#: configuration -> (arch, parallelism)
CONFIGS = {"llama-tp": ("llama", "tp"), "llama-fsdp": ("llama", "fsdp"), "mixtral-fsdp": ("mixtral", "fsdp")}
PARALLELS = ("tp", "fsdp")
MODES = tm.MODES
OURS = tm.OURS
#: the stock peer of each arch (transformer_models.PEERS' first)
STOCK = {arch: tm.PEERS[arch][0] for arch in ("llama", "mixtral")}
#: Llama's tensor-parallel plan, per decoder layer: the Megatron layout
TP_PLAN = {"self_attn.q_proj": "colwise", "self_attn.k_proj": "colwise", "self_attn.v_proj": "colwise",
           "self_attn.o_proj": "rowwise", "mlp.gate_proj": "colwise", "mlp.up_proj": "colwise",
           "mlp.down_proj": "rowwise"}
SCHEMA = 1
MAX_LAYERS = 8

METHOD = ("training steps on every rank in step: per mode, each peer's first call untimed (compile_s when compiled), "
          "then repeats with the peers' order alternating per repeat; in each, as many untimed steps as the window "
          "has, then CUDA events around `iters` steps back to back; a window's seconds are the slowest rank's "
          "(all-reduce max); tokens/s = global tokens per step (tp: the shared batch; fsdp: batch x ranks) x iters "
          "/ seconds, min/median/max over repeats; the ratio read is the median over repeat pairs (each peer first "
          "once in a pair) of the pair's geometric-mean ratio")


@dataclasses.dataclass(frozen=True)
class Sizes:
    """One configuration's sizes (the CLI's options): `batch` sequences of `seq` tokens per rank per training step
    (TP: the same sequences on every rank), the accuracy pass's global batch, iterations per window, repeats."""
    layers: int = 4
    batch: int = 4
    seq: int = 1024
    accuracy_batch: int = 2
    accuracy_seq: int = 1024
    iters: int = 6
    repeats: int = 4    # even: each peer first in as many repeats (tm.ratios, `paired`)


#: --quick: one layer, short sequences, short windows (the widths stay the model's)
QUICK = Sizes(layers=1, batch=1, seq=256, accuracy_batch=2, accuracy_seq=256, iters=2, repeats=3)


def check_sizes(s: Sizes, world: int = 2) -> Sizes:
    """`s`, or a ConfigError naming the option and its rule."""
    if not 1 <= s.layers <= MAX_LAYERS:
        raise ConfigError(f"--layers: must be 1 to {MAX_LAYERS}, got {s.layers}")
    for field in ("batch", "seq", "accuracy_batch", "accuracy_seq", "iters", "repeats"):
        if getattr(s, field) < 1:
            raise ConfigError(f"--{field.replace('_', '-')}: must be >= 1, got {getattr(s, field)}")
    if s.accuracy_batch % world:
        raise ConfigError(f"--accuracy-batch: FSDP splits it over the {world} ranks, so it must be a multiple of "
                          f"{world}, got {s.accuracy_batch}")
    return s


def parse_configs(text: str) -> tuple:
    """'llama-tp,mixtral-fsdp' -> the configurations in CONFIGS' order ('all': every one)."""
    if text.strip() == "all":
        return tuple(CONFIGS)
    return tm.parse_list(text, tuple(CONFIGS), "--config")


def report_path(out_dir, gpu: str, parallel: str, model: str, compiled: bool, name: str | None = None) -> Path:
    mode = "compiled" if compiled else "eager"
    return Path(out_dir) / (f"distributed_{gpu}_{parallel}_{model}_{mode}" + (f"_{name}" if name else "") + ".json")


def default_out(gpu: str) -> str:
    return f"docs/results/{gpu}/distributed"


def write_row(row: dict, out_dir, name: str | None = None) -> Path:
    path = report_path(out_dir, row["gpu"], row["parallel"], row["model"], row["compiled"], name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(row, indent=1) + "\n")
    return path


def _fmt(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _pair(row: dict, key: str) -> str:
    """The parallelized ptxgemm peer's error and, in parentheses, the single-GPU ptxgemm model's."""
    single = (row.get("single_gpu_ptxgemm") or {}).get(key)
    return f"{_fmt(row[key], '.2e')} ({_fmt(single, '.2e')})"


def format_table(rows) -> str:
    """One line per row: configuration, mode, ptxgemm's and the stock peer's median tokens/s, the ratio
    (tm.headline_ratio: order-balanced over pairs of repeats) with the per-repeat extremes, both compile times, and
    the errors against the single-GPU run."""
    lines = [f"{'model':<15}{'parallel':<9}{'mode':<9}{'ptxgemm tok/s':>14}{'stock tok/s':>12}{'ratio':>7}  "
             f"{'min-max':<13}{'compile s':>10}  {'loss err':>9}  {'grad err (1 GPU)':>19}  "
             f"{'logits err (1 GPU)':>19}  bound"]
    for row in rows:
        r = row["ratio"][row["peer"]]
        comp = (f"{row['peers'][OURS]['compile_s']:.0f}/{row['peers'][row['peer']]['compile_s']:.0f}"
                if row["compiled"] else "-")
        lines.append(f"{row['model']:<15}{row['parallel']:<9}{'compiled' if row['compiled'] else 'eager':<9}"
                     f"{row['ptxgemm_tokens_per_s']:>14.0f}{row['stock_tokens_per_s']:>12.0f}"
                     f"{tm.headline_ratio(r):>7.3f}  "
                     f"{r['min']:.3f}-{r['max']:.3f}  {comp:>10}  {_fmt(row['loss_rel_err'], '.2e'):>9}  "
                     f"{_pair(row, 'grad_rel_err'):>19}  {_pair(row, 'logits_rel_err'):>19}  "
                     f"{'inside' if row['inside_bound'] else 'OUTSIDE'}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------------------------
# Parallelizing a model (torch from here on, imported inside)
# ------------------------------------------------------------------------------------------------------------------

def tensor_parallel(model, mesh) -> None:
    """TP_PLAN on every decoder layer, with torch's own styles (pt.Linear is an nn.Linear: they take it as is)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    for layer in model.model.layers:
        parallelize_module(layer, mesh, {name: styles[style]() for name, style in TP_PLAN.items()})


def fully_shard_model(model, mesh) -> None:
    """FSDP2: fully_shard each decoder layer (its parameters gathered for its forward and backward only), then the
    root (embedding, final norm, LM head)."""
    from torch.distributed.fsdp import fully_shard

    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)


def parallelize(model, parallel: str, mesh) -> None:
    if parallel == "tp":
        tensor_parallel(model, mesh)
    elif parallel == "fsdp":
        fully_shard_model(model, mesh)
    else:
        raise ConfigError(f"parallel: one of {PARALLELS}, got {parallel!r}")


def compile_layers(model, backend: str) -> None:
    """Each decoder layer compiled in place (nn.Module.compile, mode default, dynamic=False)."""
    for layer in model.model.layers:
        layer.compile(backend=backend, dynamic=False)


# ------------------------------------------------------------------------------------------------------------------
# Accuracy against the single-GPU run
# ------------------------------------------------------------------------------------------------------------------

def full(t):
    """A DTensor gathered whole (every rank must call it, in the same order), a tensor as it is."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def my_share(ids, parallel: str, rank: int, world: int):
    """The sequences this rank runs: all of them (tensor parallel) or its contiguous share (FSDP)."""
    return ids if parallel == "tp" else ids.chunk(world)[rank]


def distributed_errors(torch, dist, model, ids, ref: dict, parallel: str) -> dict:
    """One parallelized forward with labels and its backward on this rank's share of `ids` against the single-GPU
    pass `ref` (transformer_models.forward_backward's, its gradients on the host): the model benchmark's error
    fields (transformer_models.compare's)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    mine = my_share(ids, parallel, rank, world)
    model.zero_grad(set_to_none=True)
    out = model(input_ids=mine, labels=mine, use_cache=False)
    out.loss.backward()
    loss = out.loss.detach().double().reshape(1)
    if parallel == "fsdp":
        dist.all_reduce(loss, op=dist.ReduceOp.AVG)    # equal shares: the global batch's mean
    want_logits = my_share(ref["logits"], parallel, rank, world)
    sums = torch.tensor(tm.sq_err(out.logits.detach(), want_logits), dtype=torch.float64, device=loss.device)
    if parallel == "fsdp":
        dist.all_reduce(sums)                          # the ranks' slices together
    del out
    ref_grads = dict(ref["grads"])
    num_all = den_all = 0.0
    worst, worst_name = 0.0, None
    for name, p in model.named_parameters():
        r = ref_grads.get(name)
        if r is None:
            continue
        if p.grad is None:
            raise ConfigError(f"accuracy: parameter {name} has no gradient in the parallelized model")
        g = full(p.grad)
        if tuple(g.shape) != tuple(r.shape):
            raise ConfigError(f"accuracy: parameter {name} gathers to {tuple(g.shape)}, the reference's is "
                              f"{tuple(r.shape)}")
        num, den = tm.sq_err(g, r)
        del g
        num_all, den_all = num_all + num, den_all + den
        e = tm.norm_ratio(num, den)
        if e >= worst:
            worst, worst_name = e, name
    model.zero_grad(set_to_none=True)
    loss_value, ref_loss = float(loss.item()), ref["loss"]
    return {"logits_rel_err": tm.norm_ratio(float(sums[0]), float(sums[1])),
            "loss_rel_err": abs(loss_value - ref_loss) / abs(ref_loss) if ref_loss else None,
            "grad_rel_err": tm.norm_ratio(num_all, den_all), "grad_worst_rel_err": worst, "grad_worst_param": worst_name,
            "loss": loss_value}


def distributed_bound(ours: dict, single: dict, stock: dict) -> bool:
    """Whether the parallelized ptxgemm peer's logits and gradients (`ours`, against the single-GPU stock run) are
    inside the bound: the model benchmark's against the stock model (transformer_models.BOUND), or, where the
    single-GPU ptxgemm model itself is farther than that (its K order differs from cuBLAS's: the model benchmark's
    docstring), no farther than it plus what the parallelism adds to the stock model (`single`, `stock`: those two
    distances; the sum bounds errors of any correlation, which add in quadrature when independent), within a relative
    FP32_SLACK."""
    for key, limit in (("logits_rel_err", tm.BOUND["logits"]), ("grad_rel_err", tm.BOUND["grad"])):
        allowed = max(limit, (single[key] + stock[key]) * (1 + tm.FP32_SLACK))
        if not ours[key] <= allowed:
            return False
    return True


class RankClock(tm.Clock):
    """transformer_models.Clock on every rank; a window's seconds are the slowest rank's."""

    def __init__(self, torch, device, dist):
        super().__init__(torch, device)
        self.dist, self.device = dist, device

    def time(self, step, iters: int) -> float:
        seconds = super().time(step, iters)
        t = self.torch.tensor([seconds], dtype=self.torch.float64, device=self.device)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return float(t.item())


# ------------------------------------------------------------------------------------------------------------------
# One configuration
# ------------------------------------------------------------------------------------------------------------------

def run_config(torch, dist, mesh, arch: str, parallel: str, sizes: Sizes, *, modes=MODES, device: str = "cuda",
               dims: dict | None = None, prepare=tm.ptxgemm_prepare, backend: str = "inductor", log=print,
               counters=tm.plan_counters) -> tuple[list, list]:
    """Build `arch`'s two peers on every rank, parallelize them (`parallel`), measure their accuracy against the
    single-GPU run and their training steps in every mode; (rows, errors). Every rank must call it alike."""
    if parallel == "tp" and arch != "llama":
        raise ConfigError(f"--config: tensor parallelism is planned for llama's layers only (TP_PLAN), not {arch}")
    rank, world = dist.get_rank(), dist.get_world_size()
    check_sizes(sizes, world)
    dev = ranks.rank_device(torch, device)
    dims = dict(tm.DIMS[arch] if dims is None else dims)
    header = tm.environment(torch, dev, arch, tm.Sizes(layers=sizes.layers, prefill_seq=sizes.accuracy_seq,
                                                       train_batch=sizes.batch, train_seq=sizes.seq), dims)
    header.update({"schema": SCHEMA, "gpus": world, "parallel": parallel, "sizes": dataclasses.asdict(sizes),
                   "method": METHOD, "compile": "each decoder layer, nn.Module.compile (regional)",
                   "tp_plan": TP_PLAN if parallel == "tp" else None})
    say = log if rank == 0 else (lambda s: None)
    label = f"{header['model']} {parallel}"
    say(f"{label}: building on {world} x {header['device_name']}")
    stock_name = STOCK[arch]
    stock = tm.build_stock(torch, arch, sizes.layers, dims, dev)

    # the single-GPU reference: the stock model whole, on this rank's GPU, on the global batch
    ids = tm.tokens(torch, dims["vocab_size"], sizes.accuracy_batch, sizes.accuracy_seq, dev, tm.SEED + 1)
    ref = tm.forward_backward(stock, ids)
    ref["grads"] = [(n, None if g is None else g.cpu()) for n, g in ref["grads"]]
    tm.free(torch)

    # the ptxgemm peer, first whole on this GPU too: its own distance from the stock model there is the bound the
    # single-GPU model meets, which the parallelized peer is held to (distributed_bound)
    models = {stock_name: stock, OURS: copy.deepcopy(stock)}
    ours_text = {"what": "a copy of the stock model with ptxgemm's GEMMs", **prepare(models[OURS], arch)}
    header["variants"] = {stock_name: tm.STOCK_TEXT[stock_name], OURS: ours_text}
    single = tm.compare(tm.forward_backward(models[OURS], ids), ref)
    tm.free(torch)
    for m in models.values():
        parallelize(m, parallel, mesh)
    say(f"{label}: accuracy against the single-GPU run (batch {sizes.accuracy_batch} x {sizes.accuracy_seq})")
    peers = {n: distributed_errors(torch, dist, m, ids, ref, parallel) for n, m in models.items()}
    acc = {"reference": f"single-GPU stock ({stock_name}), the same weights and batch", "batch": sizes.accuracy_batch,
           "seq": sizes.accuracy_seq, "fp32_reference": False, "peers": peers, "bound": tm.BOUND,
           "single_gpu_loss": ref["loss"], "single_gpu_ptxgemm": single}
    acc["inside_bound"] = distributed_bound(peers[OURS], single, peers[stock_name])
    del ref, ids
    tm.free(torch)

    clock = RankClock(torch, dev, dist)
    ids = tm.tokens(torch, dims["vocab_size"], sizes.batch * (world if parallel == "fsdp" else 1), sizes.seq, dev,
                    tm.SEED + 5)
    mine = my_share(ids, parallel, rank, world)
    tokens_per_iter = int(ids.numel())
    # tensor parallel leaves the embedding, norm and LM head plain tensors beside the layers' DTensors: one foreach
    # update over both kinds is refused, so the step updates parameter by parameter there (both peers alike)
    optimizers = {n: torch.optim.SGD(m.parameters(), lr=1e-6, foreach=parallel != "tp") for n, m in models.items()}
    for m in models.values():
        m.train()
    rows, errors = [], []
    for mode in modes:
        try:
            if mode == "compiled":
                for m in models.values():
                    compile_layers(m, backend)
            steps = {n: tm.train_step(torch, m, mine, optimizers[n]) for n, m in models.items()}
            say(f"{label}: train_step {mode}: " + ", ".join(steps))
            first = {n: clock.first_call(s) for n, s in steps.items()}
            host, plans, draw = {}, {}, {}
            runs = tm.measure(clock, steps, tokens_per_iter=tokens_per_iter, iters=sizes.iters, warmup=sizes.iters,
                              repeats=sizes.repeats, draw=draw, host=host, counters=counters, plans=plans)
        except Exception as e:   # recorded in the rows' file and the exit status; the next mode still runs
            errors.append({"mode": mode, "error": f"{type(e).__name__}: {e}"})
            say(f"{label}: {mode} failed: {type(e).__name__}: {e}")
            for m in models.values():
                m.zero_grad(set_to_none=True)
            continue
        row = tm.make_row(header, phase="train_step", compiled=mode == "compiled", runs=runs, batch=sizes.batch,
                          seq=sizes.seq, iters=sizes.iters, warmup=sizes.iters, accuracy=acc, first_call_s=first,
                          host_s=host, plan_stats=tm.plan_sum(plans.get(OURS)), draw=tm.draw_stats(draw))
        row.update({"gpus": world, "parallel": parallel, "stock_tokens_per_s": row["cublas_tokens_per_s"],
                    "inside_bound": acc["inside_bound"], "single_gpu_ptxgemm": single,
                    "tokens_per_iter": tokens_per_iter, "batch_per_rank": sizes.batch,
                    "grad_worst_rel_err": peers[OURS]["grad_worst_rel_err"],
                    "grad_worst_param": peers[OURS]["grad_worst_param"], "accuracy": acc,
                    **{k: header[k] for k in ("schema", "device_name", "date", "ptxgemm", "cuda", "dims", "sizes",
                                              "variants", "compile", "tp_plan", "bound")}})
        row["method"] = METHOD
        rows.append(row)
    models.clear()
    optimizers.clear()
    if hasattr(torch, "_dynamo"):
        torch._dynamo.reset()
    tm.free(torch)
    return rows, errors
