"""ptxgemm.tune on the GPU: a small problem over two candidates, stored in a test's own cache, then found by
select_config; and the `tune` command line."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ptxgemm
from ptxgemm.select import cost_model as S, tune_cache

pytestmark = pytest.mark.gpu
REPO_ROOT = Path(__file__).resolve().parent.parent
SHAPE = (1024, 1024, 1024)
CANDIDATES = ["pp128x128", "coop256x128"]


def test_tune_stores_the_winner_and_select_config_returns_it(cache_dir, monkeypatch):
    monkeypatch.delenv("PTXGEMM_TUNE_CACHE", raising=False)
    lines = []
    winner, records = ptxgemm.tune(*SHAPE, candidates=CANDIDATES, rounds=3, progress=lines.append)
    assert [r["tag"] for r in records] == CANDIDATES
    assert all(r["ok"] and r["ms"] > 0 for r in records), records
    assert winner.tag == min(records, key=lambda r: r["ms"])["tag"]
    assert (cache_dir / "tune.json").is_file()
    assert ptxgemm.select_config(*SHAPE) == winner
    assert S.choose(*SHAPE) == (winner, "tune cache")
    entry, = tune_cache.load(cache_dir / "tune.json").values()
    from ptxgemm.runtime import driver

    info = driver.device_info()
    assert (entry["gpu"], entry["sm_count"], entry["driver"]) == (info.name, info.sm_count, info.driver_version_str)
    # the cache off: the cost model again
    monkeypatch.setenv("PTXGEMM_TUNE_CACHE", "off")
    assert S.choose(*SHAPE)[1] == "cost model"


def test_cli_tune(cache_dir, tmp_path):
    out = tmp_path / "tune.json"
    env = {k: v for k, v in os.environ.items() if k != "PTXGEMM_TUNE_CACHE"}
    proc = subprocess.run([sys.executable, "-m", "ptxgemm", "tune", "--m", "512", "--n", "768", "--k", "320",
                           "--candidates", "pp128x128,pp64x256c2", "--rounds", "2", "--json", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=REPO_ROOT, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "winner: " in proc.stdout and "TFLOP/s" in proc.stdout
    data = json.loads(out.read_text())
    assert data["winner"] in ("pp128x128", "pp64x256c2") and len(data["candidates"]) == 2
    assert ptxgemm.tuning.lookup(512, 768, 320).tag == data["winner"]
