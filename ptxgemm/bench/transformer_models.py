"""The model benchmark of issue 27 (`python -m ptxgemm model`): transformers' Llama and Mixtral at their 8B-class
dimensions, a few layers deep, with random bf16 weights, run stock and with ptxgemm's GEMMs (ptxgemm.torch) side by
side in one process: accuracy first, then prefill, training-step and decode tokens/s.

Models (random weights, no download: torch.manual_seed(27), initializer_range 0.02, sdpa attention, bf16 on cuda):
- llama: LlamaForCausalLM with Llama-3-8B's dimensions (hidden 4096, MLP 14336, 32 heads, 8 KV heads, vocab
  128256, rope_theta 500000, RMS eps 1e-5, 8192 positions), `layers` decoder layers. Peers: "cublas", the stock
  model (every nn.Linear through torch, so cuBLAS), and "ptxgemm", copy.deepcopy of it after pt.replace_linear
  (every nn.Linear, lm_head included).
- mixtral: MixtralForCausalLM with Mixtral-8x7B's (hidden 4096, experts' MLP 14336, 8 experts top-2, 32/8 heads,
  vocab 32000). Peers, deep copies of one seeded model: "grouped_mm" (transformers' default experts implementation,
  torch._grouped_mm), "eager" (its python loop over the experts, F.linear each) and "ptxgemm" (experts
  implementation "ptxgemm", i.e. pt.grouped_mm, registered by pt.use_in_transformers(), plus pt.replace_linear on
  q/k/v/o and lm_head). The router (MixtralTopKRouter in transformers 5.17) holds an nn.Parameter that F.linear
  reads, not an nn.Linear: it stays on cuBLAS in every peer (its N = 8 GEMM is a sliver of a layer's work). "eager"
  is timed in eager prefill and training only: its data-dependent loop (nonzero, where) neither compiles to one
  graph nor can be captured in a CUDA graph.
- qwen2-0.5b, qwen2-1.5b (issue 46): Qwen2ForCausalLM with Qwen2-0.5B's widths (hidden 896, MLP 4864, 14 heads, 2 KV
  heads) and Qwen2-1.5B's (hidden 1536, MLP 8960, 12/2 heads), both vocab 151936, rope_theta 1e6, RMS eps 1e-6,
  32768 positions, the LM head tied to the embedding. Dense like llama, with llama's peers ("cublas", "ptxgemm":
  pt.replace_linear, which carries q/k/v's biases into the fused epilogue and keeps the tied weight one parameter).
  They are here for the host path: at these widths a step's GEMMs are small (K = 896 or 1536), so the time the host
  spends planning and launching each one is a visible part of the step, which 8B-wide layers hide.

Accuracy (eager, before any timing, the same `accuracy_batch` x `prefill_seq` random tokens for every peer, labels =
the tokens): each peer's logits, its causal-LM loss, and after one backward the gradient of every parameter, against
the default stock peer ("cublas" or "grouped_mm"): logits_rel_err = ||L_p - L_s||_F / ||L_s||_F (in float64 on the
device), loss_rel_err = |loss_p - loss_s| / |loss_s|, grad_rel_err = sqrt(sum ||g_p - g_s||^2) / sqrt(sum ||g_s||^2)
over all parameters together, grad_worst_rel_err the largest single parameter's (named). With the fp32 reference (on
by default) the same errors against a float32 copy of the stock model (TF32 off; Mixtral's copy runs the eager
experts loop, so every GEMM of the reference is a float32 cuBLAS one) are reported for every peer, stock included, under "vs_fp32": the
honest scale of an error is the stock model's own distance from float32.

`inside_bound`, with the float32 reference: ptxgemm's logits and gradients are no farther from the float32 model
than the stock model's are, up to FP32_SLACK (2**-7, one bf16 spacing) of that distance. Without the reference it
falls back to `inside_bound_vs_stock`, which every row also carries: against the stock model, logits_rel_err <=
2**-7 and grad_rel_err <= 0.02 (BOUND). That second criterion was the only one until issue 26 step 12, on the
argument that two correct bf16 implementations differ by a few roundings. Measured, it does not hold: how far two
correct models sit apart depends on how much of their rounding they share. While ptxgemm summed K in cuBLAS's order
in most tiles, its Llama logits were 3.2e-3 from cuBLAS's; with the serpentine k-loop, which sums half the tiles
backward, they are 8.1e-3 from cuBLAS's, while both models stay 1.6708e-2 and 1.6710e-2 from float32 (gradients
2.0327e-2 and 2.0346e-2). The distance from float32 measures accuracy; the distance between two bf16 models
measures how alike their rounding is. In Mixtral a token whose top-2
experts flip between two peers (router logits a rounding apart) changes its row by O(1): its errors can exceed the
dense model's without any GEMM being wrong; the "eager" peer's error against "grouped_mm" (both stock) shows that
scale.

Timing (`METHOD`): per phase, every peer runs its first call untimed (`first_call_s`: plans, kernel loads and, in
compiled rows, torch.compile's compile time, as `compile_s`), then `repeats` repeats, the peers' order alternating
per repeat; in each, as many untimed iterations as the window has (`warmup` for decode: a settle, so that each window
starts at the clock and power the peer's own work holds the board at under its power limit, not where the other peer
left it), then CUDA events around `iters` iterations back to back, with torch.cuda.synchronize between peers.
tokens/s = tokens per iteration x iters / seconds; min / median / max over the repeats. The ratio a table and a bar
read is the order-balanced one (`ratio.<peer>.paired`, ratios()): each pair of repeats has each peer first once,
and in a power-capped step the first peer of a repeat reads faster, whichever it is. Where nvidia-ml-py is
installed each window also records the board's SM clock, power and energy (ptxgemm.bench.power; medians per peer in
the row's `draw`, with joules per token).

Host path (issue 46: plan by shape, bind per call), measured in the timed windows only (never in the first call or the
settle iterations): `host_ms_per_step` {peer: ms}, time.perf_counter() around the `iters` calls of a window, read
before the event that ends it is waited for, / iters, the median over the repeats: what the host spends issuing one
step. It is a floor's reading only while the host runs ahead of the GPU: once the launch queue is full (or a step
synchronizes, as Mixtral's eager experts loop does) the host waits on the device and the figure approaches the step's
device time. `plans_made_per_step` {peer: n}: for the ptxgemm peer, ptxgemm.plan_stats()["plans_made"] read before
and after each of its windows, the sum over the repeats / (iters x repeats): plans are keyed by shape, never by
address, so a steady-state step finds all of them and shows 0 (anything above 0 is a re-plan per call); None for the
stock peers, which make no ptxgemm plans. `ptxgemm_host_ms_per_step`: plan_stats()["host_us"] over the same windows
/ 1000 / (iters x repeats), the host time spent inside ptxgemm's entry points. `plan_stats`: the ptxgemm peer's
plan_stats() differences summed over its windows (plans_made, plan_hits, calls, host_us). Decode replays a CUDA
graph, which calls no entry point: its ptxgemm figures are 0 by construction.

Phases:
- prefill: model(input_ids, use_cache=False) under torch.inference_mode(), logits included, batch `prefill_batch` x
  `prefill_seq` tokens per iteration;
- train_step: model(input_ids, labels=input_ids), loss.backward(), torch.optim.SGD(lr=1e-6).step(),
  zero_grad(set_to_none=True), batch `train_batch` x `train_seq` (model.train(); every config has dropout 0);
- decode: one new token per sequence per step, batch `decode_batch`, against transformers' StaticCache holding a
  prefix of `decode_prefix` tokens, the step captured once in a torch.cuda.CUDAGraph (warmed up on a side stream
  first) and replayed. In transformers 5.17 the static cache keeps its length as a device tensor per layer
  (StaticLayer.cumulative_length) that the step advances in place and from which the model derives the positions
  and the mask: the graph replays with no host input, and the benchmark rewinds the counters in place (fill_) to
  the prefix before each timed window. The cache has `decode_prefix` + max(3, warmup + decode_steps) slots and the
  attention reads all of them (masked), as transformers' static cache does. decode_logits_rel_err: ptxgemm's logits
  of one step against the stock peer's, each model on its own cache (prefilled by its own GEMMs).
Compiled rows use torch.compile(model, mode="default", dynamic=False), one compiled module per peer reused across
repeats and phases (prefill and training compile separately: grad mode and shapes differ); decode is eager + CUDA
graph only (compiled: false).

Sweep (`--sweep`, issue 46: SWEEP): one report per entry, each model at the tokens per step its entry names, 2
layers, prefill and training (decode only when --phases names it), eager and compiled: Qwen2-0.5B and -1.5B, where the
host path weighs most, Llama-3-8B at 4k and 16k tokens, Mixtral at 4k; the files are named
model_<gpu>_<model>_<name>-<tag> (name "sweep" unless --name, tag the entry's tokens: "4k", "16k"), so the two
Llama entries never collide. `format_sweep_table` prints one line per row: the ratio to the stock peer beside
plans_made_per_step and both peers' host and device milliseconds per step.

Output: per model, <out>/model_<gpu>_<model>[_<name>].json (gpu: "h100", "h200", ...; model: "llama3-8b-2l",
"mixtral-8x-2l", "qwen2-0.5b-2l", "qwen2-1.5b-2l"), an object of the run's header (`gpu`, `device_name`, `model`,
`arch`, `layers`, `dims`, `sizes`, `date`, `torch`, `transformers`, `ptxgemm`, `cuda`, `method`, `bound`,
`variants`: what each peer runs), its
`accuracy` (`reference`, `batch`, `seq`, per peer `logits_rel_err`, `loss_rel_err`, `grad_rel_err`,
`grad_worst_rel_err`, `grad_worst_param`, `loss`, and `vs_fp32` with the first four against float32), `errors`
(each (phase, mode) that raised, with the exception; its row is missing, the other phases still ran; the command
then exits 1) and `rows`, one per (mode, phase), each with:
    gpu, model, arch, layers, phase ("prefill" | "train_step" | "decode"), compiled, train_step (phase ==
    "train_step"), graph (decode: a CUDA graph), batch, seq (tokens per sequence per iteration; decode: 1), prefix
    and cache_len (decode), tokens_per_iter, iters, warmup, repeats, method, peer (the stock default peer), ptxgemm_tokens_per_s
    and cublas_tokens_per_s (medians; "cublas" = the stock default peer, torch._grouped_mm for Mixtral), peers
    ({name: {tokens_per_s_min, tokens_per_s_median, tokens_per_s_max, tokens_per_s_runs, first_call_s[,
    compile_s]}}), ratio ({peer: {median: ptxgemm's median / the peer's, min, max: of the per-repeat ratios,
    paired: {median, min, max, pairs} of the order-balanced pairs' ratios (None below two repeats)}}; above 1:
    ptxgemm faster), logits_rel_err, loss_rel_err, grad_rel_err (ptxgemm vs the stock default peer, from
    the accuracy pass), inside_bound, inside_bound_vs_stock, decode_logits_rel_err (decode rows), torch,
    transformers, and (schema 2, issue 46) plans_made_per_step, host_ms_per_step, ptxgemm_host_ms_per_step and
    plan_stats (see "Host path" above). A sweep's reports also carry `sweep`, the entry's tag.

torch and transformers are imported only inside the functions that run a model: importing this module (the CLI's
--help, the CPU tests) needs neither. `run_arch(..., prepare=...)` takes the function that turns a stock model into
the ptxgemm peer, so the CPU tests run the whole harness with the identity in its place.
"""
from __future__ import annotations

