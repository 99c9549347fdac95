"""FP8 inputs (float8_e4m3fn, float8_e5m2) on the GPU: the k32 wgmma mainloop, both operands K-major.

Checks as in tests/test_gemm_gpu.py: random inputs (standard normal rounded to the fp8 type, never zero), a
NaN-poisoned output, every element against ptxgemm.accuracy's bound from a float64 reference of the exact fp8
values (fp8 inputs: the provisional FP8_ACCUMULATION_UNIT term). Each case runs on 3 CTAs, so every consumer runs
several tiles and every tile's k-loop wraps the stage ring (asserted from the schedule)."""
from __future__ import annotations

import zlib

import numpy as np
import pytest
from gemm_reference import check_result, random_matrix

from ptxgemm.kernel.config import GemmConfig
from ptxgemm.kernel.schedule import plan_for

gpu = pytest.mark.gpu
CTAS = 3
FP8 = ("float8_e4m3fn", "float8_e5m2")
CASES = [(tag, in_dtype, out_dtype, m, n, k)
         for tag, (m, n, k) in (("pp128x128", (700, 900, 2100)), ("coop128x256", (1000, 1100, 1500)),
                                ("pp64x128", (333, 520, 2304)), ("coop256x128", (900, 700, 1600)))
         for in_dtype in FP8 for out_dtype in ("bfloat16", "float32", "float16")]


def _config(tag, in_dtype, out_dtype):
    base = GemmConfig.from_tag(tag)
    return GemmConfig(schedule=base.schedule, block_m=base.block_m, block_n=base.block_n, in_dtype=in_dtype,
                      out_dtype=out_dtype, a_major="k", b_major="k")


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_case_exercises_the_pingpong_and_the_ring(case):
    tag, in_dtype, out_dtype, m, n, k = case
    cfg = _config(tag, in_dtype, out_dtype)
    s = plan_for(cfg, m, n, k, 132, CTAS)
    assert s.min_tiles_per_consumer >= 2 and s.k_tiles >= 2 * cfg.num_stages, s.describe()


@gpu
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_fp8_case(case):
    import ptxgemm

    tag, in_dtype, out_dtype, m, n, k = case
    rng = np.random.default_rng(zlib.crc32(repr(case).encode()))   # the same operands in every process
    a = random_matrix(rng, m, k, in_dtype)                      # row-major: K-major
    b = random_matrix(rng, k, n, in_dtype, order="F")           # column-major: K-major
    da, db = ptxgemm.to_device(a), ptxgemm.to_device(b)
    out = ptxgemm.DeviceArray.empty((m, n), np.dtype(ptxgemm.accuracy.DTYPES[out_dtype]))
    out.poison()
    plan = ptxgemm.GemmPlan(da, db, out, _config(tag, in_dtype, out_dtype), ctas=CTAS)
    assert plan.config.in_dtype == in_dtype and plan.config.block_k == 128
    plan.launch()
    verdict = check_result(out.to_numpy(), a, b)
    assert verdict.ok, str(verdict)


@gpu
def test_run_takes_fp8_numpy_arrays_with_the_default_selection():
    import ptxgemm

    rng = np.random.default_rng(3)
    a = random_matrix(rng, 2000, 3000, "float8_e4m3fn")
    b = random_matrix(rng, 3000, 1500, "float8_e4m3fn", order="F")
    out = ptxgemm.run(a, b)
    assert out.dtype == np.dtype(ptxgemm.accuracy.DTYPES["bfloat16"])
    assert check_result(out, a, b).ok


