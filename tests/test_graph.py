"""ptxgemm.runtime.graph without a GPU: the stream rule, the empty graph's errors, and the order of driver calls (against a
recording stand-in for cuda.bindings.driver): begin, end and instantiate on success; end and re-raise on an error
inside the block; every handle destroyed exactly once. tests/test_graph_gpu.py runs the real thing."""
from __future__ import annotations

import types

import pytest

from ptxgemm.errors import ConfigError, CudaError
from ptxgemm.runtime import driver
from ptxgemm.runtime.graph import Graph

STREAM, GRAPH, EXEC = 5, 11, 22   # the stand-in's handles
FAILED = 999                      # a CUresult that is not success


@pytest.mark.parametrize("stream", [None, 0, 1])
def test_capture_on_the_legacy_default_stream_is_refused(stream):
    with pytest.raises(ConfigError, match=r"^stream: graph capture needs a created stream .*legacy default stream"):
        Graph().capture(stream)


def test_capture_is_refused_before_the_with_block():
    """The rule is checked when capture() is called, so the block never runs."""
    graph = Graph()
    with pytest.raises(ConfigError, match="^stream: "):
        with graph.capture(None):
            raise AssertionError("the block must not run")
    assert not graph.captured


def test_an_empty_graph_cannot_be_replayed_and_closes_twice():
    graph = Graph()
    with pytest.raises(ConfigError, match=r"^replay: the graph holds nothing"):
        graph.replay()
    with pytest.raises(ConfigError, match=r"^num_nodes: "):
        graph.num_nodes
    graph.close()
    graph.close()
    assert repr(graph) == "Graph(empty)"


# --- the driver calls, against a stand-in -------------------------------------------------------------------------

class FakeDriver:
    """Records every call; `fail` names the calls that return FAILED."""

    CU_STREAM_LEGACY = 1
    CUresult = types.SimpleNamespace(CUDA_SUCCESS=0)
    CUstreamCaptureMode = types.SimpleNamespace(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL="THREAD_LOCAL")

    def __init__(self, fail=()):
        self.calls, self.fail = [], set(fail)
        self.graphs = GRAPH

    def _ret(self, name, *values):
        return (FAILED,) if name in self.fail else (0, *values)

    @staticmethod
    def CUstream(h):
        return int(h)

    def cuStreamBeginCapture(self, h, mode):
        self.calls.append(("begin", h, mode))
        return self._ret("begin")

    def cuStreamEndCapture(self, h):
        self.calls.append(("end", h))
        return self._ret("end", GRAPH)

    def cuGraphInstantiate(self, g, flags):
        self.calls.append(("instantiate", g, flags))
        return self._ret("instantiate", EXEC)

    def cuGraphLaunch(self, e, h):
        self.calls.append(("launch", e, h))
        return self._ret("launch")

    def cuGraphGetNodes(self, g, n):
        self.calls.append(("nodes", g, n))
        return self._ret("nodes", [], 1)

    def cuGraphExecDestroy(self, e):
        self.calls.append(("destroy exec", e))
        return self._ret("destroy exec")

    def cuGraphDestroy(self, g):
        self.calls.append(("destroy graph", g))
        return self._ret("destroy graph")


class FakeStream:
    handle = STREAM


@pytest.fixture
def fake(monkeypatch):
    """Installs a FakeDriver. Every Graph made meanwhile forgets its fake handles at teardown, so that no __del__
    (say, of a graph a failed test's traceback keeps alive) ever hands them to the real driver."""
    graphs = []
    real_init = Graph.__init__

    def init(self):
        real_init(self)
        graphs.append(self)

    def install(fail=()):
        cu = FakeDriver(fail)
        monkeypatch.setattr(driver, "cu", cu)
        monkeypatch.setattr(driver, "context", lambda ordinal=None: None)
        # the legacy stream object is cached once made: an earlier test's real CUstream(0) must not leak in here
        monkeypatch.setattr(driver, "_LEGACY_STREAM", None)
        monkeypatch.setattr(Graph, "__init__", init)
        return cu

    yield install
    for graph in graphs:
        graph._exec = graph._graph = None