import copy
import dataclasses
import gc
import json
import math
import statistics
import time
from pathlib import Path

from .. import __version__
from ..errors import ConfigError
from .suite import gpu_slug

ARCHS = ("llama", "mixtral", "qwen2-0.5b", "qwen2-1.5b")
#: the CLI's --arch both (and its default outside the sweep): the two 8B-class models of issue 27
BOTH = ("llama", "mixtral")
MODES = ("eager", "compiled")
PHASES = ("prefill", "train", "decode")
#: a phase's name in the rows
PHASE_ROW = {"prefill": "prefill", "train": "train_step", "decode": "decode"}
MAX_LAYERS = 4               # Mixtral at 4 layers: 3 bf16 copies, grads and the fp32 reference fill an 80 GB card
SEED = 27                    # the weights; the tokens use SEED + 1
#: ptxgemm's errors inside these are what correct bf16 GEMMs produce (the module's docstring says why)
BOUND = {"logits": 2.0 ** -7, "grad": 0.02}    # inside_bound_vs_stock: against the stock model
FP32_SLACK = 2.0 ** -7                          # inside_bound: ptxgemm's distance from float32 over the stock's
SCHEMA = 2                   # 2: the host-path fields of issue 46 in every row (plans_made_per_step, ...)

DIMS = {
    "llama": dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                  vocab_size=128256, rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
                  rms_norm_eps=1e-5, max_position_embeddings=8192, tie_word_embeddings=False),
    "mixtral": dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                    vocab_size=32000, num_local_experts=8, num_experts_per_tok=2, max_position_embeddings=32768,
                    tie_word_embeddings=False),
    # transformers 5's Qwen2Config takes rope_theta inside rope_parameters, as LlamaConfig does
    "qwen2-0.5b": dict(hidden_size=896, intermediate_size=4864, num_attention_heads=14, num_key_value_heads=2,
                       vocab_size=151936, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                       rms_norm_eps=1e-6, max_position_embeddings=32768, tie_word_embeddings=True),
    "qwen2-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_attention_heads=12, num_key_value_heads=2,
                       vocab_size=151936, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                       rms_norm_eps=1e-6, max_position_embeddings=32768, tie_word_embeddings=True),
}
#: each arch's peers, the stock default first (its tokens/s are the row's cublas_tokens_per_s), ptxgemm last
PEERS = {"llama": ("cublas", "ptxgemm"), "mixtral": ("grouped_mm", "eager", "ptxgemm"),
         "qwen2-0.5b": ("cublas", "ptxgemm"), "qwen2-1.5b": ("cublas", "ptxgemm")}
#: the dense archs: every GEMM an nn.Linear (llama's path: replace_linear is the whole ptxgemm peer)
DENSE = ("llama", "qwen2-0.5b", "qwen2-1.5b")
#: the model field's stem per arch (model_name appends the layers)
MODEL_STEM = {"llama": "llama3-8b", "mixtral": "mixtral-8x", "qwen2-0.5b": "qwen2-0.5b", "qwen2-1.5b": "qwen2-1.5b"}
OURS = "ptxgemm"
#: peers that only run in eager prefill and training (see the module's docstring)
EAGER_ONLY = {"eager"}

METHOD = ("per phase: each peer's first call untimed (first_call_s; compile_s when compiled), then repeats with the "
          "peers' order alternating per repeat; in each, untimed settle iterations (as many as the window's), then CUDA "
          "events around `iters` iterations back to back on torch's current stream, torch.cuda.synchronize between peers; tokens/s = "
          "tokens per iteration x iters / seconds, min/median/max over repeats; the ratio read is the median over "
          "repeat pairs (each peer first once in a pair) of the pair's geometric-mean ratio; decode: replays of one "
          "CUDA graph per peer")


