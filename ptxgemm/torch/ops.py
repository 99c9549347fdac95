"""The torch ops `ptxgemm::mm`, `ptxgemm::scaled_mm` and `ptxgemm::grouped_mm` (defined with torch.library.Library,
each with a fake (meta) implementation, so `torch.compile(fullgraph=True)` traces them as single nodes and CUDA graphs
capture them), and the two launch ops their autograd kernels call (ptxgemm.torch.autograd; the registration at the
end of this module says why two layers).

Each op allocates its result with torch (on the inputs' device, through torch's caching allocator), plans the call
once per signature (shapes, strides, dtypes, devices and address classes of the tensors, the epilogue's numbers,
the stream: ptxgemm.plan.binding), never per address, and on every call binds the plan to the tensors' addresses and
launches on torch's current stream of their device: one dictionary lookup and a few microseconds of host time. Any
CUDA device, whichever torch's current one is (the tensors of one call on one device, else a ConfigError naming the
tensor): the plan makes its device's context current around the launch where the process has several, and puts
torch's back (ptxgemm.runtime.devices). Every argument rule is ptxgemm's own (ptxgemm.plan), checked when the plan is
made: a ConfigError names the argument.

CUDA graphs: a plan made while the stream is being captured takes its scratch memory from torch's allocator, so
from the graph's private pool, and is not cached (its addresses are the graph's). As torch asks of every library,
run each op once before capturing it: that loads the kernel and builds the tables a capture may not upload."""
from __future__ import annotations

from typing import Optional

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from ..errors import ConfigError, CudaError
from ..gemm import GemmPlan, without_caller_arrays
from ..grouped import GroupedPlan
from ..kernel.config import GemmConfig
from ..plan.cache import COUNTERS, PlanCache, now_ns
from . import sharding, tensors

Tensor = torch.Tensor

#: plans kept per process: a model's step has a few dozen distinct signatures (projections x forward and backward;
#: layers of one width share them), and a miss costs a plan (hundreds of microseconds of host time)
PLAN_CACHE_SIZE = 1024
_cache = PlanCache(PLAN_CACHE_SIZE)
_plans = _cache.plans
_captured = [0]   # plans made during a graph capture (never cached)

#: configs pinned by `use_config` for the next calls (tests and tuning); None: the selection picks
_pinned: dict[str, GemmConfig | None] = {"mm": None, "grouped_mm": None}


def clear_plan_cache() -> None:
    _cache.clear()
    _captured[0] = 0


def plan_stats() -> dict:
    """{"made", "found", "captured"}: the ops' plans made (a cache miss), found (a hit), and made during a graph
    capture, since the last clear_plan_cache (a model's steady state only finds). ptxgemm.plan_stats() has the
    process-wide counters, host time per call included."""
    return {**_cache.stats, "captured": _captured[0]}


def _captured_launch(make, ptrs: tuple, stream: int) -> None:
    """While the stream is captured into a CUDA graph: a plan made fresh and not kept (its scratch memory comes from
    the graph's pool, which the graph keeps for its replays; a cached plan's could be freed under it)."""
    try:
        plan = make()
    except CudaError as e:
        raise CudaError(e.name, e.operation, "while the stream was being captured into a CUDA graph: run the op "
                                             "once before capturing it (it loads the kernel and its tables then)"
                        ) from e
    plan.launch_at(ptrs, stream)
    _captured[0] += 1
    COUNTERS.plans_made += 1
    COUNTERS.captured += 1


def default_out_dtype(a: Tensor, out_dtype: torch.dtype | None) -> torch.dtype:
    """numpy's rule of ptxgemm: the inputs' dtype, bfloat16 for fp8 inputs."""
    if out_dtype is not None:
        return out_dtype
    return torch.bfloat16 if a.dtype in tensors.FP8_DTYPES else a.dtype


