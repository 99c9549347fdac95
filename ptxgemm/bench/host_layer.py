"""A linear layer's GEMM through every way in, torch's included: the host microseconds per call of
`python -m ptxgemm bench --host layer`, on the same arrays every call and on activations at addresses never seen
before (issue 46: plans are keyed by shape, so new addresses must cost nothing more), and the binding choices
behind it (encoding a tensor map per call against moving an encoded one).

Its method and rows are in the section comment below; ptxgemm.bench.host_cost has the other host measurement (the
ways into ptxgemm on a small problem) and the helpers both use. torch is imported only inside `measure_calls`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import gc
import statistics
import time

import numpy as np

from .. import accuracy, gemm
from ..errors import ConfigError
from ..runtime import arrays
from .host_cost import DEFAULT_REPEATS, _require_gpu, _torch, check_counts, shape_str
from .suite import torch_bf16

# ==============================================================================================================
# The layer table (`bench --host layer`): a linear layer's GEMM through every way in, torch's included
# ==============================================================================================================
#
# The shape is host-bound: 64 x 4096 x 4096 bf16, x (M, K) times a weight stored as nn.Linear stores it, (N, K)
# (out_features x in_features), read as its transpose. Each row is one way of making that call; "same" calls it on
# one x every time, "new" on an activation at an address never seen before in the process on every call (views of
# one preallocated buffer at consecutive ADDRESS_STEP-byte offsets, never reused, a fresh set for each loop); the
# weight is the same in both, as in a model, and every result is a new allocation (torch's allocator or ptxgemm's
# pool).
#
# Method: the wall time of back-to-back calls. time.perf_counter from the start of a loop of `calls` calls to the
# end of the synchronize after it (so queued work is counted), divided by `calls`: max(host, GPU) per call, the
# kernel itself taking about 8-10 us at this shape. The loop's issue time alone (to the loop's end, before the
# synchronize) is kept beside it as `us_issue`. WARMUP_CALLS warm-up calls per row first (the first call of a new
# signature plans); `repeats` loops per row, interleaved across the rows with the order alternating each repeat;
# `us_per_call` is the median over repeats (min and max kept). The torch rows run under torch.no_grad() ("grad":
# false); F.linear and pt.Linear again with autograd recording (the weight requires grad, forward only, "grad":
# true: informational). Every ptxgemm row (and torch's) runs on torch's current stream, which ptxgemm.matmul is given
# as its raw handle; ptxgemm.run takes numpy arrays and no stream (the legacy default stream), and copies 32 MB up
# per call: it is informational and gets calls // 10 calls per loop.

LAYER_SHAPE = (64, 4096, 4096)   # M, N, K: x (M, K), weight (N, K), out (M, N)
LAYER_CALLS = 300
LAYER_WARMUP = 50                # warm-up calls per row (ptxgemm.run: LAYER_WARMUP // RUN_DIVISOR)
RUN_DIVISOR = 10                 # ptxgemm.run's calls per loop: calls // RUN_DIVISOR (at least 1)
ADDRESS_STEP = 512               # bytes between consecutive "new" activations (a multiple of TMA's 16-byte base)
LAYER_STATISTIC = "us_per_call"  # the median over repeats: what the bars compare
LINEAR_LIMIT = 1.25              # pt.Linear may cost this many F.linear's
MATMUL_LIMIT_US = 15.0           # ptxgemm.matmul on device arrays, us per call
AGREE_TOLERANCE = 0.02           # max |y - F.linear| / max |F.linear| of each way's result

F_LINEAR = "F.linear"
NN_LINEAR = "nn.Linear"
PT_LINEAR = "pt.Linear"
PT_MM = "pt.mm"
MATMUL = "ptxgemm.matmul"
MATMUL_TORCH = "ptxgemm.matmul (torch tensors)"
RUN_NUMPY = "ptxgemm.run"
SAME, NEW = "same", "new"
ADDRESS_MODES = (SAME, NEW)

#: what each row calls (x: the activation of the call; w: the weight, (N, K); b: w as a (K, N) DeviceArray view)
EXPRESSIONS = {
    F_LINEAR: "torch.nn.functional.linear(x, w)",
    NN_LINEAR: "nn.Linear(K, N, bias=False)(x): torch's own module (its call's overhead, beside F.linear)",
    PT_LINEAR: "ptxgemm.torch.Linear.from_linear(nn.Linear(K, N, bias=False))(x)",
    PT_MM: "ptxgemm.torch.mm(x, w.t())",
    MATMUL: "ptxgemm.matmul(a, b, stream=s): DeviceArrays, b = w's DeviceArray viewed (K, N) with strides "
            "(2, 2K), the result allocated by matmul",
    MATMUL_TORCH: "ptxgemm.matmul(x, w.t(), stream=s): torch tensors through DLPack",
    RUN_NUMPY: "ptxgemm.run(x_np, w_np.T): numpy in (32 MB uploaded per call), numpy out",
}
#: the rows, in the table's order: (call, addresses, grad)
LAYER_ROWS = tuple((call, mode, False) for mode in ADDRESS_MODES
                   for call in (F_LINEAR, NN_LINEAR, PT_LINEAR, PT_MM, MATMUL, MATMUL_TORCH)) + \
    tuple((call, mode, True) for mode in ADDRESS_MODES for call in (F_LINEAR, PT_LINEAR)) + \
    ((RUN_NUMPY, SAME, False),)
#: the calls that go through ptxgemm's entry points (plan_stats counts them)
PTXGEMM_CALLS = (PT_LINEAR, PT_MM, MATMUL, MATMUL_TORCH, RUN_NUMPY)

# the binding choices (the issue's "measure each choice"), host time per call
BIND_ENCODE = "tensormap.encode(spec at a new address)"
BIND_REPLACE_BINDINGS = "replace_address(tmap, new address, route='bindings')"
BIND_REPLACE_CTYPES = "replace_address(tmap, new address, route='ctypes')"
BIND_LAUNCH = "plan.launch(s)"
BIND_LAUNCH_AT = "plan.launch_at(new ptrs, s)"
BINDING_NAMES = (BIND_ENCODE, BIND_REPLACE_BINDINGS, BIND_REPLACE_CTYPES, BIND_LAUNCH, BIND_LAUNCH_AT)

CHECK_LINEAR = f"{PT_LINEAR} <= {LINEAR_LIMIT:g} x {F_LINEAR}"
CHECK_MATMUL_US = f"{MATMUL} <= {MATMUL_LIMIT_US:g} us"
CHECK_PLANS = "no plans made in the timed loops"
CHECK_AGREE = f"results agree with {F_LINEAR}"

METHOD = ("wall time of back-to-back calls: time.perf_counter from the start of a loop of `calls` calls to the end of "
          "the synchronize after it, divided by `calls` (max(host, GPU) per call), after warm-up calls; `repeats` "
          "loops per row interleaved across rows in alternating order; us_per_call is the median over repeats")


def check_key(check: str, addresses: str) -> str:
    """The name of a bar's check for one address mode, e.g. 'pt.Linear <= 1.25 x F.linear (new addresses)'."""
    return f"{check} ({addresses} addresses)"


