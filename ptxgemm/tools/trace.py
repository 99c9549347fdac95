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
from ..kernel.trace_format import (CONSUMER0, CONSUMER1, CONSUMER_CODES, CONSUMER_ROLES, PRODUCER, PRODUCER_CYCLE,
                                   ROLES, ROLE_NAMES)
from ..runtime import driver
from .trace_decode import (EPILOGUE_KINDS, LOAD_DTYPE, NO_MARK, NO_TIME, SPAN_KINDS, SPLIT_KINDS, TENSOR_BUSY,
                           TILE_DTYPE, clock_mhz, cycle_ends, cycle_start, cycle_table, decode, distribution,
                           dropped_warnings, fraction, merge, overlap_length, refine_times, row_end, schedule_of,
                           span_table, union_length, validate)

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
                "order_wait": WAIT_GREY, "data_wait": WAIT_GREY, "epilogue_wait": WAIT_GREY, "empty_wait": WAIT_GREY,
                "partial_store": "#9467bd", "fixup_wait": "#f2b6b6", "fixup": "#8c564b", "span": "#e6e6e6"}
#: legend key -> (colour, label)
LEGEND = {"mainloop": (SPAN_COLOURS["mainloop"], "mainloop (wgmmas issuing)"),
          "mma_tail": (SPAN_COLOURS["mma_tail"], "last wgmmas retiring"),
          "epilogue": (SPAN_COLOURS["epilogue"], "epilogue (| = store issued)"),
          "issue": (SPAN_COLOURS["issue"], "TMA loads issued"),
          "wait": (WAIT_GREY, "waiting"),
          "partial_store": (SPAN_COLOURS["partial_store"], "split-K / stream-K: partial tile to the workspace"),
          "fixup_wait": (SPAN_COLOURS["fixup_wait"], "split-K / stream-K: waiting for the partials"),
          "fixup": (SPAN_COLOURS["fixup"], "split-K / stream-K: adding the partials"),
          "busy": (SPAN_COLOURS["mainloop"], "a consumer's wgmmas in flight"),
          "epilogues": (SPAN_COLOURS["epilogue"], "epilogues"),
          "span": (SPAN_COLOURS["span"], "SM active (first to last event)")}
