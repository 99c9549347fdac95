"""A trace buffer decoded and checked: the records per role, validated against the format's grammar (every
role's events along one of its schedule's paths, no unknown codes, clocks that only go forward), cycles mapped onto
nanoseconds, and the per-tile / per-load tables and spans the Trace class summarizes. Also the interval arithmetic
of those summaries. The format itself is ptxgemm.kernel.trace_format."""
from __future__ import annotations

import numpy as np

from ..kernel.trace_format import (BRACKET_RECORDS, CODE_NAMES, CONSUMER_CODES, HEADER_DTYPE,
                                   PRODUCER, PRODUCER_CYCLE, RECORD_DTYPE, ROLES, ROLE_END, ROLE_NAMES, ROLE_START,
                                   SCHEDULES, buffer_bytes, header_bytes, role_paths)


def _time_fields(codes) -> tuple[str, ...]:
    """Column names of a cycle table: 'prev' (the record before the cycle) and one per code."""
    return ("prev",) + tuple(CODE_NAMES[code].lower() for code in codes)


#: Times are ns relative to the kernel's first event; `tile` is the consumer's tile index or the producer's pos.
_ID_FIELDS = [("cta", "<i4"), ("smid", "<i4"), ("role", "<i4"), ("tile", "<i8")]


#: One row per consumer tile; a code the tile's path does not take (a split-K code of an unsplit tile,
#: STORE_DRAINED in the cooperative schedule) has NO_TIME.
TILE_DTYPE = np.dtype(_ID_FIELDS + [(name, "<i8") for name in _time_fields(CONSUMER_CODES)])


LOAD_DTYPE = np.dtype(_ID_FIELDS + [(name, "<i8") for name in _time_fields(PRODUCER_CYCLE)])


NO_TIME = -1


#: span kind -> (begin columns, end columns) of the tile / load table: a span runs from the first begin column the
#: row has (not NO_TIME) to the first end column it has; a row without either has no span of that kind.
CONSUMER_SPANS = {"order_wait": (("prev",), ("order_acquired",)),
                  "data_wait": (("order_acquired",), ("mainloop_start",)),
                  "mainloop": (("mainloop_start",), ("mma_issued",)),
                  "mma_tail": (("mma_issued",), ("mma_retired",)),
                  "epilogue_wait": (("mma_retired",), ("epilogue_start",)),
                  # split-K: a partial's store to the workspace; the final's wait for the other splits, its fix-up
                  "partial_store": (("epilogue_start",), ("partial_stored",)),
                  "fixup_wait": (("epilogue_start",), ("splits_arrived",)),
                  "fixup": (("splits_arrived",), ("fixup_done",)),
                  # the epilogue proper, to C: after the fix-up, if any, to the drain (pingpong) or the last store
                  "epilogue": (("fixup_done", "epilogue_start"), ("store_drained", "store_issued"))}


PRODUCER_SPANS = {"empty_wait": (("prev",), ("empty_acquired",)), "issue": (("empty_acquired",), ("tma_issued",))}


SPAN_KINDS = tuple(CONSUMER_SPANS) + tuple(PRODUCER_SPANS)


#: the spans of a consumer's work after its mainloop retired: what pingpong hides under the peer's mainloop
EPILOGUE_KINDS = ("partial_store", "fixup_wait", "fixup", "epilogue")
SPLIT_KINDS = ("partial_store", "fixup_wait", "fixup")


#: `kind` indexes SPAN_KINDS; `mark` is the STORE_ISSUED instant inside an epilogue span that ends at the drain,
#: NO_MARK elsewhere.
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


def schedule_of(header) -> str:
    """The schedule the kernel ran, from its header (every entry carries it; _check_header checks they agree)."""
    return SCHEDULES[int(header["schedule"].flat[0])]


def _transitions(schedule: str) -> np.ndarray:
    """allowed[role, previous code, code]: the code pairs that may follow each other in a role's records — ROLE_START,
    then cycles along the role's paths (trace_format.role_paths), then ROLE_END."""
    size = max(CODE_NAMES) + 1
    allowed = np.zeros((ROLES, size, size), bool)
    for role, paths in enumerate(role_paths(schedule)):
        ends = [ROLE_START] + [path[-1] for path in paths]    # where a cycle may begin: after these
        for path in paths:
            allowed[role, ends, path[0]] = True
            for a, b in zip(path, path[1:]):
                allowed[role, a, b] = True
        allowed[role, ends, ROLE_END] = True
    return allowed


def cycle_start(schedule: str, role: int) -> int:
    """The code every cycle of `role` begins with (the producer's EMPTY_ACQUIRED, a consumer's ORDER_ACQUIRED)."""
    (start,) = {path[0] for path in role_paths(schedule)[role]}
    return start


