"""ptxgemm.tune on the CPU: an injected plan factory (float64 matmul standing in for the kernel) and an injected
timer, so the checking, the choice, the cache round trip and the atomic write are tested without a GPU; and the
`tune` / `select` command lines."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ptxgemm
from ptxgemm import GemmConfig, select_config
from ptxgemm import accuracy
from ptxgemm.accuracy import DTYPES
from ptxgemm import tuning
from ptxgemm.errors import ConfigError, CudaError, PtxgemmError
from ptxgemm.select import cost_model as S, predict as P, tiles as T, tune_cache
from ptxgemm.select.problem import Problem

REPO_ROOT = Path(__file__).resolve().parent.parent
TAG_RE = re.compile(r"^(pp|coop)\d+x\d+(c2)?(sk)?z?$")


def FakeDevice(name: str = "Fake H100", sm_count=132, driver_version_str: str = "13.0") -> S.DeviceModel:
    """A device without a GPU: select's own DeviceModel, with an H100's numbers by default."""
    return S.DeviceModel(name, sm_count, driver_version_str)


H100 = FakeDevice()


class FakeRunner:
    """What a GemmPlan does, on the CPU: `wrong` flips one 16x16 block of the result."""

    def __init__(self, a, b, config, wrong=False):
        self.a, self.b, self.config, self.wrong = a, b, config, wrong
        self.launches = 0
        self.out = None

    def launch(self):
        self.launches += 1
        c = self.a.astype(np.float64) @ self.b.astype(np.float64)
        if self.wrong:
            c[:16, :16] += 1.0
        self.out = c.astype(DTYPES[self.config.out_dtype])

    def result(self):
        return self.out


class FakePlans:
    def __init__(self, wrong=(), raises=()):
        self.wrong, self.raises = set(wrong), set(raises)
        self.made = []          # (config, a, b) per call

    def __call__(self, a, b, config):
        self.made.append((config, a, b))
        if config.tag in self.raises:
            raise CudaError("CUDA_ERROR_INVALID_VALUE", f"launching {config.tag}")
        return FakeRunner(a, b, config, wrong=config.tag in self.wrong)


def fake_timer(ms: dict):
    calls = []

    def timer(launchers, rounds):
        calls.append((sorted(launchers), rounds))
        for launch in launchers.values():
            launch()
        return {tag: ms[tag] for tag in launchers}

    timer.calls = calls
    return timer


@pytest.fixture(autouse=True)
def _cache_on(cache_dir, monkeypatch):
    monkeypatch.delenv("PTXGEMM_TUNE_CACHE", raising=False)
    return cache_dir


def run_tune(m=96, n=80, k=72, candidates=("pp128x128", "coop256x128", "pp64x256c2"), ms=None, plans=None,
             device=H100, lines=None, **kw):
    ms = ms or {"pp128x128": 0.30, "coop256x128": 0.20, "pp64x256c2": 0.25}
    plans = plans or FakePlans()
    timer = fake_timer(ms)
    out = lines if lines is not None else []
    winner, records = ptxgemm.tune(m, n, k, candidates=list(candidates) if candidates else candidates, rounds=4,
                                   progress=out.append, plan_factory=plans, timer=timer, device=device, **kw)
    return winner, records, plans, timer, out


# ---- choosing

def test_the_fastest_correct_candidate_wins_and_is_reported():
    winner, records, plans, timer, lines = run_tune()
    assert winner == GemmConfig.from_tag("coop256x128")
    assert [r["tag"] for r in records] == ["pp128x128", "coop256x128", "pp64x256c2"]
    assert all(r["ok"] and r["ms"] > 0 and r["tflops"] > 0 for r in records)
    assert records[1]["tflops"] == pytest.approx(2 * 96 * 80 * 72 / 0.20 / 1e9)
    assert all(r["predicted_us"] > 0 for r in records)
    assert timer.calls == [(["coop256x128", "pp128x128", "pp64x256c2"], 4)]  # all together, once
    text = "\n".join(lines)
    for tag, ms in (("pp128x128", 0.30), ("coop256x128", 0.20)):
        assert re.search(rf"{tag}\s+{ms:.4f} ms\s+[\d.]+ TFLOP/s", text), text
    assert "winner: coop256x128" in text


def test_a_wrong_candidate_is_never_timed_or_chosen():
    winner, records, _, timer, lines = run_tune(plans=FakePlans(wrong={"coop256x128"}))
    bad = records[1]
    assert bad["tag"] == "coop256x128" and not bad["ok"] and bad["ms"] is None
    assert "over their bound" in bad["check"]
    assert "coop256x128" not in timer.calls[0][0]
    assert winner.tag == "pp64x256c2"
    assert any("WRONG RESULT" in line and "coop256x128" in line for line in lines)


def test_a_candidate_that_fails_to_run_is_reported():
    winner, records, *_ = run_tune(plans=FakePlans(raises={"pp64x256c2"}))
    assert records[2]["error"].startswith("CudaError") and records[2]["ms"] is None and not records[2]["ok"]
    assert winner.tag == "coop256x128"


def test_no_correct_candidate_is_an_error():
    with pytest.raises(PtxgemmError, match="no candidate"):
        run_tune(plans=FakePlans(wrong={"pp128x128", "coop256x128", "pp64x256c2"}))
    assert not (Path(os.environ["PTXGEMM_CACHE_DIR"]) / "tune.json").exists()


def test_ties_go_to_the_earlier_candidate():
    winner, *_ = run_tune(ms={"pp128x128": 0.2, "coop256x128": 0.2, "pp64x256c2": 0.2})
    assert winner.tag == "pp128x128"


def test_default_candidates_are_the_selections():
    winner, records, plans, *_ = run_tune(candidates=None, ms={c.tag: 1.0 + i for i, c in
                                                               enumerate(T.candidates(96, 80, 72))})
    assert [r["tag"] for r in records] == [c.tag for c in T.candidates(96, 80, 72)]
    assert winner.tag == records[0]["tag"]


@pytest.mark.parametrize("a_major,b_major", [("k", "mn"), ("k", "k"), ("mn", "mn"), ("mn", "k")])
@pytest.mark.parametrize("in_dtype,out_dtype", [("bfloat16", None), ("float16", "float32")])
def test_operands_follow_the_layouts_and_are_never_zero(a_major, b_major, in_dtype, out_dtype):
    winner, records, plans, *_ = run_tune(in_dtype=in_dtype, out_dtype=out_dtype, a_major=a_major, b_major=b_major)
    config, a, b = plans.made[0]
    assert a.shape == (96, 72) and b.shape == (72, 80)
    assert a.flags.c_contiguous if a_major == "k" else a.flags.f_contiguous and not a.flags.c_contiguous
    assert b.flags.c_contiguous if b_major == "mn" else b.flags.f_contiguous and not b.flags.c_contiguous
    assert np.all(a.astype(np.float32) != 0) and np.all(b.astype(np.float32) != 0)
    assert a.dtype.name == b.dtype.name == in_dtype
    for cfg, _, _ in plans.made:
        assert (cfg.in_dtype, cfg.out_dtype, cfg.a_major, cfg.b_major) == (in_dtype, out_dtype or in_dtype, a_major,
                                                                           b_major)
    assert winner.out_dtype == (out_dtype or in_dtype)


# ---- arguments

@pytest.mark.parametrize("kwargs,pattern", [
    (dict(candidates=["pp128x128", "pp128x128"]), "^candidates: pp128x128 is given twice"),
    (dict(candidates=["128x128"]), "^config tag: "),
    (dict(candidates=[GemmConfig(debug=True)]), "^candidates: .*debug"),
    (dict(candidates=[42]), "^candidates: "),
    (dict(candidates=[]), "^candidates: empty"),
    (dict(rounds=0), "^rounds: "),
    (dict(rounds=2.5), "^rounds: "),
    (dict(check_rows=0), "^check_rows: "),
    (dict(m=0), "^m: "),
    (dict(out_dtype="int8"), "^out_dtype: "),
    (dict(b_major="row"), "^b_major: "),
])
def test_bad_arguments_name_themselves(kwargs, pattern):
    args = dict(m=96, n=80, k=72, candidates=["pp128x128"], rounds=3, progress=None, plan_factory=FakePlans(),
                timer=fake_timer({"pp128x128": 1.0}), device=H100)
    with pytest.raises(ConfigError, match=pattern):
        ptxgemm.tune(**{**args, **kwargs})


def test_candidates_as_a_comma_separated_string():
    winner, records = ptxgemm.tune(96, 80, 72, candidates="pp128x128, coop256x128", rounds=2, progress=None,
                                   plan_factory=FakePlans(), timer=fake_timer({"pp128x128": 2.0, "coop256x128": 1.0}),
                                   device=H100)
    assert [r["tag"] for r in records] == ["pp128x128", "coop256x128"] and winner.tag == "coop256x128"


def test_an_unaligned_problem_is_tuned_like_any_other():
    """N = 9 bf16 elements is an 18-byte row TMA cannot stride: the plan stages it, so tuning times what a user gets
    (the staged path) instead of refusing."""
    plans = FakePlans()
    ptxgemm.tune(64, 9, 64, candidates=["pp128x128"], progress=None, plan_factory=plans,
                 timer=fake_timer({"pp128x128": 0.01}),
                 device=H100, store=False)
    assert len(plans.made) == 1


# ---- the cache

def test_cache_round_trip(cache_dir):
    winner, records, *_ = run_tune()
    path = cache_dir / "tune.json"
    data = json.loads(path.read_text())
    assert data["format"] == tune_cache.FORMAT
    (key, entry), = data["entries"].items()
    assert "gpu=Fake H100" in key and "driver=13.0" in key and "sms=132" in key and "mnk=96x80x72" in key
    assert entry["config"] == "coop256x128" and entry["gpu"] == "Fake H100" and entry["driver"] == "13.0"
    assert entry["timings_ms"] == {"pp128x128": 0.30, "coop256x128": 0.20, "pp64x256c2": 0.25}
    assert (entry["m"], entry["n"], entry["k"], entry["a_major"], entry["b_major"]) == (96, 80, 72, "k", "mn")
    # select_config and lookup find it; only for this GPU, driver and problem
    assert select_config(96, 80, 72, device=H100) == winner
    assert tuning.lookup(96, 80, 72, device=H100) == winner
    assert tuning.lookup(96, 80, 72, device=FakeDevice(driver_version_str="12.8")) is None
    assert tuning.lookup(96, 80, 72, device=FakeDevice(name="Fake H200")) is None
    assert tuning.lookup(96, 80, 72, device=FakeDevice(sm_count=114)) is None
    assert tuning.lookup(96, 80, 72, out_dtype="float32", device=H100) is None
    assert tuning.lookup(96, 80, 72, a_major="mn", device=H100) is None


class FakeBlockPlans:
    """The blockwise GemmPlan on the CPU: each 128-wide block of K scaled by its row and column-block scales."""

    def __init__(self):
        self.made = []

    def __call__(self, a, b, config, scales):
        self.made.append((config, scales))
        runner = FakeRunner(a, b, config)
        sa, sb = scales["scale_a"], scales["scale_b"]

        def launch():
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            c = np.zeros((a.shape[0], b.shape[1]))
            cols = np.arange(b.shape[1]) // 128
            for kb in range(sa.shape[1]):
                ks = slice(128 * kb, 128 * (kb + 1))
                c += (a64[:, ks] @ b64[ks]) * sa[:, kb:kb + 1] * sb[kb, cols][None, :]
            runner.out = c.astype(DTYPES[config.out_dtype])
        runner.launch = launch
        return runner


class Fp8AccumulationRunner(FakeRunner):
    """A right fp8 kernel's result: the product off by half of what the tensor cores' reduced-width fp8 accumulation
    may lose (accuracy.FP8_ACCUMULATION_UNIT x sum |a||b|), far more than a 16-bit input's fp32 accumulation may."""

    def launch(self):
        self.launches += 1
        a64, b64 = self.a.astype(np.float64), self.b.astype(np.float64)
        c = a64 @ b64 + 0.5 * accuracy.FP8_ACCUMULATION_UNIT * (np.abs(a64) @ np.abs(b64))
        self.out = c.astype(DTYPES[self.config.out_dtype])


