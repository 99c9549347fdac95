"""The grouped GEMM on the device (issue 25): the contiguous and masked forms with empty, single-row and unaligned
groups, G from 1 to 256, every tile the grouped kernel takes, B in both majors, fp16, bf16 and fp8 with per-tensor
scales and an activation; new counts on the same plan, and a CUDA graph replayed after the counts changed in place.

Inputs are random (never zero); `out` is NaN-poisoned first; each group's rows are checked element by element
against the float64 product with ptxgemm.accuracy's bound, and every row outside the groups must still hold its
poison bit for bit (no tile wrote another group's rows, or past a mask).
"""
from __future__ import annotations

import dataclasses
import zlib

import numpy as np
import pytest
from gemm_reference import matmul64, random_matrix

from ptxgemm import accuracy
from ptxgemm.kernel.config import GemmConfig
from ptxgemm.plan import grouped as grouped_rules
from ptxgemm.plan import grouped_call
from ptxgemm.plan.epilogue import m_major_table

gpu = pytest.mark.gpu


def _counts_contiguous(sizes):
    return np.cumsum(sizes).astype(np.int32)


def _b(rng, groups, k, n, dtype, major):
    """(G, K, N): row-major (N contiguous) for major 'mn', a transposed (G, N, K) array for 'k'."""
    mats = [random_matrix(rng, n, k, dtype) if major == "k" else random_matrix(rng, k, n, dtype)
            for _ in range(groups)]
    stack = np.stack(mats)
    return stack.transpose(0, 2, 1) if major == "k" else stack


def _device_b(ptxgemm, b, major):
    if major == "k":   # upload the (G, N, K) array and view it as (G, K, N)
        dev = ptxgemm.to_device(np.ascontiguousarray(b.transpose(0, 2, 1)))
        g, n, k = dev.shape
        item = dev.dtype.itemsize
        return dev.view((g, k, n), (n * k * item, item, k * item))
    return ptxgemm.to_device(np.ascontiguousarray(b))


def _check(out, poisoned, a, b, problem, counts, in_dtype, out_dtype, scale=1.0, activation=None):
    """Each group's rows against the float64 product (times `scale`, through `activation`); every other row bitwise
    the poison."""
    spans = grouped_rules.group_ranges(problem, counts)
    covered = np.zeros(out.shape[:-1], dtype=bool)
    for g, (s, e) in enumerate(spans):
        if e == s:
            continue
        if problem.form == "contiguous":
            rows, got, idx = a[s:e], out[s:e], (slice(s, e),)
        else:
            rows, got, idx = a[g, :e], out[g, :e], (g, slice(0, e))
        covered[idx] = True
        ref, absprod = accuracy.reference(rows, b[g], matmul64)
        if scale == 1.0 and activation is None:
            bound = accuracy.error_bound(ref, absprod, rows.shape[1], out_dtype, in_dtype)
        else:   # the fused epilogue's bound: the scaled accumulation error, the epilogue's roundings, the activation
            pre = scale * ref
            gemm_error = scale * accuracy.accumulation_error(absprod, rows.shape[1], in_dtype)
            ref, bound = accuracy.fused_bound(pre, gemm_error, np.abs(pre), activation, out_dtype)
        verdict = accuracy.check_bound(got.astype(np.float64), ref, bound)
        assert verdict.ok, f"group {g} rows [{s}, {e}): {verdict}"
    bits = out.view(np.uint16 if out.dtype.itemsize == 2 else np.uint32)
    pbits = poisoned.view(bits.dtype)
    assert np.array_equal(bits[~covered], pbits[~covered]), "a row outside every group was written"