def cycle_ends(schedule: str, role: int) -> tuple[int, ...]:
    """The codes a complete cycle of `role` ends with in `schedule`."""
    return tuple(sorted({path[-1] for path in role_paths(schedule)[role]}))


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
    schedule = header["schedule"]
    hit = _first(schedule >= len(SCHEDULES))
    if hit:
        raise _error(*hit, None, f"schedule {schedule[hit]} is none of {', '.join(SCHEDULES)} (0..{len(SCHEDULES) - 1})")
    hit = _first(schedule != schedule.flat[0])
    if hit:
        raise _error(*hit, None, f"schedule {schedule[hit]} differs from CTA 0 producer's {schedule.flat[0]} (one "
                                 "kernel runs one schedule)")
    smid = header["smid"]
    hit = _first(smid != smid[:, :1])
    if hit:
        raise _error(*hit, None, f"smid {smid[hit]} differs from the producer's {smid[hit[0], PRODUCER]} "
                                 "(all roles of a CTA run on one SM)")


def _check_codes(code, valid, schedule: str) -> None:
    table_size = max(CODE_NAMES) + 1
    allowed = np.zeros((ROLES, table_size), bool)
    for role, paths in enumerate(role_paths(schedule)):
        allowed[role, [ROLE_START, ROLE_END, *{c for path in paths for c in path}]] = True
    in_table = code < table_size
    ok = in_table & allowed[np.arange(ROLES)[:, None], np.where(in_table, code, 0)]
    hit = _first(valid & ~ok)
    if hit:
        kind = ROLE_NAMES[hit[1]].split()[0]
        raise _error(*hit, f"{_code_name(code[hit])} is not a {kind} code"
                           + (f" of the {schedule} schedule" if int(code[hit]) in CODE_NAMES else ""))


def _check_clock(clock, valid) -> None:
    backwards = valid[..., 1:] & (clock[..., 1:] < clock[..., :-1])
    hit = _first(backwards)
    if hit:
        cta, role, j = hit
        raise _error(cta, role, j + 1, f"clock {clock[cta, role, j + 1]} cycles is before the previous record's "
                                       f"{clock[cta, role, j]} cycles (a role's clock never goes backwards)")


def _expected_after(allowed: np.ndarray, role: int, previous: int) -> str:
    following = [_code_name(c) for c in np.nonzero(allowed[role, previous])[0]]
    return following[0] if len(following) == 1 else "one of " + ", ".join(following) if following else "nothing"


def _check_sequence(header, records, valid, schedule: str) -> None:
    """Codes follow ROLE_START, whole cycles along the schedule's paths, ROLE_END; a role that dropped records is a
    prefix of that."""
    capacity = records.shape[2]
    code = records["code"].astype(np.int64)
    allowed = _transitions(schedule)
    role = np.arange(ROLES)[None, :, None]
    step_ok = np.ones(code.shape, bool)
    step_ok[..., 1:] = allowed[np.broadcast_to(role, code[..., 1:].shape), code[..., :-1], code[..., 1:]]
    count = header["count"].astype(np.int64)
    last = (np.arange(capacity) == (count - 1)[..., None]) & (header["dropped"] == 0)[..., None]  # closed roles
    first = np.arange(capacity) == 0
    bad = valid & ((first & (code != ROLE_START)) | (~first & ~step_ok) | (last & (code != ROLE_END)))
    hit = _first(bad)
    if hit:
        cta, r, j = hit
        got = _code_name(code[hit])
        if j == 0:
            raise _error(*hit, f"{got} where {_code_name(ROLE_START)} was expected")
        previous = int(code[cta, r, j - 1])
        if step_ok[hit] and last[hit]:
            raise _error(*hit, f"{got} where {_code_name(ROLE_END)} was expected")
        if code[hit] == ROLE_END:
            ends = ", ".join(CODE_NAMES[c] for c in cycle_ends(schedule, r))
            raise _error(*hit, f"ROLE_END right after {_code_name(previous)}, inside a cycle that must end with "
                               f"{ends}")
        raise _error(*hit, f"{got} where {_expected_after(allowed, r, previous)} was expected")
    value = records["value"]
    starts = np.array([cycle_start(schedule, r) for r in range(ROLES)])[None, :, None]
    continues = valid[..., 1:] & (code[..., 1:] != starts) & (code[..., 1:] != ROLE_END)
    hit = _first(continues & (value[..., 1:] != value[..., :-1]))
    if hit:
        cta, r, j = hit
        raise _error(cta, r, j + 1, f"value {value[cta, r, j + 1]} differs from the {value[cta, r, j]} "
                                    "of the rest of its cycle (one tile / pos per cycle)")