SM_LEGEND = ("mainloop", "mma_tail", "epilogue", "issue", "wait")
SPLIT_LEGEND = SPLIT_KINDS
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

    header[cta, role] and records[cta, role, j] are the raw structured arrays; schedule is the kernel's ("pingpong"
    or "cooperative", from the header); tiles (TILE_DTYPE, one row per consumer tile: in the cooperative schedule
    one per consumer half), loads (LOAD_DTYPE, one row per producer k-tile) and spans (SPAN_DTYPE) hold times in ns
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
        self.schedule = schedule = schedule_of(header)
        self.tiles = cycle_table(rel, records, count, self.cta_smid, CONSUMER_CODES, cycle_start(schedule, CONSUMER0),
                                 cycle_ends(schedule, CONSUMER0), TILE_DTYPE)
        self.loads = cycle_table(rel, records, count, self.cta_smid, PRODUCER_CYCLE, cycle_start(schedule, PRODUCER),
                                 cycle_ends(schedule, PRODUCER), LOAD_DTYPE)
        self.spans = span_table(self.tiles, self.loads)
        self.warnings = dropped_warnings(header, self.capacity)
        self._summary = self._consumer_spans = None

    @classmethod
    def from_plan(cls, plan, meta: dict | None = None) -> Trace:
        """The timeline of a traced GemmPlan's last launch (waits for the GPU): its buffer decoded, with the
        problem, config, GPU and grid in `meta` beside what the caller adds."""
        if plan.trace_buffer is None:
            raise ConfigError("plan: its config was built without trace=True; use GemmConfig(trace=True)")
        raw = plan.trace_buffer.to_numpy()
        info = driver.device_info()
        base = {"shape": (plan.m, plan.n, plan.k), "config": plan.config.describe(), "tag": plan.config.tag,
                "gpu": info.name, "grid": plan.grid, "schedule": plan.schedule.describe()}
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

    def _consumer_intervals(self, cta: int, role: int, kinds) -> tuple[np.ndarray, np.ndarray]:
        """(starts, ends) of the spans of `kinds` of one consumer of `cta`."""
        if self._consumer_spans is None:   # a few per tile, where the producer has two per k-tile: select once
            self._consumer_spans = self.spans[self.spans["role"] != PRODUCER]
        spans = self._consumer_spans
        spans = spans[(spans["cta"] == cta) & (spans["role"] == role)
                      & np.isin(spans["kind"], [SPAN_KINDS.index(k) for k in kinds])]
        return spans["start"], spans["end"]

    @property
    def split_k(self) -> bool:
        """The kernel ran split-K: its tiles took the partial and final paths."""
        return bool(np.any((self.tiles["partial_stored"] != NO_TIME) | (self.tiles["splits_arrived"] != NO_TIME)))

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
        """(epilogue ns hidden behind the peer's mainloop, all epilogue ns, ns both consumers were in mainloop);
        with split-K the partial stores, the waits for the other splits and the fix-ups count as epilogue."""
        hidden = epilogue = overlap = 0
        for cta in range(self.ctas):
            mainloop = {role: self._consumer_intervals(cta, role, ("mainloop",)) for role in CONSUMER_ROLES}
            overlap += overlap_length(mainloop[CONSUMER0], mainloop[CONSUMER1])
            for role, peer in ((CONSUMER0, CONSUMER1), (CONSUMER1, CONSUMER0)):
                epi = self._consumer_intervals(cta, role, EPILOGUE_KINDS)
                hidden += overlap_length(epi, mainloop[peer])
                epilogue += int((epi[1] - epi[0]).sum())
        return hidden, epilogue, overlap

    def _busy_gaps(self) -> np.ndarray:
        """Per CTA, the gaps between the stretches in which some consumer keeps the tensor cores busy (first wgmma
        of a tile to its last one retiring): the tensor cores' idle time between tiles, every CTA's together."""
        gaps = []
        for cta in range(self.ctas):
            rows = self.tiles[self.tiles["cta"] == cta]
            s, e = merge(rows[TENSOR_BUSY[0]], rows[TENSOR_BUSY[1]])
            gaps.append(s[1:] - e[:-1])
        return np.concatenate(gaps) if gaps else np.zeros(0, np.int64)

    def units(self) -> dict[str, np.ndarray]:
        """Per tile a CTA ran (both halves of a cooperative tile as one), in CTA and walk order: cta, tile, the
        first wgmma (mainloop_start), the last one retired (mma_retired), the epilogue's start, the tile's end
        (its last event) and the wait for its first stage (data_wait, the longer half's)."""
        t = self.tiles
        key = t["cta"].astype(np.int64) * (int(t["tile"].max(initial=0)) + 1) + t["tile"]
        keys, inverse = np.unique(key, return_inverse=True)

        def reduce(values, ufunc, initial):
            out = np.full(len(keys), initial, np.int64)
            ufunc.at(out, inverse, values)
            return out

        big = np.iinfo(np.int64).max
        return {"cta": reduce(t["cta"], np.minimum, big), "tile": reduce(t["tile"], np.minimum, big),
                "mainloop_start": reduce(t["mainloop_start"], np.minimum, big),
                "mma_retired": reduce(t["mma_retired"], np.maximum, 0),
                "epilogue_start": reduce(t["epilogue_start"], np.minimum, big),
                "end": reduce(row_end(t), np.maximum, 0),
                "data_wait": reduce(t["mainloop_start"] - t["order_acquired"], np.maximum, 0)}

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
        stall_fraction, stall_ns = self._producer_stalls()
        consumers = len(CONSUMER_ROLES)
        per_consumer = np.bincount(self.tiles["cta"] * consumers + self.tiles["role"] - CONSUMER0,
                                   minlength=consumers * self.ctas)
        cta_end = self.cta_end_ns
        summary = {
            "schedule": self.schedule,
            "ctas": self.ctas,
            "sms": len(coverage),
            "kernel_span_ns": self.kernel_end_ns,
            "tensor_core_coverage": {"mean": float(coverage.mean()), "min": float(coverage.min()),
                                     "max": float(coverage.max())},
        }
        if self.schedule == "pingpong":
            hidden, epilogue, overlap = self._pingpong_overlaps()
            summary.update({"epilogue_hidden_fraction": fraction(hidden, epilogue), "mainloop_overlap_ns": overlap})
        summary.update({
            "producer_stall_fraction": stall_fraction,
            "producer_stall_ns": stall_ns,
            "tile_mainloop_ns": distribution(self.tiles[TENSOR_BUSY[1]] - self.tiles[TENSOR_BUSY[0]]),
        })
        if self.schedule == "cooperative":
            summary.update(self._cooperative_measures())
        summary.update({
            "tensor_idle_gap_ns": distribution(self._busy_gaps()),
            "end_imbalance": {"spread_ns": int(cta_end.max() - cta_end.min()),
                              "gap_ns": (self.kernel_end_ns - cta_end).tolist(),  # per CTA: idle before the end
                              "smid": self.cta_smid.tolist()},
            "tiles_per_consumer": {"min": int(per_consumer.min()), "max": int(per_consumer.max())},
            "sm_clock_mhz": clock_mhz(self.ns_per_cycle),
            "dropped": int(self.header["dropped"].sum()),
        })
        if self.split_k:
            summary["split_k"] = self._split_measures()
        return summary

    def _cooperative_measures(self) -> dict:
        """Both consumers work on every tile, so the tile is the unit: its mainloop (the earlier half's first wgmma
        to the later half's last retiring), its epilogue (first EPILOGUE_START to the last store issued, or the
        partial stored), during which the tensor cores idle; and whether the producer's loads of the next tile,
        issued while the epilogue runs, have landed when its mainloop starts."""
        u = self.units()
        mainloop = u["mma_retired"] - u["mainloop_start"]
        epilogue = u["end"] - u["epilogue_start"]
        follows = np.r_[False, u["cta"][1:] == u["cta"][:-1]]     # a CTA's tiles after its first
        return {"tile_mainloop_ns": distribution(mainloop),
                "tile_epilogue_ns": distribution(epilogue),
                "epilogue_share": fraction(int(epilogue.sum()), int((u["end"] - u["mainloop_start"]).sum())),
                "next_tile_data_wait_ns": distribution(u["data_wait"][follows])}

    def _split_measures(self) -> dict:
        """Split-K, per consumer tile (a cooperative tile's halves each have their own flag): the partials' stores
        to the workspace, the finals' waits for the other splits and their fix-ups, and the share of the
        consumers' time spent waiting."""
        t = self.tiles
        partial, final = t["partial_stored"] != NO_TIME, t["splits_arrived"] != NO_TIME
        wait = t["splits_arrived"][final] - t["epilogue_start"][final]
        consumers = list(CONSUMER_ROLES)
        busy = int((self.role_last_ns[:, consumers] - self.role_first_ns[:, consumers]).sum())
        return {"partial_tiles": int(partial.sum()), "final_tiles": int(final.sum()),
                "partial_store_ns": distribution(t["partial_stored"][partial] - t["epilogue_start"][partial]),
                "fixup_wait_ns": distribution(wait),
                "fixup_ns": distribution(t["fixup_done"][final] - t["splits_arrived"][final]),
                "fixup_wait_share": fraction(int(wait.sum()), busy)}

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
        ax.legend(handles=_legend(self.legend_keys()), loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8,
                  frameon=False)
        ax.set_title(f"{_meta_title(self.meta)}\n{self._sm_caption(sm)}", fontsize=9)
        fig.tight_layout()
        fig.savefig(path)

    def legend_keys(self) -> tuple:
        return SM_LEGEND + (SPLIT_LEGEND if self.split_k else ())

    def typical_sms(self, count: int = 1) -> list[int]:
        """`count` SMs whose CTAs finished around the median time (default_sm first), in smid order after it."""
        order = np.argsort(self.cta_end_ns, kind="stable")
        middle = (self.ctas - 1) // 2
        picked = []
        for cta in np.r_[order[middle:], order[:middle][::-1]]:
            sm = int(self.cta_smid[cta])
            if sm not in picked:
                picked.append(sm)
            if len(picked) == count:
                break
        return picked[:1] + sorted(picked[1:])

    def _sm_rows(self, sm: int) -> list[tuple[int, int]]:
        by_sm = self.ctas_by_sm()
        if sm not in by_sm:
            raise ValueError(f"no CTA ran on SM {sm}; SMs in the trace: {min(by_sm)}..{max(by_sm)}")
        return [(int(cta), role) for cta in by_sm[sm] for role in range(ROLES)]

    def _draw_sm(self, ax, sm: int, label_width_ns: int | None = None) -> tuple[int, int]:
        """Draw SM `sm`'s roles as rows of `ax` (producer on top); returns the SM's first and last event."""
        return self._draw_sms(ax, [sm], label_width_ns)

    def _draw_sms(self, ax, sms: list, label_width_ns: int | None = None) -> tuple[int, int]:
        """Draw the roles of SMs `sms` as rows of `ax`, one SM under the other (each: producer on top); returns
        their first and last event. With several SMs each row is named after its SM."""
        rows = [(sm, cta, role) for sm in sms for cta, role in self._sm_rows(sm)]
        first, last = self._sm_window(np.concatenate([self.ctas_by_sm()[sm] for sm in sms]))
        min_label_us = LABEL_MIN_FRACTION * (label_width_ns or (last - first)) / 1e3
        for row, (_, cta, role) in enumerate(rows):
            self._draw_role(ax, row, cta, role, min_label_us=min_label_us)
        names = [(f"SM {sm} " if len(sms) > 1 else "") + self._track_name(cta, role) for sm, cta, role in rows]
        ax.set_yticks(range(len(rows)), names, fontsize=8 if len(sms) > 1 else None)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        return first, last

    def _sm_caption(self, sm: int) -> str:
        summary = self.summary()
        head = (f"SM {sm}: tensor cores busy {self.coverage_by_sm()[sm]:.1%} of its span; all SMs "
                f"{_coverage_text(summary)}")
        if self.schedule == "pingpong":
            return f"{head}; epilogues hidden {summary['epilogue_hidden_fraction']:.1%}"
        return f"{head}; epilogue {summary['epilogue_share']:.1%} of each tile's time"

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
                        ax.text(x + w / 2, row, str(tile), ha="center", va="center", fontsize=7, color="white",
                                clip_on=True)   # a zoomed panel cuts the bars; their labels too
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
        epilogues = self.spans[np.isin(self.spans["cta"], ctas)
                               & np.isin(self.spans["kind"], [SPAN_KINDS.index(k) for k in EPILOGUE_KINDS])]
        halves = (((on[TENSOR_BUSY[0]], on[TENSOR_BUSY[1]]), "mainloop", row - BAR_HALF),
                  ((epilogues["start"], epilogues["end"]), "epilogue", row))
        for (begin, end), colour, bottom in halves:
            s, e = merge(begin, end)
            ax.broken_barh(list(zip(s / 1e3, (e - s) / 1e3)), (bottom, BAR_HALF), facecolors=SPAN_COLOURS[colour])