@dataclasses.dataclass(frozen=True)
class Sizes:
    """The run's shapes and counts (the CLI's options)."""
    layers: int = 2
    prefill_batch: int = 8
    prefill_seq: int = 2048
    train_batch: int = 4
    train_seq: int = 2048
    decode_batch: int = 64
    decode_prefix: int = 512
    decode_steps: int = 64        # timed replays per repeat
    accuracy_batch: int = 2
    repeats: int = 4    # even: each peer runs first in as many repeats (ratios, `paired`)
    prefill_iters: int = 10
    train_iters: int = 6
    warmup: int = 1

    @property
    def decode_cache_len(self) -> int:
        # 3: the side-stream warm-up calls before the capture (the counters are rewound after them)
        return self.decode_prefix + max(3, self.warmup + self.decode_steps)


#: --quick: every phase at smoke-test sizes (the model's widths stay 8B-class: the GEMMs are what is measured)
QUICK = Sizes(layers=1, prefill_batch=2, prefill_seq=256, train_batch=2, train_seq=256, decode_batch=8,
              decode_prefix=64, decode_steps=16, accuracy_batch=1, prefill_iters=2, train_iters=2)


def check_sizes(s: Sizes, max_positions: int = 8192) -> Sizes:
    """`s`, or a ConfigError naming the option and its rule."""
    if not 1 <= s.layers <= MAX_LAYERS:
        raise ConfigError(f"--layers: must be 1 to {MAX_LAYERS} (an 8B-wide model's copies, gradients and fp32 "
                          f"reference must fit one GPU), got {s.layers}")
    for field, option in (("prefill_batch", "--prefill-batch"), ("prefill_seq", "--prefill-seq"),
                          ("train_batch", "--train-batch"), ("train_seq", "--train-seq"),
                          ("decode_batch", "--decode-batch"), ("decode_prefix", "--decode-prefix"),
                          ("repeats", "--repeats")):
        if getattr(s, field) < 1:
            raise ConfigError(f"{option}: must be >= 1, got {getattr(s, field)}")
    for field in ("decode_steps", "accuracy_batch", "prefill_iters", "train_iters"):
        if getattr(s, field) < 1:
            raise ConfigError(f"{field}: must be >= 1, got {getattr(s, field)}")
    if s.warmup < 0:
        raise ConfigError(f"warmup: must be >= 0, got {s.warmup}")
    for option, n in (("--prefill-seq", s.prefill_seq), ("--train-seq", s.train_seq),
                      ("--decode-prefix", s.decode_cache_len)):
        if n > max_positions:
            raise ConfigError(f"{option}: {n} positions exceed the model's {max_positions}"
                              + (" (the prefix plus the decode steps)" if option == "--decode-prefix" else ""))
    return s


def parse_list(text: str, allowed, option: str) -> tuple:
    """'a,b' -> ('a', 'b') in the order of `allowed`, each one of `allowed`, or a ConfigError naming `option`."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise ConfigError(f"{option}: give at least one of {', '.join(allowed)}")
    for t in items:
        if t not in allowed:
            raise ConfigError(f"{option}: {t!r} is not one of {', '.join(allowed)}")
    return tuple(a for a in allowed if a in items)


def model_name(arch: str, layers: int) -> str:
    return MODEL_STEM[arch] + f"-{layers}l"


def peers_for(arch: str, phase: str, compiled: bool) -> tuple:
    """The peers timed in one (phase, mode): every peer of the arch but the eager-only ones outside eager
    prefill and training."""
    eager_ok = not compiled and phase != "decode"
    return tuple(p for p in PEERS[arch] if eager_ok or p not in EAGER_ONLY)


# ------------------------------------------------------------------------------------------------------------------
# The sweep (issue 46; plain python: the CLI and the CPU tests list it without torch)
# ------------------------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class SweepEntry:
    """One report of the sweep: `arch` at `sizes`. `tag` (the tokens per step) follows the run's name in the file
    name, so that two entries of one model (Llama at 4k and at 16k tokens) write two files."""
    arch: str
    tag: str
    sizes: Sizes


def _sweep_sizes(batch: int, seq: int, prefill_iters: int, train_iters: int) -> Sizes:
    """2 layers, prefill and training both `batch` x `seq`; the accuracy pass (2 x seq) and decode (only where
    --phases names it) at Sizes' defaults."""
    return Sizes(layers=2, prefill_batch=batch, prefill_seq=seq, train_batch=batch, train_seq=seq,
                 prefill_iters=prefill_iters, train_iters=train_iters)


#: the sweep, smallest model first: Qwen2's widths put the host path in view, Llama's and Mixtral's are issue 27's
#: models at 4k tokens per step and Llama also at the 16k of its default run. Iterations per window: about 50 to
#: 500 ms of H200 time each (more for the small models, whose steps take milliseconds), so that the whole sweep at 3
#: repeats times in about two minutes, torch.compile's time aside.
SWEEP = (
    SweepEntry("qwen2-0.5b", "4k", _sweep_sizes(4, 1024, 20, 10)),
    SweepEntry("qwen2-1.5b", "4k", _sweep_sizes(4, 1024, 20, 10)),
    SweepEntry("llama", "4k", _sweep_sizes(4, 1024, 10, 6)),
    SweepEntry("llama", "16k", _sweep_sizes(8, 2048, 6, 4)),
    SweepEntry("mixtral", "4k", _sweep_sizes(4, 1024, 10, 6)),
)
#: the phases a sweep runs unless --phases says otherwise: decode's CUDA graph replays issue no GEMM from the host
SWEEP_PHASES = ("prefill", "train")
#: --sweep --quick's tag: each arch once, at QUICK's smoke sizes (which would make Llama's two entries one)
SWEEP_QUICK_TAG = "quick"
SWEEP_NAME = "sweep"


def sweep_entries(*, quick: bool = False, repeats: int | None = None, archs=ARCHS) -> list:
    """The sweep's entries of `archs`, in SWEEP's order, each with `repeats` in its sizes where given; with `quick`
    each arch once at QUICK's sizes, tagged SWEEP_QUICK_TAG."""
    out, seen = [], set()
    for e in SWEEP:
        if e.arch not in archs or (quick and e.arch in seen):
            continue
        seen.add(e.arch)
        if quick:
            e = SweepEntry(e.arch, SWEEP_QUICK_TAG, QUICK)
        if repeats is not None:
            e = dataclasses.replace(e, sizes=dataclasses.replace(e.sizes, repeats=repeats))
        out.append(e)
    return out


def sweep_name(entry: SweepEntry, name: str | None = None) -> str:
    """The run part of an entry's file name: `name` (SWEEP_NAME by default), '-', the entry's tag."""
    return f"{name or SWEEP_NAME}-{entry.tag}"


# ------------------------------------------------------------------------------------------------------------------
# Rows (plain python: the CPU tests build them without torch)
# ------------------------------------------------------------------------------------------------------------------

def peer_stats(runs: list) -> dict:
    """One peer's tokens/s over the repeats."""
    return {"tokens_per_s_min": min(runs), "tokens_per_s_median": statistics.median(runs),
            "tokens_per_s_max": max(runs), "tokens_per_s_runs": list(runs)}


def ratios(runs: dict, ours: str = OURS) -> dict:
    """{peer: {median, min, max, paired}}: ptxgemm's median tokens/s over the peer's, and the extremes of the
    per-repeat ratios (repeat i of ptxgemm over repeat i of the peer: the two ran next to each other). `paired`
    (None below two repeats): {median, min, max, pairs} over repeat pairs (0, 1), (2, 3), ..., each pair's ratio
    the geometric mean of its two repeats' ratios, so that each peer ran first once in it (measure's order
    alternates). Why: in a power-capped step the peer that runs first in a repeat reads up to ~5% faster whichever
    it is (H200, Llama-3-8B widths compiled, runs r20-r22: 0.97 against 1.04), and an odd number of repeats puts
    one peer first once more than the other, which moves the plain median by as much as the step's gain."""
    out = {}
    for peer, theirs in runs.items():
        if peer == ours:
            continue
        per = [a / b for a, b in zip(runs[ours], theirs)]
        out[peer] = {"median": statistics.median(runs[ours]) / statistics.median(theirs), "min": min(per),
                     "max": max(per), "paired": paired_ratio(per)}
    return out


