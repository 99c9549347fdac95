"""ptxgemm.set_sm_limit on the CPU: the argument rules, what planning sees of a device under a limit, the schedules
it then makes, and that every plan cache is dropped when a limit changes (tests/test_sm_limit_gpu.py runs it)."""
from __future__ import annotations

import dataclasses

import pytest

import ptxgemm
from ptxgemm import ConfigError
from ptxgemm.kernel.config import GemmConfig
from ptxgemm.kernel.schedule import plan_for
from ptxgemm.plan.cache import PlanCache
from ptxgemm.runtime import driver, sm_limit


@pytest.fixture(autouse=True)
def no_limit_after():
    yield
    for ordinal in (0, 1):
        ptxgemm.set_sm_limit(None, device=ordinal)


def _info(ordinal=0, sms=132):
    return driver.DeviceInfo(ordinal=ordinal, name="NVIDIA H200", compute_capability=(9, 0), sm_count=sms,
                             l2_bytes=60 << 20, max_smem_per_block_optin=232448, clock_khz=1980000,
                             driver_version=13000)


@pytest.mark.parametrize("limit", [0, -4, True, 1.5, "100", 100.0])
def test_a_limit_is_a_positive_int_or_none(limit):
    with pytest.raises(ConfigError, match=r"^limit: a number of SMs \(an int >= 1\)"):
        ptxgemm.set_sm_limit(limit)
    assert ptxgemm.sm_limit() is None


def test_the_device_is_checked_by_name():
    with pytest.raises(ConfigError, match=r"^device: a CUDA device ordinal"):
        ptxgemm.set_sm_limit(100, device=-1)
    with pytest.raises(ConfigError, match=r"^device: a CUDA device ordinal"):
        ptxgemm.sm_limit(device="cuda:0")


def test_planning_sees_the_limit_of_its_own_device_only():
    ptxgemm.set_sm_limit(100, device=1)
    assert ptxgemm.sm_limit(device=1) == 100 and ptxgemm.sm_limit(device=0) is None
    assert sm_limit.applied(_info(1)).sm_count == 100
    assert sm_limit.applied(_info(0)) == _info(0)
    assert dataclasses.replace(sm_limit.applied(_info(1)), sm_count=132) == _info(1)   # nothing else changes
    ptxgemm.set_sm_limit(200, device=1)           # above the device's count: all of them
    assert sm_limit.applied(_info(1)).sm_count == 132
    ptxgemm.set_sm_limit(None, device=1)
    assert ptxgemm.sm_limit(device=1) is None and sm_limit.applied(_info(1)) == _info(1)


@pytest.mark.parametrize("tag, limit", [("coop128x256", 100), ("coop128x256c2", 115), ("coop128x256c2sk", 101),
                                        ("pp128x128", 7)])
def test_the_schedule_under_a_limit_launches_whole_clusters_within_it(tag, limit):
    cfg = GemmConfig.from_tag(tag)
    ptxgemm.set_sm_limit(limit)
    s = plan_for(cfg, 8192, 8192, 4096, sm_limit.applied(_info()).sm_count)
    assert s.clusters * cfg.cluster_size <= limit < (s.clusters + 1) * cfg.cluster_size
    assert plan_for(cfg, 8192, 8192, 4096, _info().sm_count).clusters * cfg.cluster_size > limit   # none: all


def test_a_change_drops_every_cached_plan():
    caches = [PlanCache(8), PlanCache(8)]
    for c in caches:
        c.add(("key",), object())
    ptxgemm.set_sm_limit(64)
    assert all(not c.plans for c in caches)
    for c in caches:
        c.add(("key",), object())
    ptxgemm.set_sm_limit(None)
    assert all(not c.plans for c in caches)


def test_the_selection_ranks_tiles_for_the_limited_count():
    """select_config for a device cut to 100 SMs, as a plan under a limit asks for it: 1920x2048x4096 is 120 tiles of
    128x256, one wave on 132 SMs but 1.2 on 100, where the model ranks another tile first."""
    ptxgemm.set_sm_limit(100)
    full = ptxgemm.select_config(1920, 2048, 4096, device=_info())
    limited = ptxgemm.select_config(1920, 2048, 4096, device=sm_limit.applied(_info()))
    assert full.tag != limited.tag, full.tag
