"""ptxgemm.runtime.recycling's rules without a GPU: libcuda's cuStreamIsCapturing replaced by a fake that says which
streams are capturing. The GPU side (a dropped matmul result's block coming back at the same address, on its own
stream only, never during a capture) is tests/test_memory_gpu.py's."""
from __future__ import annotations

import ctypes

import pytest

from ptxgemm.runtime import libcuda, recycling

S1, S2 = 0x1000, 0x2000


@pytest.fixture
def capture(monkeypatch):
    """The set of stream handles the fake driver reports as capturing; the module's state emptied around the test."""
    capturing = set()

    def is_capturing(handle, status):
        ctypes.cast(status, ctypes.POINTER(ctypes.c_int))[0] = 1 if handle in capturing else 0
        return 0

    real = libcuda.function
    monkeypatch.setattr(libcuda, "function", lambda name: is_capturing if name == "cuStreamIsCapturing" else real(name))
    recycling.release(lambda ptr, handle: None)
    yield capturing
    recycling.release(lambda ptr, handle: None)


def test_a_block_comes_back_on_its_stream_last_in_first_out(capture):
    assert recycling.take(0, S1, 512) == 0
    assert recycling.give(0, S1, 512, 0xA000) and recycling.give(0, S1, 512, 0xB000)
    assert recycling.kept_bytes() == 1024
    assert recycling.take(0, S2, 512) == 0, "a block went to another stream: nothing orders it after the first's work"
    assert recycling.take(0, S1, 256) == 0, "a block of another size was handed out"
    assert recycling.take(0, S1, 512) == 0xB000
    assert recycling.take(0, S1, 512) == 0xA000
    assert recycling.take(0, S1, 512) == 0 and recycling.kept_bytes() == 0


def test_nothing_is_kept_while_the_stream_is_captured(capture):
    capture.add(S1)
    assert recycling.capturing(S1) and not recycling.capturing(S2)
    assert not recycling.give(0, S1, 512, 0xA000), "a block freed during a capture was kept (it is the graph's memory)"
    assert recycling.kept_bytes() == 0


def test_depth_and_bytes_are_bounded(capture, monkeypatch):
    for i in range(recycling.DEPTH):
        assert recycling.give(0, S1, 64, 0x1000 * (i + 1))
    assert not recycling.give(0, S1, 64, 0xF000), "more than DEPTH blocks of one size were kept"
    monkeypatch.setattr(recycling, "MAX_BYTES", recycling.kept_bytes() + 100)
    assert not recycling.give(0, S2, 128, 0xE000), "MAX_BYTES was passed"


def test_release_frees_every_kept_block_on_its_own_stream(capture):
    recycling.give(0, S1, 64, 0xA000)
    recycling.give(0, S2, 64, 0xB000)
    freed = []
    recycling.release(lambda ptr, handle: freed.append((ptr, handle)))
    assert sorted(freed) == [(0xA000, S1), (0xB000, S2)]
    assert recycling.kept_bytes() == 0 and recycling.take(0, S1, 64) == 0


def test_a_kept_block_holds_its_stream_object(capture):
    class Stream:   # a framework's stream object: its handle must not name a new stream while a block waits on it
        pass

    import weakref
    s = Stream()
    ref = weakref.ref(s)
    recycling.give(0, S1, 64, 0xA000, s)
    del s
    assert ref() is not None, "the stream object went while a block kept for its handle waited"
    recycling.take(0, S1, 64)
    assert ref() is None


def test_a_block_stays_on_its_device(capture):
    """Handle 0, the legacy default stream, is every context's: a block kept on device 0's never goes to device 1."""
    assert recycling.give(0, 0, 512, 0xA000)
    assert recycling.take(1, 0, 512) == 0, "a block of device 0 was handed to device 1"
    assert recycling.kept_bytes(1) == 0 and recycling.kept_bytes(0) == 512
    freed = []
    recycling.release(lambda ptr, handle: freed.append(ptr), 1)
    assert freed == [] and recycling.kept_bytes() == 512
    recycling.release(lambda ptr, handle: freed.append(ptr), 0)
    assert freed == [0xA000] and recycling.kept_bytes() == 0
