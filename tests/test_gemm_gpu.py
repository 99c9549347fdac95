"""The pingpong GEMM on the GPU, and the proof that its cases exercise the pingpong.

Every case: random inputs (never zeros), the output poisoned with NaN first, and every output element checked
against its own bound (ptxgemm.accuracy, where the derivation is):

    |out_ij - ref_ij| <= u_out·|ref_ij| + (1 + u_out)·8·2^-23·sqrt(K)·sum_k |a_ik||b_kj| + tiny_out

ref is float64 from the exact inputs; u_out = 2^-8 (bf16), 2^-11 (fp16), 0 (fp32: the output is the fp32
accumulator, so only fp32's own accumulation error is allowed). The second term bounds K truncating fp32 additions
of exact products for zero-mean operands, with an 18x margin over a simulation. One wrong 16x16 block fails it
(tests/test_accuracy.py proves that on the CPU, test_one_wrong_block_fails_on_a_real_output here).

Coverage (the reason the suite exists): with a grid of min(SMs, tiles), small problems give consumer 1 no tile at
all, and the pingpong goes untested. So
- FIXED cases: for every kernel family the config allows (block_m x block_n, cluster), every layout of A and B,
  both input dtypes and every output dtype, with partial edge tiles in M, N and K, on a grid of 3 clusters, so
  every consumer of every CTA runs 3 tiles and each tile's k-loop wraps the stage ring at least twice. The tests
  compute this from the plan's schedule and fail if a family loses it.
- FULL_GRID cases: the default launch (one CTA per SM) on shapes where each consumer runs 9 to 18 tiles.
- random cases: edge sizes, half of them on a grid small enough that each consumer runs >= 2 tiles.
"""
from __future__ import annotations

import dataclasses
import itertools
import os
import subprocess
import sys
import zlib

import numpy as np
import pytest
from gemm_reference import DTYPES, check_result, random_matrix, reference

from ptxgemm.accuracy import check
from ptxgemm.errors import ConfigError
from ptxgemm.kernel.config import GemmConfig, SCHEDULES
from ptxgemm.kernel.schedule import plan_for

gpu = pytest.mark.gpu
SM_COUNT_ASSUMED = 132          # H100 SXM and H200: the CPU-side coverage checks assume it; GPU tests use the real one
MIN_TILES = 3                   # per consumer of every CTA, in every fixed case
MIN_RING_WRAPS = 2              # k_tiles >= 2 x stages in every fixed case
LAYOUTS = (("k", "mn"), ("k", "k"), ("mn", "mn"), ("mn", "k"))
DTYPE_SLOTS = (("bfloat16", "bfloat16"), ("float16", "float32"), ("float16", "float16"), ("bfloat16", "float32"))


TAIL_BLOCK_N = (160, 208)       # tiles that are not whole 64-column output panels: the tail's own store path


def kernel_families() -> list[dict]:
    """Every (schedule, block_m, block_n, cluster_m x cluster_n) GemmConfig accepts: a new tile option appears here by itself.
    (`schedule` is named only when it is not the default, so the pingpong cases keep their ids.)"""
    families = []
    for schedule, block_m, block_n, (cluster_m, cluster_n) in itertools.product(
            SCHEDULES, (64, 128, 256), (*range(64, 257, 64), *TAIL_BLOCK_N), ((1, 1), (2, 1), (1, 2))):
        try:
            GemmConfig(schedule=schedule, block_m=block_m, block_n=block_n, cluster_m=cluster_m, cluster_n=cluster_n)
        except ConfigError:
            continue
        fam = dict(block_m=block_m, block_n=block_n, cluster_m=cluster_m)
        if cluster_n != 1:
            fam["cluster_n"] = cluster_n
        if schedule != GemmConfig.schedule:
            fam["schedule"] = schedule
        families.append(fam)
    return families


@dataclasses.dataclass(frozen=True)
class Case:
    m: int
    n: int
    k: int
    in_dtype: str
    out_dtype: str
    a_major: str
    b_major: str
    cfg: tuple = ()              # GemmConfig keyword arguments, as sorted items
    ctas: int | None = None      # None: one CTA per SM

    @property
    def config(self) -> GemmConfig:
        return GemmConfig(in_dtype=self.in_dtype, out_dtype=self.out_dtype, a_major=self.a_major,
                          b_major=self.b_major, **dict(self.cfg))

    def schedule(self, sm_count: int):
        c = self.config
        return plan_for(c, self.m, self.n, self.k, sm_count, self.ctas)

    def __str__(self):
        cfg = "-".join(f"{k}{v}" for k, v in self.cfg) or "default"
        return (f"{self.m}x{self.n}x{self.k}-{self.in_dtype}-{self.out_dtype}-A{self.a_major}-B{self.b_major}-{cfg}"
                + (f"-ctas{self.ctas}" if self.ctas else ""))


