"""ptxgemm.select.fitting (`python -m ptxgemm fit`): the cost model's constants refitted from runs, on the CPU."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ptxgemm.errors import ConfigError
from ptxgemm.kernel import schedule
from ptxgemm.kernel.config import GemmConfig
from ptxgemm.select import fitting, memory_model, predict, tile_costs

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"
SHAPES = [(m, n, k) for m in (512, 2048, 4096, 8192) for n in (1024, 4096) for k in (1024, 4096, 8192)]


def _synthetic_run(tmp_path, costs: dict, sm_count: int = 132) -> Path:
    """A bench run whose rows time each tag exactly as the model does with `costs` {tag: (ktile_ns, epilogue_ns)}."""
    rows = []
    for m, n, k in SHAPES:
        variants = {}
        for tag, (kt, epi) in costs.items():
            cfg = GemmConfig.from_tag(tag)
            s = schedule.plan_for(cfg, m, n, k, sm_count)
            ns = predict.model_ns(cfg.cooperative, predict.steps_per_cta(s), s.k_tiles, kt, epi)
            variants[tag] = float(ns) / 1e6
        rows.append({"M": m, "N": n, "K": k, "variants": variants})
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"gpu": "test", "rows": rows}))
    return path


def test_fit_tiles_recovers_the_costs_a_run_was_made_with(tmp_path):
    costs = {"coop128x256": (685.0, 1600.0), "pp64x128": (243.0, 660.0)}
    got = fitting.fit_tiles([_synthetic_run(tmp_path, costs)], 132)
    assert set(got) == set(costs)
    for tag, (kt, epi) in costs.items():
        fit_kt, fit_epi, err, shapes = got[tag]
        assert shapes == len(SHAPES) and err < 1e-3, got[tag]
        assert abs(fit_kt - kt) / kt < 1e-3 and abs(fit_epi - epi) <= 10, got[tag]   # the epilogue grid's step


def test_the_cli_prints_the_tables_to_paste(capsys):
    from ptxgemm.cli.main import main

    assert main(["fit", "tiles", str(RESULTS / "h200/select/bench_h200_issue9_fit.json")]) == 0
    out = capsys.readouterr().out
    assert "KTILE_NS = {" in out and "EPILOGUE_NS = {" in out and "coop128x256" in out


def test_a_file_that_is_not_a_run_is_refused_by_name(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"something": 1}))
    with pytest.raises(ConfigError, match="^files: .*neither a bench run"):
        fitting.fit_tiles([bad], 132)
    with pytest.raises(ConfigError, match="^files: .*not a readable JSON"):
        fitting.fit_tiles([tmp_path / "missing.json"], 132)


def test_fit_memory_leaves_the_models_tables_as_they_were(tmp_path, monkeypatch):
    """The fit moves the model's tables while it searches; after it, the library selects as before. (scipy's
    Powell search itself is replaced by one step here: the real one takes ~20 s over the H100's explore run.)"""
    import types

    import numpy as np

    scipy_optimize = pytest.importorskip("scipy.optimize", reason="fit memory needs scipy, a developer's tool's "
                                                                  "dependency")
    seen = []

    def one_step(loss, x0, **_):
        seen.append(loss(np.asarray(x0) + 0.5))        # the tables moved while the loss is read
        return types.SimpleNamespace(x=np.asarray(x0) + 0.5, fun=seen[-1])

    monkeypatch.setattr(scipy_optimize, "minimize", one_step)
    gpu = "NVIDIA H100 80GB HBM3"
    before = json.dumps([tile_costs.tables(gpu), memory_model.bandwidths(gpu)], sort_keys=True)
    run = RESULTS / "h100/select/bench_h100_issue11_explore.json"
    got = fitting.fit_memory([run], 132)
    assert seen and got["samples"] > 0 and got["dram_bytes_per_ns"] > memory_model.bandwidths(gpu)["dram_bytes_per_ns"]
    assert json.dumps([tile_costs.tables(gpu), memory_model.bandwidths(gpu)], sort_keys=True) == before
