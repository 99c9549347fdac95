"""`python -m ptxgemm bench` without a GPU: --summarize over hand-written run files, and the argument checks that
come before the GPU. Run as a subprocess from a temporary directory (the installed command must not need the
checkout); the many one-line argument errors in this process (conftest's cli_in_process), from a temporary
directory too."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
BENCH = ["-m", "ptxgemm", "bench"]
H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"


def bench(*args, cwd, command=BENCH):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no GPU, on every machine
    return subprocess.run([sys.executable, *command, *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd, env=env)


def row(m, n, k, ratio, config="pp128x128", ptxgemm_ms=1.0):
    return {"M": m, "N": n, "K": k, "ptxgemm_ms": ptxgemm_ms, "cublas_ms": ratio * ptxgemm_ms, "ratio": ratio,
            "rel_err": 1e-3, "config": config}


def run_file(tmp_path, name, gpu, rows, **extra):
    path = tmp_path / name
    path.write_text(json.dumps({"gpu": gpu, "driver": "13.0", "rows": rows, **extra}))
    return path


def geo(*xs):
    p = 1.0
    for x in xs:
        p *= x
    return p ** (1 / len(xs))


@pytest.fixture
def runs(tmp_path):
    """Three H100 runs (one of the old format: no 'ratio', 'config' or 'geomeans') and one H200 run."""
    files = [
        run_file(tmp_path, "a.json", H100, [row(8448, 9216, 64, 1.0), row(4096, 4096, 4096, 0.8),
                                            row(128, 8192, 8192, 0.9, "pp64x256c2")]),
        run_file(tmp_path, "b.json", H100, [row(8448, 9216, 64, 1.2), row(4096, 4096, 4096, 0.9, "coop256x128c2"),
                                            row(128, 8192, 8192, 1.1, "pp64x256c2")]),
        run_file(tmp_path, "old.json", H100, [{"M": 8448, "N": 9216, "K": 64, "ptxgemm_ms": 2.0, "cublas_ms": 2.2},
                                              {"M": 4096, "N": 4096, "K": 4096, "ptxgemm_ms": 1.0,
                                               "cublas_ms": 0.7}]),
        run_file(tmp_path, "h200.json", H200, [row(4096, 4096, 4096, 0.95)]),
    ]
    return files


def test_summarize_groups_by_gpu_with_min_median_max(runs, tmp_path):
    out = tmp_path / "summary.json"
    proc = bench("--summarize", *map(str, runs), "--summarize-out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(out.read_text())
    assert set(summary) == {H100, H200}
    h100 = summary[H100]
    assert len(h100["runs"]) == 3 and len(summary[H200]["runs"]) == 1
    shapes = {(s["M"], s["N"], s["K"]): s for s in h100["shapes"]}
    seed = shapes[8448, 9216, 64]["ratio"]
    assert seed["n"] == 3 and seed["min"] == pytest.approx(1.0) and seed["max"] == pytest.approx(1.2)
    assert seed["median"] == pytest.approx(1.1)
    square = shapes[4096, 4096, 4096]
    assert (square["ratio"]["min"], square["ratio"]["median"], square["ratio"]["max"]) == pytest.approx((0.7, 0.8, 0.9))
    assert square["configs"] == ["pp128x128", "coop256x128c2"]
    small = shapes[128, 8192, 8192]
    assert small["group"] == "small_m" and small["ratio"]["n"] == 2
    # geomeans per run, then their spread: the old run computed from its rows
    g = h100["geomeans"]
    assert g["seed_sweep"]["n"] == 3 and g["seed_sweep"]["max"] == pytest.approx(1.2)
    assert g["small_m"]["n"] == 2 and g["small_m"]["min"] == pytest.approx(0.9)
    alls = sorted([geo(1.0, 0.8, 0.9), geo(1.2, 0.9, 1.1), geo(1.1, 0.7)])
    assert (g["all"]["min"], g["all"]["median"], g["all"]["max"]) == pytest.approx(tuple(alls))
    assert h100["min_ratio"]["min"] == pytest.approx(0.7)
    assert summary[H200]["shapes"][0]["ratio"]["n"] == 1
    # the table: both GPUs, every shape, every group
    for text in (H100, H200, "8448x9216x64", "128x8192x8192", "geomean seed_sweep", "geomean square_llm",
                 "geomean small_m", "geomean all", "pp128x128/coop256x128c2"):
        assert text in proc.stdout, text


def test_summarize_prefers_a_runs_own_geomeans(tmp_path):
    f = run_file(tmp_path, "r.json", H100, [row(8448, 9216, 64, 1.0)],
                 geomeans={"seed_sweep": 1.5, "square_llm": None, "small_m": None, "all": 1.5}, min_ratio=1.0)
    out = tmp_path / "s.json"
    proc = bench("--summarize", str(f), "--summarize-out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    g = json.loads(out.read_text())[H100]["geomeans"]
    assert g["seed_sweep"]["median"] == 1.5 and g["square_llm"] is None


def test_summarize_rejects_a_file_that_is_not_a_bench_run(tmp_path, runs):
    bad = tmp_path / "bad.json"
    bad.write_text('{"gpu": "x"}')
    proc = bench("--summarize", str(runs[0]), str(bad), cwd=tmp_path)
    assert proc.returncode == 2 and "bad.json" in proc.stderr
    assert proc.stderr.startswith("python -m ptxgemm bench: error: --summarize: ") and proc.stderr.count("\n") == 1
    proc = bench("--summarize", str(tmp_path / "missing.json"), cwd=tmp_path)
    assert proc.returncode == 2 and "missing.json" in proc.stderr


def test_summarize_reads_grouped_runs_per_case_and_peer(tmp_path):
    """`--set grouped` files (rows of cases and peers, no M): each (case, peer)'s speedup across runs and each
    peer's geomean; a refused peer's row (no speedup) is left out; apart from the GEMM runs of the same GPU."""
    def grouped(case, peer, speedup):
        return {"case": case, "layout": "contiguous", "groups": 4, "N": 4096, "K": 7168, "in_dtype": "bfloat16",
                "peer": peer, "speedup": speedup, "config": "coop128x256"}
    files = [run_file(tmp_path, f"g{i}.json", H100, [grouped("c1", "torch._grouped_mm", 1.0 + i / 10),
                                                     grouped("c2", "torch._grouped_mm", 1.2),
                                                     {"case": "c2", "refused": {"torch.bmm": "no"}}])
             for i in range(3)] + [run_file(tmp_path, "gemm.json", H100, [row(4096, 4096, 4096, 0.9)])]
    out = tmp_path / "s.json"
    proc = bench("--summarize", *map(str, files), "--summarize-out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(out.read_text())
    assert set(summary) == {H100, f"{H100} [grouped bfloat16]"}
    g = summary[f"{H100} [grouped bfloat16]"]
    assert g["set"] == "grouped" and len(g["runs"]) == 3 and [c["case"] for c in g["cases"]] == ["c1", "c2"]
    assert (g["cases"][0]["speedup"]["min"], g["cases"][0]["speedup"]["median"]) == pytest.approx((1.0, 1.1))
    assert g["geomeans"]["torch._grouped_mm"]["median"] == pytest.approx(geo(1.1, 1.2))
    assert "geomean vs torch._grouped_mm" in proc.stdout


@pytest.mark.parametrize("args,pattern", [
    (("--summarize-out", "x.json"), "only with --summarize"),
    (("--shapes", "4096x4096"), "--shapes"),
    (("--rounds", "0"), "--rounds"),
    (("--name", "a/b"), "--name"),
    (("--variants", "pp128x256"), "--variants: block_m x block_n"),
    (("--variants", "coop128x192c2"), "--variants: cluster_m: 2 splits MN-major B"),   # bf16's default B layout
    (("--config", "nonsense"), "--config: config tag"),
    (("--rounds", "x"), "argument --rounds: invalid int value"),
    (("--sustained", "1.5"), "--sustained: at least 2 seconds"),
    (("--sustained-gap", "2"), "--sustained-gap: only with --sustained"),
    (("--sustained", "--sustained-gap", "-1"), "--sustained-gap: seconds >= 0"),
    (("--sustained", "3", "--set", "grouped"), "--sustained: the bf16 benchmark against cuBLAS only"),
    (("--sustained", "--in-dtype", "float8_e4m3fn"), "--sustained: the bf16 benchmark against cuBLAS only"),
    (("--host", "--sustained"), "--sustained: not with --host"),
    (("--fastcu", "no-such-checkout"), "--fastcu: no-such-checkout has no examples/matmul/matmul_12.cuh"),
    (("--fastcu", ".", "--in-dtype", "float8_e4m3fn"), "--fastcu: a bf16 peer of the bf16 benchmark only"),
    (("--host", "--fastcu", "."), "--fastcu: not with --host"),
    (("--deepgemm", "installed"), "--deepgemm: a peer of the fp8 blockwise bench only"),
    (("--deepgemm", "installed", "--in-dtype", "float8_e4m3fn", "--scaling", "row"),
     "--deepgemm: a peer of the fp8 blockwise bench only"),
    (("--deepgemm", "no-such-checkout", "--in-dtype", "float8_e4m3fn", "--scaling", "block", "--set", "deepgemm"),
     "--deepgemm: no-such-checkout is not a DeepGEMM checkout"),
    (("--host", "--deepgemm", "."), "--deepgemm: not with --host"),
    (("--set", "grouped", "--in-dtype", "float8_e4m3fn", "--scale-a-major", "m"),
     "--scale-a-major: with --scaling block only"),
])
def test_bad_arguments_exit_2(args, pattern, tmp_path, bench_refuses):
    bench_refuses(args, pattern, tmp_path)


@pytest.mark.parametrize("variant", ["store-hint", "stream-k", "sort"])
def test_the_grouped_set_takes_the_toggle_variants_and_names_torch_when_absent(tmp_path, variant):
    """--set grouped --variants store-hint (or stream-k) passes the argument checks; where torch is absent (CI) the
    set says it needs torch instead of failing on the import."""
    import importlib.util

    proc = bench("--set", "grouped", "--variants", variant, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    if importlib.util.find_spec("torch") is None:
        assert "--set grouped: times torch._grouped_mm" in proc.stderr and "needs torch" in proc.stderr
    else:   # torch, but no GPU here: the device check's one-line error
        assert proc.stderr.startswith("python -m ptxgemm bench: error: ") and "Traceback" not in proc.stderr


def test_no_gpu_exits_2(tmp_path):
    proc = bench("--quick", "--out", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2 and "bench runs the kernels, so it needs an sm_90 GPU" in proc.stderr
    assert list(tmp_path.iterdir()) == []


# --- the fp8 and epilogue modes (ptxgemm.bench.modes) ------------------------------------------------------------

@pytest.mark.parametrize("args,pattern", [
    (("--scaling", "row"), "--scaling: only with an fp8 --in-dtype"),
    (("--in-dtype", "bfloat16", "--scaling", "tensor"), "--scaling: only with an fp8 --in-dtype"),
    (("--in-dtype", "float8_e4m3fn", "--scaling", "block", "--epilogue", "bias-gelu"),
     "--scaling block: not with --epilogue bias-gelu"),
    (("--set", "deepgemm", "--quick"), "--set: the shape set deepgemm"),
    (("--epilogue", "bias-relu", "--variants", "pp128x128"), "--variants: not with --epilogue"),
    (("--in-dtype", "float8_e5m2", "--b-major", "mn"), "--b-major: mn with --in-dtype float8_e5m2"),
    (("--in-dtype", "float16"), "argument --in-dtype: invalid choice"),
    (("--epilogue", "bias-tanh"), "argument --epilogue: invalid choice"),
    (("--scaling", "channel"), "argument --scaling: invalid choice"),
    (("--host", "--in-dtype", "float8_e4m3fn"), "--in-dtype: not with --host"),
    (("--host", "--epilogue", "bias-gelu"), "--epilogue: not with --host"),
    (("--host", "--b-major", "k"), "--b-major: not with --host"),
    (("--in-dtype", "float8_e4m3fn", "--shapes", "4096x4096"), "--shapes"),
])
def test_bad_mode_arguments_exit_2(args, pattern, tmp_path, bench_refuses):
    bench_refuses(args, pattern, tmp_path)


def test_summarize_refuses_mode_options(runs, tmp_path):
    proc = bench("--summarize", str(runs[0]), "--in-dtype", "float8_e4m3fn", cwd=tmp_path)
    assert proc.returncode == 2 and "--in-dtype: not with --summarize" in proc.stderr, proc.stderr


@pytest.mark.parametrize("mode", [("--in-dtype", "float8_e4m3fn"), ("--in-dtype", "float8_e5m2", "--scaling", "block"),
                                  ("--epilogue", "bias-gelu"),
                                  ("--in-dtype", "float8_e4m3fn", "--scaling", "row", "--epilogue", "bias-silu")])
def test_modes_without_a_gpu_exit_2(mode, tmp_path):
    proc = bench(*mode, "--quick", "--out", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2 and "bench runs the kernels, so it needs an sm_90 GPU" in proc.stderr, proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_mode_names_and_default_shapes():
    from ptxgemm.bench import suite as bench
    from ptxgemm.bench.modes import FP8_QUICK_SHAPES, FP8_SHAPES, Mode, default_shapes, mode_from_options

    assert mode_from_options(None, None, None) == Mode() and Mode().is_default
    fp8 = mode_from_options("float8_e4m3fn", None, None)
    assert (fp8.scaling, fp8.slug) == ("tensor", "fp8_tensor") and not fp8.is_default
    assert mode_from_options("float8_e5m2", "row", "bias-silu").slug == "fp8e5m2_row_bias-silu"
    bf16_epi = mode_from_options(None, None, "bias-gelu")
    assert (bf16_epi.slug, bf16_epi.activation, bf16_epi.scaling) == ("bf16_bias-gelu", "gelu", None)
    # fp8: 8192^3 once, first, then the rest of the square/LLM shapes; bf16 keeps its suites
    assert FP8_SHAPES[0] == (8192, 8192, 8192) and set(FP8_SHAPES) == set(bench.SQUARE_LLM_SHAPES)
    assert len(FP8_SHAPES) == len(bench.SQUARE_LLM_SHAPES)
    assert default_shapes(fp8, False, bench.default_shapes) == list(FP8_SHAPES)
    assert default_shapes(fp8, True, bench.default_shapes) == list(FP8_QUICK_SHAPES) == \
        [(8192, 8192, 8192), (4096, 4096, 4096), (4096, 14336, 4096)]
    assert default_shapes(bf16_epi, False, bench.default_shapes) == bench.default_shapes()
    assert default_shapes(bf16_epi, True, bench.default_shapes) == list(bench.QUICK_SHAPES)
    # fp8's 16-byte line holds 16 elements: N = 4104 is a whole number of bf16 lines, not of fp8 ones
    assert bench.group_of(4096, 4104, 4096) == "square_llm" and bench.group_of(4096, 4104, 4096, 16) == "unaligned"


def test_scaled_reference_dequantizes_each_scaling():
    """The float64 reference of each scaling against the product of explicitly dequantized matrices."""
    import ml_dtypes
    import numpy as np

    from ptxgemm.bench.modes import scaled_reference

    rng = np.random.default_rng(5)
    m, n, k = 5, 300, 260          # K and N past two 128-blocks, neither a multiple of 128
    a = rng.standard_normal((m, k), dtype=np.float32).astype(ml_dtypes.float8_e4m3fn)
    b = np.asfortranarray(rng.standard_normal((k, n), dtype=np.float32).astype(ml_dtypes.float8_e4m3fn))
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    assert np.allclose(scaled_reference(a, b, None), a64 @ b64, rtol=1e-12)
    sa, sb = np.float32(1.5).reshape(()), np.float32(0.75).reshape(())
    assert np.allclose(scaled_reference(a, b, "tensor", sa, sb), 1.5 * 0.75 * (a64 @ b64), rtol=1e-12)
    ra, rb = rng.uniform(0.5, 2, (m, 1)).astype(np.float32), rng.uniform(0.5, 2, (1, n)).astype(np.float32)
    assert np.allclose(scaled_reference(a, b, "row", ra, rb), (ra * a64) @ (b64 * rb), rtol=1e-12)
    ba, bb = rng.uniform(0.5, 2, (m, 3)).astype(np.float32), rng.uniform(0.5, 2, (3, 3)).astype(np.float32)
    deq_a = np.array([[a64[i, j] * ba[i, j // 128] for j in range(k)] for i in range(m)])
    deq_b = np.array([[b64[i, j] * bb[i // 128, j // 128] for j in range(n)] for i in range(k)])
    assert np.allclose(scaled_reference(a, b, "block", ba, bb), deq_a @ deq_b, rtol=1e-12)


def test_summarize_keeps_modes_apart(tmp_path):
    """fp8 and epilogue runs (their own fields) next to a bf16 run of the same GPU: three summaries, each with its
    own ratio; the epilogue's overhead and saving per shape; an fp8 row's recorded group wins over its shape's."""
    fp8 = {"in_dtype": "float8_e4m3fn", "scaling": "tensor", "epilogue": "none",
           "ratio_means": "torch._scaled_mm (cuBLAS) ms / ptxgemm ms: above 1, ptxgemm is faster"}
    epi = {"in_dtype": "bfloat16", "scaling": None, "epilogue": "bias-gelu",
           "ratio_means": "separate ms / fused ms (the GEMM plus a separate torch pass over the fused kernel): "
                          "above 1, fusing is faster"}

    def fp8_row(m, n, k, ratio, group="square_llm"):
        return {"M": m, "N": n, "K": k, "group": group, "ptxgemm_ms": 1.0, "peer_ms": ratio, "ratio": ratio,
                "config": "pp128x256", "peer_dtypes": "float8_e4m3fn x float8_e4m3fn"}

    def epi_row(m, n, k, fused, plain, separate):
        return {"M": m, "N": n, "K": k, "group": "square_llm", "config": "pp128x192", "fused_ms": fused,
                "plain_ms": plain, "separate_ms": separate, "ratio": separate / fused,
                "overhead_vs_plain": fused / plain - 1, "saved_vs_separate": 1 - fused / separate}

    files = [
        run_file(tmp_path, "bf16.json", H100, [row(4096, 4096, 4096, 0.95)]),
        run_file(tmp_path, "fp8a.json", H100, [fp8_row(8192, 8192, 8192, 1.05), fp8_row(4096, 4104, 4096, 0.5,
                                                                                        "unaligned")], **fp8),
        run_file(tmp_path, "fp8b.json", H100, [fp8_row(8192, 8192, 8192, 1.15)], **fp8),
        run_file(tmp_path, "epi.json", H100, [epi_row(4096, 4096, 4096, 1.02, 1.0, 1.5)], **epi),
    ]
    out = tmp_path / "s.json"
    proc = bench("--summarize", *map(str, files), "--summarize-out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(out.read_text())
    fp8_key, epi_key = f"{H100} [float8_e4m3fn, tensor scaling]", f"{H100} [bfloat16, epilogue bias-gelu]"
    assert set(summary) == {H100, fp8_key, epi_key}
    assert "mode" not in summary[H100] and summary[H100]["geomeans"]["square_llm"]["median"] == pytest.approx(0.95)
    f = summary[fp8_key]
    assert f["mode"] == "float8_e4m3fn, tensor scaling" and f["ratio_means"] == fp8["ratio_means"]
    shapes = {(s["M"], s["N"], s["K"]): s for s in f["shapes"]}
    assert shapes[8192, 8192, 8192]["ratio"]["n"] == 2 and shapes[4096, 4104, 4096]["group"] == "unaligned"
    # the square_llm geomean leaves out the fp8-unaligned row; "all" takes it
    assert (f["geomeans"]["square_llm"]["min"], f["geomeans"]["square_llm"]["max"]) == pytest.approx((1.05, 1.15))
    assert f["geomeans"]["all"]["min"] == pytest.approx(geo(1.05, 0.5))
    e = summary[epi_key]["shapes"][0]
    assert e["ratio"]["median"] == pytest.approx(1.5 / 1.02)
    assert e["overhead_vs_plain"]["median"] == pytest.approx(0.02)
    assert e["saved_vs_separate"]["median"] == pytest.approx(1 - 1.02 / 1.5)
    for text in (f"== {fp8_key}: 2 run(s)", f"== {epi_key}: 1 run(s)", "overhead_vs_plain median +2.0%",
                 "(ratio = torch._scaled_mm (cuBLAS) ms / ptxgemm ms: above 1, ptxgemm is faster; min/median/max",
                 "(ratio = cuBLAS ms / ptxgemm ms: above 1, ptxgemm is faster; min/median/max across runs)"):
        assert text in proc.stdout, text


class _FakeDeviceArray:
    """A host array standing in for ptxgemm.DeviceArray (the faked-GPU run below)."""

    def __init__(self, arr):
        self.arr, self.shape, self.dtype = arr, arr.shape, arr.dtype

    @classmethod
    def from_numpy(cls, arr, stream=None):
        return cls(arr.copy(order="K"))

    @classmethod
    def empty(cls, shape, dtype, order="C", stream=None):
        import numpy as np

        return cls(np.empty(shape, dtype))

    def poison(self, stream=None):
        self.arr[...] = float("nan")

    def to_numpy(self):
        return self.arr.copy()


class _FakePlan:
    """GemmPlan's arithmetic in float64 on the host, written apart from bench_modes' reference (blockwise: one
    k-block at a time)."""

    def __init__(self, a, b, out, config=None, *, scale_a=None, scale_b=None, bias=None, activation=None):
        import types

        self.a, self.b, self.out, self.sa, self.sb = a.arr, b.arr, out, scale_a, scale_b
        self.bias, self.activation = bias, activation
        self.config = types.SimpleNamespace(tag="pp128x128" if bias is None else "pp128x192")

    def launch(self, stream=None):
        import numpy as np

        a, b = self.a.astype(np.float64), self.b.astype(np.float64)
        if self.sa is None:
            p = a @ b
        elif self.sa.arr.size == 1:
            p = (a @ b) * float(self.sa.arr.reshape(-1)[0]) * float(self.sb.arr.reshape(-1)[0])
        elif self.sa.arr.shape[1] == 1:
            p = (a @ b) * self.sa.arr * self.sb.arr
        else:
            p = np.zeros((a.shape[0], b.shape[1]))
            for kb in range(self.sa.arr.shape[1]):
                ks = slice(128 * kb, 128 * (kb + 1))
                cols = np.repeat(self.sb.arr[kb], 128)[:b.shape[1]]
                p += (a[:, ks] @ b[ks]) * self.sa.arr[:, kb:kb + 1] * cols
        if self.bias is not None:
            p = p + self.bias.arr
            p = {"relu": lambda v: np.maximum(v, 0), "silu": lambda v: v / (1 + np.exp(-v)),
                 "gelu": lambda v: 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v ** 3)))}[
                self.activation](p)
        self.out.arr[...] = p.astype(self.out.dtype)

