"""`python -m ptxgemm bench --host` and ptxgemm.bench.host_cost: the options and their checks, the table and the PASS/FAIL
lines from hand-written rows, and the clear failure without a GPU (no GPU needed); `measure` on the GPU."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import pytest

from ptxgemm.cli.main import build_parser
from ptxgemm.bench import host_cost
from ptxgemm.bench.host_cost import (GRAPH_REPLAY, MATMUL_NEW, MATMUL_SAME, PLAN_LAUNCH, PTXGEMM_NAMES, RUN,
                                     TORCH_NAMES, TORCH_NEW, TORCH_OUT)
from ptxgemm.errors import ConfigError
from ptxgemm.runtime import arrays

gpu = pytest.mark.gpu
CHECK_MATMUL = "matmul (same arrays) <= 1.5 x plan.launch"
CHECK_TORCH = "plan.launch <= torch.matmul"


def bench_host(*args, cwd):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no GPU, on every machine
    return subprocess.run([sys.executable, "-m", "ptxgemm", "bench", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env=env)


def rows_of(times: dict) -> list[dict]:
    """Fake measured rows: {name: (min, median)}."""
    return [{"name": name, "shape": "64x64x64" if name == RUN else "256x256x256", "us_min": lo, "us_median": med,
             "us_samples": [lo, med]} for name, (lo, med) in times.items()]


def result_of(rows) -> dict:
    return {"gpu": "NVIDIA H100 80GB HBM3", "driver": "13.0", "calls": 200, "repeats": 5, "torch": "not installed",
            "rows": rows, "checks": host_cost.evaluate_checks(rows)}


PTXGEMM_TIMES = {RUN: (80.0, 85.0), MATMUL_SAME: (6.0, 6.5), MATMUL_NEW: (20.0, 21.0), PLAN_LAUNCH: (4.0, 4.2),
                 GRAPH_REPLAY: (2.5, 2.6)}


# --- the pure parts -----------------------------------------------------------------------------------------------

def test_the_check_names_are_the_issues():
    assert host_cost.CHECK_MATMUL == CHECK_MATMUL and host_cost.CHECK_TORCH == CHECK_TORCH
    assert set(host_cost.NAMES) == set(PTXGEMM_NAMES) | set(TORCH_NAMES) and len(host_cost.NAMES) == 7


@pytest.mark.parametrize("text, shape", [("256x256x256", (256, 256, 256)), (" 64X128x32 ", (64, 128, 32))])
def test_parse_shape(text, shape):
    assert host_cost.parse_shape(text) == shape


@pytest.mark.parametrize("text", ["256x256", "0x8x8", "axbxc", "8x8x-8", "", "8x8x8x8"])
def test_parse_shape_refuses(text):
    with pytest.raises(ConfigError, match=r"^--run-shape: .* is not MxNxK"):
        host_cost.parse_shape(text, "--run-shape")


@pytest.mark.parametrize("calls, repeats, flag", [(0, 1, "--calls"), (5, 0, "--repeats"), (True, 1, "--calls"),
                                                  (2.5, 1, "--calls")])
def test_check_counts(calls, repeats, flag):
    with pytest.raises(ConfigError, match=f"^{flag}: must be a whole number >= 1"):
        host_cost.check_counts(calls, repeats)


def test_summarize_gives_min_and_median():
    row = host_cost.summarize(PLAN_LAUNCH, (256, 128, 64), [5.0, 3.0, 4.0, 10.0])
    assert row == {"name": PLAN_LAUNCH, "shape": "256x128x64", "us_min": 3.0, "us_median": 4.5,
                   "us_samples": [5.0, 3.0, 4.0, 10.0]}


def test_both_checks_pass_against_the_faster_torch_form():
    rows = rows_of({**PTXGEMM_TIMES, TORCH_OUT: (7.0, 7.5), TORCH_NEW: (5.0, 5.5)})
    checks = host_cost.evaluate_checks(rows)
    assert set(checks) == {CHECK_MATMUL, CHECK_TORCH}
    m = checks[CHECK_MATMUL]
    assert (m["ok"], m["lhs_us"], m["rhs_us"], m["factor"], m["statistic"]) == (True, 6.0, 4.0, 1.5, "us_min")
    t = checks[CHECK_TORCH]
    assert (t["ok"], t["lhs"], t["rhs"], t["rhs_us"]) == (True, PLAN_LAUNCH, TORCH_NEW, 5.0)
    assert host_cost.checks_passed(checks)
    text = host_cost.format_report(result_of(rows))
    lines = text.splitlines()
    assert lines[0].startswith("# NVIDIA H100 80GB HBM3, driver 13.0: host microseconds per call")
    assert "200 calls, 5 repeats" in lines[0]
    assert f"PASS {CHECK_MATMUL}: matmul (same arrays) 6.00 us <= plan.launch 1.5 x 4.00 us = 6.00 us " \
           "(min over repeats)" in lines
    assert f"PASS {CHECK_TORCH}: plan.launch 4.00 us <= torch.matmul 5.00 us (min over repeats)" in lines
    assert "torch: not installed" not in text


def test_the_table_has_every_row_with_its_ratio_to_plan_launch():
    rows = rows_of({**PTXGEMM_TIMES, TORCH_OUT: (7.0, 7.5), TORCH_NEW: (5.0, 5.5)})
    lines = host_cost.format_report(result_of(rows)).splitlines()
    table = {line[:22].rstrip(): line.split() for line in lines[3:3 + len(rows)]}
    assert list(table) == [r["name"] for r in rows]
    assert table[RUN][-4:] == ["64x64x64", "80.00", "85.00", "20.00"]
    assert table[PLAN_LAUNCH][-4:] == ["256x256x256", "4.00", "4.20", "1.00"]
    assert table[GRAPH_REPLAY][-1] == "0.62"
    assert table[TORCH_OUT][-3:] == ["7.00", "7.50", "1.75"]
    header = lines[1].split()
    assert header[:2] == ["name", "shape"] and "median" in header


def test_failing_checks_say_fail_and_why():
    rows = rows_of({**PTXGEMM_TIMES, MATMUL_SAME: (6.5, 7.0), TORCH_OUT: (3.5, 3.6), TORCH_NEW: (3.9, 4.0)})
    checks = host_cost.evaluate_checks(rows)
    assert checks[CHECK_MATMUL]["ok"] is False and checks[CHECK_TORCH]["ok"] is False
    assert checks[CHECK_TORCH]["rhs"] == TORCH_OUT
    assert not host_cost.checks_passed(checks)
    lines = host_cost.format_report(result_of(rows)).splitlines()
    assert f"FAIL {CHECK_MATMUL}: matmul (same arrays) 6.50 us > plan.launch 1.5 x 4.00 us = 6.00 us " \
           "(min over repeats)" in lines
    assert f"FAIL {CHECK_TORCH}: plan.launch 4.00 us > torch.matmul (out=) 3.50 us (min over repeats)" in lines


def test_without_torch_its_check_is_skipped_not_failed():
    rows = rows_of(PTXGEMM_TIMES)
    checks = host_cost.evaluate_checks(rows)
    assert checks[CHECK_TORCH]["ok"] is None and checks[CHECK_MATMUL]["ok"] is True
    assert host_cost.checks_passed(checks)
    lines = host_cost.format_report(result_of(rows)).splitlines()
    assert "torch: not installed" in lines
    assert f"SKIP {CHECK_TORCH}: torch.matmul (out=) or torch.matmul not measured" in lines
    assert sum(line.startswith(("PASS ", "FAIL ", "SKIP ")) for line in lines) == 2


# --- the command line ---------------------------------------------------------------------------------------------

def test_host_options_parse():
    args = build_parser().parse_args(["bench", "--host", "--shape", "128x128x64", "--run-shape", "32x32x32",
                                      "--calls", "50", "--repeats", "3", "--json", "h.json"])
    assert (args.host, args.shape, args.run_shape, args.calls, args.repeats, args.json) == \
        (True, "128x128x64", "32x32x32", 50, 3, "h.json")
    defaults = build_parser().parse_args(["bench"])
    assert defaults.host is False
    assert (defaults.shape, defaults.run_shape, defaults.calls, defaults.repeats, defaults.json) == (None,) * 5


def test_host_help_gives_the_defaults():
    help_text = " ".join(build_parser()._subparsers._group_actions[0].choices["bench"].format_help().split())
    for text in ("--host", "default 256x256x256", "default 64x64x64", f"default {host_cost.DEFAULT_CALLS}",
                 f"default {host_cost.DEFAULT_REPEATS}", CHECK_MATMUL, CHECK_TORCH):
        assert text in help_text, text


@pytest.mark.parametrize("args, pattern", [
    (("--host", "--calls", "0"), "--calls: must be a whole number >= 1"),
    (("--host", "--repeats", "0"), "--repeats: must be a whole number >= 1"),
    (("--host", "--shape", "256x256"), "--shape: '256x256' is not MxNxK"),
    (("--host", "--run-shape", "0x1x1"), "--run-shape: '0x1x1' is not MxNxK"),
    (("--host", "--quick"), "--quick: not with --host"),
    (("--host", "--shapes", "64x64x64"), "--shapes: not with --host"),
    (("--host", "--summarize", "x.json"), "--summarize: not with --host"),
    (("--host", "--out", "somewhere"), "--out: not with --host (use --json PATH)"),
    (("--calls", "10"), "--calls: only with --host"),
    (("--json", "x.json"), "--json: only with --host"),
    (("--shape", "64x64x64"), "--shape: only with --host"),
])
def test_bad_host_arguments_exit_2_before_the_gpu(args, pattern, tmp_path):
    proc = bench_host(*args, cwd=tmp_path)
    assert proc.returncode == 2 and pattern in proc.stderr, proc.stderr
    assert proc.stderr.startswith("python -m ptxgemm bench: error: ") and proc.stderr.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_no_gpu_exits_2_saying_so(tmp_path):
    """Like `bench` itself (and `trace`, `tune`): one line on stderr naming the missing sm_90 GPU, exit status 2,
    nothing written."""
    proc = bench_host("--host", "--json", str(tmp_path / "host.json"), cwd=tmp_path)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.startswith("python -m ptxgemm bench: error: bench --host runs the kernels, so it needs an "
                                  "sm_90 GPU (H100/H200), and there is none here: ")
    assert proc.stderr.count("\n") == 1 and proc.stdout == ""
    assert list(tmp_path.iterdir()) == []


def test_measure_refuses_bad_counts_before_the_gpu():
    with pytest.raises(ConfigError, match="^--calls: "):
        host_cost.measure(calls=0)


def test_measure_warms_up_then_times_every_way_in_interleaved(monkeypatch):
    """measure's loop with the GPU parts replaced by counters: each way in is warmed up, then timed `repeats` times
    in loops of `calls`, with the GPU synchronized between loops (and never inside one)."""
    import types

    from ptxgemm.runtime import driver, graph
    from ptxgemm import gemm

    log = []

    class FakeArray:
        def __init__(self, shape, dtype):
            self.shape, self.dtype = shape, dtype

    class FakePlan:
        def __init__(self, a, b, out, stream=None):
            self.a, self.b, self.out = a, b, out

        def launch(self, stream):
            log.append("plan.launch")

    class FakeGraph:
        @contextlib.contextmanager
        def capture(self, stream, keep=()):
            log.append("capture")
            yield self

        def replay(self, stream):
            log.append("graph replay")

        def close(self):
            log.append("close")

    monkeypatch.setattr(host_cost, "_require_gpu", lambda: types.SimpleNamespace(name="fake", driver_version_str="1"))
    monkeypatch.setattr(host_cost, "_torch", lambda: (None, "not installed"))
    monkeypatch.setattr(driver, "Stream", lambda: "stream")
    monkeypatch.setattr(driver, "synchronize", lambda what="": log.append("sync"))
    monkeypatch.setattr(arrays.DeviceArray, "from_numpy", classmethod(lambda cls, x, stream=None: FakeArray(x.shape, x.dtype)))
    monkeypatch.setattr(arrays.DeviceArray, "empty", classmethod(lambda cls, shape, dtype, stream=None: FakeArray(shape, dtype)))
    monkeypatch.setattr(gemm, "GemmPlan", FakePlan)
    monkeypatch.setattr(gemm, "matmul", lambda a, b, out=None, stream=None:
                        log.append("matmul same" if out is not None else "matmul new"))
    monkeypatch.setattr(gemm, "run", lambda a, b: log.append(f"run {a.shape[0]}x{b.shape[1]}x{a.shape[1]}"))
    monkeypatch.setattr(graph, "Graph", FakeGraph)

    result = host_cost.measure((128, 64, 32), (16, 8, 24), calls=7, repeats=3)
    assert [r["name"] for r in result["rows"]] == list(PTXGEMM_NAMES)
    assert [r["shape"] for r in result["rows"]] == ["16x8x24"] + ["128x64x32"] * 4
    assert all(len(r["us_samples"]) == 3 and r["us_min"] > 0 for r in result["rows"])
    assert result["torch"] == "not installed" and result["checks"][CHECK_TORCH]["ok"] is None
    assert (result["shape"], result["run_shape"], result["calls"], result["repeats"]) == ("128x64x32", "16x8x24", 7, 3)
    assert log[0] == "capture" and log[1] == "plan.launch" and log[-1] == "close"
    events = log[2:-1]
    # the five warm-ups, each followed by a sync
    warm = host_cost.WARMUP_CALLS
    order = ["run 16x8x24", "matmul same", "matmul new", "plan.launch", "graph replay"]
    expected_warmup = []
    for event in order:
        expected_warmup += [event] * warm + ["sync"]
    assert events[:len(expected_warmup)] == expected_warmup
    timed = events[len(expected_warmup):]
    # then repeats x ways loops of `calls` calls, a sync before each loop, the order reversed every other repeat
    loops, current = [], None
    for e in timed:
        if e == "sync":
            current = None
            continue
        if current is None:
            current = [e, 0]
            loops.append(current)
        current[1] += 1
    assert [name for name, _ in loops] == order + order[::-1] + order
    assert all(count == 7 for _, count in loops) and warm >= 20


# --- on the GPU -------------------------------------------------------------------------------------------------

def _torch_usable() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@gpu
def test_measure_times_every_way_in():
    result = host_cost.measure(calls=20, repeats=2)
    names = [r["name"] for r in result["rows"]]
    expected = list(PTXGEMM_NAMES) + (list(TORCH_NAMES) if _torch_usable() else [])
    assert names == expected
    for row in result["rows"]:
        assert len(row["us_samples"]) == 2 and all(t > 0 for t in row["us_samples"]), row
        assert 0 < row["us_min"] <= row["us_median"]
    assert {r["name"]: r["shape"] for r in result["rows"]}[RUN] == "64x64x64"
    assert result["shape"] == "256x256x256" and (result["calls"], result["repeats"]) == (20, 2)
    assert set(result["checks"]) == {CHECK_MATMUL, CHECK_TORCH}
    assert result["checks"][CHECK_MATMUL]["ok"] in (True, False)
    assert (result["checks"][CHECK_TORCH]["ok"] is None) == (not _torch_usable())
    assert result["gpu"] and result["driver"]
    text = host_cost.format_report(result)
    assert all(name in text for name in names)
