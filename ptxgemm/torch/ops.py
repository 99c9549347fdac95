"""The torch custom ops `ptxgemm::mm`, `ptxgemm::scaled_mm` and `ptxgemm::grouped_mm`, each with a fake (meta)
implementation, so `torch.compile(fullgraph=True)` traces them as single nodes and CUDA graphs capture them.

Each op allocates its result with torch (on the inputs' device, through torch's caching allocator), plans the call
once per distinct (addresses, shapes, strides, dtypes, epilogue, stream) and launches on torch's current stream.
Every argument rule is ptxgemm's own (ptxgemm.plan), checked before the launch: a ConfigError names the argument.

CUDA graphs: a plan made while the stream is being captured takes its scratch memory from torch's allocator, so
from the graph's private pool, and is not cached (its addresses are the graph's). As torch asks of every library,
run each op once before capturing it: that loads the kernel and builds the tables a capture may not upload."""
from __future__ import annotations

from typing import Optional

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from ..errors import ConfigError, CudaError
from ..gemm import GemmPlan, PlanCache, without_caller_arrays
from ..grouped import GroupedPlan
from ..kernel.config import GemmConfig
from . import tensors

Tensor = torch.Tensor

#: plans kept per process: a model's step runs a few hundred distinct GEMMs (layers x projections x forward and
#: backward), and a miss costs a plan (tens of microseconds of host time)
PLAN_CACHE_SIZE = 1024
_cache = PlanCache(PLAN_CACHE_SIZE)
_captured = [0]   # plans made during a graph capture (never cached)

#: configs pinned by `use_config` for the next calls (tests and tuning); None: the selection picks
_pinned: dict[str, GemmConfig | None] = {"mm": None, "grouped_mm": None}


def clear_plan_cache() -> None:
    _cache.clear()
    _captured[0] = 0


def plan_stats() -> dict:
    """{"made", "found", "captured"}: plans made (a cache miss), found (a hit), and made during a graph capture,
    since the last clear_plan_cache (a model's steady state only finds)."""
    return {**_cache.stats, "captured": _captured[0]}


def _launch(key: tuple, make, stream: int) -> None:
    """Launch the plan under `key` on `stream`, making it first if needed. While the stream is captured the plan
    is made fresh and not kept (see the module's docstring)."""
    if tensors.capturing():
        try:
            plan = make()
        except CudaError as e:
            raise CudaError(e.name, e.operation, "while the stream was being captured into a CUDA graph: run the op "
                                                 "once before capturing it (it loads the kernel and its tables then)"
                            ) from e
        plan.launch(stream)
        _captured[0] += 1
        return
    _cache.get(key, make).launch(stream)


def default_out_dtype(a: Tensor, out_dtype: torch.dtype | None) -> torch.dtype:
    """numpy's rule of ptxgemm: the inputs' dtype, bfloat16 for fp8 inputs."""
    if out_dtype is not None:
        return out_dtype
    return torch.bfloat16 if a.dtype in tensors.FP8_DTYPES else a.dtype


def mm_shape(a: Tensor, b: Tensor) -> tuple[int, ...]:
    """numpy's `a @ b` shape for operands of 2 or more dimensions (leading axes broadcast)."""
    if a.dim() < 2 or b.dim() < 2:
        raise ConfigError(f"a, b: the ptxgemm ops take matrices or batches of them (2 or more dimensions), got "
                          f"{tuple(a.shape)} and {tuple(b.shape)}; reshape vectors to (1, K) or (K, 1)")
    if a.shape[-1] != b.shape[-2]:
        raise ConfigError(f"a, b: a's last axis ({a.shape[-1]}) must equal b's second-to-last ({b.shape[-2]}), got "
                          f"{tuple(a.shape)} @ {tuple(b.shape)}")
    try:
        batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except RuntimeError:
        raise ConfigError(f"a, b: batch axes {tuple(a.shape[:-2])} and {tuple(b.shape[:-2])} do not broadcast") \
            from None
    return (*batch, a.shape[-2], b.shape[-1])


def _dense(a, b, out, *, c=None, beta=0.0, alpha=1.0, bias=None, activation=None, scale_a=None, scale_b=None,
           config=None) -> None:
    stream = tensors.current_stream(a.device)
    key = ("mm", tensors.key(a), tensors.key(b), tensors.key(out), tensors.key(c), beta, alpha, tensors.key(bias),
           activation, tensors.key(scale_a), tensors.key(scale_b), config, stream)

    def make():
        return without_caller_arrays(GemmPlan(tensors.view(a, "a"), tensors.view(b, "b"), tensors.view(out, "out"), config,
                                       c=tensors.view(c, "c"), alpha=alpha, beta=beta,
                                       bias=tensors.view(bias, "bias"), activation=activation,
                                       scale_a=tensors.view(scale_a, "scale_a"),
                                       scale_b=tensors.view(scale_b, "scale_b"), stream=stream,
                                       scratch=tensors.scratch(a.device)))
    _launch(key, make, stream)


