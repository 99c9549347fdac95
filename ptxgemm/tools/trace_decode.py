"""A trace buffer decoded and checked: the records per role, validated against the format's grammar (every
role's events in cycle order, no unknown codes, clocks that only go forward), cycles mapped onto nanoseconds,
and the per-tile / per-load tables and spans the Trace class summarizes. Also the interval arithmetic of those
summaries. The format itself is ptxgemm.kernel.trace_format."""
from __future__ import annotations

import numpy as np

from ..kernel.trace_format import (BRACKET_RECORDS, CODE_NAMES, CONSUMER_CYCLE, HEADER_DTYPE, PRODUCER, PRODUCER_CYCLE,
                                   RECORD_DTYPE, ROLES, ROLE_CYCLES, ROLE_END, ROLE_NAMES, ROLE_START, buffer_bytes,
                                   header_bytes)


def _time_fields(cycle) -> tuple[str, ...]:
    """Column names of a cycle table: 'prev' (the record before the cycle) and one per code."""
    return ("prev",) + tuple(CODE_NAMES[code].lower() for code in cycle)


#: Times are ns relative to the kernel's first event; `tile` is the consumer's tile index or the producer's pos.
_ID_FIELDS = [("cta", "<i4"), ("smid", "<i4"), ("role", "<i4"), ("tile", "<i8")]


TILE_DTYPE = np.dtype(_ID_FIELDS + [(name, "<i8") for name in _time_fields(CONSUMER_CYCLE)])


LOAD_DTYPE = np.dtype(_ID_FIELDS + [(name, "<i8") for name in _time_fields(PRODUCER_CYCLE)])


#: span kind -> the (begin, end) columns of the tile / load table it runs between
CONSUMER_SPANS = {"order_wait": ("prev", "order_acquired"), "data_wait": ("order_acquired", "mainloop_start"),
                  "mainloop": ("mainloop_start", "mma_issued"),
                  "mma_tail": ("mma_issued", "mma_retired"), "epilogue_wait": ("mma_retired", "epilogue_start"),
                  "epilogue": ("epilogue_start", "store_drained")}


PRODUCER_SPANS = {"empty_wait": ("prev", "empty_acquired"), "issue": ("empty_acquired", "tma_issued")}


SPAN_KINDS = tuple(CONSUMER_SPANS) + tuple(PRODUCER_SPANS)


#: `kind` indexes SPAN_KINDS; `mark` is the STORE_ISSUED instant of an epilogue span, NO_MARK elsewhere.
SPAN_DTYPE = np.dtype(_ID_FIELDS + [("kind", "<i4"), ("start", "<i8"), ("end", "<i8"), ("mark", "<i8")])


NO_MARK = -1


#: A consumer keeps the tensor cores busy from its tile's first wgmma to the last one retiring.
TENSOR_BUSY = ("mainloop_start", "mma_retired")


