"""Per-warpgroup kernel timeline ("trace"): decode, check, summarise and draw the events a traced kernel writes.

A traced kernel (GemmConfig(trace=True), ptxgemm/kernel/templates/trace.ptx.j2) gives each role (warpgroup) of each CTA one
writer thread that appends 32-byte records (%globaltimer, %clock64, event code, tile or k-tile) to its own slice of
one device buffer, so no atomics are needed. The format (layout, roles, event codes) is ptxgemm.kernel.trace_format.

Time: every record carries %clock64, the SM's cycle counter: cheap to read and fine-grained, but private to the SM
and counting at a clock that drops when the GPU is power-limited. ROLE_START and ROLE_END also carry
%globaltimer (time_ns; 0 in every other record), the nanosecond clock all SMs share, which advances in 32 ns steps
and is slow to read (reading it at every event delayed the kernel's barrier hand-overs measurably). The decoder maps
each CTA's cycles onto nanoseconds by the least-squares line through its anchors (six per CTA, spanning its whole
run): ordering and spacing from the cycles, absolute time and alignment across SMs from the timer.

Everything here is numpy on the host; matplotlib is imported only inside the PNG functions.
"""
from __future__ import annotations

import copy
import json

import numpy as np

from ..errors import ConfigError
from ..kernel.trace_format import (BRACKET_RECORDS, CODES, CODE_NAMES, CONSUMER0, CONSUMER1, CONSUMER_CYCLE,
                                   CONSUMER_ROLES, HEADER_DTYPE, PRODUCER, PRODUCER_CYCLE, RECORD_DTYPE, ROLES,
                                   ROLE_CYCLES, ROLE_END, ROLE_NAMES, ROLE_START, TIMER_TICK_NS, buffer_bytes,
                                   capacity_for, header_bytes)
from ..runtime import driver

# --------------------------------------------------------------------------------------------------------------
# Derived tables: one row per consumer tile / producer k-tile, and the spans between their events
# --------------------------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------------------------
# Decoding and validation
# --------------------------------------------------------------------------------------------------------------

def _decode(raw, ctas: int, capacity: int) -> tuple[np.ndarray, np.ndarray]:
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


def _validate(header, records) -> None:
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


def _dropped_warnings(header, capacity: int) -> list[str]:
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


def _cycle_table(rel, records, count, smid, cycle, dtype) -> np.ndarray:
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


def _span_table(tiles: np.ndarray, loads: np.ndarray) -> np.ndarray:
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


# --------------------------------------------------------------------------------------------------------------
# Interval arithmetic
# --------------------------------------------------------------------------------------------------------------

def _merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


def _union_length(starts, ends) -> int:
    s, e = _merge(np.asarray(starts), np.asarray(ends))
    return int((e - s).sum())


def _overlap_length(a: tuple, b: tuple) -> int:
    """Length of (union of a) ∩ (union of b), by inclusion-exclusion."""
    both = (np.r_[a[0], b[0]], np.r_[a[1], b[1]])
    return _union_length(*a) + _union_length(*b) - _union_length(*both)


def _fraction(part, whole) -> float:
    """part / whole, 0 when there is nothing to divide (a zero-length span has nothing to cover)."""
    return float(part) / float(whole) if whole else 0.0


def _clock_mhz(ns_per_cycle: np.ndarray) -> dict:
    """The SMs' clock over the kernel, from each CTA's cycles-to-timer fit (the clock drops when power-limited)."""
    mhz = 1e3 / ns_per_cycle[np.isfinite(ns_per_cycle) & (ns_per_cycle > 0)]
    if len(mhz) == 0:
        return {"count": 0}
    return {"count": len(mhz), "min": float(mhz.min()), "median": float(np.median(mhz)), "max": float(mhz.max())}


def _distribution(values: np.ndarray) -> dict:
    if len(values) == 0:
        return {"count": 0}
    p10, median, p90 = np.percentile(values, [10, 50, 90])
    return {"count": len(values), "min": int(values.min()), "p10": float(p10), "median": float(median),
            "p90": float(p90), "max": int(values.max()), "mean": float(values.mean())}


