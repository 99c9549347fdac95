"""The grouped GEMM's argument rules (ptxgemm/plan/grouped.py) and its float64 reference, on the CPU: each form from
its shapes, every rule failing with the argument it names, host counts checked by value, and the reference's
treatment of empty, unaligned and clamped groups."""
from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest

from ptxgemm.errors import ConfigError
from ptxgemm.plan import grouped

BF16 = np.dtype(ml_dtypes.bfloat16)


@dataclasses.dataclass(frozen=True)
class Like:
    """A device array as the rules see it: a shape and a dtype, no values."""

    shape: tuple
    dtype: np.dtype = BF16


I32 = np.dtype(np.int32)


def test_each_form_from_its_shapes():
    p = grouped.parse(Like((700, 256)), Like((8, 256, 512)), offs=Like((8,), I32))
    assert (p.form, p.groups, p.m, p.n, p.k, p.out_shape) == ("contiguous", 8, 700, 512, 256, (700, 512))
    p = grouped.parse(Like((4, 96, 256)), Like((4, 256, 512)), masked_m=Like((4,), I32))
    assert (p.form, p.groups, p.m, p.n, p.k, p.out_shape) == ("masked", 4, 96, 512, 256, (4, 96, 512))
    p = grouped.parse(Like((128, 3000)), Like((3000, 512)), offs=Like((5,), I32))
    assert (p.form, p.groups, p.m, p.n, p.k, p.out_shape) == ("k", 5, 128, 512, 3000, (5, 128, 512))
    assert p.out_dtype == "bfloat16" and p.counts_name == "offs" and "total_K 3000" in p.describe()
    fp8 = np.dtype(ml_dtypes.float8_e4m3fn)
    p = grouped.parse(Like((700, 256), fp8), Like((8, 256, 512), fp8), offs=Like((8,), I32))
    assert p.in_dtype == "float8_e4m3fn" and p.out_dtype == "bfloat16"


@pytest.mark.parametrize("a, b, kw, message", [
    ((700, 256), (8, 256, 512), {}, "offs, masked_m: a grouped GEMM needs the group sizes"),
    ((700, 256), (8, 256, 512), {"offs": (8,), "masked_m": (8,)}, "offs, masked_m: give one"),
    ((700, 256), (8, 256, 512), {"masked_m": (8,)}, "a, b: with masked_m, a is \\(G, M_max, K\\)"),
    ((2, 700, 256), (8, 256, 512), {"offs": (8,)}, "a, b: with offs, a is 2-D and b is 3-D"),
    ((700, 256), (8, 256, 512), {"offs": (7,)}, "offs: one entry per group: b has 8 groups"),
    ((700, 256), (8, 256, 512), {"offs": (8, 1)}, "offs: must be a 1-D vector"),
    ((700, 255), (8, 256, 512), {"offs": (8,)}, "a, b: K differs"),
    ((4, 96, 256), (5, 256, 512), {"masked_m": (5,)}, "a, b: one matrix per group in each"),
    ((4, 96, 256), (4, 128, 512), {"masked_m": (4,)}, "a, b: K differs"),
    ((128, 3000), (2999, 512), {"offs": (5,)}, "a, b: total_K differs"),
    ((128, 3000), (3000, 512), {"offs": (0,)}, "offs: 1 to 1024 groups"),
    ((128, 3000), (3000, 512), {"offs": (1025,)}, "offs: 1 to 1024 groups"),
])
def test_each_rule_names_its_argument(a, b, kw, message):
    counts = {name: Like(shape, I32) for name, shape in kw.items()}
    with pytest.raises(ConfigError, match=message):
        grouped.parse(Like(a), Like(b), **counts)