# ------------------------------------------------------------------------------------------------------------------
# ptxgemm::mm — bf16/fp16 (and unscaled fp8) matmul with the fused epilogue
# ------------------------------------------------------------------------------------------------------------------

def mm_impl(a: Tensor, b: Tensor, bias: Tensor | None = None, activation: str | None = None, alpha: float = 1.0,
            c: Tensor | None = None, beta: float = 0.0, out_dtype: torch.dtype | None = None) -> Tensor:
    """ptxgemm::mm's implementation: the result allocated, the plan found (or made) and launched."""
    for t, name in ((a, "a"), (b, "b")):
        tensors.check_cuda(t, name)
    out = torch.empty(mm_shape(a, b), dtype=default_out_dtype(a, out_dtype), device=a.device)
    _dense(a, b, out, c=c, beta=beta, alpha=alpha, bias=bias, activation=activation, config=_pinned["mm"])
    return out


@torch.library.custom_op("ptxgemm::mm", mutates_args=())
def mm(a: Tensor, b: Tensor, bias: Optional[Tensor] = None, activation: Optional[str] = None, alpha: float = 1.0,
       c: Optional[Tensor] = None, beta: float = 0.0, out_dtype: Optional[torch.dtype] = None) -> Tensor:
    """act(alpha * a @ b + beta * c + bias), numpy's matmul semantics (batch axes broadcast), on torch's current
    stream. bias: (N,) per column or (M, 1) per row; activation: "relu", "gelu" (tanh form), "silu"."""
    return mm_impl(a, b, bias, activation, alpha, c, beta, out_dtype)


_PLAIN = (torch.Tensor, torch.nn.Parameter)


def eager_ok(*args) -> bool:
    """Whether a call may skip the custom-op dispatcher (about 15-20 us of Python per call) and run the
    implementation directly: plain tensors (no fake, functional or other subclass: nothing is tracing), no mode
    intercepting dispatch, not under torch.compile, and no gradient to record. Anything else takes the op, which
    does all of that properly."""
    if torch.compiler.is_compiling() or _get_current_dispatch_mode() is not None:
        return False
    grad = torch.is_grad_enabled()
    for t in args:
        if t is None:
            continue
        if type(t) not in _PLAIN or (grad and t.requires_grad):
            return False
    return True


def linear_mm(x2: Tensor, w: Tensor, bias: Tensor | None) -> Tensor:
    """x2 @ w^T + bias for the drop-in layers: the implementation directly where eager_ok, else the op."""
    if eager_ok(x2, w, bias):
        return mm_impl(x2, w.t(), bias)
    return mm(x2, w.t(), bias=bias)


@mm.register_fake
def _mm_fake(a, b, bias=None, activation=None, alpha=1.0, c=None, beta=0.0, out_dtype=None):
    return a.new_empty(mm_shape(a, b), dtype=default_out_dtype(a, out_dtype))


# ------------------------------------------------------------------------------------------------------------------
# ptxgemm::scaled_mm — fp8 with per-tensor, rowwise or blockwise (DeepSeek-V3) scales
# ------------------------------------------------------------------------------------------------------------------

@torch.library.custom_op("ptxgemm::scaled_mm", mutates_args=())
def scaled_mm(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, bias: Optional[Tensor] = None,
              activation: Optional[str] = None, alpha: float = 1.0,
              out_dtype: Optional[torch.dtype] = None) -> Tensor:
    """act(alpha * (scale_a . a) @ (b . scale_b) + bias) for fp8 a (M, K) and b (K, N) (b K-major: the .t() of a
    row-major (N, K) weight). The scales' shapes say the scaling (ptxgemm.plan.epilogue): one element each (per
    tensor), (M, 1) and (1, N) (rowwise), or (M, ceil(K/128)) and (ceil(K/128), ceil(N/128)) (blockwise: 1x128 per
    token, 128x128 per weight block, C-contiguous). float32 scales; out_dtype defaults to bfloat16."""
    return scaled_mm_impl(a, b, scale_a, scale_b, bias, activation, alpha, out_dtype)