def _call(start: int, key: tuple, stream: int, roles: tuple, result, make, also=None) -> Tensor:
    """An op call the fast paths (_dense, _linear, grouped_mm_impl) could not finish: a new signature, or a stream
    being captured. Every tensor of `roles` is checked first and `result()` gives the result's (shape, dtype,
    device); `make(out)` makes the plan, which is kept (under `also` too: _linear's key) unless the stream is
    captured. `roles`: (name, tensor) in the plan's ROLES order, the result's place (index 2) holding None."""
    entry = _plans.get(key)
    if entry is None:   # a new signature: host tensors, and tensors on two devices, refused by name before CUDA is
        tensors.call_device(roles)   # asked anything (the key holds every tensor's device: a hit passed this)
    capturing = tensors.capturing()
    if entry is None or capturing:
        shape, dtype, device = result()
    else:
        _, shape, dtype, device = _cache.found(entry)
    out = torch.empty(shape, dtype=dtype, device=device)
    ptrs = tuple(out.data_ptr() if i == 2 else 0 if t is None else t.data_ptr() for i, (_, t) in enumerate(roles))
    if capturing:
        _captured_launch(lambda: make(out), ptrs, stream)
    else:
        if entry is None:
            entry = _cache.add(key, (without_caller_arrays(make(out)), shape, dtype, device))
        if also is not None:
            _plans[also] = entry
        entry[0].launch_at(ptrs, stream)
    COUNTERS.call(start)
    return out


def _result(entry) -> Tensor:
    """The fast paths' result for a plan found (`entry`: plan, result shape, dtype, device), the hit counted."""
    _cache.found(entry)
    return torch.empty(entry[1], dtype=entry[2], device=entry[3])


def _dense(a, b, *, c=None, beta=0.0, alpha=1.0, bias=None, activation=None, scale_a=None, scale_b=None,
           out_dtype=None, config=None, also=None) -> Tensor:
    """One dense call: its plan found by the signatures of its tensors and its numbers (one dictionary lookup),
    bound and launched; anything else (_call) checked and planned first."""
    start = now_ns()
    sig = tensors.signature
    dev = a.get_device()
    stream = tensors.raw_stream(dev) if dev >= 0 else 0
    # sig(None) is None: spelled out for the optional tensors, which are mostly absent (a call less each)
    key = (sig(a), sig(b), c if c is None else sig(c), bias if bias is None else sig(bias),
           scale_a if scale_a is None else sig(scale_a), scale_b if scale_b is None else sig(scale_b), activation,
           alpha, beta, out_dtype, config, stream)
    entry = _plans.get(key)
    if entry is not None and also is None and not tensors.capturing():
        out = _result(entry)
        entry[0].launch_at((a.data_ptr(), b.data_ptr(), out.data_ptr(), 0 if c is None else c.data_ptr(),
                            0 if bias is None else bias.data_ptr(), 0 if scale_a is None else scale_a.data_ptr(),
                            0 if scale_b is None else scale_b.data_ptr()), stream)
        COUNTERS.call(start)
        return out

    def make(out):
        v = tensors.view
        return GemmPlan(v(a, "a"), v(b, "b"), v(out, "out"), config, c=v(c, "c"), alpha=alpha, beta=beta,
                        bias=v(bias, "bias"), activation=activation, scale_a=v(scale_a, "scale_a"),
                        scale_b=v(scale_b, "scale_b"), stream=stream, scratch=tensors.scratch(a.device))

    roles = (("a", a), ("b", b), ("out", None), ("c", c), ("bias", bias), ("scale_a", scale_a), ("scale_b", scale_b))
    return _call(start, key, stream, roles,
                 lambda: (tensors.mm_shape(a.shape, b.shape), default_out_dtype(a, out_dtype), a.device), make, also)


def _linear(x2: Tensor, w: Tensor, bias: Tensor | None) -> Tensor:
    """x2 @ w^T + bias in eager inference: _dense's plan, keyed by the weight itself, so the per-call path makes no
    transposed view (w^T's address is w's)."""
    start = now_ns()
    sig = tensors.signature
    dev = x2.get_device()
    stream = tensors.raw_stream(dev) if dev >= 0 else 0
    config = _pinned["mm"]
    key = ("linear", sig(x2), sig(w), bias if bias is None else sig(bias), config, stream)
    entry = _plans.get(key)
    if entry is None or tensors.capturing():   # checked, planned or captured as the op's call is
        return _dense(x2, w.t(), bias=bias, config=config, also=None if entry is not None else key)
    out = _result(entry)
    entry[0].launch_at((x2.data_ptr(), w.data_ptr(), out.data_ptr(), 0, 0 if bias is None else bias.data_ptr(), 0,
                        0), stream)
    COUNTERS.call(start)
    return out