def paired_ratio(per: list) -> dict | None:
    """{median, min, max, pairs} of the order-balanced pair ratios of `per` (ratios(), per repeat); a last odd
    repeat is left out; None below two repeats."""
    pairs = [math.sqrt(per[i] * per[i + 1]) for i in range(0, len(per) - 1, 2)]
    if not pairs:
        return None
    return {"median": statistics.median(pairs), "min": min(pairs), "max": max(pairs), "pairs": len(pairs)}


def headline_ratio(ratio: dict) -> float | None:
    """The ratio a table and a bar read for one peer: the order-balanced pairs' median where there are pairs
    (paired_ratio), else the medians' ratio (rows written before `paired` existed, or one repeat)."""
    paired = ratio.get("paired")
    return paired["median"] if paired else ratio.get("median")


def host_fields(peers, *, iters: int, repeats: int, host_s: dict | None, plan_stats: dict | None) -> dict:
    """A row's host-path fields (the module's docstring, "Host path"): from `host_s` {peer: [host seconds per
    window]} and `plan_stats`, the ptxgemm peer's plan_delta summed over its windows (None: not measured)."""
    steps = iters * repeats

    def host_ms(p):
        windows = [w for w in (host_s or {}).get(p) or () if w is not None]
        return statistics.median(windows) * 1e3 / iters if windows else None
    return {"plans_made_per_step": {p: plan_stats["plans_made"] / steps if p == OURS and plan_stats else None
                                    for p in peers},
            "host_ms_per_step": {p: host_ms(p) for p in peers},
            "ptxgemm_host_ms_per_step": plan_stats["host_us"] / 1e3 / steps if plan_stats else None,
            "plan_stats": dict(plan_stats) if plan_stats else None}


def make_row(header: dict, *, phase: str, compiled: bool, runs: dict, batch: int, seq: int, iters: int,
             warmup: int, accuracy: dict | None, first_call_s: dict | None = None, host_s: dict | None = None,
             plan_stats: dict | None = None, **extra) -> dict:
    """One row: `runs` {peer: [tokens/s per repeat]}, the stock default peer first and ptxgemm among them;
    `accuracy` the model's accuracy block (or None when it was not measured); `host_s` and `plan_stats` what
    host_fields turns into the host-path fields (every row has them, None where they were not measured)."""
    peers = list(runs)
    default = peers[0]
    stats = {p: peer_stats(runs[p]) for p in peers}
    for p, s in (first_call_s or {}).items():
        stats[p]["first_call_s"] = s
        if compiled:
            stats[p]["compile_s"] = s
    ours = (accuracy or {}).get("peers", {}).get(OURS, {})
    row = {"gpu": header["gpu"], "model": header["model"], "arch": header["arch"], "layers": header["layers"],
           "phase": phase, "compiled": compiled, "train_step": phase == "train_step", "graph": phase == "decode"
           and header.get("graph", True), "batch": batch, "seq": seq, "tokens_per_iter": batch * seq,
           "iters": iters, "warmup": warmup, "repeats": len(runs[default]), "method": METHOD, "peer": default,
           "ptxgemm_tokens_per_s": stats[OURS]["tokens_per_s_median"],
           "cublas_tokens_per_s": stats[default]["tokens_per_s_median"], "peers": stats, "ratio": ratios(runs),
           "logits_rel_err": ours.get("logits_rel_err"), "loss_rel_err": ours.get("loss_rel_err"),
           "grad_rel_err": ours.get("grad_rel_err"),
           "inside_bound": inside_bound(ours, (accuracy or {}).get("peers", {}).get(default)) if ours else None,
           "inside_bound_vs_stock": inside_bound_vs_stock(ours) if ours else None,
           "torch": header.get("torch"), "transformers": header.get("transformers"),
           **host_fields(peers, iters=iters, repeats=len(runs[default]), host_s=host_s, plan_stats=plan_stats)}
    row.update(extra)
    return row


def draw_stats(draw: dict) -> dict:
    """{peer: medians over the repeats of the board's SM clock, power and joules per token} (empty without NVML)."""
    out = {}
    for peer, windows in draw.items():
        def med(key):
            values = [w[key] for w in windows if w.get(key) is not None]
            return statistics.median(values) if values else None
        # why the board held its clock where it did, in any repeat (power.CLOCK_REASONS): two peers at one power
        # but different clocks (a compiled training step, issue 46) are told apart by these
        limits = sorted({r for w in windows for r in w.get("clock_limits") or ()})
        out[peer] = {"sm_mhz": med("sm_mhz"), "watts": med("watts"), "joules_per_token": med("joules_per_token"),
                     "clock_limits": limits}
    return out


def inside_bound(errors: dict, stock: dict | None = None) -> bool:
    """Whether ptxgemm's `errors` are inside the bound (the module docstring says which): against float32 where
    both it and the stock peer (`stock`: its accuracy entry) were measured against it, else against the stock
    model."""
    ours, theirs = errors.get("vs_fp32"), (stock or {}).get("vs_fp32")
    if not (ours and theirs):
        return inside_bound_vs_stock(errors)
    return all(ours[key] <= theirs[key] * (1 + FP32_SLACK) for key in ("logits_rel_err", "grad_rel_err"))


def inside_bound_vs_stock(errors: dict) -> bool:
    """Against the stock model: logits within one bf16 spacing, gradients within 0.02 (BOUND)."""
    return errors["logits_rel_err"] <= BOUND["logits"] and errors["grad_rel_err"] <= BOUND["grad"]


def report_path(out_dir, gpu: str, model: str, name: str | None = None) -> Path:
    return Path(out_dir) / (f"model_{gpu}_{model}" + (f"_{name}" if name else "") + ".json")


def write_report(report: dict, out_dir, name: str | None = None) -> Path:
    path = report_path(out_dir, report["gpu"], report["model"], name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1) + "\n")
    return path


def _fmt(x, spec=".0f") -> str:
    return "-" if x is None else format(x, spec)


def _host_pair(row: dict, peer: str) -> str:
    """ptxgemm's and `peer`'s host ms per step, 'a/b' ('-' where either was not measured)."""
    h = row.get("host_ms_per_step") or {}
    a, b = h.get(OURS), h.get(peer)
    return "-" if a is None or b is None else f"{a:.2f}/{b:.2f}"


def _plans(row: dict) -> str:
    return _fmt((row.get("plans_made_per_step") or {}).get(OURS), ".2f")


