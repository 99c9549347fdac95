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

Decoding, checking and the cycle-to-time mapping are ptxgemm.tools.trace_decode; this module holds the Trace they
give, its summary, the Chrome trace export and the PNGs. Everything here is numpy on the host; matplotlib is
imported only inside the PNG functions.
"""
from __future__ import annotations

import copy
import json

import numpy as np

from ..errors import ConfigError
from ..kernel.trace_format import (CONSUMER0, CONSUMER1, CONSUMER_CYCLE, CONSUMER_ROLES, PRODUCER, PRODUCER_CYCLE,
                                   ROLES, ROLE_NAMES)
from ..runtime import driver
from .trace_decode import (CONSUMER_SPANS, LOAD_DTYPE, NO_MARK, SPAN_KINDS, TENSOR_BUSY, TILE_DTYPE, clock_mhz,
                           cycle_table, decode, distribution, dropped_warnings, fraction, merge, overlap_length,
                           refine_times, span_table, union_length, validate)

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
        self.tiles = cycle_table(rel, records, count, self.cta_smid, CONSUMER_CYCLE, TILE_DTYPE)
        self.loads = cycle_table(rel, records, count, self.cta_smid, PRODUCER_CYCLE, LOAD_DTYPE)
        self.spans = span_table(self.tiles, self.loads)
        self.warnings = dropped_warnings(header, self.capacity)
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
        header, records = decode(raw, ctas, capacity)
        validate(header, records)
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
            busy = union_length(self.tiles[TENSOR_BUSY[0]][on], self.tiles[TENSOR_BUSY[1]][on])
            out[sm] = fraction(busy, last - first)
        return out

    def _pingpong_overlaps(self) -> tuple[int, int, int]:
        """(epilogue ns hidden behind the peer's mainloop, all epilogue ns, ns both consumers were in mainloop)."""
        hidden = epilogue = overlap = 0
        for cta in range(self.ctas):
            mainloop = {role: self._consumer_intervals(cta, role, *CONSUMER_SPANS["mainloop"])
                        for role in CONSUMER_ROLES}
            overlap += overlap_length(mainloop[CONSUMER0], mainloop[CONSUMER1])
            for role, peer in ((CONSUMER0, CONSUMER1), (CONSUMER1, CONSUMER0)):
                epi = self._consumer_intervals(cta, role, *CONSUMER_SPANS["epilogue"])
                hidden += overlap_length(epi, mainloop[peer])
                epilogue += int((epi[1] - epi[0]).sum())
        return hidden, epilogue, overlap

    def _producer_stalls(self) -> tuple[float, int]:
        """(empty-stage wait over the producer's span, averaged over CTAs; total wait ns)."""
        waits = self.spans_of("empty_wait")
        per_cta = np.bincount(waits["cta"], weights=waits["end"] - waits["start"], minlength=self.ctas)
        span = self.role_last_ns[:, PRODUCER] - self.role_first_ns[:, PRODUCER]
        fractions = [fraction(w, s) for w, s in zip(per_cta, span)]
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
            "epilogue_hidden_fraction": fraction(hidden, epilogue),
            "mainloop_overlap_ns": overlap,
            "producer_stall_fraction": stall_fraction,
            "producer_stall_ns": stall_ns,
            "tile_mainloop_ns": distribution(self.tiles[TENSOR_BUSY[1]] - self.tiles[TENSOR_BUSY[0]]),
            "end_imbalance": {"spread_ns": int(cta_end.max() - cta_end.min()),
                              "gap_ns": (self.kernel_end_ns - cta_end).tolist(),  # per CTA: idle before the end
                              "smid": self.cta_smid.tolist()},
            "tiles_per_consumer": {"min": int(per_consumer.min()), "max": int(per_consumer.max())},
            "sm_clock_mhz": clock_mhz(self.ns_per_cycle),
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
            s, e = merge(on[begin], on[end])
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