def test_dtypes_out_and_out_dtype():
    with pytest.raises(ConfigError, match="offs: must be int32"):
        grouped.parse(Like((700, 256)), Like((8, 256, 512)), offs=Like((8,), np.dtype(np.int64)))
    with pytest.raises(ConfigError, match="b: dtype float16 differs from a's bfloat16"):
        grouped.parse(Like((700, 256)), Like((8, 256, 512), np.dtype(np.float16)), offs=Like((8,), I32))
    with pytest.raises(ConfigError, match="out: the contiguous form's result is \\(700, 512\\)"):
        grouped.parse(Like((700, 256)), Like((8, 256, 512)), offs=Like((8,), I32), out=Like((8, 700, 512)))
    with pytest.raises(ConfigError, match="out_dtype: float16 differs from out's dtype bfloat16"):
        grouped.parse(Like((700, 256)), Like((8, 256, 512)), offs=Like((8,), I32), out=Like((700, 512)),
                      out_dtype=np.float16)
    p = grouped.parse(Like((700, 256)), Like((8, 256, 512)), offs=Like((8,), I32), out_dtype=np.float32)
    assert p.out_dtype == "float32"


@pytest.mark.parametrize("form, counts, message", [
    ("contiguous", [0, 100, 90, 700], "offs: cumulative ends never decrease; offs\\[2\\] = 90 < offs\\[1\\] = 100"),
    ("contiguous", [-1, 100, 200, 700], "offs: cumulative ends start at 0 or more"),
    ("contiguous", [10, 100, 200, 701], "offs: the last end \\(701\\) is past total_M \\(700\\)"),
    ("k", [0, 1000, 2000, 3001], "offs: the last end \\(3001\\) is past total_K \\(3000\\)"),
    ("masked", [0, 96, 97, 5], "masked_m: each entry must lie in 0..M_max \\(96\\); masked_m\\[2\\] is 97"),
])
def test_host_counts_are_checked_by_value(form, counts, message):
    counts = np.array(counts, np.int32)
    shapes = {"contiguous": ((700, 256), (4, 256, 512), "offs"), "k": ((128, 3000), (3000, 512), "offs"),
              "masked": ((4, 96, 256), (4, 256, 512), "masked_m")}[form]
    with pytest.raises(ConfigError, match=message):
        grouped.parse(Like(shapes[0]), Like(shapes[1]), **{shapes[2]: counts})


def test_device_counts_are_not_read_and_the_ranges_clamp_as_the_kernel_does():
    p = grouped.parse(Like((700, 256)), Like((4, 256, 512)), offs=Like((4,), I32))   # no values: no check
    assert grouped.group_ranges(p, np.array([100, 50, 900, 650])) == [(0, 100), (100, 100), (100, 700), (700, 700)]
    m = grouped.parse(Like((3, 96, 256)), Like((3, 256, 512)), masked_m=Like((3,), I32))
    assert grouped.group_ranges(m, np.array([-5, 40, 200])) == [(0, 0), (0, 40), (0, 96)]


def test_the_reference_computes_each_group_and_leaves_the_rest():
    rng = np.random.default_rng(0)

    def normal(*shape):   # bf16 values, the dtype a grouped GEMM takes
        return rng.standard_normal(shape).astype(BF16)
    a = normal(37, 20)
    b = normal(3, 20, 11)
    offs = np.array([5, 5, 30], np.int32)       # an empty group, an unaligned one, rows 30..36 in no group
    p = grouped.parse(a, b, offs=offs, out_dtype=np.float32)
    out = np.full((37, 11), 7.0)
    ref = grouped.reference(p, a, b, offs, out)
    f = np.float64
    assert np.allclose(ref[:5], a[:5].astype(f) @ b[0].astype(f))
    assert np.allclose(ref[5:30], a[5:30].astype(f) @ b[2].astype(f))
    assert (ref[30:] == 7.0).all()
    am = normal(2, 9, 20)
    masked = np.array([0, 4], np.int32)
    pm = grouped.parse(am, b[:2], masked_m=masked, out_dtype=np.float32)
    refm = grouped.reference(pm, am, b[:2], masked)
    assert np.isnan(refm[0]).all() and np.isnan(refm[1, 4:]).all()
    assert np.allclose(refm[1, :4], am[1, :4].astype(f) @ b[1].astype(f))
    ak, bk = normal(6, 50), normal(50, 8)
    koffs = np.array([10, 10, 50], np.int32)
    pk = grouped.parse(ak, bk, offs=koffs, out_dtype=np.float32)
    refk = grouped.reference(pk, ak, bk, koffs)
    assert np.allclose(refk[0], ak[:, :10].astype(f) @ bk[:10].astype(f)) and (refk[1] == 0).all()
    assert np.allclose(refk[2], ak[:, 10:].astype(f) @ bk[10:].astype(f))