def _fake_gpu(monkeypatch, gpu: str, fake_ms: dict, torch) -> None:
    """A GPU faked for the mode bench: the device checks, device arrays and plans by host arithmetic, the timing by
    fixed numbers (`fake_ms` per implementation, 1.0 otherwise), torch by `torch` (a factory, or None's)."""
    import types

    from ptxgemm.runtime import arrays, driver, timing
    from ptxgemm.bench import modes as bench_modes
    from ptxgemm import gemm

    monkeypatch.setattr(driver, "no_device_reason", lambda: None)
    monkeypatch.setattr(driver, "device_info",
                        lambda: types.SimpleNamespace(name=gpu, sm_count=132, driver_version_str="13.0"))
    monkeypatch.setattr(arrays, "DeviceArray", _FakeDeviceArray)
    monkeypatch.setattr(gemm, "GemmPlan", _FakePlan)
    monkeypatch.setattr(timing, "time_interleaved",
                        lambda launchers, rounds, warmup=3: {n: (f(), fake_ms.get(n, 1.0))[1]
                                                             for n, f in launchers.items()})
    monkeypatch.setattr(timing, "time_back_to_back",
                        lambda launchers, launches=20, rounds=3, warmup=3: {n: (f(), fake_ms.get(n, 1.0) * 0.9)[1]
                                                                            for n, f in launchers.items()})
    monkeypatch.setattr(bench_modes, "_torch", torch)
    monkeypatch.setattr(bench_modes, "read_clocks", lambda: {})