# ------------------------------------------------------------------------------------------------------------------
# ptxgemm::mm — bf16/fp16 (and unscaled fp8) matmul with the fused epilogue
# ------------------------------------------------------------------------------------------------------------------

def mm_impl(a: Tensor, b: Tensor, bias: Tensor | None = None, activation: str | None = None, alpha: float = 1.0,
            c: Tensor | None = None, beta: float = 0.0, out_dtype: torch.dtype | None = None,
            scale_a: Tensor | None = None, scale_b: Tensor | None = None) -> Tensor:
    """ptxgemm::mm's implementation, and the dense launch op's (which scaled_mm reaches with its two scales): the
    result allocated, the plan found (or made) and launched."""
    return _dense(a, b, c=c, beta=beta, alpha=alpha, bias=bias, activation=activation, scale_a=scale_a,
                  scale_b=scale_b, out_dtype=out_dtype, config=_pinned["mm"])


def mm(a: Tensor, b: Tensor, bias: Optional[Tensor] = None, activation: Optional[str] = None, alpha: float = 1.0,
       c: Optional[Tensor] = None, beta: float = 0.0, out_dtype: Optional[torch.dtype] = None) -> Tensor:
    """act(alpha * a @ b + beta * c + bias), numpy's matmul semantics (batch axes broadcast), on torch's current
    stream: torch.ops.ptxgemm.mm. bias: (N,) per column or (M, 1) per row; activation: "relu", "gelu" (tanh form),
    "silu"."""
    if eager_ok(a, b, bias, c):   # nothing traces and no gradient is recorded: the implementation directly
        return mm_impl(a, b, bias, activation, alpha, c, beta, out_dtype)
    return _MM(a, b, bias, activation, alpha, c, beta, out_dtype)


_PLAIN = (torch.Tensor, torch.nn.Parameter)
_RULES_PENDING = sharding.PENDING


def on_cuda(t: Tensor) -> bool:
    return t.is_cuda


def eager_path(*args) -> str | None:
    """How an eager call may go around the dispatcher: "plain" (run the implementation directly: nothing to
    record), "grad" (a gradient to record: the drop-in layers' _LinearFunction), or None (take the op, which does
    all of it properly: torch.compile or a dispatch mode is tracing, the first argument is a meta or host tensor --
    the op's fake or its rule --, or an argument is a subclass: fake, functional, ...)."""
    if torch.compiler.is_compiling() or _get_current_dispatch_mode() is not None:
        return None
    if not on_cuda(args[0]):
        return _dispatcher()
    for t in args:
        if t is not None and type(t) not in _PLAIN:
            return _dispatcher()
    return "grad" if tensors.needs_grad(*args) else "plain"


def _dispatcher() -> None:
    """eager_path's None for a subclass or a tensor off the GPU (a DTensor, perhaps, of either kind): DTensor's
    sharding rules registered first if they still wait (ptxgemm.torch.sharding), as the op may be about to meet
    one."""
    if _RULES_PENDING[0]:
        sharding.register_if_loaded()


def eager_ok(*args) -> bool:
    """Whether a call may skip the dispatcher and the op's autograd kernel (ptxgemm.torch.autograd) and run the
    implementation directly (eager_path "plain")."""
    return eager_path(*args) == "plain"


class _LinearFunction(torch.autograd.Function):
    """y = x2 @ w^T + bias with its gradients, for the drop-in layers' eager training: the same ptxgemm GEMMs and
    formulas as ptxgemm::mm's registered backward (ptxgemm.torch.autograd), without the dispatcher's
    Python on the forward and on each gradient GEMM. Traced code (torch.compile, make_fx) takes the op instead."""

    @staticmethod
    def forward(ctx, x2, w, bias):
        ctx.save_for_backward(x2, w, bias)
        return _linear(x2, w, bias)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        x2, w, bias = ctx.saved_tensors
        tensors.check_differentiable(x2, "ptxgemm.torch.Linear")
        need = ctx.needs_input_grad
        grad_x = _dense(grad, w, config=_pinned["mm"]) if need[0] else None           # dX = dY @ W
        grad_w = _dense(grad.t(), x2, config=_pinned["mm"]) if need[1] else None      # dW = dY^T @ X, W's layout
        grad_b = tensors.bias_grad(grad, bias) if bias is not None and need[2] else None
        return grad_x, grad_w, grad_b


