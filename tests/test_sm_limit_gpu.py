"""ptxgemm.set_sm_limit on the GPU: plans made under a limit launch at most that many CTAs -- matmul's, a GemmPlan's,
grouped_matmul's and the torch ops' -- and stay right (random inputs, outputs poisoned first, every element against
float64 with ptxgemm.accuracy's bound); a change of limit makes the next call plan again, and None gives the whole
GPU back."""
from __future__ import annotations

import numpy as np
import pytest

import ptxgemm
from ptxgemm.runtime import driver
from ptxgemm.runtime.arrays import DeviceArray
from gemm_reference import check_result, random_matrix

gpu = pytest.mark.gpu
BF16 = np.dtype("bfloat16")
LIMIT = 100


@pytest.fixture
def limited():
    reason = driver.no_device_reason()
    if reason is not None:
        pytest.skip(f"no CUDA device: {reason}")
    ptxgemm.set_sm_limit(LIMIT)
    ptxgemm.reset_plan_stats()
    yield driver.device_info().sm_count
    ptxgemm.set_sm_limit(None)


def _poisoned(shape):
    return DeviceArray.from_numpy(np.full(shape, np.nan, dtype=BF16))


def _ctas(plan) -> int:
    return plan.schedule.clusters * plan.config.cluster_size


@gpu
@pytest.mark.parametrize("m, n, k", [(4096, 4096, 2048), (1900, 3000, 1256), (512, 768, 8192)])
def test_a_plan_under_a_limit_launches_within_it_and_is_right(limited, m, n, k):
    rng = np.random.default_rng(m + n + k)
    a, b = random_matrix(rng, m, k, "bfloat16"), random_matrix(rng, k, n, "bfloat16")
    da, db, out = DeviceArray.from_numpy(a), DeviceArray.from_numpy(b), _poisoned((m, n))
    plan = ptxgemm.GemmPlan(da, db, out)
    assert _ctas(plan) <= LIMIT < limited
    plan.launch()
    verdict = check_result(out.to_numpy(), a, b)
    assert verdict.ok, verdict


@gpu
def test_matmul_plans_again_when_the_limit_changes(limited):
    rng = np.random.default_rng(5)
    m, n, k = 4096, 4096, 2048
    a, b = random_matrix(rng, m, k, "bfloat16"), random_matrix(rng, k, n, "bfloat16")
    da, db = DeviceArray.from_numpy(a), DeviceArray.from_numpy(b)
    for limit, made in ((LIMIT, 1), (LIMIT, 1), (None, 2), (None, 2), (64, 3)):
        if limit != ptxgemm.sm_limit():
            ptxgemm.set_sm_limit(limit)
        out = _poisoned((m, n))
        ptxgemm.matmul(da, db, out=out)
        assert ptxgemm.plan_stats()["plans_made"] == made, (limit, ptxgemm.plan_stats())
        assert check_result(out.to_numpy(), a, b).ok, limit
        plans = list(ptxgemm.gemm._cache.plans.values())
        assert len(plans) == 1
        assert _ctas(plans[0]) <= (limit or limited)
        if limit is None:
            assert _ctas(plans[0]) > LIMIT   # the whole GPU again


@gpu
def test_grouped_matmul_under_a_limit(limited):
    rng = np.random.default_rng(9)
    g, k, n = 4, 512, 1024
    sizes = np.array([700, 0, 1300, 900], dtype=np.int32)
    total = int(sizes.sum())
    a = random_matrix(rng, total, k, "bfloat16")
    b = np.stack([random_matrix(rng, k, n, "bfloat16") for _ in range(g)])
    offs = DeviceArray.from_numpy(np.cumsum(sizes).astype(np.int32))
    out = _poisoned((total, n))
    plan = ptxgemm.GroupedPlan(DeviceArray.from_numpy(a), DeviceArray.from_numpy(b), offs=offs, out=out)
    assert plan.grid <= LIMIT
    plan.launch()
    got, start = out.to_numpy(), 0
    for gi, rows in enumerate(sizes):
        if rows:
            verdict = check_result(got[start:start + rows], a[start:start + rows], b[gi])
            assert verdict.ok, f"group {gi}: {verdict}"
        start += rows


@gpu
def test_the_torch_ops_plan_again_under_a_limit(limited):
    torch = pytest.importorskip("torch")
    import ptxgemm.torch as pt

    gen = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn(2048, 1024, device="cuda", dtype=torch.bfloat16, generator=gen)
    w = torch.randn(3072, 1024, device="cuda", dtype=torch.bfloat16, generator=gen)
    ptxgemm.set_sm_limit(None)
    pt.mm(x, w.t())
    before = ptxgemm.plan_stats()["plans_made"]
    ptxgemm.set_sm_limit(LIMIT)
    y = pt.mm(x, w.t())
    assert ptxgemm.plan_stats()["plans_made"] == before + 1   # the op's cached plan was dropped
    plans = [entry[0] for entry in pt.ops._cache.plans.values()]   # (plan, result shape, dtype, device)
    assert plans and all(_ctas(p) <= LIMIT for p in plans)
    xh = x.float().cpu().numpy().astype(BF16)
    wh = w.t().float().cpu().numpy().astype(BF16)
    verdict = check_result(y.float().cpu().numpy(), xh, wh)
    assert verdict.ok, verdict