@pytest.mark.parametrize("options, stem, peer, ratio", [
    (("float8_e4m3fn", "tensor", "none"), "bench_h100_fp8_tensor_t", None, None),
    (("float8_e5m2", "block", "none"), "bench_h100_fp8e5m2_block_t", "ptxgemm bf16", 1.1),
    (("bfloat16", None, "bias-gelu"), "bench_h100_bf16_bias-gelu_t", None, None),
    (("float8_e4m3fn", "row", "bias-silu"), "bench_h100_fp8_row_bias-silu_t", None, None),
])
def test_mode_bench_with_the_gpu_faked(monkeypatch, tmp_path, options, stem, peer, ratio):
    """run_mode_bench end to end on the host, without torch (so no torch peer, no separate pass): ptxgemm's plans
    and device arrays faked by host arithmetic, the timing by fixed numbers. Checks the rows, the JSON, the file
    name and that every rel_err is the bf16 output's rounding alone (the references dequantize as the kernel)."""

    from ptxgemm.bench import modes as bench_modes, summary as bench_summary

    fake_ms = {"ptxgemm bf16": 1.1, "ptxgemm fused": 1.05}
    _fake_gpu(monkeypatch, H100, fake_ms, lambda: None)
    mode = bench_modes.mode_from_options(*options)
    shapes = [(96, 384, 300), (130, 256, 512)]
    assert bench_modes.run_mode_bench(shapes, 3, mode, out=tmp_path, name="t") == 0
    result = json.loads((tmp_path / f"{stem}.json").read_text())
    assert (result["in_dtype"], result["scaling"], result["epilogue"]) == (mode.in_dtype, mode.scaling, mode.epilogue)
    assert result["gpu"] == H100 and result["peer"] == peer and result["mode"] == mode.slug
    assert result["ratio_means"] == bench_modes.ratio_means(mode, torch_present=False)
    rows = result["rows"]
    assert [(r["M"], r["N"], r["K"]) for r in rows] == shapes
    for r in rows:
        assert r["rel_err"] < 4e-3 and r["rel_err_rows"] == min(64, r["M"]) and r["config"]
        assert r["ratio"] == (pytest.approx(ratio) if ratio else None)
        if mode.fused:
            assert r["config"] == "pp128x192" and r["plain_config"] == "pp128x128"
            assert r["overhead_vs_plain"] == pytest.approx(0.05) and r["plain_rel_err"] < 4e-3
            assert r["separate_ms"] is None and r["saved_vs_separate"] is None
        else:
            assert r["ptxgemm"] == f"ptxgemm {mode.in_dtype}" and r["ptxgemm_ms"] == 1.0
        if peer == "ptxgemm bf16":
            assert r["peer_rel_err"] < 4e-3 and r["peer_dtypes"] == "bfloat16 x bfloat16"
    if importlib.util.find_spec("matplotlib"):
        assert (tmp_path / f"{stem}.png").stat().st_size > 0
    # --summarize reads it, under the GPU and the mode
    proc = bench("--summarize", str(tmp_path / f"{stem}.json"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"== {H100} [{bench_summary.run_mode(result)}]: 1 run(s)" in proc.stdout


def test_deepgemm_rows_carry_the_published_figure_and_the_variants(monkeypatch, tmp_path):
    """A blockwise run on one of DeepGEMM's shapes, faked GPU, no torch: the row carries DeepGEMM's published TFLOP/s
    and ptxgemm's over it, and a --variants config timed in the same rounds; the summary their geomean."""
    from ptxgemm.bench import deepgemm, modes as bench_modes
    from ptxgemm.kernel.config import GemmConfig

    shape = (64, 2112, 7168)
    assert shape in deepgemm.SHAPES and deepgemm.published(*shape) == 206
    _fake_gpu(monkeypatch, H100, {"ptxgemm float8_e4m3fn": 0.1, "ptxgemm pp64x64k4": 0.2}, lambda: None)
    mode = bench_modes.mode_from_options("float8_e4m3fn", "block", None)
    variant = GemmConfig.from_tag("pp64x64k4")
    assert bench_modes.run_mode_bench([shape], 2, mode, out=tmp_path, name="dg", variants=[variant]) == 0
    result = json.loads((tmp_path / "bench_h100_fp8_block_dg.json").read_text())
    row = result["rows"][0]
    tflops = 2 * 64 * 2112 * 7168 / 0.1e-3 / 1e12
    assert row["published_tflops"] == 206 and row["vs_published"] == pytest.approx(tflops / 206)
    assert result["summary"]["geomean_vs_published"] == pytest.approx(tflops / 206)
    assert [v["ms"] for v in row["variants"].values()] == [0.2] and row["rel_err"] < 4e-3
    assert row["max_err"] < 8e-3 and row["peer"] == "ptxgemm bf16"
    # timed back to back too (faked: 0.9 of the burst time), and the published figure against that
    assert row["ptxgemm_b2b_ms"] == pytest.approx(0.09) and row["vs_published_b2b"] == pytest.approx(tflops / 0.9 / 206)
    assert result["summary"]["geomean_vs_published_b2b"] == pytest.approx(tflops / 0.9 / 206)


class _FakeTensor:
    """The few torch.Tensor operations bench_modes uses, on a host numpy array (the faked-torch run below)."""

    def __init__(self, a):
        self.a = a

    arr = property(lambda self: self.a)   # what _FakePlan reads of a scale
    shape = property(lambda self: self.a.shape)
    dtype = property(lambda self: self.a.dtype)

    def cuda(self):
        return self

    def cpu(self):
        return self

    def numpy(self):
        return self.a

    def view(self, dtype):
        return _FakeTensor(self.a.view(dtype))

    def t(self):
        return _FakeTensor(self.a.T)

    def to(self, dtype):
        return _FakeTensor(self.a.astype(dtype))

    def __getitem__(self, index):
        return _FakeTensor(self.a[index.a])

    def __add__(self, other):
        import numpy as np

        return _FakeTensor((self.a.astype(np.float32) + other.a.astype(np.float32)).astype(self.a.dtype))


def _fake_torch():
    """A module-like namespace: from_numpy, from_dlpack (of _FakeDeviceArray, sharing its memory), _scaled_mm (which
    refuses e5m2 x e5m2 as cuBLAS does and checks B's column-major layout), cuda, nn.functional, the dtypes."""
    import types

    import ml_dtypes
    import numpy as np

    def scaled_mm(ta, tb, scale_a, scale_b, out_dtype):
        if ta.dtype == tb.dtype == np.dtype(ml_dtypes.float8_e5m2):
            raise RuntimeError("Multiplication of two Float8_e5m2 matrices is not supported\nmore text")
        assert ta.a.flags.c_contiguous and tb.a.flags.f_contiguous, "_scaled_mm: A row-major, B column-major"
        assert scale_a.dtype == scale_b.dtype == np.float32 and scale_a.a.ndim in (0, 2)
        p = (ta.a.astype(np.float64) @ tb.a.astype(np.float64)) * scale_a.a * scale_b.a
        return _FakeTensor(p.astype(out_dtype))

    def act(f):
        return lambda x, approximate=None: _FakeTensor(f(x.a.astype(np.float64)).astype(x.dtype))

    F = types.SimpleNamespace(relu=act(lambda v: np.maximum(v, 0)), silu=act(lambda v: v / (1 + np.exp(-v))),
                              gelu=act(lambda v: 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v ** 3)))))
    return types.SimpleNamespace(
        __version__="fake", from_numpy=_FakeTensor, from_dlpack=lambda x: _FakeTensor(x.arr), _scaled_mm=scaled_mm,
        cuda=types.SimpleNamespace(synchronize=lambda: None, is_available=lambda: True), nn=types.SimpleNamespace(
            functional=F), bfloat16=np.dtype(ml_dtypes.bfloat16), uint16=np.dtype(np.uint16),
        float8_e4m3fn=np.dtype(ml_dtypes.float8_e4m3fn), float8_e5m2=np.dtype(ml_dtypes.float8_e5m2))