@pytest.mark.parametrize("in_dtype", FP8)
def test_fp8_kernel_assembles_to_qgmma_in_a_lean_loop(in_dtype):
    """No GPU: the fp8 build's consumer k-loop holds its QGMMA k32 instructions (4 per m64 row block per stage,
    the same count as bf16's HGMMA k16 over the same 128 bytes of K), no R2UR, and no ptxas warning."""
    import ptxgemm
    from ptxgemm.tools.dump import k_loop_report

    cfg = _config("pp128x128", in_dtype, "bfloat16")
    compiled = ptxgemm.compile_gemm(cfg)
    sass = compiled.sass()
    wgmma_type = {"float8_e4m3fn": "E4M3", "float8_e5m2": "E5M2"}[in_dtype]
    assert f"QGMMA.64x128x32.F32.{wgmma_type}.{wgmma_type}" in sass and "HGMMA" not in sass
    loop = k_loop_report(sass)
    assert loop["hgmma"] == cfg.k_steps * cfg.m_halves and loop["r2ur"] == 0
    assert not compiled.report.warning_codes


# The per-tensor fp8 wave rule's forms (select/unsplit_wave.fp8_wave_splits): the 64x64 pingpong at the deepest ring,
# unsplit and in two splits, at M of one and two tile rows and unaligned edges. Each on 3 CTAs (so every consumer
# runs several tiles) with a k-loop that wraps the 13-stage ring more than once; the split case adds each partial
# in the split-K fix-up, and the lead's case runs a final longer than its partial on rings that mix the two.
WAVE_CASES = [("pp64x64s13", 64, 840, 4352), ("pp64x64s13", 100, 700, 3456), ("pp64x64k2s13", 128, 390, 7040),
              ("pp64x64k2s13", 64, 333, 6656),
              # the form the selection runs since the split lead (select/split_lead.py): the final 9 k-tiles longer
              ("pp64x64k2l9s13", 96, 400, 8152)]


def _wave_config(tag, in_dtype="float8_e4m3fn"):
    return GemmConfig.from_tag(tag, in_dtype=in_dtype, out_dtype="bfloat16", a_major="k", b_major="k")


@pytest.mark.parametrize("case", WAVE_CASES, ids=lambda c: "-".join(map(str, c)))
def test_wave_case_exercises_the_deep_ring_and_its_splits(case):
    tag, m, n, k = case
    cfg = _wave_config(tag)
    assert cfg.stages == cfg.most_stages == 13
    s = plan_for(cfg, m, n, k, 132, CTAS)
    assert s.min_tiles_per_consumer >= 2 and s.k_tiles >= 2 * cfg.num_stages, s.describe()
    assert s.splits == cfg.splits


@gpu
@pytest.mark.parametrize("case", WAVE_CASES, ids=lambda c: "-".join(map(str, c)))
def test_fp8_wave_case(case):
    import ptxgemm

    tag, m, n, k = case
    rng = np.random.default_rng(zlib.crc32(repr(case).encode()))
    a = random_matrix(rng, m, k, "float8_e4m3fn")
    b = random_matrix(rng, k, n, "float8_e4m3fn", order="F")
    da, db = ptxgemm.to_device(a), ptxgemm.to_device(b)
    out = ptxgemm.DeviceArray.empty((m, n), np.dtype(ptxgemm.accuracy.DTYPES["bfloat16"]))
    out.poison()
    plan = ptxgemm.GemmPlan(da, db, out, _wave_config(tag), ctas=CTAS)
    assert plan.config.stages == 13
    plan.launch()
    verdict = check_result(out.to_numpy(), a, b)
    assert verdict.ok, str(verdict)


@gpu
@pytest.mark.parametrize("shape, tag", [((64, 4096, 7168), "pp64x64s13"), ((64, 2112, 7168), "pp64x64k2l9s13")])
def test_run_takes_the_fp8_wave_rules_pick(shape, tag):
    """The default selection on an H100 or H200 (132 SMs) picks the wave rule's form, and it is right."""
    import ptxgemm
    from ptxgemm.runtime import driver

    if driver.device_info().sm_count != 132:
        pytest.skip("the rule's fit is for 132 SMs")
    m, n, k = shape
    rng = np.random.default_rng(m + n + k)
    a = random_matrix(rng, m, k, "float8_e4m3fn")
    b = random_matrix(rng, k, n, "float8_e4m3fn", order="F")
    assert ptxgemm.select_config(m, n, k, "float8_e4m3fn", "bfloat16", "k", "k").tag == tag
    assert check_result(ptxgemm.run(a, b), a, b).ok
