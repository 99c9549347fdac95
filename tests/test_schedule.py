"""The host's copy of the static persistent schedule agrees with a literal walk of scheduler.ptx.j2's rule."""
from __future__ import annotations

import itertools

import pytest

from ptxgemm.errors import ConfigError
from ptxgemm.kernel.schedule import plan_schedule
from ptxgemm.plan.checks import check_ctas


def _walk(units, clusters):
    """Cluster b walks units b, b+G, ...; consumer 0 takes the even steps, consumer 1 the odd ones."""
    counts = {}
    for b in range(clusters):
        steps = list(range(b, units, clusters))
        counts[b] = (len(steps[0::2]), len(steps[1::2]))
    return counts


@pytest.mark.parametrize("m, n, block, cluster_m, sms, ctas", [
    (8448, 9216, 128, 1, 132, None), (1000, 1000, 128, 1, 132, 3), (777, 2000, 64, 2, 132, 6),
    (128, 128, 128, 1, 132, None), (4096, 4096, 128, 2, 132, None), (1, 8, 128, 1, 132, 7)])
def test_consumer_tiles_match_a_literal_walk(m, n, block, cluster_m, sms, ctas):
    s = plan_schedule(m, n, 256, block, block, 64, cluster_m, sms, ctas)
    walk = _walk(s.units, s.clusters)
    for b, (c0, c1) in walk.items():
        assert (s.consumer_tiles(b, 0), s.consumer_tiles(b, 1)) == (c0, c1)
    assert s.min_tiles_per_consumer == min(itertools.chain(*walk.values()))
    assert s.max_tiles_per_consumer == max(itertools.chain(*walk.values()))
    assert sum(itertools.chain(*walk.values())) == s.units
    assert s.grid == s.clusters * cluster_m <= (ctas or sms)


@pytest.mark.parametrize("ctas, cluster_m", [(0, 1), (-3, 1), (3, 2), (2.0, 1), (True, 1)])
def test_ctas_rule(ctas, cluster_m):
    with pytest.raises(ConfigError, match="ctas: must be a positive whole number"):
        check_ctas(ctas, cluster_m)


@pytest.mark.parametrize("rows, cols", [(1, 1), (1, 9), (9, 1), (2, 3), (3, 5), (7, 7), (16, 16), (33, 72), (130, 17)])
def test_hilbert_order_visits_every_unit_once_through_neighbours(rows, cols):
    """GemmConfig(raster="hilbert"): the table the kernel reads is a permutation of the grid, and each next unit is a
    neighbour of the last one (the point of the curve: CTAs running together share A's and B's panels)."""
    from ptxgemm.kernel.schedule import hilbert_order

    order = hilbert_order(rows, cols)
    assert sorted(order) == [(r, c) for r in range(rows) for c in range(cols)]
    assert order[0] == (0, 0)
    for (r0, c0), (r1, c1) in zip(order, order[1:]):
        assert max(abs(r1 - r0), abs(c1 - c0)) == 1, ((r0, c0), (r1, c1))


def _tile_coords_probe(cfg) -> str:
    """scheduler.ptx.j2's setup and tile_coords for `cfg`, rendered into an entry `probe` of their own for the PTX
    interpreter (tests/ptx_sim.py): thread t maps unit t of a tiles_m x tiles_n x batches walk and stores its
    (m0, n0, batch) as three u32 at out + 12 t. Its parameters: tiles_m, tiles_n, batches, rank, out, then the walk's
    own (its divisors, as fast_div.walk_divisors gives them)."""
    from ptxgemm.kernel.codegen import environment
    from ptxgemm.kernel.params import template_params

    sched = environment().get_template("scheduler.ptx.j2").make_module(vars=template_params(cfg))
    return f""".version 8.0
.target sm_90a
.address_size 64
.visible .entry probe(.param .u32 param_tiles_m, .param .u32 param_tiles_n, .param .u32 param_batches,
                      .param .u32 param_rank, .param .u64 param_out,
{sched.params().rstrip().rstrip(",")})
{{
    .reg .u32 %tiles_m, %tiles_n, %batches, %batch_units, %num_tiles, %group_tiles, %rank, %tile, %m0, %n0, %batch;
    .reg .u64 %dst, %offset;
    ld.param.u32 %tiles_m, [param_tiles_m];
    ld.param.u32 %tiles_n, [param_tiles_n];
    ld.param.u32 %batches, [param_batches];
    ld.param.u32 %rank, [param_rank];
    mov.u32 %tile, %tid.x;
{sched.setup()}
{sched.tile_coords("%tile", "%m0", "%n0", "%batch")}
    ld.param.u64 %dst, [param_out];
    mul.wide.u32 %offset, %tile, 12;
    add.u64 %dst, %dst, %offset;
    st.global.u32 [%dst], %m0;
    st.global.u32 [%dst+4], %n0;
    st.global.u32 [%dst+8], %batch;
    ret;
}}
"""