@pytest.mark.parametrize("options, peer, peer_dtypes, ratio", [
    (("float8_e4m3fn", "tensor", "none"), "torch._scaled_mm (cuBLAS)", "float8_e4m3fn x float8_e4m3fn", 1.2),
    (("float8_e5m2", "row", "none"), "torch._scaled_mm (cuBLAS)", "float8_e4m3fn x float8_e5m2", 1.2),
    (("bfloat16", None, "bias-gelu"), "ptxgemm plain GEMM + separate torch elementwise pass", None, 1.4 / 1.05),
    (("float8_e4m3fn", "row", "bias-relu"), "ptxgemm plain GEMM + separate torch elementwise pass", None, 1.4 / 1.05),
])
def test_mode_bench_with_torch_faked(monkeypatch, tmp_path, options, peer, peer_dtypes, ratio):
    """As above, with a fake torch: the _scaled_mm peer (e5m2 x e5m2 refused, so A e4m3 x B e5m2, recorded), the
    scale tensors shared with ptxgemm, and the separate elementwise pass after the plain GEMM."""

    from ptxgemm.bench import modes as bench_modes

    fake_ms = {"torch._scaled_mm (cuBLAS)": 1.2, "ptxgemm fused": 1.05, "ptxgemm plain + torch pass": 1.4}
    _fake_gpu(monkeypatch, H200, fake_ms, _fake_torch)
    mode = bench_modes.mode_from_options(*options)
    assert bench_modes.run_mode_bench([(96, 384, 320)], 3, mode, out=tmp_path) == 0
    result = json.loads((tmp_path / f"bench_h200_{mode.slug}.json").read_text())
    assert result["peer"] == peer and result["torch"] == "fake"
    assert result["peer_dtypes"] == ([peer_dtypes] if peer_dtypes else None)
    [r] = result["rows"]
    assert r["ratio"] == pytest.approx(ratio) and r["rel_err"] < 4e-3
    if mode.fused:
        assert r["separate_ms"] == 1.4 and r["saved_vs_separate"] == pytest.approx(1 - 1.05 / 1.4)
        assert r["separate_rel_err"] < 4e-3 and r["separate"] == "ptxgemm plain + torch pass"
        assert "torch.nn.functional" in result["separate_pass"]
    else:
        assert r["peer_dtypes"] == peer_dtypes and r["peer_rel_err"] < 4e-3 and "peer_error" not in r
        assert result["peer_options"].startswith("out_dtype=torch.bfloat16")


