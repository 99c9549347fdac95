"""The pingpong GEMM on the GPU: random shapes from edge values, both B (and A) layouts, every dtype pair.

Each case: random inputs (never zeros), the output poisoned with NaN first, ‖out−ref‖/‖ref‖ against a float64
reference. Plus determinism, 1000 back-to-back launches, the host API and its errors.
"""
from __future__ import annotations

import os
import zlib

import numpy as np
import pytest

from gemm_reference import DTYPES, TOLERANCE, random_matrix, reference, relative_error

pytestmark = pytest.mark.gpu

EDGE = (1, 7, 8, 63, 64, 65, 127, 128, 129, 255, 256, 1000, 8448)
MAX_WORK = 2.5e9            # M·N·K cap per random case, so 200 cases fit in a couple of minutes
N_CASES = int(os.environ.get("PTXGEMM_GPU_CASES", "200"))
SEED = int(os.environ.get("PTXGEMM_GPU_SEED", "20261121"))


def _round8(x: int) -> int:
    return -(-x // 8) * 8


def _draw_cases(n: int, seed: int, configs=None):
    rng = np.random.default_rng(seed)
    configs = configs or [dict(), dict(), dict(), dict(block_n=256, block_m=64), dict(block_n=192), dict(block_m=64)]
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
        cfg = configs[int(rng.integers(len(configs)))]
        cases.append((m, n_, k, in_dtype, out_dtype, a_major, b_major, cfg))
    return cases


CASES = _draw_cases(N_CASES, SEED)
# Clusters of 2 CTAs (B multicast) run last, in their own test: a fault there loses the CUDA context for the rest
# of the process, and must not hide the results of the default kernel.
CLUSTER_CASES = _draw_cases(N_CASES // 5, SEED + 1, [dict(cluster_m=2), dict(cluster_m=2, block_m=64, block_n=256)])


def _case_id(c):
    return f"{c[0]}x{c[1]}x{c[2]}-{c[3]}-{c[4]}-A{c[5]}-B{c[6]}-" + ("-".join(f"{k}{v}" for k, v in c[7].items())
                                                                      or "default")


def _operands(rng, m, n, k, in_dtype, a_major, b_major):
    a = random_matrix(rng, m, k, in_dtype, order="C" if a_major == "k" else "F")
    b = random_matrix(rng, k, n, in_dtype, order="C" if b_major == "mn" else "F")
    return a, b


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_random_case(case):
    check_case(case)


def check_case(case):
    import ptxgemm
    from ptxgemm import DeviceArray

    m, n, k, in_dtype, out_dtype, a_major, b_major, cfg_kw = case
    rng = np.random.default_rng(zlib.crc32(repr(case).encode()))
    a, b = _operands(rng, m, n, k, in_dtype, a_major, b_major)
    da, db = ptxgemm.to_device(a), ptxgemm.to_device(b)
    out = DeviceArray.empty((m, n), DTYPES[out_dtype])
    out.poison()
    plan = ptxgemm.GemmPlan(da, db, out, ptxgemm.GemmConfig(**cfg_kw))
    assert plan.config.a_major == a_major and plan.config.b_major == b_major
    plan.launch()
    got = out.to_numpy()
    assert not np.isnan(got.astype(np.float32)).any(), "some outputs were never written (NaN poison survived)"
    err = relative_error(got, reference(a, b))
    assert err <= TOLERANCE[out_dtype], f"relative error {err:.3e} > {TOLERANCE[out_dtype]}"


def test_run_matches_numpy_semantics_and_layouts():
    import ml_dtypes

    import ptxgemm

    rng = np.random.default_rng(1)
    a = random_matrix(rng, 300, 264, "bfloat16")
    b_c = random_matrix(rng, 264, 200, "bfloat16")               # C order (K, N): MN-major, no copy
    b_f = np.asfortranarray(b_c)                                 # Fortran order: K-major
    b_t = np.ascontiguousarray(b_c.T).T                          # transpose of a C-order (N, K): K-major
    ref = reference(a, b_c)
    for b in (b_c, b_f, b_t):
        out = ptxgemm.run(a, b)
        assert out.shape == (300, 200) and out.dtype == np.dtype(ml_dtypes.bfloat16)
        assert relative_error(out, ref) <= TOLERANCE["bfloat16"]
    out32 = ptxgemm.run(a, b_c, out_dtype=np.float32)
    assert out32.dtype == np.float32 and relative_error(out32, ref) <= TOLERANCE["float32"]


def test_repeated_runs_are_bitwise_identical():
    import ptxgemm

    rng = np.random.default_rng(2)
    a = random_matrix(rng, 1000, 1024, "bfloat16")
    b = random_matrix(rng, 1024, 1032, "bfloat16")
    first = ptxgemm.run(a, b)
    for _ in range(3):
        assert np.array_equal(ptxgemm.run(a, b).view(np.uint16), first.view(np.uint16))


def test_thousand_back_to_back_launches():
    import ptxgemm
    from ptxgemm import DeviceArray, driver

    rng = np.random.default_rng(3)
    a = random_matrix(rng, 2048, 1024, "bfloat16")
    b = random_matrix(rng, 1024, 2048, "bfloat16")
    out = DeviceArray.empty((2048, 2048), a.dtype)
    out.poison()
    plan = ptxgemm.GemmPlan(ptxgemm.to_device(a), ptxgemm.to_device(b), out)
    for _ in range(1000):
        plan.launch()
    driver.synchronize("1000 back-to-back GEMM launches")
    assert relative_error(out.to_numpy(), reference(a, b)) <= TOLERANCE["bfloat16"]


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


def test_debug_mode_runs_clean():
    """The bounded-wait build computes the same result (its waits never give up on a correct kernel)."""
    import ptxgemm

    rng = np.random.default_rng(5)
    a = random_matrix(rng, 777, 520, "bfloat16")
    b = random_matrix(rng, 520, 1000, "bfloat16")
    out = ptxgemm.run(a, b, config=ptxgemm.GemmConfig(debug=True))
    assert relative_error(out, reference(a, b)) <= TOLERANCE["bfloat16"]


@pytest.mark.parametrize("case", CLUSTER_CASES, ids=_case_id)
def test_random_cluster_case(case):
    check_case(case)
