"""On the GPU: DeepGEMM as the bench's peer (ptxgemm/bench/deepgemm_peer.py) computes what ptxgemm computes, dense
and grouped, on the bench's own values, and the rows carry its figures. Needs a DeepGEMM checkout with its submodules,
named by PTXGEMM_DEEPGEMM_DIR (its extension is built there on the first run), and torch; skipped, saying so,
without them. The bench runs as a subprocess: it must start with libstdc++ preloaded, which it does itself."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not os.environ.get("PTXGEMM_DEEPGEMM_DIR"),
                       reason="no DeepGEMM checkout: set PTXGEMM_DEEPGEMM_DIR to one (with its submodules)"),
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed (DeepGEMM needs it)"),
]

# one bf16 rounding of the output against the float64 product of the dequantized inputs (the bench's rel_err)
BF16_REL = 2 ** -8


def _bench(tmp_path, *args):
    proc = subprocess.run([sys.executable, "-m", "ptxgemm", "bench", "--in-dtype", "float8_e4m3fn", "--scaling", "block",
                           "--deepgemm", os.environ["PTXGEMM_DEEPGEMM_DIR"], "--rounds", "2", "--out", str(tmp_path),
                           "--name", "t", *args], capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "starting again with LD_PRELOAD=" in proc.stdout
    return proc


def test_deepgemm_dense_rows_agree_with_the_reference(tmp_path):
    """Two shapes off DeepGEMM's table (a ragged N included): both libraries within one bf16 rounding of float64 on
    the sampled rows, and the row carries DeepGEMM's burst time and its ratio."""
    _bench(tmp_path, "--shapes", "256x2112x1024,320x512x768")
    rows = json.loads(next(tmp_path.glob("bench_*_fp8_block_t.json")).read_text())["rows"]
    assert len(rows) == 2
    for r in rows:
        assert r["deepgemm"] == "DeepGEMM" and "deepgemm_error" not in r, r
        assert 0 < r["rel_err"] <= BF16_REL and 0 < r["deepgemm_rel_err"] <= BF16_REL, r
        assert r["deepgemm_ms"] > 0 and r["vs_deepgemm"] > 0


def test_deepgemm_grouped_rows_agree_with_ptxgemm(tmp_path):
    """DeepGEMM's 10 grouped shapes with DeepGEMM as each row's first peer: ptxgemm's output within two bf16
    roundings of DeepGEMM's on every group's rows, and the kernel-duration figures of both."""
    _bench(tmp_path, "--set", "grouped")
    rows = json.loads(next(tmp_path.glob("bench_*_grouped_float8_e4m3fn_block_t.json")).read_text())["rows"]
    ours = [r for r in rows if r.get("peer") == "DeepGEMM"]
    assert len(ours) == 10, [r.get("refused") for r in rows if "refused" in r]
    for r in ours:
        assert r["max_rel_diff_vs_DeepGEMM"] <= 2 * BF16_REL, r
        assert r["deepgemm_kernel_flushed_ms"] > 0 and r["ptxgemm_kernel_flushed_ms"] > 0