def test_capture_instantiate_replay_close(fake):
    cu = fake()
    graph = Graph()
    keep = object()
    with graph.capture(FakeStream(), keep=(keep,)) as g:
        assert g is graph and cu.calls == [("begin", STREAM, "THREAD_LOCAL")]
    assert cu.calls[1:] == [("end", STREAM), ("instantiate", GRAPH, 0)]
    assert graph.captured and graph._keep == (keep,)
    graph.replay(FakeStream())
    graph.replay()
    assert cu.calls[3:] == [("launch", EXEC, STREAM), ("launch", EXEC, 0)]
    assert graph.num_nodes == 1
    graph.close()
    graph.close()
    assert cu.calls[-2:] == [("destroy exec", EXEC), ("destroy graph", GRAPH)]
    assert sum(c[0].startswith("destroy") for c in cu.calls) == 2
    assert not graph.captured and graph._keep == ()


def test_a_second_capture_destroys_the_first(fake):
    cu = fake()
    graph = Graph()
    for _ in range(2):
        with graph.capture(FakeStream()):
            pass
    names = [c[0] for c in cu.calls]
    assert names == ["begin", "end", "instantiate", "begin", "end", "instantiate", "destroy exec", "destroy graph"]
    assert graph.captured


def test_an_error_in_the_block_ends_the_capture_and_is_re_raised(fake):
    cu = fake()
    graph = Graph()
    with pytest.raises(KeyError, match="from the block"):
        with graph.capture(FakeStream()):
            raise KeyError("from the block")
    assert cu.calls == [("begin", STREAM, "THREAD_LOCAL"), ("end", STREAM), ("destroy graph", GRAPH)]
    assert not graph.captured
    with graph.capture(FakeStream()):  # the graph is usable again
        pass
    assert graph.captured


def test_the_blocks_error_wins_over_a_failing_end(fake):
    cu = fake(fail={"end"})
    with pytest.raises(ZeroDivisionError):
        with Graph().capture(FakeStream()):
            1 / 0
    assert [c[0] for c in cu.calls] == ["begin", "end"]


def test_an_invalidated_capture_raises_cuda_error_saying_what(fake):
    fake(fail={"end"})
    graph = Graph()
    with pytest.raises(CudaError, match=r"ending graph capture \(cuStreamEndCapture"):
        with graph.capture(FakeStream()):
            pass
    assert not graph.captured


def test_a_failed_instantiation_destroys_the_graph(fake):
    cu = fake(fail={"instantiate"})
    graph = Graph()
    with pytest.raises(CudaError, match=r"instantiating the captured graph \(cuGraphInstantiate\)"):
        with graph.capture(FakeStream()):
            pass
    assert cu.calls[-1] == ("destroy graph", GRAPH) and not graph.captured


def test_a_failed_begin_raises_and_leaves_nothing(fake):
    cu = fake(fail={"begin"})
    graph = Graph()
    with pytest.raises(CudaError, match=r"beginning graph capture"):
        with graph.capture(FakeStream()):
            raise AssertionError("the block must not run")
    assert [c[0] for c in cu.calls] == ["begin"] and not graph._capturing


def test_nested_capture_on_one_graph_is_refused(fake):
    fake()
    graph = Graph()
    with graph.capture(FakeStream()):
        with pytest.raises(ConfigError, match=r"^capture: this graph is already capturing"):
            graph.capture(FakeStream())


def test_the_flags_taking_variant_is_preferred_when_the_bindings_have_it(fake):
    cu = fake()
    cu.cuGraphInstantiateWithFlags = lambda g, flags: (cu.calls.append(("with flags", g, flags)), (0, EXEC))[1]
    graph = Graph()
    with graph.capture(FakeStream()):
        pass
    assert ("with flags", GRAPH, 0) in cu.calls and not any(c[0] == "instantiate" for c in cu.calls)
