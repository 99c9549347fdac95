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
        ("ways", "128x128x64", "32x32x32", 50, 3, "h.json")
    assert build_parser().parse_args(["bench", "--host", "layer", "--calls", "30"]).host == "layer"
    assert build_parser().parse_args(["bench", "--host", "ways"]).host == "ways"
    defaults = build_parser().parse_args(["bench"])
    assert defaults.host is None
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
def test_bad_host_arguments_exit_2_before_the_gpu(args, pattern, tmp_path, bench_refuses):
    bench_refuses(args, pattern, tmp_path)


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


# === the layer table: `bench --host layer`, host_layer.measure_calls ================================================

from ptxgemm.bench import host_layer  # noqa: E402
from ptxgemm.bench.host_layer import (  # noqa: E402
    F_LINEAR, LAYER_ROWS, MATMUL, MATMUL_TORCH, NEW, NN_LINEAR, PT_LINEAR, PT_MM, RUN_NUMPY, SAME)

CHECK_LINEAR_SAME = "pt.Linear <= 1.25 x F.linear (same addresses)"
CHECK_LINEAR_NEW = "pt.Linear <= 1.25 x F.linear (new addresses)"
CHECK_MATMUL_SAME = "ptxgemm.matmul <= 15 us (same addresses)"
CHECK_MATMUL_NEW = "ptxgemm.matmul <= 15 us (new addresses)"
CHECK_PLANS = "no plans made in the timed loops"
CHECK_AGREE = "results agree with F.linear"
THROUGH_PTXGEMM = (PT_LINEAR, PT_MM, MATMUL, MATMUL_TORCH, RUN_NUMPY)

#: (call, addresses, grad) -> us per call (median) of a plausible H200 run
LAYER_TIMES = {(F_LINEAR, SAME, False): 10.0, (NN_LINEAR, SAME, False): 12.0, (PT_LINEAR, SAME, False): 12.0,
               (PT_MM, SAME, False): 30.0, (MATMUL, SAME, False): 9.5, (MATMUL_TORCH, SAME, False): 14.0,
               (F_LINEAR, NEW, False): 10.5, (NN_LINEAR, NEW, False): 12.5, (PT_LINEAR, NEW, False): 13.0,
               (PT_MM, NEW, False): 31.0, (MATMUL, NEW, False): 11.0, (MATMUL_TORCH, NEW, False): 15.0,
               (F_LINEAR, SAME, True): 14.0, (PT_LINEAR, SAME, True): 25.0, (F_LINEAR, NEW, True): 14.5,
               (PT_LINEAR, NEW, True): 26.0, (RUN_NUMPY, SAME, False): 4000.0}


def layer_rows(times=None, plans=None) -> list[dict]:
    """Rows as measure_calls makes them, from {(call, addresses, grad): median us}; plans: {key: plans_made}."""
    times = {**LAYER_TIMES, **(times or {})}
    rows = []
    for key in LAYER_ROWS:
        if key not in times:
            continue
        call, mode, grad = key
        us = times[key]
        counts = None
        if call in THROUGH_PTXGEMM:
            made = (plans or {}).get(key, 30 if call == RUN_NUMPY else 0)
            counts = {"plans_made": made, "plan_hits": 1500 - made, "calls": 1500, "host_us": 1500 * us / 2}
        rows.append(host_layer.layer_row(call, mode, grad, (64, 4096, 4096), 30 if call == RUN_NUMPY else 300,
                                        [us * 1.1, us, us * 0.9], [us / 2] * 3, counts))
    return rows


def layer_result_of(rows, agree=None, binding=()) -> dict:
    return host_layer.layer_result(gpu="NVIDIA H200", driver_version="12.8", torch_version="2.9.0",
                                  shape=(64, 4096, 4096), calls=300, repeats=5, rows=rows, binding=binding,
                                  agree=agree, stream="torch.cuda.current_stream() (handle 0x0)")


