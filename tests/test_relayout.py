"""The strided relayout kernel without a GPU: its PTX renders and assembles for every element size, the argument
rules, the layout arithmetic (normalize, grid), and the rendered PTX itself run by a small interpreter
(tests/ptx_sim.py) on a model of global memory, for transposed, reversed, broadcast, padded and batched layouts."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from ptx_sim import Kernel, Memory, SimError

from ptxgemm.errors import ConfigError
from ptxgemm.runtime import relayout
from ptxgemm.runtime.arrays import DeviceArray
from ptxgemm.toolchain import compiler, locate

ADDRESS = 0x7F00_0000_0000          # made-up device addresses: nothing here touches a GPU
HAVE_PTXAS = locate.find_tool("ptxas") is not None


# ---------------------------------------------------------------------------------------------------------------
# PTX
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("itemsize", sorted(relayout.ELEMENT_TYPES))
def test_renders_for_each_element_size(itemsize):
    ptx = relayout.relayout_ptx(itemsize)
    bits = itemsize * 8
    assert ".version 8.0" in ptx and ".target sm_90a" in ptx
    assert f".visible .entry relayout_copy_b{bits}(" in ptx
    assert f".global .align {itemsize} .b8 relayout_zero[{itemsize}] = {{ {', '.join(['0'] * itemsize)} }};" in ptx
    ld_type, reg_type = relayout.ELEMENT_TYPES[itemsize]
    assert f".reg .{reg_type}   %value<{relayout.UNROLL}>;" in ptx
    assert ptx.count(f"ld.global.{ld_type} ") == relayout.UNROLL
    assert ptx.count(f"st.global.{ld_type} ") == relayout.UNROLL
    assert f".maxntid {relayout.THREADS}, 1, 1" in ptx and f".minnctapersm {relayout.CTAS_PER_SM}" in ptx
    # the loop divides nowhere: every div/rem comes before the first pass
    loop = ptx[ptx.index("PASS:"):]
    assert "div." not in loop and "rem." not in loop
    assert "{{" not in ptx and "{%" not in ptx and "{#" not in ptx


def test_ptx_version_stays_within_the_gpu_drivers_reach():
    major, minor = map(int, relayout.PTX_VERSION.split("."))
    assert (major, minor) <= (9, 0)


@pytest.mark.skipif(not HAVE_PTXAS, reason="ptxas not found")
@pytest.mark.parametrize("itemsize", sorted(relayout.ELEMENT_TYPES))
def test_assembles_without_warnings_or_spills(itemsize):
    kernel = compiler.compile_ptx(relayout.relayout_ptx(itemsize), use_cache=False)
    assert kernel.report.warnings == [], kernel.report.raw
    res = kernel.report.functions[relayout.kernel_name(itemsize)]
    assert res.spill_store_bytes == 0 and res.spill_load_bytes == 0 and res.stack_bytes == 0
    # CTAS_PER_SM CTAs of THREADS threads must fit the SM's 64K registers (.minnctapersm asks ptxas for it)
    assert res.registers * relayout.THREADS * relayout.CTAS_PER_SM <= 65536, res


# ---------------------------------------------------------------------------------------------------------------
# Argument rules
# ---------------------------------------------------------------------------------------------------------------

GOOD = dict(dst_ptr=ADDRESS, dst_strides=(40, 4), src_ptr=ADDRESS + 4096, src_strides=(4, 12), shape=(3, 10),
            itemsize=4)


@pytest.mark.parametrize("change, message", [
    (dict(itemsize=3), "itemsize: the relayout kernel copies elements of 1, 2, 4, 8 bytes (raw bits, no conversion), "
                       "got 3"),
    (dict(itemsize=16), "itemsize: "),
    (dict(shape=(2, 2, 2, 2), dst_strides=(32, 16, 8, 4), src_strides=(32, 16, 8, 4)),
     "shape: 1 to 3 extents, got 4"),
    (dict(shape=(), dst_strides=(), src_strides=()), "shape: 1 to 3 extents, got 0"),
    (dict(shape=(3, -1)), "shape: extents must be >= 0"),
    (dict(dst_strides=(-40, 4)), "dst_strides: must be positive for every dimension of extent > 1"),
    (dict(dst_strides=(0, 4)), "dst_strides: must be positive for every dimension of extent > 1 (each destination "
                               "element is written once, walking forwards), got 0 for dimension 0 (extent 3)"),
    (dict(dst_strides=(40,)), "dst_strides: one byte stride per dimension of shape (3, 10), got 1"),
    (dict(src_strides=(4, 12, 0)), "src_strides: one byte stride per dimension of shape (3, 10), got 3"),
    (dict(src_strides=(4, 6)), "src_strides: every byte stride must be a multiple of the element size (4)"),
    (dict(dst_strides=(40, 4), shape=(3, 11)), "dst_strides: the destination's elements overlap"),
    (dict(dst_strides=(4, 4)), "dst_strides: the destination's elements overlap"),
    (dict(src_strides=(4, 1 << 63)), "src_strides: byte strides are signed 64-bit values"),
    (dict(dst_ptr=ADDRESS + 2), "dst_ptr: must be aligned to the element size (4 bytes)"),
    (dict(src_ptr=-4), "src_ptr: a device address is a 64-bit unsigned value"),
    (dict(src_ptr=1.5), "src_ptr: must be a device address (an int)"),
    (dict(shape=(3, "10")), "shape: must be a sequence of ints"),
])
def test_bad_arguments_name_the_argument_and_the_rule(change, message):
    with pytest.raises(ConfigError) as info:
        relayout.copy(**{**GOOD, **change})
    assert message in str(info.value)


def test_rules_accept_what_numpy_views_give():
    check = relayout.check_copy
    # negative and zero source strides, huge strides, a destination stride that an extent of 1 never uses
    check(ADDRESS, (1 << 41, 16, 2), ADDRESS, (-(1 << 40), 0, -2), (3, 5, 7), 2)
    check(ADDRESS, (-2, 2), ADDRESS, (0, 2), (1, 7), 2)
    check(ADDRESS, (0, 0, 0), ADDRESS, (0, 0, 0), (1, 1, 1), 8)
    # a padded destination and a transposed one
    check(ADDRESS, (64, 4), ADDRESS, (4, 40), (10, 7), 4)
    check(ADDRESS, (4, 40), ADDRESS, (28, 4), (10, 7), 4)


def test_an_empty_copy_launches_nothing():
    # no GPU here: anything launched would fail with NoGpuError
    assert relayout.copy(**{**GOOD, "shape": (0, 10)}) is None
    assert relayout.copy(ADDRESS, (4,), ADDRESS + 64, (-4,), (0,), 4) is None
    assert relayout.fill_zero(ADDRESS, (8, 2), (5, 0), 2) is None


def test_fill_zero_checks_the_destination():
    with pytest.raises(ConfigError, match="dst_strides: must be positive"):
        relayout.fill_zero(ADDRESS, (-8, 2), (5, 4), 2)
    with pytest.raises(ConfigError, match="itemsize: "):
        relayout.fill_zero(ADDRESS, (8, 2), (5, 4), 6)
    with pytest.raises(ConfigError, match="shape: 1 to 3 extents, got 4"):
        relayout.fill_zero(ADDRESS, (8, 8, 8, 2), (1, 1, 1, 4), 2)


def test_copy_array_checks_before_the_gpu():
    a = DeviceArray(ADDRESS, (4, 5), np.float32, owner=False)
    with pytest.raises(ConfigError, match=r"dst: shape \(4, 5\) differs from the source's \(5, 4\)"):
        relayout.copy_array(a, DeviceArray(ADDRESS, (5, 4), np.float32, owner=False))
    with pytest.raises(ConfigError, match="dst: dtype float32 differs from the source's int32"):
        relayout.copy_array(a, DeviceArray(ADDRESS, (4, 5), np.int32, owner=False))
    with pytest.raises(ConfigError, match="itemsize: "):
        relayout.copy_array(DeviceArray(ADDRESS, (4,), np.complex128, owner=False),
                            DeviceArray(ADDRESS, (4,), np.complex128, owner=False))
    # four dimensions that no merge reduces: every axis permuted
    shape = (2, 3, 4, 5)
    src = DeviceArray(ADDRESS, shape, np.float16, (2, 4, 24, 96), owner=False)
    with pytest.raises(ConfigError, match="still has 4 dimensions after merging; the relayout kernel walks at most 3"):
        relayout.copy_array(DeviceArray(ADDRESS + (1 << 20), shape, np.float16, owner=False), src)


def test_copy_array_merges_any_rank(monkeypatch):
    launched = []
    monkeypatch.setattr(relayout, "_prepared", lambda *args: lambda stream: launched.append((*args, stream)))
    shape = (2, 3, 4, 5, 6)
    dst = DeviceArray(ADDRESS, shape, np.float32, owner=False)
    src = DeviceArray(ADDRESS + (1 << 20), shape, np.float32, owner=False)
    relayout.copy_array(dst, src, stream=7)
    assert launched == [(ADDRESS, (4,), ADDRESS + (1 << 20), (4,), (720,), 4, 0, 7)]   # on dst's device


# ---------------------------------------------------------------------------------------------------------------
# Layout arithmetic
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape, dst, src, expected", [
    ((3, 4, 5), (80, 20, 4), (80, 20, 4), ((60,), (4,), (4,))),                     # dense both: one row
    ((4, 5), (20, 4), (4, 16), ((4, 5), (20, 4), (4, 16))),                          # transposed source
    ((4, 5), (4, 16), (20, 4), ((5, 4), (16, 4), (4, 20))),                          # walk the destination's order
    ((1, 7, 1), (28, 4, 4), (0, -4, 8), ((7,), (4,), (-4,))),                        # extent-1 dimensions dropped
    ((1, 1), (4, 4), (0, 0), ((1,), (0,), (0,))),                                    # one element
    ((6, 7), (28, 4), (0, 0), ((42,), (4,), (0,))),                                  # a broadcast scalar: one row
    ((6, 7), (28, 4), (0, 4), ((6, 7), (28, 4), (0, 4))),                            # a broadcast row
    ((2, 3, 4), (48, 16, 4), (-48, 16, 4), ((2, 12), (48, 4), (-48, 4))),            # reversed batch, dense rows
    ((3, 0), (8, 4), (4, 4), ((3, 0), (8, 4), (4, 4))),                              # empty: unchanged
])
def test_normalize(shape, dst, src, expected):
    assert relayout.normalize(shape, dst, src) == expected


def test_grid_fills_the_gpu_and_no_more():
    per_cta = relayout.THREADS * relayout.UNROLL
    assert relayout.grid_size(1, 132) == 1
    assert relayout.grid_size(per_cta, 132) == 1
    assert relayout.grid_size(per_cta + 1, 132) == 2
    assert relayout.grid_size(10**9, 132) == 132 * relayout.CTAS_PER_SM


# ---------------------------------------------------------------------------------------------------------------
# The PTX, run by the interpreter
# ---------------------------------------------------------------------------------------------------------------

_kernels: dict[int, Kernel] = {}


def sim_kernel(itemsize: int) -> Kernel:
    if itemsize not in _kernels:
        _kernels[itemsize] = Kernel(relayout.relayout_ptx(itemsize), relayout.kernel_name(itemsize))
    return _kernels[itemsize]


def element_addresses(ptr, shape, strides):
    return [ptr + sum(i * s for i, s in zip(index, strides)) for index in itertools.product(*map(range, shape))]


def byte_pattern(addr: int) -> int:
    """A byte that depends on its address (so a wrong source element cannot pass)."""
    return (addr * 0x9E3779B97F4A7C15 >> 29) & 0xFF


def simulate(shape, dst_strides, src_strides, itemsize, sm_count=1, dst_ptr=0x10_0000_0000, src_ptr=0x20_0000_0000,
             fill=False):
    """Run the rendered kernel (the one `launch_parameters` picks) on these layouts. Returns (destination byte
    address -> byte written, the same expected, the memory model)."""
    src_elems = element_addresses(src_ptr, shape, src_strides)
    dst_elems = element_addresses(dst_ptr, shape, dst_strides)
    readable = {a + i: (0 if fill else byte_pattern(a + i)) for a in src_elems for i in range(itemsize)}
    writable = {a + i for a in dst_elems for i in range(itemsize)}
    memory = Memory(readable, writable, {"relayout_zero": src_ptr})
    relayout.check_copy(dst_ptr, dst_strides, src_ptr, src_strides, shape, itemsize)
    wide, grid, args = relayout.launch_parameters(dst_ptr, dst_strides, src_ptr, src_strides, shape, itemsize,
                                                  sm_count)
    sim_kernel(wide).run(grid, relayout.THREADS, [a.value for a in args], memory)
    assert memory.accesses == {"load": {wide}, "store": {wide}}
    expected = {d + i: readable[s + i] for d, s in zip(dst_elems, src_elems) for i in range(itemsize)}
    return memory.written, expected, memory


# (shape, dst strides, src strides) in elements; multiplied by the itemsize below
SIM_CASES = {
    "1d-dense-1001": ((1001,), (1,), (1,)),
    "1d-reversed-7": ((7,), (1,), (-1,)),
    "1d-stepped-3": ((700,), (1,), (3,)),
    "2d-transposed-source": ((33, 65), (65, 1), (1, 33)),
    "2d-transposed-destination": ((33, 65), (1, 33), (65, 1)),
    "2d-padded-destination": ((9, 130), (136, 1), (130, 1)),
    "2d-broadcast-row": ((40, 300), (300, 1), (0, 1)),
    "2d-broadcast-column": ((300, 7), (7, 1), (1, 0)),
    "3d-broadcast-scalar": ((3, 5, 70), (350, 70, 1), (0, 0, 0)),
    "3d-batched-reversed-stepped": ((3, 17, 29), (17 * 29, 29, 1), (-(17 * 100), 100, 3)),
    "3d-permuted-many-passes": ((5, 301, 7), (301 * 7, 7, 1), (1, 5 * 7, 5)),
    "3d-ones": ((1, 7, 1), (7, 1, 1), (0, -3, 5)),
    "3d-one-element": ((1, 1, 1), (1, 1, 1), (0, 0, 0)),
    "3d-rows-of-one": ((4, 1001, 1), (1001, 1, 1), (1, 4, 0)),
}


@pytest.mark.parametrize("itemsize", [2, 4])
@pytest.mark.parametrize("case", list(SIM_CASES), ids=list(SIM_CASES))
def test_kernel_moves_every_element_once(case, itemsize):
    shape, dst, src = SIM_CASES[case]
    dst = tuple(s * itemsize for s in dst)
    src = tuple(s * itemsize for s in src)
    # the source's element (0, ..) sits above the lowest source address when a stride is negative
    src_ptr = 0x20_0000_0000 - sum((n - 1) * s for n, s in zip(shape, src) if s < 0)
    written, expected, _ = simulate(shape, dst, src, itemsize, src_ptr=src_ptr)
    assert len(written) == math.prod(shape) * itemsize
    assert written == expected


@pytest.mark.parametrize("itemsize", [1, 8])
def test_kernel_moves_bytes_and_words(itemsize):
    shape, dst, src = (3, 40, 13), (40 * 13, 13, 1), (1, 3 * 13, 3)
    written, expected, _ = simulate(shape, tuple(s * itemsize for s in dst), tuple(s * itemsize for s in src),
                                    itemsize)
    assert written == expected


def test_kernel_uses_64_bit_strides():
    # strides of 2^40 and -2^33 bytes: any 32-bit truncation would land elsewhere
    shape = (2, 3, 5)
    src = (1 << 40, -(1 << 33), 4)
    written, expected, _ = simulate(shape, (60, 20, 4), src, 4, src_ptr=1 << 36)
    assert written == expected


def test_kernel_grid_strides_over_many_passes():
    # 4 CTAs (sm_count 1) x 1024 elements per pass: 8 passes of a 2-D transpose whose rows are not a multiple
    # of anything the kernel steps by
    shape = (61, 517)
    written, expected, _ = simulate(shape, (517 * 2, 2), (2, 61 * 2), 2)
    assert len(written) == math.prod(shape) * 2 and written == expected


def test_fill_zero_reads_the_zero_element():
    written, expected, _ = simulate((7, 9), (40, 4), (0, 0), 4, fill=True)
    assert set(written.values()) == {0} and written == expected


def test_interpreter_catches_a_wrong_kernel():
    # the interpreter must fail a kernel that writes outside the destination: shift every store by one element
    ptx = relayout.relayout_ptx(4).replace("mad.lo.s64  %dst, %c, %dst_stride_c, %dst;",
                                           "mad.lo.s64  %dst, %c, %dst_stride_c, %dst;\n    add.s64 %dst, %dst, 4;")
    kernel = Kernel(ptx, relayout.kernel_name(4))
    dst_ptr, src_ptr, shape = 0x1000_0000, 0x2000_0000, (10,)
    memory = Memory({a + i: 1 for a in element_addresses(src_ptr, shape, (8,)) for i in range(4)},
                    {a + i for a in element_addresses(dst_ptr, shape, (8,)) for i in range(4)}, {})
    wide, grid, args = relayout.launch_parameters(dst_ptr, (8,), src_ptr, (8,), shape, 4, 1)
    assert wide == 4   # strided: nothing to widen
    with pytest.raises(SimError, match="outside the destination"):
        kernel.run(grid, relayout.THREADS, [a.value for a in args], memory)


@pytest.mark.parametrize("shape, dst, src, dst_ptr, src_ptr, itemsize, expected", [
    # dense rows of 2-byte elements: 4 at a time
    ((3, 64), (128, 2), (256, 2), 0x1000, 0x2000, 2, ((3, 16), (128, 8), (256, 8), 8)),
    # a row extent of 6: pairs only
    ((3, 6), (12, 2), (16, 2), 0x1000, 0x2000, 2, ((3, 3), (12, 4), (16, 4), 4)),
    # an outer stride of 12 bytes: pairs of 2-byte elements, not quads
    ((3, 8), (12 * 2, 2), (12, 2), 0x1000, 0x2000, 2, ((3, 4), (24, 4), (12, 4), 4)),
    # a base address aligned to 4 bytes only
    ((64,), (4,), (4,), 0x1004, 0x2000, 4, ((64,), (4,), (4,), 4)),
    # reversed and broadcast outer dimensions widen too (multiples of the wide size)
    ((2, 3, 16), (192, 64, 4), (-64, 0, 4), 0x1000, 0x2080, 4, ((2, 3, 8), (192, 64, 8), (-64, 0, 8), 8)),
    # the inner dimension strided in either layout: unchanged
    ((16,), (2,), (4,), 0x1000, 0x2000, 2, ((16,), (2,), (4,), 2)),
    ((16,), (2,), (0,), 0x1000, 0x2000, 2, ((16,), (2,), (0,), 2)),
    ((16,), (8,), (8,), 0x1000, 0x2000, 8, ((16,), (8,), (8,), 8)),
])
def test_widen(shape, dst, src, dst_ptr, src_ptr, itemsize, expected):
    assert relayout.widen(dst_ptr, dst, src_ptr, src, shape, itemsize) == expected


def test_widened_copies_run_in_the_interpreter():
    # 2-byte elements in padded rows: moved as 8-byte elements, reversed rows included
    shape = (5, 3, 48)
    dst = (3 * 56 * 2, 56 * 2, 2)
    src = (-3 * 48 * 2, 48 * 2, 2)
    written, expected, memory = simulate(shape, dst, src, 2, src_ptr=0x20_0000_0000 + 4 * 3 * 48 * 2)
    assert memory.accesses == {"load": {8}, "store": {8}}
    assert written == expected