def _fixed_cases() -> list[Case]:
    """3 clusters x 6 scheduler steps each (3 tiles per consumer); tiles_n = 3; M, N, K one short of whole tiles."""
    cases = []
    for f, fam in enumerate(kernel_families()):
        for j, (a_major, b_major) in enumerate(LAYOUTS):
            in_dtype, out_dtype = DTYPE_SLOTS[(j + f) % len(DTYPE_SLOTS)]  # each layout meets every slot
            cfg = GemmConfig(in_dtype=in_dtype, out_dtype=out_dtype, a_major=a_major, b_major=b_major, **fam)
            cluster_n = fam.get("cluster_n", 1)
            clusters, tiles_n = 3, 3 * cluster_n
            tiles_m = 2 * MIN_TILES * fam["cluster_m"]
            m = tiles_m * cfg.block_m - 8               # partial last tile row (a multiple of 8 for an M-major A)
            n = tiles_n * cfg.block_n - 24              # partial last tile column
            k = (MIN_RING_WRAPS * cfg.num_stages + 1) * cfg.block_k - 8   # partial last k-tile
            cases.append(Case(m, n, k, in_dtype, out_dtype, a_major, b_major, tuple(sorted(fam.items())),
                              ctas=clusters * cfg.cluster_size))
    return cases


FIXED = _fixed_cases()
FULL_GRID = [Case(8448, 9216, 1024, "bfloat16", "bfloat16", "k", "mn"),
             Case(8448, 9216, 128, "bfloat16", "bfloat16", "k", "mn"),
             Case(8448, 9216, 1024, "float16", "float32", "k", "k", (("cluster_m", 2),)),
             Case(4224, 9216, 1024, "bfloat16", "float16", "mn", "k", (("block_m", 64), ("block_n", 256))),
             Case(8448, 9216, 1024, "bfloat16", "bfloat16", "k", "mn", (("block_m", 256), ("schedule", "cooperative"))),
             Case(8448, 9216, 512, "float16", "float32", "k", "k",
                  (("block_m", 128), ("block_n", 256), ("cluster_m", 2), ("schedule", "cooperative"))),
             Case(8448, 9216, 1024, "bfloat16", "bfloat16", "k", "mn",
                  (("block_m", 128), ("block_n", 256), ("cluster_n", 2), ("raster", "n"), ("schedule", "cooperative"))),
             Case(8448, 9216, 1024, "bfloat16", "bfloat16", "k", "mn",
                  (("block_m", 256), ("cluster_m", 2), ("raster", "hilbert"), ("schedule", "cooperative")))]

EDGE = (1, 7, 8, 63, 64, 65, 127, 128, 129, 255, 256, 1000, 8448)
MAX_WORK = 2.5e9            # M·N·K cap per random case, so the random cases fit in a couple of minutes
N_CASES = int(os.environ.get("PTXGEMM_GPU_CASES", "200"))
SEED = int(os.environ.get("PTXGEMM_GPU_SEED", "20261121"))
COOPERATIVE = {"schedule": "cooperative"}
TAILS = ({"block_n": 160}, {**{"schedule": "cooperative"}, "block_m": 128, "block_n": 208})
RANDOM_CONFIGS = ({}, {}, {"block_n": 256, "block_m": 64}, {"block_n": 192}, {"block_m": 64},
                  {**COOPERATIVE, "block_m": 256}, {**COOPERATIVE, "block_m": 128, "block_n": 256},
                  {**COOPERATIVE, "block_m": 256, "block_n": 192}, {"raster": "n", "group_m": 4},
                  {**COOPERATIVE, "block_m": 128, "block_n": 256, "raster": "n"}, *TAILS, {"raster": "hilbert"},
                  {**COOPERATIVE, "block_m": 128, "block_n": 256, "raster": "hilbert"})
