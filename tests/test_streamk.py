"""The stream-K tail without a GPU: the schedule's model of the walk, the kernel's walk run by the PTX interpreter
against it, the config's rules and the tag."""
from __future__ import annotations

import dataclasses
import itertools

import full_run
import pytest

from ptxgemm import ConfigError, GemmConfig
from ptxgemm.kernel.schedule import SK_MAX_SHARES, plan_schedule

SHAPES = [(4096, 4096, 14336), (5000, 5000, 5000), (8192, 8192, 8192), (2000, 7000, 520), (1900, 2040, 1256),
          (300, 500, 64), (128, 256, 64 * 20), (16384, 16384, 8192)]
TILES = [(128, 256, 1, 1), (128, 256, 2, 1), (256, 128, 1, 2), (256, 128, 1, 1)]


def _schedule(shape, tile, sms=132, ctas=None, sk_wave=False):
    m, n, k = shape
    bm, bn, cm, cn = tile
    return plan_schedule(m, n, k, bm, bn, 64, cm, sms, ctas, "cooperative", cn, 1, 1, True, False, sk_wave)


#: (shape, tile, CTAs) walked: every shape and tile on the whole grid and on 5 and 3 clusters; the light run takes
#: every other one, so each (shape, tile) keeps one or two of its three grids and each grid size stays
WALKS = [(s, t, c) for s, t in itertools.product(SHAPES, TILES) for c in (None, 5 * t[2] * t[3], 3 * t[2] * t[3])]
WALKS = WALKS[::len(WALKS) // full_run.pick(len(WALKS) // 2, len(WALKS), "stream-K walks checked")]


@pytest.mark.parametrize("sk_wave", [False, True], ids=["tail", "tail+wave"])
@pytest.mark.parametrize("shape, tile, ctas", WALKS)
def test_the_walk_runs_every_k_tile_once_and_each_fix_up_can_finish(shape, tile, ctas, sk_wave):
    """Every k-tile of every unit lies in exactly one segment; the full waves are whole units; each tail unit has
    one final (its first k-tile's cluster), and its partials are the next clusters', at most SK_MAX_SHARES; a
    cluster holds at most one partial, the first segment of its share, so it never waits before publishing it.
    With the full wave folded into the tail (sk_wave), a share is a unit or more and a final adds one partial."""
    s = _schedule(shape, tile, ctas=ctas, sk_wave=sk_wave)
    plain = _schedule(shape, tile, ctas=ctas)
    folded = sk_wave and plain.sk_units and plain.dp_units
    assert s.dp_units % s.clusters == 0
    assert s.sk_units == (plain.sk_units + s.clusters if folded else plain.sk_units) and s.sk_units < 2 * s.clusters
    seen = {}
    finals = {}
    for c in range(s.clusters):
        walk = s.cluster_walk(c)
        whole = [w for w in walk if w[0] < s.dp_units]
        assert whole == [(u, 0, s.k_tiles) for u in range(c, s.dp_units, s.clusters)]
        tail = walk[len(whole):]
        if folded:
            assert len(tail) <= 3 and sum(n for _, _, n in tail) <= s.sk_per and s.k_tiles <= s.sk_per <= 2 * s.k_tiles
            assert all(n == s.k_tiles for _, _, n in tail[1:-1])     # between the partial and the final: whole
        else:
            assert len(tail) <= 2 and sum(n for _, _, n in tail) <= s.sk_per <= s.k_tiles
        partials = [w for w in tail if w[1] > 0]
        assert len(partials) <= 1 and (not partials or tail[0] == partials[0])
        for unit, first, count in walk:
            assert count > 0
            for kt in range(first, first + count):
                assert (unit, kt) not in seen
                seen[(unit, kt)] = c
            if first == 0 and count < s.k_tiles:
                finals[unit] = c
    assert len(seen) == s.units * s.k_tiles
    for unit in range(s.dp_units, s.units):
        parts = s.sk_partials(unit)
        owners = sorted({seen[(unit, kt)] for kt in range(s.k_tiles)})
        assert owners == [seen[(unit, 0)]] + parts and len(parts) <= (1 if folded else SK_MAX_SHARES)
        assert (unit in finals) == bool(parts)


#: (shape, tile) whose tail's fronts are checked: all of them, or in the light run every other one (each shape with
#: two of its four tiles)
FRONTS = list(itertools.product(SHAPES, TILES))
FRONTS = FRONTS[::len(FRONTS) // full_run.pick(len(FRONTS) // 2, len(FRONTS), "stream-K tails' fronts checked")]


@pytest.mark.parametrize("sk_wave", [False, True], ids=["tail", "tail+wave"])
@pytest.mark.parametrize("shape, tile", FRONTS)
def test_the_tail_reads_k_in_a_few_common_fronts(shape, tile, sk_wave):
    """With each tail unit's k-loop rotated (Schedule.sk_rotation), every cluster's s-th k-tile of the tail is
    k-tile s + m * sk_per of K (mod k_tiles) for a small m: the clusters read K together, a few fronts apart, and
    share its panels in L2 as whole units of one wave do. Each segment still loads every k-tile of its positions
    once: the rotation permutes a unit's k-loop."""
    s = _schedule(shape, tile, sk_wave=sk_wave)
    fronts = {m * s.sk_per % s.k_tiles for m in range(SK_MAX_SHARES + 2)}
    for c in range(s.clusters):
        step = 0
        for unit, first, count in s.cluster_walk(c)[len(range(c, s.dp_units, s.clusters)):]:
            for kt in s.k_tiles_of(unit, first, count):
                assert (kt - step) % s.k_tiles in fronts, (c, unit, step, kt)
                step += 1
    for unit in range(s.dp_units, s.units):
        loaded = [kt for c in range(s.clusters) for u, f, n in s.cluster_walk(c) if u == unit
                  for kt in s.k_tiles_of(u, f, n)]
        assert sorted(loaded) == list(range(s.k_tiles))


def test_the_cases_the_gpu_tests_rely_on():
    """The shapes the GPU tests and the mutation tester run: a tail unit with two partials, a share that is a
    partial of one unit and then the final of the next, and a tail with whole waves before it."""
    s = _schedule((4 * 128 - 8, 3 * 256 - 8, 20 * 64 - 8), (128, 256, 1, 1), ctas=5)
    assert (s.dp_units, s.sk_units, s.sk_per) == (10, 2, 8)
    assert s.sk_partials(10) == [1, 2] and s.sk_partials(11) == [3, 4]
    assert s.cluster_walk(2)[-2:] == [(10, 16, 4), (11, 0, 4)]
    full = _schedule((2000, 7000, 520), (128, 256, 2, 1))
    assert full.dp_units == 3 * 66 and full.sk_units == 26


def test_no_tail_without_stream_k_or_when_the_waves_are_whole():
    s = plan_schedule(4096, 4096, 4096, 128, 256, 64, 1, 128, None, "cooperative", 1, 1, 1, False)
    assert s.dp_units == s.units and s.sk_units == 0 and "stream_k" not in s.describe()
    s = _schedule((4096, 4096, 4096), (128, 256, 1, 1), sms=128)     # 512 units on 128 SMs: four whole waves
    assert s.sk_units == 0 and s.cluster_walk(0) == [(u, 0, 64) for u in range(0, 512, 128)]


def test_the_thin_tail_takes_a_full_wave_with_it():
    """The Qwen2-0.5B weight gradient 4864x896x4096 in 128x128 tiles: 266 units on 132 SMs leave a tail of 2. The
    plain tail cuts them into 8 shares of 16 k-tiles (SK_MAX_SHARES), 124 SMs idle beside them; with the wave every
    cluster's share is 65 k-tiles, a unit and one, and each final adds one partial."""
    plain = _schedule((4864, 896, 4096), (128, 128, 1, 1))
    wave = _schedule((4864, 896, 4096), (128, 128, 1, 1), sk_wave=True)
    assert (plain.dp_units, plain.sk_units, plain.sk_per) == (264, 2, 16)
    assert (wave.dp_units, wave.sk_units, wave.sk_per) == (132, 134, 65)
    assert max(sum(n for _, _, n in wave.cluster_walk(c)) for c in range(132)) == 64 + 65
    assert max(sum(n for _, _, n in plain.cluster_walk(c)) for c in range(132)) == 2 * 64 + 16
    assert max(len(wave.sk_partials(u)) for u in range(132, 266)) == 1
    # no full wave to fold (fewer units than clusters), or no tail: the plain walk
    assert _schedule((896, 896, 4096), (128, 128, 1, 1), sk_wave=True) == dataclasses.replace(
        _schedule((896, 896, 4096), (128, 128, 1, 1)), sk_wave=True)
    assert _schedule((4096, 4096, 4096), (128, 256, 1, 1), sms=128, sk_wave=True).sk_units == 0


def test_config_rules_and_tag():
    cfg = GemmConfig.from_tag("coop128x128skw")
    assert cfg.stream_k and cfg.sk_wave and cfg.tag == "coop128x128skw" and cfg.tile_tag == "coop128x128"
    assert "stream-K tail with a full wave" in cfg.describe()
    assert GemmConfig.from_tag("coop128x256c2skwzs3").tag == "coop128x256c2skwzs3"
    with pytest.raises(ConfigError, match=r"^sk_wave: .*stream_k=True"):
        GemmConfig.from_tag("coop128x128w")
    with pytest.raises(ConfigError, match=r"^sk_wave: .*grouped"):
        GemmConfig(schedule="cooperative", block_m=128, block_n=256, stream_k=True, sk_wave=True,
                   grouped="contiguous", group_capacity=16)
    cfg = GemmConfig.from_tag("coop128x256c2sk")
    assert cfg.stream_k and cfg.cluster_m == 2 and cfg.tag == "coop128x256c2sk" and cfg.tile_tag == "coop128x256c2"
    assert GemmConfig.from_tag("coop256x128sks3").stages == 3
    assert "stream-K tail" in cfg.describe()
    for bad, named in (({"schedule": "pingpong"}, "schedule='pingpong'"), ({"splits": 2}, "splits"),
                       ({"source_dtype": "bfloat16"}, "source_dtype"), ({"grouped": "k"}, "grouped='k'")):
        fields = {"schedule": "cooperative", "block_m": 128, "block_n": 256, "stream_k": True, **bad}
        with pytest.raises(ConfigError, match=r"^stream_k: .*" + named.replace("(", r"\(")):
            GemmConfig(**fields)


def test_the_k_tile_numbers_must_fit_32_bits():
    with pytest.raises(ConfigError, match="stream_k"):
        plan_schedule(2 ** 20, 2 ** 20, 2 ** 22, 128, 256, 64, 1, 132, None, "cooperative", 1, 1, 1, True)


def _walk_probe_ptx(cfg, early: bool = False) -> str:
    """streamk.ptx.j2's first_unit and next_unit, as the kernel renders them, in an entry of their own: thread c
    walks cluster c's units as the producer does and stores (unit, first position, k-tiles, first k-tile of K) of
    its j-th at out + 16 (c * slots + j), the last computed as the producer computes each load's K (the rotation,
    then a serpentine config's turn: scheduler.ptx.j2's k_direction and k_offset). A grouped config's split is made
    by split_on_device from the unit count
    (param_num_tiles) and the fix-up's cost in k-tiles (the first parameter, param_sk_fixup): before the walk
    (`early`, as the consumers make it) or at the first next_unit (as the producer does); a dense one's is given
    (param_dp_units, param_sk_per)."""
    from ptxgemm.kernel.codegen import environment
    from ptxgemm.kernel.params import template_params

    env, params = environment(), template_params(cfg)
    sk = env.get_template("streamk.ptx.j2").make_module(vars=params)
    sched = env.get_template(params["scheduler_template"]).make_module(vars=params)
    stores = "\n".join(f"    add.u64 %dst{i}, %dst, {4 * i};\n    st.global.u32 [%dst{i}], {r};"
                       for i, r in enumerate(("%tile", "%k_first", "%k_count", "%k0")))
    return f""".version 8.0
.target sm_90a
.address_size 64
.visible .entry walk_probe({".param .u32 param_sk_fixup" if cfg.grouped else
                              ".param .u32 param_dp_units, .param .u32 param_sk_per"}, .param .u32 param_num_tiles,
    .param .u32 param_k_tiles, .param .u32 param_slots, .param .u64 param_out)
{{
    .reg .u32 %cta, %grid, %tile, %num_tiles, %k_tiles, %tmp, %slots, %j, %k0, %zero;
    .reg .u64 %dst, %off, %dst0, %dst1, %dst2, %dst3;
    .reg .pred %p_done;
{sk.declare()}
{sched.declare()}
{sk.setup()}
    mov.u32 %cta, %tid.x;
    mov.u32 %grid, %ntid.x;
    ld.param.u32 %num_tiles, [param_num_tiles];
    ld.param.u32 %k_tiles, [param_k_tiles];
    ld.param.u32 %slots, [param_slots];
{sk.split_on_device() if early else ""}
    mov.u32 %j, 0;
{sk.first_unit("PROBE", rotate=True)}
PROBE_TILE:
    setp.ge.u32 %p_done, %tile, %num_tiles;
    @%p_done bra PROBE_EXIT;
    ld.param.u64 %dst, [param_out];
    mad.lo.u32 %tmp, %cta, %slots, %j;
    mul.wide.u32 %off, %tmp, 16;
    add.u64 %dst, %dst, %off;
{sched.k_direction("%tile")}
    mov.u32 %zero, 0;
{sk.k_of("%k0", "%zero")}
    mul.lo.u32 %k0, %k0, {cfg.block_k};
{sched.k_offset("%k0")}
    div.u32 %k0, %k0, {cfg.block_k};
{stores}
    add.u32 %j, %j, 1;
{sk.next_unit("PROBE", rotate=True)}
PROBE_EXIT:
    ret;
}}
"""


@pytest.mark.parametrize("shape, tile, ctas", [((4 * 128 - 8, 3 * 256 - 8, 20 * 64 - 8), (128, 256, 1, 1), 5),
                                               ((2000, 7000, 520), (128, 256, 2, 1), None),
                                               ((1900, 2040, 1256), (128, 256, 1, 1), None),
                                               ((5000, 5000, 5000), (128, 256, 2, 1), None),
                                               ((4096, 4096, 4096), (128, 256, 1, 1), 128),
                                               # one-k-tile units: with the wave, shares of two whole units
                                               ((300, 500, 64), (128, 256, 1, 1), 5)])
@pytest.mark.parametrize("sk_wave", [False, True], ids=["tail", "tail+wave"])
def test_the_kernels_walk_is_the_models(shape, tile, ctas, sk_wave):
    """The walk the producer and both consumers make, run from the rendered PTX by the interpreter
    (tests/ptx_sim.py), one thread per cluster: the same (unit, first k-tile, k-tiles) in the same order as
    Schedule.cluster_walk, whole waves, tail shares and the end of the walk alike, and each segment's first k-tile
    of K (Schedule.sk_rotation; with the wave folded in, shares longer than a unit and whole units inside them)."""
    s = _schedule(shape, tile, ctas=ctas, sk_wave=sk_wave)
    cfg = GemmConfig(schedule="cooperative", block_m=tile[0], block_n=tile[1], cluster_m=tile[2],
                     cluster_n=tile[3], stream_k=True, sk_wave=sk_wave)
    _assert_walks(_walk_probe_ptx(cfg), [s.dp_units, s.sk_per], s)


@pytest.mark.parametrize("tag, shape, ctas", [("coop128x256c2z", (8192, 8192, 8192), None),
                                              ("coop128x256c2skz", (5000, 5000, 5000), None),
                                              ("coop128x256skz", (6 * 128 - 8, 3 * 256 - 8, 20 * 64 - 8), 5),
                                              ("pp128x128z", (1000, 1000, 300), 7)])
def test_the_serpentine_walk_turns_on_odd_passes(tag, shape, ctas):
    """GemmConfig.k_serpentine: the producer's first k-tile of each unit, run from the rendered PTX, is Schedule's
    (k_tiles_of): k-tile 0 on even passes, the last on odd ones, every cluster turning at once; the stream-K tail's
    segments keep their rotation. Without the stream-K tail the walk is the plain one (dp_units = units)."""
    cfg = GemmConfig.from_tag(tag)
    m, n, k = shape
    s = plan_schedule(m, n, k, cfg.block_m, cfg.block_n, cfg.block_k, cfg.cluster_m, 132, ctas, cfg.schedule,
                      cfg.cluster_n, 1, 1, cfg.stream_k, True)
    assert s.units >= 3 * s.clusters       # three passes or more: forward, backward, forward
    backward = [u for u in range(s.units) if s.backward(u)]
    assert backward and all((u // s.clusters) % 2 for u in backward)
    assert s.k_tiles_of(backward[0], 0, s.k_tiles) == list(range(s.k_tiles))[::-1]
    _assert_walks(_walk_probe_ptx(cfg), [s.dp_units, s.sk_per], s)


def test_serpentine_rules_and_tag():
    cfg = GemmConfig.from_tag("coop128x256c2skzs3")
    assert cfg.k_serpentine and cfg.stream_k and cfg.stages == 3 and cfg.tile_tag == "coop128x256c2s3"
    assert "serpentine k-loop" in cfg.describe()
    for bad in ({"splits": 2}, {"grouped": "contiguous", "schedule": "cooperative", "block_m": 128, "block_n": 256},
                {"block_scale": True, "in_dtype": "float8_e4m3fn", "a_major": "k", "b_major": "k"}):
        with pytest.raises(ConfigError, match=r"^k_serpentine: .*" + next(iter(bad))):
            GemmConfig(k_serpentine=True, **bad)


def _assert_walks(ptx: str, split_args: list, s) -> None:
    """Run a _walk_probe_ptx entry, one thread per cluster of Schedule `s`, with `split_args` (its split's
    parameters) before the unit count: each cluster walks s.cluster_walk's segments with their first k-tiles of K
    (Schedule.k_tiles_of), and stores nothing after them."""
    from ptx_sim import Kernel, Memory

    slots = max(len(s.cluster_walk(c)) for c in range(s.clusters)) + 1
    out = 1 << 20
    memory = Memory({}, set(range(out, out + 16 * slots * s.clusters)), {})
    Kernel(ptx, "walk_probe").run(1, s.clusters, [*split_args, s.units, s.k_tiles, slots, out], memory)

    def word(addr):
        return sum(memory.written[addr + b] << (8 * b) for b in range(4))

    for c in range(s.clusters):
        want = [(u, f, n, s.k_tiles_of(u, f, n)[0]) for u, f, n in s.cluster_walk(c)]
        got = [tuple(word(out + 16 * (c * slots + j) + 4 * f) for f in range(4)) for j in range(len(want))]
        assert got == want, c
        assert out + 16 * (c * slots + len(want)) not in memory.written, c    # and nothing after it


SPLITS = {  # (units, clusters, k_tiles, the fix-up in k-tiles): whether the tail is cut
    (2048, 66, 112, 17): True, (3584, 66, 32, 17): True, (7168, 66, 64, 17): True, (8202, 132, 224, 17): True,
    (100, 132, 112, 17): False, (264, 132, 112, 17): False, (12, 5, 20, 17): False, (12, 5, 20, 2): True,
    (13, 5, 20, 2): True, (11, 5, 6, 2): True, (11, 5, 6, 4): False, (9, 4, 1, 0): False}


@pytest.mark.parametrize("early", [True, False], ids=["consumer", "producer"])
@pytest.mark.parametrize("units, clusters, k_tiles, fixup", list(SPLITS))
def test_the_grouped_kernels_split_is_the_models(units, clusters, k_tiles, fixup, early):
    """The grouped kernel cuts its tail on the device (streamk.ptx.j2's split_on_device), since only the device
    knows how many units the counts make. Run by the interpreter, one thread per cluster, from a unit count and the
    fix-up's cost, it walks the segments of ptxgemm.kernel.grouped_walk.tail_schedule: shares where a share and
    its fix-up are shorter than a whole unit after a full wave (DeepGEMM's 2048 pair units of 112 k-tiles, whose
    last wave holds 2 of 66), whole units otherwise (fewer units than clusters, whole waves, a fix-up as long as
    the unit); made before the walk (the consumers) or at the first next_unit (the producer) alike."""
    from ptxgemm.kernel.grouped_walk import tail_schedule

    s = tail_schedule(units, clusters, k_tiles, fixup)
    cfg = GemmConfig(schedule="cooperative", block_m=128, block_n=256, stream_k=True, grouped="contiguous",
                     group_capacity=16)
    _assert_walks(_walk_probe_ptx(cfg, early), [fixup], s)
    assert s.stream_k == SPLITS[units, clusters, k_tiles, fixup]