def linear_mm(x2: Tensor, w: Tensor, bias: Tensor | None) -> Tensor:
    """x2 @ w^T + bias for the drop-in layers: the implementation directly in plain eager inference, through
    _LinearFunction in plain eager training, else (traced, meta or host tensors) the op (eager_path)."""
    path = eager_path(x2, w, bias)
    if path == "plain":
        return _linear(x2, w, bias)
    if path == "grad":
        return _LinearFunction.apply(x2, w, bias)
    # the op itself: `mm` would ask eager_path again, with the same answer. .mT, not .t(): the same view, but a
    # DTensor weight's .t() under torch.inference_mode raises in torch ("Cannot set version_counter for inference
    # tensor", 2.11 to 2.14), .mT does not
    return _MM(x2, w.mT, bias)


# ------------------------------------------------------------------------------------------------------------------
# ptxgemm::scaled_mm — fp8 with per-tensor, rowwise or blockwise (DeepSeek-V3) scales
# ------------------------------------------------------------------------------------------------------------------

def scaled_mm(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, bias: Optional[Tensor] = None,
              activation: Optional[str] = None, alpha: float = 1.0,
              out_dtype: Optional[torch.dtype] = None) -> Tensor:
    """act(alpha * (scale_a . a) @ (b . scale_b) + bias) for fp8 a (M, K) and b (K, N) (b K-major: the .t() of a
    row-major (N, K) weight): torch.ops.ptxgemm.scaled_mm. The scales' shapes say the scaling
    (ptxgemm.plan.epilogue): one element each (per tensor), (M, 1) and (1, N) (rowwise), or (M, ceil(K/128)) and
    (ceil(K/128), ceil(N/128)) (blockwise: 1x128 per token, 128x128 per weight block, C-contiguous; scale_a may be
    M-major as torch's own blockwise scaled_mm takes it, its columns 16-byte aligned, and is then read by TMA).
    float32 scales; out_dtype defaults to bfloat16. Inference: no gradient."""
    if eager_ok(a, b, scale_a, scale_b, bias):
        return scaled_mm_impl(a, b, scale_a, scale_b, bias, activation, alpha, out_dtype)
    return _SCALED_MM(a, b, scale_a, scale_b, bias, activation, alpha, out_dtype)


def scaled_mm_impl(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, bias: Tensor | None = None,
                   activation: str | None = None, alpha: float = 1.0, out_dtype: torch.dtype | None = None) -> Tensor:
    """ptxgemm::scaled_mm's implementation."""
    _check_fp8(a, b)
    return _dense(a, b, alpha=alpha, bias=bias, activation=activation, scale_a=scale_a, scale_b=scale_b,
                  out_dtype=out_dtype, config=_pinned["mm"])


def _check_fp8(a: Tensor, b: Tensor) -> None:
    if a.dtype not in tensors.FP8_DTYPES or b.dtype not in tensors.FP8_DTYPES:
        raise ConfigError(f"a, b: scaled_mm multiplies fp8 (float8_e4m3fn, float8_e5m2), got {a.dtype} and "
                          f"{b.dtype}; use ptxgemm::mm for bfloat16/float16")


# ------------------------------------------------------------------------------------------------------------------
# ptxgemm::grouped_mm — torch._grouped_mm's three forms in one launch, counts read on the device
# ------------------------------------------------------------------------------------------------------------------

def grouped_form(a: Tensor, b: Tensor, offs: Tensor | None, masked_m: Tensor | None) -> str:
    if (offs is None) == (masked_m is None):
        raise ConfigError("offs, masked_m: give exactly one: offs (int32 cumulative ends; contiguous or k-grouped "
                          "form) or masked_m (int32 rows per group; masked form)")
    if masked_m is not None:
        if a.dim() != 3 or b.dim() != 3:
            raise ConfigError(f"a, b: the masked form takes a (G, M_max, K) and b (G, K, N), got {tuple(a.shape)} "
                              f"and {tuple(b.shape)}")
        return "masked"
    if a.dim() == 2 and b.dim() == 3:
        return "contiguous"
    if a.dim() == 2 and b.dim() == 2:
        return "k"
    raise ConfigError(f"a, b: with offs, a (total_M, K) and b (G, K, N) (contiguous form) or a (M, total_K) and b "
                      f"(total_K, N) (k-grouped form), got {tuple(a.shape)} and {tuple(b.shape)}")