def scaled_mm_impl(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, bias: Tensor | None = None,
                   activation: str | None = None, alpha: float = 1.0, out_dtype: torch.dtype | None = None) -> Tensor:
    """ptxgemm::scaled_mm's implementation."""
    for t, name in ((a, "a"), (b, "b"), (scale_a, "scale_a"), (scale_b, "scale_b")):
        tensors.check_cuda(t, name)
    _check_fp8(a, b)
    out = torch.empty(mm_shape(a, b), dtype=default_out_dtype(a, out_dtype), device=a.device)
    _dense(a, b, out, alpha=alpha, bias=bias, activation=activation, scale_a=scale_a, scale_b=scale_b,
           config=_pinned["mm"])
    return out


def _check_fp8(a: Tensor, b: Tensor) -> None:
    if a.dtype not in tensors.FP8_DTYPES or b.dtype not in tensors.FP8_DTYPES:
        raise ConfigError(f"a, b: scaled_mm multiplies fp8 (float8_e4m3fn, float8_e5m2), got {a.dtype} and "
                          f"{b.dtype}; use ptxgemm::mm for bfloat16/float16")


@scaled_mm.register_fake
def _scaled_mm_fake(a, b, scale_a, scale_b, bias=None, activation=None, alpha=1.0, out_dtype=None):
    _check_fp8(a, b)
    return a.new_empty(mm_shape(a, b), dtype=default_out_dtype(a, out_dtype))


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


@torch.library.custom_op("ptxgemm::grouped_mm", mutates_args=())
def grouped_mm(a: Tensor, b: Tensor, offs: Optional[Tensor] = None, masked_m: Optional[Tensor] = None,
               scale_a: Optional[Tensor] = None, scale_b: Optional[Tensor] = None, bias: Optional[Tensor] = None,
               activation: Optional[str] = None, alpha: float = 1.0,
               out_dtype: Optional[torch.dtype] = None) -> Tensor:
    """One launch over G groups (ptxgemm.grouped_matmul): contiguous a (total_M, K) @ b (G, K, N) with offs ->
    (total_M, N); masked a (G, M_max, K) @ b (G, K, N) with masked_m -> (G, M_max, N); k-grouped a (M, total_K) @
    b (total_K, N) with offs over K -> (G, M, N). offs / masked_m: int32 CUDA tensors, read by the kernel (no host
    synchronization). Rows outside every group (past offs[-1], past masked_m[g]) are not written: their values
    are whatever torch's allocator left there, as with torch._grouped_mm."""
    return grouped_mm_impl(a, b, offs, masked_m, scale_a, scale_b, bias, activation, alpha, out_dtype)


def grouped_mm_impl(a: Tensor, b: Tensor, offs: Tensor | None = None, masked_m: Tensor | None = None,
                    scale_a: Tensor | None = None, scale_b: Tensor | None = None, bias: Tensor | None = None,
                    activation: str | None = None, alpha: float = 1.0, out_dtype: torch.dtype | None = None) -> Tensor:
    """ptxgemm::grouped_mm's implementation."""
    for t, name in ((a, "a"), (b, "b"), (offs, "offs"), (masked_m, "masked_m")):
        if t is not None:
            tensors.check_cuda(t, name)
    out = torch.empty(grouped_shape(a, b, offs, masked_m), dtype=default_out_dtype(a, out_dtype), device=a.device)
    stream = tensors.current_stream(a.device)
    config = _pinned["grouped_mm"]
    key = ("grouped", tensors.key(a), tensors.key(b), tensors.key(out), tensors.key(offs), tensors.key(masked_m),
           tensors.key(scale_a), tensors.key(scale_b), tensors.key(bias), activation, alpha, config, stream)

    def make():
        return without_caller_arrays(GroupedPlan(tensors.view(a, "a"), tensors.view(b, "b"),
                                          offs=tensors.view(offs, "offs"), masked_m=tensors.view(masked_m, "masked_m"),
                                          out=tensors.view(out, "out"), alpha=alpha,
                                          scale_a=tensors.view(scale_a, "scale_a"),
                                          scale_b=tensors.view(scale_b, "scale_b"), bias=tensors.view(bias, "bias"),
                                          activation=activation, config=config, stream=stream,
                                          scratch=tensors.scratch(a.device)))
    _launch(key, make, stream)
    return out


@grouped_mm.register_fake
def _grouped_mm_fake(a, b, offs=None, masked_m=None, scale_a=None, scale_b=None, bias=None, activation=None,
                     alpha=1.0, out_dtype=None):
    return a.new_empty(grouped_shape(a, b, offs, masked_m), dtype=default_out_dtype(a, out_dtype))


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