def test_per_tensor_fp8_candidates_are_checked_by_the_fp8_bound(cache_dir):
    """tune() on fp8 inputs judges each candidate by the bound of its inputs' dtype: an error that fp8's reduced-width
    accumulation allows passes (the bound of 16-bit inputs refused every right fp8 kernel at long K)."""
    fp8 = dict(in_dtype="float8_e4m3fn", out_dtype="bfloat16", a_major="k", b_major="k")
    plans_made = []

    def factory(a, b, config):
        plans_made.append(config)
        return Fp8AccumulationRunner(a, b, config)

    k = 4096
    too_tight = accuracy.error_bound(np.ones((1, 1)), np.full((1, 1), float(k)), k, "bfloat16", "bfloat16")[0, 0]
    assert 0.5 * accuracy.FP8_ACCUMULATION_UNIT * k > too_tight     # the error is past the 16-bit inputs' bound
    winner, records = ptxgemm.tune(64, 80, k, **fp8, candidates=["pp64x64k2", "pp64x64"], rounds=2, progress=None,
                                   plan_factory=factory, timer=fake_timer({"pp64x64k2": 0.1, "pp64x64": 0.2}),
                                   device=H100)
    assert all(r["ok"] for r in records), [r["check"] for r in records]
    assert winner.tag == "pp64x64k2" and len(plans_made) == 2


