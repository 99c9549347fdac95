"""The differential fuzzer on the CPU: emulated cases from a fresh seed every run (300 by default, 2000 with
PTXGEMM_FULL_TESTS=1 as CI runs it; the seed printed, and named in every failure, so a red run can be replayed with
`python -m ptxgemm fuzz --emulate --seed S --cases N`), and the walk over the illegal inputs. The GPU's campaign: tests/test_fuzz_gpu.py and docs/results/h100/fuzz/."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

import full_run
from ptxgemm.cli.main import main
from ptxgemm.tools import fuzz, fuzz_build, fuzz_cases, fuzz_snippets

#: a light run still fuzzes from a fresh seed every time; the full 2000 take about 110 s on two cores
CI_CASES = full_run.pick(300, 2000, "emulated fuzz cases")


def _fresh_seed() -> int:
    return int(os.environ.get("PTXGEMM_FUZZ_SEED") or int.from_bytes(os.urandom(4), "little"))


def test_the_emulated_fuzzer_finds_nothing(capsys):
    seed = _fresh_seed()
    with capsys.disabled():
        print(f"\nemulated fuzz: {CI_CASES} cases, seed {seed} (PTXGEMM_FUZZ_SEED={seed} replays them)")
    report = fuzz.fuzz(CI_CASES, seed, fuzz.EmulatedBackend(), log=lambda s: None)
    failures = "\n\n".join(f"case {f['case']}: {f['outcome']}: {f['detail']}\n{f.get('snippet', '')}"
                           for f in report["failures"][:3])
    assert (report["wrong"], report["refused"], report["crashed"]) == (0, 0, 0), f"seed {seed}:\n{failures}"
    assert report["correct"] == CI_CASES


def test_every_illegal_input_is_refused_naming_its_argument():
    """fuzz_illegal.bad_specs: each a ConfigError (raised before the GPU is asked for) that starts with the argument
    it breaks."""
    results = fuzz.bad_input_checks()
    assert len(results) >= 25
    bad = [r for r in results if not r["ok"]]
    assert not bad, bad


def test_a_failure_is_shrunk_and_printed_as_a_snippet(monkeypatch):
    """A planted bug (the emulated kernel reads B as A's dtype: the mixed-fp8 bug of issue 22) is found, shrunk to
    a small case of the mixed pair, and printed as a program that compiles."""
    from ptxgemm.tools import emulator

    real = emulator.kernel

    def buggy(lay, cfg, maps, params, memory):
        import dataclasses
        return real(lay, dataclasses.replace(cfg, b_dtype=None), maps, params, memory)

    monkeypatch.setattr(emulator, "kernel", buggy)
    report = fuzz.fuzz(40, 1, fuzz.EmulatedBackend(), log=lambda s: None)   # seed 1 draws 7 mixed pairs by then
    assert report["wrong"] > 0
    first = report["failures"][0]
    small = first["shrunk"]
    case = fuzz_build.build(small)
    assert {case.a.dtype.name, case.b.dtype.name} == {"float8_e4m3fn", "float8_e5m2"}
    compile(first["snippet"], "<snippet>", "exec")


def test_the_cli_writes_the_report(tmp_path, capsys):
    assert main(["fuzz", "--emulate", "--cases", "40", "--seed", "5", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "fuzz_emulated_5.json").read_text())
    assert {"gpu", "seed", "cases", "correct", "wrong", "refused", "crashed"} <= set(report)
    assert (report["seed"], report["cases"], report["correct"]) == (5, 40, 40)
    assert "seed 5" in capsys.readouterr().out


def test_the_cli_writes_the_grouped_report_with_its_counts_at_the_top(tmp_path, capsys):
    """--grouped N with --out: the grouped cases' own file, fuzz_<gpu>_<seed>_grouped.json, as issue 48's results
    are committed ({"gpu", "seed", "cases", "correct", "wrong", "refused", "crashed"} at the top)."""
    assert main(["fuzz", "--emulate", "--cases", "2", "--grouped", "12", "--seed", "6", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "fuzz_emulated_6_grouped.json").read_text())
    assert {"gpu", "seed", "cases", "correct", "wrong", "refused", "crashed"} <= set(report)
    assert (report["seed"], report["cases"], report["correct"], report["refused"]) == (6, 12, 12, 0)
    assert json.loads((tmp_path / "fuzz_emulated_6.json").read_text())["grouped"]["cases"] == 12


@pytest.mark.parametrize("argv,rule", [(["--cases", "0"], "--cases: must be >= 1"),
                                       (["--max-flops", "-1"], "--max-flops: must be > 0"),
                                       (["--devices", "0"], "--devices: must be >= 1"),
                                       (["--devices", "2"], "--devices: the plan emulator has no devices")])
def test_the_cli_names_a_bad_option(argv, rule, capsys):
    assert main(["fuzz", "--emulate", *argv]) == 2
    assert rule in capsys.readouterr().err


def test_without_a_gpu_the_gpu_fuzzer_says_why(capsys):
    from ptxgemm.runtime import driver

    if driver.no_device_reason() is None:
        pytest.skip("a GPU is here")
    assert main(["fuzz", "--cases", "1"]) == 2
    assert "no" in capsys.readouterr().err.lower()


def test_outcomes_compare_failures_by_kind_and_message():
    a = fuzz.Outcome("refused", "ConfigError: out: shape must be (3, 4), got (4, 3)")
    b = fuzz.Outcome("refused", "ConfigError: out: shape must be (5, 6), got (6, 5)")
    c = fuzz.Outcome("refused", "ConfigError: c: dtype must be one of ...")
    assert a.same_failure(b) and not a.same_failure(c) and not a.same_failure(fuzz.Outcome("crashed", a.detail))


def test_the_gpu_judge_sees_a_byte_written_between_outs_rows():
    """GpuBackend.touched (no GPU here: its span stands in for the device's): an out with gaps between its rows
    (a pitched slice) is judged on the bytes of the gaps too, as the emulator judges host memory; a write into a
    gap is wrong, a write into out's own elements is not."""
    from ptxgemm.tools import fuzz as fz

    whole = np.zeros((4, 24), np.uint16)                 # rows of 48 bytes, out their first 18 elements (36 bytes)
    out = whole[:, :18]
    mine = fz.element_bytes(whole.nbytes, 0, out.shape, out.strides, out.itemsize)
    assert mine.sum() == out.nbytes and not mine[36:48].any() and mine[48:84].all()

    class Span:   # DeviceArray.to_numpy of the span
        ptr = 0x1000

        def __init__(self):
            self.bytes = whole.view(np.uint8).reshape(-1).copy()

        def to_numpy(self):
            return self.bytes

    class View:   # out's device view into the span, at its start
        def __init__(self, base):
            self.base, self.ptr = base, base.ptr

    class Case:
        pass

    case = Case()
    case.out = out
    judge = fz.GpuBackend.__new__(fz.GpuBackend)
    span = Span()
    view = View(span)
    judge.out_span = (view, fz.span_bytes(view))
    span.bytes[0:36] = 7                                 # out's own first row
    assert judge.touched(case) == ""
    span.bytes[36] = 1                                   # the first byte past N in row 0
    assert judge.touched(case) == fz.OUTSIDE_OUT


class _Recording:
    """A backend that answers each case with its float64 reference (so every case is correct) and keeps the specs
    it was given: what `fuzz` drew, without a GPU."""
    name = "emulate"

    def __init__(self):
        self.specs = []

    def device_name(self):
        return "recording"

    def call(self, case):
        self.specs.append(case.spec)
        ref, _ = fuzz_build.reference(case)
        return ref.astype(case.out.dtype if case.out is not None else ref.dtype)

    def touched(self, case):
        return ""


def test_several_devices_draw_one_per_case_and_leave_one_devices_draws_as_they_were():
    """--devices N: each case names one of the first N devices (both drawn in 40 cases), after its spec is drawn,
    so the specs themselves are a seed's specs on one device."""
    one, two = _Recording(), _Recording()
    fuzz.fuzz(40, 11, one, shrink=False, log=lambda s: None)
    report = fuzz.fuzz(40, 11, two, shrink=False, devices=2, log=lambda s: None)
    assert report["devices"] == 2
    assert {s["device"] for s in two.specs} == {0, 1}
    assert all("device" not in s for s in one.specs)
    first = {k: v for k, v in two.specs[0].items() if k != "device"}
    assert first == one.specs[0], "the device draw moved the spec's own draws"
    assert fuzz_cases.problems(dict(one.specs[0], device=-1)) == ["device: a whole number >= 0"]


def test_a_case_on_another_device_snippets_its_call_inside_that_device():
    """A failure drawn on device 1 reproduces there: the snippet's uploads and call run inside
    `with ptxgemm.device(1):`, and it still compiles."""
    import ast

    rng = np.random.default_rng(3)
    spec = next(s for s in (fuzz_cases.draw_spec(rng, max_flops=1e7, entries=("matmul",)) for _ in range(50)) if s["out"] is not None)
    text = fuzz_snippets.snippet(dict(spec, device=1))
    ast.parse(text)
    assert "with ptxgemm.device(1):\n    dev = ptxgemm.to_device" in text
    assert "with ptxgemm.device" not in fuzz_snippets.snippet(spec)
    assert "with ptxgemm.device" not in fuzz_snippets.snippet(dict(spec, device=0))
