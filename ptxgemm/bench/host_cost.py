"""What one GEMM call costs the host: microseconds of CPU time per call for each way into ptxgemm, and torch's.

GPU time is the bench's business (ptxgemm.bench.suite); this module measures the other half of a small GEMM's latency,
the Python and driver work before the kernel is queued. `python -m ptxgemm bench --host` is its command line.

Method: a loop of `calls` calls timed by time.perf_counter, divided by `calls`; `repeats` such loops per way in,
interleaved between the ways (the order alternating each repeat, as in ptxgemm.runtime.timing) so drift in clocks or
load affects all alike; min and median over repeats. Each way is warmed up (WARMUP_CALLS calls) first. The GPU is
synchronized between loops, never inside one. The shape is small (256x256x256 by default: a kernel of a few
microseconds) and `calls` modest, so one loop's launches stay far below the driver's queue depth: a full queue would
block the host and turn the measurement into GPU time. The ways in, on the same bf16 operands and one non-default stream:
    gemm.run (host arrays)       ptxgemm.run(a_np, b_np): upload, launch, download (its own small shape, 64x64x64)
    gemm.matmul (same arrays)    ptxgemm.matmul(a, b, out, stream=s) on the same device arrays every call
    gemm.matmul (new out)        ptxgemm.matmul(a, b, stream=s): a new output array each call (allocated and freed)
    plan.launch             gemm.GemmPlan(a, b, out).launch(s): the prepared launch alone
    graph replay            a ptxgemm.runtime.graph.Graph holding one plan.launch, replayed on s
    torch.matmul (out=)     torch.matmul(ta, tb, out=tc) on torch's current stream (when torch is importable)
    torch.matmul            torch.matmul(ta, tb)

Checks (on the min over repeats, timeit's convention: the cost with the least interference):
    gemm.matmul (same arrays) <= 1.5 x plan.launch    the convenient call stays close to the prepared one
    plan.launch <= torch.matmul                  ptxgemm's cheapest non-graph call is no dearer than cuBLAS's
                                                 (against the faster of torch's two forms)

A second measurement, a linear layer's GEMM on a host-bound shape through every way in (`bench --host layer`), is
ptxgemm.bench.host_layer's.

torch is imported only inside `measure`, never when ptxgemm is imported.
"""
from __future__ import annotations

import functools
import gc
import statistics
import time

import numpy as np

from .. import accuracy, gemm
from ..errors import ConfigError
from ..runtime import arrays, driver, graph
from .suite import torch_bf16

RUN = "run (host arrays)"
MATMUL_SAME = "matmul (same arrays)"
MATMUL_NEW = "matmul (new out)"
PLAN_LAUNCH = "plan.launch"
GRAPH_REPLAY = "graph replay"
TORCH_OUT = "torch.matmul (out=)"
TORCH_NEW = "torch.matmul"
PTXGEMM_NAMES = (RUN, MATMUL_SAME, MATMUL_NEW, PLAN_LAUNCH, GRAPH_REPLAY)
TORCH_NAMES = (TORCH_OUT, TORCH_NEW)
NAMES = PTXGEMM_NAMES + TORCH_NAMES

DEFAULT_SHAPE = (256, 256, 256)   # a kernel of microseconds: the GPU drains the queue about as fast as it fills
RUN_SHAPE = (64, 64, 64)          # run() copies both ways and waits for the result: keep the copies negligible
DEFAULT_CALLS = 200               # per timed loop: modest, so the launch queue never fills
DEFAULT_REPEATS = 5
WARMUP_CALLS = 50                 # per way in, before any timing (first calls compile, select, create handles)
MATMUL_LIMIT = 1.5                # matmul (same arrays) may cost at most this many plan.launch's
STATISTIC = "us_min"              # what the checks and the ratio column compare

CHECK_MATMUL = f"{MATMUL_SAME} <= {MATMUL_LIMIT:g} x {PLAN_LAUNCH}"
CHECK_TORCH = f"{PLAN_LAUNCH} <= torch.matmul"


def parse_shape(text: str, option: str = "--shape") -> tuple[int, int, int]:
    """'MxNxK' -> (M, N, K), each a positive whole number; ConfigError naming `option` otherwise."""
    parts = text.strip().lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ConfigError(f"{option}: {text!r} is not MxNxK with positive whole numbers (e.g. 256x256x256)")
    return tuple(int(p) for p in parts)