def test_a_refused_peer_is_recorded_and_the_run_goes_on(monkeypatch, tmp_path, capsys):

    from ptxgemm.bench import modes as bench_modes

    def refusing_torch():
        torch = _fake_torch()
        torch._scaled_mm = lambda *a, **k: (_ for _ in ()).throw(RuntimeError("mat1 rows must be divisible by 16"))
        return torch

    _fake_gpu(monkeypatch, H100, {}, refusing_torch)
    mode = bench_modes.mode_from_options("float8_e5m2", None, None)
    assert bench_modes.run_mode_bench([(1, 256, 256)], 1, mode, out=tmp_path) == 0
    [r] = json.loads((tmp_path / "bench_h100_fp8e5m2_tensor.json").read_text())["rows"]
    assert r["ratio"] is None and r["peer_ms"] is None and r["rel_err"] < 4e-3 and r["group"] == "small_m"
    assert r["peer_error"] == ("float8_e5m2 x float8_e5m2: mat1 rows must be divisible by 16; "
                               "float8_e4m3fn x float8_e5m2: mat1 rows must be divisible by 16")
    assert "peer refused: float8_e5m2 x float8_e5m2" in capsys.readouterr().out


# ---- issue 48: every kind of result file the bench writes, from docs/results: summarized, or one line saying why not

