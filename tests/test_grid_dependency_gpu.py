"""Programmatic dependent launch on the GPU (kernel/templates/grid_dependency.ptx.j2): a GEMM launched right behind
the GEMM whose output it reads, on one stream, both programmatic. The writer runs on two CTAs for a long K with
every other SM idle and lets its dependents be scheduled at once (launch_dependents), so the reader's CTAs start on
the idle SMs while the writer still runs; only griddepcontrol.wait holds them until the writer's output is there.
With the wait, the reader is right on every launch; the mutant without it reads the poisoned output."""
from __future__ import annotations

import numpy as np
import pytest

import ptxgemm
from ptxgemm.gemm import GemmKernel
from ptxgemm.runtime import driver
from ptxgemm.runtime.arrays import DeviceArray
from gemm_reference import check_result

gpu = pytest.mark.gpu
BF16 = np.dtype("bfloat16")
WRITER_TILE = "coop128x256"   # 256 x 256: two tiles, two CTAs
READER_TILE = "pp64x128"      # 256 x 256: eight tiles
LAUNCHES = 8
M = N = 256
K = 32768                      # the writer's k-loop: a few hundred microseconds on two SMs


def _require_gpu():
    reason = driver.no_device_reason()
    if reason is not None:
        pytest.skip(f"no CUDA device: {reason}")


@pytest.fixture(scope="module")
def chain():
    """(stream, x, y, b2 host, writer plan, reader config, make_reader(kernel))."""
    _require_gpu()
    rng = np.random.default_rng(50)
    a = rng.standard_normal((M, K)).astype(BF16)
    b1 = (rng.standard_normal((K, N)) / np.sqrt(K)).astype(BF16)
    b2 = rng.standard_normal((N, N)).astype(BF16)
    stream = driver.Stream()
    da, db1, db2 = (DeviceArray.from_numpy(v, stream=stream) for v in (a, b1, b2))
    x = DeviceArray.empty((M, N), BF16, stream=stream)
    y = DeviceArray.empty((M, N), BF16, stream=stream)
    writer = ptxgemm.GemmPlan(da, db1, x, ptxgemm.GemmConfig.from_tag(WRITER_TILE), stream=stream)
    reader = ptxgemm.GemmPlan(x, db2, y, ptxgemm.GemmConfig.from_tag(READER_TILE), stream=stream)

    def make_reader(kernel=None):
        return reader if kernel is None else ptxgemm.GemmPlan(x, db2, y, reader.config, kernel=kernel, stream=stream)
    yield stream, x, y, b2, writer, reader.config, make_reader, (da, db1, db2)
    stream.synchronize()


def _run(chain, reader) -> list[bool]:
    """Each launch: x and y poisoned, the writer, the reader right behind it; whether y is right for the x the
    writer left."""
    stream, x, y, b2, writer, _, _, _ = chain
    ok = []
    for _ in range(LAUNCHES):
        x.poison(stream)
        y.poison(stream)
        writer.launch(stream)
        reader.launch(stream)
        stream.synchronize()
        x_host = x.to_numpy()
        assert not np.isnan(x_host.astype(np.float32)).any()      # the writer itself finished
        ok.append(check_result(y.to_numpy(), x_host, b2).ok)
    return ok


@gpu
def test_the_gemms_are_launched_programmatically_and_the_reader_waits(chain):
    _, _, _, _, writer, _, make_reader, _ = chain
    reader = make_reader()
    assert writer.grid == 2 and writer._launch.programmatic and reader._launch.programmatic
    assert all(_run(chain, reader))


@gpu
def test_without_the_wait_the_reader_reads_the_writers_output_too_early(chain):
    """The mutant of griddepcontrol.wait (ptxgemm.tools.mutant_catalog's SyncKind), in the release build."""
    _, _, _, _, _, config, make_reader, _ = chain
    lines = ptxgemm.render_gemm(config).split("\n")
    waits = [i for i, line in enumerate(lines) if line.strip() == "griddepcontrol.wait;"]
    assert len(waits) == 1
    lines[waits[0]] = "    // MUTANT: deleted: griddepcontrol.wait"
    ok = _run(chain, make_reader(GemmKernel(config, ptx="\n".join(lines))))
    assert not all(ok), f"the mutant survived {LAUNCHES} launches"
