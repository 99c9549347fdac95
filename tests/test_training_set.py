"""`python -m ptxgemm bench --set training` (ptxgemm/bench/training.py): its GEMMs as autograd lays them out, the
options that pick them, --summarize over its runs (no GPU, no torch), and one small run on the GPU."""
from __future__ import annotations

import importlib.util
import json
import math

import numpy as np
import pytest

from ptxgemm import accuracy
from ptxgemm.bench import training
from ptxgemm.bench.suite import gpu_slug
from test_bench_cli import H100, bench

QWEN15 = "qwen2-1.5b"
LLAMA, MISTRAL = "llama-3-8b", "mistral-7b"


# --- the shapes ---------------------------------------------------------------------------------------------------

def test_qwen2_1_5b_linears_spelled_out():
    assert training.linears(QWEN15) == {"q": (1536, 1536), "k": (256, 1536), "v": (256, 1536), "o": (1536, 1536),
                                        "gate": (8960, 1536), "up": (8960, 1536), "down": (1536, 8960),
                                        "lm_head": (151936, 1536)}
    rows = training.shapes((QWEN15,), (4096,))
    got = [(r["gemm"], r["role"], r["M"], r["N"], r["K"]) for r in rows]
    assert got == [("forward", "q/o", 4096, 1536, 1536), ("dX", "q/o", 4096, 1536, 1536),
                   ("dW", "q/o", 1536, 1536, 4096),
                   ("forward", "k/v", 4096, 256, 1536), ("dX", "k/v", 4096, 1536, 256), ("dW", "k/v", 256, 1536, 4096),
                   ("forward", "gate/up", 4096, 8960, 1536), ("dX", "gate/up", 4096, 1536, 8960),
                   ("dW", "gate/up", 8960, 1536, 4096),
                   ("forward", "down", 4096, 1536, 8960), ("dX", "down", 4096, 8960, 1536),
                   ("dW", "down", 1536, 8960, 4096),
                   ("forward", "lm_head", 4096, 151936, 1536), ("dX", "lm_head", 4096, 1536, 151936),
                   ("dW", "lm_head", 151936, 1536, 4096)]
    k_v = rows[3]
    assert k_v["linears"] == ["k", "v"] and k_v["stands_for"] == [f"{QWEN15} k", f"{QWEN15} v"]
    assert k_v["weight"] == [256, 1536] and k_v["models"] == [QWEN15] and k_v["model"] == QWEN15


def test_the_other_widths():
    assert training.MODELS == {"qwen2-0.5b": (896, 4864, 14, 2, 151936), QWEN15: (1536, 8960, 12, 2, 151936),
                               LLAMA: (4096, 14336, 32, 8, 128256), MISTRAL: (4096, 14336, 32, 8, 32000)}
    assert training.linears("qwen2-0.5b")["k"] == (128, 896)    # head_dim 64
    assert training.linears(LLAMA)["v"] == (1024, 4096) and training.linears(MISTRAL)["lm_head"] == (32000, 4096)


@pytest.mark.parametrize("model", list(training.MODELS))
@pytest.mark.parametrize("tokens", training.TOKENS)
def test_each_model_alone_is_15_gemms(model, tokens):
    """5 distinct linears (q/o, k/v, gate/up, down, lm_head) x forward, dX, dW; every (linear, gemm) stood for."""
    rows = training.shapes((model,), (tokens,))
    assert len(rows) == 15 and {r["tokens"] for r in rows} == {tokens}
    assert sorted(s for r in rows for s in r["stands_for"]) == sorted(
        f"{model} {lin}" for lin in training.linears(model) for _ in training.GEMMS)
    assert len({training.row_key(r) for r in rows}) == 15


def test_llama_and_mistral_share_all_but_lm_head_and_the_full_set_has_96_rows():
    rows = training.shapes((LLAMA, MISTRAL), (4096,))
    assert len(rows) == 18
    shared = [r for r in rows if r["models"] == [LLAMA, MISTRAL]]
    assert len(shared) == 12 and {r["role"] for r in shared} == {"q/o", "k/v", "gate/up", "down"}
    assert [(r["model"], r["role"]) for r in rows if r not in shared] == [(LLAMA, "lm_head")] * 3 + \
        [(MISTRAL, "lm_head")] * 3
    full = training.shapes()
    assert len(full) == 96 and len({training.row_key(r) for r in full}) == 96
    assert [r["tokens"] for r in full] == [4096] * 48 + [16384] * 48
    assert all(r["set"] == "training" and r["role"] == "/".join(r["linears"]) for r in full)