def row_label(call: str, addresses: str, grad: bool) -> str:
    """A row's name in the table and in messages: 'pt.Linear [new]', 'F.linear [same, grad]'."""
    return f"{call} [{addresses}{', grad' if grad else ''}]"


def run_calls(calls: int) -> int:
    """ptxgemm.run's calls per loop for `calls` (it copies 32 MB per call)."""
    return max(1, calls // RUN_DIVISOR)


def fresh_needed(new_ways: int, calls: int, repeats: int, warmup: int = LAYER_WARMUP) -> int:
    """How many never-reused activations `new_ways` rows on new addresses take: warm-up and every timed loop."""
    return new_ways * (warmup + repeats * calls)


def buffer_elements(count: int, shape_mk, itemsize: int, step: int = ADDRESS_STEP) -> int:
    """Elements of a buffer holding `count` (M, K) row-major views at consecutive `step`-byte offsets."""
    m, k = shape_mk
    return (count - 1) * step // itemsize + m * k if count else 0


class FreshOffsets:
    """Byte offsets into one buffer, each handed out once: 0, step, 2 step, ... (so each view made at one sits at an
    address no earlier view had). `take(n, make)` gives the next n as make(offset)."""

    def __init__(self, capacity: int, step: int = ADDRESS_STEP):
        self.capacity, self.step, self.used = int(capacity), int(step), 0

    def take(self, n: int, make) -> list:
        if self.used + n > self.capacity:
            raise RuntimeError(f"fresh addresses: {n} more asked, {self.capacity - self.used} of {self.capacity} left")
        first, self.used = self.used, self.used + n
        return [make(i * self.step) for i in range(first, first + n)]


# --------------------------------------------------------------------------------------------------------------
# Pure parts of the layer table: samples -> rows -> checks -> text (tested without a GPU or torch)
# --------------------------------------------------------------------------------------------------------------

def counter_delta(before: dict, after: dict) -> dict:
    """What ptxgemm.plan_stats() counted between two readings: plans made, plan hits, entry-point calls, host us."""
    return {"plans_made": after["plans_made"] - before["plans_made"],
            "plan_hits": after["plan_hits"] - before["plan_hits"],
            "calls": after["calls"] - before["calls"], "host_us": after["host_us"] - before["host_us"]}


def add_counts(total: dict | None, delta: dict) -> dict:
    return dict(delta) if total is None else {k: total[k] + delta[k] for k in total}


def _spread(samples) -> dict:
    samples = [float(s) for s in samples]
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples), "samples": samples}


