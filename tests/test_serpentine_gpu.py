"""The serpentine k-loop (GemmConfig.k_serpentine) on the GPU, and the proof that the cases exercise it.

Odd passes of the walk load their k-tiles from the last to the first (scheduler.ptx.j2: k_direction, k_offset); the
consumers do not know. What each case must exercise (asserted on the CPU from the schedule, and again on the GPU
from the plan): at least three passes (forward, backward, forward again), a backward pass whose first load is the
partial last k-tile (K not a multiple of the k-tile), edges partial in M and N, single CTAs and cluster pairs (whose
two CTAs must turn together: their loads are multicast), the stream-K tail after a backward pass, the pingpong
schedule, every layout and output dtype among the cases, and the selection's own pick on a large problem. Checks as
in tests/test_gemm_gpu.py: random inputs, a NaN-poisoned output, every element against the float64 bound.
The order itself (which k-tile each load takes) is checked without a GPU, by the PTX interpreter
(tests/test_streamk.py: test_the_serpentine_walk_turns_on_odd_passes); a result cannot show it, since a forward
loop gives the same sum within rounding.
"""
from __future__ import annotations

import pytest
from fix_up_checks import TagCase as Case, assert_launch_correct, operands, planned, poisoned_plan

from ptxgemm.kernel.config import GemmConfig

gpu = pytest.mark.gpu
SM_COUNT_ASSUMED = 132
CLUSTERS = 5


def _small(tag: str, a_major: str, b_major: str, in_dtype: str, out_dtype: str, pingpong_units: int = 1) -> Case:
    """Three passes and a bit on CLUSTERS clusters: 4 x 3 units (x 2 for pingpong, whose CTA takes two units a
    step) of 20 k-tiles, every edge partial."""
    cfg = GemmConfig.from_tag(tag)
    return Case(4 * pingpong_units * cfg.cluster_m * cfg.block_m - 8, 3 * cfg.cluster_n * cfg.block_n - 8,
                20 * cfg.block_k - 8, tag, in_dtype, out_dtype, a_major, b_major, CLUSTERS * cfg.cluster_size)


SMALL = [_small("coop128x256z", "k", "mn", "bfloat16", "bfloat16"),
         _small("coop128x256z", "mn", "k", "float16", "float32"),
         _small("coop128x256c2z", "k", "k", "bfloat16", "float16"),
         _small("coop256x128cn2z", "mn", "mn", "float16", "float16"),
         _small("coop128x256c2skz", "k", "mn", "bfloat16", "float32"),
         _small("coop128x256skz", "mn", "k", "bfloat16", "bfloat16"),
         _small("pp128x128z", "k", "mn", "bfloat16", "bfloat16", pingpong_units=2),
         _small("coop256x192skz", "k", "k", "float16", "float32")]
FULL = [Case(8192, 8192, 2048 - 8, "coop128x256c2skz"),     # 15 whole passes, the tail after a forward one
        Case(5000, 5000, 5000, "coop128x256c2skz"),          # 6 whole passes, the tail after a backward one
        Case(8448, 9216, 2048 + 8, "coop256x192z")]          # 12 passes of the lean tile the selection takes at
#                                                              K = 2048 (at 2056 its partial k-tile tips the model)


@pytest.mark.parametrize("case", SMALL + FULL, ids=str)
def test_cases_exercise_what_they_claim(case):
    s, cfg = case.schedule(SM_COUNT_ASSUMED), case.config
    assert cfg.k_serpentine and s.k_serpentine
    assert s.dp_units >= 2 * s.clusters and s.units > 2 * s.clusters, s.describe()    # a third pass after the turn
    backward = [u for u in range(s.units) if s.backward(u)]
    assert backward and s.k_tiles_of(backward[0], 0, s.k_tiles)[0] == s.k_tiles - 1
    assert case.k % cfg.block_k, "the backward loop's first load is the partial last k-tile"
    if case in SMALL:
        assert s.clusters == CLUSTERS and case.m % cfg.block_m and case.n % cfg.block_n
        if cfg.stream_k:     # an even count of whole passes: the last one ran backward, the tail runs forward
            assert s.sk_units and (s.dp_units // s.clusters) % 2 == 0, "the tail follows a backward pass"


def test_cases_cover_layouts_dtypes_and_schedules():
    assert {(c.a_major, c.b_major) for c in SMALL} == {("k", "mn"), ("mn", "k"), ("k", "k"), ("mn", "mn")}
    assert {c.out_dtype for c in SMALL} == {"bfloat16", "float16", "float32"}
    assert {c.config.schedule for c in SMALL} == {"cooperative", "pingpong"}
    assert {c.config.cluster_size for c in SMALL} == {1, 2} and any(c.config.stream_k for c in SMALL)


def test_the_selection_turns_its_large_picks():
    from ptxgemm.select.cost_model import select_config

    for shape in ((8192, 8192, 2048 - 8), (5000, 5000, 5000), (4096, 4096, 4096)):
        assert select_config(*shape).k_serpentine, shape
    assert select_config(8448, 9216, 2048).tag == FULL[-1].tag
    assert not select_config(128, 4096, 4096).k_serpentine      # one pass: nothing to turn after


@gpu
@pytest.mark.parametrize("case", SMALL + FULL, ids=str)
def test_case(case):
    a, b, plan, out = planned(case)
    assert any(plan.schedule.backward(u) for u in range(plan.schedule.units))
    assert_launch_correct(plan, out, a, b, "stream-K")


@gpu
def test_the_selection_runs_it():
    """A problem the selection turns (8192 x 8192 x 2040: 16 passes of cluster pairs), run by GemmPlan's own
    pick, correct."""
    case = FULL[0]
    a, b = operands(case)
    plan, out = poisoned_plan(case, a, b, selected=True)
    assert plan.config.k_serpentine
    assert_launch_correct(plan, out, a, b, "stream-K")