#: (name, form, sizes (contiguous) or (M_max, masked_m), N, K, dtype, B major, tile or None)
CASES = (
    ("one-group", "contiguous", [300], 256, 512, "bfloat16", "mn", None),
    ("empty-single-unaligned", "contiguous", [0, 1, 130, 257, 0], 384, 328, "bfloat16", "mn", "coop128x256"),
    ("rows-past-last-end", "contiguous", [70, 0, 190], 256, 256, "bfloat16", "k", "coop128x128"),
    ("fp16-kmajor-8", "contiguous", [33, 517, 64, 128, 1, 255, 0, 300], 512, 1024, "float16", "k", "coop256x128"),
    ("masked-4", "masked", (200, [0, 1, 129, 200]), 256, 256, "bfloat16", "mn", None),
    ("masked-narrow", "masked", (256, [256, 17, 0, 128, 255, 3]), 128, 640, "bfloat16", "k", "coop128x128"),
    ("eleven-unaligned", "contiguous", [33, 0, 517, 1, 64, 255, 128, 0, 300, 7, 130], 384, 256, "bfloat16", "mn",
     "coop128x128"),
    ("masked-many-small", "masked", (64, [5, 64, 0, 33, 1, 64, 17, 0, 63, 2, 40, 9, 64, 0, 30, 11, 50, 8, 64, 3]),
     256, 192, "bfloat16", "k", "coop128x128"),
    # pairs along M (cluster_m 2, B multicast): groups of one tile row (the second CTA idle), of 2 and 3 tile rows,
    # unaligned and empty; the rows after the last end stay unwritten
    ("pair-empty-unaligned", "contiguous", [0, 1, 130, 257, 0, 384, 129], 512, 328, "bfloat16", "mn",
     "coop128x256c2"),
    ("pair-fp16-kmajor-8", "contiguous", [33, 517, 64, 128, 1, 255, 0, 300], 512, 1024, "float16", "k",
     "coop128x256c2"),
    ("pair-rows-past-last-end", "contiguous", [70, 0, 190], 256, 256, "bfloat16", "k", "coop256x128c2"),
    ("pair-masked", "masked", (300, [300, 17, 0, 129, 256, 3]), 256, 640, "bfloat16", "k", "coop128x128c2"),
)


def _make(rng, form, sizes, n, k, dtype, major):
    if form == "contiguous":
        total = sum(sizes) + (37 if sizes == [70, 0, 190] else 0)   # rows after the last end stay unwritten
        counts = _counts_contiguous(sizes)
        a = random_matrix(rng, total, k, dtype)
        groups = len(sizes)
    else:
        m_max, masked = sizes
        groups = len(masked)
        counts = np.array(masked, dtype=np.int32)
        a = np.stack([random_matrix(rng, m_max, k, dtype) for _ in range(groups)])
    return a, _b(rng, groups, k, n, dtype, major), counts


@gpu
@pytest.mark.parametrize("name, form, sizes, n, k, dtype, major, tag", CASES, ids=[c[0] for c in CASES])
def test_grouped_case(name, form, sizes, n, k, dtype, major, tag):
    import ptxgemm

    rng = np.random.default_rng(zlib.crc32(name.encode()))
    a, b, counts = _make(rng, form, sizes, n, k, dtype, major)
    out_shape = (a.shape[0], n) if form == "contiguous" else (a.shape[0], a.shape[1], n)
    out = ptxgemm.DeviceArray.empty(out_shape, np.dtype(accuracy.DTYPES[dtype]))
    out.poison()
    poisoned = out.to_numpy()
    config = GemmConfig.from_tag(tag) if tag else None
    kw = {"offs": ptxgemm.to_device(counts)} if form == "contiguous" else {"masked_m": ptxgemm.to_device(counts)}
    plan = ptxgemm.GroupedPlan(ptxgemm.to_device(a), _device_b(ptxgemm, b, major), out=out, config=config, **kw)
    assert plan.config.grouped == form and plan.config.b_major == major
    if tag:
        assert plan.config.tag == tag
    plan.launch()
    problem = grouped_rules.parse(a, b, out=poisoned, **{k2: counts for k2 in kw})
    _check(out.to_numpy(), poisoned, a, b, problem, counts, dtype, dtype)


