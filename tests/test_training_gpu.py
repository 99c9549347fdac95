"""The GEMM classes of a training step on the GPU (issue 47), laid out as autograd lays them out, each with the config
the selection gives that class, so a case exercises what it claims: a weight gradient dW = dY^T X whose few output
tiles run all as the stream-K tail (no unit run whole); one whose narrow side takes a split pingpong tile, and a
shorter one the unsplit 64x64 pingpong in one wave (select/unsplit_wave.narrow_unsplit); a GQA
k/v projection x W^T (N = 256, B K-major); the short-K dX of that projection (K = 256). Random bf16 operands,
poisoned outputs, every element against float64 with ptxgemm.accuracy's bound."""
from __future__ import annotations

import numpy as np
import pytest

from ptxgemm import GemmPlan
from ptxgemm.kernel import schedule
from ptxgemm.runtime import driver
from ptxgemm.runtime.arrays import DeviceArray
from gemm_reference import check_result, random_matrix

gpu = pytest.mark.gpu


def _require_gpu():
    reason = driver.no_device_reason()
    if reason is not None:
        pytest.skip(f"no CUDA device: {reason}")


def _operands(gemm: str, m: int, n: int, k: int, rng):
    """(A, B) as host arrays with autograd's layouts: forward x @ W^T (B = W^T, K-major), dX = dY @ W (both
    row-major), dW = dY^T @ x (A = dY^T, M-major)."""
    if gemm == "forward":
        return random_matrix(rng, m, k, "bfloat16"), random_matrix(rng, n, k, "bfloat16").T
    if gemm == "dX":
        return random_matrix(rng, m, k, "bfloat16"), random_matrix(rng, k, n, "bfloat16")
    return random_matrix(rng, k, m, "bfloat16").T, random_matrix(rng, k, n, "bfloat16")


def _majors(a: np.ndarray, b: np.ndarray) -> tuple[str, str]:
    """A (M, K) and B (K, N)'s majors: "k" where K is the contiguous axis."""
    return ("k" if a.strides[1] == a.itemsize else "mn", "k" if b.strides[0] == b.itemsize else "mn")


# (gemm, M, N, K, what the selection must give it: a predicate on (config, schedule) and its description)
CASES = [
    # select/short_grid.py: a short grid of the cooperative 128x128 tile runs one full wave instead of its tail
    ("dW", 1536, 1536, 4096, lambda c, s: (c.cooperative, c.block_n, c.stream_k) == (True, 160, False)
     and s.units <= s.clusters, "one wave of cooperative 128x160 tiles, no stream-K tail"),
    ("dW", 896, 896, 16384, lambda c, s: (c.cooperative, c.block_m, c.block_n, c.splits, c.stream_k) ==
     (True, 128, 128, 2, False) and s.units <= s.clusters, "the cooperative 128x128 tile in two splits, one wave"),
    ("dW", 256, 1536, 8192, lambda c, s: c.splits > 1 and not c.cooperative and c.block_m == 64,
     "a split 64-row pingpong tile"),
    ("dW", 256, 1536, 4096, lambda c, s: (c.schedule, c.block_m, c.block_n, c.splits) == ("pingpong", 64, 64, 1)
     and c.stages == c.most_stages and s.units <= s.clusters, "one wave of unsplit 64x64 pingpong tiles in the deep ring"),
    ("forward", 4096, 256, 1536, lambda c, s: c.block_m * c.block_n <= 128 * 128 and c.b_major == "k",
     "a narrow tile reading B K-major"),
    ("dX", 4096, 1536, 256, lambda c, s: s.k_tiles * c.splits <= 4 and not c.stream_k, "a 4-k-tile loop, unsplit"),
]


@gpu
@pytest.mark.parametrize("gemm,m,n,k,claim,what", CASES, ids=[f"{c[0]}-{c[1]}x{c[2]}x{c[3]}" for c in CASES])
def test_a_training_class_runs_its_selected_config_right(gemm, m, n, k, claim, what):
    _require_gpu()
    rng = np.random.default_rng(47 + m + n + k)
    a, b = _operands(gemm, m, n, k, rng)
    da, db = DeviceArray.from_numpy(a), DeviceArray.from_numpy(b)   # F-order operands stay F-order: views, no copy
    assert _majors(a, b) == {"forward": ("k", "k"), "dX": ("k", "mn"), "dW": ("mn", "mn")}[gemm]
    out = DeviceArray.from_numpy(np.full((m, n), np.nan, dtype=a.dtype))
    plan = GemmPlan(da, db, out)
    cfg = plan.config
    sched = schedule.plan_for(cfg, m, n, k, driver.device_info().sm_count)
    assert (cfg.a_major, cfg.b_major) == _majors(a, b), cfg.describe()   # read in place
    assert claim(cfg, sched), f"{gemm} {m}x{n}x{k}: expected {what}, the selection gave {cfg.tag}"
    plan.launch()
    verdict = check_result(out.to_numpy(), a, b)
    assert verdict.ok, f"{cfg.tag}: {verdict}"