def test_blockwise_tuning_tries_the_blockwise_tiles_and_keeps_its_own_entry(cache_dir):
    """tune(scaling="block"): the blockwise candidates (splits included), each checked against the dequantized
    product, the winner stored under the blockwise key: select_config returns it for blockwise calls only."""
    fp8 = dict(in_dtype="float8_e4m3fn", out_dtype="bfloat16", a_major="k", b_major="k")
    problem = Problem(130, 200, 1000, **fp8)
    tags = [c.tag for c in tuning.candidate_configs(problem, None, "block")]
    assert {"coop128x128", "pp64x128", "coop128x64", "pp64x64", "pp64x64k4", "coop128x128c2"} <= set(tags)
    assert all(c.block_scale for c in tuning.candidate_configs(problem, None, "block"))
    plans = FakeBlockPlans()
    ms = {"pp64x64k2": 0.1, "coop128x128": 0.2}
    winner, records = ptxgemm.tune(130, 200, 1000, **fp8, candidates=["coop128x128", "pp64x64k2"], rounds=2,
                                   progress=None, plan_factory=plans, timer=fake_timer(ms), device=H100,
                                   scaling="block")
    assert winner.tag == "pp64x64k2" and winner.block_scale and all(r["ok"] for r in records)
    assert {tuple(s["scale_a"].shape) for _, s in plans.made} == {(130, 8)}
    (key, entry), = json.loads((cache_dir / "tune.json").read_text())["entries"].items()
    assert key.endswith(";scaling=block") and entry["scaling"] == "block"
    block = (("block_scale", True),)
    assert select_config(130, 200, 1000, **fp8, device=H100, epilogue=block) == winner
    assert S.choose(130, 200, 1000, **fp8, device=H100)[1] == "cost model"   # the plain problem has no entry
    with pytest.raises(ConfigError, match="scaling: blockwise scaling is for fp8 inputs"):
        tuning.candidate_configs(Problem(130, 200, 1000), None, "block")
    with pytest.raises(ConfigError, match="scaling: 'row' is not tuned"):
        tuning.candidate_configs(problem, None, "row")


