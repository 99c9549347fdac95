"""Which CUDA device ptxgemm works on: a thread's current device (`device(n)`, exported as ptxgemm.device), the one
device of a call's arrays (`common`), and the thread's current CUDA context, which a plan makes its own around its
work once the process has more than one (`several_contexts`, `in_context`).

Each device has its own primary context (ptxgemm.runtime.driver opens one per ordinal), and a module, a launch, an
allocation ordered on the legacy stream or a synchronize acts in the context current on the calling thread. A call
runs on its arrays' device; what no argument places (run's uploads, an array made without a device) goes to the
thread's current device, DEFAULT_ORDINAL unless `device(n)` says otherwise.

The per-call paths pay for this only where it can matter. While ptxgemm has seen one context in the process, that
context is current wherever ptxgemm works, as it always was, and those paths ask the driver nothing: they test
`several_contexts`, one module attribute. It turns true, for good, once ptxgemm opens a second device's context or
finds another context current on a thread where it works (torch's current device another GPU); from then on a plan
makes its context current around its work and puts the thread's own back after (`in_context`), through libcuda
directly (ptxgemm.runtime.libcuda: two foreign calls, none more when the right one is already current). So torch's
current device, CuPy's or JAX's, is the same after a ptxgemm call as before it. What ptxgemm cannot see coming (torch
made another device current on a thread after ptxgemm last worked there, or a thread that never had a context runs
a cached plan) makes the launch fail, cheaply: the driver refuses a function of another context. `elsewhere` tells
that failure apart, and the plan launches again in its own context, switching from then on.

Nothing here imports the driver module, which imports this one.
"""
from __future__ import annotations

import ctypes
import numbers
import threading

from ..errors import ConfigError, CudaError
from . import libcuda

#: the device of a thread that has not said otherwise
DEFAULT_ORDINAL = 0

_local = threading.local()
_ours: set[int] = set()   # the raw handles of the contexts ptxgemm opened (driver.context)

#: whether the process has shown ptxgemm more than one CUDA context (module docstring): read on every per-call path
several_contexts = False
#: what the driver answers work of one context done while another, or none, is current on the thread
WRONG_CONTEXT = frozenset({"CUDA_ERROR_INVALID_HANDLE", "CUDA_ERROR_INVALID_CONTEXT"})


def current() -> int:
    """This thread's current device: where ptxgemm puts what no argument places, and whose context its driver calls
    use when they name no device."""
    return getattr(_local, "ordinal", DEFAULT_ORDINAL)


def resolve(ordinal, name: str | None = None) -> int:
    """`ordinal`, or the thread's current device for None; checked (check_ordinal) where `name` says which caller's
    argument it is (the library's own ordinals are ints already)."""
    if ordinal is None:
        return current()
    return ordinal if name is None else check_ordinal(ordinal, name)


def check_ordinal(ordinal, name: str = "device") -> int:
    """`ordinal` as an int, or a ConfigError naming `name`: a CUDA device ordinal is an int >= 0 (whether that device
    exists is the driver's answer, when its context is opened)."""
    if isinstance(ordinal, bool) or not isinstance(ordinal, numbers.Integral) or ordinal < 0:
        raise ConfigError(f"{name}: a CUDA device ordinal (an int >= 0, as in cuda:1), got {ordinal!r}")
    return int(ordinal)


class device:
    """`with ptxgemm.device(n):` makes CUDA device `n` this thread's current device for the block: run's and
    grouped_run's uploads, DeviceArray.empty / from_numpy without a device, Stream and Event go there (a call on
    device arrays runs on the arrays' own device, whatever this says). When the block ends, the thread's current
    device is what it was and so is its current CUDA context: ptxgemm makes n's current as it works, then puts back
    the one it found (torch's current device stays torch's). Blocks nest (what each found is kept per thread, so
    one object may be entered again, in any thread). Needs no GPU until something in the block does."""

    def __init__(self, ordinal):
        self.ordinal = check_ordinal(ordinal)

    def __enter__(self):
        _saved().append((current(), thread_context()))
        _local.ordinal = self.ordinal
        return self

    def __exit__(self, *exc):
        ordinal, context = _saved().pop()
        _local.ordinal = ordinal
        restore(context)

    def __repr__(self):
        return f"ptxgemm.device({self.ordinal})"


def _saved() -> list:
    """This thread's (device, context handle) as each open `device` block found them, innermost last."""
    stack = getattr(_local, "saved", None)
    if stack is None:
        stack = _local.saved = []
    return stack