def validate(header, records) -> None:
    capacity = records.shape[2]
    _check_header(header, capacity)
    schedule = schedule_of(header)
    valid = np.arange(capacity) < header["count"][..., None].astype(np.int64)
    _check_codes(records["code"], valid, schedule)
    _check_clock(records["clock"], valid)
    anchor = valid & np.isin(records["code"], (ROLE_START, ROLE_END))
    hit = _first(anchor & (records["time_ns"] == 0))
    if hit:
        raise _error(*hit, f"{_code_name(records['code'][hit])} without its %globaltimer stamp")
    start, end = records["time_ns"][..., 0], np.where(anchor, records["time_ns"], 0).max(axis=-1)
    hit = _first((header["count"] >= BRACKET_RECORDS) & (header["dropped"] == 0) & (end < start))
    if hit:
        raise _error(*hit, None, f"ROLE_END's timer {end[hit]} ns is before ROLE_START's {start[hit]} ns")
    _check_sequence(header, records, valid, schedule)


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


def cycle_table(rel, records, count, smid, codes, start: int, ends, dtype) -> np.ndarray:
    """One row per complete cycle (in CTA, role, time order): the cycle begins with code `start` and is complete when
    its last record is one of `ends` (a role that dropped records may stop inside one). Columns: the time of the
    record before the cycle ('prev') and of each of `codes` it wrote, NO_TIME for those it did not."""
    code = records["code"]
    valid = np.arange(records.shape[2]) < count[..., None]
    starts = valid & (code == start)
    cycle = np.cumsum(starts, axis=-1) - 1                  # the role's cycle a record belongs to (-1: none yet)
    per_role = starts.sum(axis=-1).ravel()
    first_row = (np.cumsum(per_role) - per_role).reshape(starts.shape[:2])
    row = first_row[..., None] + cycle                      # the table row of every record of a cycle
    cta, role, first = np.nonzero(starts)
    table = np.zeros(len(cta), dtype)
    table["cta"], table["smid"], table["role"] = cta, smid[cta], role
    table["tile"] = records["value"][cta, role, first]
    table["prev"] = rel[cta, role, first - 1]                # record 0 is ROLE_START, so first >= 1
    for c, name in zip(codes, _time_fields(codes)[1:]):
        table[name] = NO_TIME
        hit = valid & (cycle >= 0) & (code == c)
        table[name][row[hit]] = rel[hit]
    # complete: the cycle's last record is an end code, i.e. the record after it starts a cycle or ends the role
    following = np.zeros(code.shape, bool)
    following[..., :-1] = valid[..., 1:] & ((code[..., 1:] == start) | (code[..., 1:] == ROLE_END))
    closing = valid & (cycle >= 0) & np.isin(code, ends) & (following | (np.arange(code.shape[-1]) ==
                                                                         (count - 1)[..., None]))
    complete = np.zeros(len(cta), bool)
    complete[row[closing]] = True
    return table[complete]


def span_table(tiles: np.ndarray, loads: np.ndarray) -> np.ndarray:
    parts = []
    for table, kinds in ((tiles, CONSUMER_SPANS), (loads, PRODUCER_SPANS)):
        for kind, (begins, ends) in kinds.items():
            start, end = _first_present(table, begins), _first_present(table, ends)
            rows = table[(start != NO_TIME) & (end != NO_TIME)]
            part = np.zeros(len(rows), SPAN_DTYPE)
            for field in ("cta", "smid", "role", "tile"):
                part[field] = rows[field]
            part["kind"] = SPAN_KINDS.index(kind)
            part["start"] = start[(start != NO_TIME) & (end != NO_TIME)]
            part["end"] = end[(start != NO_TIME) & (end != NO_TIME)]
            part["mark"] = NO_MARK
            if kind == "epilogue":   # the store issued, inside a span that runs on to the drain
                drained = rows["store_drained"] != NO_TIME
                part["mark"][drained] = rows["store_issued"][drained]
            parts.append(part)
    spans = np.concatenate(parts)
    # chronological per role; a zero-length wait sorts before the span that starts where it ends
    return spans[np.lexsort((spans["end"], spans["start"], spans["role"], spans["cta"]))]


def _first_present(table: np.ndarray, columns) -> np.ndarray:
    """Per row, the time of the first of `columns` the row has (NO_TIME where it has none)."""
    out = np.full(len(table), NO_TIME, np.int64)
    for name in reversed(columns):
        out = np.where(table[name] != NO_TIME, table[name], out)
    return out


def row_end(table: np.ndarray) -> np.ndarray:
    """Per row of a tile table, its last event: when the consumer left the tile."""
    return np.max([table[name] for name in _time_fields(CONSUMER_CODES)[1:]], axis=0)


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