def shape_str(shape) -> str:
    return "x".join(str(int(d)) for d in shape)


def check_counts(calls: int, repeats: int) -> None:
    for option, value in (("--calls", calls), ("--repeats", repeats)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{option}: must be a whole number >= 1, got {value!r}")


# --------------------------------------------------------------------------------------------------------------
# Pure parts: rows -> checks -> text (tested without a GPU)
# --------------------------------------------------------------------------------------------------------------

def summarize(name: str, shape, samples_us) -> dict:
    """One row of the result: a way in, its shape and its per-call microseconds over the repeats."""
    samples = [float(s) for s in samples_us]
    return {"name": name, "shape": shape_str(shape), "us_min": min(samples),
            "us_median": statistics.median(samples), "us_samples": samples}


def _by_name(rows) -> dict:
    return {r["name"]: r for r in rows}


def evaluate_checks(rows) -> dict:
    """The two checks, each {ok: True/False/None (not measured), lhs, lhs_us, rhs, rhs_us, factor, statistic}."""
    rows = _by_name(rows)

    def check(lhs: str, rhs_names, factor: float) -> dict:
        present = [rows[n] for n in rhs_names if n in rows]
        rhs = min(present, key=lambda r: r[STATISTIC]) if present else None
        out = {"lhs": lhs, "lhs_us": rows[lhs][STATISTIC] if lhs in rows else None,
               "rhs": rhs["name"] if rhs else " or ".join(rhs_names),
               "rhs_us": rhs[STATISTIC] if rhs else None, "factor": factor, "statistic": STATISTIC}
        out["ok"] = (None if out["lhs_us"] is None or out["rhs_us"] is None
                     else out["lhs_us"] <= factor * out["rhs_us"])
        return out

    return {CHECK_MATMUL: check(MATMUL_SAME, (PLAN_LAUNCH,), MATMUL_LIMIT),
            CHECK_TORCH: check(PLAN_LAUNCH, TORCH_NAMES, 1.0)}


def checks_passed(checks: dict) -> bool:
    """No check failed (one that could not be evaluated, e.g. without torch, does not count as failing)."""
    return all(c["ok"] is not False for c in checks.values())


def format_check(name: str, c: dict) -> str:
    if c["ok"] is None:
        missing = c["lhs"] if c["lhs_us"] is None else c["rhs"]
        return f"SKIP {name}: {missing} not measured"
    verdict = "PASS" if c["ok"] else "FAIL"
    bound = (f"{c['factor']:g} x {c['rhs_us']:.2f} us = {c['factor'] * c['rhs_us']:.2f} us" if c["factor"] != 1
             else f"{c['rhs_us']:.2f} us")
    return (f"{verdict} {name}: {c['lhs']} {c['lhs_us']:.2f} us {'<=' if c['ok'] else '>'} {c['rhs']} {bound} "
            f"({c['statistic'].removeprefix('us_')} over repeats)")


def format_report(result: dict) -> str:
    """The table and the check lines of a `measure` result (or any dict with its keys: rows, checks, calls,
    repeats, gpu, driver, torch)."""
    rows = result["rows"]
    base = _by_name(rows).get(PLAN_LAUNCH)
    lines = [f"# {result.get('gpu', '?')}, driver {result.get('driver', '?')}: host microseconds per call "
             f"(perf_counter around {result['calls']} calls, {result['repeats']} repeats; min and median over "
             f"repeats; the ratio and the checks use the min)"]
    header = f"{'name':<22} {'shape':<14} {'min us':>9} {'median us':>10} {'x plan.launch':>14}"
    lines += [header, "-" * len(header)]
    for r in rows:
        ratio = f"{r[STATISTIC] / base[STATISTIC]:.2f}" if base and base[STATISTIC] > 0 else "-"
        lines.append(f"{r['name']:<22} {r['shape']:<14} {r['us_min']:>9.2f} {r['us_median']:>10.2f} {ratio:>14}")
    if not any(r["name"] in TORCH_NAMES for r in rows):
        lines.append(f"torch: {result.get('torch') or 'not installed'}")
    lines += [format_check(name, c) for name, c in result["checks"].items()]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------------------
# Measurement (needs an sm_90 GPU)
# --------------------------------------------------------------------------------------------------------------

def time_per_call(fn, calls: int) -> float:
    """Microseconds per call of `fn()` over one loop of `calls` calls."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def _torch():
    """(torch, its version) when torch is importable and sees a GPU, else (None, why not)."""
    try:
        import torch
    except ImportError:
        return None, "not installed"
    if not torch.cuda.is_available():
        return None, f"{torch.__version__} installed, but it sees no CUDA device"
    return torch, torch.__version__


def _require_gpu():
    reason = driver.no_device_reason()
    if reason is not None:
        raise ConfigError(f"bench --host runs the kernels, so it needs an sm_90 GPU (H100/H200), and there is none "
                          f"here: {reason.rstrip('.')}")
    return driver.require_sm90("measuring the host cost of a GEMM call")


def measure(shape=DEFAULT_SHAPE, run_shape=RUN_SHAPE, calls: int = DEFAULT_CALLS, repeats: int = DEFAULT_REPEATS,
            *, use_torch: bool = True, seed: int = 0) -> dict:
    """Host microseconds per call of every way in (see the module docstring); returns the JSON-ready result:
    {gpu, driver, shape, run_shape, calls, repeats, warmup, torch, rows: [{name, shape, us_min, us_median,
    us_samples}], checks}. torch's rows only when torch is importable, sees a GPU and `use_torch`."""
    shape, run_shape = tuple(int(d) for d in shape), tuple(int(d) for d in run_shape)
    check_counts(calls, repeats)
    info = _require_gpu()


    rng = np.random.default_rng(seed)
    m, n, k = shape
    a_np, b_np = accuracy.random_matrix(rng, m, k, "bfloat16"), accuracy.random_matrix(rng, k, n, "bfloat16")
    rm, rn, rk = run_shape
    ra_np, rb_np = accuracy.random_matrix(rng, rm, rk, "bfloat16"), accuracy.random_matrix(rng, rk, rn, "bfloat16")

    stream = driver.Stream()
    # everything on the one stream the calls use: stream-ordered memory is freed on the stream it came from
    a, b = arrays.DeviceArray.from_numpy(a_np, stream=stream), arrays.DeviceArray.from_numpy(b_np, stream=stream)
    out = arrays.DeviceArray.empty((m, n), a_np.dtype, stream=stream)
    plan = gemm.GemmPlan(a, b, out, stream=stream)
    capture = graph.Graph()
    with capture.capture(stream, keep=(plan,)):
        plan.launch(stream)

    # functools.partial rather than lambdas: the same (small) call overhead for every way in
    ways = {RUN: (run_shape, functools.partial(gemm.run, ra_np, rb_np)),
            MATMUL_SAME: (shape, functools.partial(gemm.matmul, a, b, out, stream=stream)),
            # the result is dropped at once, as `c = matmul(a, b)` in a loop drops the last one: its free is in the cost
            MATMUL_NEW: (shape, functools.partial(gemm.matmul, a, b, stream=stream)),
            PLAN_LAUNCH: (shape, functools.partial(plan.launch, stream)),
            GRAPH_REPLAY: (shape, functools.partial(capture.replay, stream))}
    torch, torch_note = _torch() if use_torch else (None, "not measured (use_torch=False)")
    if torch is not None:
        # the same values, on torch's current stream (torch.matmul has no stream argument)
        ta, tb = torch_bf16(torch, a_np), torch_bf16(torch, b_np)
        tc = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
        ways[TORCH_OUT] = (shape, functools.partial(torch.matmul, ta, tb, out=tc))
        ways[TORCH_NEW] = (shape, functools.partial(torch.matmul, ta, tb))

    def settle():
        # cuCtxSynchronize waits for every stream of the primary context, which torch shares
        driver.synchronize("waiting for the GPU between host-cost loops")
        gc.collect()  # every loop starts with nothing for the collector to do

    for _, fn in ways.values():
        for _ in range(WARMUP_CALLS):
            fn()
        settle()
    samples = {name: [] for name in ways}
    names = list(ways)
    for r in range(repeats):
        for name in (names if r % 2 == 0 else names[::-1]):
            settle()
            samples[name].append(time_per_call(ways[name][1], calls))
    settle()
    capture.close()

    rows = [summarize(name, ways[name][0], samples[name]) for name in names]
    return {"gpu": info.name, "driver": info.driver_version_str, "shape": shape_str(shape),
            "run_shape": shape_str(run_shape), "dtype": "bfloat16", "calls": calls, "repeats": repeats,
            "warmup": WARMUP_CALLS, "torch": torch_note, "rows": rows, "checks": evaluate_checks(rows)}
