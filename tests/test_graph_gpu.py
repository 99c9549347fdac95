"""ptxgemm.runtime.graph on the GPU: a GemmPlan's launch captured into a CUDA graph and replayed, checked element by element
against float64 (ptxgemm.accuracy's bound); a replay after new values were written in place computes with the new
values. The driver-call logic and the stream rule are tests/test_graph.py (no GPU)."""
from __future__ import annotations

import numpy as np
import pytest

from ptxgemm import accuracy
from ptxgemm.runtime.graph import Graph

gpu = pytest.mark.gpu
M, N, K = 512, 256, 384


# --- on the GPU -------------------------------------------------------------------------------------------------

def _operands(seed: int):
    rng = np.random.default_rng(seed)
    return (accuracy.random_matrix(rng, M, K, "bfloat16"), accuracy.random_matrix(rng, K, N, "bfloat16"))


def _check(out, a_np, b_np):
    ref, abs_product = accuracy.reference(a_np, b_np)
    verdict = accuracy.check(out, ref, abs_product, K, in_dtype="bfloat16")
    assert verdict.ok, str(verdict)


@gpu
def test_a_captured_plan_replays_and_reads_current_memory():
    from ptxgemm.runtime import driver
    from ptxgemm.runtime.arrays import DeviceArray
    from ptxgemm.gemm import GemmPlan

    a_np, b_np = _operands(0)
    a, b = DeviceArray.from_numpy(a_np), DeviceArray.from_numpy(b_np)
    out = DeviceArray.empty((M, N), a_np.dtype)
    plan = GemmPlan(a, b, out)
    stream = driver.Stream()
    graph = Graph()
    with graph.capture(stream, keep=(plan,)):
        plan.launch(stream)
    assert graph.captured and graph.num_nodes >= 1

    # poison and copy_from_host run on the legacy default stream, which a non-blocking Stream does not wait for:
    # synchronize so the replay cannot overtake them
    out.poison()
    driver.synchronize()
    graph.replay(stream)
    stream.synchronize()
    _check(out.to_numpy(), a_np, b_np)

    # new values in place: a replay computes with what the arrays hold now, not what they held at capture
    a2_np, b2_np = _operands(1)
    a.copy_from_host(a2_np)
    b.copy_from_host(b2_np)
    out.poison()
    driver.synchronize()
    graph.replay(stream)
    stream.synchronize()
    _check(out.to_numpy(), a2_np, b2_np)

    # replaying twice in a row on the same stream is as good as once
    out.poison()
    driver.synchronize()
    graph.replay(stream)
    graph.replay(stream)
    stream.synchronize()
    _check(out.to_numpy(), a2_np, b2_np)
    graph.close()
    assert not graph.captured


@gpu
def test_an_error_inside_capture_ends_it_and_is_re_raised():
    from ptxgemm.runtime import driver
    from ptxgemm.runtime.arrays import DeviceArray
    from ptxgemm.runtime.driver import check, cu
    from ptxgemm.gemm import GemmPlan

    a_np, b_np = _operands(2)
    out = DeviceArray.empty((M, N), a_np.dtype)
    plan = GemmPlan(DeviceArray.from_numpy(a_np), DeviceArray.from_numpy(b_np), out)
    stream = driver.Stream()
    graph = Graph()
    with pytest.raises(RuntimeError, match="^inside the block$"):
        with graph.capture(stream):
            plan.launch(stream)
            raise RuntimeError("inside the block")
    assert not graph.captured
    status = check(cu.cuStreamIsCapturing(stream.handle), "asking whether a stream is capturing")
    assert status == cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE
    # the stream works normally afterwards
    out.poison()
    driver.synchronize()
    plan.launch(stream)
    stream.synchronize()
    _check(out.to_numpy(), a_np, b_np)


@gpu
def test_a_second_capture_replaces_the_first():
    from ptxgemm.runtime import driver
    from ptxgemm.runtime.arrays import DeviceArray
    from ptxgemm.gemm import GemmPlan

    a_np, b_np = _operands(3)
    a, b = DeviceArray.from_numpy(a_np), DeviceArray.from_numpy(b_np)
    first, second = (DeviceArray.empty((M, N), a_np.dtype) for _ in range(2))
    plans = [GemmPlan(a, b, first), GemmPlan(a, b, second)]
    stream = driver.Stream()
    graph = Graph()
    for plan in plans:
        with graph.capture(stream, keep=(plan,)):
            plan.launch(stream)
    first.poison()
    second.poison()
    driver.synchronize()
    graph.replay(stream)
    stream.synchronize()
    assert np.isnan(first.to_numpy().astype(np.float32)).all()  # the first capture is gone
    _check(second.to_numpy(), a_np, b_np)
