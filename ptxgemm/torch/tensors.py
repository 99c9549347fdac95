"""torch tensors as ptxgemm sees them: a CUDA tensor as a DeviceArray view on its device (no DLPack capsule, no copy),
torch's current stream of that device as the launch stream, and torch's caching allocator as the source of a plan's
scratch memory.

Why not DLPack here: the protocol costs a capsule and a deleter per argument per call, and the custom ops already
hold the tensors for as long as the launch is enqueued on torch's stream (torch's allocator is stream-ordered, so a
tensor freed after the op returns is reused only by later work on that stream, as for torch's own kernels). A view
therefore keeps no reference to its tensor, and a cached plan none to the caller's memory.

Whether a call records a gradient (needs_grad), the gradients' dtype rule (check_differentiable) and the bias's
gradient (bias_grad) are here as well: the ops' autograd kernels (ptxgemm.torch.autograd) and the drop-in layers'
eager paths (ptxgemm.torch.ops) both use them, and autograd imports ops, so neither can hold them for the other."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

from ..errors import ConfigError
from ..plan.binding import address_class
from ..runtime.arrays import DeviceArray
from ..runtime.devices import common

#: torch dtype -> the numpy dtype ptxgemm's planning reads (ml_dtypes for bfloat16 and fp8)
NUMPY_DTYPES = {
    torch.bfloat16: np.dtype(ml_dtypes.bfloat16),
    torch.float16: np.dtype(np.float16),
    torch.float32: np.dtype(np.float32),
    torch.float8_e4m3fn: np.dtype(ml_dtypes.float8_e4m3fn),
    torch.float8_e5m2: np.dtype(ml_dtypes.float8_e5m2),
    torch.int32: np.dtype(np.int32),
}

#: the 16-bit dtypes whose products have gradients here (fp8 is inference: its scales are not differentiated)
GRAD_DTYPES = (torch.bfloat16, torch.float16)
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


def needs_grad(*tensors) -> bool:
    """Whether a call records a gradient: grad mode on and a tensor argument (None: absent) that requires one."""
    if not torch.is_grad_enabled():
        return False
    for t in tensors:   # a loop, not any() over a generator: this is on every eager call's path
        if t is not None and t.requires_grad:
            return True
    return False


def check_differentiable(a: torch.Tensor, what: str) -> None:
    """ConfigError unless `a`'s dtype has gradients here (GRAD_DTYPES): the ops' gradients (ptxgemm.torch.autograd)
    and the drop-in layers' eager training (ptxgemm.torch.ops) both ask."""
    if a.dtype not in GRAD_DTYPES:
        raise ConfigError(f"a: {what} takes gradients for bfloat16 and float16 inputs; {a.dtype} is inference only "
                          f"(fp8 scales are not differentiated): run it under torch.no_grad()")


