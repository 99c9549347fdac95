"""The stream-K tail on the GPU, and the proof that the cases exercise it.

Checks as in tests/test_gemm_gpu.py: random inputs, a NaN-poisoned output, every element against ptxgemm.accuracy's
bound from a float64 reference. What each case must exercise (asserted on the CPU from the schedule, and again on the
GPU from the plan):
- the small grid (5 clusters, 12 units of 20 k-tiles): two whole units per cluster, then two tail units each cut
  into a final and two partials, one cluster's share a partial of one unit and the final of the next; k-loops that
  wrap the stage ring twice and start mid-ring; edges partial in M, N and K; every layout and output dtype;
- the whole grid: all tail (fewer units than SMs) and three full waves plus a tail;
- determinism: ten launches of one plan give bitwise one output (the partials are added in cluster order), and the
  flags are back at zero after every launch;
- the fix-up's synchronization: each instruction streamk.ptx.j2 adds, broken, is killed by the mutation tester.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from fix_up_checks import (TagCase as Case, assert_bitwise_deterministic, assert_fix_up_mutants_killed,
                           assert_launch_correct, operands, planned, poisoned_plan)
from gemm_reference import DTYPES, check_result, random_matrix

from ptxgemm.kernel.config import GemmConfig
from ptxgemm.kernel.schedule import plan_for

gpu = pytest.mark.gpu
SM_COUNT_ASSUMED = 132
CLUSTERS = 5
LAYOUTS = (("k", "mn"), ("k", "k"), ("mn", "mn"), ("mn", "k"))
DTYPE_SLOTS = (("bfloat16", "bfloat16"), ("float16", "float32"), ("float16", "float16"), ("bfloat16", "float32"))
FAMILIES = ("coop128x256sk", "coop256x128sk", "coop128x256c2sk", "coop256x128cn2sk", "coop128x128sk",
            "coop256x192sk")
FULL_GRID_SHAPES = ((1900, 3000, 1256), (2000, 7000, 520))


def _small(tag: str, j: int, f: int) -> Case:
    cfg = GemmConfig.from_tag(tag)
    a_major, b_major = LAYOUTS[j]
    in_dtype, out_dtype = DTYPE_SLOTS[(j + f) % len(DTYPE_SLOTS)]
    return Case(4 * cfg.cluster_m * cfg.block_m - 8, 3 * cfg.cluster_n * cfg.block_n - 8, 20 * cfg.block_k - 8, tag,
                in_dtype, out_dtype, a_major, b_major, CLUSTERS * cfg.cluster_size)


SMALL = [_small(tag, j, f) for f, tag in enumerate(FAMILIES) for j in range(len(LAYOUTS))]
FULL = [Case(m, n, k, tag) for m, n, k in FULL_GRID_SHAPES for tag in ("coop128x256sk", "coop128x256c2sk")]
# The tail with a full wave (GemmConfig.sk_wave): the small grid's 2 tail units and the last full wave's 5 as shares
# of 28 k-tiles (a unit and 8), a whole unit with a rotated k-loop inside one; and on the whole grid, the Qwen2-0.5B
# weight gradient's thin tail (266 units of 128x128 on 132 SMs) and an all-tail walk of 152 units.
WAVE_FAMILIES = ("coop128x256skw", "coop128x128skw", "coop128x256c2skw", "coop256x128cn2skw")
WAVE = [_small(tag, j, f) for f, tag in enumerate(WAVE_FAMILIES) for j in (f % 2, 2 + f % 2)]
WAVE_FULL = [Case(4864, 896, 4096, "coop128x128skw", a_major="mn", b_major="mn"),
             Case(4864, 896, 4096, "coop128x256skw", a_major="mn", b_major="mn"),
             Case(1900, 3000, 1256, "coop128x256c2skw")]


# ---------------------------------------------------------------------------------------------------------------
# Coverage, provable without a GPU
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", SMALL, ids=str)
def test_small_cases_exercise_what_they_claim(case):
    s, cfg = case.schedule(SM_COUNT_ASSUMED), case.config
    assert (s.clusters, s.units, s.dp_units, s.k_tiles) == (CLUSTERS, 12, 10, 20), s.describe()
    assert [len(s.sk_partials(u)) for u in (10, 11)] == [2, 2]
    middle = s.cluster_walk(2)[-2:]
    assert middle[0][1] > 0 and middle[1][1] == 0 and middle[0][0] + 1 == middle[1][0]   # partial, then final
    assert s.k_tiles >= 2 * cfg.num_stages
    assert case.m % (cfg.block_m * cfg.cluster_m) and case.n % cfg.block_n and case.k % cfg.block_k


@pytest.mark.parametrize("case", WAVE, ids=str)
def test_wave_cases_fold_a_wave_into_the_tail(case):
    s = case.schedule(SM_COUNT_ASSUMED)
    assert (s.clusters, s.units, s.dp_units, s.sk_units, s.sk_per) == (CLUSTERS, 12, 5, 7, 28), s.describe()
    assert s.cluster_walk(2)[1:] == [(7, 16, 4), (8, 0, 20), (9, 0, 4)] and s.sk_rotation(8) == 4
    assert max(len(s.sk_partials(u)) for u in range(5, 12)) == 1


@pytest.mark.parametrize("case", WAVE_FULL, ids=str)
def test_wave_full_grid_cases_fold_a_wave(case):
    s = case.schedule(SM_COUNT_ASSUMED)
    plain = dataclasses.replace(s, sk_wave=False)
    assert s.sk_units == plain.sk_units + s.clusters and s.sk_per > s.k_tiles, s.describe()


def test_small_cases_cover_every_family_layout_and_dtype():
    for tag in FAMILIES:
        mine = [c for c in SMALL if c.tag == tag]
        assert {(c.a_major, c.b_major) for c in mine} == set(LAYOUTS), tag
        assert {c.out_dtype for c in mine} == {"bfloat16", "float16", "float32"}, tag


@pytest.mark.parametrize("case", FULL, ids=str)
def test_full_grid_cases_have_a_tail(case):
    s = case.schedule(SM_COUNT_ASSUMED)
    assert s.sk_units and any(s.sk_partials(u) for u in range(s.dp_units, s.units)), s.describe()


# ---------------------------------------------------------------------------------------------------------------
# On the GPU
# ---------------------------------------------------------------------------------------------------------------

@gpu
@pytest.mark.parametrize("case", SMALL + FULL + WAVE + WAVE_FULL, ids=str)
def test_case(case):
    a, b, plan, out = planned(case)
    assert plan.schedule.sk_units > 0 and plan.flags is not None
    assert_launch_correct(plan, out, a, b, "stream-K")


@gpu
@pytest.mark.parametrize("case", [SMALL[0], SMALL[2 * len(LAYOUTS)]] + FULL + WAVE[:2] + WAVE_FULL[:1], ids=str)
def test_stream_k_is_bitwise_deterministic(case):
    """Ten launches of one plan, the workspace poisoned before each: bitwise one output, correct."""
    a, b = operands(case)
    plan, out = poisoned_plan(case, a, b, case.ctas)
    assert_bitwise_deterministic(plan, out, a, b, poison_workspace=True)


@gpu
def test_mutants_of_the_stream_k_fix_up_are_killed(tmp_path):
    """Every synchronization instruction the stream-K tail adds (streamk.ptx.j2), single and in cluster pairs,
    broken: the publish (red.release) deleted, the final's poll (ld.acquire) passing at once, the sync that passes
    the poll on to the 128 threads deleted, the flag's reset deleted, each caught on the tester's stream-K workloads
    (ptxgemm.tools.mutant_worker.stream_k_workloads: 2 launches each, the workspace poisoned in between, so a flag
    left set lets the second launch's final read NaN partials). The other mutants are caught or survive with a
    reason written in ptxgemm.tools.mutant_catalog (the command's exit status checks that)."""
    assert_fix_up_mutants_killed(("stream-k", "stream-k-cluster"), "streamk.ptx.j2", tmp_path / "mutants.json")


def _batched_schedule(sm_count: int):
    cfg = GemmConfig.from_tag("coop128x256sk")
    return plan_for(cfg, 500, 760, 1272, sm_count, BATCHED_CTAS, batches=3)


BATCHED_CTAS = 20


def test_the_batched_case_has_a_tail_across_problems():
    s = _batched_schedule(SM_COUNT_ASSUMED)
    assert (s.units, s.dp_units, s.batch_units) == (36, 20, 12)     # the tail: units 20..35, problems 1 and 2
    assert any(s.sk_partials(u) for u in range(20, 24)) and any(s.sk_partials(u) for u in range(24, 36))


@gpu
def test_a_batch_whose_tail_spans_two_problems():
    """(3, M, K) @ (3, K, N) on 20 CTAs: 36 units, the tail's 16 in problems 1 and 2, shares crossing from one problem
    into the next; each problem against its own float64 reference, the output poisoned first."""
    import ptxgemm
    from ptxgemm import DeviceArray
    from ptxgemm.runtime import driver

    rng = np.random.default_rng(2611)
    a = np.stack([random_matrix(rng, 500, 1272, "bfloat16") for _ in range(3)])
    b = np.stack([random_matrix(rng, 1272, 760, "bfloat16") for _ in range(3)])
    out = DeviceArray.empty((3, 500, 760), DTYPES["bfloat16"])
    out.poison()
    plan = ptxgemm.GemmPlan(ptxgemm.to_device(a), ptxgemm.to_device(b), out, GemmConfig.from_tag("coop128x256sk"),
                            ctas=BATCHED_CTAS)
    assert plan.schedule == _batched_schedule(driver.device_info().sm_count)
    plan.launch()
    got = out.to_numpy()
    for i in range(3):
        verdict = check_result(got[i], a[i], b[i])
        assert verdict.ok, f"problem {i}: {verdict}"
    assert not plan.flags.to_numpy().any()