def format_table(reports) -> str:
    """The compact table the command prints: one line per row and peer (ptxgemm's tokens/s, the peer's, the ratio
    (headline_ratio: order-balanced where there are pairs) and the per-repeat extremes, compile seconds of both,
    ptxgemm/peer SM clock, board power and millijoules per token where NVML read them, ptxgemm's plans made per
    step and ptxgemm/peer host ms per step), then each model's errors."""
    lines = [f"{'model':<16}{'phase':<11}{'mode':<9}{'peer':<11}{'ptxgemm tok/s':>14}{'peer tok/s':>12}"
             f"{'ratio':>7}  {'min-max':<13}{'compile s':>12}  {'MHz':>9}  {'W':>7}  {'mJ/token':>11}"
             f"  {'plans/step':>10}  {'host ms/step':>13}"]
    for rep in reports:
        for row in rep["rows"]:
            for peer, r in row["ratio"].items():
                comp = (f"{row['peers'][OURS]['compile_s']:.0f}/{row['peers'][peer]['compile_s']:.0f}"
                        if row["compiled"] else "-")
                d = row.get("draw") or {}
                ours, theirs = d.get(OURS, {}), d.get(peer, {})

                def pair(key, scale=1.0, spec=".0f"):
                    a, b = ours.get(key), theirs.get(key)
                    return "-" if a is None or b is None else f"{a * scale:{spec}}/{b * scale:{spec}}"
                lines.append(f"{row['model']:<16}{row['phase']:<11}{'compiled' if row['compiled'] else 'eager':<9}"
                             f"{peer:<11}{row['ptxgemm_tokens_per_s']:>14.0f}"
                             f"{row['peers'][peer]['tokens_per_s_median']:>12.0f}{headline_ratio(r):>7.3f}  "
                             f"{r['min']:.3f}-{r['max']:.3f}  {comp:>10}  {pair('sm_mhz'):>9}  {pair('watts'):>7}  "
                             f"{pair('joules_per_token', 1e3, '.2f'):>11}  {_plans(row):>10}  "
                             f"{_host_pair(row, peer):>13}")
    lines += format_notes(reports)
    return "\n".join(lines)


def format_notes(reports) -> list[str]:
    """The lines under a table: each model's errors against its reference (and float32), decode's one-step error,
    and the (phase, mode)s that failed."""
    lines = []
    for rep in reports:
        acc = rep.get("accuracy")
        if not acc:
            continue
        lines.append(f"{_label(rep)}: relative errors against {acc['reference']}"
                     + (" and float32" if acc["fp32_reference"] else "")
                     + f" (batch {acc['batch']} x {acc['seq']}; bound: "
                       + ("no farther from float32 than the reference, within a relative "
                          f"{FP32_SLACK:.4f}; against it " if acc["fp32_reference"] else "")
                       + f"logits {BOUND['logits']:.4f}, grads {BOUND['grad']})")
        for peer, e in acc["peers"].items():
            line = f"  {peer:<11}"
            if peer != acc["reference"]:
                line += (f"logits {e['logits_rel_err']:.2e}  loss {_fmt(e['loss_rel_err'], '.2e')}  grads "
                         f"{e['grad_rel_err']:.2e} (worst {e['grad_worst_rel_err']:.2e})")
            else:
                line += f"{'(the reference)':<63}"
            fp32 = e.get("vs_fp32")
            if fp32:
                line += f"   vs fp32: logits {fp32['logits_rel_err']:.2e}  grads {fp32['grad_rel_err']:.2e}"
            lines.append(line)
        for row in rep["rows"]:
            if row.get("decode_logits_rel_err") is not None:
                lines.append(f"  decode step logits, ptxgemm vs {row['peer']}: {row['decode_logits_rel_err']:.2e}")
    for rep in reports:
        for e in rep.get("errors", ()):
            lines.append(f"{_label(rep)}: FAILED {e['phase']} {e['mode']}: {e['error']}")
    return lines


def _label(rep: dict) -> str:
    """A report's model, with its sweep tag where it has one (two sweep entries may be one model)."""
    return rep["model"] + (f" ({rep['sweep']})" if rep.get("sweep") else "")


def format_sweep_table(reports) -> str:
    """The sweep's table: one line per row against the stock default peer: model, tokens per step, phase, compiled,
    the ratio (headline_ratio: the order-balanced pairs' median, ptxgemm/stock), ptxgemm's plans made per step,
    ptxgemm/stock host ms per step, the host ms of it spent inside ptxgemm's entry points, and ptxgemm/stock device
    ms per step (from the median tokens/s: where host ms nears it, the step waits on the host); then the notes of
    format_table."""
    lines = [f"{'model':<16}{'tokens':>7}  {'phase':<11}{'compiled':<9}{'ratio':>7}  {'plans/step':>10}  "
             f"{'host ms ptx/stock':>17}  {'in ptxgemm':>10}  {'step ms ptx/stock':>17}"]
    for rep in reports:
        for row in rep["rows"]:
            stock = row["peer"]
            ratio = headline_ratio(row["ratio"].get(stock, {}))
            ms = "/".join(f"{row['tokens_per_iter'] / row['peers'][p]['tokens_per_s_median'] * 1e3:.2f}"
                          for p in (OURS, stock))
            lines.append(f"{row['model']:<16}{row['tokens_per_iter']:>7}  {row['phase']:<11}"
                         f"{'yes' if row['compiled'] else 'no':<9}{_fmt(ratio, '.3f'):>7}  {_plans(row):>10}  "
                         f"{_host_pair(row, stock):>17}  {_fmt(row.get('ptxgemm_host_ms_per_step'), '.3f'):>10}  "
                         f"{ms:>17}")
    lines += format_notes(reports)
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------------------------
# Models (torch and transformers from here on, imported inside)
# ------------------------------------------------------------------------------------------------------------------

def require_torch(device: str):
    """torch, once transformers imports too and `device` is usable, or a ConfigError saying what is missing."""
    try:
        import torch
        import transformers
    except ImportError as e:
        raise ConfigError(f"python -m ptxgemm model runs transformers models: it needs torch and transformers "
                          f"({e})") from None
    if not hasattr(transformers.PreTrainedModel, "set_experts_implementation"):
        raise ConfigError(f"python -m ptxgemm model needs transformers 5 (experts implementations, StaticCache "
                          f"layers), found {transformers.__version__}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("python -m ptxgemm model times the models on the GPU, and torch sees none here "
                          "(torch.cuda.is_available() is False)")
    return torch


def device_slug(torch, device) -> str:
    """'h100', 'h200', ... (suite.gpu_slug of the device's name); 'cpu' for the CPU tests."""
    return gpu_slug(torch.cuda.get_device_name(device)) if device.type == "cuda" else device.type


def environment(torch, device, arch: str, sizes: Sizes, dims: dict) -> dict:
    import transformers

    cuda = device.type == "cuda"
    return {"schema": SCHEMA, "gpu": device_slug(torch, device),
            "device_name": torch.cuda.get_device_name(device) if cuda else device.type,
            "model": model_name(arch, sizes.layers), "arch": arch, "layers": sizes.layers, "dims": dims,
            "sizes": dataclasses.asdict(sizes), "graph": cuda,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "torch": torch.__version__,
            "transformers": transformers.__version__, "ptxgemm": __version__, "cuda": torch.version.cuda,
            "allow_bf16_reduced_precision_reduction": torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
            "method": METHOD, "bound": BOUND}


#: the configs `--tune` times for each dense GEMM of the model (back to back, as a step runs them): the large
#: cooperative tiles with and without a cluster pair, among which the selection picks for these shapes
TUNE_CANDIDATES = ("coop128x256c2", "coop128x256", "coop256x128c2", "coop256x128", "coop256x192", "coop256x192cn2")
TUNE_ROUNDS = 3


def gemm_problems(arch: str, dims: dict, sizes: Sizes, phases=PHASES) -> list[tuple]:
    """(m, n, k, a_major, b_major) of every dense GEMM the ptxgemm peer runs in the prefill and training phases (the
    experts' grouped GEMMs and decode's small-M ones are not tuned): each linear (in, out) over T tokens runs
    forward (T, out, in; x and W^T both K-major), and in training its input gradient (T, in, out; W read MN-major)
    and its weight gradient in W's layout (out, in, T; dY^T and x both MN-major), as ptxgemm.torch.autograd does."""
    h, inter = dims["hidden_size"], dims["intermediate_size"]
    kv = h // dims["num_attention_heads"] * dims["num_key_value_heads"]
    linears = {(h, h), (h, kv), (h, dims["vocab_size"])}
    if arch in DENSE:
        linears |= {(h, inter), (inter, h)}
    problems = set()
    for fin, fout in linears:
        if "prefill" in phases:
            problems.add((sizes.prefill_batch * sizes.prefill_seq, fout, fin, "k", "k"))
        if "train" in phases:
            t = sizes.train_batch * sizes.train_seq
            problems |= {(t, fout, fin, "k", "k"), (t, fin, fout, "k", "mn"), (fout, fin, t, "mn", "mn")}
    return sorted(problems)