def test_entries_accumulate_and_replace(cache_dir):
    run_tune()
    run_tune(m=128)
    run_tune(ms={"pp128x128": 0.1, "coop256x128": 0.20, "pp64x256c2": 0.25})  # the first problem again
    entries = tune_cache.load(cache_dir / "tune.json")
    assert len(entries) == 2
    assert tuning.lookup(96, 80, 72, device=H100).tag == "pp128x128"
    assert tuning.lookup(128, 80, 72, device=H100).tag == "coop256x128"


def test_no_store_and_env_off_write_nothing(cache_dir, monkeypatch):
    run_tune(store=False)
    assert not (cache_dir / "tune.json").exists()
    monkeypatch.setenv("PTXGEMM_TUNE_CACHE", "off")
    lines = []
    run_tune(lines=lines)
    assert not (cache_dir / "tune.json").exists()
    assert any("not stored" in line for line in lines)
    assert tuning.lookup(96, 80, 72, device=H100) is None


def test_the_write_is_atomic(cache_dir, monkeypatch):
    """Written to a temporary file in the same directory and renamed over the cache; a failure anywhere before the
    rename leaves the old file untouched and no temporary behind."""
    run_tune()
    path = cache_dir / "tune.json"
    before = path.read_bytes()
    renames = []
    real_replace = os.replace

    def spy(src, dst):
        renames.append((Path(src), Path(dst), Path(src).read_bytes()))
        return real_replace(src, dst)

    monkeypatch.setattr(tune_cache.os, "replace", spy)
    run_tune(m=128)
    (src, dst, content), = renames
    assert dst == path and src.parent == path.parent and src != path and not src.exists()
    assert json.loads(content) == json.loads(path.read_text())

    def broken(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(tune_cache.os, "replace", broken)
    lines = []
    current = path.read_bytes()
    winner, *_ = run_tune(m=160, lines=lines)
    assert winner.tag == "coop256x128"                                 # the measurement is still returned
    assert any("could not store" in line and "disk full" in line for line in lines)
    assert path.read_bytes() == current != before
    assert sorted(p.name for p in cache_dir.iterdir()) == ["tune.json"]  # no temporary left


def test_a_corrupt_cache_is_ignored_and_rewritten(cache_dir):
    cache_dir.mkdir(parents=True)
    (cache_dir / "tune.json").write_text("{\"format\": 1, \"entries\": [")
    assert tuning.lookup(96, 80, 72, device=H100) is None
    run_tune()
    assert tuning.lookup(96, 80, 72, device=H100).tag == "coop256x128"


def test_key_names_every_field():
    p = Problem(1, 2, 3, "float16", "float32", "mn", "k")
    assert tune_cache.key(p, H100) == ("gpu=Fake H100;sms=132;driver=13.0;mnk=1x2x3;dtypes=float16->float32;"
                                       "majors=a:mn,b:k")
    # a device that does not know its driver still keys (and never matches a real GPU's entry)
    assert "driver=unknown" in tune_cache.key(p, S.DEFAULT_DEVICE)


# ---- command line

def cli(*args, env=None):
    # CUDA_VISIBLE_DEVICES="" hides any GPU: these tests are about the no-GPU behaviour on every machine
    full_env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", **(env or {})}
    return subprocess.run([sys.executable, "-m", "ptxgemm", *args], capture_output=True, text=True, timeout=120,
                          cwd=REPO_ROOT, env=full_env)


def test_cli_tune_without_a_gpu_exits_2_with_the_reason(cache_dir):
    proc = cli("tune", "--m", "256", "--n", "256", "--k", "256", "--candidates", "pp128x128,coop256x128")
    assert proc.returncode == 2, proc.stderr
    assert "tune runs the kernel, so it needs an sm_90 GPU" in proc.stderr
    assert "python -m ptxgemm select" in proc.stderr
    assert not (cache_dir / "tune.json").exists()


@pytest.mark.parametrize("args,pattern", [
    (("--rounds", "0"), "--rounds: must be >= 1"),
    (("--candidates", "pp128x256"), "block_m x block_n"),
    (("--candidates", "big"), "config tag"),
    (("--m", "0"), "m: must be >= 1"),
])
def test_cli_tune_checks_arguments_before_the_gpu(args, pattern):
    base = {"--m": "256", "--n": "256", "--k": "256"}
    flat = [x for kv in base.items() if kv[0] not in args for x in kv] + list(args)
    proc = cli("tune", *flat)
    assert proc.returncode == 2 and pattern in proc.stderr, proc.stderr


def test_cli_select_prints_a_tag_and_the_table():
    proc = cli("select", "--m", "4096", "--n", "4096", "--k", "4096", env={"PTXGEMM_TUNE_CACHE": "off"})
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.split()[0]
    assert TAG_RE.match(first), proc.stdout
    assert first == select_config(4096, 4096, 4096, device=S.DEFAULT_DEVICE).tag
    assert "cost model" in proc.stdout.splitlines()[0] and "<- chosen" in proc.stdout
    listed = set(proc.stdout.split())
    for c in T.candidates(4096, 4096, 4096):   # a cooperative tile may be listed with the stream-K tail and the
        tail = P.with_stream_k(c, 4096, 4096, 4096, 132)      # serpentine k-loop it takes
        assert (c.tag in listed or P.with_serpentine(tail, 4096, 4096, 4096, 132).tag in listed) == \
            (c.tile_tag in S.SELECTABLE + S.WAVE_FILL_TILES and c.tile_tag not in S.WHOLE_N_TILES)   # 256 divides N


def test_cli_select_json_and_sm_count():
    proc = cli("select", "--m", "128", "--n", "1000", "--k", "64", "--out-dtype", "float32", "--a-major", "mn",
               "--b-major", "k", "--sm-count", "8", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["device"]["sm_count"] == 8 and data["source"] == "cost model"
    expected = select_config(128, 1000, 64, out_dtype="float32", a_major="mn", b_major="k",
                             device=FakeDevice("x", 8))
    assert data["config"] == expected.tag
    assert data["candidates"][0]["tag"] == expected.tag


def test_cli_select_uses_the_tune_cache(cache_dir):
    """Without a GPU the default device is DEFAULT_DEVICE, whose entry a test can store."""
    tune_cache.store(Problem(4096, 4096, 4096), S.DEFAULT_DEVICE, "pp128x192", {"pp128x192": 1.0}, rounds=1)
    proc = cli("select", "--m", "4096", "--n", "4096", "--k", "4096")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[0] == "pp128x192" and "tune cache" in proc.stdout.splitlines()[0]


def test_cli_select_bad_sm_count():
    proc = cli("select", "--m", "1", "--n", "8", "--k", "8", "--sm-count", "0")
    assert proc.returncode == 2 and "--sm-count: must be >= 1" in proc.stderr
