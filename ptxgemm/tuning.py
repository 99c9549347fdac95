"""Measure the candidate configs of one problem on this GPU and remember the fastest (`ptxgemm.tune`,
`python -m ptxgemm tune`).

Every candidate first runs once on random operands (never zeros) and its result is checked on sampled rows against
a float64 reference with ptxgemm.accuracy's per-element bound; a candidate that fails to build, launch or check is
reported and never timed, so it can never win. The rest are timed together, with the one method every ptxgemm
number uses (ptxgemm.runtime.timing.time_interleaved: L2 flushed before each launch, interleaved rounds, medians). The
winner goes into the tune cache (ptxgemm.select.tune_cache), where select_config finds it.

(This module is `tuning`, not `tune`, so that `ptxgemm.tune` can be the function without the submodule replacing
it as an attribute of the package on first import; ptxgemm.tools.trace / ptxgemm.tools.tracing split the same way.)
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from . import accuracy, gemm
from .errors import ConfigError, PtxgemmError
from .kernel.config import FP8_DTYPES, SCALE_BLOCK, GemmConfig
from .runtime import arrays, driver, timing
from .select import cost_model as select, predict, tiles, tune_cache
from .select.problem import Problem

CHECK_ROWS = 64          # rows of the float64 reference: a wrong 16x16 block shows in any row it spans, and all
                         # candidates share the rows; the whole matrix would take the CPU minutes on large shapes


def lookup(m: int, n: int, k: int, in_dtype: str = "bfloat16", out_dtype: str | None = None, a_major: str = "k",
           b_major: str = "mn", device=None, scaling: str | None = None) -> GemmConfig | None:
    """The tune cache's winner for this problem on `device` (None: the current GPU), or None; `scaling` "block":
    the blockwise problem's."""
    problem = Problem(m, n, k, in_dtype, out_dtype, a_major, b_major)
    return tune_cache.lookup(problem, select.resolve_device(device), scaling)


# --------------------------------------------------------------------------------------------------------------
# Running candidates: a plan factory makes a runner per config; tests inject their own (no GPU)
# --------------------------------------------------------------------------------------------------------------

class PlanRunner:
    """One candidate on the GPU: a GemmPlan and its output. `config` is what the plan actually runs."""

    def __init__(self, plan, out):
        self.plan, self.out = plan, out
        self.config = plan.config
        self.launch = plan.launch

    def result(self) -> np.ndarray:
        return self.out.to_numpy()  # waits for the GPU


class GpuPlans:
    """plan_factory(a, b, config) -> PlanRunner: uploads the operands once, one poisoned output per candidate."""

    def __init__(self):
        self._host = self._device = None

    def __call__(self, a: np.ndarray, b: np.ndarray, config: GemmConfig, scales: dict | None = None) -> PlanRunner:
        if self._host is None or self._host[0] is not a or self._host[1] is not b:
            self._host = (a, b)
            self._device = (arrays.DeviceArray.from_numpy(a), arrays.DeviceArray.from_numpy(b))
            self._scales = {name: arrays.DeviceArray.from_numpy(v) for name, v in (scales or {}).items()}
        out = arrays.DeviceArray.empty((a.shape[0], b.shape[1]), np.dtype(config.out_dtype))
        out.poison()  # an element the kernel never writes stays NaN and fails the check
        return PlanRunner(gemm.GemmPlan(*self._device, out, config, **self._scales), out)