def test_the_layer_rows_are_the_issues():
    calls = {(c, m) for c, m, g in LAYER_ROWS if not g}
    for call in (F_LINEAR, PT_LINEAR, PT_MM, MATMUL, MATMUL_TORCH):
        assert {(call, SAME), (call, NEW)} <= calls, call
    assert {(c, m) for c, m, g in LAYER_ROWS if g} == {(F_LINEAR, SAME), (F_LINEAR, NEW), (PT_LINEAR, SAME),
                                                       (PT_LINEAR, NEW)}
    assert (RUN_NUMPY, SAME, False) in LAYER_ROWS and len(set(LAYER_ROWS)) == len(LAYER_ROWS)
    assert set(host_layer.EXPRESSIONS) == {c for c, _, _ in LAYER_ROWS}
    assert host_layer.LAYER_SHAPE == (64, 4096, 4096) and host_layer.LAYER_CALLS == 300
    assert host_layer.LAYER_WARMUP >= 50 and host_layer.ADDRESS_STEP % 16 == 0
    assert host_layer.check_key(host_layer.CHECK_LINEAR, NEW) == CHECK_LINEAR_NEW
    assert host_layer.check_key(host_layer.CHECK_MATMUL_US, SAME) == CHECK_MATMUL_SAME
    assert host_layer.run_calls(300) == 30 and host_layer.run_calls(5) == 1


def test_fresh_offsets_are_each_handed_out_once_and_fit_the_buffer():
    fresh = host_layer.FreshOffsets(7, step=512)
    first, second = fresh.take(3, lambda o: o), fresh.take(4, lambda o: ("x", o))
    assert first == [0, 512, 1024] and second == [("x", 1536), ("x", 2048), ("x", 2560), ("x", 3072)]
    with pytest.raises(RuntimeError, match="fresh addresses: 1 more asked, 0 of 7 left"):
        fresh.take(1, lambda o: o)
    # the buffer holds the last view whole: (count - 1) steps, then one (M, K) matrix
    count, m, k = 7, 64, 4096
    elements = host_layer.buffer_elements(count, (m, k), 2)
    assert elements * 2 == (count - 1) * 512 + m * k * 2
    assert host_layer.buffer_elements(0, (m, k), 2) == 0
    assert host_layer.fresh_needed(6, 300, 5, warmup=50) == 6 * (50 + 1500)


def test_layer_row_reports_median_min_max_and_ptxgemms_counters():
    row = host_layer.layer_row(PT_LINEAR, NEW, False, (64, 4096, 4096), 300, [12.0, 10.0, 11.0, 30.0],
                              [5.0, 4.0, 6.0, 7.0], {"plans_made": 0, "plan_hits": 1200, "calls": 1200,
                                                     "host_us": 9600.0}, note="n")
    assert row == {"call": PT_LINEAR, "addresses": NEW, "grad": False, "expr": host_layer.EXPRESSIONS[PT_LINEAR],
                   "shape": "64x4096x4096", "calls": 300, "us_per_call": 11.5, "us_min": 10.0, "us_max": 30.0,
                   "us_samples": [12.0, 10.0, 11.0, 30.0], "us_issue": 5.5, "us_issue_samples": [5.0, 4.0, 6.0, 7.0],
                   "plans_made": 0, "plan_hits": 1200, "counted_calls": 1200, "host_us_per_call": 8.0, "note": "n"}
    plain = host_layer.layer_row(F_LINEAR, SAME, True, (64, 4096, 4096), 300, [10.0], [3.0])
    assert "plans_made" not in plain and "note" not in plain and plain["grad"] is True
    assert host_layer.layer_row(MATMUL, SAME, False, (1, 2, 3), 1, [1.0], [1.0], {
        "plans_made": 0, "plan_hits": 0, "calls": 0, "host_us": 0.0})["host_us_per_call"] is None


def test_counter_delta_and_sums():
    before = {"plans_made": 3, "plan_hits": 10, "plan_misses": 3, "captured": 0, "calls": 13, "host_us": 100.0,
              "host_us_per_call": 7.7}
    after = {**before, "plan_hits": 310, "calls": 313, "host_us": 2500.0}
    d = host_layer.counter_delta(before, after)
    assert d == {"plans_made": 0, "plan_hits": 300, "calls": 300, "host_us": 2400.0}
    assert host_layer.add_counts(host_layer.add_counts(None, d), d) == {"plans_made": 0, "plan_hits": 600, "calls": 600,
                                                                      "host_us": 4800.0}


