"""Trace buffers built by hand, in the kernel's format: a pingpong timeline with chosen tile, load and epilogue
times, so that the decoder, the summary and the drawings can be checked without a GPU."""
from __future__ import annotations

import numpy as np

from ..kernel.trace_format import (CONSUMER0, CONSUMER_CYCLE, CONSUMER_ROLES, HEADER_DTYPE, PRODUCER, PRODUCER_CYCLE,
                                   RECORD_DTYPE, ROLES, ROLE_END, ROLE_NAMES, ROLE_START, TIMER_TICK_NS, capacity_for)


def build_buffer(ctas: int, capacity: int, events: dict, smids=None, dropped: dict | None = None) -> bytes:
    """The bytes a kernel would write: events {(cta, role): [(time_ns, code, value) or (time_ns, code, value,
    clock), ...]} (roles not named write nothing; clock defaults to time_ns, a 1 GHz SM; as in the kernel, only
    ROLE_START and ROLE_END keep their time_ns), smids per CTA (default: the CTA index), dropped {(cta, role): n}."""
    header = np.zeros((ctas, ROLES), HEADER_DTYPE)
    records = np.zeros((ctas, ROLES, capacity), RECORD_DTYPE)
    header["smid"] = np.asarray(range(ctas) if smids is None else smids)[:, None]
    for (cta, role), rows in events.items():
        rows = np.array([(r[0] if r[1] in (ROLE_START, ROLE_END) else 0, r[3] if len(r) > 3 else r[0], r[1], r[2], 0)
                         for r in rows], RECORD_DTYPE)
        if len(rows) > capacity:
            raise ValueError(f"CTA {cta} {ROLE_NAMES[role]}: {len(rows)} events do not fit capacity {capacity}")
        header["count"][cta, role] = len(rows)
        records[cta, role, :len(rows)] = rows
    for (cta, role), n in (dropped or {}).items():
        header["dropped"][cta, role] = n
    return header.tobytes() + records.tobytes()


def _pingpong_tiles(tiles: int, start: int, mainloop_ns: int, tail_ns: int, epilogue_ns: int) -> list[tuple]:
    """Times of CONSUMER_CYCLE for a CTA's tiles in order (tile i on consumer i % 2) in an ideal pingpong: a
    consumer takes the order barrier when the peer has issued its wgmmas, its epilogue once the peer's store
    has drained the shared staging buffer."""
    tick = TIMER_TICK_NS
    handed_over, staging_free = start, start
    previous = [start] * len(CONSUMER_ROLES)  # each consumer's last event
    rows = []
    for i in range(tiles):
        consumer = i % len(CONSUMER_ROLES)
        order = max(previous[consumer], handed_over) + tick
        mainloop = order + tick
        issued = mainloop + mainloop_ns
        retired = issued + tail_ns
        epilogue = max(retired, staging_free) + tick
        store = epilogue + epilogue_ns
        drained = store + 2 * tick
        rows.append((order, mainloop, issued, retired, epilogue, store, drained))
        handed_over, staging_free, previous[consumer] = issued, drained, drained
    return rows


def _producer_loads(tile_rows: list[tuple], k_tiles: int, stages: int, k_tile_ns: int, start: int) -> list[tuple]:
    """Times of PRODUCER_CYCLE per k-tile: a ring stage frees when the consumer's wgmma on it is done, and the
    producer refills it at once (so it runs `stages` k-tiles ahead)."""
    tick = TIMER_TICK_NS
    released = [row[1] + (p % k_tiles + 1) * k_tile_ns for row in tile_rows for p in range(k_tiles)]
    loads, issued = [], start
    for p in range(len(released)):
        acquired = max(issued, released[p - stages] if p >= stages else start) + tick
        issued = acquired + tick
        loads.append((acquired, issued))
    return loads


def _bracketed(start: int, body: list[tuple]) -> list[tuple]:
    """A role's records: ROLE_START at `start`, the body, ROLE_END a tick after the last of them."""
    end = (body[-1][0] if body else start) + TIMER_TICK_NS
    return [(start, ROLE_START, 0)] + body + [(end, ROLE_END, 0)]


def synthetic_buffer(ctas: int = 2, tiles_per_consumer: int = 2, k_tiles: int = 4, *, stages: int = 4,
                     k_tile_ns: int = 8 * TIMER_TICK_NS, tail_ns: int = 4 * TIMER_TICK_NS,
                     epilogue_ns: int = 16 * TIMER_TICK_NS, t0_ns: int = 1 << 50) -> tuple[bytes, int]:
    """(buffer, capacity) of an ideal pingpong schedule: consumer 0's mainloop, then consumer 1's while consumer
    0's epilogue runs, ..., with the producer loading ahead. CTA c starts c ticks late and runs on SM 2c (SM ids
    differ from CTA ids, as on hardware). Deterministic; times in whole timer ticks."""
    consumers = len(CONSUMER_ROLES)
    tiles = consumers * tiles_per_consumer
    capacity = capacity_for(tiles_per_consumer, tiles * k_tiles)
    events = {}
    for cta in range(ctas):
        start = t0_ns + cta * TIMER_TICK_NS
        rows = _pingpong_tiles(tiles, start, k_tiles * k_tile_ns, tail_ns, epilogue_ns)
        loads = _producer_loads(rows, k_tiles, stages, k_tile_ns, start)
        events[cta, PRODUCER] = _bracketed(start, [(t, code, pos) for pos, load in enumerate(loads)
                                                   for t, code in zip(load, PRODUCER_CYCLE)])
        for consumer in CONSUMER_ROLES:
            # the persistent walk: CTA c runs tiles c, c + ctas, ...; consumer 0 the even steps, consumer 1 the odd
            steps = range(consumer - CONSUMER0, tiles, consumers)
            events[cta, consumer] = _bracketed(start, [(t, code, cta + ctas * i) for i in steps
                                                       for t, code in zip(rows[i], CONSUMER_CYCLE)])
    return build_buffer(ctas, capacity, events, smids=[2 * cta for cta in range(ctas)]), capacity
