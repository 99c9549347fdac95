"""Split-K, the transposed store (swap-AB) and narrow tiles on the GPU, and the proof that the cases exercise them.

Checks as in tests/test_gemm_gpu.py: random inputs, a NaN-poisoned output, every element against ptxgemm.accuracy's
bound from a float64 reference. What each fixed case must exercise (asserted on the CPU from the schedule, and again
on the GPU from the plan):
- split-K: several units per consumer of every CTA (so partials and finals of one tile land on different CTAs and on
  the same CTA's two consumers), each split's k-loop wrapping the stage ring twice, partial edge tiles; one more
  case per family whose K leaves the last split short (its trailing k-tiles lie past K and load as zeros); pairs
  (cluster_m or cluster_n 2) whose last cluster row or column holds a tile past the edge;
- the transposed store: a row-major output computed as C^T = B^T A^T (the plan reports the swap), partial tiles in
  both directions, several tiles per consumer;
- determinism: the same split-K plan launched repeatedly, on the full grid (where the units' timing varies) and on a
  small one, gives bitwise the same output; the flags are back at zero after every launch.
"""
from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from fix_up_checks import assert_bitwise_deterministic, assert_fix_up_mutants_killed, assert_launch_correct, operands, \
    planned, poisoned_plan
from gemm_reference import check_result, random_matrix

from ptxgemm.kernel.config import GemmConfig
from ptxgemm.kernel.schedule import plan_for
from ptxgemm.plan.checks import check_ctas

gpu = pytest.mark.gpu
SM_COUNT_ASSUMED = 132
CTAS = 3                        # a small grid (of clusters, for pairs): every consumer runs several units
MIN_UNITS = 3                   # per consumer of every CTA
MIN_RING_WRAPS = 2              # k-tiles per split >= 2 x stages
LAYOUTS = (("k", "mn"), ("k", "k"), ("mn", "mn"), ("mn", "k"))
DTYPE_SLOTS = (("bfloat16", "bfloat16"), ("float16", "float32"), ("float16", "float16"), ("bfloat16", "float32"))

SPLIT_FAMILIES = ({"block_m": 64, "block_n": 128, "splits": 3}, {"block_m": 128, "block_n": 128, "splits": 2},
                  {"block_m": 64, "block_n": 256, "splits": 4},
                  {"schedule": "cooperative", "block_m": 128, "block_n": 256, "splits": 2},
                  {"schedule": "cooperative", "block_m": 256, "block_n": 128, "splits": 3},
                  # the short grids' one-wave split (select/short_grid.py): the cooperative 128x128 in two or three
                  {"schedule": "cooperative", "block_m": 128, "block_n": 128, "splits": 3},
                  # the deep ring the selection gives the 64x64 pingpong (cost_model.DEEP_RING_TILES): 13 stages
                  {"block_m": 64, "block_n": 64, "splits": 3, "stages": 13},
                  # pairs under split-K: both CTAs of a cluster run the same split of adjacent tiles (their multicast
                  # loads cover one k-range), each with its own flag and partial slots (tile = work * 2 + rank);
                  # along M sharing B (the narrow pingpong and a 128-row one), along N sharing A (cooperative)
                  {"block_m": 64, "block_n": 128, "cluster_m": 2, "splits": 2},
                  {"block_m": 128, "block_n": 128, "cluster_m": 2, "splits": 4},
                  {"schedule": "cooperative", "block_m": 128, "block_n": 256, "cluster_n": 2, "splits": 3},
                  # a split lead: the final's k-range longer than each partial's, so every role reads each unit's
                  # count from its split (splitk.k_count) and the pingpong consumer skips its peer's unit by that
                  # unit's own count. Two and four splits over three CTAs: a consumer's units alternate between
                  # partials and finals (mixed_counts), the skip and the next unit's count differ
                  {"block_m": 64, "block_n": 64, "splits": 2, "split_lead": 7, "stages": 13},
                  {"block_m": 64, "block_n": 64, "splits": 4, "split_lead": 5, "stages": 13},
                  {"block_m": 128, "block_n": 128, "splits": 2, "split_lead": 3},
                  {"schedule": "cooperative", "block_m": 128, "block_n": 256, "splits": 2, "split_lead": 4},
                  {"block_m": 64, "block_n": 128, "cluster_m": 2, "splits": 2, "split_lead": 2})
TRANSPOSED_FAMILIES = ({"block_m": 128, "block_n": 16, "c_major": "m"},
                       {"block_m": 128, "block_n": 32, "c_major": "m", "splits": 3},
                       {"block_m": 128, "block_n": 64, "c_major": "m", "splits": 2},
                       {"block_m": 64, "block_n": 16, "c_major": "m", "splits": 4},
                       {"block_m": 64, "block_n": 64, "c_major": "m"})