def test_every_layout_has_the_majors_of_autograds_views():
    """The layouts' majors, and the same majors read off numpy views built as _operands builds the torch ones
    (x, dY, W row-major; the transposes views)."""
    assert training.LAYOUTS == {"forward": ("x·Wᵀ", "k", "k"), "dX": ("dY·W", "k", "mn"),
                                "dW": ("dYᵀ·X", "mn", "mn")}
    t, n_out, k_in = 64, 48, 32
    x, w, dy = np.empty((t, k_in), np.float32), np.empty((n_out, k_in), np.float32), np.empty((t, n_out), np.float32)

    def el(a):
        return tuple(s // a.itemsize for s in a.strides)
    views = {"forward": (x, w.T), "dX": (dy, w), "dW": (dy.T, x)}
    for gemm, (a, b) in views.items():
        m, n, k = training.gemm_mnk(gemm, t, n_out, k_in)
        assert a.shape == (m, k) and b.shape == (k, n)
        assert training.majors(el(a), el(b)) == training.LAYOUTS[gemm][1:], gemm
    for r in training.shapes():
        assert (r["a_major"], r["b_major"]) == training.LAYOUTS[r["gemm"]][1:] and r["layout"] == \
            training.LAYOUTS[r["gemm"]][0]
        assert (r["M"], r["N"], r["K"]) == training.gemm_mnk(r["gemm"], r["tokens"], *r["weight"])


def test_figures_and_the_checks():
    rows = training.shapes((QWEN15,), (4096,))
    for i, r in enumerate(rows):
        r["ratio"] = 1.1 if i else 0.9
    fig = training.figures(rows)
    assert fig["geomean"] == pytest.approx(math.exp((14 * math.log(1.1) + math.log(0.9)) / 15))
    assert fig["geomean_by_gemm"]["dX"] == pytest.approx(1.1) and fig["min_ratio"] == 0.9
    assert fig["min_row"] == "T=4096 forward q/o qwen2-1.5b 4096x1536x1536 x·Wᵀ"
    assert fig["checks"] == {"geomean >= 1.03": True, "no row below 0.92": False}
    rows[0]["ratio"] = None   # a failed plan: no ratio, counted below the floor
    assert training.figures(rows)["checks"]["no row below 0.92"] is False
    assert list(training.figures(rows)["geomean_by_tokens"]) == ["4096"]


# --- the options --------------------------------------------------------------------------------------------------

def test_parse_tokens_and_models():
    assert training.parse_tokens(None) == (4096, 16384) and training.parse_tokens("16384, 4096") == (4096, 16384)
    assert training.parse_models(f"{MISTRAL},qwen2-0.5b") == ("qwen2-0.5b", MISTRAL)
    assert training.parse_models(None) == tuple(training.MODELS)
    for text, pattern in (("2048", "--tokens: '2048' is not one of 4096, 16384"), ("x", "--tokens: 'x'"),
                          (",", "--tokens: names none")):
        with pytest.raises(Exception, match=pattern):
            training.parse_tokens(text)
    with pytest.raises(Exception, match="--models: 'llama' is not one of"):
        training.parse_models("llama")


@pytest.fixture
def captured(monkeypatch):
    """main(argv) with training.run replaced by a recorder: what the command line asked the set for."""
    from ptxgemm.cli.main import main

    monkeypatch.setenv("PTXGEMM_TUNE_CACHE", "off")   # the command sets it; the fixture restores it
    calls = []
    monkeypatch.setattr(training, "run", lambda *a, **kw: calls.append((a, kw)) or 0)

    def call(*argv):
        assert main(["bench", "--set", "training", *argv]) == 0
        (args, kw), = calls[-1:]
        rounds, out, name, models, tokens = args
        return {"rounds": rounds, "out": out, "name": name, "models": models, "tokens": tokens,
                "variants": [c.tag for c in kw["variant_configs"]], "config": kw["config"],
                "tune_cache": kw["tune_cache"]}
    return call


def test_the_command_line_picks_the_gemms(captured):
    got = captured("--tokens", "16384", "--models", f"{MISTRAL},qwen2-0.5b", "--rounds", "3", "--variants",
                   "pp128x192,coop256x128c2", "--name", "r1", "--out", "o")
    assert got == {"rounds": 3, "out": "o", "name": "r1", "models": ("qwen2-0.5b", MISTRAL), "tokens": (16384,),
                   "variants": ["pp128x192", "coop256x128c2"], "config": None, "tune_cache": "off"}
    got = captured("--quick")
    assert (got["models"], got["tokens"], got["rounds"]) == ((QWEN15,), (4096,), 7)
    got = captured()
    assert (got["models"], got["tokens"], got["rounds"]) == (tuple(training.MODELS), (4096, 16384), 25)
    assert captured("--config", "pp128x128")["config"].tag == "pp128x128"


@pytest.mark.parametrize("args,pattern", [
    (("--tokens", "4096"), "--tokens: only with --set training"),
    (("--set", "grouped", "--models", LLAMA), "--models: only with --set training"),
    (("--set", "training", "--tokens", "8192"), "--tokens: '8192' is not one of 4096, 16384"),
    (("--set", "training", "--models", "gpt2"), "--models: 'gpt2' is not one of"),
    (("--set", "training", "--quick", "--tokens", "4096"), "--quick: --set training's quick run"),
    (("--set", "training", "--shapes", "8x8x8"), "--set: the shape set training"),
    (("--set", "training", "--in-dtype", "float8_e4m3fn"), "--in-dtype: not with --set training"),
    (("--set", "training", "--b-major", "k"), "--b-major: not with --set training"),
    (("--set", "training", "--sustained"), "--sustained: the bf16 benchmark against cuBLAS only"),
    (("--set", "training", "--variants", "pp128x256"), "--variants: block_m x block_n"),
    (("--host", "--tokens", "4096"), "--tokens: not with --host"),
])
def test_bad_training_arguments_exit_2(args, pattern, tmp_path, bench_refuses):
    bench_refuses(args, pattern, tmp_path)


def test_without_torch_or_a_gpu_the_set_says_which(tmp_path):
    proc = bench("--set", "training", "--quick", "--out", str(tmp_path / "o"), cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    if importlib.util.find_spec("torch") is None:
        assert "--set training: makes its operands with torch" in proc.stderr and "needs torch" in proc.stderr
    else:
        assert "bench runs the kernels, so it needs an sm_90 GPU" in proc.stderr
    assert list(tmp_path.iterdir()) == []


# --- --summarize --------------------------------------------------------------------------------------------------

def _run_file(tmp_path, name, ratios):
    rows = [{**r, "config": "pp128x128", "ptxgemm_ms": 1.0, "cublas_ms": q, "ratio": q}
            for r, q in zip(training.shapes((QWEN15,), (4096,)), ratios)]
    path = tmp_path / name
    path.write_text(json.dumps({"gpu": H100, "set": "training", "rows": rows, **training.figures(rows)}))
    return path


def test_summarize_evaluates_the_checks_on_per_row_medians(tmp_path):
    """Each run alone fails a check (one row at 0.80; a geomean of 1.007), the per-row medians pass both."""
    one = _run_file(tmp_path, "r1.json", [0.80] + [1.10] * 14)
    two = _run_file(tmp_path, "r2.json", [1.10] + [1.00] * 14)
    for f in (one, two):
        assert not all(json.loads(f.read_text())["checks"].values())
    out = tmp_path / "s.json"
    proc = bench("--summarize", str(one), str(two), "--summarize-out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    s = json.loads(out.read_text())[f"{H100} [training]"]
    assert s["set"] == "training" and len(s["runs"]) == 2 and len(s["rows"]) == 15
    first = s["rows"][0]
    assert (first["gemm"], first["role"], first["a_major"], first["b_major"]) == ("forward", "q/o", "k", "k")
    assert (first["ratio"]["min"], first["ratio"]["median"], first["ratio"]["max"]) == pytest.approx((0.8, 0.95, 1.1))
    assert s["geomean"]["n"] == 2 and s["geomean"]["max"] == pytest.approx(
        math.exp((math.log(0.8) + 14 * math.log(1.1)) / 15))
    med = s["median_rows"]
    assert med["min_ratio"] == pytest.approx(0.95) and med["geomean"] == pytest.approx(
        math.exp((math.log(0.95) + 14 * math.log(1.05)) / 15))
    assert med["checks"] == {"geomean >= 1.03": True, "no row below 0.92": True}
    for text in (f"== {H100} [training]: 2 run(s)", "T=4096 dW lm_head qwen2-1.5b 151936x1536x4096",
                 "per-row medians:", "geomean >= 1.03 PASS", "no row below 0.92 PASS", "mn/mn"):
        assert text in proc.stdout, text


def test_a_training_file_without_its_fields_is_refused(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"gpu": H100, "set": "training", "rows": [{"M": 1, "N": 2, "K": 3}]}))
    proc = bench("--summarize", str(bad), cwd=tmp_path)
    assert proc.returncode == 2 and "bad.json" in proc.stderr and "--set training` result" in proc.stderr


# --- the run, with torch and the GPU faked ---------------------------------------------------------------------

class _Tensor:
    """The torch.Tensor operations the set uses, on a host numpy array (views stay views)."""

    def __init__(self, a):
        self.a = a

    shape = property(lambda self: self.a.shape)

    def stride(self):
        return tuple(s // self.a.itemsize for s in self.a.strides)

    def t(self):
        return _Tensor(self.a.T)

    def __getitem__(self, idx):
        return _Tensor(self.a[idx.a])

    def __matmul__(self, other):
        return _Tensor(self.a @ other.a)

    def double(self):
        return _Tensor(self.a.astype(np.float64))

    def float(self):
        return _Tensor(self.a.astype(np.float32))

    def cuda(self):
        return self

    cpu = cuda

    def numpy(self):
        return self.a

    def __len__(self):
        return len(self.a)


def _fake_torch():
    import importlib.machinery
    import types

    import ml_dtypes

    bf16 = np.dtype(ml_dtypes.bfloat16)
    torch = types.ModuleType("torch")
    torch.__spec__ = importlib.machinery.ModuleSpec("torch", None)   # find_spec("torch") finds it
    torch.__version__, torch.bfloat16 = "fake", bf16
    torch.Generator = lambda device: types.SimpleNamespace(
        manual_seed=lambda s: types.SimpleNamespace(rng=np.random.default_rng(s)))
    torch.randn = lambda *shape, device, dtype, generator: _Tensor(
        generator.rng.standard_normal(shape, dtype=np.float32).astype(dtype))
    torch.full = lambda shape, value, dtype, device: _Tensor(np.full(shape, value, dtype))
    torch.from_numpy = _Tensor

    def matmul(a, b, out):
        out.a[...] = (a.a.astype(np.float64) @ b.a.astype(np.float64)).astype(bf16)
    torch.matmul = matmul
    torch.cuda = types.SimpleNamespace(synchronize=lambda: None, empty_cache=lambda: None)
    torch.backends = types.SimpleNamespace(cuda=types.SimpleNamespace(
        matmul=types.SimpleNamespace(allow_bf16_reduced_precision_reduction=True)))
    return torch


class _Plan:
    """GemmPlan in float64 on the host, on the arrays it is handed (autograd's views: measure checks their majors
    first); it refuses coop256x128c2, so that a variant's error is recorded."""

    def __init__(self, a, b, out, config=None):
        import types

        if config is not None and config.tag == "coop256x128c2":
            raise ValueError("no such luck\nsecond line")
        self.a, self.b, self.out = a.a, b.a, out.a
        self.config = types.SimpleNamespace(tag=config.tag if config else "pp128x128")
        operands = [types.SimpleNamespace(name=x, staged=False) for x in "abc"]
        self.layout = types.SimpleNamespace(describe=lambda: "in place", operands=operands)

    def launch(self):
        self.out[...] = self.a.astype(np.float64) @ self.b.astype(np.float64)


def test_the_run_with_torch_and_the_gpu_faked(monkeypatch, tmp_path, capsys):
    """training.run end to end on the host: each row's fields, a variant that cannot plan recorded in its row, the
    figures, the JSON and --summarize over it."""
    import sys
    import types

    from ptxgemm import gemm
    from ptxgemm.bench.suite import parse_tag
    from ptxgemm.runtime import timing

    monkeypatch.setitem(sys.modules, "torch", _fake_torch())
    monkeypatch.setattr(gemm, "GemmPlan", _Plan)
    ms = {"ptxgemm": 1.0, "cublas": 1.1, "ptxgemm pp128x192": 0.8, "ptxgemm coop256x128c2": 9.0}
    monkeypatch.setattr(timing, "time_interleaved",
                        lambda launchers, rounds, warmup=3: {n: (f(), ms[n])[1] for n, f in launchers.items()})
    monkeypatch.setattr(training, "require_device", lambda: types.SimpleNamespace(
        name=H100, sm_count=132, driver_version_str="13.0"))
    monkeypatch.setattr(training, "read_clocks", lambda: {})
    tiny = {"qwen2-0.5b": (64, 96, 2, 1, 160)}   # hidden, intermediate, heads, kv heads, vocab
    monkeypatch.setattr(training, "MODELS", tiny)
    variants = (parse_tag("pp128x192"), parse_tag("coop256x128c2"))
    assert training.run(3, tmp_path / "o", "t", tuple(tiny), (32,), variant_configs=variants) == 0
    result = json.loads((tmp_path / "o" / "bench_h100_training_t.json").read_text())
    assert (result["set"], result["rounds"], result["torch"], result["tokens"]) == ("training", 3, "fake", [32])
    assert result["variants"] == ["pp128x192", "coop256x128c2"] and result["method"].startswith("L2 flushed")
    rows = result["rows"]
    assert len(rows) == 15 and [r["role"] for r in rows[:6]] == ["q/o"] * 3 + ["k/v"] * 3
    for r in rows:
        assert (r["config"], r["staged"], r["ptxgemm_ms"], r["cublas_ms"]) == ("pp128x128", [], 1.0, 1.1)
        assert r["ratio"] == pytest.approx(1.1) and r["cublas_tflops"] == pytest.approx(
            2 * r["M"] * r["N"] * r["K"] / 1.1e9)
        assert r["rel_err"] < 2 ** -8 and r["cublas_rel_err"] < 2 ** -8 and r["rel_err_rows"] == min(64, r["M"])
        assert r["variants"] == {"pp128x192": 0.8} and r["variant_ratios"]["pp128x192"] == pytest.approx(1.375)
        assert r["variant_rel_err"]["pp128x192"] < 2 ** -8
        assert r["variant_errors"] == {"coop256x128c2": "ValueError: no such luck"}
        assert r["best_variant"] == {"config": "pp128x192", "ms": 0.8, "ratio": pytest.approx(1.375)}
    assert result["geomean"] == pytest.approx(1.1) and result["checks"] == {"geomean >= 1.03": True,
                                                                           "no row below 0.92": True}
    out = capsys.readouterr().out
    assert "T=32 dW lm_head qwen2-0.5b 160x64x32 dYᵀ·X" in out and "checks: geomean >= 1.03 PASS" in out
    proc = bench("--summarize", str(tmp_path / "o" / "bench_h100_training_t.json"), cwd=tmp_path)
    assert proc.returncode == 0 and "no row below 0.92 PASS" in proc.stdout, proc.stderr


# --- on the GPU ---------------------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_a_small_training_set_on_the_gpu(tmp_path):
    """Qwen2-0.5B's 15 GEMMs at 256 tokens, with a fixed variant: every operand read in place (no staging), every
    result (ptxgemm's, the variant's and cuBLAS's) within bf16's bound on the sampled rows. The bound, from
    ptxgemm.accuracy: the output's rounding (u = 2^-8 of each element, so of the norm) plus fp32 accumulation,
    C_ACC·2^-23·sqrt(K)·Σ|ab| per element, where Σ|ab| ≈ (2/π)·K and |ref| ≈ sqrt(K) for standard normals: below
    C_ACC·2^-23·K of the norm."""
    from torch_peer import require_torch_cuda

    require_torch_cuda("the training set's GPU test")
    from ptxgemm.bench.suite import parse_tag
    from ptxgemm.runtime import driver

    assert training.run(2, tmp_path, "t", ("qwen2-0.5b",), (256,), variant_configs=(parse_tag("pp128x128"),)) == 0
    result = json.loads((tmp_path / f"bench_{gpu_slug(driver.device_info().name)}_training_t.json").read_text())
    assert result["set"] == "training" and result["rounds"] == 2 and result["torch"]
    assert set(result["checks"]) == set(training.CHECKS) and len(result["rows"]) == 15
    u_out = 2.0 ** -accuracy.OUTPUT_PRECISION_BITS["bfloat16"]
    for r in result["rows"]:
        bound = u_out + accuracy.C_ACC * accuracy.FP32_TRUNCATION_UNIT * r["K"]
        assert "error" not in r and r["staged"] == [] and r["config"], r
        assert r["ratio"] > 0 and r["ratio"] == pytest.approx(r["cublas_ms"] / r["ptxgemm_ms"])
        assert 0 < r["rel_err"] < bound and 0 < r["cublas_rel_err"] < bound, r
        assert r["rel_err_rows"] == min(64, r["M"])
        if "variant_errors" not in r:
            assert 0 < r["variant_rel_err"]["pp128x128"] < bound and r["variants"]["pp128x128"] > 0
        assert r["best_variant"]["ms"] == min([r["ptxgemm_ms"], *r["variants"].values()])