def grouped_shape(a: Tensor, b: Tensor, offs: Tensor | None, masked_m: Tensor | None) -> tuple[int, ...]:
    form = grouped_form(a, b, offs, masked_m)
    if form == "contiguous":
        return (a.shape[0], b.shape[-1])
    if form == "masked":
        return (a.shape[0], a.shape[1], b.shape[-1])
    return (offs.shape[0], a.shape[0], b.shape[-1])


def grouped_mm(a: Tensor, b: Tensor, offs: Optional[Tensor] = None, masked_m: Optional[Tensor] = None,
               scale_a: Optional[Tensor] = None, scale_b: Optional[Tensor] = None, bias: Optional[Tensor] = None,
               activation: Optional[str] = None, alpha: float = 1.0,
               out_dtype: Optional[torch.dtype] = None) -> Tensor:
    """One launch over G groups (ptxgemm.grouped_matmul), torch.ops.ptxgemm.grouped_mm: contiguous a (total_M, K)
    @ b (G, K, N) with offs -> (total_M, N); masked a (G, M_max, K) @ b (G, K, N) with masked_m -> (G, M_max, N);
    k-grouped a (M, total_K) @ b (total_K, N) with offs over K -> (G, M, N). offs / masked_m: int32 CUDA tensors,
    read by the kernel (no host synchronization). Rows outside every group (past offs[-1], past masked_m[g]) are
    not written: their values are whatever torch's allocator left there, as with torch._grouped_mm."""
    if eager_ok(a, b, offs, masked_m, scale_a, scale_b, bias):
        return grouped_mm_impl(a, b, offs, masked_m, scale_a, scale_b, bias, activation, alpha, out_dtype)
    return _GROUPED_MM(a, b, offs, masked_m, scale_a, scale_b, bias, activation, alpha, out_dtype)


def grouped_mm_impl(a: Tensor, b: Tensor, offs: Tensor | None = None, masked_m: Tensor | None = None,
                    scale_a: Tensor | None = None, scale_b: Tensor | None = None, bias: Tensor | None = None,
                    activation: str | None = None, alpha: float = 1.0, out_dtype: torch.dtype | None = None) -> Tensor:
    """ptxgemm::grouped_mm's implementation: one call (_call), keyed as _dense's."""
    start = now_ns()
    sig = tensors.signature
    dev = a.get_device()
    stream = tensors.raw_stream(dev) if dev >= 0 else 0
    config = _pinned["grouped_mm"]
    key = ("grouped", sig(a), sig(b), sig(offs), sig(masked_m), sig(scale_a), sig(scale_b), sig(bias), activation,
           alpha, out_dtype, config, stream)

    def make(out):
        v = tensors.view
        return GroupedPlan(v(a, "a"), v(b, "b"), offs=v(offs, "offs"), masked_m=v(masked_m, "masked_m"),
                           out=v(out, "out"), alpha=alpha, scale_a=v(scale_a, "scale_a"), scale_b=v(scale_b, "scale_b"),
                           bias=v(bias, "bias"), activation=activation, config=config, stream=stream,
                           scratch=tensors.scratch(a.device))

    counts = ("masked_m", masked_m) if offs is None else ("offs", offs)
    roles = (("a", a), ("b", b), ("out", None), counts, ("scale_a", scale_a), ("scale_b", scale_b), ("bias", bias))
    return _call(start, key, stream, roles,
                 lambda: (grouped_shape(a, b, offs, masked_m), default_out_dtype(a, out_dtype), a.device), make)


# ------------------------------------------------------------------------------------------------------------------
# The ops' registration
# ------------------------------------------------------------------------------------------------------------------
# Two layers of ops. The public three (mm, scaled_mm, grouped_mm) are what users and traced models call; their
# autograd kernels (ptxgemm.torch.autograd) record a gradient or, when there is none to record, go straight to one
# of the two launch ops (dense_launch, grouped_launch), which carry no autograd kernel of their own. So what
# AOTAutograd traces -- a compiled model's forward and backward graphs -- holds only launch ops, and each call in
# a compiled step crosses the dispatcher once in C++ into its implementation. Why not torch.library.custom_op: its
# per-call Python (an autograd kernel in Python on every call, gradient or not, and a wrapper around the
# implementation) cost 12.5 us per call against 6.0 us for an op registered here (torch 2.14, CPU, a no-op body;
# docs/perf-notes.md, issue 46), the op's own implementation being the rest.