NARROW_FAMILIES = ({"block_m": 64, "block_n": 32}, {"block_m": 128, "block_n": 16, "splits": 2},
                   {"block_m": 128, "block_n": 48}, {"block_m": 64, "block_n": 64, "stages": 13})
FAMILIES = SPLIT_FAMILIES + TRANSPOSED_FAMILIES + NARROW_FAMILIES


@dataclasses.dataclass(frozen=True)
class Case:
    m: int
    n: int
    k: int
    in_dtype: str
    out_dtype: str
    a_major: str                 # of the caller's A (C order: "k") and B (C order: "mn"), as numpy gives them
    b_major: str
    cfg: tuple = ()
    ctas: int | None = CTAS
    short_last_split: bool = False

    @property
    def fam(self) -> dict:
        return dict(self.cfg)

    @property
    def config(self) -> GemmConfig:
        """The config as the kernel runs it: a transposed one multiplies B^T A^T, whose majors trade places."""
        majors = (self.a_major, self.b_major) if self.fam.get("c_major", "n") == "n" else (self.b_major, self.a_major)
        return GemmConfig(in_dtype=self.in_dtype, out_dtype=self.out_dtype, a_major=majors[0], b_major=majors[1],
                          **self.fam)

    @property
    def kernel_mn(self) -> tuple[int, int]:
        return (self.n, self.m) if self.config.transposed_store else (self.m, self.n)

    def schedule(self, sm_count: int):
        return plan_for(self.config, *self.kernel_mn, self.k, sm_count, self.ctas)

    def __str__(self):
        return (f"{self.m}x{self.n}x{self.k}-{self.in_dtype}-{self.out_dtype}-A{self.a_major}-B{self.b_major}-"
                f"{self.config.tag}" + ("-short" if self.short_last_split else "")
                + (f"-ctas{self.ctas}" if self.ctas else ""))