def test_the_layer_checks_pass_on_a_good_run():
    checks = host_layer.evaluate_layer_checks(layer_rows(), {PT_LINEAR: 0.004, MATMUL: 0.005})
    assert list(checks) == [CHECK_LINEAR_SAME, CHECK_LINEAR_NEW, CHECK_MATMUL_SAME, CHECK_MATMUL_NEW, CHECK_PLANS,
                            CHECK_AGREE]
    c = checks[CHECK_LINEAR_NEW]
    assert (c["ok"], c["lhs"], c["lhs_us"], c["rhs"], c["rhs_us"], c["factor"], c["addresses"], c["grad"],
            c["statistic"]) == (True, PT_LINEAR, 13.0, F_LINEAR, 10.5, 1.25, NEW, False, "us_per_call")
    m = checks[CHECK_MATMUL_SAME]
    assert (m["ok"], m["lhs"], m["lhs_us"], m["rhs_us"]) == (True, MATMUL, 9.5, 15.0)
    # ptxgemm.run plans every call by design; every other row through ptxgemm is in the plans check
    p = checks[CHECK_PLANS]
    assert p["ok"] is True and set(p["plans_made"]) == {
        host_layer.row_label(c_, m_, g_) for c_, m_, g_ in LAYER_ROWS if c_ in THROUGH_PTXGEMM and c_ != RUN_NUMPY}
    assert checks[CHECK_AGREE]["ok"] is True and host_cost.checks_passed(checks)


@pytest.mark.parametrize("times, plans, agree, failing", [
    ({(PT_LINEAR, NEW, False): 13.2}, None, None, {CHECK_LINEAR_NEW}),          # 13.2 > 1.25 x 10.5 = 13.125
    ({(PT_LINEAR, SAME, False): 12.5, (PT_LINEAR, SAME, True): 90.0}, None, None, set()),   # grad rows: no bar
    ({(MATMUL, NEW, False): 15.5}, None, None, {CHECK_MATMUL_NEW}),
    ({(MATMUL_TORCH, SAME, False): 40.0}, None, None, set()),                   # torch tensors: informational
    ({}, {(MATMUL, NEW, False): 1500}, None, {CHECK_PLANS}),                     # a plan per new address
    ({}, {(PT_LINEAR, NEW, True): 1}, None, {CHECK_PLANS}),
    ({}, {(RUN_NUMPY, SAME, False): 30}, None, set()),
    ({}, None, {PT_LINEAR: 0.004, MATMUL: 0.5}, {CHECK_AGREE}),
])
def test_the_layer_checks_fail_on_what_breaks_a_bar(times, plans, agree, failing):
    checks = host_layer.evaluate_layer_checks(layer_rows(times, plans), agree)
    assert {name for name, c in checks.items() if c["ok"] is False} == failing
    assert host_cost.checks_passed(checks) == (not failing)


def test_missing_rows_skip_their_checks():
    rows = [r for r in layer_rows() if r["call"] not in (PT_LINEAR, MATMUL)]
    checks = host_layer.evaluate_layer_checks(rows)
    assert CHECK_AGREE not in checks
    assert all(checks[name]["ok"] is None for name in (CHECK_LINEAR_SAME, CHECK_LINEAR_NEW, CHECK_MATMUL_SAME,
                                                       CHECK_MATMUL_NEW))
    assert checks[CHECK_PLANS]["ok"] is True   # pt.mm and the torch-tensor matmul still count
    assert host_layer.evaluate_layer_checks([])[CHECK_PLANS]["ok"] is None
    lines = host_layer.format_layer_report(layer_result_of(rows)).splitlines()
    assert f"SKIP {CHECK_LINEAR_NEW}: not measured" in lines and host_cost.checks_passed(checks)


def binding_rows():
    return [host_layer.binding_row(what, 300, [us, us * 1.25, us * 0.75], [us * 3] * 3,
                                  note="a note" if i == 2 else None)
            for i, (what, us) in enumerate(zip(host_layer.BINDING_NAMES, (9.0, 1.5, 0.4, 3.0, 4.0)))]


def test_binding_rows():
    rows = binding_rows()
    assert [r["what"] for r in rows] == list(host_layer.BINDING_NAMES) and len(rows) == 5
    assert rows[0] == {"what": host_layer.BIND_ENCODE, "calls": 300, "us_per_call": 9.0, "us_min": 6.75,
                       "us_max": 11.25, "us_samples": [9.0, 11.25, 6.75], "us_wall": 27.0}
    assert rows[2]["note"] == "a note" and "note" not in rows[0]
    names = " ".join(host_layer.BINDING_NAMES)
    for what in ("tensormap.encode(", "route='bindings'", "route='ctypes'", "plan.launch(s)", "plan.launch_at("):
        assert what in names, what