# --------------------------------------------------------------------------------------------------------------
# Plot helpers (matplotlib imported here only)
# --------------------------------------------------------------------------------------------------------------

PNG_DPI = 120
PNG_WIDTH_IN = 14           # 1680 px
SM_ROW_IN = 0.7
OVERVIEW_ROW_IN = 0.1
OVERVIEW_MAX_HEIGHT_IN = 20
OVERVIEW_MAX_LABELS = 40
BAR_HALF = 0.4
LABEL_MIN_FRACTION = 0.02   # a bar gets its tile number when at least this share of the x axis wide
LABELLED_KINDS = ("mainloop", "epilogue")
WAIT_GREY = "#d9d9d9"
SPAN_COLOURS = {"mainloop": "#1f77b4", "mma_tail": "#9ecae1", "epilogue": "#ff7f0e", "issue": "#2ca02c",
                "order_wait": WAIT_GREY, "data_wait": WAIT_GREY, "epilogue_wait": WAIT_GREY, "empty_wait": WAIT_GREY, "span": "#e6e6e6"}
#: legend key -> (colour, label)
LEGEND = {"mainloop": (SPAN_COLOURS["mainloop"], "mainloop (wgmmas issuing)"),
          "mma_tail": (SPAN_COLOURS["mma_tail"], "last wgmmas retiring"),
          "epilogue": (SPAN_COLOURS["epilogue"], "epilogue (| = store issued)"),
          "issue": (SPAN_COLOURS["issue"], "TMA loads issued"),
          "wait": (WAIT_GREY, "waiting"),
          "busy": (SPAN_COLOURS["mainloop"], "a consumer's wgmmas in flight"),
          "epilogues": (SPAN_COLOURS["epilogue"], "epilogues"),
          "span": (SPAN_COLOURS["span"], "SM active (first to last event)")}
SM_LEGEND = ("mainloop", "mma_tail", "epilogue", "issue", "wait")
OVERVIEW_LEGEND = ("busy", "epilogues", "span")


