"""Division by a divisor fixed per launch, as a multiply-high and a shift: the walk's tile coordinates.

Why. Each role finds its unit's tile by dividing the unit's index by launch constants: the units of one problem
(batches) and the units of one band of group_m rows (the raster). A `div.u32` by a register is a reciprocal on the
MUFU pipe and a correction in integer steps, about 25 SASS instructions and some 80 cycles of latency, and the
walk chains three of them. The producer does this before its first load, so every launch waited for it before the
first TMA left the SM: traced on the H200 (run 125), the producer's first acquire took 0.29 us where the later ones
took 0.065. The cooperative consumers do it again before every tile's first wgmma, both at once, with the tensor
cores idle.

How. The host computes, per divisor d, a multiplier and a shift (`magic`) such that for every n below DIVIDEND_LIMIT
n // d == mulhi(n, multiplier) >> shift (`divide`); d = 1 has multiplier 0, which the kernel reads as "n itself"
(a multiplier of 2^32 does not fit). This is CUTLASS's FastDivmod (cutlass/fast_math.h): p = 31 + ceil(log2 d),
multiplier = ceil(2^p / d) < 2^32, shift = p - 32. The plan checks that the walk's indices stay below the limit.
"""
from __future__ import annotations

from ..errors import ConfigError

#: every dividend must be below this: the multiplier's error, under 2^p / d / 2^32 per unit of n, stays below one
#: quotient step up to 2^31 (CUTLASS's bound for its 32-bit FastDivmod)
DIVIDEND_LIMIT = 1 << 31


def magic(divisor: int) -> tuple[int, int]:
    """(multiplier, shift) that divide by `divisor` (1 <= divisor < 2^31) in intdiv.ptx.j2 (by_param takes them as
    parameters, by_const as literals): (0, 0) for 1."""
    if not 1 <= divisor < DIVIDEND_LIMIT:
        raise ConfigError(f"fast division: the divisor must be in 1..{DIVIDEND_LIMIT - 1}, got {divisor}")
    if divisor == 1:
        return 0, 0
    log2 = (divisor - 1).bit_length()          # ceil(log2 divisor), >= 1
    p = 31 + log2
    return ((1 << p) + divisor - 1) // divisor, p - 32


def divide(n: int, multiplier: int, shift: int) -> int:
    """n // divisor as the kernel computes it from magic(divisor): mul.hi.u32, shr, and n itself for multiplier 0."""
    if multiplier == 0:
        return n
    return ((n * multiplier) >> 32) >> shift


def check_walk(k_tiles: int, what: str) -> None:
    """The rule every walk's dividends keep: its unit indices and ring positions (which count the k-tiles a CTA has
    walked) are at most the k-tiles the whole launch can walk, `k_tiles`, which must stay below DIVIDEND_LIMIT.
    ConfigError names `what` made them (the dense and the grouped plans each say how they count)."""
    if k_tiles >= DIVIDEND_LIMIT:
        raise ConfigError(f"the problem: {what} make {k_tiles} k-tiles for the walk, which must stay below "
                          f"{DIVIDEND_LIMIT} (the range of its fast division, kernel/fast_div.py)")


def walk_divisors(rows: int, cols: int, batches: int, group_m: int, raster: str, k_tiles: int) -> list[int]:
    """The dense walk's divisors as the kernel's parameters take them (scheduler.ptx.j2's params, in its order):
    the units of one problem (rows x cols, cluster rows and columns), then, unless the raster is a table
    ("hilbert"), the units of one band of group_m rows (raster "m"; columns for "n") and the last band's rows
    (columns), each as (multiplier, shift). Refused where a dividend could reach DIVIDEND_LIMIT: the walk's unit
    indices, and the ring positions (pipeline.ptx.j2's slot), which count the k-tiles a CTA has walked."""
    units = rows * cols
    check_walk(units * batches * max(k_tiles, 1), f"{units} tiles x {batches} batches x {k_tiles} k-tiles")
    out = [*magic(units)]
    if raster != "hilbert":
        major, minor = (rows, cols) if raster == "m" else (cols, rows)
        last = (major - 1) % group_m + 1        # the last band's size: group_m, or the rest
        out += [*magic(minor * group_m), *magic(last)]
    return out