def plot_compare(traces: list, path, sms: list | None = None, labels: list | None = None, sm_count: int = 1,
                 window_ns: int | None = None) -> None:
    """PNG of several traces (e.g. the two schedules or two tile shapes on one problem), one panel each, stacked on
    one time axis: each panel draws `sm_count` typical SMs (Trace.typical_sms; or the SMs in `sms`, one list or SM
    per trace) from the kernel's first event, so the kernel that does the work in less time has the shorter rows.
    `window_ns`: draw only that long a stretch, the same for every panel, centred on the middle of the shortest
    kernel (a zoom in which single epilogues are wide enough to see)."""
    if not traces:
        raise ValueError("plot_compare: no traces")
    if sm_count < 1 or (window_ns is not None and window_ns <= 0):
        raise ValueError(f"plot_compare: sm_count must be >= 1 and window_ns > 0, got {sm_count} and {window_ns}")
    sms = [t.typical_sms(sm_count) for t in traces] if sms is None else [s if isinstance(s, (list, tuple)) else [s]
                                                                         for s in sms]
    labels = [_meta_title(t.meta) for t in traces] if labels is None else list(labels)
    if not len(sms) == len(labels) == len(traces):
        raise ValueError(f"plot_compare: {len(traces)} traces need as many sms and labels, got {len(sms)} and "
                         f"{len(labels)}")
    windows = [t._sm_window(np.concatenate([t.ctas_by_sm()[sm] for sm in these])) for t, these in zip(traces, sms)]
    if window_ns is None:
        width_ns = max(last - first for first, last in windows)
        starts = [first for first, _ in windows]
    else:
        width_ns = window_ns
        start = max(0, min(t.kernel_end_ns for t in traces) // 2 - window_ns // 2)
        starts = [start] * len(traces)
    heights = [sum(len(t._sm_rows(sm)) for sm in these) for t, these in zip(traces, sms)]
    fig = _figure(PNG_WIDTH_IN, 1.2 + sum(SM_ROW_IN * h + 0.8 for h in heights))
    axes = fig.subplots(len(traces), 1, squeeze=False, gridspec_kw={"height_ratios": heights})[:, 0]
    for ax, t, these, label, start in zip(axes, traces, sms, labels, starts):
        t._draw_sms(ax, these, label_width_ns=width_ns)
        ax.set_xlim(start / 1e3, (start + width_ns) / 1e3)
        ax.set_title(f"{label}\n{t._sm_caption(these[0])}; kernel {t.kernel_end_ns / 1e3:.1f} µs", fontsize=9)
    axes[-1].set_xlabel("time since the kernel's first event (µs)")
    keys = tuple(dict.fromkeys(key for t in traces for key in t.legend_keys()))
    axes[0].legend(handles=_legend(keys), loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
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


def _distribution_text(dist: dict, what: str, unit: str = "tiles") -> str:
    if not dist["count"]:
        return f"{what}: none"
    return (f"{what}, us: min {_us(dist['min'])}, p10 {_us(dist['p10'])}, median {_us(dist['median'])}, "
            f"p90 {_us(dist['p90'])}, max {_us(dist['max'])}, mean {_us(dist['mean'])} over {dist['count']} {unit}")


def format_summary(summary: dict) -> str:
    """The summary as the command prints it: the pingpong lines (alternation, hidden epilogues) or the cooperative
    ones (each tile's mainloop and exposed epilogue), then split-K's when the kernel split."""
    dist, tiles, end = summary["tile_mainloop_ns"], summary["tiles_per_consumer"], summary["end_imbalance"]
    clock = summary.get("sm_clock_mhz", {})
    cooperative = summary.get("schedule") == "cooperative"
    head = [f"kernel {_us(summary['kernel_span_ns'])} us: {summary['ctas']} CTAs on {summary['sms']} SMs, "
            f"{tiles['min']}..{tiles['max']} tiles per consumer"
            + (" (cooperative: both consumers on every tile, half each)" if cooperative else "")
            + f", {summary['dropped']} records dropped",
            f"tensor cores busy, share of each SM's span averaged over SMs: {_coverage_text(summary)}"]
    stall = (f"producer waiting for a free stage {summary['producer_stall_fraction']:.1%} of its span "
             f"({_us(summary['producer_stall_ns'])} us over all CTAs)")
    if cooperative:
        gaps = summary["tensor_idle_gap_ns"]
        body = [_distribution_text(dist, "tile mainloop (the first half's first wgmma to the last half's last retired)"),
                _distribution_text(summary["tile_epilogue_ns"], "tile epilogue (EPILOGUE_START to the last store "
                                                                 "issued), tensor cores idle")
                + f"; {summary['epilogue_share']:.1%} of the tiles' time",
                _distribution_text(gaps, "tensor cores idle between tiles on an SM", "gaps"),
                _distribution_text(summary["next_tile_data_wait_ns"], "next tile's first stage waited for after an "
                                                                      "epilogue (the producer's prefetch)"),
                stall]
    else:
        tile_line = (_distribution_text(dist, "tile mainloop (first wgmma to last retired)") if dist["count"]
                     else "no complete consumer tile")
        body = [f"epilogues hidden behind the other consumer's mainloop {summary['epilogue_hidden_fraction']:.1%}; "
                f"both consumers in mainloop at once {_us(summary['mainloop_overlap_ns'])} us", stall, tile_line]
    tail = [f"CTA end spread {_us(end['spread_ns'])} us (the earliest CTA finished that long before the last)"]
    if clock.get("count"):
        tail.append(f"SM clock over the kernel (cycles against the timer): median {clock['median']:.0f} MHz "
                    f"(min {clock['min']:.0f}, max {clock['max']:.0f})")
    split = summary.get("split_k")
    if split:
        tail += [f"split-K: {split['partial_tiles']} partial and {split['final_tiles']} final consumer tiles; waiting "
                 f"for the other splits {split['fixup_wait_share']:.1%} of the consumers' time",
                 _distribution_text(split["partial_store_ns"], "  partial tile to the workspace (EPILOGUE_START to "
                                                               "PARTIAL_STORED)"),
                 _distribution_text(split["fixup_wait_ns"], "  final's wait for the other splits (EPILOGUE_START to "
                                                            "SPLITS_ARRIVED)"),
                 _distribution_text(split["fixup_ns"], "  fix-up, the partials added (SPLITS_ARRIVED to FIXUP_DONE)")]
    return "\n".join(head + body + tail)