def layer_row(call: str, addresses: str, grad: bool, shape, calls: int, wall_us, issue_us, counts: dict | None = None,
              note: str | None = None) -> dict:
    """One row of the layer table from its per-repeat samples (microseconds per call): wall (loop start to the end of
    the synchronize after it) and issue (to the loop's end); `counts`, ptxgemm.plan_stats()'s differences summed
    over the timed loops, for the rows that go through ptxgemm."""
    wall, issue = _spread(wall_us), _spread(issue_us)
    row = {"call": call, "addresses": addresses, "grad": bool(grad), "expr": EXPRESSIONS.get(call, call),
           "shape": shape_str(shape), "calls": int(calls),
           "us_per_call": wall["median"], "us_min": wall["min"], "us_max": wall["max"], "us_samples": wall["samples"],
           "us_issue": issue["median"], "us_issue_samples": issue["samples"]}
    if counts is not None:
        row.update(plans_made=counts["plans_made"], plan_hits=counts["plan_hits"], counted_calls=counts["calls"],
                   host_us_per_call=counts["host_us"] / counts["calls"] if counts["calls"] else None)
    if note:
        row["note"] = note
    return row


def binding_row(what: str, calls: int, issue_us, wall_us, note: str | None = None) -> dict:
    """One binding choice: us_per_call is the issue time (perf_counter around the loop alone), median over repeats;
    us_wall adds the synchronize after the loop (the GPU's time, for the launches)."""
    issue, wall = _spread(issue_us), _spread(wall_us)
    row = {"what": what, "calls": int(calls), "us_per_call": issue["median"], "us_min": issue["min"],
           "us_max": issue["max"], "us_samples": issue["samples"], "us_wall": wall["median"]}
    if note:
        row["note"] = note
    return row


def _index(rows) -> dict:
    return {(r["call"], r["addresses"], bool(r["grad"])): r for r in rows}


def _bar(lhs: str, lhs_row, rhs: str, rhs_us, factor: float, addresses: str) -> dict:
    out = {"lhs": lhs, "lhs_us": lhs_row[LAYER_STATISTIC] if lhs_row else None, "rhs": rhs, "rhs_us": rhs_us,
           "factor": factor, "addresses": addresses, "grad": False, "statistic": LAYER_STATISTIC}
    out["ok"] = None if out["lhs_us"] is None or rhs_us is None else out["lhs_us"] <= factor * rhs_us
    return out


