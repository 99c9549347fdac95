"""The TMA swizzle probe: its command line (no GPU, --simulate), and on an sm_90 GPU, the hardware against the model."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ptxgemm.errors import ConfigError
from ptxgemm.kernel.swizzle import MODES, SPAN_BYTES, format_grid, tile_grid
from ptxgemm.tools import probes

REPO_ROOT = Path(__file__).resolve().parent.parent
PROBE = ["-m", "ptxgemm", "swizzle-probe"]
ERROR = "python -m ptxgemm swizzle-probe: error: "


def run_probe(*args, env=None, cwd=None, command=PROBE) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *command, *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd or REPO_ROOT, env={**os.environ, **(env or {})})


# ---------------------------------------------------------------------------------------------------------------
# The command line, simulated
# ---------------------------------------------------------------------------------------------------------------

def test_cli_simulate_json():
    proc = run_probe("--simulate", "--mode", "128B", "--rows", "8", "--cols", "64", "--direction", "both", "--json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    results = json.loads(proc.stdout)
    assert isinstance(results, list) and len(results) == 2
    assert [r["direction"] for r in results] == ["store", "load"]
    model = tile_grid(8, 64, "128B").tolist()
    for r in results:
        assert set(r) == {"mode", "direction", "rows", "cols", "grid"}
        assert (r["mode"], r["rows"], r["cols"]) == ("128B", 8, 64)
        assert r["grid"] == model


def test_cli_simulate_all_modes_text():
    proc = run_probe("--simulate", "--mode", "all")
    assert proc.returncode == 0, proc.stderr
    headers = [line for line in proc.stdout.splitlines() if line.startswith("== ")]
    assert len(headers) == len(MODES) * 2
    # a simulation measures nothing, so it must not claim a match
    assert all(h.endswith("the model's prediction (simulated; no hardware was probed)") for h in headers), headers
    assert "match" not in proc.stdout
    # the default tile is 8 rows of one swizzle span (64 columns for 'none')
    assert "== 128B swizzle, TMA store, 8x64 x 16-bit" in proc.stdout
    assert "== 32B swizzle, TMA load, 8x16 x 16-bit" in proc.stdout
    assert "== none swizzle, TMA store, 8x64 x 16-bit" in proc.stdout
    assert format_grid(tile_grid(8, 32, "64B")) in proc.stdout


@pytest.mark.parametrize("args, message", [
    (("--simulate", "--mode", "16B"), "--mode: must be one of none, 32B, 64B, 128B or all, got '16B'"),
    (("--simulate", "--mode", "32B", "--cols", "64"), "--cols: with 32B swizzle a row must be exactly the swizzle span"),
    (("--simulate", "--rows", "0"), "--rows: a TMA box has 1..256 rows, got 0"),
    (("--simulate", "--rows", "257"), "--rows: a TMA box has 1..256 rows, got 257"),
    (("--simulate", "--mode", "none", "--rows", "256", "--cols", "512"),
     "--cols: a TMA box has at most 256 elements per row, got 512"),
    (("--simulate", "--mode", "none", "--cols", "12"), "--cols: a row must be a whole number of 16-byte chunks"),
    (("--simulate", "--direction", "sideways"), "--direction: must be store, load or both, got 'sideways'"),
])
def test_cli_bad_input(args, message):
    proc = run_probe(*args)
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(ERROR)
    assert message in lines[0]


def test_cli_without_gpu_needs_simulate():
    # CUDA_VISIBLE_DEVICES="" hides any GPU, so this holds on the GPU machine as well
    proc = run_probe("--mode", "128B", env={"CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(ERROR + "no GPU to probe (")
    assert "use --simulate" in lines[0]


def test_cli_simulate_runs_from_another_directory(tmp_path):
    """What the wheel promises: the command finds its package from anywhere."""
    command = PROBE
    proc = run_probe("--simulate", "--mode", "64B", "--direction", "load", cwd=tmp_path, command=command)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("== 64B swizzle, TMA load, 8x32 x 16-bit: the model's prediction")
    assert format_grid(tile_grid(8, 32, "64B")) in proc.stdout
    bad = run_probe("--simulate", "--rows", "0", cwd=tmp_path, command=command)
    assert bad.returncode == 2 and bad.stderr.startswith(ERROR + "--rows: ")
    assert list(tmp_path.iterdir()) == []


def test_check_tile_rules():
    probes.check_tile("128B", 8, 64)
    probes.check_tile("none", 256, 256)
    with pytest.raises(ConfigError, match="--cols: with 64B swizzle"):
        probes.check_tile("64B", 8, 64)
    assert [probes.default_cols(m) for m in MODES] == [64, 16, 32, 64]


# ---------------------------------------------------------------------------------------------------------------
# The hardware
# ---------------------------------------------------------------------------------------------------------------

CASES = [(mode, direction, rows, 64 if SPAN_BYTES[mode] is None else SPAN_BYTES[mode] // 2)
         for mode in MODES for direction in probes.DIRECTIONS for rows in (8, 64)]


@pytest.mark.gpu
@pytest.mark.parametrize("mode, direction, rows, cols", CASES, ids=[f"{m}-{d}-{r}x{c}" for m, d, r, c in CASES])
def test_probe_matches_model(mode, direction, rows, cols):
    grid = probes.run_swizzle_probe(mode, direction, rows, cols)
    model = tile_grid(rows, cols, mode)
    assert grid.shape == model.shape
    bad = int(np.count_nonzero(grid != model))
    assert bad == 0, (f"{bad} of {grid.size} elements differ ({mode}, {direction}, {rows}x{cols})\n"
                      f"hardware:\n{format_grid(grid)}\nmodel:\n{format_grid(model)}")