def test_the_layer_report():
    rows = layer_rows({(PT_LINEAR, NEW, False): 13.2})
    result = layer_result_of(rows, {PT_LINEAR: 0.004, MATMUL: 0.005}, binding_rows())
    text = host_layer.format_layer_report(result)
    lines = text.splitlines()
    assert lines[0].startswith("# NVIDIA H200, driver 12.8, torch 2.9.0: 64x4096x4096 bf16")
    assert "300 calls" in lines[0] and "5 repeats" in lines[0] and "synchronize" in lines[0]
    assert lines[1] == "# stream: torch.cuda.current_stream() (handle 0x0)"
    header = lines[2].split()
    assert header[:3] == ["call", "addr", "grad"] and "median" in header and "F.linear" in header
    table = lines[4:4 + len(rows)]
    assert [line.split("  ")[0].strip() for line in table] == [r["call"] for r in rows]
    pt_new = next(line for line in table if line.startswith(PT_LINEAR) and " new " in line and " no " in line)
    # calls, median, min, max, issue, x F.linear, plans, host us
    assert pt_new.split()[-8:] == ["300", "13.20", "11.88", "14.52", "6.60", "1.26", "0", "6.60"]
    f_same = next(line for line in table if line.startswith(F_LINEAR) and " same " in line and " no " in line)
    assert f_same.split()[-3:] == ["1.00", "-", "-"]
    run = next(line for line in table if line.startswith(RUN_NUMPY))
    assert run.split()[-8:-6] == ["30", "4000.00"] and run.split()[-2] == "30"
    assert f"FAIL {CHECK_LINEAR_NEW}: pt.Linear 13.20 us > 1.25 x 10.50 us = 13.12 us (median over repeats, " \
           "no grad)" in lines
    assert f"PASS {CHECK_LINEAR_SAME}: pt.Linear 12.00 us <= 1.25 x 10.00 us = 12.50 us (median over repeats, " \
           "no grad)" in lines
    assert f"PASS {CHECK_MATMUL_NEW}: ptxgemm.matmul 11.00 us <= 15.00 us (median over repeats, no grad)" in lines
    assert f"PASS {CHECK_PLANS}: 10 rows, none made a plan" in lines
    assert f"PASS {CHECK_AGREE}: the largest max |y - F.linear| / max |F.linear| is 0.005 (ptxgemm.matmul) <= " \
           "0.02" in lines
    assert sum(line.startswith(("PASS ", "FAIL ", "SKIP ")) for line in lines) == 6
    assert any(line.startswith(host_layer.BIND_REPLACE_CTYPES) and line.split()[-3:] == ["0.40", "0.30", "1.20"]
               for line in lines)
    assert f"note: {host_layer.BIND_REPLACE_CTYPES}: a note" in lines
    bad = host_layer.format_layer_report(layer_result_of(layer_rows(plans={(MATMUL, NEW, False): 1500})))
    assert f"FAIL {CHECK_PLANS}: ptxgemm.matmul [new] made 1500" in bad.splitlines()


def test_the_layer_json_has_the_issues_keys():
    import json

    rows = layer_rows()
    result = json.loads(json.dumps(layer_result_of(rows, {PT_LINEAR: 0.004}, binding_rows())))
    assert {"gpu", "driver", "torch", "shape", "calls", "repeats", "method", "rows", "binding", "checks"} <= \
        set(result)
    assert (result["gpu"], result["shape"], result["calls"], result["repeats"], result["run_calls"]) == \
        ("NVIDIA H200", "64x4096x4096", 300, 5, 30)
    assert "back-to-back" in result["method"] and "median" in result["method"]
    for row in result["rows"]:
        assert {"call", "addresses", "us_per_call", "us_min", "us_max", "us_samples", "shape", "grad"} <= set(row)
        assert row["call"] in {F_LINEAR, NN_LINEAR, PT_LINEAR, PT_MM, MATMUL, MATMUL_TORCH, RUN_NUMPY}
        assert row["addresses"] in (SAME, NEW) and isinstance(row["grad"], bool)
        assert row["us_min"] <= row["us_per_call"] <= row["us_max"]
        assert ("plans_made" in row and "host_us_per_call" in row) == (row["call"] in THROUGH_PTXGEMM)
    assert [b["what"] for b in result["binding"]] == list(host_layer.BINDING_NAMES)
    assert all({"what", "us_per_call"} <= set(b) for b in result["binding"])
    for name in (CHECK_LINEAR_SAME, CHECK_LINEAR_NEW, CHECK_MATMUL_SAME, CHECK_MATMUL_NEW):
        assert {"ok", "lhs_us", "rhs_us"} <= set(result["checks"][name])
    assert result["checks"][CHECK_LINEAR_SAME]["ok"] is True


