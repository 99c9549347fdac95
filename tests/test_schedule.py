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
