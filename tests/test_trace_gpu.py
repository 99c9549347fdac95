"""The traced kernels on the GPU: the events show the schedule the kernel was built to run.

At 8448x9216x1024 (66 x 72 tiles, 36 per CTA on 132 SMs, 18 per consumer, 16 k-tiles each) the trace must show
- every tile and every k-tile of the static schedule, on the CTA and consumer the schedule gives it;
- the two consumers' mainloops (first stage landed .. last wgmma issued) never overlapping on an SM: the math-order
  barrier hands the tensor cores over;
- epilogues running under the other consumer's mainloop: the point of pingpong;
- a first-to-last event span within 5% of the CUDA-event time of the same launch: the spans account for the kernel.

PTXGEMM_TRACE_OUT=DIR also writes that run's summary, Chrome trace and PNGs there (docs/results/h100/trace/ holds the
committed ones).

The cooperative schedule and split-K (both schedules), traced: the result still right against float64 on every
element, every role's records exactly the paths its schedule gives each of its tiles (trace_format.consumer_paths:
a split-K unit a partial's or the final's), both halves of a cooperative tile in their mainloops together, and a
final split's wait ending only after its tile's partials were published.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
from pathlib import Path

import numpy as np
import pytest

from gemm_reference import check_result
from ptxgemm import gemm
from ptxgemm.kernel import trace_format
from ptxgemm.kernel.config import GemmConfig
from ptxgemm.kernel.schedule import plan_for
from ptxgemm.runtime import arrays, driver
from ptxgemm.tools import tracing
from ptxgemm.tools.trace import Trace
from ptxgemm.tools.trace_decode import NO_TIME

gpu = pytest.mark.gpu
SHAPE = (8448, 9216, 1024)
MIN_HIDDEN_FRACTION = 0.5       # of all epilogue time, under the peer's mainloop
MIN_OVERLAPPING_EPILOGUES = 0.9  # of the epilogues that have a peer tile after them


def _schedule(rec, config: GemmConfig, ctas=None):
    m, n, k = rec.trace.meta["shape"]
    return plan_for(config, m, n, k, rec.trace.meta["sm_count"], ctas)


def _path(config: GemmConfig, sched, unit: int, first: int = 0, count: int | None = None) -> str:
    """The consumer path (trace_format.consumer_paths) scheduler unit `unit` takes (a stream-K segment: the one
    that starts at position `first` for `count` k-tiles)."""
    if config.stream_k:
        return "tile" if count == sched.k_tiles else "final" if first == 0 else "partial"
    if not config.split_k:
        return "tile"
    return "final" if unit % sched.splits == sched.splits - 1 else "partial"


def _check_against_schedule(rec, config: GemmConfig, ctas=None):
    """Every role's records are what the static schedule gives it: the consumer's units in walk order (pingpong:
    alternate steps; cooperative: every step, on both consumers), each along its path, and the producer's k-tiles."""
    t = rec.trace
    sched = _schedule(rec, config, ctas)
    assert t.schedule == config.schedule and t.split_k == (config.split_k or config.stream_k)
    assert t.ctas == sched.grid and t.warnings == [] and not t.header["dropped"].any()
    assert np.all(t.records["value"][:, :, 0] == sched.k_tiles)  # ROLE_START carries k-tiles per tile
    count = t.header["count"].astype(int)
    paths = trace_format.consumer_paths(config.schedule)
    if not (config.split_k or config.stream_k):
        assert count.max() == t.capacity  # the plan sized the slices for exactly the busiest role
    for cta in range(t.ctas):
        cluster = cta // config.cluster_size
        loaded = 0
        for consumer, role in enumerate(trace_format.CONSUMER_ROLES):
            rows = t.tiles[(t.tiles["cta"] == cta) & (t.tiles["role"] == role)]
            if config.stream_k:
                walk = sched.cluster_walk(cluster)
            else:
                step, first = (1, 0) if config.cooperative else (2, consumer)
                units = [cluster + (first + step * j) * sched.clusters
                         for j in range(sched.consumer_tiles(cluster, consumer))]
                walk = [(unit, 0, sched.unit_k_tiles(unit)) for unit in units]   # a split lead: each split's own
            assert rows["tile"].tolist() == [unit for unit, _, _ in walk], (cta, role)
            taken = [_path(config, sched, *segment) for segment in walk]
            assert count[cta, role] == trace_format.BRACKET_RECORDS + sum(len(paths[p]) for p in taken), (cta, role)
            assert ((rows["partial_stored"] != NO_TIME) == [p == "partial" for p in taken]).all(), (cta, role)
            assert ((rows["fixup_done"] != NO_TIME) == [p == "final" for p in taken]).all(), (cta, role)
            # the producer loads each unit once: both cooperative consumers walk them all, pingpong's share them
            loaded = (0 if config.cooperative else loaded) + sum(n for _, _, n in walk)
        loads = t.loads[t.loads["cta"] == cta]
        assert loads["tile"].tolist() == list(range(loaded)), cta  # pos 0, 1, ... in order
        assert count[cta, trace_format.PRODUCER] == trace_format.BRACKET_RECORDS + 2 * loaded
    leaders = (t.tiles["cta"] % config.cluster_size == 0) & (
        (t.tiles["role"] == trace_format.CONSUMER0) if config.cooperative else True)
    if config.stream_k:   # a unit's segments lie on several clusters; its whole run or final stores it, once
        stored = t.tiles["tile"][leaders & (t.tiles["partial_stored"] == NO_TIME)]
        assert sorted(stored.tolist()) == list(range(sched.units))
    else:
        assert sorted(t.tiles["tile"][leaders].tolist()) == list(range(sched.units))