def test_time_calls_counts_the_synchronize_in_the_wall_time_only():
    import time

    calls = []
    wall, issue = host_layer.time_calls(calls.append, [1, 2, 3, 4], lambda: time.sleep(0.02))
    assert calls == [1, 2, 3, 4]
    assert wall >= 20_000 / 4 and issue < wall and issue < 5_000 / 4


def test_time_ways_warms_up_then_interleaves_fresh_loops():
    """The loop machinery with counters for the GPU: each way's warm-up (its own count) and a sync, then `repeats`
    rounds of one loop per way, the order reversed every other round; a sync (and nothing else) before and after
    each loop; the items of every loop asked for anew (the new-address rows' fresh views); the mode entered around
    each loop; the counters read around each timed loop of a counted way only, and summed."""
    log = []
    counter = {"plans_made": 0, "plan_hits": 0, "calls": 0, "host_us": 0.0}

    def stats():
        log.append("stats")
        return dict(counter)

    @contextlib.contextmanager
    def mode():
        log.append("enter")
        yield
        log.append("exit")

    fresh = host_layer.FreshOffsets(100, step=16)

    def call(name):
        def fn(x):
            log.append((name, x))
            if name == "b":
                counter["plan_hits"] += 1
                counter["calls"] += 1
                counter["host_us"] += 2.0
        return fn

    ways = {"a": host_layer.Way(call("a"), host_layer.same_items("x"), calls=3, warmup=2),
            "b": host_layer.Way(call("b"), lambda n: fresh.take(n, lambda o: o), calls=4, warmup=5, mode=mode,
                               counted=True)}
    out = host_layer.time_ways(ways, 3, lambda: log.append("sync"), stats)
    assert set(out) == {"a", "b"} and all(len(out[n]["wall"]) == len(out[n]["issue"]) == 3 for n in out)
    assert out["a"]["counts"] is None
    assert out["b"]["counts"] == {"plans_made": 0, "plan_hits": 12, "calls": 12, "host_us": 24.0}
    warm = [("a", "x")] * 2 + ["sync", "enter"] + [("b", o) for o in range(0, 80, 16)] + ["exit", "sync"]
    assert log[:len(warm)] == warm
    rest = log[len(warm):]
    loop_a = ["sync", ("a", "x"), ("a", "x"), ("a", "x"), "sync"]

    def loop_b(first):
        return ["sync", "stats", "enter"] + [("b", 16 * i) for i in range(first, first + 4)] + ["sync", "exit",
                                                                                                 "stats"]

    assert rest == loop_a + loop_b(5) + loop_b(9) + loop_a + loop_a + loop_b(13)
    assert fresh.used == 5 + 12   # no offset handed out twice


# --- the command line of the layer table ---------------------------------------------------------------------------

def test_host_layer_help():
    help_text = " ".join(build_parser()._subparsers._group_actions[0].choices["bench"].format_help().split())
    for text in ("--host [{ways,layer}]", "default 64x4096x4096", f"default {host_layer.LAYER_CALLS}",
                 "calls // 10", "the wall time of back", "end of the synchronize after it",
                 "pt.Linear <= 1.25 x F.linear",
                 "ptxgemm.matmul <= 15 us", CHECK_PLANS, "replace_address", "docs/results/<gpu>/host/"):
        assert text in help_text, text


@pytest.mark.parametrize("args, pattern", [
    (("--host", "layer", "--run-shape", "8x8x8"), "--run-shape: not with --host layer"),
    (("--host", "layer", "--calls", "0"), "--calls: must be a whole number >= 1"),
    (("--host", "layer", "--repeats", "-1"), "--repeats: must be a whole number >= 1"),
    (("--host", "layer", "--shape", "64x4096"), "--shape: '64x4096' is not MxNxK"),
    (("--host", "layer", "--quick"), "--quick: not with --host"),
    (("--host", "layer", "--in-dtype", "float8_e4m3fn"), "--in-dtype: not with --host"),
    (("--host", "layer", "--out", "x"), "--out: not with --host (use --json PATH)"),
    (("--host", "rows"), "argument --host: invalid choice: 'rows'"),
])
def test_bad_host_layer_arguments_exit_2_before_the_gpu(args, pattern, tmp_path, cli_in_process):
    proc = cli_in_process("bench", *args, cwd=tmp_path)
    assert proc.returncode == 2 and pattern in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") <= 2 and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_host_layer_without_a_gpu_exits_2_saying_so(tmp_path):
    proc = bench_host("--host", "layer", "--json", str(tmp_path / "host.json"), cwd=tmp_path)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.startswith("python -m ptxgemm bench: error: bench --host runs the kernels, so it needs an "
                                  "sm_90 GPU (H100/H200), and there is none here: ")
    assert proc.stderr.count("\n") == 1 and proc.stdout == ""
    assert list(tmp_path.iterdir()) == []