LIBRARY = torch.library.Library("ptxgemm", "DEF")

_DENSE_ARGS = ("Tensor a, Tensor b, Tensor? bias=None, str? activation=None, float alpha=1.0, Tensor? c=None, "
               "float beta=0.0, ScalarType? out_dtype=None")
_GROUPED_ARGS = ("Tensor a, Tensor b, Tensor? offs=None, Tensor? masked_m=None, Tensor? scale_a=None, "
                 "Tensor? scale_b=None, Tensor? bias=None, str? activation=None, float alpha=1.0, "
                 "ScalarType? out_dtype=None")
SCHEMAS = {
    "mm": f"({_DENSE_ARGS}) -> Tensor",
    "scaled_mm": "(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? bias=None, str? activation=None, "
                 "float alpha=1.0, ScalarType? out_dtype=None) -> Tensor",
    "grouped_mm": f"({_GROUPED_ARGS}) -> Tensor",
    # the launch ops: mm's arguments and the two scales (scaled_mm is the same launch), grouped_mm's as they are
    "dense_launch": f"({_DENSE_ARGS}, Tensor? scale_a=None, Tensor? scale_b=None) -> Tensor",
    "grouped_launch": f"({_GROUPED_ARGS}) -> Tensor",
}


def _mm_fake(a, b, bias=None, activation=None, alpha=1.0, c=None, beta=0.0, out_dtype=None, scale_a=None,
             scale_b=None):
    return a.new_empty(tensors.mm_shape(a.shape, b.shape), dtype=default_out_dtype(a, out_dtype))


def _scaled_mm_fake(a, b, scale_a, scale_b, bias=None, activation=None, alpha=1.0, out_dtype=None):
    _check_fp8(a, b)
    return a.new_empty(tensors.mm_shape(a.shape, b.shape), dtype=default_out_dtype(a, out_dtype))


def _grouped_mm_fake(a, b, offs=None, masked_m=None, scale_a=None, scale_b=None, bias=None, activation=None,
                     alpha=1.0, out_dtype=None):
    return a.new_empty(grouped_shape(a, b, offs, masked_m), dtype=default_out_dtype(a, out_dtype))


# every op's implementation for every backend (CompositeExplicitAutograd): a host tensor reaches its rule (the
# ConfigError naming it) rather than the dispatcher's "no kernel for CPU"; the fakes give shapes to tracing
for _name, _impl, _fake in (("mm", mm_impl, _mm_fake), ("scaled_mm", scaled_mm_impl, _scaled_mm_fake),
                            ("grouped_mm", grouped_mm_impl, _grouped_mm_fake),
                            ("dense_launch", mm_impl, _mm_fake),
                            ("grouped_launch", grouped_mm_impl, _grouped_mm_fake)):
    LIBRARY.define(_name + SCHEMAS[_name], tags=(torch.Tag.pt2_compliant_tag,))   # as custom_op tags its ops
    LIBRARY.impl(_name, _impl, "CompositeExplicitAutograd")
    torch.library.register_fake(f"ptxgemm::{_name}", _fake, lib=LIBRARY)

_MM = torch.ops.ptxgemm.mm.default
_SCALED_MM = torch.ops.ptxgemm.scaled_mm.default
_GROUPED_MM = torch.ops.ptxgemm.grouped_mm.default
DENSE_LAUNCH = torch.ops.ptxgemm.dense_launch.default
GROUPED_LAUNCH = torch.ops.ptxgemm.grouped_launch.default


class use_config:
    """Pin the config of the next `op` calls ("mm" or "grouped_mm"; scaled_mm shares mm's), for tests and tuning:
    `with use_config("mm", cfg): ...`. Plans are keyed by config, so pinned and selected plans never mix."""

    def __init__(self, op: str, config: GemmConfig | None):
        if op not in _pinned:
            raise ConfigError(f"op: one of {tuple(_pinned)}, got {op!r}")
        self.op, self.config = op, config

    def __enter__(self):
        self.previous, _pinned[self.op] = _pinned[self.op], self.config
        return self

    def __exit__(self, *exc):
        _pinned[self.op] = self.previous