@pytest.fixture(scope="module")
def recording():
    return tracing.record(*SHAPE, GemmConfig())


@gpu
def test_traced_result_is_right(recording):
    assert recording.verdict.ok, recording.verdict


@gpu
def test_trace_holds_the_whole_schedule(recording):
    _check_against_schedule(recording, GemmConfig())
    smid = recording.trace.cta_smid
    assert len(set(smid.tolist())) == recording.trace.ctas  # persistent: one CTA per SM
    assert smid.max() < recording.trace.meta["sm_count"]


@gpu
def test_mainloops_never_overlap_on_an_sm(recording):
    t = recording.trace
    mainloops = t.spans_of("mainloop")
    for cta in range(t.ctas):
        rows = mainloops[mainloops["cta"] == cta]
        rows = rows[np.argsort(rows["start"], kind="stable")]
        assert np.all(rows["start"][1:] >= rows["end"][:-1]), cta
        roles = rows["role"].tolist()
        assert roles == [trace_format.CONSUMER_ROLES[i % 2] for i in range(len(roles))], cta  # they alternate
    assert t.summary()["mainloop_overlap_ns"] == 0


@gpu
def test_epilogues_run_under_the_peer_mainloop(recording, device_report):
    t = recording.trace
    summary = t.summary()
    hidden = summary["epilogue_hidden_fraction"]
    epilogues, mainloops = t.spans_of("epilogue"), t.spans_of("mainloop")
    overlapping = followed = 0
    for cta in range(t.ctas):
        peer_loops = {role: mainloops[(mainloops["cta"] == cta) & (mainloops["role"] != role)]
                      for role in trace_format.CONSUMER_ROLES}
        for e in epilogues[epilogues["cta"] == cta]:
            peer = peer_loops[e["role"]]
            if not len(peer) or peer["end"].max() <= e["start"]:
                continue  # the CTA's last tiles: no peer mainloop left to hide under
            followed += 1
            overlapping += bool(np.any((peer["start"] < e["end"]) & (peer["end"] > e["start"])))
    device_report(f"trace {SHAPE}: epilogues hidden {hidden:.1%}; {overlapping}/{followed} epilogues with a peer "
                  f"tile after them overlap its mainloop; tensor cores busy "
                  f"{summary['tensor_core_coverage']['mean']:.1%} of each SM's span")
    assert hidden >= MIN_HIDDEN_FRACTION
    assert followed and overlapping >= MIN_OVERLAPPING_EPILOGUES * followed


SPAN_LAUNCHES = 5   # traced launches whose span is compared with their own event time; the median one must agree