@gpu
@pytest.mark.parametrize("hint", [None, False, "pair"])
def test_many_groups_skewed_and_few_ctas(hint):
    """256 experts with Zipf-drawn counts (many empty, most of one tile row, some of several), on the default grid
    and on 3 CTAs (each walks many units across groups, so the ring's phase and the search carry from group to
    group); with and without the L2 hint on one-row groups' B (GemmConfig.group_stream_hint); and on pairs along M
    (4 CTAs: two clusters), the hint on."""
    import ptxgemm

    rng = np.random.default_rng(25256)
    sizes = np.minimum(rng.zipf(1.3, 256), 600) - 1
    sizes[rng.choice(256, 40, replace=False)] = 0
    k, n = 384, 256
    a = random_matrix(rng, int(sizes.sum()), k, "bfloat16")
    b = _b(rng, 256, k, n, "bfloat16", "mn")
    counts = _counts_contiguous(sizes)
    problem = grouped_rules.parse(a, b, offs=counts)
    for ctas in (None, 4 if hint == "pair" else 3):
        out = ptxgemm.DeviceArray.empty((a.shape[0], n), np.dtype(accuracy.DTYPES["bfloat16"]))
        out.poison()
        poisoned = out.to_numpy()
        config = (None if hint is None else   # None: the default config, the hint on
                  GemmConfig.from_tag("coop128x256c2", grouped="contiguous") if hint == "pair" else
                  GemmConfig.from_tag("coop128x256", grouped="contiguous", group_stream_hint=hint))
        plan = ptxgemm.GroupedPlan(ptxgemm.to_device(a), ptxgemm.to_device(b), offs=ptxgemm.to_device(counts),
                                   out=out, ctas=ctas, config=config)
        assert plan.config.stream_hint == (hint in (None, "pair"))   # on by default
        assert plan.grid % plan.config.cluster_size == 0
        plan.launch()
        _check(out.to_numpy(), poisoned, a, b, problem, counts, "bfloat16", "bfloat16")


@gpu
@pytest.mark.parametrize("form, tag", [("contiguous", None), ("masked", None), ("contiguous", "coop128x256c2")])
def test_fp8_per_tensor_scales_and_activation(form, tag):
    import ptxgemm

    fp8 = "float8_e4m3fn"
    rng = np.random.default_rng(2508 + (form == "masked"))
    k, n = 896, 256
    if form == "contiguous":
        sizes = [0, 200, 1, 333, 64]
        counts = _counts_contiguous(sizes)
        a = random_matrix(rng, sum(sizes), k, fp8)
    else:
        counts = np.array([77, 0, 160, 5], dtype=np.int32)
        a = np.stack([random_matrix(rng, 160, k, fp8) for _ in range(4)])
    b = _b(rng, len(counts), k, n, fp8, "k")
    out_shape = (a.shape[0], n) if form == "contiguous" else (4, 160, n)
    out = ptxgemm.DeviceArray.empty(out_shape, np.dtype(accuracy.DTYPES["bfloat16"]))
    out.poison()
    poisoned = out.to_numpy()
    kw = {"offs" if form == "contiguous" else "masked_m": ptxgemm.to_device(counts)}
    ptxgemm.grouped_matmul(ptxgemm.to_device(a), _device_b(ptxgemm, b, "k"), out=out, scale_a=0.75, scale_b=1.5,
                           activation="silu", config=GemmConfig.from_tag(tag) if tag else None, **kw)
    problem = grouped_rules.parse(a, b, out=poisoned, **{key: counts for key in kw})
    _check(out.to_numpy(), poisoned, a, b, problem, counts, fp8, "bfloat16", scale=1.125, activation="silu")


#: The stream-K tail, cut on the device (streamk.ptx.j2's split_on_device): (name, form, sizes per launch (the same
#: plan, the counts rewritten in place between launches), N, K, dtype, tag or None, ctas). Each launch's counts are
#: checked against the model (ptxgemm.kernel.grouped_walk.tail_schedule) for whether the kernel cuts its tail.
SK_CASES = (
    # one tail unit in 4 shares (3 partials), empty and one-row groups; then counts whose tail is one group's,
    # then counts whose last wave is nearly full (whole units), all on one plan
    ("sk-unaligned-empty", "contiguous", ([0, 1, 130, 257, 0, 384, 129, 700], [1601, 0, 0, 0, 0, 0, 0, 0],
                                          [200, 200, 200, 200, 200, 200, 200, 201]), 512, 2560, "bfloat16",
     "coop128x256sk", 11),
    # pairs: the two tail units are the last group's last unit row, whose second CTA's second half is idle
    ("sk-pair-idle-half", "contiguous", ([0, 1, 130, 257, 0, 384, 129, 700],), 512, 4096, "bfloat16",
     "coop128x256c2sk", 18),
    ("sk-masked-fp16", "masked", ((300, [300, 17, 0, 129, 256, 3]),), 256, 2048, "float16", "coop128x256sk", 4),
    # the default config and grid: 272 units on 132 SMs, the last 8 cut into 4 shares each
    ("sk-default-grid", "contiguous", ([2100, 2100, 0, 2100, 2100],), 1024, 2560, "bfloat16", None, None),
)


