"""`python -m ptxgemm bench` without a GPU: --summarize over hand-written run files, and the argument checks that
come before the GPU. Run as a subprocess from a temporary directory (the installed command must not need the
checkout), and once through tools/bench.py, the old path."""
from __future__ import annotations

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


def test_summarize_through_the_old_tool_path(runs, tmp_path):
    """tools/bench.py is a shim over the package's command: same output."""
    new = bench("--summarize", *map(str, runs), cwd=tmp_path)
    old = bench("--summarize", *map(str, runs), cwd=tmp_path, command=[str(REPO_ROOT / "tools" / "bench.py")])
    assert old.returncode == new.returncode == 0, old.stderr
    assert old.stdout == new.stdout and H100 in new.stdout


@pytest.mark.parametrize("args,pattern", [
    (("--summarize-out", "x.json"), "only with --summarize"),
    (("--shapes", "4096x4096"), "--shapes"),
    (("--rounds", "0"), "--rounds"),
    (("--name", "a/b"), "--name"),
    (("--variants", "pp128x256"), "--variants: block_m x block_n"),
    (("--config", "nonsense"), "--config: config tag"),
    (("--rounds", "x"), "argument --rounds: invalid int value"),
])
def test_bad_arguments_exit_2(args, pattern, tmp_path):
    proc = bench(*args, cwd=tmp_path)
    assert proc.returncode == 2 and pattern in proc.stderr, proc.stderr
    assert proc.stderr.startswith("python -m ptxgemm bench: error: ") and proc.stderr.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_no_gpu_exits_2(tmp_path):
    proc = bench("--quick", "--out", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2 and "bench runs the kernels, so it needs an sm_90 GPU" in proc.stderr
    assert list(tmp_path.iterdir()) == []
