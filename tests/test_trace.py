"""ptxgemm.tools.trace on the CPU: the buffer format, validation, the summary's numbers, Chrome JSON and the PNGs."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from ptxgemm.errors import ConfigError
from ptxgemm.kernel import trace_format as F
from ptxgemm.kernel.trace_format import (CONSUMER0, CONSUMER1, EMPTY_ACQUIRED, EPILOGUE_START, MAINLOOP_START,
                                         MMA_ISSUED, MMA_RETIRED, ORDER_ACQUIRED, PRODUCER, ROLE_END, ROLE_START,
                                         STORE_DRAINED, STORE_ISSUED, TMA_ISSUED)
from ptxgemm.tools import trace as T, trace_decode, trace_synthetic
from ptxgemm.tools.trace import Trace

BASE_NS = 5_000  # the hand-built kernel's first event; every expected number below is relative to it
SMID = 7
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_PNG_WIDTH = 2400
CONSUMER_CODES = (ORDER_ACQUIRED, MAINLOOP_START, MMA_ISSUED, MMA_RETIRED, EPILOGUE_START, STORE_ISSUED,
                  STORE_DRAINED)

# One CTA, two tiles per consumer, in ns after BASE_NS. Per consumer tile: ORDER_ACQUIRED, MAINLOOP_START,
# MMA_ISSUED, MMA_RETIRED, EPILOGUE_START, STORE_ISSUED, STORE_DRAINED.
PRODUCER_LOADS = [(10, 20), (30, 40), (300, 310), (500, 510)]  # (EMPTY_ACQUIRED, TMA_ISSUED) for pos 0..3
PRODUCER_END = 1000
CONSUMER_TILES = {
    CONSUMER0: {0: (10, 50, 250, 300, 300, 400, 450), 2: (460, 470, 670, 720, 720, 820, 870)},
    CONSUMER1: {1: (250, 260, 460, 510, 510, 610, 660), 3: (670, 680, 880, 940, 940, 1040, 1090)},
}
CONSUMER_END = {CONSUMER0: 880, CONSUMER1: 1100}


def hand_events(tiles=None) -> dict:
    tiles = tiles or CONSUMER_TILES
    events = {(0, PRODUCER): [(BASE_NS, ROLE_START, 0)]
              + [(BASE_NS + t, code, pos) for pos, load in enumerate(PRODUCER_LOADS)
                 for t, code in zip(load, (EMPTY_ACQUIRED, TMA_ISSUED))]
              + [(BASE_NS + PRODUCER_END, ROLE_END, 0)]}
    for role, by_tile in tiles.items():
        events[0, role] = ([(BASE_NS, ROLE_START, 0)]
                           + [(BASE_NS + t, code, tile) for tile, times in by_tile.items()
                              for t, code in zip(times, CONSUMER_CODES)]
                           + [(BASE_NS + CONSUMER_END[role], ROLE_END, 0)])
    return events


def hand_trace(events=None, capacity=16, **kw) -> Trace:
    return Trace.from_buffer(trace_synthetic.build_buffer(1, capacity, events or hand_events(), smids=[SMID], **kw), 1, capacity)


def writable_header(buf: bytes, ctas: int) -> tuple[bytearray, np.ndarray]:
    raw = bytearray(buf)
    return raw, np.frombuffer(raw, F.HEADER_DTYPE, count=ctas * F.ROLES).reshape(ctas, F.ROLES)


def edited(role: int, record: int, **fields) -> dict:
    """The hand-built events with one field of one record replaced (time_ns / code / value)."""
    events = hand_events()
    row = dict(zip(("time_ns", "code", "value"), events[0, role][record]))
    row.update(fields)
    events[0, role][record] = (row["time_ns"], row["code"], row["value"])
    return events


# ---- format

def test_capacity_and_sizes():
    assert F.capacity_for(3, 10) == 7 * 3 + 2
    assert F.capacity_for(3, 20) == 2 * 20 + 2
    assert F.header_bytes(5) == 5 * 3 * 16 and F.header_bytes(5) % 16 == 0
    assert F.buffer_bytes(5, 23) == 5 * 3 * 16 + 5 * 3 * 23 * 32
    assert F.CODES["mma_issued"] == MMA_ISSUED == 18


def test_build_buffer_layout():
    """Header entry cta*3 + role at 16-byte steps, record j of (cta, role) at (cta*3 + role)*capacity + j, 32 bytes:
    u64 timer, u64 clock, u32 code, u32 value (what ptxgemm/kernel/templates/trace.ptx.j2 stores)."""
    buf = trace_synthetic.build_buffer(2, 4, {(1, CONSUMER1): [(123, ROLE_START, 0), (456, ROLE_END, 7, 99)]}, smids=[9, 11])
    words = np.frombuffer(buf[:F.header_bytes(2)], "<u4").reshape(6, 4)
    assert words[1 * 3 + 2].tolist() == [2, 11, 0, 0]
    record = F.header_bytes(2) + ((1 * 3 + 2) * 4 + 1) * 32
    assert int.from_bytes(buf[record:record + 8], "little") == 456
    assert int.from_bytes(buf[record + 8:record + 16], "little") == 99
    assert int.from_bytes(buf[record + 16:record + 20], "little") == ROLE_END
    assert int.from_bytes(buf[record + 20:record + 24], "little") == 7


# ---- round trip

def test_synthetic_round_trip():
    ctas, per_consumer, k_tiles = 3, 2, 4
    buf, capacity = trace_synthetic.synthetic_buffer(ctas, per_consumer, k_tiles)
    assert len(buf) == F.buffer_bytes(ctas, capacity)
    trace = Trace.from_buffer(buf, ctas, capacity, meta={"shape": (256, 256, 256)})
    assert trace.warnings == []
    assert len(trace.tiles) == ctas * 2 * per_consumer
    assert len(trace.loads) == ctas * 2 * per_consumer * k_tiles
    assert sorted(set(trace.tiles["tile"].tolist())) == list(range(ctas * 2 * per_consumer))
    assert trace.cta_smid.tolist() == [0, 2, 4]
    assert trace.role_first_ns.min() == 0
    summary = trace.summary()
    assert summary["mainloop_overlap_ns"] == 0
    assert summary["tiles_per_consumer"] == {"min": per_consumer, "max": per_consumer}
    assert 0.5 < summary["tensor_core_coverage"]["min"] <= summary["tensor_core_coverage"]["max"] < 1
    assert 0.5 < summary["epilogue_hidden_fraction"] < 1  # the last epilogue of a CTA has nothing to hide behind
    assert summary["end_imbalance"]["spread_ns"] == (ctas - 1) * F.TIMER_TICK_NS
    # the same bytes as a numpy array decode the same
    again = Trace.from_buffer(np.frombuffer(buf, np.uint8), ctas, capacity)
    assert np.array_equal(again.spans, trace.spans)


def test_synthetic_times_are_whole_ticks():
    buf, capacity = trace_synthetic.synthetic_buffer(2, 1, 3)
    trace = Trace.from_buffer(buf, 2, capacity)
    assert np.all(trace.spans["start"] % F.TIMER_TICK_NS == 0) and np.all(trace.spans["end"] % F.TIMER_TICK_NS == 0)


# ---- exact numbers on the hand-built CTA

def test_hand_built_spans():
    trace = hand_trace()
    assert trace.t0_ns == BASE_NS

    def span(kind, tile):
        rows = trace.spans_of(kind)
        (row,) = rows[rows["tile"] == tile]
        return int(row["start"]), int(row["end"]), int(row["mark"])

    assert span("order_wait", 1) == (0, 250, trace_decode.NO_MARK)      # from ROLE_START
    assert span("order_wait", 2) == (450, 460, trace_decode.NO_MARK)    # from the previous tile's STORE_DRAINED
    assert span("mainloop", 3) == (680, 880, trace_decode.NO_MARK)
    assert span("mma_tail", 3) == (880, 940, trace_decode.NO_MARK)
    assert span("epilogue_wait", 3) == (940, 940, trace_decode.NO_MARK)
    assert span("epilogue", 0) == (300, 450, 400)            # STORE_ISSUED kept as the mark
    assert span("empty_wait", 2) == (40, 300, trace_decode.NO_MARK)     # from the previous TMA_ISSUED
    assert span("empty_wait", 0) == (0, 10, trace_decode.NO_MARK)       # from ROLE_START
    assert span("issue", 2) == (300, 310, trace_decode.NO_MARK)
    assert set(trace.spans["smid"].tolist()) == {SMID}


def test_hand_built_summary():
    s = hand_trace().summary()
    assert s["kernel_span_ns"] == 1100
    # busy: [50,300] [260,510] [470,720] [680,940] -> one stretch 50..940 of the SM's 0..1100
    assert s["tensor_core_coverage"] == {"mean": 890 / 1100, "min": 890 / 1100, "max": 890 / 1100}
    # epilogues 4 x 150 ns; the peer's mainloop covers 150 + 150 + 150 + 0 of them
    assert s["epilogue_hidden_fraction"] == pytest.approx(450 / 600)
    assert s["mainloop_overlap_ns"] == 0
    # empty waits 10 + 10 + 260 + 190 over the producer's 1000 ns
    assert s["producer_stall_ns"] == 470
    assert s["producer_stall_fraction"] == pytest.approx(0.47)
    assert s["tile_mainloop_ns"] == {"count": 4, "min": 250, "p10": 250.0, "median": 250.0, "p90": 257.0,
                                     "max": 260, "mean": 252.5}
    assert s["end_imbalance"] == {"spread_ns": 0, "gap_ns": [0], "smid": [SMID]}
    assert s["tiles_per_consumer"] == {"min": 2, "max": 2}
    assert s["dropped"] == 0 and s["ctas"] == 1 and s["sms"] == 1
    text = T.format_summary(s)
    assert "75.0%" in text and "80.9%" in text and "1.100 us" in text


def test_mainloop_overlap_is_reported():
    tiles = {role: dict(by_tile) for role, by_tile in CONSUMER_TILES.items()}
    tiles[CONSUMER1][1] = (190, 200, 460, 510, 510, 610, 660)  # starts its mainloop 50 ns before consumer 0 issued
    s = hand_trace(hand_events(tiles)).summary()
    assert s["mainloop_overlap_ns"] == 50
    assert s["tensor_core_coverage"]["mean"] == 890 / 1100  # the union is unchanged


def test_end_imbalance_and_default_sm():
    buf, capacity = trace_synthetic.synthetic_buffer(5, 1, 2)
    trace = Trace.from_buffer(buf, 5, capacity)
    end = trace.summary()["end_imbalance"]
    assert end["gap_ns"] == [4 * 32, 3 * 32, 2 * 32, 32, 0]  # CTA c starts (and ends) c ticks late
    assert end["spread_ns"] == 4 * 32
    assert trace.default_sm() == 4  # CTA 2 has the median end time and runs on SM 4


# ---- malformed buffers

@pytest.mark.parametrize("events, where, what", [
    (edited(CONSUMER0, 3, code=99), "CTA 0 consumer 0 (role 1) record 3", "unknown code 99"),
    (edited(CONSUMER1, 1, code=EMPTY_ACQUIRED), "consumer 1 (role 2) record 1", "EMPTY_ACQUIRED (8) is not a consumer"),
    (edited(CONSUMER1, 4, time_ns=BASE_NS + 100), "consumer 1 (role 2) record 4", "before the previous record"),
    (edited(CONSUMER0, 3, code=MMA_RETIRED), "consumer 0 (role 1) record 3", "MMA_RETIRED (19) where MMA_ISSUED"),
    (edited(PRODUCER, 2, code=EMPTY_ACQUIRED), "producer (role 0) record 2", "where TMA_ISSUED (9) was expected"),
    (edited(CONSUMER0, 0, code=ORDER_ACQUIRED), "consumer 0 (role 1) record 0", "where ROLE_START (1) was expected"),
    (edited(CONSUMER0, 5, value=9), "consumer 0 (role 1) record 5", "value 9 differs"),
    (edited(PRODUCER, 4, value=7), "producer (role 0) record 4", "value 7 differs"),
], ids=["unknown-code", "wrong-role-code", "time-backwards", "consumer-order", "producer-order", "no-start",
        "tile-changes", "pos-changes"])
def test_malformed_records(events, where, what):
    with pytest.raises(ValueError, match="malformed trace") as info:
        hand_trace(events)
    assert where in str(info.value) and what in str(info.value)


def test_codes_out_of_order_with_swapped_pair():
    events = hand_events()
    rows = events[0, CONSUMER1]
    (t3, c3, v3), (t4, c4, v4) = rows[3], rows[4]
    rows[3], rows[4] = (t3, c4, v3), (t4, c3, v4)  # MMA_RETIRED written before MMA_ISSUED, times still in order
    with pytest.raises(ValueError, match=r"CTA 0 consumer 1 \(role 2\) record 3: MMA_RETIRED"):
        hand_trace(events)


def test_role_end_inside_a_tile():
    events = hand_events()
    events[0, CONSUMER0] = events[0, CONSUMER0][:4] + [(BASE_NS + 900, ROLE_END, 0)]
    with pytest.raises(ValueError, match=r"consumer 0 \(role 1\) record 4: ROLE_END right after MMA_ISSUED"):
        hand_trace(events)


def test_missing_role_end():
    events = hand_events()
    events[0, CONSUMER1] = events[0, CONSUMER1][:-1]
    with pytest.raises(ValueError, match=r"consumer 1 \(role 2\) record 14: STORE_DRAINED \(22\) where ROLE_END"):
        hand_trace(events)


def test_count_over_capacity():
    buf, header = writable_header(trace_synthetic.build_buffer(1, 16, hand_events(), smids=[SMID]), 1)
    header["count"][0, CONSUMER1] = 17
    with pytest.raises(ValueError, match=r"CTA 0 consumer 1 \(role 2\) header: count 17 exceeds the capacity 16"):
        Trace.from_buffer(buf, 1, 16)


@pytest.mark.parametrize("field, value, what", [
    ("smid", 3, "smid 3 differs from the producer's 7"),
    ("dropped", 2, "2 records dropped but count 16 is below the capacity 17"),
    ("count", 1, "count 1: every role writes at least ROLE_START and ROLE_END"),
])
def test_malformed_header(field, value, what):
    buf, header = writable_header(trace_synthetic.build_buffer(1, 17, hand_events(), smids=[SMID]), 1)
    header[field][0, CONSUMER0] = value
    with pytest.raises(ValueError, match=r"CTA 0 consumer 0 \(role 1\) header") as info:
        Trace.from_buffer(buf, 1, 17)
    assert what in str(info.value)


def test_wrong_buffer_size():
    buf = trace_synthetic.build_buffer(1, 16, hand_events(), smids=[SMID])
    with pytest.raises(ValueError, match="buffer has"):
        Trace.from_buffer(buf, 1, 17)
    with pytest.raises(ValueError, match="buffer has"):
        Trace.from_buffer(buf + bytes(16), 1, 16)


def test_dropped_records_warn():
    capacity = 12  # the producer's 10 records fit; each consumer's 16 do not
    events = hand_events()
    for role in (CONSUMER0, CONSUMER1):
        events[0, role] = events[0, role][:capacity]
    trace = hand_trace(events, capacity=capacity, dropped={(0, CONSUMER0): 4, (0, CONSUMER1): 4})
    assert len(trace.warnings) == 2 and "consumer 0: 4 records dropped" in trace.warnings[0]
    assert len(trace.tiles) == 2  # each consumer's second tile is cut off
    s = trace.summary()
    assert s["dropped"] == 8 and s["tiles_per_consumer"] == {"min": 1, "max": 1}


# ---- Chrome trace

def test_chrome_trace(tmp_path):
    meta = {"shape": [256, 256, 256], "config": "test", "gpu": "none"}
    buf, capacity = trace_synthetic.synthetic_buffer(3, 2, 2)
    trace = Trace.from_buffer(buf, 3, capacity, meta=meta)
    path = tmp_path / "trace.json"
    doc = trace.to_chrome(path)
    assert json.loads(path.read_text()) == doc
    assert doc["displayTimeUnit"] == "ns" and doc["otherData"] == meta
    events = doc["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    assert {e["pid"] for e in spans} == {0, 2, 4}
    assert {e["tid"] for e in spans} == {0, 1, 2}
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert processes == {0: "SM 0 (CTA 0)", 2: "SM 2 (CTA 1)", 4: "SM 4 (CTA 2)"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert threads[2, 0] == "producer" and threads[2, 1] == "consumer 0" and threads[2, 2] == "consumer 1"
    mainloops = [e for e in spans if e["name"] == "mainloop"]
    epilogues = [e for e in spans if e["name"] == "epilogue"]
    assert len(mainloops) == len(epilogues) == 3 * 2 * 2
    assert all(e["tid"] in (1, 2) and isinstance(e["ts"], float) and e["dur"] > 0 for e in mainloops)
    assert all("store_issued_us" in e["args"] and "tile" in e["args"] for e in epilogues)
    assert all("pos" in e["args"] for e in spans if e["tid"] == 0)
    assert {e["name"] for e in spans} == set(trace_decode.SPAN_KINDS) - set(trace_decode.SPLIT_KINDS)  # no split-K
    (first,) = [e for e in mainloops if e["pid"] == 0 and e["args"]["tile"] == 0]
    row = trace.spans_of("mainloop")[0]
    assert first["ts"] == row["start"] / 1e3 and first["dur"] == (row["end"] - row["start"]) / 1e3


def test_chrome_trace_two_ctas_on_one_sm():
    buf, capacity = trace_synthetic.synthetic_buffer(2, 1, 2)
    buf, header = writable_header(buf, 2)
    header["smid"] = 5
    doc = Trace.from_buffer(buf, 2, capacity).to_chrome(None)
    events = doc["traceEvents"]
    assert {e["tid"] for e in events if e["ph"] == "X"} == set(range(6))
    assert [e["args"]["name"] for e in events if e["name"] == "process_name"] == ["SM 5 (CTAs 0, 1)"]
    threads = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert threads[4] == "CTA 1 consumer 0"


# ---- PNG

def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_pngs(tmp_path):
    pytest.importorskip("matplotlib")
    buf, capacity = trace_synthetic.synthetic_buffer(6, 3, 4)
    trace = Trace.from_buffer(buf, 6, capacity, meta={"shape": (768, 768, 256), "config": "synthetic", "gpu": "CPU"})
    trace.plot_sm(tmp_path / "sm.png")
    trace.plot_sm(tmp_path / "sm10.png", sm=10)
    trace.plot_overview(tmp_path / "overview.png")
    for name in ("sm.png", "sm10.png", "overview.png"):
        width, height = png_size(tmp_path / name)
        assert 0 < width <= MAX_PNG_WIDTH and 0 < height
    with pytest.raises(ValueError, match="no CTA ran on SM 3"):
        trace.plot_sm(tmp_path / "none.png", sm=3)


def test_compare_png_puts_traces_on_one_time_scale(tmp_path):
    pytest.importorskip("matplotlib")
    fast = Trace.from_buffer(*_synthetic(2, 2, 4), meta={"config": "fast"})
    slow_buf, slow_cap = trace_synthetic.synthetic_buffer(2, 2, 4, k_tile_ns=16 * F.TIMER_TICK_NS)
    slow = Trace.from_buffer(slow_buf, 2, slow_cap, meta={"config": "slow"})
    T.plot_compare([fast, slow], tmp_path / "compare.png", labels=["fast", "slow"])
    width, height = png_size(tmp_path / "compare.png")
    assert 0 < width <= MAX_PNG_WIDTH and height > 0
    with pytest.raises(ValueError, match="2 traces need as many sms and labels"):
        T.plot_compare([fast, slow], tmp_path / "x.png", labels=["only one"])


def _synthetic(ctas, per_consumer, k_tiles):
    buf, capacity = trace_synthetic.synthetic_buffer(ctas, per_consumer, k_tiles)
    return buf, ctas, capacity


def test_anchor_without_timer_is_rejected():
    raw = bytearray(trace_synthetic.build_buffer(1, 16, hand_events(), smids=[SMID]))
    start = F.header_bytes(1) + (0 * F.ROLES + CONSUMER1) * 16 * F.RECORD_BYTES  # consumer 1's ROLE_START
    raw[start:start + 8] = bytes(8)
    with pytest.raises(ValueError, match=r"consumer 1 \(role 2\) record 0: ROLE_START \(1\) without its "
                                         r"%globaltimer stamp"):
        Trace.from_buffer(bytes(raw), 1, 16)


def test_overview_png_for_many_sms(tmp_path):
    pytest.importorskip("matplotlib")
    buf, capacity = trace_synthetic.synthetic_buffer(132, 1, 2)
    Trace.from_buffer(buf, 132, capacity).plot_overview(tmp_path / "overview.png")
    width, height = png_size(tmp_path / "overview.png")
    assert width <= MAX_PNG_WIDTH and height <= T.OVERVIEW_MAX_HEIGHT_IN * T.PNG_DPI


# ---- the cooperative schedule and split-K

TICK = F.TIMER_TICK_NS


def _coop(ctas=3, per_consumer=3, k_tiles=4, **kw) -> Trace:
    buf, capacity = trace_synthetic.synthetic_buffer(ctas, per_consumer, k_tiles, schedule="cooperative", **kw)
    return Trace.from_buffer(buf, ctas, capacity, meta={"config": "cooperative synthetic"})


def test_cooperative_round_trip():
    """Both consumers record every tile of their CTA (consumer 1's half a tick later in the synthetic kernel)."""
    trace = _coop()
    assert trace.schedule == "cooperative" and not trace.split_k and trace.warnings == []
    for cta in range(3):
        halves = [trace.tiles[(trace.tiles["cta"] == cta) & (trace.tiles["role"] == role)]["tile"].tolist()
                  for role in (CONSUMER0, CONSUMER1)]
        assert halves[0] == halves[1] == [cta, cta + 3, cta + 6]
    assert np.all(trace.tiles["store_drained"] == trace_decode.NO_TIME)  # the cooperative epilogue ends at the store
    epilogues = trace.spans_of("epilogue")
    assert len(epilogues) == 18 and np.all(epilogues["mark"] == trace_decode.NO_MARK)
    assert len(trace.loads) == 3 * 3 * 4
    assert F.capacity_for(3, 4, "cooperative") == 2 + 6 * 3  # a consumer's slice: 6 records per tile


def test_cooperative_summary_measures_the_tile():
    """k-tiles of 8 ticks, a 4-tick tail, a 16-tick epilogue, consumer 1 a tick behind: per tile the mainloop runs
    from consumer 0's first wgmma to consumer 1's last retired, the epilogue from consumer 0's EPILOGUE_START to
    consumer 1's STORE_ISSUED, and the tensor cores idle from that retirement to the next tile's first wgmma."""
    s = _coop().summary()
    assert s["schedule"] == "cooperative" and "epilogue_hidden_fraction" not in s
    mainloop = 4 * 8 * TICK + 4 * TICK + TICK
    epilogue = 16 * TICK + TICK
    assert s["tile_mainloop_ns"]["count"] == 9 and s["tile_mainloop_ns"]["median"] == mainloop
    assert s["tile_epilogue_ns"]["count"] == 9 and s["tile_epilogue_ns"]["max"] == epilogue
    # a tile runs from consumer 0's first wgmma to consumer 1's STORE_ISSUED: the two stretches above, which share
    # consumer 1's tick behind
    share = epilogue / (mainloop + epilogue)
    assert s["epilogue_share"] == pytest.approx(share)
    # the next tile: a tick after consumer 0's STORE_ISSUED to ORDER_ACQUIRED, a tick to its first wgmma
    gap = epilogue + TICK
    assert s["tensor_idle_gap_ns"]["count"] == 3 * 2 and s["tensor_idle_gap_ns"]["median"] == gap
    assert s["next_tile_data_wait_ns"] == trace_decode.distribution(np.full(6, TICK))
    assert s["tiles_per_consumer"] == {"min": 3, "max": 3}
    text = T.format_summary(s)
    assert "both consumers on every tile" in text and f"{share:.1%} of the tiles' time" in text
    assert "hidden behind" not in text and "split-K" not in text


@pytest.mark.parametrize("schedule", ["pingpong", "cooperative"])
def test_split_k_summary(schedule):
    """Units alternate partial (stored to the workspace) and final (waits, adds the partials, stores): the
    summary counts both and times the partial store, the wait for the other splits and the fix-up."""
    partial_ns, wait_ns, fixup_ns = 3 * TICK, 7 * TICK, 2 * TICK
    buf, capacity = trace_synthetic.synthetic_buffer(2, 2, 4, schedule=schedule, splits=2,
                                                     split_ns=(partial_ns, wait_ns, fixup_ns))
    trace = Trace.from_buffer(buf, 2, capacity)
    assert trace.split_k and trace.schedule == schedule
    split = trace.summary()["split_k"]
    rows = len(trace.tiles)
    assert split["partial_tiles"] + split["final_tiles"] == rows and split["partial_tiles"] == split["final_tiles"]
    assert split["partial_store_ns"]["median"] == partial_ns and split["partial_store_ns"]["max"] == partial_ns
    assert split["fixup_wait_ns"]["min"] == split["fixup_wait_ns"]["max"] == wait_ns
    assert split["fixup_ns"]["min"] == split["fixup_ns"]["max"] == fixup_ns
    consumer_ns = (trace.role_last_ns[:, 1:] - trace.role_first_ns[:, 1:]).sum()
    assert split["fixup_wait_share"] == pytest.approx(wait_ns * split["final_tiles"] / consumer_ns)
    # the spans: a final's epilogue runs from its fix-up's end; a partial has none
    final = trace.tiles[trace.tiles["splits_arrived"] != trace_decode.NO_TIME]
    epilogues = trace.spans_of("epilogue")
    assert sorted(epilogues["start"].tolist()) == sorted(final["fixup_done"].tolist())
    assert len(trace.spans_of("partial_store")) == split["partial_tiles"]
    assert len(trace.spans_of("fixup_wait")) == len(trace.spans_of("fixup")) == split["final_tiles"]
    text = T.format_summary(trace.summary())
    assert f"split-K: {split['partial_tiles']} partial and {split['final_tiles']} final" in text
    names = {e["name"] for e in trace.to_chrome()["traceEvents"] if e["ph"] == "X"}
    assert set(trace_decode.SPLIT_KINDS) <= names


@pytest.mark.parametrize("schedule, splits, edit, what", [
    ("cooperative", 1, {6: STORE_DRAINED}, "STORE_DRAINED (22) is not a consumer code of the cooperative schedule"),
    ("pingpong", 2, {6: F.FIXUP_DONE}, "FIXUP_DONE (26) where one of STORE_ISSUED (21), PARTIAL_STORED (24), "
                                         "SPLITS_ARRIVED (25) was expected"),
    ("pingpong", 1, {7: F.PARTIAL_STORED}, "PARTIAL_STORED (24) where STORE_DRAINED (22) was expected"),
    ("cooperative", 1, {5: STORE_ISSUED}, "STORE_ISSUED (21) where EPILOGUE_START (20) was expected"),
], ids=["coop-drain", "fixup-before-arrival", "partial-after-store", "coop-store-early"])
def test_malformed_paths(schedule, splits, edit, what):
    buf, capacity = trace_synthetic.synthetic_buffer(1, 1, 2, schedule=schedule, splits=splits)
    raw = bytearray(buf)
    records = np.frombuffer(raw, F.RECORD_DTYPE, offset=F.header_bytes(1)).reshape(1, F.ROLES, capacity)
    for j, code in edit.items():
        records["code"][0, CONSUMER0, j] = code
    with pytest.raises(ValueError, match="malformed trace") as info:
        Trace.from_buffer(bytes(raw), 1, capacity)
    assert "consumer 0 (role 1)" in str(info.value) and what in str(info.value)


def test_split_paths_need_their_schedule():
    """The header names the schedule: a final split's path without the drain reads as cooperative, and is
    malformed as pingpong."""
    buf, capacity = trace_synthetic.synthetic_buffer(1, 2, 2, schedule="cooperative", splits=2)
    assert Trace.from_buffer(buf, 1, capacity).split_k
    raw, header = writable_header(buf, 1)
    header["schedule"] = 0
    with pytest.raises(ValueError, match=r"ROLE_END right after STORE_ISSUED \(21\), inside a cycle that must end "
                                         r"with STORE_DRAINED"):
        Trace.from_buffer(bytes(raw), 1, capacity)


@pytest.mark.parametrize("value, what", [(7, "schedule 7 is none of pingpong, cooperative"),
                                         (None, "schedule 0 differs from CTA 0 producer's 1")])
def test_malformed_schedule_word(value, what):
    buf, capacity = trace_synthetic.synthetic_buffer(1, 1, 2, schedule="cooperative")
    raw, header = writable_header(buf, 1)
    header["schedule"][0, CONSUMER1] = 0 if value is None else value
    with pytest.raises(ValueError, match=r"CTA 0 consumer 1 \(role 2\) header") as info:
        Trace.from_buffer(bytes(raw), 1, capacity)
    assert what in str(info.value)


def test_trace_format_schedules_are_the_configs():
    from ptxgemm.kernel.config import SCHEDULES

    assert F.SCHEDULES == SCHEDULES
    assert F.CONSUMER_CYCLE == F.consumer_paths("pingpong")["tile"]
    assert set(F.CONSUMER_CODES) == {c for s in F.SCHEDULES for p in F.consumer_paths(s).values() for c in p}


def test_cooperative_and_split_k_pngs(tmp_path):
    pytest.importorskip("matplotlib")
    coop = _coop(6, 3, 4, splits=3)
    buf, capacity = trace_synthetic.synthetic_buffer(6, 2, 4)
    pingpong = Trace.from_buffer(buf, 6, capacity, meta={"config": "pingpong synthetic"})
    coop.plot_sm(tmp_path / "sm.png")
    coop.plot_overview(tmp_path / "overview.png")
    T.plot_compare([pingpong, coop], tmp_path / "compare.png", sm_count=2)
    T.plot_compare([pingpong, coop], tmp_path / "zoom.png", sm_count=2, window_ns=40 * TICK)
    for name in ("sm.png", "overview.png", "compare.png", "zoom.png"):
        width, height = png_size(tmp_path / name)
        assert 0 < width <= MAX_PNG_WIDTH and 0 < height
    assert len(coop.typical_sms(2)) == 2 and coop.typical_sms(1) == [coop.default_sm()]
    assert "split-K" in " ".join(T.LEGEND[key][1] for key in coop.legend_keys())
    with pytest.raises(ValueError, match="sm_count must be >= 1"):
        T.plot_compare([pingpong, coop], tmp_path / "x.png", sm_count=0)


# ---- the command's config: --config, tile options, or the selection's pick (CPU: decided before the GPU)

def _trace_configs(*argv):
    from ptxgemm.cli import trace as trace_cli
    from ptxgemm.cli.main import build_parser

    args = build_parser(["trace"]).parse_args(["trace", "--out", "unused", *argv])
    return trace_cli._configs(args)


def test_trace_takes_a_config_tag_with_splits_and_stages():
    """--config names any tile the selection could give, split-K and the deep ring included (issue 47: the
    128x896x16384 weight gradient's pp64x64k3s13, which the tile options cannot name)."""
    config, compared, variants = _trace_configs("--m", "128", "--n", "896", "--k", "16384", "--a-major", "mn",
                                                "--b-major", "mn", "--config", "pp64x64k3s13", "--also", "splits=4")
    assert (config.tag, config.a_major, config.b_major) == ("pp64x64k3s13", "mn", "mn") and not compared
    assert [v.tag for v in variants] == ["pp64x64k4s13"]


def test_trace_without_a_config_traces_the_selections_pick():
    from ptxgemm.select import cost_model

    config, _, _ = _trace_configs("--m", "4096", "--n", "4096", "--k", "4096")
    assert config == cost_model.select_config(4096, 4096, 4096, device=cost_model.DEFAULT_DEVICE)
    config, _, _ = _trace_configs("--m", "16", "--n", "4096", "--k", "4096")   # a swap-AB pick is passed over
    assert not config.transposed_store


@pytest.mark.parametrize("argv, words", [
    (["--config", "pp64x64k3s13", "--block-m", "64"], "--config: the tag names the tile options itself"),
    (["--config", "pp64x64k3s13", "--compare", "pingpong,cooperative"], "so --config cannot be given"),
    (["--config", "pp64x64q"], "config tag: 'pp64x64q' is not"),
])
def test_trace_refuses_a_config_it_cannot_run_naming_the_option(argv, words):
    with pytest.raises(ConfigError, match=re.escape(words)):
        _trace_configs("--m", "128", "--n", "896", "--k", "4096", *argv)
