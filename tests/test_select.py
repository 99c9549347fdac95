"""ptxgemm.select.cost_model on the CPU: the candidates, the cost model, argument checks, and the tune cache's
precedence.

Every test injects its device (an object with .name and .sm_count), so nothing here depends on the machine's GPU.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import subprocess
import sys
from pathlib import Path

import pytest

import full_run
from ptxgemm import GemmConfig, select_config
from ptxgemm.errors import ConfigError
from ptxgemm.kernel import schedule
from ptxgemm.select import cost_model as S, memory_model as M, predict as P, tile_costs as C, tiles as T, tune_cache
from ptxgemm.select.problem import Problem
from ptxgemm.select.short_grid import ONE_WAVE_SPLITS, with_one_wave
from ptxgemm.select.split_lead import with_split_lead

REPO_ROOT = Path(__file__).resolve().parent.parent
LAYOUTS = (("k", "mn"), ("k", "k"), ("mn", "mn"), ("mn", "k"))
DTYPES = (("bfloat16", None), ("float16", "float16"), ("bfloat16", "float32"), ("float16", "float32"))
BF16_TAGS = {"pp128x128", "pp128x128c2", "pp128x192", "pp64x256", "pp64x256c2", "coop256x128", "coop256x128c2",
             "coop128x256", "coop128x256c2", "coop256x192", "pp128x128cn2", "pp128x192cn2", "coop256x128cn2",
             "coop128x256cn2", "coop256x192cn2", "pp64x128", "pp64x128c2", "coop128x128", "coop128x128c2",
             "coop128x128cn2", "pp128x160", "pp128x160cn2", "coop128x208", "coop128x208cn2", "coop256x160",
             "coop256x160cn2", "pp64x64", "pp64x64c2", "pp64x64cn2", "coop128x192", "coop128x192cn2",
             # transposed tiles (swap-AB); split-K variants of any tile share its tile tag
             "coop128x224", "coop128x224cn2",
             "pp128x16t", "pp128x32t", "pp128x64t", "pp64x16t", "pp64x32t", "pp64x64t"}


def FakeDevice(name: str = "Fake H100", sm_count=132, driver_version_str: str = "13.0") -> S.DeviceModel:
    """A device without a GPU: select's own DeviceModel, with an H100's numbers by default."""
    return S.DeviceModel(name, sm_count, driver_version_str)


H100 = FakeDevice()


@pytest.fixture(autouse=True)
def _cache_on(cache_dir, monkeypatch):
    """Every test: an empty tune cache of its own, switched on (whatever the caller's environment says)."""
    monkeypatch.delenv("PTXGEMM_TUNE_CACHE", raising=False)
    return cache_dir


@pytest.fixture(autouse=True)
def _tiles_only(request, monkeypatch):
    """The tile choice's tests run with the stream-K tail and the serpentine k-loop off (steps after the ranking,
    with tests of their own below, marked `stream_k` and `serpentine`)."""
    if "stream_k" not in request.keywords:
        monkeypatch.setattr(P, "SK_DTYPES", ())
    if "serpentine" not in request.keywords:
        monkeypatch.setattr(P, "SERPENTINE_DTYPES", ())


@pytest.mark.serpentine
@pytest.mark.stream_k
@pytest.mark.parametrize("shape, turned", [((8192, 8192, 8192), True), ((4096, 4096, 4096), True),
                                           ((4096, 4096, 14336), True), ((512, 14336, 4096), False),
                                           ((128, 4096, 4096), False), ((8448, 9216, 1024), True)])
def test_the_serpentine_k_loop_is_taken_after_two_whole_passes(shape, turned):
    """The selection's very last step (with_serpentine): a cooperative 16-bit pick whose walk makes at least two
    whole passes (the stream-K tail's shares not counted) turns its odd passes; fp8, pingpong and split-K picks do
    not; nor does a pick that already runs one pass or less."""
    cfg = select_config(*shape, device=H100)
    assert cfg.k_serpentine == turned, cfg.tag
    sched = schedule.plan_for(cfg, *shape, H100.sm_count)
    assert (sched.dp_units >= 2 * sched.clusters) == turned or not cfg.cooperative
    assert not select_config(*shape, "float8_e4m3fn", "bfloat16", "k", "k", device=H100).k_serpentine
    assert P.with_serpentine(cfg, *shape, H100.sm_count) == cfg
    for tag in ("pp128x128", "pp64x128k2", "coop128x256k2"):
        assert not P.with_serpentine(GemmConfig.from_tag(tag), 8192, 8192, 8192, 132).k_serpentine


@pytest.mark.stream_k
@pytest.mark.parametrize("shape, tail", [((8192, 8192, 8192), True), ((4096, 4096, 14336), True),
                                         ((5000, 5000, 5000), True), ((4096, 4096, 4096), False),
                                         ((8448, 9216, 1024), False), ((2816, 3072, 8192), False),
                                         ((256, 14336, 4096), False), ((512, 14336, 4096), True)])
def test_the_stream_k_tail_is_taken_where_the_model_says_it_saves_time(shape, tail):
    """The selection's last step (with_stream_k): the tail where the last wave is partly empty and the k-loop long
    enough (8192^3: 1024 cluster units on 66 clusters, 15.5 waves); not at 4096^3 (64 k-tiles: the fix-up costs as
    much as the 0.12 wave it saves), not on a short k-loop (8448x9216x1024: 16 k-tiles), not where the waves are whole
    (2816x3072: 132 cluster units, two waves), not without a full wave (256x14336: 112 units on 132 SMs, all tail),
    not for fp8 (unmeasured)."""
    cfg = select_config(*shape, device=H100)
    assert cfg.stream_k == tail, cfg.tag
    assert not select_config(*shape, "float8_e4m3fn", "bfloat16", "k", "k", device=H100).stream_k
    assert P.with_stream_k(cfg, *shape, H100.sm_count) == cfg


@pytest.mark.stream_k
def test_the_stream_k_tail_leaves_what_it_cannot_carry():
    for cfg in (GemmConfig.from_tag("pp128x128"), GemmConfig.from_tag("coop128x256", source_dtype="bfloat16"),
                GemmConfig.from_tag("coop128x256k2")):
        assert P.with_stream_k(cfg, 8192, 8192, 8192, 132) == cfg
    assert P.with_stream_k(GemmConfig.from_tag("coop128x256"), 8192, 8192, 8192, 132).stream_k


# ---- candidates

@pytest.mark.parametrize("in_dtype,out_dtype", DTYPES)
@pytest.mark.parametrize("a_major,b_major", LAYOUTS)
def test_every_candidate_is_valid_and_known_to_the_model(in_dtype, out_dtype, a_major, b_major):
    found = T.candidates(1000, 1000, 1000, in_dtype, out_dtype, a_major, b_major)
    assert found
    tags = [c.tag for c in found]
    assert len(set(tags)) == len(tags)
    for c in found:
        assert isinstance(c, GemmConfig)
        # a transposed config runs C^T = B^T A^T: its operands' majors trade places
        majors = (a_major, b_major) if not c.transposed_store else (b_major, a_major)
        assert (c.in_dtype, c.out_dtype, c.a_major, c.b_major) == (in_dtype, out_dtype or in_dtype, *majors)
        assert c.tile_tag in C.KTILE_NS and c.tile_tag in C.EPILOGUE_NS, f"{c.tag}: no cost in the model's tables"
        assert GemmConfig.from_tag(c.tag, in_dtype=c.in_dtype, out_dtype=c.out_dtype, a_major=c.a_major,
                                   b_major=c.b_major) == c


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
def test_candidates_are_every_accepted_tile_and_cluster(out_dtype):
    """Exactly the CANDIDATE_TILES x CLUSTER_SHAPES configs GemmConfig accepts, the SPLIT_TILES with every split
    count and the TRANSPOSED_TILES with every one (1 included); never 128x256 pingpong (256 accumulators per thread)
    or a cluster of 2 with block_n 192 (B's panels split unevenly)."""
    accepted = set()
    shapes = [(t, c, 1, "n") for t, c in itertools.product(T.CANDIDATE_TILES, T.CLUSTER_SHAPES)]
    shapes += [(t, (1, 1), sp, "n") for t in T.SPLIT_TILES for sp in T.SPLITS if sp > 1]
    shapes += [(t, (1, 1), sp, "m") for t in T.TRANSPOSED_TILES for sp in T.SPLITS]
    for (sched, bm, bn), (cm, cn), sp, c_major in shapes:
        try:
            accepted.add(GemmConfig(schedule=sched, block_m=bm, block_n=bn, cluster_m=cm, cluster_n=cn,
                                    out_dtype=out_dtype, splits=sp, c_major=c_major).tag)
        except ConfigError:
            pass
    tags = {c.tag for c in T.candidates(4096, 4096, 4096, out_dtype=out_dtype)}
    assert tags == accepted
    assert {GemmConfig.from_tag(t).tile_tag for t in tags} <= BF16_TAGS and {"pp128x128", "coop256x128", "pp128x128c2", "pp64x128k4", "pp128x16tk2"} <= tags


def test_model_tables_are_positive_and_keyed_alike():
    assert C.KTILE_NS.keys() == C.EPILOGUE_NS.keys()
    assert all(v > 0 for v in (*C.KTILE_NS.values(), *C.EPILOGUE_NS.values()))


# ---- the cost model

@pytest.fixture
def compute_only(monkeypatch):
    """The memory model out of the way (no latency, unbounded bandwidth): predictions are the compute model's."""
    for key, value in (("latency_ns", 0.0), ("dram_bytes_per_ns", 1e15), ("sm_bytes_per_ns", 1e15)):
        monkeypatch.setitem(M.MEMORY["H100"], key, value)


def test_pingpong_prediction_hides_all_but_the_last_epilogue(compute_only):
    cfg = GemmConfig()  # pp128x128
    p = P.predict(cfg, 8448, 9216, 512, 132)
    assert (p.tiles_m, p.tiles_n, p.k_tiles, p.steps) == (66, 72, 8, 36)
    kt, epi = C.KTILE_NS["pp128x128"], C.EPILOGUE_NS["pp128x128"]
    assert p.total_ns == pytest.approx(36 * 8 * kt + epi)


def test_pingpong_step_costs_the_epilogue_when_it_is_longer(monkeypatch, compute_only):
    """An epilogue longer than the peer's mainloop cannot hide: the step takes the epilogue's time."""
    monkeypatch.setitem(C.EPILOGUE_NS, "pp128x128", 10_000.0)
    p = P.predict(GemmConfig(), 8448, 9216, 64, 132)
    assert p.total_ns == pytest.approx(36 * 10_000.0 + 10_000.0)


def test_cooperative_prediction_pays_every_epilogue(compute_only):
    cfg = GemmConfig(schedule="cooperative", block_m=256, block_n=128)
    p = P.predict(cfg, 8448, 9216, 512, 132)
    assert (p.tiles_m, p.tiles_n, p.steps) == (33, 72, 18)
    assert p.total_ns == pytest.approx(18 * (8 * C.KTILE_NS["coop256x128"] + C.EPILOGUE_NS["coop256x128"]))


def test_cluster_steps_count_cluster_rows_and_clusters():
    cfg = GemmConfig(cluster_m=2)
    p = P.predict(cfg, 8448, 9216, 512, 132)
    units = math.ceil(66 / 2) * 72
    assert p.steps == math.ceil(units / (132 // 2))
    # fewer units than clusters: one step each, not a fraction
    assert P.predict(cfg, 128, 256, 64, 132).steps == 1
    assert P.predict(GemmConfig(), 1, 8, 1, 132).steps == 1


def test_unknown_tag_is_a_config_error():
    with pytest.raises(ConfigError, match="no measured cost"):
        P.predict(GemmConfig(group_m=4), 256, 256, 256, 132)


def test_the_tables_drive_the_choice(monkeypatch):
    """Refitting a table changes the selection: the model has no other opinion (with the memory model out of the
    way: a compute table cannot make a launch faster than its memory traffic)."""
    monkeypatch.setitem(M.MEMORY["H100"], "latency_ns", 0.0)
    monkeypatch.setitem(M.MEMORY["H100"], "dram_bytes_per_ns", 1e12)
    monkeypatch.setitem(M.MEMORY["H100"], "sm_bytes_per_ns", 1e12)
    shape = (4096, 4096, 4096)
    monkeypatch.setitem(C.KTILE_NS, "coop256x192", 1.0)
    assert select_config(*shape, device=H100).tag == "coop256x192"
    monkeypatch.setitem(C.KTILE_NS, "coop128x256c2", 0.1)
    monkeypatch.setitem(C.EPILOGUE_NS, "coop128x256c2", 0.1)
    assert select_config(*shape, device=H100).tag == "coop128x256c2"


def test_ties_go_to_the_earlier_candidate(monkeypatch, compute_only):
    for tag in C.KTILE_NS:
        monkeypatch.setitem(C.KTILE_NS, tag, 100.0)
        monkeypatch.setitem(C.EPILOGUE_NS, tag, 0.0)
    # M = 1, N = 64: every candidate runs one 1-k-tile step (compute-bound: the memory model is out of the way)
    assert select_config(1, 64, 64, device=H100).tag == S.SELECTABLE[0]


def test_sm_count_matters():
    """On one SM every tile is a step of its own: the cheapest tile per flop wins, and no 2-CTA cluster fits."""
    one_sm = FakeDevice("one SM", 1)
    rows = S.explain(4096, 4096, 4096, device=one_sm)
    assert not any(r["tag"].endswith("c2") for r in rows)
    assert select_config(4096, 4096, 4096, device=one_sm).tag == rows[0]["tag"]
    cfg = GemmConfig.from_tag(rows[0]["tag"])
    # every tile, padded ones included, on one SM
    assert rows[0]["steps_per_cta"] == math.ceil(4096 / cfg.block_m) * math.ceil(4096 / cfg.block_n)


def test_only_selectable_configs_are_chosen_and_near_ties_go_to_the_earlier(monkeypatch):
    """A config outside SELECTABLE (and WAVE_FILL_TILES) is never chosen however cheap the model thinks it; a
    selectable one predicted within TIE_FRACTION of the fastest yields to an earlier one in SELECTABLE."""
    shape = (4096, 4096, 4096)
    monkeypatch.setitem(C.KTILE_NS, "pp64x256", 1.0)
    assert select_config(*shape, device=H100).tag in S.SELECTABLE
    def per_flop(tag, scale=1.0):  # the same cost per flop for every tile
        cfg = GemmConfig.from_tag(tag)
        return 1000.0 * cfg.block_m * cfg.block_n / (128 * 128) * scale

    for tag in C.KTILE_NS:
        monkeypatch.setitem(C.EPILOGUE_NS, tag, 0.0)
        monkeypatch.setitem(C.KTILE_NS, tag, per_flop(tag))
    first, second = S.SELECTABLE[0], S.SELECTABLE[2]   # 128x256 and 256x128: 512 tiles, 4 steps each at 4096^3
    first = S.MULTICAST_FIRST if shape[2] >= S.MULTICAST_MIN_K else first    # a long k-loop: the pair sharing B
    monkeypatch.setitem(C.KTILE_NS, second, per_flop(second, 1 / (1 + S.TIE_FRACTION / 2)))
    assert select_config(*shape, device=H100).tag == first
    monkeypatch.setitem(C.KTILE_NS, second, per_flop(second, 1 / (1 + 2 * S.TIE_FRACTION)))
    assert select_config(*shape, device=H100).tag == second


def test_a_long_k_loop_ties_go_to_the_pair_sharing_b():
    """Within a tie, K >= MULTICAST_MIN_K over at least MULTICAST_MIN_STEPS tiles per SM takes the cooperative
    128x256 in cluster pairs (B multicast: less L2 traffic per FLOP, measured faster under sustained load); a
    shorter k-loop, or a grid of one partial wave, keeps the single CTA."""
    assert select_config(8192, 8192, 8192, device=H100).tag == S.MULTICAST_FIRST
    assert select_config(4096, 14336, S.MULTICAST_MIN_K, device=H100).tag == S.MULTICAST_FIRST
    assert select_config(8448, 9216, 1024, device=H100).tag == "coop128x256"
    assert select_config(512, 8192, 8192, device=H100).tag == "coop128x256"


@pytest.mark.stream_k
@pytest.mark.parametrize("shape, lean", [((6144, 6144, 6144), True), ((8192, 8192, 8192), True),
                                         ((16384, 16384, 8192), True), ((8448, 9216, 2048), True),
                                         ((4096, 4096, 4096), False), ((4096, 4096, 14336), False),
                                         ((4096, 14336, 4096), False), ((8448, 9216, 1024), False)])
def test_a_long_k_loop_goes_to_the_lean_tile_where_it_is_predicted_faster_than_the_pair(shape, lean, monkeypatch):
    """The pair yields to LEAN_FIRST (256x192: fewer operand bytes per FLOP) where the model, each with the stream-K
    tail the selection would give it, predicts the lean tile faster: not where a 4096-wide side pads it, and not on
    a short k-loop. When the tables make the lean tile slower than the pair, the pair is back."""
    assert (select_config(*shape, device=H100).tile_tag == S.LEAN_FIRST) == lean
    if lean:
        monkeypatch.setitem(C.KTILE_NS, S.LEAN_FIRST, C.KTILE_NS[S.LEAN_FIRST] * 1.05)
        assert select_config(*shape, device=H100).tile_tag == S.MULTICAST_FIRST


@pytest.mark.parametrize("shape, b_major", [((4096, 151936, 1536), "k"), ((4096, 8960, 1536), "k"),
                                            ((4096, 8960, 1536), "mn"), ((16384, 8960, 1536), "k")])
def test_the_lean_tile_goes_first_from_lean_min_k(shape, b_major, monkeypatch):
    """From K = LEAN_MIN_K (1536: a Qwen2-1.5B step's forward GEMMs) a tie goes to the lean 256x192 tile, measured
    ahead of coop128x256 under sustained load on the H200 (cost_model's comment); below it, and with the threshold
    put back at the pair's MULTICAST_MIN_K, to coop128x256 as before."""
    h200 = FakeDevice("NVIDIA H200")
    assert shape[2] >= S.LEAN_MIN_K
    assert select_config(*shape, b_major=b_major, device=h200).tile_tag == S.LEAN_FIRST
    assert select_config(shape[0], shape[1], 896, b_major=b_major, device=h200).tile_tag != S.LEAN_FIRST
    monkeypatch.setattr(S, "LEAN_MIN_K", S.MULTICAST_MIN_K)
    assert select_config(*shape, b_major=b_major, device=h200).tile_tag == "coop128x256"


def test_explain_is_sorted_and_matches_the_selection():
    rows = S.explain(8448, 9216, 1024, device=H100)
    # (a WHOLE_N_TILES tile only where it takes N whole: not 9216)
    assert {GemmConfig.from_tag(r["tag"]).tile_tag for r in rows} == \
        BF16_TAGS & set(S.SELECTABLE + S.WAVE_FILL_TILES) - set(S.WHOLE_N_TILES)
    assert set(rows[0]) == {"tag", "tiles", "k_tiles", "steps_per_cta", "predicted_us"}
    assert select_config(8448, 9216, 1024, device=H100).tag == rows[0]["tag"]
    table = S.format_table(rows, chosen=rows[0]["tag"])
    assert rows[0]["tag"] in table and "<- chosen" in table


# ---- select_config over many problems

SHAPES = list(itertools.product((1, 64, 200, 4096, 8448), (8, 136, 1000, 9216), (1, 64, 100, 8192)))


@pytest.mark.parametrize("in_dtype,out_dtype", DTYPES)
@pytest.mark.parametrize("a_major,b_major", LAYOUTS)
def test_select_config_returns_a_candidate_for_every_shape(in_dtype, out_dtype, a_major, b_major):
    allowed = {c.tag: c for c in T.candidates(1, 1, 1, in_dtype, out_dtype, a_major, b_major)}
    # the light run (tests/full_run.py) selects every shape, and again to check the choice is deterministic on some
    again = full_run.pick(len(SHAPES) // 8, len(SHAPES), "shapes whose selection is run twice (deterministic)")
    for i, (m, n, k) in enumerate(SHAPES):
        cfg = select_config(m, n, k, in_dtype, out_dtype, a_major, b_major, device=H100)
        # a candidate, with the deep ring and the split lead where the selection gives its tile those
        # (P.with_deep_ring, split_lead.with_split_lead)
        base = allowed.get(dataclasses.replace(cfg, stages=None, split_lead=0).tag)
        assert base is not None and with_split_lead(P.with_deep_ring(base), k) == cfg, (m, n, k)
        if i % (len(SHAPES) // again) == 0:
            assert select_config(m, n, k, in_dtype, out_dtype, a_major, b_major, device=H100) == cfg


def test_numpy_integers_and_dtype_objects_are_accepted():
    import ml_dtypes
    import numpy as np

    a = select_config(np.int64(4096), np.int32(4096), 4096, in_dtype=ml_dtypes.bfloat16, out_dtype=np.float32,
                      device=H100)
    assert a == select_config(4096, 4096, 4096, "bfloat16", "float32", device=H100)


def test_default_device_without_a_gpu(monkeypatch):
    from ptxgemm.runtime import driver

    monkeypatch.setattr(driver, "device_available", lambda: False)
    assert S.resolve_device(None) is S.DEFAULT_DEVICE and S.DEFAULT_DEVICE.sm_count == 132
    assert select_config(8448, 9216, 64) == select_config(8448, 9216, 64, device=S.DEFAULT_DEVICE)


# ---- arguments

@pytest.mark.parametrize("kwargs,argument", [
    (dict(m=0), "m"), (dict(n=-3), "n"), (dict(k=1.5), "k"), (dict(m=True), "m"), (dict(k="64"), "k"),
    (dict(in_dtype="float32"), "in_dtype"), (dict(in_dtype="nonsense"), "in_dtype"),
    (dict(out_dtype="int8"), "out_dtype"),
    (dict(a_major="row"), "a_major"), (dict(b_major="K"), "b_major"),
])
def test_bad_arguments_name_themselves(kwargs, argument):
    args = {"m": 256, "n": 256, "k": 256, **kwargs}
    for fn in (select_config, S.explain, T.candidates):
        extra = {} if fn is T.candidates else {"device": H100}
        with pytest.raises(ConfigError, match=rf"^{argument}: "):
            fn(**args, **extra)


@pytest.mark.parametrize("device", [object(), FakeDevice(sm_count=0), FakeDevice(sm_count=True),
                                    FakeDevice(sm_count=13.5)])
def test_bad_device_is_a_config_error(device):
    with pytest.raises(ConfigError, match="^device: "):
        select_config(256, 256, 256, device=device)


# ---- the tune cache comes first

def _store(tag, device=H100, problem=None):
    problem = problem or Problem(4096, 4096, 4096)
    return tune_cache.store(problem, device, tag, {tag: 1.0}, rounds=3)


def test_a_stored_winner_is_returned(cache_dir):
    heuristic = select_config(4096, 4096, 4096, device=H100)
    stored = "pp128x192" if heuristic.tag != "pp128x192" else "pp128x128"
    path = _store(stored)
    assert path == cache_dir / "tune.json"
    assert select_config(4096, 4096, 4096, device=H100) == GemmConfig.from_tag(stored)
    assert S.choose(4096, 4096, 4096, device=H100) == (GemmConfig.from_tag(stored), "tune cache")
    # anything else about the problem or the device: no hit
    for other in (FakeDevice(name="Fake H200"), FakeDevice(sm_count=114), FakeDevice(driver_version_str="12.8")):
        cfg, source = S.choose(4096, 4096, 4096, device=other)
        assert source == "cost model" and cfg.tag == S.explain(4096, 4096, 4096, device=other)[0]["tag"]
    assert S.choose(4096, 4096, 4096, out_dtype="float32", device=H100)[1] == "cost model"
    assert S.choose(4096, 4096, 4096, a_major="mn", device=H100)[1] == "cost model"
    assert S.choose(4096, 4096, 4097, device=H100)[1] == "cost model"


def test_stored_winner_gets_the_problems_dtypes_and_layouts():
    problem = Problem(512, 1024, 2048, "float16", "float32", "mn", "k")
    _store("coop128x256c2", problem=problem)
    cfg = select_config(512, 1024, 2048, "float16", "float32", "mn", "k", device=H100)
    assert cfg == GemmConfig.from_tag("coop128x256c2", in_dtype="float16", out_dtype="float32", a_major="mn",
                                      b_major="k")


@pytest.mark.parametrize("value", ["off", "0", "OFF", " off "], ids=["off", "0", "OFF", "padded"])
def test_env_off_disables_the_cache(monkeypatch, value):
    heuristic = select_config(4096, 4096, 4096, device=H100)
    _store("pp128x192" if heuristic.tag != "pp128x192" else "pp128x128")
    monkeypatch.setenv("PTXGEMM_TUNE_CACHE", value)
    assert select_config(4096, 4096, 4096, device=H100) == heuristic
    assert S.choose(4096, 4096, 4096, device=H100)[1] == "cost model"


@pytest.mark.parametrize("value", ["on", "1", ""])
def test_env_on_values(monkeypatch, value):
    _store("pp128x192")
    monkeypatch.setenv("PTXGEMM_TUNE_CACHE", value)
    assert select_config(4096, 4096, 4096, device=H100).tag == "pp128x192"


def test_env_typo_is_a_config_error(monkeypatch):
    monkeypatch.setenv("PTXGEMM_TUNE_CACHE", "of")
    with pytest.raises(ConfigError, match="^PTXGEMM_TUNE_CACHE: "):
        select_config(4096, 4096, 4096, device=H100)


def test_stale_or_broken_cache_falls_back_to_the_model(cache_dir):
    heuristic = select_config(4096, 4096, 4096, device=H100)
    _store("pp128x256")  # a tag GemmConfig rejects today (256 accumulators)
    assert select_config(4096, 4096, 4096, device=H100) == heuristic
    (cache_dir / "tune.json").write_text("{not json")
    assert select_config(4096, 4096, 4096, device=H100) == heuristic
    (cache_dir / "tune.json").write_text('{"format": 999, "entries": {}}')
    assert select_config(4096, 4096, 4096, device=H100) == heuristic


def test_importing_select_and_tune_imports_no_torch():
    code = ("import sys, ptxgemm, ptxgemm.select.cost_model, ptxgemm.tuning, ptxgemm.select.tune_cache; "
            "ptxgemm.select_config(4096, 4096, 4096, device=ptxgemm.select.cost_model.DEFAULT_DEVICE); "
            "bad = [m for m in ('torch', 'cupy') if m in sys.modules]; assert not bad, bad; "
            "assert callable(ptxgemm.tune)")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO_ROOT)


# ---- issue 11: the memory model, split-K, the transposed store, misaligned lines

def test_small_m_streams_b_through_narrow_transposed_tiles():
    """M = 16 is memory-bound: every candidate streams the same B, and among the tied ones the least padded work
    wins: the transposed 128x16 tile (swap-AB), split so that enough SMs stream (N = 4096: 32 tiles)."""
    cfg = select_config(16, 4096, 4096, device=H100)
    assert cfg.transposed_store and cfg.block_n == 16 and cfg.splits > 1
    assert (cfg.a_major, cfg.b_major) == ("mn", "k")   # A' = B^T (B row-major), B' = A^T (A row-major)
    p = P.predict(cfg, 16, 4096, 4096, 132, H100.name)
    assert p.memory_bound


def test_large_shapes_keep_the_compute_model():
    for shape in ((8192, 8192, 8192), (4096, 4096, 4096), (8448, 9216, 1024)):
        cfg = select_config(*shape, device=H100)
        assert not cfg.split_k and not cfg.transposed_store, (shape, cfg.tag)
        assert not P.predict(cfg, *shape, 132, H100.name).memory_bound


def test_a_heavy_last_wave_yields_to_a_fuller_tied_tile():
    """3000x5000x2048 with B K-major: coop128x256 runs 480 tiles in 4 steps of 132 SMs (91% full); pp128x192, tied in
    the model, 648 in 5 (98%) and measured 3% faster on the H100. Full-wave shapes keep SELECTABLE's choice."""
    for device in (H100, S.DeviceModel("NVIDIA H200", 132)):
        cfg = select_config(3000, 5000, 2048, b_major="k", device=device)
        assert cfg.tag == "pp128x192", cfg.tag
        rows = S.explain(3000, 5000, 2048, b_major="k", device=device)
        assert rows[0]["tag"] == "pp128x192" and rows[1]["tag"] == S.MULTICAST_FIRST   # K 2048: the pair next
    for shape in ((8448, 9216, 512), (8448, 9216, 1024), (8192, 8192, 8192)):   # pp128x192 alone would win these
        assert select_config(*shape, device=H100).tile_tag in S.SELECTABLE
    assert select_config(3000, 5000, 2048, device=H100).tag == "coop128x256c2"   # B row-major: the misaligned pair


def test_split_k_counts_units_and_fixup():
    base, split = GemmConfig(block_m=64), GemmConfig(block_m=64, splits=4)
    p1, p4 = P.predict(base, 64, 4096, 4096, 132), P.predict(split, 64, 4096, 4096, 132)
    assert (p1.steps, p1.k_tiles) == (1, 64) and (p4.steps, p4.k_tiles) == (1, 16)
    assert p4.total_ns < p1.total_ns
    assert M.fixup_ns(split, 4) > 0


def test_misaligned_lines_cost_unless_multicast():
    """B row-major at N = 5000 (10000-byte lines) costs its share of a stage; a cluster pair multicasting B loads
    half of it per CTA."""
    one = GemmConfig(schedule="cooperative", block_m=128, block_n=256)
    pair = GemmConfig(schedule="cooperative", block_m=128, block_n=256, cluster_m=2)
    assert M.misaligned_factor(one, 3000, 5056, 2048) == 1.0
    f1, f2 = M.misaligned_factor(one, 3000, 5000, 2048), M.misaligned_factor(pair, 3000, 5000, 2048)
    assert f1 == pytest.approx(1 + M.MISALIGNED_COST * 2 / 3) and f2 == pytest.approx(1 + M.MISALIGNED_COST / 3)
    assert select_config(3000, 5000, 2048, device=H100).cluster_m == 2


def test_fp8_at_two_tile_rows_gives_a_memory_bound_tie_to_the_64_row_pingpong():
    """At 64 < M <= 128 fp8 a memory-bound tie goes to pp64x128 (twice the CTAs streaming B of a 128-row tile, the
    same padding: measured 8-10% ahead of pp128x128 and coop128x256 on DeepGEMM's short-K M = 128 shapes); bf16,
    M = 64 and M = 256 keep their tiles."""
    fp8 = lambda m, n, k, dt="float8_e4m3fn": select_config(m, n, k, dt, "bfloat16", "k", "k", device=H100)
    for m, n, k in ((128, 7168, 2048), (128, 24576, 1536), (96, 32768, 512)):
        assert (fp8(m, n, k).tile_tag, fp8(m, n, k).splits) == ("pp64x128", 1), (m, n, k)
    assert fp8(64, 7168, 2048).tile_tag == "pp64x64"
    assert fp8(256, 7168, 2048).tile_tag != "pp64x128"
    assert select_config(128, 7168, 2048, "bfloat16", "bfloat16", "k", "mn", device=H100).tile_tag != "pp64x128"


def test_fp8_at_one_tile_row_prefers_the_64_column_pingpong_and_bf16_does_not():
    """At M <= 64 fp8 the 64x64 pingpong is selectable and first within a tie (measured ahead of pp64x128 on five of
    DeepGEMM's six M = 64 shapes); bf16 and M = 128 keep the tiles they had. (64x2112x7168 is the one-wave rule's,
    in its deep ring: test_per_tensor_fp8_at_small_m_runs_one_wave_of_64x64_tiles_in_the_deep_ring.)"""
    from ptxgemm.select import cost_model as model

    assert model.select_config(64, 7168, 2048, "float8_e4m3fn", "bfloat16", "k", "k").tile_tag == "pp64x64"
    assert model.select_config(64, 2112, 7168, "float8_e5m2", "bfloat16", "k", "k").tag == "pp64x64k2l9s13"
    assert model.select_config(128, 7168, 16384, "float8_e4m3fn", "bfloat16", "k", "k").tile_tag != "pp64x64"
    assert model.select_config(64, 8192, 8192, "bfloat16", "bfloat16", "k", "mn").tile_tag != "pp64x64"



@pytest.mark.parametrize("shape, tag", [
    ((64, 4096, 7168), "pp64x64s13"), ((128, 4096, 7168), "pp64x64s13"), ((64, 7168, 16384), "pp64x64s13"),
    ((64, 3072, 7168), "pp64x64s13"), ((128, 3072, 7168), "pp64x64s13"), ((64, 4096, 4096), "pp64x64s13"),
    ((96, 4096, 7168), "pp64x64s13"),
    # split in two, the final split 9 k-tiles longer (split_lead.py)
    ((64, 2112, 7168), "pp64x64k2l9s13"), ((128, 2112, 7168), "pp64x64k2l9s13"),
    ((128, 1536, 8192), "pp64x64k2l9s13"), ((64, 2560, 7168), "pp64x64k2l9s13"),
])
def test_per_tensor_fp8_at_small_m_runs_one_wave_of_64x64_tiles_in_the_deep_ring(shape, tag):
    """Per-tensor fp8 at M <= 128 whose 64x64 tiles make one wave over at least 32 k-tiles: unsplit where the B panels
    fill 0.35 of the SMs, else split in two, in the deepest ring (unsplit_wave.fp8_wave_splits; H200 runs 114-117)."""
    from ptxgemm.select import unsplit_wave as W

    h200 = FakeDevice("NVIDIA H200")
    cfg = select_config(*shape, "float8_e4m3fn", "bfloat16", "k", "k", device=h200)
    assert cfg.tag == tag and cfg.stages == cfg.most_stages
    panels = -(-shape[1] // 64)
    assert (cfg.splits == 1) == (panels >= W.FP8_WAVE_UNSPLIT_MIN_PANEL_FILL * h200.sm_count)


@pytest.mark.parametrize("shape, dtypes, majors, tag", [
    ((64, 2112, 7168), ("float8_e4m3fn", "bfloat16"), ("k", "k"), "pp64x64k2l9s13"),
    ((128, 896, 16384), ("bfloat16", "bfloat16"), ("mn", "mn"), "pp64x64k3l8s13"),
    ((128, 896, 4096), ("bfloat16", "bfloat16"), ("mn", "mn"), "pp64x64k3l8s13"),
    # a short k-loop: 16 k-tiles leave each of three partials under two leads, so the splits stay even
    ((128, 896, 1024), ("bfloat16", "bfloat16"), ("mn", "mn"), "pp64x64k3s13"),
    ((256, 896, 4096), ("bfloat16", "bfloat16"), ("k", "mn"), "pp64x64k2l8s13"),   # 16-bit in two splits (run 124)
    # six and eight splits ran level with a lead (run 124): they stay even
    ((128, 128, 16384), ("bfloat16", "bfloat16"), ("k", "mn"), "pp64x64k8s13"),
    ((128, 256, 1536), ("bfloat16", "bfloat16"), ("k", "mn"), "pp64x64k6s13"),
    # the tiles where a lead did not pay (run 121) keep even splits
    ((256, 1536, 16384), ("bfloat16", "bfloat16"), ("mn", "mn"), "pp128x128k4"),
    ((128, 2048, 6144), ("bfloat16", "bfloat16"), ("k", "mn"), "pp64x128k3"),
    ((64, 4096, 4096), ("bfloat16", "bfloat16"), ("k", "mn"), "pp64x128k2"),
])
def test_the_64x64_pingpong_split_picks_run_a_longer_final(shape, dtypes, majors, tag):
    """split_lead.with_split_lead: a 64x64 pingpong split pick at a measured split count runs its final
    SPLIT_LEAD_K_TILES (by input width) longer than each partial, where each partial keeps at least two leads; other
    tiles and split counts split evenly."""
    from ptxgemm.select import split_lead as L

    cfg = select_config(*shape, *dtypes, *majors, device=FakeDevice("NVIDIA H200"))
    assert cfg.tag == tag
    if cfg.split_lead:
        assert cfg.split_lead == L.SPLIT_LEAD_K_TILES[cfg.in_itemsize]
        assert (-(-shape[2] // cfg.block_k) - cfg.split_lead) // cfg.splits >= L.SPLIT_LEAD_MIN_PARTIAL * cfg.split_lead
    assert L.with_split_lead(cfg, shape[2]) == cfg                       # never a second lead
    blockwise = GemmConfig.from_tag("pp64x64k2", in_dtype="float8_e4m3fn", b_major="k", block_scale=True)
    assert L.with_split_lead(blockwise, 7168) == blockwise              # blockwise loops count k_tiles themselves


def test_the_fp8_wave_rule_takes_no_split_wave_past_one_wave():
    """Few panels and more than half the SMs' tiles (128 rows of 46 panels: 92 tiles): two splits would make two
    waves, and unsplit was not measured there, so the cost model's pick stays."""
    cfg = select_config(128, 2944, 7168, "float8_e4m3fn", "bfloat16", "k", "k", device=FakeDevice("NVIDIA H200"))
    assert cfg.stages is None, cfg.tag


@pytest.mark.parametrize("shape", [(128, 7168, 16384), (64, 7168, 2048), (128, 24576, 1536), (256, 2048, 7168),
                                   (64, 32768, 512)])
def test_the_fp8_wave_rule_leaves_more_than_a_wave_short_k_and_large_m_alone(shape):
    """More 64x64 tiles than SMs (128x7168x16384, 128x24576x1536), a k-loop under 32 k-tiles (64x7168x2048) or M
    above 128: the rule does not apply, and no deep ring is chosen for fp8."""
    cfg = select_config(*shape, "float8_e4m3fn", "bfloat16", "k", "k", device=FakeDevice("NVIDIA H200"))
    assert cfg.stages is None, cfg.tag


def test_the_fp8_wave_rule_runs_single_problems_only():
    """A batch counts every problem's tiles (the cost model's ranking decides it); one problem takes the wave."""
    from ptxgemm.select import cost_model as model

    h200 = FakeDevice("NVIDIA H200")
    assert select_config(64, 4096, 7168, "float8_e4m3fn", "bfloat16", "k", "k", device=h200).tag == "pp64x64s13"
    batched = next(model.preferences(64, 4096, 7168, "float8_e4m3fn", "bfloat16", "k", "k", device=h200,
                                     batches=4))[0]
    assert batched.stages is None


@pytest.mark.parametrize("shape, a_major, b_major, unsplit", [
    ((256, 1536, 4096), "mn", "mn", True),      # Qwen2-1.5B's k/v weight gradient: 1.047x the pick
    ((256, 1536, 2048), "k", "mn", True), ((256, 1536, 3072), "k", "mn", True), ((320, 1536, 4096), "mn", "mn", True),
    ((256, 1536, 4096), "k", "mn", False),      # level with A K-major at 64 k-tiles: the pick stays
    ((256, 1536, 8192), "mn", "mn", False), ((256, 1536, 16384), "mn", "mn", False),   # long k-loops lost
    ((1024, 1536, 4096), "mn", "mn", False),    # 384 tiles: more than a wave
    ((64, 1536, 4096), "mn", "mn", False),      # M under NARROW_N_MIN_M
    ((256, 4096, 4096), "mn", "mn", False),     # N above NARROW_UNSPLIT_N_MAX
])
def test_a_narrow_output_up_to_2048_wide_runs_the_unsplit_64x64_in_one_wave(shape, a_major, b_major, unsplit):
    """16-bit, NARROW_N_MAX < N <= NARROW_UNSPLIT_N_MAX, one wave of 64x64 tiles over at most 64 k-tiles (A M-major)
    or 48 (A K-major): the unsplit 64x64 pingpong in its deep ring (unsplit_wave.narrow_unsplit)."""
    cfg = select_config(*shape, "bfloat16", "bfloat16", a_major, b_major, device=FakeDevice("NVIDIA H200"))
    assert (cfg.tile_tag.startswith("pp64x64") and cfg.splits == 1) == unsplit, cfg.tag
    if unsplit:
        assert cfg.stages == cfg.most_stages


# ---- issue 48: `select` takes the operands' defaults from the rule `dump` uses (ptxgemm/cli/options.operand_fields)

@pytest.mark.parametrize("operands", [
    [], ["--in-dtype", "float8_e4m3fn"], ["--in-dtype", "float8_e5m2", "--out-dtype", "float32"],
    ["--b-major", "k"], ["--a-major", "mn", "--b-major", "mn"], ["--in-dtype", "float16"],
])
def test_cli_select_picks_the_operand_layouts_dump_picks(operands, capsys):
    """fp8 reads B K-major only, so without --b-major select models B K-major for it (it used to model mn, which no
    fp8 config fits); bf16 keeps mn; --b-major given is taken as given."""
    import json

    from ptxgemm.cli import dump as dump_cli
    from ptxgemm.cli.main import build_parser, main

    shape = ["--m", "4096", "--n", "4096", "--k", "4096"]
    assert main(["select", *shape, *operands, "--json"]) == 0
    picked = json.loads(capsys.readouterr().out)
    dump_args = build_parser(["dump"]).parse_args(["dump", "--out", "unused", *shape, *operands])
    config, source = dump_cli.gemm_config(dump_args, 4096, 4096, 4096, S.resolve_device(None))
    assert (picked["config"], picked["description"]) == (config.tag, config.describe()), source
    fp8 = "float8" in " ".join(operands)
    assert config.b_major == ("k" if fp8 or "k" in operands else "mn")


def test_cli_select_refuses_fp8_with_b_mn_major_naming_the_option(capsys):
    from ptxgemm.cli.main import main

    assert main(["select", "--m", "64", "--n", "64", "--k", "64", "--in-dtype", "float8_e4m3fn",
                 "--b-major", "mn"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("python -m ptxgemm select: error: --b-major: mn with --in-dtype float8_e4m3fn: fp8 "
                          "operands are K-major only"), err


@pytest.mark.stream_k
@pytest.mark.parametrize("shape, tag", [((4864, 896, 4096), "coop128x128skw"),
                                        ((896, 4864, 4096), "coop128x128skw"),
                                        ((4864, 896, 16384), "coop128x128skw"),
                                        ((896, 4864, 16384), "coop128x256skw")])
def test_a_thin_tail_takes_a_full_wave_with_it(shape, tag):
    """Issue 47's weight gradients of the Qwen2-0.5B MLP (dW = dY^T X, both operands M/N-major): every cooperative
    candidate of one or two steps ranked as it runs with its tail, the tail taking the last full wave where that spreads it over every
    SM (GemmConfig.sk_wave). Measured on the H200 (runs 40-41): 4864x896x4096 coop256x128skw 54.5-55.2 us against
    the old pick coop256x192sk's 64.5-65.2; 896x4864x16384 coop128x256skw 182.8-185.9 against 218.8-219.6. Since
    the short grids' 128x128 tile (SHORT_GRID_TILES, run 50): 4864x896x4096 coop128x128skw 52.4-52.6; first in a tie
    (run 52: 4864x896x16384 183.5-184.5 against coop256x128skw's 182.0-182.4)."""
    h200 = S.DeviceModel("NVIDIA H200", 132)
    assert select_config(*shape, a_major="mn", b_major="mn", device=h200).tag == tag


@pytest.mark.stream_k
def test_short_sides_and_short_shares_keep_split_k_or_whole_tiles():
    """The all-tail form needs sides of SK_ALL_MIN_SIDE and shares of SK_ALL_MIN_SHARE k-tiles (H200, runs 40-41:
    896x896x4096's all-tail tiles ran 19.0-23.1 us against pp64x128's 16.0; 512x4096x14336's coop128x256sk 90.7-91.7
    against pp128x128's 84.7)."""
    h200 = S.DeviceModel("NVIDIA H200", 132)
    assert select_config(896, 896, 4096, a_major="mn", b_major="mn", device=h200).tag == "pp64x128"
    assert select_config(512, 4096, 14336, device=h200).tag == "pp128x128"


@pytest.mark.stream_k
@pytest.mark.parametrize("shape, a_major, tile", [((4096, 14336, 16384), "mn", "coop128x256c2"),
                                                  ((16384, 896, 151936), "k", "coop128x224")])
def test_long_grids_are_ranked_by_their_whole_units(shape, a_major, tile):
    """Only candidates of at most MAX_TAIL_RANKED_STEPS steps are ranked with their tails: ranked so, these two took
    coop256x192 forms measured 2.5% slower on the H200 (run 40, perf-notes issue 47). (The first takes the cluster
    pair sharing B, MULTICAST_FIRST, since the H200's per-SM load rate was refitted; the second N = 896's whole
    224-wide tiles, WHOLE_N_TILES.)"""
    h200 = S.DeviceModel("NVIDIA H200", 132)
    assert select_config(*shape, a_major=a_major, b_major="mn", device=h200).tile_tag == tile


# ---- issue 47, run 50: the narrow tiles, the short grids' 128x128 tile, the ties of small launches

H200 = S.DeviceModel("NVIDIA H200", 132)


@pytest.mark.parametrize("shape, layout, tag", [((128, 896, 4096), ("mn", "mn"), "pp64x64k3l8s13"),   # split lead
                                                ((128, 896, 16384), ("mn", "mn"), "pp64x64k3l8s13"),
                                                ((1024, 512, 896), ("k", "k"), "pp64x64s13"),
                                                ((4096, 128, 896), ("k", "k"), "pp64x64s13")])
def test_a_narrow_output_in_one_wave_takes_the_64x64_pingpong_with_its_deep_ring(shape, layout, tag):
    """NARROW_N_TILES, DEEP_RING_TILES and NARROW_MIN_FILL, measured on the H200 against the old picks (run 50,
    burst, side by side): 128x896x4096 pp64x64k4s13 10.4-10.5 us against pp64x128k6's 12.1-12.3 (k3: 10.3-11.0,
    runs 49 and 52); 128x896x16384 21.3 against pp64x128k8's 22.4-22.8 (k3: 20.2-20.9); 1024x512x896 7.1-7.3 against
    pp64x128k2's 8.9-9.0; 4096x128x896 8.3-8.8 against pp64x128k2's 10.1-10.2 and pp128x32t's 8.5-9.0 (runs 50-51)."""
    assert select_config(*shape, a_major=layout[0], b_major=layout[1], device=H200).tag == tag


@pytest.mark.parametrize("shape, layout", [((64, 512, 4096), ("k", "mn")),      # decode-sized M: the transposed tiles'
                                           ((256, 1536, 4096), ("mn", "mn")),   # N past NARROW_N_MAX
                                           ((4096, 896, 896), ("k", "k"))])     # more than one wave of 64x64 tiles
def test_the_64x64_pingpong_stays_off_its_ground(shape, layout):
    assert select_config(*shape, a_major=layout[0], b_major=layout[1], device=H200).tile_tag != "pp64x64"


def test_the_deep_ring_is_the_selections_and_16_bit_only():
    """with_deep_ring fills shared memory with stages for DEEP_RING_TILES only, never past what the config holds,
    never where the caller set stages, and not for fp8 (not measured)."""
    pp = GemmConfig(block_m=64, block_n=64, splits=3, a_major="mn", b_major="mn")
    deep = P.with_deep_ring(pp)
    assert deep.stages == pp.most_stages == 13 and pp.num_stages == 8
    assert P.with_deep_ring(dataclasses.replace(pp, stages=4)).stages == 4
    assert P.with_deep_ring(GemmConfig(block_m=64, block_n=128)) == GemmConfig(block_m=64, block_n=128)
    fp8 = GemmConfig(block_m=64, block_n=64, in_dtype="float8_e4m3fn", out_dtype="bfloat16", b_major="k")
    assert P.with_deep_ring(fp8) == fp8


def test_a_ring_keeps_a_ctas_loads_in_flight():
    """cta_load_rate: the H200's per-SM rate, or the bytes a ring keeps in flight over load_latency_ns where that is
    less (the 64x64 pingpong at 8 stages, 128 KiB); the deep ring the selection gives it streams at the full rate;
    the H100 has no such bound (its model is unchanged)."""
    bw = M.bandwidths("NVIDIA H200")
    pp = GemmConfig(block_m=64, block_n=64, stages=8)
    assert M.cta_load_rate(pp, "NVIDIA H200") == pytest.approx(8 * pp.stage_bytes / bw["load_latency_ns"])
    assert M.cta_load_rate(pp, "NVIDIA H200") < bw["sm_bytes_per_ns"]
    assert M.cta_load_rate(P.with_deep_ring(GemmConfig(block_m=64, block_n=64)), "NVIDIA H200") == bw["sm_bytes_per_ns"]
    assert M.cta_load_rate(GemmConfig(schedule="cooperative", block_m=128, block_n=256), "NVIDIA H200") == \
        bw["sm_bytes_per_ns"]
    assert M.cta_load_rate(pp, "NVIDIA H100 80GB HBM3") == M.bandwidths("H100")["sm_bytes_per_ns"]


@pytest.mark.stream_k
@pytest.mark.parametrize("shape, tag", [((1536, 1536, 8192), "coop128x128skw"), ((896, 896, 6144), "coop128x128sk"),
                                        ((896, 4864, 4096), "coop128x128skw")])
def test_a_short_grid_takes_the_128x128_tile_with_its_tail(shape, tag):
    """SHORT_GRID_TILES (H200, run 50): 1536x1536x4096 coop128x128skw 32.6-32.8 us against coop128x256sk's 35.8 (a
    wider tile's one wave beats both there now: the next test); first in a tie (896x4864x4096, run 48: coop128x128skw
    51.0-51.7 against coop128x256skw's 53.9-54.5). The tail stays where short_grid.py's one-wave rules were not
    measured ahead: 128 k-tiles for the 128x160 tile (1536x1536x8192 ran level, run 129), splits of fewer than 80
    k-tiles (896x896x6144: two of 48)."""
    assert select_config(*shape, a_major="mn", b_major="mn", device=H200).tag == tag


@pytest.mark.stream_k
@pytest.mark.parametrize("shape, layout, tag", [
    ((1536, 1536, 4096), ("mn", "mn"), "coop128x160"),   # fitted: 28.5 us against the tail's 30.0 (cuBLAS 28.7)
    ((2048, 1280, 4096), ("mn", "mn"), "coop128x160"),   # held out: 29.2 against 33.0
    ((1536, 1536, 4096), ("k", "mn"), "coop128x160"),    # held out: 28.5 against 30.9
    ((896, 896, 16384), ("mn", "mn"), "coop128x128k2"),  # fitted: 43.9 against the tail's 46.6
    ((1024, 1024, 16384), ("mn", "mn"), "coop128x128k2"),  # held out: 46.9 against 51.7
    ((896, 896, 16384), ("k", "mn"), "coop128x128k2"),   # held out: 44.8 against 48.4
    ((768, 896, 16384), ("mn", "mn"), "coop128x128k3")])  # held out, 42 tiles: three splits 35.3 against 40.0
def test_a_short_grid_runs_one_full_wave_where_measured(shape, layout, tag):
    """short_grid.with_one_wave (H200, runs 127 and 129, CUPTI kernel durations, L2 flushed): the cooperative
    128x128 pick's stream-K tail gives way to one full wave, of 128x160 tiles where 128x128's overflow it, or of
    split-K units in the most splits one wave holds. (Marked stream_k: the rules turn the tail, which the tile tests
    switch off.)"""
    assert select_config(*shape, a_major=layout[0], b_major=layout[1], device=H200).tag == tag


def test_the_one_wave_rules_take_only_their_measured_ground():
    """with_one_wave turns only a single, unfused 16-bit coop128x128 stream-K pick, at the split counts and k-loops
    measured; anything else is returned as it came."""
    tail = GemmConfig.from_tag("coop128x128sk", a_major="mn", b_major="mn")
    assert with_one_wave(tail, 896, 896, 16384, 132).tag == "coop128x128k2"
    assert with_one_wave(tail, 896, 896, 16384, 132, batches=2) == tail          # a batch: not measured
    assert with_one_wave(tail, 896, 896, 10240, 132).splits == 2                 # 160 k-tiles: two of 80
    assert with_one_wave(tail, 896, 896, 10176, 132) == tail                     # 159: splits of 79
    assert with_one_wave(tail, 768, 1024, 8192, 132) == tail                     # two of 64: mixed (run 130)
    assert with_one_wave(tail, 256, 512, 65536, 132) == tail                     # 8 tiles: 16 splits, not measured
    assert max(ONE_WAVE_SPLITS) == 3
    fp8 = GemmConfig.from_tag("coop128x128sk", in_dtype="float8_e4m3fn", out_dtype="bfloat16", b_major="k")
    assert with_one_wave(fp8, 896, 896, 16384, 132) == fp8                       # fp8: not measured
    for tag in ("coop128x256sk", "coop128x128", "pp128x128k2"):
        other = GemmConfig.from_tag(tag, a_major="mn", b_major="mn")
        assert with_one_wave(other, 1536, 1536, 4096, 132) == other
    wide = GemmConfig.from_tag("coop128x128skw", a_major="mn", b_major="mn")
    assert with_one_wave(wide, 1536, 1536, 4096, 132).tag == "coop128x160"
    assert with_one_wave(wide, 1536, 1536, 4160, 132) == wide                    # 65 k-tiles: past the measured 64
    assert with_one_wave(wide, 2048, 2048, 4096, 132) == wide                    # 128x160 makes 208 tiles: two waves


@pytest.mark.parametrize("shape, b_major", [((4096, 1536, 8960), "mn"), ((4096, 896, 151936), "mn"),
                                            ((512, 4096, 14336), "mn")])
def test_long_grids_and_short_sides_keep_the_wider_tiles(shape, b_major):
    """The 128x128 tile lost 2-8% on long grids (run 40: 4096x1536x8960, 4096x896x151936), and small M is not its
    ground (SHORT_GRID_MIN_SIDE)."""
    assert select_config(*shape, b_major=b_major, device=H200).tile_tag != "coop128x128"


@pytest.mark.parametrize("shape, layout, tag", [((16384, 128, 896), ("k", "k"), "pp128x128"),
                                                ((4096, 1536, 256), ("k", "mn"), "pp128x128")])
def test_small_launches_break_ties_by_streaming_ctas_and_overlapped_stores(shape, layout, tag):
    """BUSY_TIE_* and the short k-loop's pingpong first (run 50, burst, side by side): 16384x128x896 pp128x128
    16.0-16.1 us against coop256x128's (64 CTAs) 17.7-17.9; 4096x1536x256 11.0-11.1 against coop256x192's
    11.8-11.9."""
    assert select_config(*shape, a_major=layout[0], b_major=layout[1], device=H200).tag == tag


@pytest.mark.parametrize("shape, b_major", [((4096, 896, 896), "k"), ((4096, 896, 4864), "mn"),
                                            ((16384, 896, 4864), "k")])
def test_n_896_takes_four_whole_224_wide_tiles(shape, b_major):
    """WHOLE_N_TILES (H200, run 52, burst, side by side): 4096x896x4864 coop128x224 48.0 us against coop128x256's
    52.2-52.8; 16384x896x4864 182.8-191.5 against 201.6-207.6; 4096x896x896 14.6-14.8 against coop256x128's
    15.6-15.8."""
    assert select_config(*shape, b_major=b_major, device=H200).tile_tag == "coop128x224"


@pytest.mark.parametrize("shape, a_major, b_major", [((4864, 896, 4096), "mn", "mn"), ((4096, 4096, 4096), "k", "mn"),
                                                     ((4096, 1792, 4096), "k", "mn")])
def test_the_224_wide_tile_only_where_it_takes_n_whole_and_128x256_does_not(shape, a_major, b_major):
    """Not for A M-major (its tails lost to the 128x128 tile's), nor where 256 divides N (1792 = 7 x 256)."""
    assert select_config(*shape, a_major=a_major, b_major=b_major, device=H200).tile_tag != "coop128x224"

@pytest.mark.parametrize("shape", [(4096, 7168, 16384), (4096, 24576, 1536), (4096, 7168, 2048)])
def test_the_blockwise_256_row_tile_pairs_along_n_sharing_a(shape):
    """BLOCK_SCALE_PAIR_A_TILES: within its tie, at any K, the blockwise 256x128 tile goes to the cluster pair sharing
    A (measured on the H200, run 32: 0.5-3.5% faster than the pair sharing B or the single CTA)."""
    pick = select_config(*shape, in_dtype="float8_e4m3fn", out_dtype="bfloat16", a_major="k", b_major="k",
                         device=FakeDevice("NVIDIA H200"), epilogue=(("block_scale", True),))
    assert pick.tag == "coop256x128cn2"


# --- the walk's band (ptxgemm/select/band.py) -------------------------------------------------------------------

BLOCKWISE = (("block_scale", True), ("block_scale_a_mn", True))


def _blockwise_pick(m, n, k):
    return select_config(m, n, k, in_dtype="float8_e4m3fn", out_dtype="bfloat16", a_major="k", b_major="k",
                         device=FakeDevice("NVIDIA H200"), epilogue=BLOCKWISE)


def test_a_short_blockwise_k_loop_over_16_rows_walks_them_in_one_band():
    """4096x32768x512 (coop256x128cn2: 16 cluster rows, 4 k-tiles): DeepGEMM's kernel durations 136.7 -> 125.4 us
    with the band of 16 (H200, runs 86 and 89)."""
    pick = _blockwise_pick(4096, 32768, 512)
    assert (pick.tile_tag, pick.group_m) == ("coop256x128cn2g16", 16)


@pytest.mark.parametrize("shape", [(4096, 7168, 2048), (4096, 24576, 1536), (4096, 4096, 7168), (128, 32768, 512),
                                   (8192, 32768, 512)])
def test_the_band_stays_8_where_the_whole_band_was_level_or_not_measured(shape):
    """16 k-tiles and more measured level (run 89); 8 rows or fewer fit the default band; 32 rows were not timed."""
    assert _blockwise_pick(*shape).group_m == 8


def test_the_band_rule_widens_only_the_plain_blockwise_walk():
    from ptxgemm.kernel.schedule import plan_for
    from ptxgemm.select.band import WHOLE_BAND_MAX_K_TILES, WHOLE_BAND_MAX_ROWS
    from ptxgemm.select.band import band_rows as band_of_schedule

    def band_rows(config, m, n, k):   # on the kernel's schedule for m x n x k (none of these is transposed)
        return band_of_schedule(config, plan_for(config, m, n, k, 132))
    fp8 = dict(in_dtype="float8_e4m3fn", b_major="k", block_m=256, cluster_n=2, schedule="cooperative")
    base = GemmConfig(**fp8, block_scale=True)
    k_max = WHOLE_BAND_MAX_K_TILES * base.block_k
    rows_max = WHOLE_BAND_MAX_ROWS * base.block_m
    assert band_rows(base, rows_max, 32768, k_max) == WHOLE_BAND_MAX_ROWS
    assert band_rows(base, rows_max - base.block_m, 32768, k_max) == WHOLE_BAND_MAX_ROWS - 1
    assert band_rows(base, 8 * base.block_m, 32768, k_max) is None          # the default band covers them
    assert band_rows(base, rows_max + 1, 32768, k_max) is None               # 17 rows: wider than measured
    assert band_rows(base, rows_max, 32768, k_max + 1) is None               # a longer k-loop
    for other in (GemmConfig(**fp8), dataclasses.replace(base, raster="n"), dataclasses.replace(base, group_m=4),
                  dataclasses.replace(base, cluster_n=1, splits=2)):
        assert band_rows(other, rows_max, 32768, k_max) is None, other.tag


# --- one wave of unsplit 64x64 tiles at small M (ptxgemm/select/unsplit_wave.py) ---------------------------------

@pytest.mark.parametrize("shape", [(64, 4096, 7168), (128, 4096, 7168), (64, 7168, 16384)])
@pytest.mark.parametrize("a_mn", [True, False])
def test_small_m_blockwise_whose_b_panels_fill_the_sms_runs_unsplit_64x64_tiles_with_the_deepest_ring(shape, a_mn):
    """Measured on the H200 (run 91, DeepGEMM's kernel durations, flushed): 64x4096x7168 14.1 against pp64x64k2's
    14.6 us, 128x4096x7168 14.7 against pp64x128k2's 15.8, 64x7168x16384 40.0 against 40.6. Either scale_a layout."""
    pick = select_config(*shape, in_dtype="float8_e4m3fn", out_dtype="bfloat16", a_major="k", b_major="k",
                         device=FakeDevice("NVIDIA H200"),
                         epilogue=(("block_scale", True),) + ((("block_scale_a_mn", True),) if a_mn else ()))
    assert (pick.tag, pick.splits, pick.stages, pick.bs_product_sets) == ("pp64x64s13", 1, pick.most_stages, 1)


@pytest.mark.parametrize("shape", [(64, 2112, 7168), (128, 2112, 7168), (128, 24576, 1536), (64, 7168, 2048),
                                   (128, 7168, 16384), (64, 32768, 512)])
def test_small_m_blockwise_keeps_its_pick_where_the_unsplit_wave_lost_or_was_not_timed(shape):
    """33 B panels (lost: 13.1 against 9.9 and 11.0 us), more than one wave, or a k-loop under 32 k-tiles."""
    pick = _blockwise_pick(*shape)
    assert pick.stages is None and pick.tag != "pp64x64s13"


def test_the_unsplit_wave_rule_takes_only_the_plain_unsplit_64x64_blockwise_tile():
    from ptxgemm.select.unsplit_wave import (UNSPLIT_WAVE_MIN_K_TILES, UNSPLIT_WAVE_MIN_PANEL_FILL,
                                             unsplit_wave)
    base = GemmConfig(block_m=64, block_n=64, in_dtype="float8_e4m3fn", b_major="k", block_scale=True)
    panels = math.ceil(UNSPLIT_WAVE_MIN_PANEL_FILL * 132)
    k_tiles = UNSPLIT_WAVE_MIN_K_TILES
    assert unsplit_wave(base, 1, panels, k_tiles, 132).stages == base.most_stages
    assert unsplit_wave(base, 2, 66, k_tiles, 132) is not None              # one whole wave
    assert unsplit_wave(base, 1, panels - 1, k_tiles, 132) is None          # too few B panels
    assert unsplit_wave(base, 3, 64, k_tiles, 132) is None                  # more than one wave
    assert unsplit_wave(base, 1, panels, k_tiles - 1, 132) is None          # a short k-loop
    for other in (dataclasses.replace(base, splits=2), dataclasses.replace(base, block_n=128),
                  dataclasses.replace(base, stages=8), dataclasses.replace(base, block_scale=False),
                  dataclasses.replace(base, cluster_m=2)):
        assert unsplit_wave(other, 1, panels, k_tiles, 132) is None, other.tag


def test_the_narrow_unsplit_64_row_blockwise_tiles_in_a_deep_ring_take_one_product_set():
    """GemmConfig.bs_product_sets: one set for dense unsplit 64-row tiles up to BLOCK_SCALE_ONE_SET_MAX_N wide in a
    ring deeper than FILL_STAGES (runs 91-92: 1-8% faster); at the default ring (1-3% slower), split, wider or
    with the transposed store they keep two."""
    from ptxgemm.kernel.config import BLOCK_SCALE_ONE_SET_MAX_N
    from ptxgemm.kernel.layout import FILL_STAGES
    fp8 = dict(in_dtype="float8_e4m3fn", b_major="k", block_scale=True, block_m=64)
    deep = FILL_STAGES + 1
    assert GemmConfig(**fp8, block_n=BLOCK_SCALE_ONE_SET_MAX_N, stages=deep).bs_product_sets == 1
    assert GemmConfig(**fp8, block_n=32, stages=16).bs_product_sets == 1
    assert GemmConfig(**fp8, block_n=64, stages=FILL_STAGES).bs_product_sets == 2
    assert GemmConfig(**fp8, block_n=64).bs_product_sets == 2
    assert GemmConfig(**fp8, block_n=64, stages=deep, splits=2).bs_product_sets == 2
    assert GemmConfig(**fp8, block_n=BLOCK_SCALE_ONE_SET_MAX_N + 16, stages=deep).bs_product_sets == 2
    assert GemmConfig(**fp8, block_n=64, stages=deep, c_major="m").bs_product_sets == 2
    assert GemmConfig(**fp8, block_n=192).bs_product_sets == 1          # too wide for two: as before