def tune_gemms(problems, rounds: int = TUNE_ROUNDS, log=print) -> list[dict]:
    """ptxgemm.tune each problem over TUNE_CANDIDATES, back to back (method "b2b"), the winners stored in the tune
    cache (which the ptxgemm peer's selection then reads); one record per problem."""
    from . import tune as tuning

    out = []
    for m, n, k, a_major, b_major in problems:
        winner, records = tuning.tune(m, n, k, "bfloat16", None, a_major, b_major, candidates=list(TUNE_CANDIDATES),
                                      rounds=rounds, progress=None, method="b2b")
        ms = {r["tag"]: r["ms"] for r in records if r["ms"] is not None}
        out.append({"m": m, "n": n, "k": k, "a_major": a_major, "b_major": b_major, "winner": winner.tag, "ms": ms})
        log(f"tuned {m}x{n}x{k} A {a_major}-major B {b_major}-major: {winner.tag} ({ms[winner.tag]:.3f} ms; "
            + ", ".join(f"{t} {v:.3f}" for t, v in ms.items() if t != winner.tag) + ")")
    return out


def cuda_ordinal(torch, device) -> int:
    """The CUDA ordinal of a torch device ("cuda" alone: torch's current one), for ptxgemm's driver to ask about."""
    return device.index if device.index is not None else torch.cuda.current_device()


def tune_cache_state(device_info) -> dict:
    """Whether the ptxgemm peer's selection read a tune cache, and how many entries it holds for this GPU."""
    from ..select import tune_cache

    if not tune_cache.enabled():
        return {"enabled": False}
    name = str(device_info.name)
    entries = [e for e in tune_cache.load().values() if e.get("gpu") == name]
    return {"enabled": True, "path": str(tune_cache.path()), "entries_for_this_gpu": len(entries),
            "methods": sorted({e.get("method", "burst") for e in entries})}


def build_stock(torch, arch: str, layers: int, dims: dict, device):
    """The seeded stock model: bf16 weights initialised on `device` (transformers' normal(0, 0.02) init), sdpa,
    eval mode; Mixtral with its default experts implementation named ("grouped_mm"). Qwen2's configs tie the LM
    head to the embedding (one parameter), as the released 0.5B and 1.5B models do."""
    import transformers

    qwen2 = (transformers.Qwen2ForCausalLM, transformers.Qwen2Config)
    cls, cfg = {"llama": (transformers.LlamaForCausalLM, transformers.LlamaConfig),
                "mixtral": (transformers.MixtralForCausalLM, transformers.MixtralConfig),
                "qwen2-0.5b": qwen2, "qwen2-1.5b": qwen2}[arch]
    config = cfg(**dims, num_hidden_layers=layers, initializer_range=0.02)
    torch.manual_seed(SEED)
    with torch.device(device):
        model = cls._from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
    if arch == "mixtral":
        model.set_experts_implementation("grouped_mm")
    return model.eval()


def ptxgemm_prepare(model, arch: str) -> dict:
    """Turn a copy of the stock model into the ptxgemm peer (in place); what now runs on ptxgemm."""
    import ptxgemm.torch as pt

    out = {}
    if arch == "mixtral":
        pt.use_in_transformers()
        model.set_experts_implementation("ptxgemm")
        out["experts"] = "ptxgemm (pt.grouped_mm, contiguous form)"
        out["router"] = "F.linear on an nn.Parameter (cuBLAS): not an nn.Linear, so not replaced"
    out["replaced_linears"] = pt.replace_linear(model)
    out["linears"] = {"llama": "q/k/v/o, gate/up/down and lm_head",
                      "mixtral": "q/k/v/o and lm_head"}.get(arch, "q/k/v (their biases fused), o, gate/up/down and "
                                                                  "lm_head (tied to the embedding)")
    return out


STOCK_TEXT = {
    "cublas": "the stock model: every nn.Linear through torch (cuBLAS)",
    "grouped_mm": "the stock model: experts_implementation 'grouped_mm' (torch._grouped_mm), attention, router "
                  "and lm_head through torch (cuBLAS)",
    "eager": "a copy, experts_implementation 'eager' (transformers' python loop over experts, F.linear = cuBLAS)",
}


def make_peers(torch, arch: str, stock, prepare) -> tuple[dict, dict]:
    """{name: model} in PEERS' order (deep copies of `stock`, which is the first) and {name: what it runs}."""
    models, text = {}, {}
    for name in PEERS[arch]:
        if name == PEERS[arch][0]:
            models[name], text[name] = stock, STOCK_TEXT[name]
            continue
        m = copy.deepcopy(stock)
        if name == OURS:
            text[name] = {"what": "a copy of the stock model with ptxgemm's GEMMs", **prepare(m, arch)}
        else:
            m.set_experts_implementation(name)
            text[name] = STOCK_TEXT[name]
        models[name] = m
    return models, text


def tokens(torch, vocab: int, batch: int, seq: int, device, seed: int):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, seq), generator=g).to(device)


def free(torch) -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------------------------------------
# Accuracy
# ------------------------------------------------------------------------------------------------------------------

CHUNK = 1 << 25   # elements per float64 slice: a 128256-wide logits tensor is never copied whole to float64


def sq_err(a, b) -> tuple[float, float]:
    """(||a - b||^2, ||b||^2) in float64, on a's device, slice by slice."""
    fa, fb = a.reshape(-1), b.reshape(-1).to(a.device)
    num = den = 0.0
    for s in range(0, fa.numel(), CHUNK):
        x, y = fa[s:s + CHUNK].double(), fb[s:s + CHUNK].double()
        num += float((x - y).square().sum())
        den += float(y.square().sum())
    return num, den


def rel_err(a, b) -> float:
    """||a - b||_F / ||b||_F in float64 (0 for two zero tensors, inf for a nonzero one against zero)."""
    if tuple(a.shape) != tuple(b.shape):
        raise ConfigError(f"rel_err: shapes {tuple(a.shape)} and {tuple(b.shape)} differ")
    return norm_ratio(*sq_err(a, b))


def norm_ratio(num: float, den: float) -> float:
    """sqrt(num / den) of two squared norms (sq_err's): 0 for 0 / 0, inf for a nonzero one over 0."""
    if den == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return math.sqrt(num / den)


def forward_backward(model, ids) -> dict:
    """One eager forward with labels and its backward: logits, loss and every parameter's gradient, in the
    parameters' order (the gradients taken out of the model, so the next model's pass does not add to them)."""
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids, labels=ids, use_cache=False)
    out.loss.backward()
    grads = [(n, p.grad) for n, p in model.named_parameters()]
    model.zero_grad(set_to_none=True)
    return {"logits": out.logits.detach(), "loss": float(out.loss.detach().double()), "grads": grads}