def _case(fam: dict, j: int, f: int, short: bool = False) -> Case:
    """CTAS CTAs (clusters) x 2 consumers x MIN_UNITS units each, partial edges, each split's k-loop wrapping the
    ring twice. A pair's grid is CTAS clusters (the launch takes whole clusters), its unit a cluster's tiles."""
    a_major, b_major = LAYOUTS[j]
    in_dtype, out_dtype = DTYPE_SLOTS[(j + f) % len(DTYPE_SLOTS)]
    cfg = GemmConfig(**fam)
    splits = cfg.splits
    units = CTAS * 2 * MIN_UNITS
    tiles_n = 3
    tiles_m = -(-units // (splits * -(-tiles_n // cfg.cluster_n))) * cfg.cluster_m
    tiles_m += cfg.cluster_m > 1                                       # a pair's second tile row past M
    km, kn = tiles_m * cfg.block_m - 8, tiles_n * cfg.block_n - 8      # the kernel's M and N, both partial
    per = MIN_RING_WRAPS * cfg.num_stages + 1
    k_tiles = splits * per - (1 if short else 0)                       # short: the last split ends past K
    k_tiles += cfg.split_lead + (cfg.split_lead and 1)                 # a lead: the final's extra, and one over
    k = k_tiles * cfg.block_k - 8
    m, n = (kn, km) if cfg.transposed_store else (km, kn)
    return Case(m, n, k, in_dtype, out_dtype, a_major, b_major, tuple(sorted(fam.items())), CTAS * cfg.cluster_size,
                short)


FIXED = [_case(fam, j, f) for f, fam in enumerate(FAMILIES) for j in range(len(LAYOUTS))]
# (a split lead's last split ends at K exactly: it has no short form)
SHORT = [_case(fam, f % len(LAYOUTS), f, short=True) for f, fam in enumerate(FAMILIES)
         if fam.get("splits", 1) > 1 and not fam.get("split_lead")]


def mixed_counts(s) -> bool:
    """Whether some cluster walks a unit of one split count right before a unit of the other (the pingpong consumer
    then skips its peer's unit by a count unlike its own; the cooperative one runs them in turn): under a split lead,
    finals and partials on one ring."""
    for cluster in range(s.clusters):
        units = list(range(cluster, s.units, s.clusters))
        for mine, peer in zip(units, units[1:]):
            if (mine % s.splits == s.splits - 1) != (peer % s.splits == s.splits - 1):
                return True
    return False


# ---------------------------------------------------------------------------------------------------------------
# Coverage, provable without a GPU
# ---------------------------------------------------------------------------------------------------------------

def test_fixed_cases_cover_every_family_layout_and_dtype():
    for fam in FAMILIES:
        mine = [c for c in FIXED if c.fam == fam]
        assert {(c.a_major, c.b_major) for c in mine} == set(LAYOUTS), fam
        assert {c.out_dtype for c in mine} == {"bfloat16", "float16", "float32"}, fam
    assert len(SHORT) == sum(fam.get("splits", 1) > 1 and not fam.get("split_lead") for fam in FAMILIES)


@pytest.mark.parametrize("case", FIXED + SHORT, ids=str)
def test_case_exercises_what_it_claims(case):
    s, cfg = case.schedule(SM_COUNT_ASSUMED), case.config
    check_ctas(case.ctas, cfg.cluster_size)     # the plan's own rule: a launch takes whole clusters
    assert s.min_tiles_per_consumer >= MIN_UNITS, s.describe()
    assert s.splits == cfg.splits and s.k_tiles >= MIN_RING_WRAPS * cfg.num_stages, (s.splits, s.k_tiles)
    km, kn = case.kernel_mn
    assert km % cfg.block_m and kn % cfg.block_n and case.k % cfg.block_k
    if cfg.cluster_size > 1:   # the last cluster row or column holds a tile past the edge
        assert s.tiles_m % cfg.cluster_m or s.tiles_n % cfg.cluster_n, s.describe()
    if cfg.split_k:
        k_tiles = -(-case.k // cfg.block_k)
        assert (s.splits * s.k_tiles > k_tiles) == case.short_last_split
    if cfg.split_lead:   # the final runs the rest of K, lead or more k-tiles past a partial's; the counts mix on a ring
        assert s.final_k_tiles >= s.k_tiles + cfg.split_lead, s.describe()
        assert (s.splits - 1) * s.k_tiles + s.final_k_tiles == -(-case.k // cfg.block_k), s.describe()
        assert mixed_counts(s), s.describe()


# ---------------------------------------------------------------------------------------------------------------
# On the GPU
# ---------------------------------------------------------------------------------------------------------------

@gpu
@pytest.mark.parametrize("case", FIXED + SHORT, ids=str)
def test_fixed_case(case):
    a, b, plan, out = planned(case)
    assert plan.layout.swapped == case.config.transposed_store   # a row-major C: the transposed store is swap-AB
    assert_launch_correct(plan, out, a, b, "split-K")


DETERMINISM = [_case(fam, 0, 0) for fam in FAMILIES if fam.get("splits", 1) > 1]


@gpu
@pytest.mark.parametrize("grid", ("full", "small"))
@pytest.mark.parametrize("case", DETERMINISM, ids=str)
def test_split_k_is_bitwise_deterministic(case, grid):
    """Every split configuration: ten launches of one plan give bitwise one output (the fix-up adds the partials in
    split order whatever order the units finish in), and it is correct; on the full grid and on the case's small one
    (CTAS CTAs, or CTAS clusters of a pair)."""
    a, b = operands(case)
    plan, out = poisoned_plan(case, a, b, None if grid == "full" else case.ctas)
    assert plan.schedule.splits > 1
    assert_bitwise_deterministic(plan, out, a, b)


SMALL_M = tuple(itertools.product((1, 16, 64, 128, 256, 512), ((4096, 4096), (2048, 6144))))


@gpu
@pytest.mark.parametrize("m, nk", SMALL_M, ids=lambda v: str(v))
def test_small_m_with_the_default_selection(m, nk):
    """What run() picks for the small-M suite's shapes (split-K, swap-AB, narrow tiles) is correct and
    deterministic."""
    import ptxgemm
    from ptxgemm import DeviceArray

    n, k = nk
    rng = np.random.default_rng(m * 7 + n)
    a = random_matrix(rng, m, k, "bfloat16")
    b = random_matrix(rng, k, n, "bfloat16")
    da, db = ptxgemm.to_device(a), ptxgemm.to_device(b)
    out = DeviceArray.empty((m, n), a.dtype)
    plan = ptxgemm.GemmPlan(da, db, out)
    outs = []
    for _ in range(3):
        out.poison()
        plan.launch()
        outs.append(out.to_numpy())
    assert check_result(outs[0], a, b).ok, plan.config.describe()
    assert all(np.array_equal(o.view(np.uint16), outs[0].view(np.uint16)) for o in outs[1:])


@gpu
def test_mutants_of_the_split_k_fix_up_are_killed(tmp_path):
    """Every synchronization instruction split-K adds (splitk.ptx.j2), in the pingpong and the cooperative kernel and
    in the 64-row pingpong whose final adds the partials two at a time (cfg.fixup_batch), alone and on pairs along M
    (each CTA of a pair with its own flag: tile = work * 2 + rank), broken: the publish
    (red.release) deleted, the final's poll (ld.acquire) passing at once, the sync that passes the poll on to the 128
    threads deleted, the flag's reset deleted, each caught on the mutation tester's workloads
    (ptxgemm.tools.mutants: 2 launches each with the workspace poisoned in between, so a flag left set lets the second
    launch's final read NaN partials). The sync before the publish is caught, or survives with the reason written
    in ptxgemm.tools.mutants (a latent race); the weakened forms likewise (the command's exit status checks that)."""
    assert_fix_up_mutants_killed(("split", "cooperative-split", "split-pairs", "split-cluster"), "splitk.ptx.j2",
                                 tmp_path / "mutants.json")
