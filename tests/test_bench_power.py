"""The sustained benchmark's power sampler (ptxgemm/bench/power.py) and its row fields, without a GPU: NVML
replaced by a fake whose clock falls and whose energy counter runs, and NVML missing altogether."""
from __future__ import annotations

import sys
import types

import pytest

from ptxgemm.bench import power, suite


def test_the_window_means_skip_the_settling_and_energy_comes_from_the_counter():
    samples = [(0.0, 1980.0, 300.0), (0.1, 1980.0, 690.0), (0.3, 1320.0, 700.0), (0.5, 1300.0, 698.0)]
    w = power.summarize(samples, 2.0, (5_000_000, 6_400_000))
    assert (w.samples, w.sm_mhz, w.watts) == (2, 1310.0, 699.0)     # the first 0.25 s left out
    assert (w.joules, w.energy_source) == (1400.0, "counter")
    assert w.joules_per_tflop(700e12 * 2.0) == pytest.approx(1.0)   # 1400 J over 1400 TFLOP
    w = power.summarize(samples, 2.0, None)                          # no counter: mean power x time
    assert (w.joules, w.energy_source) == (1398.0, "mean power x time")
    w = power.summarize([(0.1, 1980.0, 400.0)], 0.2, (7, 7))          # only settling samples: they are used
    assert (w.samples, w.watts, w.joules) == (1, 400.0, 80.0)


def test_the_window_names_the_clock_limits_it_saw_after_settling():
    samples = [(0.1, 1980.0, 300.0, 0x1 | 0x8), (0.3, 1320.0, 700.0, 0x4), (0.5, 1300.0, 698.0, 0x4 | 0x40)]
    w = power.summarize(samples, 2.0, None)
    assert w.clock_limits == ["sw_power_cap", "hw_thermal"] and w.held_down == ["hw_thermal"]   # 0x8 settling
    w = power.summarize([(0.3, 1320.0, 700.0, 0x4)], 2.0, None)
    assert w.clock_limits == ["sw_power_cap"] and w.held_down == []          # the power limit: what we measure
    w = power.summarize([(0.3, 1320.0, 700.0), (0.4, 1320.0, 700.0, None)], 2.0, None)
    assert w.clock_limits is None and w.held_down == []                      # NVML without the reasons call


def _fake_nvml(calls):
    clock = iter(range(1980, 0, -10))
    energy = iter((1_000_000, 1_000_000 + 2_100_000))
    return types.SimpleNamespace(
        NVML_CLOCK_SM=0,
        nvmlInit=lambda: calls.append("init"),
        nvmlDeviceGetHandleByPciBusId=lambda bus: calls.append(bus) or "handle",
        nvmlDeviceGetHandleByIndex=lambda i: "handle0",
        nvmlDeviceGetClockInfo=lambda h, kind: next(clock),
        nvmlDeviceGetPowerUsage=lambda h: 700_000,
        nvmlDeviceGetTotalEnergyConsumption=lambda h: next(energy),
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: 0x4 | 0x80)


def test_the_sampler_reads_the_gpu_by_its_bus_id_while_the_window_runs(monkeypatch):
    import time

    calls = []
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(calls))
    sampler = power.Sampler("0000:19:00.0")
    assert calls == ["init", "0000:19:00.0"] and sampler.note == ""
    result, w = sampler.measure(lambda: time.sleep(0.35) or "done")
    assert result == "done" and w.samples >= 1 and w.watts == 700.0 and w.sm_mhz < 1980
    assert (w.joules, w.energy_source) == (2100.0, "counter") and w.seconds >= 0.35
    assert w.clock_limits == ["sw_power_cap", "hw_power_brake"] and w.held_down == ["hw_power_brake"]


def test_without_nvml_the_window_keeps_its_length_and_says_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)     # import pynvml raises ImportError
    sampler = power.Sampler("0000:19:00.0")
    assert "nvidia-ml-py" in sampler.note
    result, w = sampler.measure(lambda: 3)
    assert result == 3 and (w.sm_mhz, w.watts, w.joules) == (None, None, None) and "nvidia-ml-py" in w.note


def test_sustained_fields_per_implementation():
    w = power.Window(seconds=2.0, sm_mhz=1300.0, watts=700.0, joules=1400.0)
    flops = 2.0 * 8192 ** 3
    fields = suite.sustained_fields("ptxgemm", flops, 1.6, 1250, w)
    assert fields["ptxgemm_sustained_tflops"] == pytest.approx(flops / 1.6e-3 / 1e12)
    assert fields["ptxgemm_j_per_tflop"] == pytest.approx(1400.0 / (flops * 1250 / 1e12))
    assert (fields["ptxgemm_sustained_sm_mhz"], fields["ptxgemm_sustained_watts"]) == (1300.0, 700.0)
    rows = [{"M": 4096, "N": 4096, "K": 4096, "sustained_ratio": 1.02}, {"M": 8192, "N": 8192, "K": 8192,
                                                                          "sustained_ratio": 0.98}]
    assert suite.geomeans(rows, "sustained_ratio")["all"] == pytest.approx((1.02 * 0.98) ** 0.5)


def test_summarize_spreads_the_sustained_ratios_beside_the_burst_ones():
    from ptxgemm.bench import summary

    def run(ratio, sustained):
        return {"gpu": "NVIDIA H100 80GB HBM3", "rows": [
            {"M": 8192, "N": 8192, "K": 8192, "ratio": ratio, "sustained_ratio": sustained, "config": "coop128x256c2"},
            {"M": 4096, "N": 4096, "K": 4096, "ratio": ratio, "sustained_ratio": sustained - 0.02,
             "config": "coop128x256c2"}]}
    out = summary.summarize({"a.json": run(1.01, 1.02), "b.json": run(1.03, 1.00), "c.json": run(1.02, 1.01)})
    g = out["NVIDIA H100 80GB HBM3"]
    shape = next(s for s in g["shapes"] if s["M"] == 8192)
    assert shape["sustained_ratio"] == {"n": 3, "min": 1.00, "median": 1.01, "max": 1.02}
    assert g["sustained_geomeans"]["square_llm"]["n"] == 3
    assert "sustained square_llm" in summary.format_summary(out)
    plain = summary.summarize({"a.json": {"gpu": "x", "rows": [{"M": 1, "N": 1, "K": 1, "ratio": 1.0}]}})
    assert "sustained_geomeans" not in plain["x"]       # a run without sustained windows reads as it always did


def test_the_variants_sustained_geomeans_cover_each_tag_over_every_row():
    """Each fixed config's sustained windows summarize per tag (the summary the device run of 2026-11-26 first
    crashed in); a tag missing a ratio in some row has no geomean rather than a wrong one."""
    rows = [{"variant_sustained_ratios": {"coop256x128cn2": 0.99, "coop128x256": 1.01}},
            {"variant_sustained_ratios": {"coop256x128cn2": 1.01, "coop128x256": None}},
            {"sustained_ratio": 1.0}]
    out = suite.variant_sustained_geomeans(rows)
    assert set(out) == {"coop256x128cn2"}
    assert out["coop256x128cn2"] == (pytest.approx((0.99 * 1.01) ** 0.5), 0.99)
    assert suite.variant_sustained_geomeans([{"sustained_ratio": 1.0}]) == {}