RESULTS = REPO_ROOT / "docs" / "results"
H100_GPU = "NVIDIA H100 80GB HBM3"

#: (kind, two runs of it, the summary's key, what that summary must hold)
SUMMARIZED = [
    ("bf16 suite", ["h200/bench/bench_h200_issue9_final_run1.json", "h200/bench/bench_h200_issue9_final_run2.json"],
     H200, "geomeans"),
    ("bf16 --sustained", ["h100/sustained/lean/bench_h100_lean_sel_r1.json",
                          "h100/sustained/lean/bench_h100_lean_sel_r2.json"],
     H100_GPU, "sustained_geomeans"),
    ("bf16 --fastcu", ["h100/sustained/fastcu/bench_h100_issue26_fastcu_run1.json",
                       "h100/sustained/fastcu/bench_h100_issue26_fastcu_run2.json"], H100_GPU, "other_geomeans"),
    ("fp8 --scaling tensor", ["h100/fp8/bench_h100_fp8_tensor_issue24_rowpair_run1.json",
                              "h100/fp8/bench_h100_fp8_tensor_issue24_rowpair_run2.json"],
     f"{H100_GPU} [float8_e4m3fn, tensor scaling]", "mode"),
    ("fp8 --scaling row", ["h100/fp8/bench_h100_fp8_row_issue12b_run1.json", "h100/fp8/bench_h100_fp8_row_issue12b_run2.json"],
     f"{H100_GPU} [float8_e4m3fn, row scaling]", "mode"),
    ("--set deepgemm (fp8 blockwise)", ["h100/fp8/bench_h100_fp8_block_issue24_swapsel_run1.json",
                                        "h100/fp8/bench_h100_fp8_block_issue24_swapsel_run2.json"],
     f"{H100_GPU} [float8_e4m3fn, block scaling]", "other_geomeans"),
    ("--epilogue (bf16)", ["h100/fp8/bench_h100_bf16_bias-gelu_issue12b_run1.json",
                           "h100/fp8/bench_h100_bf16_bias-gelu_issue12b_run2.json"],
     f"{H100_GPU} [bfloat16, epilogue bias-gelu]", "mode"),
    ("--epilogue (fp8)", ["h100/fp8/bench_h100_fp8_tensor_bias-gelu_issue12b_run1.json",
                          "h100/fp8/bench_h100_fp8_tensor_bias-gelu_issue12b_run2.json"],
     f"{H100_GPU} [float8_e4m3fn, tensor scaling, epilogue bias-gelu]", "mode"),
    ("--set grouped (bf16)", ["h100/grouped/k_order/bench_h100_grouped_bf16_sort_final_r4.json",
                              "h100/grouped/k_order/bench_h100_grouped_bf16_sort_final_r5.json"],
     f"{H100_GPU} [grouped bfloat16]", "cases"),
    ("--set grouped (fp8 blockwise)", ["h100/grouped/bench_h100_grouped_fp8_block_issue24_swapsel_r1.json",
                                       "h100/grouped/bench_h100_grouped_fp8_block_issue24_swapsel_r2.json"],
     f"{H100_GPU} [grouped float8_e4m3fn, block scaling]", "cases"),
    # two runs of a gzipped bundle, by BUNDLE:PATTERN
    ("--set training", ["h200/bench/bench_h200_training_issue47_r103-r134.json.gz:r103_training_[12]"],
     f"{H200} [training]", "median_rows"),
]

