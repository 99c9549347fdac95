"""Trace buffers built by hand, in the kernel's format: a pingpong or cooperative timeline, split-K or not, with
chosen tile, load and epilogue times, so that the decoder, the summary and the drawings can be checked without a
GPU."""
from __future__ import annotations

import numpy as np

from ..kernel.trace_format import (CONSUMER0, CONSUMER_ROLES, EPILOGUE_START, FIXUP_DONE, HEADER_DTYPE, MAINLOOP_START,
                                   MMA_ISSUED, MMA_RETIRED, ORDER_ACQUIRED, PARTIAL_STORED, PRODUCER, PRODUCER_CYCLE,
                                   RECORD_DTYPE, ROLES, ROLE_END, ROLE_NAMES, ROLE_START, SCHEDULES, SPLITS_ARRIVED,
                                   STORE_DRAINED, STORE_ISSUED, TIMER_TICK_NS, capacity_for)


def build_buffer(ctas: int, capacity: int, events: dict, smids=None, dropped: dict | None = None,
                 schedule: str = "pingpong") -> bytes:
    """The bytes a kernel would write: events {(cta, role): [(time_ns, code, value) or (time_ns, code, value,
    clock), ...]} (roles not named write nothing; clock defaults to time_ns, a 1 GHz SM; as in the kernel, only
    ROLE_START and ROLE_END keep their time_ns), smids per CTA (default: the CTA index), dropped {(cta, role): n},
    the kernel's schedule (every header entry carries it)."""
    header = np.zeros((ctas, ROLES), HEADER_DTYPE)
    records = np.zeros((ctas, ROLES, capacity), RECORD_DTYPE)
    header["smid"] = np.asarray(range(ctas) if smids is None else smids)[:, None]
    header["schedule"] = SCHEDULES.index(schedule)
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


def _epilogue(epilogue: int, unit: int, splits: int, epilogue_ns: int, split_ns: tuple, drain: bool) -> list:
    """(code, time) of a tile's epilogue from its EPILOGUE_START: the store to C (and its drain in pingpong), or
    with split-K a partial's store to the workspace, or the final's wait for the others, fix-up and store."""
    tick = TIMER_TICK_NS
    partial_ns, wait_ns, fixup_ns = split_ns
    events = [(EPILOGUE_START, epilogue)]
    if splits > 1 and unit % splits < splits - 1:
        return events + [(PARTIAL_STORED, epilogue + partial_ns)]
    t = epilogue
    if splits > 1:
        events += [(SPLITS_ARRIVED, t + wait_ns), (FIXUP_DONE, t + wait_ns + fixup_ns)]
        t += wait_ns + fixup_ns
    events.append((STORE_ISSUED, t + epilogue_ns))
    return events + ([(STORE_DRAINED, t + epilogue_ns + 2 * tick)] if drain else [])


def _pingpong_tiles(units: list, start: int, mainloop_ns: int, tail_ns: int, epilogue_ns: int, splits: int = 1,
                    split_ns: tuple = (0, 0, 0)) -> list[list[tuple]]:
    """(code, time) per tile, for a CTA's tiles (scheduler units `units`) in order (tile i on consumer i % 2), in an
    ideal pingpong: a consumer takes the order barrier when the peer has issued its wgmmas, its epilogue once the
    peer's store has drained the shared staging buffer (or its partial is stored)."""
    tick = TIMER_TICK_NS
    handed_over, staging_free = start, start
    previous = [start] * len(CONSUMER_ROLES)  # each consumer's last event
    rows = []
    for i, unit in enumerate(units):
        consumer = i % len(CONSUMER_ROLES)
        order = max(previous[consumer], handed_over) + tick
        mainloop = order + tick
        issued = mainloop + mainloop_ns
        retired = issued + tail_ns
        epilogue = _epilogue(max(retired, staging_free) + tick, unit, splits, epilogue_ns, split_ns, drain=True)
        rows.append([(ORDER_ACQUIRED, order), (MAINLOOP_START, mainloop), (MMA_ISSUED, issued),
                     (MMA_RETIRED, retired)] + epilogue)
        handed_over, staging_free, previous[consumer] = issued, epilogue[-1][1], epilogue[-1][1]
    return rows