def _figure(width_in: float, height_in: float):
    """A Figure on its own Agg canvas: no pyplot, so the caller's backend and pyplot's figure list are untouched."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=PNG_DPI)
    FigureCanvasAgg(fig)
    return fig


def _legend(keys) -> list:
    from matplotlib.patches import Patch

    return [Patch(color=LEGEND[key][0], label=LEGEND[key][1]) for key in keys]


def _meta_title(meta: dict) -> str:
    shape = meta.get("shape")
    if isinstance(shape, (tuple, list)):
        shape = "x".join(str(d) for d in shape)
    parts = [str(p) for p in (shape, meta.get("config"), meta.get("gpu")) if p]
    return " | ".join(parts) or "ptxgemm kernel trace"


# --------------------------------------------------------------------------------------------------------------
# The trace
# --------------------------------------------------------------------------------------------------------------

class Trace:
    """A decoded, checked kernel timeline.

    header[cta, role] and records[cta, role, j] are the raw structured arrays; tiles (TILE_DTYPE, one row per
    consumer tile), loads (LOAD_DTYPE, one row per producer k-tile) and spans (SPAN_DTYPE) hold times in ns
    relative to t0_ns, the kernel's first event. role_first_ns / role_last_ns[cta, role]: each role's first and
    last record. warnings: one line per role that dropped records.
    """

    def __init__(self, header: np.ndarray, records: np.ndarray, meta: dict):
        self.header, self.records, self.meta = header, records, meta
        self.ctas, self.capacity = records.shape[0], records.shape[2]
        count = header["count"].astype(np.int64)
        times, self.ns_per_cycle = refine_times(records, count)
        self.t0_ns = int(times[:, :, 0].min())
        rel = times - self.t0_ns
        self.role_first_ns = rel[:, :, 0]
        self.role_last_ns = np.take_along_axis(rel, (count - 1)[..., None], axis=-1)[..., 0]
        self.cta_smid = header["smid"][:, PRODUCER].astype(np.int64)
        self.tiles = _cycle_table(rel, records, count, self.cta_smid, CONSUMER_CYCLE, TILE_DTYPE)
        self.loads = _cycle_table(rel, records, count, self.cta_smid, PRODUCER_CYCLE, LOAD_DTYPE)
        self.spans = _span_table(self.tiles, self.loads)
        self.warnings = _dropped_warnings(header, self.capacity)
        self._summary = None

    @classmethod
    def from_plan(cls, plan, meta: dict | None = None) -> Trace:
        """The timeline of a traced GemmPlan's last launch (waits for the GPU): its buffer decoded, with the
        problem, config, GPU and grid in `meta` beside what the caller adds."""
        if plan.trace_buffer is None:
            raise ConfigError("plan: its config was built without trace=True; use GemmConfig(trace=True)")
        raw = plan.trace_buffer.to_numpy()
        info = driver.device_info()
        base = {"shape": (plan.m, plan.n, plan.k), "config": plan.config.describe(), "gpu": info.name,
                "grid": plan.grid, "schedule": plan.schedule.describe()}
        return cls.from_buffer(raw, plan.grid, plan.trace_capacity, {**base, **(meta or {})})

    @classmethod
    def from_buffer(cls, raw, ctas: int, capacity: int, meta: dict | None = None) -> Trace:
        """Decode and check the bytes a traced launch wrote; ValueError names the CTA, role and record of the
        first malformed entry. `meta` (shape, config, GPU name, ...) is carried into the exports."""
        header, records = _decode(raw, ctas, capacity)
        _validate(header, records)
        # copies: the caller may reuse its (e.g. pinned host) buffer for the next launch
        return cls(header.copy(), records.copy(), dict(meta or {}))

    # ---- selections

    def spans_of(self, kind: str) -> np.ndarray:
        if kind not in SPAN_KINDS:
            raise ValueError(f"span kind must be one of {', '.join(SPAN_KINDS)}, got {kind!r}")
        return self.spans[self.spans["kind"] == SPAN_KINDS.index(kind)]

    @property
    def kernel_end_ns(self) -> int:
        return int(self.role_last_ns.max())

    @property
    def cta_end_ns(self) -> np.ndarray:
        return self.role_last_ns.max(axis=1)

    def ctas_by_sm(self) -> dict[int, np.ndarray]:
        """smid -> the CTAs that ran on it, in smid order."""
        return {int(sm): np.nonzero(self.cta_smid == sm)[0] for sm in np.unique(self.cta_smid)}

    def _sm_window(self, ctas: np.ndarray) -> tuple[int, int]:
        """First and last event of any role of `ctas`."""
        return int(self.role_first_ns[ctas].min()), int(self.role_last_ns[ctas].max())

    def _consumer_intervals(self, cta: int, role: int, begin: str, end: str) -> tuple[np.ndarray, np.ndarray]:
        rows = self.tiles[(self.tiles["cta"] == cta) & (self.tiles["role"] == role)]
        return rows[begin], rows[end]

    # ---- summary

    def coverage_by_sm(self) -> dict[int, float]:
        """Per SM: the fraction of its own span (first to last event) with a consumer between its tile's first
        wgmma and the last one retiring."""
        out = {}
        for sm, ctas in self.ctas_by_sm().items():
            on = np.isin(self.tiles["cta"], ctas)
            first, last = self._sm_window(ctas)
            busy = _union_length(self.tiles[TENSOR_BUSY[0]][on], self.tiles[TENSOR_BUSY[1]][on])
            out[sm] = _fraction(busy, last - first)
        return out

    def _pingpong_overlaps(self) -> tuple[int, int, int]:
        """(epilogue ns hidden behind the peer's mainloop, all epilogue ns, ns both consumers were in mainloop)."""
        hidden = epilogue = overlap = 0
        for cta in range(self.ctas):
            mainloop = {role: self._consumer_intervals(cta, role, *CONSUMER_SPANS["mainloop"])
                        for role in CONSUMER_ROLES}
            overlap += _overlap_length(mainloop[CONSUMER0], mainloop[CONSUMER1])
            for role, peer in ((CONSUMER0, CONSUMER1), (CONSUMER1, CONSUMER0)):
                epi = self._consumer_intervals(cta, role, *CONSUMER_SPANS["epilogue"])
                hidden += _overlap_length(epi, mainloop[peer])
                epilogue += int((epi[1] - epi[0]).sum())
        return hidden, epilogue, overlap

    def _producer_stalls(self) -> tuple[float, int]:
        """(empty-stage wait over the producer's span, averaged over CTAs; total wait ns)."""
        waits = self.spans_of("empty_wait")
        per_cta = np.bincount(waits["cta"], weights=waits["end"] - waits["start"], minlength=self.ctas)
        span = self.role_last_ns[:, PRODUCER] - self.role_first_ns[:, PRODUCER]
        fractions = [_fraction(w, s) for w, s in zip(per_cta, span)]
        return float(np.mean(fractions)), int(per_cta.sum())

    def summary(self) -> dict:
        """The numbers the command prints and the PNG titles carry (computed once: a Trace never changes)."""
        if self._summary is None:
            self._summary = self._compute_summary()
        return copy.deepcopy(self._summary)

    def _compute_summary(self) -> dict:
        coverage = np.array(list(self.coverage_by_sm().values()))
        hidden, epilogue, overlap = self._pingpong_overlaps()
        stall_fraction, stall_ns = self._producer_stalls()
        consumers = len(CONSUMER_ROLES)
        per_consumer = np.bincount(self.tiles["cta"] * consumers + self.tiles["role"] - CONSUMER0,
                                   minlength=consumers * self.ctas)
        cta_end = self.cta_end_ns
        return {
            "ctas": self.ctas,
            "sms": len(coverage),
            "kernel_span_ns": self.kernel_end_ns,
            "tensor_core_coverage": {"mean": float(coverage.mean()), "min": float(coverage.min()),
                                     "max": float(coverage.max())},
            "epilogue_hidden_fraction": _fraction(hidden, epilogue),
            "mainloop_overlap_ns": overlap,
            "producer_stall_fraction": stall_fraction,
            "producer_stall_ns": stall_ns,
            "tile_mainloop_ns": _distribution(self.tiles[TENSOR_BUSY[1]] - self.tiles[TENSOR_BUSY[0]]),
            "end_imbalance": {"spread_ns": int(cta_end.max() - cta_end.min()),
                              "gap_ns": (self.kernel_end_ns - cta_end).tolist(),  # per CTA: idle before the end
                              "smid": self.cta_smid.tolist()},
            "tiles_per_consumer": {"min": int(per_consumer.min()), "max": int(per_consumer.max())},
            "sm_clock_mhz": _clock_mhz(self.ns_per_cycle),
            "dropped": int(self.header["dropped"].sum()),
        }

    # ---- Chrome trace / Perfetto

    def _slots(self) -> np.ndarray:
        """Per CTA: its rank among the CTAs on its SM (0 unless an SM ran several), so each gets its own tracks."""
        slot = np.zeros(self.ctas, np.int64)
        for ctas in self.ctas_by_sm().values():
            slot[ctas] = np.arange(len(ctas))
        return slot

    def _track_name(self, cta: int, role: int) -> str:
        shared = np.count_nonzero(self.cta_smid == self.cta_smid[cta]) > 1
        return f"CTA {cta} {ROLE_NAMES[role]}" if shared else ROLE_NAMES[role]

    def _chrome_metadata(self, slot: np.ndarray) -> list[dict]:
        events = []
        for sm, ctas in self.ctas_by_sm().items():
            label = ", ".join(str(c) for c in ctas)
            events.append({"name": "process_name", "ph": "M", "pid": sm, "tid": 0,
                           "args": {"name": f"SM {sm} (CTA{'s' if len(ctas) > 1 else ''} {label})"}})
            events.append({"name": "process_sort_index", "ph": "M", "pid": sm, "tid": 0, "args": {"sort_index": sm}})
            for cta in ctas:
                for role in range(ROLES):
                    tid = int(slot[cta]) * ROLES + role
                    events.append({"name": "thread_name", "ph": "M", "pid": sm, "tid": tid,
                                   "args": {"name": self._track_name(cta, role)}})
        return events

    def _chrome_spans(self, slot: np.ndarray) -> list[dict]:
        s = self.spans
        tids = (slot[s["cta"]] * ROLES + s["role"]).tolist()
        events = []
        for smid, tid, role, kind, tile, start, end, mark in zip(
                s["smid"].tolist(), tids, s["role"].tolist(), s["kind"].tolist(), s["tile"].tolist(),
                s["start"].tolist(), s["end"].tolist(), s["mark"].tolist()):
            args = {"pos" if role == PRODUCER else "tile": tile}
            if mark != NO_MARK:
                args["store_issued_us"] = mark / 1e3
            events.append({"name": SPAN_KINDS[kind], "cat": ROLE_NAMES[role], "ph": "X", "pid": smid, "tid": tid,
                           "ts": start / 1e3, "dur": (end - start) / 1e3, "args": args})
        return events

    def to_chrome(self, path=None) -> dict:
        """Chrome trace / Perfetto JSON: a process per SM, a track per role, complete events in microseconds.
        A `path` ending in .gz is written gzip-compressed (Perfetto's UI opens it as it is)."""
        slot = self._slots()
        doc = {"traceEvents": self._chrome_metadata(slot) + self._chrome_spans(slot), "displayTimeUnit": "ns",
               "otherData": self.meta}
        if path is not None:
            # meta may hold what json cannot write (numpy scalars, paths); compact separators: traces get large
            text = json.dumps(doc, default=str, separators=(",", ":"))
            if str(path).endswith(".gz"):
                import gzip

                with gzip.open(path, "wt") as f:
                    f.write(text)
            else:
                with open(path, "w") as f:
                    f.write(text)
        return doc

    # ---- PNG

    def default_sm(self) -> int:
        """The SM of the CTA with the median end time: a typical SM, neither the first nor the last to finish."""
        order = np.argsort(self.cta_end_ns, kind="stable")
        return int(self.cta_smid[order[(self.ctas - 1) // 2]])

    def plot_sm(self, path, sm: int | None = None) -> None:
        """PNG of one SM's timeline: a row per role, mainloop and epilogue bars, waits in grey."""
        sm = self.default_sm() if sm is None else sm
        fig = _figure(PNG_WIDTH_IN, 1.6 + SM_ROW_IN * len(self._sm_rows(sm)))
        ax = fig.add_subplot()
        first, last = self._draw_sm(ax, sm)
        ax.set_xlim(first / 1e3, last / 1e3)
        ax.set_xlabel("time since the kernel's first event (µs)")
        ax.legend(handles=_legend(SM_LEGEND), loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
        ax.set_title(f"{_meta_title(self.meta)}\n{self._sm_caption(sm)}", fontsize=9)
        fig.tight_layout()
        fig.savefig(path)

    def _sm_rows(self, sm: int) -> list[tuple[int, int]]:
        by_sm = self.ctas_by_sm()
        if sm not in by_sm:
            raise ValueError(f"no CTA ran on SM {sm}; SMs in the trace: {min(by_sm)}..{max(by_sm)}")
        return [(int(cta), role) for cta in by_sm[sm] for role in range(ROLES)]

    def _draw_sm(self, ax, sm: int, label_width_ns: int | None = None) -> tuple[int, int]:
        """Draw SM `sm`'s roles as rows of `ax` (producer on top); returns the SM's first and last event."""
        rows = self._sm_rows(sm)
        first, last = self._sm_window(self.ctas_by_sm()[sm])
        min_label_us = LABEL_MIN_FRACTION * (label_width_ns or (last - first)) / 1e3
        for row, (cta, role) in enumerate(rows):
            self._draw_role(ax, row, cta, role, min_label_us=min_label_us)
        ax.set_yticks(range(len(rows)), [self._track_name(cta, role) for cta, role in rows])
        ax.set_ylim(len(rows) - 0.5, -0.5)
        return first, last

    def _sm_caption(self, sm: int) -> str:
        summary = self.summary()
        return (f"SM {sm}: tensor cores busy {self.coverage_by_sm()[sm]:.1%} of its span; all SMs "
                f"{_coverage_text(summary)}; epilogues hidden {summary['epilogue_hidden_fraction']:.1%}")

    def _draw_role(self, ax, row: int, cta: int, role: int, min_label_us: float) -> None:
        spans = self.spans[(self.spans["cta"] == cta) & (self.spans["role"] == role)]
        for kind in np.unique(spans["kind"]):
            these = spans[spans["kind"] == kind]
            start_us, width_us = these["start"] / 1e3, (these["end"] - these["start"]) / 1e3
            colour = SPAN_COLOURS[SPAN_KINDS[kind]]
            # a thin edge in the bar's own colour keeps sub-pixel bars (TMA issues) visible
            ax.broken_barh(list(zip(start_us, width_us)), (row - BAR_HALF, 2 * BAR_HALF), facecolors=colour,
                           edgecolors=colour, linewidth=0.3)
            if SPAN_KINDS[kind] in LABELLED_KINDS:
                for x, w, tile in zip(start_us, width_us, these["tile"]):
                    if w >= min_label_us:
                        ax.text(x + w / 2, row, str(tile), ha="center", va="center", fontsize=7, color="white")
        marks = spans["mark"][spans["mark"] != NO_MARK] / 1e3
        ax.vlines(marks, row - BAR_HALF, row + BAR_HALF, colors="black", linewidth=0.8)

    def plot_overview(self, path) -> None:
        """PNG of every SM (rows, by smid): when a consumer keeps the tensor cores busy and when epilogues run,
        over each SM's span, so SMs that finish early (load imbalance at the end) stand out."""
        by_sm = self.ctas_by_sm()
        fig = _figure(PNG_WIDTH_IN, min(OVERVIEW_MAX_HEIGHT_IN, 1.8 + OVERVIEW_ROW_IN * len(by_sm)))
        ax = fig.add_subplot()
        for row, ctas in enumerate(by_sm.values()):
            self._draw_sm_row(ax, row, ctas)
        ax.axvline(self.kernel_end_ns / 1e3, color="black", linestyle="--", linewidth=0.8)
        step = max(1, len(by_sm) // OVERVIEW_MAX_LABELS)
        sms = list(by_sm)
        ax.set_yticks(range(0, len(sms), step), [f"SM {sm}" for sm in sms[::step]], fontsize=7)
        ax.set_ylim(len(sms) - 0.5, -0.5)
        ax.set_xlim(0, self.kernel_end_ns / 1e3)
        ax.set_xlabel("time since the kernel's first event (µs)")
        ax.legend(handles=_legend(OVERVIEW_LEGEND), loc="upper left", bbox_to_anchor=(1.0, 1.0),
                  fontsize=8, frameon=False)
        summary = self.summary()
        ax.set_title(f"{_meta_title(self.meta)}\ntensor cores busy {_coverage_text(summary)}; "
                     f"CTA end spread {summary['end_imbalance']['spread_ns'] / 1e3:.2f} µs", fontsize=9)
        fig.tight_layout()
        fig.savefig(path)

    def _draw_sm_row(self, ax, row: int, ctas: np.ndarray) -> None:
        """The SM's span in grey, tensor-busy time (upper half) and epilogues (lower half) on top of it."""
        first, last = self._sm_window(ctas)
        ax.broken_barh([(first / 1e3, (last - first) / 1e3)], (row - BAR_HALF, 2 * BAR_HALF),
                       facecolors=SPAN_COLOURS["span"])
        on = self.tiles[np.isin(self.tiles["cta"], ctas)]
        halves = ((TENSOR_BUSY, "mainloop", row - BAR_HALF), (CONSUMER_SPANS["epilogue"], "epilogue", row))
        for (begin, end), colour, bottom in halves:
            s, e = _merge(on[begin], on[end])
            ax.broken_barh(list(zip(s / 1e3, (e - s) / 1e3)), (bottom, BAR_HALF), facecolors=SPAN_COLOURS[colour])


def plot_compare(traces: list, path, sms: list | None = None, labels: list | None = None) -> None:
    """PNG of several traces (e.g. two schedules or tile shapes on one problem), one panel each, every panel on the
    same time scale from its SM's first event: the kernel that does the work in less time has the shorter rows."""
    if not traces:
        raise ValueError("plot_compare: no traces")
    sms = [t.default_sm() for t in traces] if sms is None else list(sms)
    labels = [_meta_title(t.meta) for t in traces] if labels is None else list(labels)
    if not len(sms) == len(labels) == len(traces):
        raise ValueError(f"plot_compare: {len(traces)} traces need as many sms and labels, got {len(sms)} and "
                         f"{len(labels)}")
    windows = [t._sm_window(t.ctas_by_sm()[sm]) for t, sm in zip(traces, sms)]
    width_ns = max(last - first for first, last in windows)
    heights = [len(t._sm_rows(sm)) for t, sm in zip(traces, sms)]
    fig = _figure(PNG_WIDTH_IN, 1.2 + sum(SM_ROW_IN * h + 0.8 for h in heights))
    axes = fig.subplots(len(traces), 1, squeeze=False, gridspec_kw={"height_ratios": heights})[:, 0]
    for ax, t, sm, label, (first, _) in zip(axes, traces, sms, labels, windows):
        t._draw_sm(ax, sm, label_width_ns=width_ns)
        ax.set_xlim(first / 1e3, (first + width_ns) / 1e3)
        ax.set_title(f"{label}\n{t._sm_caption(sm)}; kernel {t.kernel_end_ns / 1e3:.1f} µs", fontsize=9)
    axes[-1].set_xlabel("time since the kernel's first event (µs)")
    axes[0].legend(handles=_legend(SM_LEGEND), loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8,
                   frameon=False)
    fig.tight_layout()
    fig.savefig(path)


# --------------------------------------------------------------------------------------------------------------
# Text summary
# --------------------------------------------------------------------------------------------------------------

def _us(ns) -> str:
    return f"{ns / 1e3:.3f}"


def _coverage_text(summary: dict) -> str:
    coverage = summary["tensor_core_coverage"]
    return f"{coverage['mean']:.1%} (min {coverage['min']:.1%}, max {coverage['max']:.1%})"


def format_summary(summary: dict) -> str:
    dist, tiles, end = summary["tile_mainloop_ns"], summary["tiles_per_consumer"], summary["end_imbalance"]
    clock = summary.get("sm_clock_mhz", {})
    if dist["count"]:
        tile_line = (f"tile mainloop (first wgmma to last retired), us: min {_us(dist['min'])}, "
                     f"p10 {_us(dist['p10'])}, median {_us(dist['median'])}, p90 {_us(dist['p90'])}, "
                     f"max {_us(dist['max'])}, mean {_us(dist['mean'])} over {dist['count']} tiles")
    else:
        tile_line = "no complete consumer tile"
    return "\n".join([
        f"kernel {_us(summary['kernel_span_ns'])} us: {summary['ctas']} CTAs on {summary['sms']} SMs, "
        f"{tiles['min']}..{tiles['max']} tiles per consumer, {summary['dropped']} records dropped",
        f"tensor cores busy, share of each SM's span averaged over SMs: {_coverage_text(summary)}",
        f"epilogues hidden behind the other consumer's mainloop {summary['epilogue_hidden_fraction']:.1%}; "
        f"both consumers in mainloop at once {_us(summary['mainloop_overlap_ns'])} us",
        f"producer waiting for a free stage {summary['producer_stall_fraction']:.1%} of its span "
        f"({_us(summary['producer_stall_ns'])} us over all CTAs)",
        tile_line,
        f"CTA end spread {_us(end['spread_ns'])} us (the earliest CTA finished that long before the last)",
    ] + ([f"SM clock over the kernel (cycles against the timer): median {clock['median']:.0f} MHz "
          f"(min {clock['min']:.0f}, max {clock['max']:.0f})"] if clock.get("count") else []))


# --------------------------------------------------------------------------------------------------------------
# Building buffers (tests, docs)
# --------------------------------------------------------------------------------------------------------------

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


__all__ = ["Trace", "plot_compare", "capacity_for", "header_bytes", "buffer_bytes", "build_buffer", "synthetic_buffer",
           "format_summary", "CODES", "CODE_NAMES", "ROLE_NAMES", "SPAN_KINDS"]
