"""CUDA graphs through the driver API: capture the work enqueued on a stream once, replay it with one call.

Why: a replay is a single `cuGraphLaunch`, whatever was captured, so a fixed sequence of launches (a GEMM plan, or
several) costs the host one driver call per replay instead of one per launch. Kernel parameters are copied into the
graph when it is captured; device memory is read when it runs, so new values written in place into the captured
arrays are what a replay computes with.

    stream = driver.Stream()
    plan = GemmPlan(a, b, out)          # build everything first: nothing that allocates may run during capture
    graph = Graph()
    with graph.capture(stream, keep=(plan,)):
        plan.launch(stream)
    graph.replay(stream)                # as often as wanted
    graph.close()                       # or let it be collected

Capture uses CU_STREAM_CAPTURE_MODE_THREAD_LOCAL: the capturing thread may not make calls that are unsafe during
capture (a synchronize, an allocation), while other threads are left alone. A call that breaks the capture makes it
fail; the capture is ended and the original error re-raised. Every driver call goes through `driver.check`.
"""
from __future__ import annotations

import contextlib

from ..errors import ConfigError
from . import devices, driver


def _capture_handle(stream):
    """The raw handle of a stream that can be captured; ConfigError for None / 0 / the legacy default stream, which
    cuStreamBeginCapture refuses (it is implicitly synchronous with every other blocking stream)."""
    raw = None if stream is None else driver.stream_handle(stream)
    legacy = int(driver.cu.CU_STREAM_LEGACY) if driver.cu is not None else 1
    if raw is None or raw in (0, legacy):
        raise ConfigError(f"stream: graph capture needs a created stream (e.g. ptxgemm.runtime.driver.Stream()), got "
                          f"{stream!r}; None, 0 and the legacy default stream cannot be captured")
    return driver.cu_stream(stream)


class Graph:
    """One captured CUDA graph and its executable instance. Empty until `capture` succeeds; `replay` launches it.

    A graph refers to device memory by address: whatever it captured (a GemmPlan, its arrays) must outlive it.
    Pass those objects as `capture(..., keep=...)` and the graph holds them for as long as it holds the capture.
    """

    def __init__(self):
        self._graph = None        # CUgraph
        self._exec = None         # CUgraphExec
        self._context = None      # the context it was captured and instantiated in (its stream's device's)
        self._keep: tuple = ()
        self._capturing = False

    @property
    def captured(self) -> bool:
        return self._exec is not None

    def capture(self, stream, *, keep=()):
        """A context manager: the work enqueued on `stream` inside the `with` block is captured, then instantiated
        when the block ends (replacing any earlier capture). `stream` must not be the legacy default stream (None or
        0) and is of the device the graph runs on (a ptxgemm Stream knows its own; any other: the thread's current
        device). `keep`: objects the captured work uses, held by the graph."""
        handle = _capture_handle(stream)  # checked now, before any `with`, and before the GPU is touched
        if self._capturing:
            raise ConfigError("capture: this graph is already capturing; end that `with` block first")
        ordinal = stream.device if isinstance(stream, driver.Stream) else devices.current()
        return self._capture(handle, tuple(keep), ordinal)

    @contextlib.contextmanager
    def _capture(self, handle, keep, ordinal):

        context = driver.context(ordinal)
        driver.check(driver.cu.cuStreamBeginCapture(handle, driver.cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
              "beginning graph capture on a stream (cuStreamBeginCapture)")
        self._capturing = True
        try:
            try:
                yield self
            except BaseException:
                # The stream must leave capture mode whatever happened, or it stays unusable; the block's own error
                # is the one worth reporting, so a failure to end the capture is not allowed to replace it.
                try:
                    partial = driver.check(driver.cu.cuStreamEndCapture(handle), "ending an abandoned graph capture")
                    if partial is not None and int(partial):
                        driver.cu.cuGraphDestroy(partial)
                except Exception:  # noqa: BLE001 - see above
                    pass
                raise
            graph = driver.check(driver.cu.cuStreamEndCapture(handle),
                          "ending graph capture (cuStreamEndCapture; it fails when a call inside the block was not "
                          "capturable, e.g. a synchronize or an allocation on the capturing thread)")
        finally:
            self._capturing = False
        try:
            exec_ = driver.check(_instantiate(graph), "instantiating the captured graph (cuGraphInstantiate)")
        except BaseException:
            driver.cu.cuGraphDestroy(graph)  # unchecked: the instantiation error is the one to report
            raise
        self.close()  # the previous capture, if any
        self._graph, self._exec, self._keep, self._context = graph, exec_, keep, context

    @property
    def num_nodes(self) -> int:
        """Nodes in the captured graph (one per captured kernel launch, memset, copy, ...)."""

        self._require_captured("num_nodes")
        _nodes, count = driver.check(driver.cu.cuGraphGetNodes(self._graph, 0), "counting a graph's nodes (cuGraphGetNodes)")
        return int(count)

    def replay(self, stream=None):
        """Launch the captured work on `stream` (None: the legacy default stream of the graph's device; asynchronous,
        like a launch). Kept to one driver call: this is the cheap path the graph exists for (in the graph's own
        context, by the per-call paths' one rule: devices.in_own_context)."""

        if self._exec is None:
            self._require_captured("replay")
        devices.in_own_context(self._context, self._launch, stream)

    def _launch(self, stream):
        driver.check(driver.cu.cuGraphLaunch(self._exec, driver.cu_stream(stream)),
                     "replaying a CUDA graph (cuGraphLaunch)")

    def _require_captured(self, what: str):
        if self._exec is None:
            raise ConfigError(f"{what}: the graph holds nothing; capture work first (with graph.capture(stream): ...)")

    def close(self):
        """Destroy the executable graph and the graph (idempotent). Work already replayed is unaffected: the driver
        defers the release until it finishes."""

        exec_, graph = self._exec, self._graph
        self._exec = self._graph = None
        self._keep = ()
        if exec_ is not None:
            driver.check(driver.cu.cuGraphExecDestroy(exec_), "destroying an executable graph (cuGraphExecDestroy)")
        if graph is not None:
            driver.check(driver.cu.cuGraphDestroy(graph), "destroying a graph (cuGraphDestroy)")

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown or a dead context: nothing useful to do
            pass

    def __repr__(self):
        return f"Graph({'captured' if self.captured else 'empty'})"


def _instantiate(graph):
    """cuGraphInstantiate with flags 0: cuda.bindings 12 and 13 name the flags-taking entry point
    cuGraphInstantiate(graph, flags); some 12.x releases also (or instead) expose cuGraphInstantiateWithFlags."""
    fn = getattr(driver.cu, "cuGraphInstantiateWithFlags", None) or driver.cu.cuGraphInstantiate
    return fn(graph, 0)