def operands(problem: Problem, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Random A and B in the problem's layouts: A K-major = C-order (M, K), MN-major = Fortran order; B MN-major =
    C-order (K, N), K-major = Fortran-order (K, N)."""
    rng = np.random.default_rng(seed)
    a = accuracy.random_matrix(rng, problem.m, problem.k, problem.in_dtype, "C" if problem.a_major == "k" else "F")
    b = accuracy.random_matrix(rng, problem.k, problem.n, problem.in_dtype, "C" if problem.b_major == "mn" else "F")
    return a, b


METHODS = ("burst", "b2b")   # how candidates are timed: alone after an L2 flush, or back to back (see tune)
B2B_LAUNCHES = 10            # launches per back-to-back window: long enough that launch gaps do not count
SCALINGS = ("block",)   # what tune can measure besides the plain GEMM: blockwise fp8 (its own kernels and cache entries)


def block_scales(problem: Problem, seed: int = 0) -> dict:
    """Random positive blockwise tables for the problem: scale_a (M, ceil(K/128)), scale_b (ceil(K/128),
    ceil(N/128)), as the benchmark draws them."""
    rng = np.random.default_rng(seed + 2)
    kb, nb = -(-problem.k // SCALE_BLOCK), -(-problem.n // SCALE_BLOCK)
    return {"scale_a": rng.uniform(0.5, 2.0, (problem.m, kb)).astype(np.float32),
            "scale_b": rng.uniform(0.5, 2.0, (kb, nb)).astype(np.float32)}


def candidate_configs(problem: Problem, given, scaling: str | None = None) -> list[GemmConfig]:
    """The configs to try: `given` (GemmConfigs or tags) with the problem's dtypes and layouts, or the model's;
    with scaling "block", the blockwise tiles (tiles.blockwise_candidates) carrying the blockwise scales."""
    if scaling is not None and scaling not in SCALINGS:
        raise ConfigError(f"scaling: {scaling!r} is not tuned; tune measures the plain GEMM or 'block'")
    if scaling == "block" and problem.in_dtype not in FP8_DTYPES:
        raise ConfigError(f"scaling: blockwise scaling is for fp8 inputs, got in_dtype {problem.in_dtype}")
    fields = {"block_scale": True} if scaling == "block" else {}
    if given is None:
        if scaling == "block":
            return [dataclasses.replace(c, **fields) for c in tiles.blockwise_candidates(problem)]
        return tiles.problem_candidates(problem)
    if isinstance(given, str):
        given = [t for t in given.split(",") if t.strip()]
    configs = []
    for c in given:
        if isinstance(c, str):
            c = GemmConfig.from_tag(c, **problem.config_fields(), **fields)
        elif isinstance(c, GemmConfig):
            if c.debug or c.trace:
                raise ConfigError(f"candidates: {c.tag} has debug or trace on; tune times the kernels people run, "
                                  f"so pass configs without them")
            c = dataclasses.replace(c, **problem.config_fields(), **fields)
        else:
            raise ConfigError(f"candidates: each must be a GemmConfig or a tag such as 'pp128x128', got {c!r}")
        if any(c.tag == d.tag for d in configs):
            raise ConfigError(f"candidates: {c.tag} is given twice")
        configs.append(c)
    if not configs:
        raise ConfigError("candidates: empty; give at least one config or tag (None: the selection's candidates)")
    return configs


def tune(m: int, n: int, k: int, in_dtype: str = "bfloat16", out_dtype: str | None = None, a_major: str = "k",
         b_major: str = "mn", candidates=None, rounds: int = 20, store: bool = True,
         progress: Callable[[str], object] | None = print, *, seed: int = 0, check_rows: int = CHECK_ROWS,
         plan_factory: Callable | None = None, timer: Callable | None = None,
         device=None, scaling: str | None = None, method: str = "burst") -> tuple[GemmConfig, list[dict]]:
    """Time every candidate config on this problem and return (the fastest correct one, one record per candidate).

    candidates: GemmConfigs or tags ('pp128x128,coop256x128c2' or a list); None: ptxgemm.select.tiles.candidates.
    rounds: interleaved timing rounds. store: put the winner in the tune cache (unless PTXGEMM_TUNE_CACHE is off).
    progress: called with one line per step (None: silent).
    A record: {"tag", "description", "ok", "check", "error", "ms", "tflops", "predicted_us"}.
    For tests and other runners: plan_factory(a, b, config) returns an object with .config, .launch() and
    .result() (the host output after one launch); timer(launchers, rounds) returns {tag: ms}; device (with
    .name, .sm_count, .driver_version_str) keys the cache. By default: GemmPlans on the GPU, time_interleaved,
    and the GPU's own device_info().
    scaling "block": fp8 with blockwise scales (random positive tables, the same for every candidate), the
    blockwise tiles as candidates, the result checked against the dequantized float64 product, and the winner
    stored under the blockwise key, which select_config reads for blockwise calls only. plan_factory then also
    takes the scales: plan_factory(a, b, config, {"scale_a": ..., "scale_b": ...}).
    method: how the candidates are timed (METHODS): "burst", each launch alone after an L2 flush (the bench's
    method), or "b2b", windows of B2B_LAUNCHES launches back to back (a model's step: warm L2, the clock the power
    limit leaves). The winner of one need not be the other's; the entry records which.
    """
    problem = Problem(m, n, k, in_dtype, out_dtype, a_major, b_major)
    if method not in METHODS:
        raise ConfigError(f"method: one of {METHODS}, got {method!r}")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ConfigError(f"rounds: must be a whole number >= 1, got {rounds!r}")
    if isinstance(check_rows, bool) or not isinstance(check_rows, int) or check_rows < 1:
        raise ConfigError(f"check_rows: must be a whole number >= 1, got {check_rows!r}")
    configs = candidate_configs(problem, candidates, scaling)
    say = progress if progress is not None else (lambda line: None)
    if plan_factory is None:
        info = driver.require_sm90("tuning a GEMM (ptxgemm.tune runs every candidate kernel)")
        device = info if device is None else device
        plan_factory = GpuPlans()
    if timer is None:
        timer = (timing.time_interleaved if method == "burst" else
                 lambda launchers, rounds: timing.time_back_to_back(launchers, B2B_LAUNCHES, rounds))
    device = select.resolve_device(device)

    a, b = operands(problem, seed)
    rows = np.sort(np.random.default_rng(seed + 1).choice(problem.m, size=min(check_rows, problem.m), replace=False))
    scales = block_scales(problem, seed) if scaling == "block" else None
    if scales is None:
        ref, abs_product = accuracy.reference(a[rows], b)
        bound = accuracy.error_bound(ref, abs_product, problem.k, problem.out_dtype, problem.in_dtype)
    else:
        ref, bound = accuracy.fused_reference(a[rows], b, {"scale_a": scales["scale_a"][rows],
                                                           "scale_b": scales["scale_b"]}, problem.out_dtype, True)
    what = problem.describe() + (", blockwise scales" if scales else "")
    say(f"tuning {what} on {device.name} ({device.sm_count} SMs): {len(configs)} candidates, "
        f"result checked on {len(rows)} rows")

    records, launchers, ran = [], {}, {}
    for config in configs:
        rec = {"tag": config.tag, "description": config.describe(), "ok": False, "check": None, "error": None,
               "ms": None, "tflops": None, "predicted_us": _predicted_us(config, problem, device)}
        records.append(rec)
        try:
            runner = plan_factory(a, b, config) if scales is None else plan_factory(a, b, config, scales)
            rec["tag"] = runner.config.tag  # what actually runs (the same config, as the operands match it)
            runner.launch()
            verdict = accuracy.check_bound(np.asarray(runner.result())[rows], ref, bound)
        except PtxgemmError as e:
            rec["error"] = f"{type(e).__name__}: {e}"
            say(f"  {rec['tag']:<16} FAILED to run: {rec['error']}")
            continue
        rec["check"], rec["ok"] = str(verdict), verdict.ok
        if not verdict.ok:
            say(f"  {rec['tag']:<16} WRONG RESULT, not timed: {verdict}")
            continue
        launchers[rec["tag"]] = runner.launch
        ran[rec["tag"]] = runner.config
        say(f"  {rec['tag']:<16} result ok (worst error/bound {verdict.worst_ratio:.3g})")
    if not launchers:
        raise PtxgemmError(f"tune: no candidate for {problem.describe()} ran and produced a correct result: "
                           + "; ".join(f"{r['tag']}: {r['error'] or r['check']}" for r in records))

    say(f"timing {len(launchers)} candidates together, {rounds} interleaved rounds ("
        + ("L2 flushed before each launch)" if method == "burst" else f"{B2B_LAUNCHES} launches back to back)"))
    times = timer(launchers, rounds)
    for rec in records:
        if rec["tag"] in launchers:
            rec["ms"] = float(times[rec["tag"]])
            rec["tflops"] = problem.flops / rec["ms"] / 1e9
            predicted = f", model {rec['predicted_us']:.1f} us" if rec["predicted_us"] is not None else ""
            say(f"  {rec['tag']:<16} {rec['ms']:9.4f} ms {rec['tflops']:7.1f} TFLOP/s{predicted}")
    timed = [r for r in records if r["ms"] is not None]
    best = min(range(len(timed)), key=lambda i: (timed[i]["ms"], i))  # ties: the earlier candidate
    winner = ran[timed[best]["tag"]]
    say(f"winner: {winner.tag} ({timed[best]['ms']:.4f} ms, {timed[best]['tflops']:.1f} TFLOP/s)")

    if store:
        if not tune_cache.enabled():
            say(f"not stored: {tune_cache.ENV_VAR} is off")
        else:
            try:
                where = tune_cache.store(problem, device, winner.tag, {r["tag"]: r["ms"] for r in timed}, rounds,
                                         scaling=scaling, method=method)
            except OSError as e:  # the measurement is still worth returning
                say(f"could not store the winner in {tune_cache.path()}: {e}")
            else:
                say(f"stored in {where}")
    return winner, records


def _predicted_us(config: GemmConfig, problem: Problem, device) -> float | None:
    """The cost model's time, kept beside the measurement so the model can be refitted (None: no table entry)."""
    try:
        return predict.predict(config, problem.m, problem.n, problem.k, device.sm_count,
                               str(device.name)).total_ns / 1e3
    except ConfigError:
        return None