def test_the_grouped_shape_set_is_fixed_and_covers_what_the_issue_names():
    from ptxgemm.bench import grouped_shapes

    cases = {c.name: c for c in grouped_shapes.CASES}
    published = [c for c in cases.values() if c.published_tflops]
    assert len(published) == 10 and sum(c.layout == "masked" for c in published) == 6
    assert cases["deepgemm-contiguous-4x8192-4096x7168"].published_tflops == 1297
    mixtral = cases["mixtral-8x7b-prefill-up"]
    assert mixtral.groups == 8 and sum(mixtral.counts) == 32768 and (mixtral.n, mixtral.k) == (14336, 4096)
    deepseek = cases["deepseek-v3-experts-gate-up"]
    assert deepseek.groups == 256 and sum(deepseek.counts) == 32768 and max(deepseek.counts) > 20 * min(deepseek.counts)
    assert deepseek.counts == cases["deepseek-v3-experts-down"].counts        # one routing, both projections
    assert deepseek.counts[:4] == grouped_shapes.CASES[12].counts[:4]          # the draw is the module's, once
    decode = cases["deepseek-v3-decode-gate-up"]
    assert decode.layout == "masked" and decode.m_max == 128 and all(0 <= c <= 128 for c in decode.counts)
    assert (decode.offs()[-1], decode.flops) == (sum(decode.counts), 2.0 * sum(decode.counts) * 4096 * 7168)
    # the draws do not move: a change to them changes every grouped benchmark row
    assert (sum(deepseek.counts[:16]), max(deepseek.counts), sum(decode.counts)) == (
        sum(grouped_shapes.routed_counts(256, 32768, grouped_shapes.zipf_popularity(256, 1.1, 2502), 2503)[:16]),
        6730, 2016)