def evaluate_layer_checks(rows, agree: dict | None = None) -> dict:
    """The issue's bars, each for both address modes, on us_per_call (the median) of the rows without autograd:
    pt.Linear <= 1.25 x F.linear, ptxgemm.matmul (DeviceArrays) <= 15 us; then no plan made in any timed loop of a
    row through ptxgemm's cache (ptxgemm.run plans every call by design: left out), and, when `agree` ({row label:
    max |y - F.linear| / max |F.linear|}) is given, every way's result agreeing with F.linear's. Each check:
    {ok: True/False/None (not measured), ...}."""
    idx = _index(rows)
    checks = {}
    for mode in ADDRESS_MODES:
        ref = idx.get((F_LINEAR, mode, False))
        checks[check_key(CHECK_LINEAR, mode)] = _bar(PT_LINEAR, idx.get((PT_LINEAR, mode, False)), F_LINEAR,
                                                     ref[LAYER_STATISTIC] if ref else None, LINEAR_LIMIT, mode)
    for mode in ADDRESS_MODES:
        checks[check_key(CHECK_MATMUL_US, mode)] = _bar(MATMUL, idx.get((MATMUL, mode, False)),
                                                        f"{MATMUL_LIMIT_US:g} us", MATMUL_LIMIT_US, 1.0, mode)
    made = {row_label(r["call"], r["addresses"], r["grad"]): r["plans_made"] for r in rows
            if r.get("plans_made") is not None and r["call"] != RUN_NUMPY}
    checks[CHECK_PLANS] = {"ok": all(n == 0 for n in made.values()) if made else None, "plans_made": made,
                           "statistic": "plans_made"}
    if agree is not None:
        worst = max(agree.values(), default=None)
        checks[CHECK_AGREE] = {"ok": None if worst is None else worst <= AGREE_TOLERANCE, "max_rel_err": dict(agree),
                               "tolerance": AGREE_TOLERANCE, "statistic": "max |y - F.linear| / max |F.linear|"}
    return checks


def format_layer_check(name: str, c: dict) -> str:
    if c["ok"] is None:
        return f"SKIP {name}: not measured"
    verdict = "PASS" if c["ok"] else "FAIL"
    if name == CHECK_PLANS:
        bad = {k: v for k, v in c["plans_made"].items() if v}
        return f"{verdict} {name}: " + (f"{len(c['plans_made'])} rows, none made a plan" if not bad else
                                        "; ".join(f"{k} made {v}" for k, v in bad.items()))
    if name == CHECK_AGREE:
        worst = max(c["max_rel_err"], key=c["max_rel_err"].get)
        return (f"{verdict} {name}: the largest max |y - F.linear| / max |F.linear| is "
                f"{c['max_rel_err'][worst]:.2g} ({worst}) {'<=' if c['ok'] else '>'} {c['tolerance']:g}")
    rel = "<=" if c["ok"] else ">"
    if c["rhs"] == F_LINEAR:
        bound = f"{c['factor']:g} x {c['rhs_us']:.2f} us = {c['factor'] * c['rhs_us']:.2f} us"
    else:
        bound = f"{c['rhs_us']:.2f} us"
    return f"{verdict} {name}: {c['lhs']} {c['lhs_us']:.2f} us {rel} {bound} (median over repeats, no grad)"