CLUSTER_CONFIGS = ({"cluster_m": 2}, {"cluster_m": 2, "block_m": 64, "block_n": 256},
                   {**COOPERATIVE, "cluster_m": 2, "block_m": 256}, {"cluster_n": 2},
                   {**COOPERATIVE, "cluster_n": 2, "block_m": 128, "block_n": 256, "raster": "n"},
                   {"cluster_n": 2, "raster": "hilbert"})


def _round8(x: int) -> int:
    return -(-x // 8) * 8


def _draw_cases(n: int, seed: int, configs) -> list[Case]:
    """Edge sizes; every other case on a grid small enough that each consumer runs >= 2 tiles (shapes too small
    for that are drawn again)."""
    rng = np.random.default_rng(seed)
    cases = []
    while len(cases) < n:
        m, n_, k = (int(rng.choice(EDGE)) for _ in range(3))
        a_major = "mn" if rng.random() < 0.15 else "k"
        b_major = "k" if rng.random() < 0.4 else "mn"
        n_, k = _round8(n_), _round8(k)          # row strides of B, C and a K-major A: multiples of 16 bytes
        if a_major == "mn":
            m = _round8(m)
        if m * n_ * k > MAX_WORK:
            continue
        in_dtype = str(rng.choice(["bfloat16", "float16"]))
        out_dtype = str(rng.choice([in_dtype, "float32"]))
        fam = configs[int(rng.integers(len(configs)))]
        case = Case(m, n_, k, in_dtype, out_dtype, a_major, b_major, tuple(sorted(fam.items())))
        if len(cases) % 2 == 0:                  # pingpong-heavy: at most units/4 clusters
            units = case.schedule(SM_COUNT_ASSUMED).units
            if units < 4:
                continue                         # too small to give two consumers two tiles each: draw again
            clusters = int(rng.integers(1, min(units // 4, SM_COUNT_ASSUMED) + 1))
            case = dataclasses.replace(case, ctas=clusters * case.config.cluster_size)
        cases.append(case)
    return cases


CASES = _draw_cases(N_CASES, SEED, RANDOM_CONFIGS)
#: cooperative tiles with a slot for every panel (cfg.epi_whole_tile: the consumer stages its whole tile at once),
#: which no 16-bit family of the random draws reaches on 4 stages: fewer stages, 16- and 32-bit outputs, a cluster
#: pair, ragged edges, and few CTAs so that each consumer rewrites its slots tile after tile
WHOLE_TILE_CASES = [
    Case(1000, 1000, 1000, "bfloat16", "bfloat16", "k", "mn", (("block_m", 256), ("schedule", "cooperative"),
                                                                ("stages", 3)), ctas=3),
    Case(2056, 1032, 520, "float16", "float32", "k", "k", (("block_m", 256), ("schedule", "cooperative"),
                                                             ("stages", 2)), ctas=5),
    Case(4104, 2056, 1024, "bfloat16", "bfloat16", "mn", "k", (("block_m", 256), ("cluster_m", 2),
                                                                ("schedule", "cooperative"), ("stages", 3)), ctas=8),
    Case(777, 4104, 4096, "float16", "float16", "k", "mn", (("block_m", 128), ("block_n", 128),
                                                             ("schedule", "cooperative"), ("stages", 4)), ctas=7)]


#: pairs along M whose K-major B halves are not 128-column panels (96 and 56 rows: DeepGEMM's 128x192 pair)
PAIR_HALF_CASES = [
    Case(1101, 1000, 1040, "bfloat16", "bfloat16", "k", "k", (("block_m", 128), ("block_n", 192), ("cluster_m", 2),
                                                                ("schedule", "cooperative")), ctas=8),
    Case(777, 600, 520, "float16", "float32", "mn", "k", (("block_m", 128), ("block_n", 192), ("cluster_m", 2)),
         ctas=6),
    Case(1030, 904, 776, "bfloat16", "bfloat16", "k", "k", (("block_m", 128), ("block_n", 112), ("cluster_m", 2)),
         ctas=4)]
# Clusters of 2 CTAs (B multicast) run last, in their own test: a fault there loses the CUDA context for the rest
# of the process, and must not hide the results of the default kernel.
CLUSTER_CASES = _draw_cases(N_CASES // 5, SEED + 1, CLUSTER_CONFIGS)


def _operands(case: Case):
    rng = np.random.default_rng(zlib.crc32(str(case).encode()))
    a = random_matrix(rng, case.m, case.k, case.in_dtype, order="C" if case.a_major == "k" else "F")
    b = random_matrix(rng, case.k, case.n, case.in_dtype, order="C" if case.b_major == "mn" else "F")
    return a, b


def run_case(case: Case):
    """(plan, output, a, b) of one launch into a NaN-poisoned output."""
    import ptxgemm
    from ptxgemm import DeviceArray

    a, b = _operands(case)
    out = DeviceArray.empty((case.m, case.n), DTYPES[case.out_dtype])
    out.poison()
    plan = ptxgemm.GemmPlan(ptxgemm.to_device(a), ptxgemm.to_device(b), out, case.config, ctas=case.ctas)
    assert (plan.config.a_major, plan.config.b_major) == (case.a_major, case.b_major)
    plan.launch()
    return plan, out.to_numpy(), a, b


def check_case(case: Case, device_report=None):
    from ptxgemm.runtime import driver

    plan, got, a, b = run_case(case)
    assert plan.schedule == case.schedule(driver.device_info().sm_count)
    verdict = check_result(got, a, b)
    assert verdict.ok, str(verdict)
    return plan, verdict


# ---------------------------------------------------------------------------------------------------------------
# Coverage, provable without a GPU
# ---------------------------------------------------------------------------------------------------------------

def test_fixed_cases_cover_every_family_layout_and_dtype():
    families = {tuple(sorted(f.items())) for f in kernel_families()}
    assert len(families) >= 10  # 64x{64..256}, 128x{64..192}, and the cluster pairs
    for fam in families:
        mine = [c for c in FIXED if c.cfg == fam]
        assert {(c.a_major, c.b_major) for c in mine} == set(LAYOUTS), fam
        assert {c.in_dtype for c in mine} == {"bfloat16", "float16"}, fam
        assert {c.out_dtype for c in mine} == {"bfloat16", "float16", "float32"}, fam
    for layout in LAYOUTS:
        assert {(c.in_dtype, c.out_dtype) for c in FIXED if (c.a_major, c.b_major) == layout} == set(DTYPE_SLOTS)


@pytest.mark.parametrize("case", FIXED + FULL_GRID, ids=str)
def test_case_exercises_the_pingpong(case):
    """Every consumer of every CTA runs >= MIN_TILES tiles, each k-loop wraps the ring twice, edges are partial."""
    s, cfg = case.schedule(SM_COUNT_ASSUMED), case.config
    assert s.min_tiles_per_consumer >= MIN_TILES, s.describe()
    assert s.k_tiles >= MIN_RING_WRAPS * cfg.num_stages or case in FULL_GRID, (s.k_tiles, cfg.num_stages)
    if case in FIXED:
        assert case.m % cfg.block_m and case.n % cfg.block_n and case.k % cfg.block_k


def test_random_cases_give_half_of_them_two_tiles_per_consumer():
    for cases in (CASES, CLUSTER_CASES):
        heavy = sum(c.schedule(SM_COUNT_ASSUMED).min_tiles_per_consumer >= 2 for c in cases)
        assert heavy >= len(cases) / 2, f"{heavy} of {len(cases)}"


# ---------------------------------------------------------------------------------------------------------------
# On the GPU
# ---------------------------------------------------------------------------------------------------------------

_worst: dict[str, float] = {}


def _note(verdict, out_dtype):
    _worst[out_dtype] = max(_worst.get(out_dtype, 0.0), verdict.worst_ratio)


@gpu
def test_random_cases_exercise_the_pingpong_on_this_gpu():
    """The same count with this GPU's SM count, i.e. the grid GemmPlan really launches."""
    from ptxgemm.runtime import driver

    sms = driver.device_info().sm_count
    for cases in (CASES, CLUSTER_CASES):
        heavy = sum(c.schedule(sms).min_tiles_per_consumer >= 2 for c in cases)
        assert heavy >= len(cases) / 2, f"{heavy} of {len(cases)} on {sms} SMs"
    for case in FIXED + FULL_GRID:
        assert case.schedule(sms).min_tiles_per_consumer >= MIN_TILES, (str(case), sms)


@gpu
@pytest.mark.parametrize("case", FIXED, ids=str)
def test_fixed_case(case):
    plan, verdict = check_case(case)
    assert plan.schedule.min_tiles_per_consumer >= MIN_TILES
    assert plan.k_tiles >= MIN_RING_WRAPS * plan.config.num_stages
    _note(verdict, case.out_dtype)


@gpu
@pytest.mark.parametrize("case", FULL_GRID, ids=str)
def test_full_grid_case(case):
    plan, verdict = check_case(case)
    assert plan.schedule.min_tiles_per_consumer >= MIN_TILES
    _note(verdict, case.out_dtype)


@gpu
@pytest.mark.parametrize("case", CASES, ids=str)
def test_random_case(case):
    _note(check_case(case)[1], case.out_dtype)


@gpu
def test_one_wrong_block_fails_on_a_real_output(device_report):
    """A correct GPU result passes; the same result with one 16x16 block taken from its neighbour, or missing one
    k-tile's contribution, fails."""
    case = FIXED[0]
    _, got, a, b = run_case(case)
    ref, absp = reference(a, b)
    assert check(got, ref, absp, case.k, in_dtype=case.in_dtype).ok
    moved = got.copy()
    moved[32:48, 48:64] = got[32:48, 64:80]
    assert not check(moved, ref, absp, case.k, in_dtype=case.in_dtype).ok
    stale = got.copy()
    k0 = 64
    partial = a[32:48, k0:k0 + 64].astype(np.float64) @ b[k0:k0 + 64, 48:64].astype(np.float64)
    stale[32:48, 48:64] = (got[32:48, 48:64].astype(np.float64) - partial).astype(got.dtype)
    verdict = check(stale, ref, absp, case.k, in_dtype=case.in_dtype)
    assert not verdict.ok and verdict.bad_blocks == [(2, 3)], str(verdict)
    device_report("worst error/bound over the GEMM cases so far: "
                  + ", ".join(f"{d} {r:.3g}" for d, r in sorted(_worst.items())))


# Every element carries a code of its own (row, column), built from small integers so that the products and sums
# are exact in any dtype: the epilogue template (registers -> stmatrix/st.shared -> swizzled staging -> TMA store)
# is checked element by element, not a Python mirror of it.
ROW_MOD = 251   # a prime: a row or column displaced by a whole tile (64, 128, ...) changes its code

def _code_operands(m: int, n: int, k: int, in_dtype: str, what: str):
    """A (m, k) and B (k, n) whose product is code(r, c): 'rc' (fp32 output) r·2048 + c + const, exact;
    'row' / 'col' (16-bit outputs, exact up to 256) r % 251 + 1 or c % 251 + 1. Columns 4.. of A and rows 4.. of B
    hold pairs (1, v), (1, -v) that cancel exactly, so no operand element is zero."""
    r, c = np.arange(m), np.arange(n)
    a = np.ones((m, k))
    b = np.zeros((k, n))
    if what == "rc":
        a[:, 0], b[0] = (r >> 4) + 1, 2.0 ** 15
        a[:, 1], b[1] = (r & 15) + 1, 2.0 ** 11
        b[2], b[3] = ((c >> 4) + 1) * 16, (c & 15) + 1
        expected = np.add.outer(r * 2048.0 + 2 ** 15 + 2 ** 11, c + 17.0)
    else:
        code = (r if what == "row" else c) % ROW_MOD + 1.0
        if what == "row":
            a[:, 0], b[0] = code, 1.0
        else:
            b[0] = code
        b[1], b[2], b[3] = 2.0, -1.0, -1.0
        expected = np.broadcast_to(code[:, None] if what == "row" else code[None, :], (m, n))
    b[4::2], b[5::2] = 3.0, -3.0
    return a.astype(DTYPES[in_dtype]), np.asarray(b.astype(DTYPES[in_dtype]), order="F"), expected


@gpu
@pytest.mark.parametrize("fam", kernel_families(), ids=lambda f: "-".join(f"{k}{v}" for k, v in f.items()))
@pytest.mark.parametrize("out_dtype", ["bfloat16", "float16", "float32"])
def test_epilogue_puts_every_element_where_it_belongs(fam, out_dtype):
    import ptxgemm
    from ptxgemm import DeviceArray

    cfg = GemmConfig(out_dtype=out_dtype, **fam)
    m, n, k = 2 * cfg.block_m * cfg.cluster_m + 40, 2 * cfg.block_n * cfg.cluster_n + 24, 16
    for what in (("rc",) if out_dtype == "float32" else ("row", "col")):
        a, b, expected = _code_operands(m, n, k, "bfloat16", what)
        out = DeviceArray.empty((m, n), DTYPES[out_dtype])
        out.poison()
        ptxgemm.GemmPlan(ptxgemm.to_device(a), ptxgemm.to_device(b), out, cfg, ctas=cfg.cluster_size).launch()
        got = out.to_numpy().astype(np.float64)
        wrong = np.argwhere(got != expected)
        if len(wrong):
            r, c = wrong[0]
            where = (f"holds the code of row {int(got[r, c]) - 1}" if what == "row" else
                     f"holds the code of column {int(got[r, c]) - 1}" if what == "col" else
                     f"holds the code of (row, col) = {divmod(int(got[r, c]) - 2 ** 15 - 2 ** 11 - 17, 2048)}")
            pytest.fail(f"{len(wrong)} of {m}x{n} elements misplaced ({what} codes); first: ({r}, {c}) {where}")


@gpu
def test_run_matches_numpy_semantics_and_layouts():
    import ml_dtypes

    import ptxgemm

    rng = np.random.default_rng(1)
    a = random_matrix(rng, 300, 264, "bfloat16")
    b_c = random_matrix(rng, 264, 200, "bfloat16")               # C order (K, N): MN-major, no copy
    b_f = np.asfortranarray(b_c)                                 # Fortran order: K-major
    b_t = np.ascontiguousarray(b_c.T).T                          # transpose of a C-order (N, K): K-major
    for b in (b_c, b_f, b_t):
        out = ptxgemm.run(a, b)
        assert out.shape == (300, 200) and out.dtype == np.dtype(ml_dtypes.bfloat16)
        assert check_result(out, a, b_c).ok
    out32 = ptxgemm.run(a, b_c, out_dtype=np.float32)
    assert out32.dtype == np.float32 and check_result(out32, a, b_c).ok


@gpu
def test_repeated_runs_are_bitwise_identical():
    import ptxgemm

    rng = np.random.default_rng(2)
    a = random_matrix(rng, 1000, 1024, "bfloat16")
    b = random_matrix(rng, 1024, 1032, "bfloat16")
    first = ptxgemm.run(a, b)
    for _ in range(3):
        assert np.array_equal(ptxgemm.run(a, b).view(np.uint16), first.view(np.uint16))


@gpu
def test_thousand_back_to_back_launches():
    import ptxgemm
    from ptxgemm import DeviceArray
    from ptxgemm.runtime import driver

    rng = np.random.default_rng(3)
    a = random_matrix(rng, 2048, 1024, "bfloat16")
    b = random_matrix(rng, 1024, 2048, "bfloat16")
    out = DeviceArray.empty((2048, 2048), a.dtype)
    out.poison()
    plan = ptxgemm.GemmPlan(ptxgemm.to_device(a), ptxgemm.to_device(b), out, ctas=16)  # 8 tiles per consumer
    for _ in range(1000):
        plan.launch()
    driver.synchronize("1000 back-to-back GEMM launches")
    assert check_result(out.to_numpy(), a, b).ok


@gpu
def test_device_path_reuses_the_compiled_kernel():
    import ptxgemm
    from ptxgemm import gemm

    rng = np.random.default_rng(4)
    a = ptxgemm.to_device(random_matrix(rng, 256, 128, "bfloat16"))
    b = ptxgemm.to_device(random_matrix(rng, 128, 256, "bfloat16"))
    ptxgemm.matmul(a, b)
    n_kernels = len(gemm._kernels)
    out = ptxgemm.matmul(a, b)
    assert len(gemm._kernels) == n_kernels
    assert isinstance(out, ptxgemm.DeviceArray) and out.shape == (256, 256)


@gpu
def test_debug_mode_runs_clean():
    """The bounded-wait build computes the same result (its waits never give up on a correct kernel)."""
    import ptxgemm

    rng = np.random.default_rng(5)
    a = random_matrix(rng, 777, 520, "bfloat16")
    b = random_matrix(rng, 520, 1000, "bfloat16")
    out = ptxgemm.run(a, b, config=ptxgemm.GemmConfig(debug=True))
    assert check_result(out, a, b).ok


@gpu
def test_mutants_of_the_ordering_barriers_are_killed(tmp_path):
    """The mutation tester, driven from the suite on the synchronization a reviewer deleted unnoticed before:
    every bar.sync and every bulk-store wait of the default kernel, deleted or weakened, is caught (or survives
    with a stated reason, which the command's exit status checks)."""
    import json

    out = tmp_path / "mutants.json"
    proc = subprocess.run([sys.executable, "-m", "ptxgemm", "mutants", "--kind", "bar.sync", "--kind",
                           "cp.async.bulk.wait_group", "--json", str(out)], capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = json.loads(out.read_text())["configs"][0]["mutants"]
    # the mainloop- and epilogue-order barriers and the wait for the TMA store to finish reading the staging buffer
    for prefix, mutation in (("bar.sync    %my_mma_bar", "deleted"), ("bar.sync    %my_epi_bar", "deleted"),
                             ("cp.async.bulk.wait_group.read", "deleted")):
        sites = [r for r in records if r["instruction"].startswith(prefix) and r["mutation"] == mutation]
        assert sites and all(r["status"] == "killed" for r in sites), sites


@gpu
def test_mutants_of_the_cooperative_epilogue_are_killed(tmp_path):
    """The cooperative schedule's own synchronization: the wait before a staging slot is rewritten, the barrier
    that passes it on, and the bulk-group commit per panel; each deleted, the suite's workloads catch it."""
    import json

    out = tmp_path / "mutants.json"
    proc = subprocess.run([sys.executable, "-m", "ptxgemm", "mutants", "--preset", "cooperative", "--kind",
                           "bar.sync", "--kind", "cp.async.bulk.wait_group", "--kind", "cp.async.bulk.commit_group",
                           "--json", str(out)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = json.loads(out.read_text())["configs"][0]["mutants"]
    for prefix in ("@%p_leader cp.async.bulk.wait_group.read", "@%p_leader cp.async.bulk.commit_group"):
        sites = [r for r in records if r["instruction"].startswith(prefix) and r["mutation"] == "deleted"]
        assert sites and all(r["status"] == "killed" for r in sites), sites
    slot_free = [r for r in records if "the slot is free" in r["site"] and r["mutation"] == "deleted"]
    assert slot_free and all(r["status"] == "killed" for r in slot_free), slot_free


def test_whole_tile_cases_stage_their_whole_tile():
    """The cases below exercise what they are for: every one stages its whole tile (CPU only)."""
    assert all(c.config.epi_whole_tile for c in WHOLE_TILE_CASES)


@pytest.mark.parametrize("case", WHOLE_TILE_CASES, ids=str)
@gpu
def test_whole_tile_case(case):
    _note(check_case(case)[1], case.out_dtype)


@gpu
def test_mutants_of_the_whole_tile_epilogue_are_killed(tmp_path):
    """The cooperative epilogue with a slot for every panel (cfg.epi_whole_tile, preset cooperative-whole-tile:
    coop256x128 on 3 stages): the one wait for the previous tile's stores, the barriers before and after the whole
    tile's stmatrix writes, the fence and the tile's one bulk group: every mutant killed or explained by a reason
    written from a device run (the command exits 1 on an unexplained survivor). H200, run 79: 6 of 9 killed (the
    wait, the slots-free barrier, the commit, the tile barrier's weakened count); the tile barrier deleted survived,
    as the per-panel one does, and its reason was written from that run."""
    import json

    out = tmp_path / "mutants.json"
    proc = subprocess.run([sys.executable, "-m", "ptxgemm", "mutants", "--preset", "cooperative-whole-tile",
                           "--template", "gemm_cooperative.ptx.j2", "--kind", "bar.sync", "--kind",
                           "cp.async.bulk.wait_group", "--kind", "cp.async.bulk.commit_group", "--kind",
                           "fence.proxy.async", "--json", str(out)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = json.loads(out.read_text())["configs"][0]["mutants"]
    for needle in ("the slots are free", "the tile is complete", "have read them", "one group for the tile"):
        assert any(needle in r["site"] for r in records), (needle, records)   # the whole-tile path is what ran


@pytest.mark.parametrize("case", CLUSTER_CASES, ids=str)
@gpu
def test_random_cluster_case(case):
    _note(check_case(case)[1], case.out_dtype)


@pytest.mark.parametrize("case", PAIR_HALF_CASES, ids=str)
@gpu
def test_pair_half_case(case):
    """After the cluster cases, for the same reason (a fault loses the context)."""
    assert case.config.cluster_m == 2 and case.config.block_n % 128
    _note(check_case(case)[1], case.out_dtype)