def test_the_walk_covers_every_row_of_every_group_once_and_balances_the_ctas():
    """The grouped walk's model (ptxgemm/kernel/grouped_walk.py): each output row and column block of each group
    in exactly one unit, no unit of an empty group, row_end the group's own end, and the busiest CTA at most one
    unit over the idlest, for skewed counts with empty and unaligned groups."""
    from ptxgemm.bench import grouped_shapes
    from ptxgemm.kernel import grouped_walk

    counts = list(grouped_shapes.CASES[12].counts[:40]) + [0, 1, 129, 0]
    offs = list(np.cumsum(counts))
    total, n, bm, bn = offs[-1] + 50, 300, 128, 128        # rows past the last group belong to none
    per_cta = grouped_walk.walk("contiguous", offs, total, 0, n, bm, bn, ctas=132)
    units = [u for cta in per_cta for u in cta]
    covered = {}
    for u in units:
        s, e = grouped_walk.ranges("contiguous", offs, total)[u.group]
        assert s <= u.m0 < e and u.row_end == e and u.n0 % bn == 0 and u.n0 < n
        for r in range(u.m0, min(u.m0 + bm, u.row_end)):
            assert (r, u.n0) not in covered
            covered[(r, u.n0)] = u.group
    assert len(covered) == sum(counts) * 3                 # every row of every group, in each of the 3 column blocks
    assert not any(u.group in (40, 43) for u in units)      # the empty groups have no unit
    sizes = [len(c) for c in per_cta]
    assert max(sizes) - min(sizes) <= 1
    masked = grouped_walk.walk("masked", [0, 5, 200], 128, 0, 256, 64, 128, ctas=4)
    assert sorted((u.group, u.m0, u.n0, u.row_end) for c in masked for u in c) == \
        [(1, 0, 0, 5), (1, 0, 128, 5), (2, 0, 0, 128), (2, 0, 128, 128), (2, 64, 0, 128), (2, 64, 128, 128)]
    kgrouped = grouped_walk.walk("k", [10, 10, 300], 300, 200, 128, 128, 128, ctas=3)
    assert len([u for c in kgrouped for u in c]) == 3 * 2 * 1 and {u.row_end for c in kgrouped for u in c} == {200}
    # sorted (GemmConfig.group_sort): the same units, as many per CTA, the groups' in k_order (K 10, 0, 290)
    ordered = grouped_walk.walk("k", [10, 10, 300], 300, 200, 128, 128, 128, ctas=3, block_k=64)
    key = dataclasses.astuple
    assert sorted(map(key, sum(ordered, []))) == sorted(map(key, sum(kgrouped, [])))
    assert [len(c) for c in ordered] == [len(c) for c in kgrouped]
    assert [ordered[p % 3][p // 3].group for p in range(6)] == [2, 2, 0, 0, 1, 1]   # positions 0..5
    with pytest.raises(ValueError, match="k form"):
        grouped_walk.walk("contiguous", [5], 5, 0, 128, 128, 128, ctas=2, block_k=64)


def test_a_pair_along_m_walks_both_tile_rows_of_one_group_and_covers_every_row_once():
    """With cluster_m 2 a unit is two tile rows of one group: the pair's CTAs get the same group and column, rank r
    the unit row's tile row 2 x row + r; a tile row past its group's end is walked (its CTA keeps the pair's
    barriers) but covers no row; every row of every group is covered once and the clusters stay balanced."""
    from ptxgemm.kernel import grouped_walk

    counts = [0, 1, 128, 129, 256, 300, 0, 700, 5]
    offs = list(np.cumsum(counts))
    total, n, bm, bn = offs[-1] + 7, 512, 128, 256
    per_cta = grouped_walk.walk("contiguous", offs, total, 0, n, bm, bn, ctas=8, cluster_m=2)
    covered = set()
    for c in range(0, 8, 2):
        assert len(per_cta[c]) == len(per_cta[c + 1])
        for u0, u1 in zip(per_cta[c], per_cta[c + 1]):
            assert (u0.group, u0.n0, u0.row_end) == (u1.group, u1.n0, u1.row_end) and u1.m0 == u0.m0 + bm
            s, _ = grouped_walk.ranges("contiguous", offs, total)[u0.group]
            assert (u0.m0 - s) % (2 * bm) == 0 and u0.m0 < u0.row_end     # rank 0 always holds rows
            for u in (u0, u1):
                for r in range(u.m0, min(u.m0 + bm, u.row_end)):
                    assert (r, u.n0) not in covered
                    covered.add((r, u.n0))
    assert len(covered) == sum(counts) * 2
    units = grouped_walk.units_per_group("contiguous", offs, total, 0, n, bm, bn, cluster_m=2)
    assert units == [0, 2, 2, 2, 2, 4, 0, 6, 2]
    sizes = [len(per_cta[c]) for c in range(0, 8, 2)]
    assert max(sizes) - min(sizes) <= 1
    kgrouped = grouped_walk.walk("k", [10, 300], 300, 300, 128, 128, 128, ctas=2, cluster_m=2)
    # M 300: two unit rows per group; rank 1's tile of the second (rows 384..) lies past M and stays idle
    assert [(u.group, u.m0) for u in kgrouped[1]] == [(0, 128), (0, 384), (1, 128), (1, 384)]
    with pytest.raises(ValueError, match="whole clusters"):
        grouped_walk.walk("k", [10], 10, 10, 128, 128, 128, ctas=3, cluster_m=2)


def test_the_weight_gradient_cases_use_the_forward_routings():
    """The k-grouped cases: each expert's K is its routed rows from the forward cases, M x N the expert's weight,
    and the FLOPs count M x N x the groups' K."""
    from ptxgemm.bench import grouped_shapes

    cases = {c.name: c for c in grouped_shapes.CASES}
    wgrad = cases["deepseek-v3-wgrad-down"]
    assert wgrad.layout == "k" and wgrad.counts == cases["deepseek-v3-experts-down"].counts
    assert (wgrad.m, wgrad.n, wgrad.m_per_group) == (2048, 7168, 2048.0)
    assert wgrad.flops == 2.0 * 2048 * 7168 * 32768
    assert cases["mixtral-8x7b-wgrad-up"].counts == cases["mixtral-8x7b-prefill-up"].counts