def compare(got: dict, ref: dict) -> dict:
    """The errors of one pass (forward_backward's) against another. Parameters pair in order (a deep copy keeps
    it, and replace_linear keeps each module's place), checked by shape; a parameter without a gradient in the
    reference is skipped."""
    if len(got["grads"]) != len(ref["grads"]):
        raise ConfigError(f"accuracy: the models have {len(got['grads'])} and {len(ref['grads'])} parameters")
    num_all = den_all = 0.0
    worst, worst_name = 0.0, None
    for (name, g), (ref_name, r) in zip(got["grads"], ref["grads"]):
        if r is None:
            continue
        if g is None or tuple(g.shape) != tuple(r.shape):
            raise ConfigError(f"accuracy: parameter {name} ({None if g is None else tuple(g.shape)}) does not match "
                              f"the reference's {ref_name} {tuple(r.shape)}")
        num, den = sq_err(g, r)
        num_all, den_all = num_all + num, den_all + den
        e = norm_ratio(num, den)
        if e >= worst:
            worst, worst_name = e, ref_name
    return {"logits_rel_err": rel_err(got["logits"], ref["logits"]),
            "loss_rel_err": abs(got["loss"] - ref["loss"]) / abs(ref["loss"]) if ref["loss"] else None,
            "grad_rel_err": norm_ratio(num_all, den_all), "grad_worst_rel_err": worst, "grad_worst_param": worst_name}


def fp32_reference(torch, arch: str, stock, ids) -> dict:
    """forward_backward of a float32 copy of `stock` (TF32 off), its gradients kept on the host so the bf16 peers
    fit beside them; the copy is freed before returning."""
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        ref = copy.deepcopy(stock).float()
        if arch == "mixtral":
            ref.set_experts_implementation("eager")   # float32 cuBLAS GEMMs, whatever torch._grouped_mm takes
        result = forward_backward(ref, ids)
    finally:
        torch.set_float32_matmul_precision(precision)
    result["grads"] = [(n, None if g is None else g.cpu()) for n, g in result["grads"]]
    del ref
    free(torch)
    return result


def accuracy(torch, models: dict, ids, reference: dict | None) -> dict:
    """Every peer against the first (the stock default), and against the float32 `reference` when given."""
    names = list(models)
    stock = forward_backward(models[names[0]], ids)
    peers = {}
    for name in names:
        run = stock if name == names[0] else forward_backward(models[name], ids)
        e = compare(run, stock) if name != names[0] else {}
        e["loss"] = run["loss"]
        if reference is not None:
            r = compare(run, reference)
            e["vs_fp32"] = {k: r[k] for k in ("logits_rel_err", "loss_rel_err", "grad_rel_err", "grad_worst_rel_err")}
        peers[name] = e
        del run
    del stock
    free(torch)
    return {"reference": names[0], "batch": int(ids.shape[0]), "seq": int(ids.shape[1]),
            "fp32_reference": reference is not None, "peers": peers, "bound": BOUND}


# ------------------------------------------------------------------------------------------------------------------
# Timing
# ------------------------------------------------------------------------------------------------------------------

class Clock:
    """Seconds of `iters` back-to-back calls: CUDA events on the current stream (perf_counter on the CPU), and on
    the GPU what the board drew meanwhile (NVML through ptxgemm.bench.power, where nvidia-ml-py is installed):
    `last` holds the window's {sm_mhz, watts, joules} (None without NVML). `last_host` holds the window's host
    seconds: perf_counter around the calls alone, before the wait for the end event (on the CPU, where the calls are
    the work, the same as the window)."""

    def __init__(self, torch, device):
        self.torch, self.cuda = torch, device.type == "cuda"
        self.sampler, self.last, self.last_host = None, None, None
        if self.cuda:
            from ..runtime import driver
            from . import power
            self.sampler = power.Sampler(driver.pci_bus_id(cuda_ordinal(torch, device)))

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def time(self, step, iters: int) -> float:
        self.sync()
        if not self.cuda:
            t = time.perf_counter()
            for _ in range(iters):
                step()
            self.last_host = time.perf_counter() - t
            return self.last_host
        start, end = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)

        def run():
            start.record()
            t = time.perf_counter()
            for _ in range(iters):
                step()
            self.last_host = time.perf_counter() - t   # the issuing alone: the wait below is the device's time
            end.record()
            end.synchronize()
        _, window = self.sampler.measure(run)
        self.last = (None if window.sm_mhz is None else
                     {"sm_mhz": window.sm_mhz, "watts": window.watts, "joules": window.joules,
                      "clock_limits": window.clock_limits})
        return start.elapsed_time(end) / 1e3

    def first_call(self, step) -> float:
        self.sync()
        t = time.perf_counter()
        step()
        self.sync()
        return time.perf_counter() - t


#: the plan_stats() counters a row reports the change of (ptxgemm.plan.cache.plan_stats has more)
PLAN_KEYS = ("plans_made", "plan_hits", "calls", "host_us")


def plan_counters() -> dict | None:
    """ptxgemm's process-wide host-path counters now (ptxgemm.plan_stats(), no torch needed), or None from a build
    without them (the rows then say None rather than a made-up 0)."""
    import ptxgemm

    stats = getattr(ptxgemm, "plan_stats", None)
    return None if stats is None else stats()


def plan_delta(before: dict | None, after: dict | None) -> dict | None:
    """after - before for PLAN_KEYS (None where either reading is missing)."""
    if before is None or after is None:
        return None
    return {k: after[k] - before[k] for k in PLAN_KEYS}


def plan_sum(deltas) -> dict | None:
    """The per-window plan_delta's summed over the repeats (None if any window had no reading)."""
    deltas = list(deltas or ())
    if not deltas or any(d is None for d in deltas):
        return None
    return {k: sum(d[k] for d in deltas) for k in PLAN_KEYS}


def measure(clock: Clock, steps: dict, *, tokens_per_iter: int, iters: int, warmup: int, repeats: int,
            before: dict | None = None, draw: dict | None = None, host: dict | None = None, counters=None,
            plans: dict | None = None) -> dict:
    """{peer: [tokens/s per repeat]}: the peers' order alternating per repeat, `before[peer]()` (if any) ahead of
    each peer's warm-up; `draw` (a dict) receives {peer: [the board's draw per repeat]} where NVML reads it, `host`
    {peer: [host seconds per window]} (clock.last_host), and with `counters` (plan_counters) `plans` receives
    {peer: [plan_delta per window]}: the counters are read after the warm-up and after the window, so only the timed
    calls count."""
    names = list(steps)
    runs = {n: [] for n in names}
    for r in range(repeats):
        for n in (names if r % 2 == 0 else names[::-1]):
            if before:
                before[n]()
            for _ in range(warmup):
                steps[n]()
            start = counters() if counters else None
            seconds = clock.time(steps[n], iters)
            if counters:
                delta = plan_delta(start, counters())
                if plans is not None:
                    plans.setdefault(n, []).append(delta)
            runs[n].append(tokens_per_iter * iters / seconds)
            if host is not None:
                host.setdefault(n, []).append(clock.last_host)
            if draw is not None and clock.last is not None:
                draw.setdefault(n, []).append({**clock.last, "joules_per_token": clock.last["joules"] /
                                               (tokens_per_iter * iters) if clock.last["joules"] else None})
    return runs


def prefill_step(torch, model, ids):
    def step():
        with torch.inference_mode():
            model(input_ids=ids, use_cache=False)
    return step


def train_step(torch, model, ids, optimizer):
    def step():
        out = model(input_ids=ids, labels=ids, use_cache=False)
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