def _cooperative_tiles(units: list, start: int, mainloop_ns: int, tail_ns: int, epilogue_ns: int, splits: int = 1,
                       split_ns: tuple = (0, 0, 0)) -> list[list[tuple]]:
    """(code, time) per tile in an ideal cooperative schedule: both consumers run every tile, its mainloop, then
    its epilogue (no order barriers; the stores are not waited for), then the next tile."""
    tick = TIMER_TICK_NS
    rows, previous = [], start
    for unit in units:
        order = previous + tick
        mainloop = order + tick
        issued = mainloop + mainloop_ns
        retired = issued + tail_ns
        epilogue = _epilogue(retired + tick, unit, splits, epilogue_ns, split_ns, drain=False)
        rows.append([(ORDER_ACQUIRED, order), (MAINLOOP_START, mainloop), (MMA_ISSUED, issued),
                     (MMA_RETIRED, retired)] + epilogue)
        previous = epilogue[-1][1]
    return rows


def _producer_loads(tile_rows: list, k_tiles: int, stages: int, k_tile_ns: int, start: int) -> list[tuple]:
    """Times of PRODUCER_CYCLE per k-tile: a ring stage frees when the consumer's wgmma on it is done, and the
    producer refills it at once (so it runs `stages` k-tiles ahead)."""
    tick = TIMER_TICK_NS
    released = [dict(row)[MAINLOOP_START] + (p % k_tiles + 1) * k_tile_ns for row in tile_rows for p in range(k_tiles)]
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
                     epilogue_ns: int = 16 * TIMER_TICK_NS, t0_ns: int = 1 << 50, schedule: str = "pingpong",
                     splits: int = 1, split_ns: tuple = (4 * TIMER_TICK_NS, 8 * TIMER_TICK_NS, 2 * TIMER_TICK_NS)
                     ) -> tuple[bytes, int]:
    """(buffer, capacity) of an ideal schedule: pingpong (consumer 0's mainloop, then consumer 1's while consumer
    0's epilogue runs, ...) or cooperative (both consumers on every tile: mainloop, then epilogue), with the producer
    loading ahead. With `splits` > 1 every tile is a split-K unit (unit u is split u % splits): the partials store
    to the workspace, the final waits for them, adds them up and stores; split_ns: (partial store, the final's wait,
    fix-up) ns. CTA c starts c ticks late and runs on SM 2c (SM ids differ from CTA ids, as on hardware).
    Deterministic; times in whole timer ticks."""
    consumers = len(CONSUMER_ROLES)
    cooperative = schedule == "cooperative"
    tiles = tiles_per_consumer if cooperative else consumers * tiles_per_consumer
    capacity = capacity_for(tiles_per_consumer, tiles * k_tiles, schedule, splits > 1)
    events = {}
    build = _cooperative_tiles if cooperative else _pingpong_tiles
    for cta in range(ctas):
        start = t0_ns + cta * TIMER_TICK_NS
        units = [cta + ctas * i for i in range(tiles)]  # the persistent walk: CTA c runs units c, c + ctas, ...
        rows = build(units, start, k_tiles * k_tile_ns, tail_ns, epilogue_ns, splits, split_ns)
        loads = _producer_loads(rows, k_tiles, stages, k_tile_ns, start)
        events[cta, PRODUCER] = _bracketed(start, [(t, code, pos) for pos, load in enumerate(loads)
                                                   for t, code in zip(load, PRODUCER_CYCLE)])
        for consumer in CONSUMER_ROLES:
            # pingpong: consumer 0 the even steps, consumer 1 the odd; cooperative: both every step, consumer 1's
            # half a tick later
            steps = range(tiles) if cooperative else range(consumer - CONSUMER0, tiles, consumers)
            late = (consumer - CONSUMER0) * TIMER_TICK_NS if cooperative else 0
            events[cta, consumer] = _bracketed(start, [(t + late, code, units[i]) for i in steps
                                                       for code, t in rows[i]])
    return build_buffer(ctas, capacity, events, smids=[2 * cta for cta in range(ctas)], schedule=schedule), capacity
