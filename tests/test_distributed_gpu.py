"""ptxgemm under torch.distributed on two GPUs (issue 50): tests/distributed_checks.py on two ranks through torchrun
(nccl, one GPU each, NVLink multicast off in their environment: ptxgemm.bench.ranks.SAFE_ENV): tensor-parallel
pt.Linear (ColwiseParallel then RowwiseParallel) forward and backward, eager, compiled and under inference_mode,
within a dtype-derived bound of float64 and of the single-GPU run; a fused activation and MoE experts
(pt.grouped_mm) on DTensors; an FSDP2 training step of a small model of pt.Linear layers and experts, eager and
compiled, against the unsharded step; and in each, at least the model's GEMMs counted by ptxgemm.plan_stats() (they
ran on ptxgemm, not on a fallback). Skipped, with the reason, without two CUDA GPUs; tests/test_distributed.py runs
the same checks on two CPU ranks."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from torch_peer import require_torch_cuda

from ptxgemm.bench import ranks

pytestmark = pytest.mark.gpu

REPO_ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))
import distributed_checks  # noqa: E402 - beside this file: its check names

#: seconds the two ranks may take together (torch.compile of the small models is most of it)
TIMEOUT_S = 170


@pytest.fixture(scope="module")
def checks(tmp_path_factory):
    torch = require_torch_cuda("the distributed checks")
    if not torch.distributed.is_available() or not torch.distributed.is_nccl_available():
        pytest.skip("this torch build has no NCCL: the distributed checks run on nccl")
    count = torch.cuda.device_count()
    if count < 2:
        pytest.skip(f"fewer than two CUDA GPUs: torch sees {count}; the distributed checks run one rank per GPU")
    out = tmp_path_factory.mktemp("checks") / "checks.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    cmd = ranks.torchrun_command(2, [str(TESTS / "distributed_checks.py"), "--device", "cuda", "--out", str(out)])
    proc = ranks.run_job(cmd, env=env, cwd=REPO_ROOT, timeout=TIMEOUT_S)   # NVLink multicast off: SAFE_ENV
    assert proc.returncode == 0 and out.exists(), proc.stdout[-6000:] + proc.stderr[-6000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("name", list(distributed_checks.CHECKS))
def test_distributed_check_on_two_gpus(checks, name, device_report):
    r = checks[name]
    device_report(f"{name}: {'ok' if r['ok'] else 'FAILED'} in {r['seconds']} s, {r['calls']} ptxgemm calls per rank "
                  f"({r['detail'][:200]})")
    assert r["ok"], r["detail"]
    assert r["calls"] >= r["want_calls"]