#: (kind, a file of it, words the one-line refusal must hold)
NOT_SUMMARIZED = [
    ("--host", "h100/host/host_h100_issue10_final_run1.json", "a `bench --host` result"),
    ("--host layer", "h200/host/host_h200_issue46_r35_1.json", "a `bench --host layer` result"),
    ("--summarize-out", "h100/bench/bench_h100_issue9_final_summary.json", "a summary"),
    ("model", "h100/model/model_h100_llama3-8b-2l_lean_r1.json", "a `python -m ptxgemm model` result"),
    ("fuzz", "h100/fuzz/fuzz_h100_22005.json", "a `python -m ptxgemm fuzz` report"),
]


@pytest.mark.parametrize("kind, files, key, field", SUMMARIZED, ids=[k[0] for k in SUMMARIZED])
def test_summarize_reads_every_kind_of_run_file_the_bench_writes(kind, files, key, field, tmp_path, capsys):
    from ptxgemm.cli.main import main

    out = tmp_path / "summary.json"
    assert main(["bench", "--summarize", *(str(RESULTS / f) for f in files), "--summarize-out", str(out)]) == 0
    assert f"== {key}: 2 run(s)" in capsys.readouterr().out
    summary = json.loads(out.read_text())
    assert list(summary) == [key] and summary[key].get(field), summary[key].keys()