@gpu
@pytest.mark.parametrize("name, form, launches, n, k, dtype, tag, ctas", SK_CASES, ids=[c[0] for c in SK_CASES])
def test_the_stream_k_tail(name, form, launches, n, k, dtype, tag, ctas):
    """The grouped kernel's stream-K tail: correct against float64 with poisoned rows outside the groups, the same
    bits on a second launch (partials added in a fixed order, flags left at zero), and new counts on the same plan,
    whether they make the device cut the tail or run whole units."""
    import math

    import ptxgemm
    from ptxgemm.kernel.grouped_walk import tail_schedule, units_per_group

    rng = np.random.default_rng(zlib.crc32(name.encode()))
    a, b, counts = _make(rng, form, launches[0], n, k, dtype, "k")
    out_shape = (a.shape[0], n) if form == "contiguous" else (a.shape[0], a.shape[1], n)
    out = ptxgemm.DeviceArray.empty(out_shape, np.dtype(accuracy.DTYPES[dtype]))
    counts_dev = ptxgemm.to_device(counts)
    kw = {"offs" if form == "contiguous" else "masked_m": counts_dev}
    plan = ptxgemm.GroupedPlan(ptxgemm.to_device(a), _device_b(ptxgemm, b, "k"), out=out, ctas=ctas,
                               config=GemmConfig.from_tag(tag) if tag else None, **kw)
    cfg = plan.config
    assert cfg.stream_k and (tag is None or cfg.tag == tag)
    cut = []
    for sizes in launches:
        counts = (_counts_contiguous(sizes) if form == "contiguous" else np.array(sizes[1], dtype=np.int32))
        counts_dev.copy_from_host(counts)
        values, total = (counts, a.shape[0]) if form == "contiguous" else (counts, a.shape[1])
        units = sum(units_per_group(form, values, total, 0, n, cfg.block_m, cfg.block_n, cfg.cluster_m))
        sk = tail_schedule(units, plan.grid // cfg.cluster_size, math.ceil(k / cfg.block_k), plan.sk_fixup)
        cut.append(sk.stream_k)
        results = []
        for _ in range(2):
            out.poison()
            plan.workspace.poison()   # the previous launch's partials (equal to this one's) must not pass
            poisoned = out.to_numpy()
            plan.launch()
            results.append(out.to_numpy())
        assert np.array_equal(results[0].view(np.uint16), results[1].view(np.uint16)), sizes
        problem = grouped_rules.parse(a, b, out=poisoned, **{key: counts for key in kw})
        _check(results[1], poisoned, a, b, problem, counts, dtype, dtype)
    assert cut[0] and (name != "sk-unaligned-empty" or cut == [True, True, False]), cut


@gpu
def test_new_counts_same_plan_and_graph_replay():
    """One plan, launched with one set of counts, then (in place, on the device) another: the result follows the
    counts. Then a graph captured once and replayed after a third set was written: it follows them too."""
    import ptxgemm
    from ptxgemm.runtime import driver
    from ptxgemm.runtime.graph import Graph

    rng = np.random.default_rng(2525)
    k, n, total = 256, 256, 700
    a = random_matrix(rng, total, k, "bfloat16")
    b = _b(rng, 6, k, n, "bfloat16", "mn")
    counts_dev = ptxgemm.to_device(_counts_contiguous([100, 100, 100, 100, 100, 100]))
    out = ptxgemm.DeviceArray.empty((total, n), np.dtype(accuracy.DTYPES["bfloat16"]))
    plan = ptxgemm.GroupedPlan(ptxgemm.to_device(a), ptxgemm.to_device(b), offs=counts_dev, out=out)
    stream = driver.Stream()
    graph = Graph()
    with graph.capture(stream, keep=(plan,)):
        plan.launch(stream)
    for sizes, runner in (([0, 300, 1, 129, 0, 200], lambda: plan.launch()),
                          ([10, 0, 0, 680, 0, 0], lambda: (graph.replay(stream), stream.synchronize())),
                          ([117, 117, 117, 117, 117, 115], lambda: (graph.replay(stream), stream.synchronize()))):
        counts = _counts_contiguous(sizes)
        counts_dev.copy_from_host(counts)
        out.poison()
        poisoned = out.to_numpy()
        runner()
        problem = grouped_rules.parse(a, b, offs=counts)
        _check(out.to_numpy(), poisoned, a, b, problem, counts, "bfloat16", "bfloat16")


@gpu
def test_device_counts_out_of_range_are_clamped():
    """Device counts the host cannot check (decreasing, past total_M, negative) give clamped ranges, as the walk's
    model says, and never a write outside the groups' clamped rows."""
    import ptxgemm

    rng = np.random.default_rng(2599)
    k, n, total = 256, 128, 300
    a = random_matrix(rng, total, k, "bfloat16")
    b = _b(rng, 4, k, n, "bfloat16", "mn")
    counts = np.array([-5, 200, 150, 10_000], dtype=np.int32)
    out = ptxgemm.DeviceArray.empty((total, n), np.dtype(accuracy.DTYPES["bfloat16"]))
    out.poison()
    poisoned = out.to_numpy()
    ptxgemm.grouped_matmul(ptxgemm.to_device(a), ptxgemm.to_device(b), offs=ptxgemm.to_device(counts), out=out)
    clamped = np.array([0, 200, 200, 300], dtype=np.int32)   # ends: max(0, -5), 200, max(200, 150), min(10000, 300)
    assert grouped_rules.group_ranges(grouped_rules.parse(a, b, offs=clamped), counts) == [(0, 0), (0, 200),
                                                                                          (200, 200), (200, 300)]
    _check(out.to_numpy(), poisoned, a, b, grouped_rules.parse(a, b, offs=clamped), clamped, "bfloat16", "bfloat16")


@gpu
def test_mutants_of_the_grouped_walk_are_killed(tmp_path):
    """The grouped walk's synchronization, driven from the suite: the CTA barrier after warp 0's scan and every
    shuffle of its max- and sum-scans, deleted, are caught on the grouped workloads (device counts that drop over
    whole lanes, so every step of the max-scan matters); the command's exit status checks that no survivor lacks a
    reason."""
    import json
    import subprocess
    import sys

    out = tmp_path / "mutants.json"
    proc = subprocess.run([sys.executable, "-m", "ptxgemm", "mutants", "--preset", "grouped", "--kind", "shfl.sync.up",
                           "--kind", "bar.sync", "--json", str(out)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = json.loads(out.read_text())["configs"][0]["mutants"]
    scan = [r for r in records if ":shfl.sync.up:" in r["id"] and "%run" in r["instruction"]]
    assert len(scan) == 6 and all(r["status"] == "killed" for r in scan), scan
    tables = [r for r in records if ":bar.sync:" in r["id"] and r["mutation"] == "deleted"
              and "after_init" in r["site"]]
    assert len(tables) == 1 and all(r["status"] == "killed" for r in tables), tables


#: the k form (weight gradients): (name, K per group, M, N, dtype, tile or None)
K_CASES = (
    ("k-empty-unaligned", [0, 100, 64, 300], 200, 256, "bfloat16", None),
    ("k-many-fp16", [7, 0, 130, 64, 1, 0, 257, 33, 500, 0, 64, 12, 95], 136, 384, "float16", "coop128x128"),
    ("k-tall-m", [640, 0, 129], 520, 192, "bfloat16", "coop256x128"),
    # a pair along M: M 520 is 5 tile rows, so the last pair's second CTA lies past M and idles
    ("k-pair", [7, 0, 130, 64, 1, 257, 500], 520, 256, "bfloat16", "coop128x256c2"),
    # warp 0's sort (GemmConfig.group_sort) at its default table size: 256 groups, 8 per lane, with many ties
    # (empty groups, one k-tile) and a few long k-loops; and 37 groups, whose last lanes hold fewer or none
    ("k-256-groups-sorted", [0, 0, 3, 64, 65, 1, 0, 700, 128, 5] * 25 + [300] * 6, 136, 128, "bfloat16", None),
    ("k-37-groups-sorted", [int(x) for x in np.random.default_rng(37).integers(0, 200, 37)], 64, 256, "float16",
     "coop128x128"),
)


@gpu
@pytest.mark.parametrize("sort", [None, False], ids=["sorted", "index-order"])
@pytest.mark.parametrize("name, ks, m, n, dtype, tag", K_CASES, ids=[c[0] for c in K_CASES])
def test_k_grouped_case(name, ks, m, n, dtype, tag, sort, monkeypatch):
    """a (M, total_K) = x.T of row-major activations x (total_K, M), b (total_K, N) row-major, offs over K: each
    group's output is a[:, s:e] @ b[s:e] (zeros for an empty group), whatever K boundaries the groups have; the
    groups walked longest k-loop first as warp 0 ranks them (the default up to 256 groups), or in index order. A
    rank that two groups share would leave one group's output poisoned and write another's twice."""
    import ptxgemm

    monkeypatch.setattr(grouped_call, "UNVERIFIED", {})
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    total = sum(ks)
    x = random_matrix(rng, total, m, dtype)       # (total_K, M) row-major: a is its transpose
    b = random_matrix(rng, total, n, dtype)
    offs = _counts_contiguous(ks)
    dx = ptxgemm.to_device(x)
    item = dx.dtype.itemsize
    da = dx.view((m, total), (item, m * item))
    out = ptxgemm.DeviceArray.empty((len(ks), m, n), np.dtype(accuracy.DTYPES[dtype]))
    out.poison()
    config = GemmConfig.from_tag(tag) if tag else None
    plan = ptxgemm.GroupedPlan(da, ptxgemm.to_device(b), offs=ptxgemm.to_device(offs), out=out, config=config)
    assert plan.config.grouped == "k" and (plan.config.a_major, plan.config.b_major) == ("mn", "mn")
    assert plan.config.group_sorted
    if sort is False:
        plan = ptxgemm.GroupedPlan(da, ptxgemm.to_device(b), offs=ptxgemm.to_device(offs), out=out,
                                   config=dataclasses.replace(plan.config, group_sort=False))
        assert not plan.config.group_sorted
    plan.launch()
    got = out.to_numpy()
    start = 0
    for g, size in enumerate(ks):
        rows_a, rows_b = x[start:start + size].T, b[start:start + size]
        start += size
        if size == 0:
            assert np.all(got[g].astype(np.float64) == 0), f"group {g} (no K) is not zeros"
            continue
        ref, absp = accuracy.reference(rows_a, rows_b, matmul64)
        bound = accuracy.error_bound(ref, absp, size, dtype, dtype)
        verdict = accuracy.check_bound(got[g].astype(np.float64), ref, bound)
        assert verdict.ok, f"{name}: group {g} (K {size}): {verdict}"


@gpu
@pytest.mark.parametrize("form", ["contiguous", "masked"])
def test_rowwise_scales_and_bias_per_group(form, monkeypatch):
    """fp8 rowwise: one scale per token (row of a), one per channel of each group's b (G, N), and a bias per group
    (G, N): out = silu(sa[r] * sb[g, c] * (a_g @ b_g)[r, c] + bias[g, c]) on each group's rows."""
    import ptxgemm

    monkeypatch.setattr(grouped_call, "UNVERIFIED", {})
    fp8 = "float8_e4m3fn"
    rng = np.random.default_rng(2531 + (form == "masked"))
    k, n = 640, 384
    if form == "contiguous":
        sizes = [0, 130, 1, 300, 77]
        counts = _counts_contiguous(sizes)
        a = random_matrix(rng, sum(sizes) + 11, k, fp8)
        rows = a.shape[0]
        sa = rng.uniform(0.5, 2.0, rows).astype(np.float32)
    else:
        counts = np.array([90, 0, 128, 3], dtype=np.int32)
        a = np.stack([random_matrix(rng, 128, k, fp8) for _ in range(4)])
        sa = rng.uniform(0.5, 2.0, (4, 128)).astype(np.float32)
    g = len(counts)
    b = _b(rng, g, k, n, fp8, "k")
    sb = rng.uniform(0.5, 2.0, (g, n)).astype(np.float32)
    bias = rng.standard_normal((g, n)).astype(np.float32)
    out_shape = (a.shape[0], n) if form == "contiguous" else (g, 128, n)
    out = ptxgemm.DeviceArray.empty(out_shape, np.dtype(accuracy.DTYPES["bfloat16"]))
    out.poison()
    poisoned = out.to_numpy()
    kw = {"offs" if form == "contiguous" else "masked_m": ptxgemm.to_device(counts)}
    ptxgemm.grouped_matmul(ptxgemm.to_device(a), _device_b(ptxgemm, b, "k"), out=out, scale_a=ptxgemm.to_device(sa),
                           scale_b=ptxgemm.to_device(sb), bias=ptxgemm.to_device(bias), activation="silu", **kw)
    got = out.to_numpy()
    problem = grouped_rules.parse(a, b, out=poisoned, **{key: counts for key in kw})
    covered = np.zeros(got.shape[:-1], dtype=bool)
    for gi, (s, e) in enumerate(grouped_rules.group_ranges(problem, counts)):
        if e == s:
            continue
        idx = (slice(s, e),) if form == "contiguous" else (gi, slice(0, e))
        covered[idx] = True
        rows_a = a[idx]
        ref, absp = accuracy.reference(rows_a, b[gi], matmul64)
        scale = sa[idx][:, None].astype(np.float64) * sb[gi][None, :]
        pre = scale * ref + bias[gi][None, :]
        err = scale * accuracy.accumulation_error(absp, k, fp8)
        ref_out, bound = accuracy.fused_bound(pre, err, np.abs(scale * ref) + np.abs(bias[gi])[None, :], "silu",
                                              "bfloat16")
        verdict = accuracy.check_bound(got[idx].astype(np.float64), ref_out, bound)
        assert verdict.ok, f"group {gi}: {verdict}"
    bits, pbits = got.view(np.uint16), poisoned.view(np.uint16)
    assert np.array_equal(bits[~covered], pbits[~covered]), "a row outside every group was written"


@gpu
@pytest.mark.parametrize("tag, scale_a_major", [(None, "k"), ("coop128x128c2", "k"), (None, "m"),
                                                ("coop128x128c2", "m"), ("coop256x128", "m")])
def test_blockwise_scales_per_group(monkeypatch, tag, scale_a_major):
    """DeepSeek-V3's recipe per expert: scale_a (total_M, ceil(K/128)) per token and 128 K, scale_b (G, ceil(K/128),
    ceil(N/128)) per expert and 128x128 block; unaligned groups, K not a multiple of 128; also on pairs along M.
    scale_a M-major ("m": DeepGEMM's and torch's layout, its columns padded with NaN that is never read): the
    producer's TMA box brings each stage's rows of the whole table (a group's first row plus the tile's), past a
    group's end into the next group's, past the last row zeros."""
    import ptxgemm

    monkeypatch.setattr(grouped_call, "UNVERIFIED", {})
    fp8 = "float8_e4m3fn"
    rng = np.random.default_rng(2533)
    sizes, k, n = [200, 0, 1, 333, 130], 1008, 384   # K: rows of 16 bytes (TMA), not a multiple of 128
    counts = _counts_contiguous(sizes)
    a = random_matrix(rng, sum(sizes), k, fp8)
    g, kb, nb = len(sizes), -(-k // 128), -(-n // 128)
    b = _b(rng, g, k, n, fp8, "k")
    sa = rng.uniform(0.5, 2.0, (a.shape[0], kb)).astype(np.float32)
    sb = rng.uniform(0.5, 2.0, (g, kb, nb)).astype(np.float32)
    out = ptxgemm.DeviceArray.empty((a.shape[0], n), np.dtype(accuracy.DTYPES["bfloat16"]))
    out.poison()
    if scale_a_major == "m":
        padded = m_major_table(sa, np.nan)   # the padding is never read
        scale_a = ptxgemm.to_device(padded).view(sa.shape, (4, 4 * padded.shape[1]))
    else:
        scale_a = ptxgemm.to_device(sa)
    plan = ptxgemm.GroupedPlan(ptxgemm.to_device(a), _device_b(ptxgemm, b, "k"), offs=ptxgemm.to_device(counts),
                               out=out, scale_a=scale_a, scale_b=ptxgemm.to_device(sb),
                               config=GemmConfig.from_tag(tag) if tag else None)
    assert plan.config.block_scale and plan.config.grouped == "contiguous"
    assert plan.config.cluster_m == (2 if tag and "c2" in tag else 1)
    assert plan.config.block_scale_a_mn == (scale_a_major == "m") == plan.config.bs_a_in_smem
    plan.launch()
    got = out.to_numpy()
    start = 0
    for gi, size in enumerate(sizes):
        rows = slice(start, start + size)
        start += size
        if not size:
            continue
        ref, bound = accuracy.fused_reference(a[rows], b[gi], {"scale_a": sa[rows], "scale_b": sb[gi]}, "bfloat16",
                                              True, matmul64)
        verdict = accuracy.check_bound(got[rows].astype(np.float64), ref, bound)
        assert verdict.ok, f"group {gi}: {verdict}"