def bias_grad(g32: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """The bias's gradient: the output's gradient summed over what the bias spans, in the bias's shape and dtype (one
    value per column, (N,) or (1, N); or one per row, (M, 1))."""
    n = g32.shape[-1]
    if tuple(bias.shape) in ((n,), (1, n)):          # one value per column (a (1, N) bias with N = M = 1 too)
        # reshapes only where they change something: under DTensor each is one more dispatch per gradient
        g2 = g32 if g32.dim() == 2 else g32.reshape(-1, n)
        s = g2.sum(0) if bias.dim() == 1 else g2.sum(0, keepdim=True)
        return s.to(bias.dtype)
    m = g32.shape[-2]                                # (M, 1): one value per row
    return g32.reshape(-1, m, n).sum((0, 2)).reshape(bias.shape).to(bias.dtype)


def check_cuda(t: torch.Tensor, name: str) -> None:
    """ConfigError unless `t` is a CUDA tensor, on any device (ptxgemm runs on each in the primary context torch
    uses there; the tensors of one call on one device: `devices`)."""
    if not isinstance(t, torch.Tensor):
        raise ConfigError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cuda":
        raise ConfigError(f"{name}: a {t.device.type} tensor; ptxgemm's ops run on CUDA tensors (move it with "
                          f".cuda(), or use ptxgemm.run for host numpy arrays)")


def call_device(named) -> int:
    """The one CUDA device of a call's tensors, `named` (name, tensor or None) in the arguments' order, each checked
    to be a CUDA tensor first (check_cuda); a tensor on another device than the first is refused by name, both
    devices named (runtime.devices.common), before anything is allocated."""
    for name, t in named:
        if t is not None:
            check_cuda(t, name)
    return common((name, t.get_device()) for name, t in named if t is not None)


def numpy_dtype(dtype: torch.dtype, name: str) -> np.dtype:
    try:
        return NUMPY_DTYPES[dtype]
    except KeyError:
        raise ConfigError(f"{name}: dtype {dtype} is not one ptxgemm reads ("
                          f"{', '.join(str(d) for d in NUMPY_DTYPES)})") from None


def view(t: torch.Tensor | None, name: str) -> DeviceArray | None:
    """The DeviceArray over `t`'s memory: its address, shape, byte strides and dtype (None stays None)."""
    if t is None:
        return None
    check_cuda(t, name)
    dt = numpy_dtype(t.dtype, name)
    item = dt.itemsize
    return DeviceArray(t.data_ptr(), tuple(t.shape), dt, tuple(s * item for s in t.stride()), owner=False,
                       device=t.get_device())


def mm_shape(a: tuple, b: tuple) -> tuple[int, ...]:
    """numpy's `a @ b` shape for operands of shapes `a` and `b` of 2 or more dimensions (leading axes broadcast): the
    ops' implementations and fakes, and their DTensor rules (ptxgemm.torch.sharding), on tensors' or plain shapes."""
    a, b = tuple(a), tuple(b)
    if len(a) < 2 or len(b) < 2:
        raise ConfigError(f"a, b: the ptxgemm ops take matrices or batches of them (2 or more dimensions), got "
                          f"{a} and {b}; reshape vectors to (1, K) or (K, 1)")
    if a[-1] != b[-2]:
        raise ConfigError(f"a, b: a's last axis ({a[-1]}) must equal b's second-to-last ({b[-2]}), got {a} @ {b}")
    try:
        batch = torch.broadcast_shapes(a[:-2], b[:-2])
    except RuntimeError:
        raise ConfigError(f"a, b: batch axes {a[:-2]} and {b[:-2]} do not broadcast") from None
    return (*batch, a[-2], b[-1])


def signature(t: torch.Tensor | None) -> tuple | None:
    """What a cached plan depends on of one tensor: shape, strides, dtype, device and address class (its address
    mod 16, or -1 for null: ptxgemm.plan.binding), never the address, so a step's new activations find the plan."""
    if t is None:
        return None
    return (t.shape, t.stride(), t.dtype, t.get_device(), address_class(t.data_ptr()))


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def raw_stream(index: int) -> int:
    """torch's current stream on CUDA device `index` as a raw CUstream handle, without making a torch.cuda.Stream
    (what torch.compile's generated code calls for its own launches)."""
    if _raw_stream is not None:
        return _raw_stream(index)
    return torch.cuda.current_stream(index).cuda_stream


_is_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None)


def capturing() -> bool:
    """Whether torch's current stream is being captured into a CUDA graph (torch.cuda.is_current_stream_capturing
    without its Python wrapper: this is on every call's path)."""
    if _is_capturing is not None:
        return _is_capturing()
    return torch.cuda.is_current_stream_capturing()


def scratch(device: torch.device):
    """A plan's scratch allocator backed by torch's caching allocator (uint8 tensors on `device`, for the current
    stream). A plan made during a CUDA graph capture so takes memory from the graph's private pool, which the graph
    keeps for its replays; ptxgemm's own stream-ordered pool would record an allocation the graph never frees."""
    def allocate(nbytes: int) -> DeviceArray:
        t = torch.empty((max(int(nbytes), 1),), dtype=torch.uint8, device=device)
        arr = DeviceArray(t.data_ptr(), (int(nbytes),), np.uint8, owner=False)
        arr._keepalive = t      # the plan owns its scratch: the tensor lives as long as the plan
        return arr
    return allocate
