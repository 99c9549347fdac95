"""The bank-conflict model against the hardware: ncu's shared-memory wavefront counters, pattern by pattern.

Runs the bank probe (ptxgemm.tools.bank_probe) under ncu once for the whole module (one kernel launch per pattern) and asserts
that the measured wavefronts per instruction equal ptxgemm.tools.banks' prediction for every pattern.  Needs a
Hopper GPU and ncu (PATH or /usr/local/cuda/bin/ncu); skipped, with the reason, without either.

Set PTXGEMM_BANK_RESULTS=<path> to also write the markdown table (the one committed under docs/results/).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from ptxgemm.tools import bank_patterns, bank_probe as probe, banks

pytestmark = pytest.mark.gpu

RESULTS_ENV = "PTXGEMM_BANK_RESULTS"


@pytest.fixture(scope="module")
def measured():
    from ptxgemm.runtime import driver

    ncu = probe.find_ncu()
    if ncu is None:
        pytest.skip("ncu (Nsight Compute) not found on PATH or at /usr/local/cuda/bin/ncu: "
                    "the check reads its wavefront counters")
    reason = driver.no_device_reason()
    if reason is not None:
        pytest.skip(f"no GPU: {reason}")
    measurements, facts = probe.measure(ncu=ncu)
    if os.environ.get(RESULTS_ENV):
        path = Path(os.environ[RESULTS_ENV])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(probe.results_markdown(measurements, facts))
    return measurements


def test_every_pattern_matches_the_model(measured):
    bad = [m for m in measured if not m.ok]
    table = "\n".join(f"  {m.pattern.name:<60} {m.pattern.op:<18} predicted {m.predicted:>3}  measured "
                      f"{probe._fmt(m.measured):>7}  other kind {probe._fmt(m.other)}" for m in bad)
    assert not bad, f"{len(bad)} of {len(measured)} patterns differ from ptxgemm.tools.banks:\n{table}"


def test_every_op_and_issue_pattern_was_measured(measured):
    ops = {m.pattern.op for m in measured}
    assert ops == set(banks.OPS)
    names = {m.pattern.name for m in measured}
    for stride in bank_patterns.STRIDES:
        assert f"st.b32 stride {stride}" in names and f"ld.b32 stride {stride}" in names
    groups = {m.pattern.group for m in measured}
    assert {"stride", "broadcast", "permutation", "phase", "layout"} <= groups


def test_ptxgemms_epilogue_layout_was_measured(measured):
    _, missing = bank_patterns.epilogue_patterns()
    assert missing is None, missing
    assert any(m.pattern.group == "epilogue" for m in measured)
