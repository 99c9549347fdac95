"""The kernel entry's tensor maps, without a GPU: the dense and the grouped launch pack them (gemm.map_arguments, from
ptxgemm.kernel.params.entry_maps) in the order the rendered PTX's `.entry` declares its `.param .align 64 .b8`
parameters, and every map a plan encodes is one the entry takes, for plans made as GemmPlan and GroupedPlan make
them (on stand-ins: the specs are what they encode)."""
from __future__ import annotations

import itertools
import re

import ml_dtypes
import numpy as np
import pytest

from ptxgemm import gemm, grouped
from ptxgemm.kernel.config import GemmConfig
from ptxgemm.kernel.params import entry_maps
from ptxgemm.plan import operands
from ptxgemm.plan.binding import StandIn
from ptxgemm.plan.epilogue import m_major_ld
from ptxgemm.select.cost_model import DEFAULT_DEVICE
from ptxgemm.toolchain.kernels import render_gemm

BF16 = np.dtype(ml_dtypes.bfloat16)
FP8 = np.dtype(ml_dtypes.float8_e4m3fn)
F32, I32 = np.dtype(np.float32), np.dtype(np.int32)
MAP_PARAM = re.compile(r"\.param \.align 64 \.b8 (\w+)\[128\]")


def _no_spills(cfg) -> bool:
    return False


def declared(cfg: GemmConfig) -> list[str]:
    """The tensor maps of the rendered kernel's `.entry`, in the order it declares them."""
    ptx = render_gemm(cfg)
    return MAP_PARAM.findall(ptx[ptx.index(".visible .entry"):ptx.index(")\n.maxntid")])


def packed(specs: dict, cfg: GemmConfig) -> list[str]:
    """The names of the maps in the order a launch passes them: map_arguments on the plan's specs (GemmPlan and
    GroupedPlan hand it the maps encoded from these specs, by the same names)."""
    name_of = {id(spec): name for name, spec in specs.items()}
    return [name_of[id(spec)] for spec in gemm.map_arguments(specs, cfg)]


_addresses = itertools.count(1 << 36, 1 << 32)   # each array its own 256-byte aligned address


def at(shape, dtype, order=None) -> StandIn:
    """A device array's header: C order, or the axes laid out innermost first as `order` says ((0, 1): a (K, N)
    matrix K-major)."""
    dtype, shape = np.dtype(dtype), tuple(shape)
    strides, step = [0] * len(shape), dtype.itemsize
    for axis in order or reversed(range(len(shape))):
        strides[axis] = step
        step *= shape[axis]
    return StandIn(shape, tuple(strides), dtype, next(_addresses))


def m_major(m: int, kb: int) -> StandIn:
    """scale_a (M, kb) M-major: rows adjacent, each k-block's column m_major_ld(M) scales on (DeepGEMM's layout)."""
    return StandIn((m, kb), (4, 4 * m_major_ld(m)), F32, next(_addresses))


def dense_specs(args: dict, config=None, beta=0.0):
    """GemmPlan's tensor map specs for the call: planned on stand-ins, bound (its staging buffers anywhere)."""
    plan = gemm.plan_symbolic(args, config, beta=beta, device=DEFAULT_DEVICE, spill_check=_no_spills)
    buffers = {op.name: (1 << 44) + i * (1 << 32) for i, op in enumerate(plan.layout.operands) if op.staged}
    bound, _, _ = operands.bind(plan.layout, buffers)
    return gemm.tensor_map_specs(bound, plan.config, plan.epilogue), plan.config


def grouped_specs(form: str, a, b, out, counts, **kw):
    """GroupedPlan's tensor map specs for the call (grouped.plan_launch, as it makes them)."""
    counts_name = "masked_m" if form == "masked" else "offs"
    plan = grouped.plan_launch(a, b, **{counts_name: counts}, out=out, convert=lambda x, name: x, upload=None,
                               allocate=None, sm_count=lambda: 132, spill_check=_no_spills,
                               scratch=lambda nbytes: at((nbytes,), np.uint8), **kw)
    return plan.specs, plan.config


M, N, K, G = 300, 256, 512, 4
KB, NB = -(-K // 128), -(-N // 128)

CASES = {
    "dense bf16": lambda: dense_specs({"a": at((M, K), BF16), "b": at((K, N), BF16), "out": at((M, N), BF16)}),
    # C's narrow last panel (96 columns: a 64-column panel and a 32-column tail) and the epilogue's source (fp32:
    # three whole 32-column panels)
    "dense bf16, tail and source": lambda: dense_specs(
        {"a": at((M, K), BF16), "b": at((K, N), BF16), "out": at((M, N), BF16), "c": at((M, N), F32)},
        GemmConfig.from_tag("pp128x96"), beta=0.5),
    "dense fp8 blockwise": lambda: dense_specs(
        {"a": at((M, K), FP8), "b": at((K, N), FP8, (0, 1)), "out": at((M, N), BF16),
         "scale_a": at((M, KB), F32), "scale_b": at((KB, NB), F32)}),
    "dense fp8 blockwise, M-major scale_a": lambda: dense_specs(
        {"a": at((M, K), FP8), "b": at((K, N), FP8, (0, 1)), "out": at((M, N), BF16),
         "scale_a": m_major(M, KB), "scale_b": at((KB, NB), F32)}),
    "grouped contiguous": lambda: grouped_specs(
        "contiguous", at((M, K), BF16), at((G, K, N), BF16), at((M, N), BF16), at((G,), I32)),
    "grouped masked": lambda: grouped_specs(
        "masked", at((G, 96, K), BF16), at((G, K, N), BF16), at((G, 96, N), BF16), at((G,), I32)),
    "grouped contiguous fp8 blockwise": lambda: grouped_specs(
        "contiguous", at((M, K), FP8), at((G, K, N), FP8, (1, 2, 0)), at((M, N), BF16), at((G,), I32),
        scale_a=at((M, KB), F32), scale_b=at((G, KB, NB), F32)),
    "grouped contiguous fp8 blockwise, M-major scale_a": lambda: grouped_specs(
        "contiguous", at((M, K), FP8), at((G, K, N), FP8, (1, 2, 0)), at((M, N), BF16), at((G,), I32),
        scale_a=m_major(M, KB), scale_b=at((G, KB, NB), F32)),
}

#: the maps past A, B and C each case must reach, so that every condition of entry_maps is taken
EXTRA = {"dense bf16, tail and source": ["tmap_c_tail", "tmap_source"],
         "dense fp8 blockwise, M-major scale_a": ["tmap_scale_a"],
         "grouped contiguous fp8 blockwise, M-major scale_a": ["tmap_scale_a"]}


@pytest.mark.parametrize("case", list(CASES))
def test_the_launches_pack_the_tensor_maps_in_the_order_the_entry_declares_them(case):
    specs, cfg = CASES[case]()
    assert cfg.block_scale == ("fp8" in case) and bool(cfg.grouped) == case.startswith("grouped")
    order = declared(cfg)
    assert order == ["tmap_a", "tmap_b", "tmap_c", *EXTRA.get(case, [])]
    assert list(entry_maps(cfg)) == order
    # every map the plan encodes is passed, none twice, in the entry's order
    assert packed(specs, cfg) == order and sorted(specs) == sorted(order)