def _cell(value, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def format_layer_report(result: dict) -> str:
    """The layer table, the binding table and the check lines of a `measure_calls` result (or any dict with its
    keys: gpu, driver, torch, shape, calls, repeats, rows, binding, checks; stream optional)."""
    rows = result["rows"]
    idx = _index(rows)
    lines = [f"# {result.get('gpu', '?')}, driver {result.get('driver', '?')}, torch {result.get('torch', '?')}: "
             f"{result['shape']} bf16 (M x N x K: x (M, K), weight (N, K) as nn.Linear stores it), wall us per call of "
             f"back-to-back calls (perf_counter from the loop's start to the end of the synchronize after "
             f"{result['calls']} calls; median, min and max over {result['repeats']} repeats); issue: the loop "
             f"alone; plans and host us: ptxgemm.plan_stats() over the timed loops"]
    if result.get("stream"):
        lines.append(f"# stream: {result['stream']}")
    header = (f"{'call':<31} {'addr':<4} {'grad':<4} {'calls':>5} {'median us':>9} {'min us':>7} {'max us':>7} "
              f"{'issue us':>8} {'x F.linear':>10} {'plans':>5} {'host us':>7}")
    lines += [header, "-" * len(header)]
    for r in rows:
        ref = idx.get((F_LINEAR, r["addresses"], bool(r["grad"])))
        ratio = r[LAYER_STATISTIC] / ref[LAYER_STATISTIC] if ref and ref[LAYER_STATISTIC] > 0 else None
        lines.append(f"{r['call']:<31} {r['addresses']:<4} {'yes' if r['grad'] else 'no':<4} {r['calls']:>5} "
                     f"{r['us_per_call']:>9.2f} {r['us_min']:>7.2f} {r['us_max']:>7.2f} "
                     f"{_cell(r.get('us_issue'), '.2f'):>8} {_cell(ratio, '.2f'):>10} "
                     f"{_cell(r.get('plans_made'), 'd'):>5} {_cell(r.get('host_us_per_call'), '.2f'):>7}")
    notes = [f"{row_label(r['call'], r['addresses'], r['grad'])}: {r['note']}" for r in rows if r.get("note")]
    lines += [f"note: {n}" for n in notes]
    if result.get("binding"):
        lines.append("")
        lines.append("binding choices: host us per call (issue time, median over repeats; wall adds the synchronize)")
        bheader = f"{'what':<56} {'us/call':>8} {'min us':>7} {'wall us':>8}"
        lines += [bheader, "-" * len(bheader)]
        for b in result["binding"]:
            lines.append(f"{b['what']:<56} {b['us_per_call']:>8.2f} {b['us_min']:>7.2f} "
                         f"{_cell(b.get('us_wall'), '.2f'):>8}")
        lines += [f"note: {b['what']}: {b['note']}" for b in result["binding"] if b.get("note")]
    lines.append("")
    lines += [format_layer_check(name, c) for name, c in result["checks"].items()]
    return "\n".join(lines)


def layer_result(*, gpu: str, driver_version: str, torch_version: str, shape, calls: int, repeats: int, rows,
                 binding, agree: dict | None = None, stream: str | None = None, warmup: int = LAYER_WARMUP) -> dict:
    """The JSON-ready result of measure_calls from its measured parts (the checks evaluated here)."""
    rows, binding = list(rows), list(binding)
    return {"gpu": gpu, "driver": driver_version, "torch": torch_version, "shape": shape_str(shape),
            "dtype": "bfloat16", "calls": int(calls), "run_calls": run_calls(calls), "repeats": int(repeats),
            "warmup": int(warmup), "address_step": ADDRESS_STEP, "stream": stream, "method": METHOD, "rows": rows,
            "binding": binding, "agree": agree, "checks": evaluate_layer_checks(rows, agree)}


# --------------------------------------------------------------------------------------------------------------
# The loop machinery (no GPU in it: the synchronize and the counters are passed in)
# --------------------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Way:
    """One row's call: `fn(item)` for each item of `items(n)` (n items: the same one n times, or n fresh ones; made
    before the timed window), `calls` per timed loop, `warmup` calls first, inside `mode()` (torch.no_grad(), ...)
    around the whole loop; `counted`: read ptxgemm's counters around each timed loop."""

    fn: object
    items: object
    calls: int
    warmup: int = LAYER_WARMUP
    mode: object = contextlib.nullcontext
    counted: bool = False


def same_items(x):
    """items(n) of a way that calls on `x` every time."""
    return lambda n: [x] * n


def time_calls(fn, items, sync) -> tuple[float, float]:
    """(wall, issue) microseconds per call of fn(item) over `items`: wall from the loop's start to the end of
    `sync()` after it, issue to the loop's end."""
    start = time.perf_counter()
    for x in items:
        fn(x)
    issued = time.perf_counter()
    sync()
    end = time.perf_counter()
    n = len(items)
    return (end - start) / n * 1e6, (issued - start) / n * 1e6


def time_ways(ways: dict, repeats: int, sync, stats=None) -> dict:
    """Every way warmed up (its `warmup` calls, then `sync()`), then `repeats` timed loops each, interleaved across
    the ways with the order reversed every other repeat, `sync()` and gc.collect() before each loop. Returns {name:
    {"wall": [us per call per repeat], "issue": [...], "counts": summed counter_delta or None}}; `stats()` (ptxgemm's
    plan_stats) is read before and after each timed loop of a counted way."""
    for way in ways.values():
        items = way.items(way.warmup)
        with way.mode():
            for x in items:
                way.fn(x)
        sync()
    out = {name: {"wall": [], "issue": [], "counts": None} for name in ways}
    names = list(ways)
    for r in range(repeats):
        for name in (names if r % 2 == 0 else names[::-1]):
            way = ways[name]
            items = way.items(way.calls)
            sync()
            gc.collect()
            before = stats() if way.counted and stats else None
            with way.mode():
                wall, issue = time_calls(way.fn, items, sync)
            if before is not None:
                out[name]["counts"] = add_counts(out[name]["counts"], counter_delta(before, stats()))
            out[name]["wall"].append(wall)
            out[name]["issue"].append(issue)
    return out


def rel_error(y, ref) -> float:
    """max |y - ref| / max |ref| of two float arrays (numpy)."""
    y, ref = np.asarray(y, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    scale = float(np.max(np.abs(ref))) or 1.0
    return float(np.max(np.abs(y - ref))) / scale


# --------------------------------------------------------------------------------------------------------------
# measure_calls (needs an sm_90 GPU and torch)
# --------------------------------------------------------------------------------------------------------------

def _require_torch(what: str = "bench --host layer"):
    torch, note = _torch()
    if torch is None:
        raise ConfigError(f"{what} times torch's F.linear and ptxgemm.torch beside ptxgemm, so it needs torch with a "
                          f"CUDA device (pip install 'ptxgemm[torch]'); torch: {note}")
    return torch


def measure_calls(shape=LAYER_SHAPE, calls: int = LAYER_CALLS, repeats: int = DEFAULT_REPEATS, *, seed: int = 0,
                  binding: bool = True) -> dict:
    """Microseconds per call of a linear layer's GEMM (x (M, K) @ weight (N, K)^T, bf16; 64x4096x4096 by default)
    through each way in -- F.linear, pt.Linear, pt.mm, ptxgemm.matmul on DeviceArrays and on torch tensors, ptxgemm.run
    on numpy -- on the same x every call and on an x at a new address every call: the wall time of back-to-back calls
    (see the section's comment: perf_counter from the loop's start to the end of the synchronize after it, over
    `calls` calls, so max(host, GPU) per call), median/min/max over `repeats` interleaved loops. Also ptxgemm's own
    counters over the timed loops (plans made: 0 in steady state, new addresses included), the binding choices'
    host cost (`binding`), and each way's result against F.linear's. Returns layer_result's dict."""
    shape = tuple(int(d) for d in shape)
    check_counts(calls, repeats)
    info = _require_gpu()
    torch = _require_torch()
    import ptxgemm.torch as pt

    from ..plan.cache import plan_stats
    from ..runtime import tensormap

    F = torch.nn.functional
    m, n, k = shape
    rng = np.random.default_rng(seed)
    x_np, w_np = accuracy.random_matrix(rng, m, k, "bfloat16"), accuracy.random_matrix(rng, n, k, "bfloat16")
    bf16 = x_np.dtype
    s = torch.cuda.current_stream().cuda_stream   # one stream for every row: torch's current one, as a raw handle
    sync = torch.cuda.synchronize                  # every stream of the device (ptxgemm shares torch's context)

    # torch's side: the layer as a model holds it, its weight (N, K); x and the buffer of new activations
    lin = torch.nn.Linear(k, n, bias=False, dtype=torch.bfloat16, device="cuda")
    with torch.no_grad():
        lin.weight.copy_(torch_bf16(torch, w_np))
    layer = pt.Linear.from_linear(lin)
    w = lin.weight.detach()          # the same memory, no autograd (DLPack refuses a tensor that requires grad)
    x = torch_bf16(torch, x_np)
    torch_new = [key for key in LAYER_ROWS if key[1] == NEW and key[0] != MATMUL]   # rows on new torch tensors
    count_t = fresh_needed(len(torch_new), calls, repeats)
    tbuf = torch.randn(buffer_elements(count_t, (m, k), 2), device="cuda").to(torch.bfloat16)
    fresh_t = FreshOffsets(count_t)

    def torch_x(offset: int):
        first = offset // 2
        return tbuf[first:first + m * k].view(m, k)

    # ptxgemm's side: DeviceArrays allocated on s, the weight read as its transpose (K-major, as torch's rows are)
    a = arrays.DeviceArray.from_numpy(x_np, stream=s)
    wd = arrays.DeviceArray.from_numpy(w_np, stream=s)
    b = wd.view((k, n), strides=(bf16.itemsize, k * bf16.itemsize))
    count_d = fresh_needed(1 + (4 if binding else 0), calls, repeats)
    big = rng.standard_normal(buffer_elements(count_d, (m, k), 2), dtype=np.float32).astype(bf16)
    dbuf = arrays.DeviceArray.from_numpy(big, stream=s)
    fresh_d = FreshOffsets(count_d)

    def device_x(offset: int):
        return dbuf.view((m, k), offset=offset)

    def new_items(fresh, make):
        return lambda count: fresh.take(count, make)

    no_grad, enable_grad = torch.no_grad, torch.enable_grad
    matmul = gemm.matmul
    w_param = lin.weight
    ways, notes = {}, {}
    for mode in ADDRESS_MODES:
        tx = same_items(x) if mode == SAME else new_items(fresh_t, torch_x)
        dx = same_items(a) if mode == SAME else new_items(fresh_d, device_x)
        ways[(F_LINEAR, mode, False)] = Way(lambda x_: F.linear(x_, w), tx, calls, mode=no_grad)
        ways[(NN_LINEAR, mode, False)] = Way(lambda x_: lin(x_), tx, calls, mode=no_grad)
        ways[(PT_LINEAR, mode, False)] = Way(lambda x_: layer(x_), tx, calls, mode=no_grad, counted=True)
        ways[(PT_MM, mode, False)] = Way(lambda x_: pt.mm(x_, w.t()), tx, calls, mode=no_grad, counted=True)
        ways[(MATMUL, mode, False)] = Way(lambda x_: matmul(x_, b, stream=s), dx, calls, counted=True)
        ways[(MATMUL_TORCH, mode, False)] = Way(lambda x_: matmul(x_, w.t(), stream=s), tx, calls, mode=no_grad,
                                                counted=True)
    for mode in ADDRESS_MODES:
        tx = same_items(x) if mode == SAME else new_items(fresh_t, torch_x)
        ways[(F_LINEAR, mode, True)] = Way(lambda x_: F.linear(x_, w_param), tx, calls, mode=enable_grad)
        ways[(PT_LINEAR, mode, True)] = Way(lambda x_: layer(x_), tx, calls, mode=enable_grad, counted=True)
    w_t_np = w_np.T
    rc = run_calls(calls)
    ways[(RUN_NUMPY, SAME, False)] = Way(lambda x_: gemm.run(x_, w_t_np), same_items(x_np), rc,
                                         warmup=max(1, LAYER_WARMUP // RUN_DIVISOR), counted=True)
    notes[(RUN_NUMPY, SAME, False)] = (f"numpy arrays: uploads x and w^T ({w_np.nbytes >> 20} MB) and downloads the "
                                       f"result on every call (legacy default stream); {rc} calls per loop "
                                       f"(calls // {RUN_DIVISOR}); plans every call by design; informational")
    for mode in ADDRESS_MODES:
        notes[(F_LINEAR, mode, True)] = notes[(PT_LINEAR, mode, True)] = \
            "autograd recording: the weight requires grad, forward only; informational"
    ways = {key: ways[key] for key in LAYER_ROWS}   # the table's order is the timing's

    samples = time_ways(ways, repeats, sync, plan_stats)

    # each way's result against F.linear's (after the timing: the warm-up made every plan already)
    with torch.no_grad():
        ref = F.linear(x, w).float().cpu().numpy()
        got = {NN_LINEAR: lin(x), PT_LINEAR: layer(x), PT_MM: pt.mm(x, w.t())}
        got = {name: t.float().cpu().numpy() for name, t in got.items()}
        got[MATMUL] = matmul(a, b, stream=s).to_numpy().astype(np.float32)
        got[MATMUL_TORCH] = matmul(x, w.t(), stream=s).to_numpy().astype(np.float32)
        got[RUN_NUMPY] = gemm.run(x_np, w_t_np).astype(np.float32)
    sync()
    agree = {name: rel_error(y, ref) for name, y in got.items()}

    rows = [layer_row(call, mode, grad, shape, ways[(call, mode, grad)].calls, samples[(call, mode, grad)]["wall"],
                      samples[(call, mode, grad)]["issue"], samples[(call, mode, grad)]["counts"],
                      notes.get((call, mode, grad))) for call, mode, grad in LAYER_ROWS]
    bind_rows = _measure_binding(tensormap, a, b, s, fresh_d, device_x, calls, repeats, sync) if binding else []
    sync()
    return layer_result(gpu=info.name, driver_version=info.driver_version_str, torch_version=torch.__version__,
                        shape=shape, calls=calls, repeats=repeats, rows=rows, binding=bind_rows, agree=agree,
                        stream=f"torch.cuda.current_stream() (handle {s:#x}), given to ptxgemm.matmul as that raw "
                               f"handle; pt.* use it themselves; ptxgemm.run: the legacy default stream")


def _measure_binding(tensormap, a, b, s, fresh, device_x, calls: int, repeats: int, sync) -> list:
    """The binding choices' host time per call (issue time): encoding a GemmPlan's tmap_a spec anew at a new address,
    moving an encoded map to a new address through each replace_address route, the prepared launch alone, and
    launch_at with a new activation each call. The maps of the first three are never launched; launch_at's are
    real views."""
    m, k = a.shape
    out = arrays.DeviceArray.empty((m, b.shape[1]), a.dtype, stream=s)
    plan = gemm.GemmPlan(a, b, out, stream=s)
    spec = plan.tmaps["tmap_a"].spec
    tmap = tensormap.encode(spec)      # a map of its own: the plan's stays where the plan bound it
    base = device_x(0).ptr

    def specs(count):
        return fresh.take(count, lambda off: dataclasses.replace(spec, address=base + off))

    def addresses(count):
        return fresh.take(count, lambda off: base + off)

    def ptrs(count):
        return fresh.take(count, lambda off: gemm.addresses({"a": device_x(off), "b": b, "out": out}))

    launch, launch_at = plan.launch, plan.launch_at
    replace = tensormap.replace_address
    ways = {BIND_ENCODE: Way(tensormap.encode, specs, calls),
            BIND_REPLACE_BINDINGS: Way(lambda p: replace(tmap, p, route="bindings"), addresses, calls),
            BIND_REPLACE_CTYPES: Way(lambda p: replace(tmap, p, route="ctypes"), addresses, calls),
            BIND_LAUNCH: Way(launch, same_items(s), calls),
            BIND_LAUNCH_AT: Way(lambda p: launch_at(p, s), ptrs, calls)}
    samples = time_ways(ways, repeats, sync)
    from ..runtime import libcuda
    ctypes_found = bool(libcuda.function("cuTensorMapReplaceAddress"))
    notes = {BIND_ENCODE: f"cuTensorMapEncodeTiled through cuda.bindings, the spec of a GemmPlan's tmap_a "
                          f"(dims {spec.dims}, box {spec.box}) at a new address; the map is never launched",
             BIND_REPLACE_CTYPES: None if ctypes_found else "libcuda's cuTensorMapReplaceAddress was not found through "
                                                            "ctypes: this route fell back to the bindings'",
             BIND_LAUNCH: "the plan bound once; enqueues only (the kernel's own time shows in us_wall)",
             BIND_LAUNCH_AT: "a new activation address each call: the address slots rewritten, then enqueued"}
    rows = [binding_row(name, calls, samples[name]["issue"], samples[name]["wall"], notes.get(name))
            for name in BINDING_NAMES]
    return rows
