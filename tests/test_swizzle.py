"""Laws of ptxgemm.kernel.swizzle's model of the TMA swizzle modes (pure Python; the GPU check is tests/test_probe.py)."""
from __future__ import annotations

import numpy as np
import pytest

from ptxgemm.kernel import swizzle
from ptxgemm.kernel.swizzle import MODES, format_grid, period_bytes, swizzle_address, tile_grid

SWIZZLED = ("32B", "64B", "128B")
EXPECTED_PERIOD = {"128B": 1024, "64B": 512, "32B": 256}
# a range of absolute smem byte addresses: several periods of the largest mode, not starting at 0
ADDRS = np.arange(3 * 1024, 3 * 1024 + 8 * 1024, dtype=np.int64)


def test_period_bytes():
    for mode, period in EXPECTED_PERIOD.items():
        assert period_bytes(mode) == period
    assert period_bytes("none") == 16


@pytest.mark.parametrize("mode", SWIZZLED)
def test_function_of_address_mod_period_plus_base(mode):
    p = EXPECTED_PERIOD[mode]
    base = ADDRS - ADDRS % p
    assert np.array_equal(swizzle_address(ADDRS, mode), base + swizzle_address(ADDRS % p, mode))


@pytest.mark.parametrize("mode", SWIZZLED)
def test_period_is_the_smallest(mode):
    # half the period is not a period: the pattern really spans all of it
    half = EXPECTED_PERIOD[mode] // 2
    base = ADDRS - ADDRS % half
    assert not np.array_equal(swizzle_address(ADDRS, mode), base + swizzle_address(ADDRS % half, mode))


@pytest.mark.parametrize("mode", SWIZZLED)
def test_permutation_of_chunks_within_each_period(mode):
    p = EXPECTED_PERIOD[mode]
    for start in range(0, 4 * p, p):
        addr = np.arange(start, start + p, dtype=np.int64)
        phys = swizzle_address(addr, mode)
        # bytes stay inside their 16-byte chunk, and chunks stay inside their period ...
        assert np.array_equal(phys % 16, addr % 16)
        assert np.all((phys >= start) & (phys < start + p))
        # ... and the chunks of the period are permuted: each physical chunk is hit exactly once
        chunks = phys[::16] // 16
        assert sorted(chunks.tolist()) == list(range(start // 16, (start + p) // 16))
        # it is not the identity
        assert not np.array_equal(phys, addr)


def test_none_is_the_identity():
    assert np.array_equal(swizzle_address(ADDRS, "none"), ADDRS)
    assert np.array_equal(tile_grid(16, 64, "none"), np.arange(16 * 64).reshape(16, 64))


@pytest.mark.parametrize("mode", MODES)
def test_involution(mode):
    assert np.array_equal(swizzle_address(swizzle_address(ADDRS, mode), mode), ADDRS)
    for a in (0, 16, 128, 1008, 4096 + 144):  # scalars too
        assert swizzle_address(swizzle_address(a, mode), mode) == a


def test_128B_known_values():
    # line 1 (bytes 128..255): chunk c goes to chunk c ^ 1; line 7: c ^ 7; line 8 starts the next period
    assert swizzle_address(128, "128B") == 128 + 16
    assert swizzle_address(128 + 16, "128B") == 128
    assert swizzle_address(7 * 128, "128B") == 7 * 128 + 7 * 16
    assert swizzle_address(8 * 128 + 32, "128B") == 8 * 128 + 32
    assert swizzle_address(3 * 128 + 5 * 16 + 3, "128B") == 3 * 128 + (5 ^ 3) * 16 + 3
    assert swizzle_address(3 * 128 + 5 * 16, "64B") == 3 * 128 + (5 ^ 3) * 16
    assert swizzle_address(3 * 128 + 5 * 16, "32B") == 3 * 128 + (5 ^ 1) * 16


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("rows", [1, 3, 8, 64, 256])
def test_tile_grid_is_a_permutation_full_span_rows(mode, rows):
    cols = (swizzle.SPAN_BYTES[mode] or 128) // 2  # one swizzle span per row of 16-bit elements
    grid = tile_grid(rows, cols, mode)
    assert grid.shape == (rows, cols)
    assert sorted(grid.ravel().tolist()) == list(range(rows * cols))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("elem_bytes", [1, 2, 4])
def test_tile_grid_is_a_permutation_whole_periods(mode, elem_bytes):
    # tiles that are whole periods are permutations whatever the row width
    for cols_bytes in (16, 32, 64, 128):
        if swizzle.SPAN_BYTES[mode] and cols_bytes > swizzle.SPAN_BYTES[mode]:
            continue
        cols = cols_bytes // elem_bytes
        rows = 2 * 1024 // cols_bytes
        grid = tile_grid(rows, cols, mode, elem_bytes=elem_bytes)
        assert sorted(grid.ravel().tolist()) == list(range(rows * cols)), (cols_bytes, elem_bytes)


def test_tile_grid_128B_row_1():
    g = tile_grid(8, 64, "128B")
    # row 1 of a 128 B-per-row tile: its two 8-element chunks swapped
    assert g[1, :16].tolist() == list(range(72, 80)) + list(range(64, 72))
    assert g[0].tolist() == list(range(64))


def test_format_grid_shows_chunks():
    text = format_grid(tile_grid(2, 16, "32B"))
    assert text.splitlines() == [" 0  1  2  3  4  5  6  7 |  8  9 10 11 12 13 14 15",
                                 "16 17 18 19 20 21 22 23 | 24 25 26 27 28 29 30 31"]


def test_unknown_mode():
    with pytest.raises(ValueError, match="swizzle mode: must be one of none, 32B, 64B, 128B, got '16B'"):
        swizzle_address(0, "16B")