def decode(raw, ctas: int, capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """(header[ctas, ROLES], records[ctas, ROLES, capacity]) viewed on the raw bytes."""
    if ctas < 1 or capacity < 1:
        raise ValueError(f"trace: ctas and capacity must be positive, got ctas={ctas}, capacity={capacity}")
    if isinstance(raw, np.ndarray):
        data = np.ascontiguousarray(raw).reshape(-1).view(np.uint8)
    else:
        data = np.frombuffer(raw, np.uint8)
    expected = buffer_bytes(ctas, capacity)
    if data.size != expected:
        raise ValueError(f"trace: buffer has {data.size} bytes, but {ctas} CTAs x {ROLES} roles with capacity "
                         f"{capacity} need buffer_bytes() = {expected}")
    split = header_bytes(ctas)
    header = data[:split].view(HEADER_DTYPE).reshape(ctas, ROLES)
    records = data[split:].view(RECORD_DTYPE).reshape(ctas, ROLES, capacity)
    return header, records


def _error(cta, role, record, what: str) -> ValueError:
    where = "header" if record is None else f"record {record}"
    return ValueError(f"malformed trace: CTA {cta} {ROLE_NAMES[role]} (role {role}) {where}: {what}")


def _first(mask: np.ndarray):
    """Index tuple of the first True of `mask` in C order (lowest CTA, role, record), or None."""
    hits = np.argwhere(mask)
    return tuple(int(i) for i in hits[0]) if len(hits) else None


def _code_name(code) -> str:
    return f"{CODE_NAMES[int(code)]} ({int(code)})" if int(code) in CODE_NAMES else f"unknown code {int(code)}"


def _grammar(capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """Per role and record index: the code it must carry (ROLE_START, then the role's cycle repeated) and whether
    it continues the cycle of the record before it (so carries the same tile / pos)."""
    j = np.arange(capacity)
    codes = np.empty((ROLES, capacity), np.int64)
    continues = np.empty((ROLES, capacity), bool)
    for role, cycle in enumerate(ROLE_CYCLES):
        phase = (j - 1) % len(cycle)
        codes[role] = np.where(j == 0, ROLE_START, np.asarray(cycle)[phase])
        continues[role] = (j > 0) & (phase > 0)
    return codes, continues


def _check_header(header, capacity: int) -> None:
    count, dropped = header["count"], header["dropped"]
    hit = _first(count > capacity)
    if hit:
        raise _error(*hit, None, f"count {count[hit]} exceeds the capacity {capacity}")
    hit = _first((dropped > 0) & (count != capacity))
    if hit:
        raise _error(*hit, None, f"{dropped[hit]} records dropped but count {count[hit]} is below the capacity "
                                 f"{capacity} (a role drops records only once its slice is full)")
    hit = _first((dropped == 0) & (count < BRACKET_RECORDS))
    if hit:
        raise _error(*hit, None, f"count {count[hit]}: every role writes at least ROLE_START and ROLE_END")
    smid = header["smid"]
    hit = _first(smid != smid[:, :1])
    if hit:
        raise _error(*hit, None, f"smid {smid[hit]} differs from the producer's {smid[hit[0], PRODUCER]} "
                                 "(all roles of a CTA run on one SM)")


def _check_codes(code, valid) -> None:
    table_size = max(CODE_NAMES) + 1
    allowed = np.zeros((ROLES, table_size), bool)
    for role, cycle in enumerate(ROLE_CYCLES):
        allowed[role, [ROLE_START, ROLE_END, *cycle]] = True
    in_table = code < table_size
    ok = in_table & allowed[np.arange(ROLES)[:, None], np.where(in_table, code, 0)]
    hit = _first(valid & ~ok)
    if hit:
        raise _error(*hit, f"{_code_name(code[hit])} is not a {ROLE_NAMES[hit[1]].split()[0]} code")


def _check_clock(clock, valid) -> None:
    backwards = valid[..., 1:] & (clock[..., 1:] < clock[..., :-1])
    hit = _first(backwards)
    if hit:
        cta, role, j = hit
        raise _error(cta, role, j + 1, f"clock {clock[cta, role, j + 1]} cycles is before the previous record's "
                                       f"{clock[cta, role, j]} cycles (a role's clock never goes backwards)")


def _check_sequence(header, records, valid) -> None:
    """Codes follow ROLE_START, whole cycles, ROLE_END; a role that dropped records is a prefix of that."""
    capacity = records.shape[2]
    codes, continues = _grammar(capacity)
    expected = np.broadcast_to(codes, records.shape).copy()
    count = header["count"].astype(np.int64)
    closed = header["dropped"] == 0  # its last record must be ROLE_END
    cta, role = np.nonzero(closed)
    expected[cta, role, count[cta, role] - 1] = ROLE_END
    code = records["code"]
    hit = _first(valid & (code != expected))
    if hit:
        raise _error(*hit, f"{_code_name(code[hit])} where {_code_name(expected[hit])} was expected")
    period = np.array([len(cycle) for cycle in ROLE_CYCLES])
    hit = _first(closed & ((count - BRACKET_RECORDS) % period != 0))
    if hit:
        cta, role = hit
        last = count[hit] - 1
        raise _error(cta, role, last, f"ROLE_END right after {_code_name(code[cta, role, last - 1])}, inside a "
                                      f"cycle that must run {CODE_NAMES[ROLE_CYCLES[role][0]]}.."
                                      f"{CODE_NAMES[ROLE_CYCLES[role][-1]]}")
    value = records["value"]
    hit = _first(valid[..., 1:] & continues[:, 1:] & (value[..., 1:] != value[..., :-1]))
    if hit:
        cta, role, j = hit
        raise _error(cta, role, j + 1, f"value {value[cta, role, j + 1]} differs from the {value[cta, role, j]} "
                                       "of the rest of its cycle (one tile / pos per cycle)")


def validate(header, records) -> None:
    capacity = records.shape[2]
    _check_header(header, capacity)
    valid = np.arange(capacity) < header["count"][..., None].astype(np.int64)
    _check_codes(records["code"], valid)
    _check_clock(records["clock"], valid)
    anchor = valid & np.isin(records["code"], (ROLE_START, ROLE_END))
    hit = _first(anchor & (records["time_ns"] == 0))
    if hit:
        raise _error(*hit, f"{_code_name(records['code'][hit])} without its %globaltimer stamp")
    start, end = records["time_ns"][..., 0], np.where(anchor, records["time_ns"], 0).max(axis=-1)
    hit = _first((header["count"] >= BRACKET_RECORDS) & (header["dropped"] == 0) & (end < start))
    if hit:
        raise _error(*hit, None, f"ROLE_END's timer {end[hit]} ns is before ROLE_START's {start[hit]} ns")
    _check_sequence(header, records, valid)


def dropped_warnings(header, capacity: int) -> list[str]:
    return [f"CTA {cta} {ROLE_NAMES[role]}: {header['dropped'][cta, role]} records dropped (capacity {capacity}); "
            "its timeline stops early" for cta, role in np.argwhere(header["dropped"] > 0)]


def refine_times(records: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ns per record, ns per SM cycle per CTA): each CTA's %clock64 stamps mapped onto %globaltimer nanoseconds
    by the least-squares line through its anchors (the records that carry both: ROLE_START and ROLE_END)."""
    ctas, _, capacity = records.shape
    valid = np.arange(capacity) < count[..., None]
    timer = records["time_ns"].astype(np.int64)  # %globaltimer stays far below 2**63
    cycles = records["clock"].astype(np.int64)
    anchored = valid & (timer != 0)
    fine = np.zeros_like(timer)
    ns_per_cycle = np.full(ctas, np.nan)
    for cta in range(ctas):
        g, c = timer[cta][anchored[cta]], cycles[cta][anchored[cta]]
        if len(c) < 2 or c.max() == c.min():
            raise ValueError(f"malformed trace: CTA {cta} has {len(c)} timer anchors over "
                             f"{int(c.max() - c.min()) if len(c) else 0} cycles; its cycle stamps cannot be placed "
                             "in time (every role stamps its first and last record with %globaltimer)")
        # float64 only on small offsets: absolute timer values (~1e18 ns) would lose whole ticks
        c0, g0 = int(c.min()), int(g.min())
        slope, intercept = np.polyfit((c - c0).astype(np.float64), (g - g0).astype(np.float64), 1)
        mine = valid[cta]
        fine[cta][mine] = g0 + np.rint(intercept + slope * (cycles[cta][mine] - c0)).astype(np.int64)
        ns_per_cycle[cta] = slope
    return fine, ns_per_cycle


def cycle_table(rel, records, count, smid, cycle, dtype) -> np.ndarray:
    """One row per complete cycle of `cycle`'s codes (in CTA, role, time order), with the times of its records."""
    j = np.arange(records.shape[2])
    starts = (records["code"] == cycle[0]) & (j + len(cycle) <= count[..., None])
    cta, role, first = np.nonzero(starts)
    times = rel[cta[:, None], role[:, None], first[:, None] + np.arange(-1, len(cycle))]
    table = np.zeros(len(cta), dtype)
    table["cta"], table["smid"], table["role"] = cta, smid[cta], role
    table["tile"] = records["value"][cta, role, first]
    for column, name in enumerate(_time_fields(cycle)):
        table[name] = times[:, column]
    return table


def span_table(tiles: np.ndarray, loads: np.ndarray) -> np.ndarray:
    parts = []
    for table, kinds in ((tiles, CONSUMER_SPANS), (loads, PRODUCER_SPANS)):
        for kind, (begin, end) in kinds.items():
            part = np.zeros(len(table), SPAN_DTYPE)
            for field in ("cta", "smid", "role", "tile"):
                part[field] = table[field]
            part["kind"] = SPAN_KINDS.index(kind)
            part["start"], part["end"] = table[begin], table[end]
            part["mark"] = table["store_issued"] if kind == "epilogue" else NO_MARK
            parts.append(part)
    spans = np.concatenate(parts)
    # chronological per role; a zero-length wait sorts before the span that starts where it ends
    return spans[np.lexsort((spans["end"], spans["start"], spans["role"], spans["cta"]))]


def merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of the intervals [starts[i], ends[i]] as sorted, disjoint intervals."""
    if len(starts) == 0:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    # an interval opens a new piece when it starts after everything before it has ended
    opens = np.nonzero(np.r_[True, s[1:] > reach[:-1]])[0]
    closes = np.r_[opens[1:] - 1, len(s) - 1]
    return s[opens], reach[closes]


def union_length(starts, ends) -> int:
    s, e = merge(np.asarray(starts), np.asarray(ends))
    return int((e - s).sum())


def overlap_length(a: tuple, b: tuple) -> int:
    """Length of (union of a) ∩ (union of b), by inclusion-exclusion."""
    both = (np.r_[a[0], b[0]], np.r_[a[1], b[1]])
    return union_length(*a) + union_length(*b) - union_length(*both)


def fraction(part, whole) -> float:
    """part / whole, 0 when there is nothing to divide (a zero-length span has nothing to cover)."""
    return float(part) / float(whole) if whole else 0.0


def clock_mhz(ns_per_cycle: np.ndarray) -> dict:
    """The SMs' clock over the kernel, from each CTA's cycles-to-timer fit (the clock drops when power-limited)."""
    mhz = 1e3 / ns_per_cycle[np.isfinite(ns_per_cycle) & (ns_per_cycle > 0)]
    if len(mhz) == 0:
        return {"count": 0}
    return {"count": len(mhz), "min": float(mhz.min()), "median": float(np.median(mhz)), "max": float(mhz.max())}


def distribution(values: np.ndarray) -> dict:
    if len(values) == 0:
        return {"count": 0}
    p10, median, p90 = np.percentile(values, [10, 50, 90])
    return {"count": len(values), "min": int(values.min()), "p10": float(p10), "median": float(median),
            "p90": float(p90), "max": int(values.max()), "mean": float(values.mean())}