@gpu
def test_spans_account_for_the_event_timed_launch(recording, device_report):
    """The trace's time base is right: a launch's first-to-last event span matches its CUDA-event time. Each launch
    is compared with itself; the median of five is tested because a launch's start-up latency, which no event inside
    the kernel sees, is 4 us on most runs and up to 30 us on some (H100, 2026-11-21), while a wrong time base would
    be off in every launch."""
    recordings = [recording] + [tracing.record(*SHAPE, GemmConfig()) for _ in range(SPAN_LAUNCHES - 1)]
    ranked = sorted(recordings, key=tracing.span_agreement)
    median = ranked[len(ranked) // 2]
    agreement = tracing.span_agreement(median)
    device_report(f"trace {SHAPE}: first-to-last event {median.trace.kernel_end_ns / 1e3:.1f} us, CUDA events "
                  f"{median.event_ms * 1e3:.1f} us ({agreement:+.2%}, the median of {SPAN_LAUNCHES} launches: "
                  + ", ".join(f"{tracing.span_agreement(r):+.1%}" for r in ranked) + "); SM clock "
                  f"{median.trace.summary()['sm_clock_mhz'].get('median', float('nan')):.0f} MHz")
    assert abs(agreement) <= tracing.SPAN_TOLERANCE, agreement


@gpu
def test_write_artifacts_when_asked(recording):
    out = os.environ.get("PTXGEMM_TRACE_OUT")
    if not out:
        pytest.skip("PTXGEMM_TRACE_OUT not set: nothing to write")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t = recording.trace
    t.to_chrome(out / "trace.json.gz")
    with open(out / "summary.json", "w") as f:
        json.dump({"meta": t.meta, "summary": t.summary(), "event_ms": recording.event_ms,
                   "span_vs_events": tracing.span_agreement(recording), "check": str(recording.verdict)},
                  f, indent=1, default=str)
    pytest.importorskip("matplotlib")
    t.plot_sm(out / "sm.png")
    t.plot_overview(out / "overview.png")


@gpu
@pytest.mark.parametrize("config,shape,ctas", [
    (GemmConfig(cluster_m=2, a_major="mn"), (1000, 1000, 1000), 4),
    (GemmConfig(block_m=64, block_n=256, out_dtype="float32", b_major="k"), (700, 1300, 904), 3),
], ids=["cluster2-1000cube-4ctas", "64x256-fp32-3ctas"])
def test_small_grids_trace_every_tile(config, shape, ctas):
    """Few CTAs, so every consumer runs several tiles; clusters number their tiles by cluster unit."""
    rec = tracing.record(*shape, config, ctas=ctas)
    assert rec.verdict.ok, rec.verdict
    _check_against_schedule(rec, config, ctas)


@gpu
def test_an_fp8_trace_is_checked_by_the_fp8_bound():
    """trace's own check of a per-tensor fp8 launch (64x2112x7168, issue 49's row) uses the fp8 bound: the bound of
    16-bit inputs failed this right kernel (run 120)."""
    fp8 = dict(in_dtype="float8_e4m3fn", out_dtype="bfloat16", a_major="k", b_major="k")
    rec = tracing.record(64, 2112, 7168, GemmConfig.from_tag("pp64x64k2s13", **fp8))
    assert rec.verdict.ok, rec.verdict


# ---- the cooperative schedule and split-K

CROSS_SM_SLACK_NS = 500   # two SMs' events placed on one time base: each CTA's cycles fitted to its own timer anchors


@functools.cache   # the three tests below look at the same launch of each case
def _traced(shape, config: GemmConfig, ctas=None, seed=0):
    """One traced launch of `config` on random operands; (Trace with the schedule's meta, every element checked
    against float64)."""
    m, n, k = shape
    config = dataclasses.replace(config, trace=True)
    _, a, b = tracing._operands(m, n, k, config, seed)
    out = arrays.DeviceArray.empty((m, n), np.dtype(config.out_dtype))
    out.poison()
    plan = gemm.GemmPlan(arrays.DeviceArray.from_numpy(a), arrays.DeviceArray.from_numpy(b), out, config, ctas=ctas)
    assert plan.config == config    # the config asked for runs, not another the plan picked
    plan.launch()
    trace = Trace.from_plan(plan, {"sm_count": driver.device_info().sm_count})
    return trace, check_result(out.to_numpy(), a, b)


COOPERATIVE_CASES = [
    (GemmConfig.from_tag("coop128x256"), (2112, 2304, 1024), 16),
    (GemmConfig.from_tag("coop256x128c2"), (1000, 1000, 1000), 4),
    (GemmConfig.from_tag("coop128x256k4"), (256, 4096, 8192), None),
    (GemmConfig.from_tag("coop128x256", splits=3), (700, 1300, 2048), 5),
    (GemmConfig.from_tag("pp64x128k2"), (128, 4096, 8192), None),
    (GemmConfig.from_tag("pp64x128", splits=3), (300, 1000, 2048), 3),
    (GemmConfig.from_tag("coop128x256sk"), (4 * 128 - 8, 3 * 256 - 8, 20 * 64 - 8), 5),
    (GemmConfig.from_tag("coop128x256c2sk"), (2000, 7000, 1000), None),
    # a split lead: the final's longer k-range, and over 3 CTAs each ring alternating finals and partials
    (GemmConfig.from_tag("pp64x64k2l7s13"), (300, 1000, 4096), 3),
    (GemmConfig.from_tag("coop128x256k2l4"), (700, 1300, 2048), 5),
]
CASE_IDS = ["coop128x256-16ctas", "coop256x128c2-4ctas", "coop-splitk4", "coop-splitk3-5ctas", "pp-splitk2",
            "pp-splitk3-3ctas", "coop-streamk-5ctas", "coop-streamk-pairs", "pp-splitk2-lead-3ctas",
            "coop-splitk2-lead-5ctas"]


@gpu
@pytest.mark.parametrize("config,shape,ctas", COOPERATIVE_CASES, ids=CASE_IDS)
def test_cooperative_and_split_k_traces_follow_the_schedule(config, shape, ctas, device_report):
    trace, verdict = _traced(shape, config, ctas)
    assert verdict.ok, verdict
    rec = tracing.Recording(trace, 0.0, verdict, {})
    _check_against_schedule(rec, config, ctas)
    summary = trace.summary()
    line = f"trace {config.tag} {shape} ctas {ctas}: tensor cores busy {summary['tensor_core_coverage']['mean']:.1%}"
    if config.cooperative:
        line += f", epilogue {summary['epilogue_share']:.1%} of the tiles' time"
        assert 0 < summary["epilogue_share"] < 1
    if config.split_k or config.stream_k:
        split = summary["split_k"]
        line += (f", split-K: fix-up wait median {split['fixup_wait_ns'].get('median', 0) / 1e3:.2f} us, "
                 f"{split['fixup_wait_share']:.1%} of the consumers' time")
    device_report(line)


@gpu
@pytest.mark.parametrize("config,shape,ctas", [c for c in COOPERATIVE_CASES if c[0].cooperative and not c[0].stream_k],
                         ids=[i for i, c in zip(CASE_IDS, COOPERATIVE_CASES) if c[0].cooperative and not c[0].stream_k])
def test_cooperative_halves_share_each_mainloop(config, shape, ctas):
    """Both consumers read the same stages, so neither can run more than the ring's stages ahead of the other:
    with more k-tiles than stages, their mainloops of one tile overlap in time."""
    trace, _ = _traced(shape, config, ctas)
    sched = plan_for(config, *shape, trace.meta["sm_count"], ctas)
    assert sched.k_tiles > config.num_stages
    t = trace.tiles
    for cta in range(trace.ctas):
        halves = [t[(t["cta"] == cta) & (t["role"] == role)] for role in trace_format.CONSUMER_ROLES]
        assert np.all(halves[0]["tile"] == halves[1]["tile"])
        assert np.all((halves[0]["mainloop_start"] < halves[1]["mma_issued"])
                      & (halves[1]["mainloop_start"] < halves[0]["mma_issued"])), cta


@gpu
@pytest.mark.parametrize("config,shape,ctas", [c for c in COOPERATIVE_CASES if c[0].split_k],
                         ids=[i for i, c in zip(CASE_IDS, COOPERATIVE_CASES) if c[0].split_k])
def test_a_final_split_waits_for_its_partials(config, shape, ctas):
    """Each (work tile, consumer half) has splits - 1 partials and one final, and the final's wait ends after
    every partial of its tile was published (within the slack of placing two SMs' clocks on one time base)."""
    trace, _ = _traced(shape, config, ctas)
    sched = plan_for(config, *shape, trace.meta["sm_count"], ctas)
    t = trace.tiles
    consumer_half = (t["role"] - trace_format.CONSUMER0) if config.cooperative else np.zeros(len(t), int)
    work = t["tile"] // sched.splits
    leaders = t["cta"] % config.cluster_size == 0
    for w in np.unique(work[leaders]):
        for half in np.unique(consumer_half):
            rows = t[leaders & (work == w) & (consumer_half == half)]
            partial = rows[rows["partial_stored"] != NO_TIME]
            final = rows[rows["splits_arrived"] != NO_TIME]
            assert len(partial) == sched.splits - 1 and len(final) == 1, (w, half)
            if len(partial):
                assert final["splits_arrived"][0] >= partial["partial_stored"].max() - CROSS_SM_SLACK_NS, (w, half)


@gpu
@pytest.mark.parametrize("config,shape,ctas", [c for c in COOPERATIVE_CASES if c[0].stream_k],
                         ids=[i for i, c in zip(CASE_IDS, COOPERATIVE_CASES) if c[0].stream_k])
def test_a_stream_k_final_waits_for_its_partials(config, shape, ctas):
    """Each tail unit (per CTA of the cluster and consumer half) has the partials Schedule.sk_partials names and
    one final, and the final's wait ends after every one of them was published (within the slack of placing two
    SMs' clocks on one time base)."""
    trace, _ = _traced(shape, config, ctas)
    sched = plan_for(config, *shape, trace.meta["sm_count"], ctas)
    t = trace.tiles
    rank = t["cta"] % config.cluster_size
    tails = [u for u in range(sched.dp_units, sched.units) if sched.sk_partials(u)]
    assert tails, sched.describe()
    for unit in tails:
        for r in range(config.cluster_size):
            for role in trace_format.CONSUMER_ROLES:
                rows = t[(t["tile"] == unit) & (rank == r) & (t["role"] == role)]
                partial = rows[rows["partial_stored"] != NO_TIME]
                final = rows[rows["splits_arrived"] != NO_TIME]
                assert len(partial) == len(sched.sk_partials(unit)) and len(final) == 1, (unit, r, role)
                assert final["splits_arrived"][0] >= partial["partial_stored"].max() - CROSS_SM_SLACK_NS, (unit, r)