class Decoder:
    """One model's decode step against its own StaticCache holding `prefix_ids`' tokens, reading the shared static
    input `tok` (batch, 1); on cuda captured once in a CUDA graph, replayed by step(). `logits` holds the last
    step's (batch, 1, vocab)."""

    WARM_CALLS = 3

    def __init__(self, torch, model, prefix_ids, tok, cache_len: int, graph: bool):
        from transformers import StaticCache

        self.torch, self.model, self.tok = torch, model, tok
        self.prefix = int(prefix_ids.shape[1])
        self.cache = StaticCache(config=model.config, max_cache_len=cache_len)
        self.graph = None
        with torch.inference_mode():
            model(input_ids=prefix_ids, past_key_values=self.cache, use_cache=True, logits_to_keep=1)
            if graph:
                # torch's rule for capture: warm up on a side stream (the ops' first calls load kernels, plan, and
                # allocate outside the graph's pool)
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for _ in range(self.WARM_CALLS):
                        self._forward()
                torch.cuda.current_stream().wait_stream(side)
                self.rewind()
                self.graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(self.graph):
                    self.logits = self._forward()
                self.rewind()

    def _forward(self):
        return self.model(input_ids=self.tok, past_key_values=self.cache, use_cache=True).logits

    def rewind(self) -> None:
        """Back to `prefix` cached tokens, in place (the graph reads these counters at their addresses)."""
        with self.torch.inference_mode():   # the cache was made under it: its tensors are inference tensors
            for layer in self.cache.layers:
                layer.cumulative_length.fill_(self.prefix)

    def step(self) -> None:
        if self.graph is not None:
            self.graph.replay()
        else:
            with self.torch.inference_mode():
                self.logits = self._forward()


# ------------------------------------------------------------------------------------------------------------------
# One model, every phase
# ------------------------------------------------------------------------------------------------------------------

def run_arch(arch: str, sizes: Sizes, *, modes=MODES, phases=PHASES, prepare=ptxgemm_prepare, dims: dict | None = None,
             device: str = "cuda", reference: bool = True, log=print, tune: bool = False,
             counters=plan_counters) -> dict:
    """Build `arch`'s peers, measure their accuracy and every (mode, phase), free them; the report (header,
    accuracy, rows). `prepare(model, arch) -> dict` makes the ptxgemm peer from a copy of the stock model;
    `reference`: whether to build the float32 copy for the accuracy pass (False: none is made, against the stock
    model only); `counters() -> dict | None` reads the host-path counters around each timed window (plan_counters:
    ptxgemm.plan_stats)."""
    torch = require_torch(device)
    dev = torch.device(device)
    dims = dict(DIMS[arch] if dims is None else dims)
    check_sizes(sizes, dims["max_position_embeddings"])
    header = environment(torch, dev, arch, sizes, dims)
    if tune:   # before anything is planned: the ptxgemm peer's selection then reads the winners
        header["tuned"] = tune_gemms(gemm_problems(arch, dims, sizes, phases), log=log)
    if dev.type == "cuda":
        from ..runtime import driver
        header["tune_cache"] = tune_cache_state(driver.device_info(cuda_ordinal(torch, dev)))
    clock = Clock(torch, dev)
    vocab = dims["vocab_size"]
    log(f"{header['model']}: building on {header['device_name']}")
    stock = build_stock(torch, arch, sizes.layers, dims, dev)

    ids = tokens(torch, vocab, sizes.accuracy_batch, sizes.prefill_seq, dev, SEED + 1)
    ref = fp32_reference(torch, arch, stock, ids) if reference else None
    models, header["variants"] = make_peers(torch, arch, stock, prepare)
    log(f"{header['model']}: accuracy (batch {sizes.accuracy_batch} x {sizes.prefill_seq})")
    acc = accuracy(torch, models, ids, ref)
    del ref, ids
    free(torch)

    rows, compiled = [], {}

    def runnable(name, mode):
        if mode == "eager":
            return models[name]
        if name not in compiled:
            compiled[name] = torch.compile(models[name], mode="default", dynamic=False)
        return compiled[name]

    def timed(phase, mode, make_step, *, batch, seq, iters, before=None, **extra):
        names = peers_for(arch, phase, mode == "compiled")
        steps = {n: make_step(n, runnable(n, mode)) for n in names}
        log(f"{header['model']}: {PHASE_ROW[phase]} {mode}: " + ", ".join(names))
        first = {}
        for n in names:
            if before:
                before[n]()
            first[n] = clock.first_call(steps[n])
        draw, host, plans = {}, {}, {}
        runs = measure(clock, steps, tokens_per_iter=batch * seq, iters=iters, warmup=settle(phase),
                       repeats=sizes.repeats, before=before, draw=draw, host=host, counters=counters, plans=plans)
        rows.append(make_row(header, phase=PHASE_ROW[phase], compiled=mode == "compiled", runs=runs, batch=batch,
                             seq=seq, iters=iters, warmup=settle(phase), accuracy=acc, first_call_s=first,
                             host_s=host, plan_stats=plan_sum(plans.get(OURS)), draw=draw_stats(draw), **extra))

    def settle(phase):
        """Untimed iterations before each window: as many as the window has (decode: `warmup`), so the window
        starts at the clock and power this peer's own work holds the board at, not where the other peer left it."""
        return {"prefill": sizes.prefill_iters, "train": sizes.train_iters}.get(phase, sizes.warmup)

    errors = []

    def guarded(phase, mode, run):
        """Run one (phase, mode); a failure is recorded in the report and the other phases still run."""
        try:
            run()
        except Exception as e:   # whatever a peer's step raised: the report names it, the rest is still measured
            errors.append({"phase": PHASE_ROW[phase], "mode": mode, "error": f"{type(e).__name__}: {e}"})
            log(f"{header['model']}: {PHASE_ROW[phase]} {mode} failed: {type(e).__name__}: {e}")
            for m in models.values():
                m.zero_grad(set_to_none=True)   # a training step that stopped halfway left its gradients

    if "prefill" in phases:
        ids = tokens(torch, vocab, sizes.prefill_batch, sizes.prefill_seq, dev, SEED + 2)
        for mode in modes:
            guarded("prefill", mode, lambda: timed("prefill", mode, lambda n, m: prefill_step(torch, m, ids),
                                                   batch=sizes.prefill_batch, seq=sizes.prefill_seq,
                                                   iters=sizes.prefill_iters))
        del ids
        free(torch)

    def decode():
        prefix = tokens(torch, vocab, sizes.decode_batch, sizes.decode_prefix, dev, SEED + 3)
        tok = tokens(torch, vocab, sizes.decode_batch, 1, dev, SEED + 4)
        names = peers_for(arch, "decode", False)
        decoders = {n: Decoder(torch, models[n], prefix, tok, sizes.decode_cache_len, graph=dev.type == "cuda")
                    for n in names}
        for d in decoders.values():
            d.rewind()
            d.step()
        err = rel_err(decoders[OURS].logits, decoders[names[0]].logits)
        timed("decode", "eager", lambda n, m: decoders[n].step, batch=sizes.decode_batch, seq=1,
              iters=sizes.decode_steps, before={n: d.rewind for n, d in decoders.items()},
              prefix=sizes.decode_prefix, cache_len=sizes.decode_cache_len, decode_logits_rel_err=err)

    if "decode" in phases:   # before training, so that its one-step error compares the seeded weights
        guarded("decode", "eager", decode)
        free(torch)          # the graphs and caches went with decode()'s frame

    if "train" in phases:
        ids = tokens(torch, vocab, sizes.train_batch, sizes.train_seq, dev, SEED + 5)
        optimizers = {n: torch.optim.SGD(m.parameters(), lr=1e-6) for n, m in models.items()}
        for m in models.values():
            m.train()
        for mode in modes:
            guarded("train", mode, lambda: timed("train", mode,
                                                 lambda n, m: train_step(torch, m, ids, optimizers[n]),
                                                 batch=sizes.train_batch, seq=sizes.train_seq,
                                                 iters=sizes.train_iters))
        del optimizers, ids

    report = {**header, "accuracy": acc, "rows": rows, "errors": errors}
    models.clear()
    compiled.clear()
    del stock
    if hasattr(torch, "_dynamo"):
        torch._dynamo.reset()    # compiled graphs and their guards hold on to the models
    free(torch)
    return report