@pytest.mark.parametrize("tag, rows, cols", [("coop256x128cn2g16", 16, 9), ("coop256x128cn2g16", 13, 5),
                                             ("coop256x128g12", 12, 7), ("coop256x128", 16, 9),
                                             ("coop256x128", 13, 9), ("coop256x128g1", 5, 3)])
def test_the_kernels_walk_covers_every_tile_once_in_bands_of_group_m_rows(tag, rows, cols):
    """tile_coords of the rendered template, run by the PTX interpreter, maps the units of two problems onto every
    tile of each exactly once. Each band of group_m cluster rows (the last one may be narrower) is walked down its rows
    before moving one column right. With a band of every row (the selection's whole band, ptxgemm/select/band.py),
    each column's units are consecutive, so B's panel is fetched by one stretch of the walk only."""
    from ptx_sim import Kernel, Memory

    from ptxgemm.kernel import fast_div
    from ptxgemm.kernel.config import GemmConfig

    cfg = GemmConfig.from_tag(tag, b_major="k", in_dtype="float8_e4m3fn", block_scale=True, block_scale_a_mn=True)
    batches, out = 2, 1 << 20
    units = rows * cols * batches
    ptx = _tile_coords_probe(cfg)
    for rank in range(cfg.cluster_n):
        memory = Memory({}, set(range(out, out + 12 * units)), {})
        divisors = fast_div.walk_divisors(rows, cols, batches, cfg.group_m, cfg.raster, 1)
        Kernel(ptx, "probe").run(1, units, [rows, cols, batches, rank, out, *divisors], memory)
        got = [tuple(sum(memory.written[out + 12 * u + 4 * f + b] << (8 * b) for b in range(4)) for f in range(3))
               for u in range(units)]
        cells = [(batch, m0 // cfg.block_m, (n0 // cfg.block_n - rank) // cfg.cluster_n) for m0, n0, batch in got]
        assert sorted(cells) == sorted(itertools.product(range(batches), range(rows), range(cols)))
        assert all((n0 // cfg.block_n) % cfg.cluster_n == rank for _, n0, _ in got)
        for unit, (batch, row, col) in enumerate(cells):
            band, in_batch = divmod(unit % (rows * cols), cfg.group_m * cols)
            first = band * cfg.group_m
            size = min(rows - first, cfg.group_m)
            assert (batch, row, col) == (unit // (rows * cols), first + in_batch % size, in_batch // size), unit
        if cfg.group_m >= rows:
            assert all(col == (unit % (rows * cols)) // rows for unit, (_, _, col) in enumerate(cells))


def test_the_walks_fast_division_is_exact_and_bounded():
    """kernel/fast_div.py: magic(d) divides exactly, by multiply-high and shift, every dividend below
    DIVIDEND_LIMIT: all the divisors up to 4096 against dividends near their multiples, at the limit and random,
    and random and power-of-two divisors up to the limit; walk_divisors refuses a walk whose positions reach it."""
    import random

    from ptxgemm.errors import ConfigError
    from ptxgemm.kernel import fast_div

    rng = random.Random(47)
    limit = fast_div.DIVIDEND_LIMIT
    divisors = [*range(1, 4097), *(1 << k for k in range(31)), *((1 << k) + 1 for k in range(1, 31)),
                *((1 << k) - 1 for k in range(2, 32)), *(rng.randrange(1, limit) for _ in range(2000))]
    for d in divisors:
        mul, shr = fast_div.magic(d)
        assert 0 <= mul < 1 << 32 and 0 <= shr < 32
        near = [q * d + r for q in (0, 1, rng.randrange(limit // d + 1), limit // d) for r in (0, 1, d - 1)]
        for n in [n for n in near if n < limit] + [limit - 1, rng.randrange(limit)]:
            assert fast_div.divide(n, mul, shr) == n // d, (d, n)
    with pytest.raises(ConfigError, match="must stay below 2147483648"):
        fast_div.walk_divisors(1 << 12, 1 << 10, 4, 8, "m", 128)
    assert fast_div.walk_divisors(16, 9, 2, 8, "hilbert", 64) == [*fast_div.magic(144)]
    assert fast_div.walk_divisors(13, 9, 1, 8, "m", 64)[2:] == [*fast_div.magic(9 * 8), *fast_div.magic(5)]