def test_measure_calls_refuses_bad_counts_and_names_torch_when_absent(monkeypatch):
    import types

    with pytest.raises(ConfigError, match="^--repeats: "):
        host_layer.measure_calls(calls=10, repeats=0)
    monkeypatch.setattr(host_layer, "_require_gpu", lambda: types.SimpleNamespace(name="fake", driver_version_str="1"))
    monkeypatch.setattr(host_layer, "_torch", lambda: (None, "not installed"))
    with pytest.raises(ConfigError, match=r"^bench --host layer times torch's F.linear .* needs torch .*"
                                          r"torch: not installed$"):
        host_layer.measure_calls(calls=10, repeats=1)


def test_run_host_layer_writes_the_json_and_exits_by_the_checks(monkeypatch, tmp_path, capsys):
    """The CLI's --host layer path with measure_calls replaced by a made-up result: the report printed, the JSON
    written where --json says, exit 1 when a bar fails."""
    import json

    from ptxgemm.cli import bench as bench_cli

    seen = {}

    def fake(shape, calls, repeats):
        seen.update(shape=shape, calls=calls, repeats=repeats)
        return layer_result_of(layer_rows({(MATMUL, NEW, False): 16.0}), None, binding_rows())

    monkeypatch.setattr(host_layer, "measure_calls", fake)
    monkeypatch.setattr(host_cost, "measure", lambda *a: pytest.fail("the ways table ran"))
    path = tmp_path / "host_h200_x.json"
    args = build_parser().parse_args(["bench", "--host", "layer", "--json", str(path)])
    assert bench_cli.run(args) == 1
    assert seen == {"shape": (64, 4096, 4096), "calls": 300, "repeats": 5}
    out = capsys.readouterr().out
    assert f"FAIL {CHECK_MATMUL_NEW}: ptxgemm.matmul 16.00 us > 15.00 us" in out and f"wrote {path}" in out
    written = json.loads(path.read_text())
    assert written["checks"][CHECK_MATMUL_NEW]["ok"] is False and written["tune_cache"] == "off"
    args = build_parser().parse_args(["bench", "--host", "layer", "--shape", "128x4096x4096", "--calls", "40",
                                      "--repeats", "2"])
    assert bench_cli.run(args) == 1 and seen == {"shape": (128, 4096, 4096), "calls": 40, "repeats": 2}


@gpu
def test_measure_calls_times_every_row():
    if not _torch_usable():
        pytest.skip("bench --host layer needs torch with a CUDA device")
    import ptxgemm

    result = host_layer.measure_calls(calls=20, repeats=2)
    assert [(r["call"], r["addresses"], r["grad"]) for r in result["rows"]] == list(LAYER_ROWS)
    for row in result["rows"]:
        assert len(row["us_samples"]) == 2 and 0 < row["us_min"] <= row["us_per_call"] <= row["us_max"], row
        assert row["calls"] == (2 if row["call"] == RUN_NUMPY else 20)
        if row["call"] in THROUGH_PTXGEMM and row["call"] != RUN_NUMPY:
            assert row["plans_made"] == 0 and row["plan_hits"] == row["counted_calls"] == 40, row
            assert row["host_us_per_call"] > 0
    assert [b["what"] for b in result["binding"]] == list(host_layer.BINDING_NAMES)
    assert all(b["us_per_call"] > 0 for b in result["binding"])
    checks = result["checks"]
    assert checks[CHECK_PLANS]["ok"] is True and checks[CHECK_AGREE]["ok"] is True, checks
    assert all(checks[name]["ok"] in (True, False) for name in (CHECK_LINEAR_SAME, CHECK_LINEAR_NEW,
                                                                 CHECK_MATMUL_SAME, CHECK_MATMUL_NEW))
    assert result["gpu"] and result["torch"] and ptxgemm.plan_stats()["calls"] > 0
    text = host_layer.format_layer_report(result)
    assert all(r["call"] in text for r in result["rows"])