def test_summarize_reads_gzipped_runs_and_bundles(tmp_path, capsys):
    """A run gzipped, a bundle ({"gpu", "what", "runs": {name: run}}) whole or by BUNDLE:PATTERN: every run it names
    is summarized, each under FILE:NAME; a pattern that matches no run, or a file that is not gzipped JSON, is
    refused naming it."""
    import gzip

    from ptxgemm.bench.summary import read_runs
    from ptxgemm.errors import ConfigError

    run = json.loads((RESULTS / "h100/bench/bench_h100_issue9_final_run1.json").read_text())
    single = tmp_path / "one.json.gz"
    single.write_bytes(gzip.compress(json.dumps(run).encode()))
    bundle = tmp_path / "bundle.json.gz"
    bundle.write_bytes(gzip.compress(json.dumps({"gpu": "x", "what": "y", "runs": {"a_1": run, "a_2": run,
                                                                                     "b_1": run}}).encode()))
    assert list(read_runs([single])) == [str(single)]
    assert list(read_runs([bundle])) == [f"{bundle}:a_1", f"{bundle}:a_2", f"{bundle}:b_1"]
    assert list(read_runs([f"{bundle}:a_*"])) == [f"{bundle}:a_1", f"{bundle}:a_2"]
    with pytest.raises(ConfigError, match="no run of the bundle .* matches 'c_\\*'"):
        read_runs([f"{bundle}:c_*"])
    broken = tmp_path / "broken.json.gz"
    broken.write_bytes(b"{}")
    with pytest.raises(ConfigError, match="broken.json.gz: ValueError: not gzipped JSON"):
        read_runs([broken])


@pytest.mark.parametrize("kind, file, words", NOT_SUMMARIZED, ids=[k[0] for k in NOT_SUMMARIZED])
def test_summarize_says_in_one_line_why_a_kind_has_no_summary(kind, file, words, capsys):
    from ptxgemm.cli.main import main

    path = str(RESULTS / file)
    assert main(["bench", "--summarize", path, path]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert err.startswith(f"python -m ptxgemm bench: error: --summarize: {path}: {words}")
    assert "this kind of file has no summary: " in err


@pytest.mark.parametrize("args,pattern", [
    (["--pdl", "--quick"], "--quick: not with --pdl"),
    (["--pdl", "--set", "training"], "--set: not with --pdl"),
    (["--pdl", "--calls", "5"], "--calls: not with --pdl"),
    (["--pdl", "--host"], "--host: not with --pdl"),
    (["--pdl", "--out", "x"], "--out: not with --pdl (use --json PATH)"),
    (["--pdl", "--rounds", "0"], "--rounds: >= 1"),
    (["--pdl", "--shapes", "64x64"], "--shapes"),
])
def test_the_pdl_ab_takes_shapes_rounds_and_json_only(args, pattern, tmp_path, bench_refuses):
    """bench --pdl (programmatic launch on and off, ptxgemm/bench/launch_ab.py): every other option refused by
    name before the GPU."""
    bench_refuses(args, pattern, tmp_path)


def test_the_pdl_report_names_both_ways_and_the_speedup():
    from ptxgemm.bench import launch_ab

    row = {"shape": [4096, 896, 896], "config": "coop256x128", "burst_us": {"pdl": 17.0, "no_pdl": 17.5},
           "back_to_back_us": {"pdl": 15.0, "no_pdl": 16.0}, "burst_speedup": 17.5 / 17.0,
           "back_to_back_speedup": 16.0 / 15.0}
    text = launch_ab.format_report({"gpu": "NVIDIA H200", "rounds": 15, "rows": [row]})
    assert "4096x896x896" in text and "coop256x128" in text and "1.029" in text and "1.067" in text
    assert [w for w, _ in launch_ab.WAYS] == ["pdl", "no_pdl"]


def test_a_run_cut_short_leaves_the_rows_it_measured(monkeypatch, tmp_path):
    """The bench writes each row to <stem>.rows.jsonl as it is measured (ptxgemm/bench/row_log.py): a run that dies on
    its second shape leaves the first row and what the run was; a finished run leaves its JSON and no lines."""
    from ptxgemm.bench import modes as bench_modes, row_log
    from ptxgemm.runtime import timing

    _fake_gpu(monkeypatch, H100, {}, lambda: None)
    mode = bench_modes.mode_from_options("float8_e4m3fn", "tensor", "none")
    shapes = [(96, 384, 300), (130, 256, 512)]
    assert bench_modes.run_mode_bench(shapes, 2, mode, out=tmp_path, name="whole") == 0
    assert (tmp_path / "bench_h100_fp8_tensor_whole.json").exists()
    assert not list(tmp_path.glob("*" + row_log.SUFFIX))

    timed = timing.time_interleaved
    calls = []

    def dies_on_the_second_shape(launchers, rounds, warmup=3):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("the device's time limit")
        return timed(launchers, rounds, warmup)
    monkeypatch.setattr(timing, "time_interleaved", dies_on_the_second_shape)
    with pytest.raises(RuntimeError, match="time limit"):
        bench_modes.run_mode_bench(shapes, 2, mode, out=tmp_path, name="cut")
    assert not (tmp_path / "bench_h100_fp8_tensor_cut.json").exists()
    run, rows = row_log.read(tmp_path / f"bench_h100_fp8_tensor_cut{row_log.SUFFIX}")
    assert run["gpu"] == H100 and run["mode"] == mode.slug and run["rounds"] == 2
    assert [(r["M"], r["N"], r["K"]) for r in rows] == shapes[:1] and rows[0]["ptxgemm_ms"] == 1.0


def test_variant_tags_take_the_b_layout_the_bench_gives():
    """A tag is made with the B layout the bench will give it: fp8's K-major B lets a pair along M split it in
    96-row halves (coop128x192c2, DeepGEMM's tile for N = 2112), which MN-major B does not; the plan completes
    the rest from the arrays."""
    from ptxgemm.cli.bench import _tags
    from ptxgemm.errors import ConfigError as Refused

    (pair,) = _tags("--variants", ["coop128x192c2"], b_major="k")
    assert pair.tag == "coop128x192c2" and pair.b_rows_per_cta == 96
    with pytest.raises(Refused, match="--variants: cluster_m"):
        _tags("--variants", ["coop128x192c2"], b_major="mn")