def common(pairs) -> int | None:
    """The one device of a call, from (argument name, device ordinal) pairs in the arguments' order (ordinal None:
    the argument is no array); None when no argument is an array. An array on another device than the first array
    is refused: a ConfigError naming it and both devices, raised before anything is allocated or launched."""
    first = None
    for name, ordinal in pairs:
        if ordinal is None:
            continue
        if first is None:
            first = (name, ordinal)
        elif ordinal != first[1]:
            raise ConfigError(f"{name}: on CUDA device {ordinal}, but {first[0]} is on CUDA device {first[1]}; the "
                              f"arrays of one call must be on one device (copy {name} to device {first[1]} first)")
    return None if first is None else first[1]


# --- the thread's current context -------------------------------------------------------------------------------

def opened(handle: int) -> None:
    """Record a context ptxgemm opened (driver.context); a second one sets several_contexts."""
    global several_contexts
    _ours.add(handle)
    if len(_ours) > 1:
        several_contexts = True


def noticed(handle: int) -> None:
    """A context found current on a thread where ptxgemm works: one not of ptxgemm's (another device's, made current
    by torch, say) sets several_contexts. Before ptxgemm has a context of its own nothing can clash with it yet."""
    global several_contexts
    if handle and _ours and handle not in _ours:
        several_contexts = True


def thread_context() -> int:
    """The raw handle of the context current on this thread; 0 when there is none, or when the driver cannot be
    asked (no libcuda, not initialised)."""
    fn = libcuda.function("cuCtxGetCurrent")
    if fn is None:
        return 0
    value = ctypes.c_void_p()
    return (value.value or 0) if fn(ctypes.byref(value)) == 0 else 0


def make_current(handle: int) -> None:
    """Make the context `handle` current on this thread (cuCtxSetCurrent through libcuda)."""
    fn = libcuda.function("cuCtxSetCurrent")
    what = "making a CUDA context current on this thread (cuCtxSetCurrent)"
    if fn is None:
        raise CudaError("CUDA_ERROR_NOT_FOUND", what, "libcuda.so.1 could not be loaded through ctypes")
    err = fn(handle)
    if err:
        from cuda.bindings import driver as cu   # the error's name; a hard dependency, imported where it is needed
        raise CudaError(cu.CUresult(err).name, what)


def restore(handle: int) -> None:
    """Make `handle`, the context a thread had before ptxgemm worked on it, current again if it is no longer; 0 (the
    thread had none) leaves ptxgemm's current, as a single device always has."""
    if handle:
        noticed(handle)
        if thread_context() != handle:
            make_current(handle)


def elsewhere(context, error) -> bool:
    """Whether `error`, raised by the work of `context` (an opened driver context, or None) while the process had one
    context, came of another context, or none, being current on the thread: the driver's answer is one of
    WRONG_CONTEXT and the thread's context is not `context`. Another device's is noticed (several_contexts: every
    plan switches from then on); the caller then does the work again through in_context."""
    if context is None or getattr(error, "name", None) not in WRONG_CONTEXT:
        return False
    current = thread_context()
    if current == context.handle:
        return False
    noticed(current)
    return True


def in_own_context(context, fn, *args):
    """fn(*args), work of `context` (an opened driver context, or None), on whatever thread calls: inside
    in_context where the process has several contexts; else directly, and once more inside in_context if the
    driver refused it for another context (or none) being current (`elsewhere`). The per-call paths' one rule;
    BoundLaunches.launch_at writes it out inline, to spare its hot path a call."""
    if several_contexts:
        return in_context(context, fn, *args)
    try:
        return fn(*args)
    except CudaError as e:
        if not elsewhere(context, e):
            raise
        return in_context(context, fn, *args)


def in_context(context, fn, *args):
    """fn(*args) with `context` (an opened driver context: .handle, .ordinal) current on this thread and its device
    the thread's current one, both put back after: the per-call paths' route once several_contexts is set. None (a
    plan with nothing to launch has no context): fn(*args) as it is."""
    if context is None:
        return fn(*args)
    previous, ordinal = thread_context(), current()
    _local.ordinal = context.ordinal
    if previous != context.handle:
        make_current(context.handle)
    try:
        return fn(*args)
    finally:
        _local.ordinal = ordinal
        if previous and previous != context.handle:
            make_current(previous)
