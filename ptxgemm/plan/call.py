"""Plan a call once: from array descriptors (shape, strides, dtype, address), the epilogue and an optional config to
the operands' layout, the swap, the config in the kernel's frame and the epilogue as the kernel applies it. Pure:
no GPU is touched, so `run` plans on stand-ins before any upload and GemmPlan only binds the result to memory."""
from __future__ import annotations

import dataclasses

from ..kernel.config import FP8_DTYPES, GemmConfig
from ..select import tune_cache
from ..select.cost_model import preferences, resolve_device
from ..toolchain.kernels import spills
from . import epilogue, operands
from .checks import b_dtype_of, check_config, check_ctas, check_dtypes, check_out_dtype, dtype_name


#: selections made, by everything they depend on (the problem, the device, the epilogue, the tune cache's state):
#: ranking the candidates costs milliseconds of Python, and a framework's eager loop plans the same shapes at new
#: addresses over and over (ptxgemm.torch), so a shape is ranked once per process. Remembered here, per plan, not in
#: the selection: select_config must follow its cost tables, which tests and the fitting tools change in place
_SELECTED_MAX = 4096
_selected: dict = {}


def _resolve_config(config: GemmConfig | None, in_dtype: str, b_dtype: str | None, out_dtype: str, a_major: str,
                    b_major: str, shape: tuple[int, int, int], device=None, ctas: int | None = None,
                    batches: int = 1, fused: dict | None = None, spill_check=None):
    """The arrays decide dtypes and layouts, the epilogue arguments the `fused` fields (Epilogue.config_fields);
    `config` contributes the tile choice (block sizes, stages, ...). Without one, ptxgemm.select_config picks it for
    this shape, GPU and epilogue (the tune cache's winner or the cost model's); a fused pick that ptxas spills
    yields to the next preferred config (`spills`). A picked cluster that the caller's `ctas` cannot hold whole is
    dropped (a single CTA): `ctas` is a test knob and must not turn a default choice into an error."""
    fused = fused or {}
    spill_check = spill_check or spills

    def complete(base):   # the tile choice with the problem's dtypes, layouts and epilogue (block_k follows the dtype)
        return dataclasses.replace(base, in_dtype=in_dtype, out_dtype=out_dtype, a_major=a_major, b_major=b_major,
                                   b_dtype=b_dtype, **fused)

    if config is not None:
        return complete(config)  # GemmPlan checked that it is a GemmConfig before asking for the GPU

    key = None
    if spill_check is spills:   # a test's own spill_check answers differently: never remembered
        device = resolve_device(device)
        ident = (str(device.name), int(device.sm_count), str(getattr(device, "driver_version_str", "")))
        key = (in_dtype, b_dtype, out_dtype, a_major, b_major, shape, ident, ctas, batches,
               tuple(sorted(fused.items())), tune_cache.generation())
        cfg = _selected.get(key)
        if cfg is not None:
            return cfg
    cfg = _select(complete, in_dtype, out_dtype, a_major, b_major, shape, device, ctas, batches, fused, spill_check)
    if key is not None:
        if len(_selected) >= _SELECTED_MAX:
            _selected.clear()
        _selected[key] = cfg
    return cfg


def _select(complete, in_dtype, out_dtype, a_major, b_major, shape, device, ctas, batches, fused, spill_check):
    """The first preferred config that does not spill (or the preferred one, when every candidate spills)."""
    first = None
    for base, _ in preferences(*shape, in_dtype, out_dtype, a_major, b_major, device=device, batches=batches,
                               epilogue=tuple(sorted(fused.items()))):
        if ctas is not None and ctas % base.cluster_size:
            base = dataclasses.replace(base, cluster_m=1, cluster_n=1)
        cfg = complete(base)
        first = cfg if first is None else first
        if not cfg.fused or not spill_check(cfg):
            return cfg
    return first   # every candidate spills: the preferred one


def _layout(a, b, out, transposed_store: bool, epi: epilogue.Epilogue = epilogue.PLAIN) -> operands.MatmulPlan:
    """The operands' plan; fp8 operands are read K-major only (one that is not is staged transposed), the epilogue's
    source goes with the output, a batch folds into M only when nothing indexes the kernel's rows, blockwise scales keep
    the problem as given unless the kernel stores transposed (swap-AB tiles, whose kernel then reads the scale
    tables with their axes traded: GemmConfig.block_scale_swapped; otherwise a column-major output is staged), and
    with K = 0 an epilogue that adds something runs on zero operands (Epilogue.at_k)."""
    s = epi.source
    return operands.plan_matmul(a.shape, a.strides, a.ptr, b.shape, b.strides, b.ptr, a.dtype.itemsize,
                                out.dtype.itemsize, out.shape, out.strides, out.ptr, transposed_store,
                                k_major=dtype_name(a.dtype) in FP8_DTYPES, indexed=epi.indexed,
                                swap=epi.block_a is None or transposed_store, zero_k_kernel=epi.adds,
                                source=None if s is None else (s.shape, s.strides, s.ptr, s.dtype.itemsize))


def _majors(lay: operands.MatmulPlan) -> tuple[str, str]:
    """(a_major, b_major) of the kernel's operands as the layout placed them."""
    return ("k" if lay.a.place.inner == "cols" else "mn"), ("mn" if lay.b.place.inner == "cols" else "k")


@dataclasses.dataclass(frozen=True)
class CallPlan:
    """What one call computes, decided on shapes, strides, dtypes and addresses alone (no GPU): the operands' layout,
    the epilogue as the kernel applies it, and the config in the kernel's frame (after any swap: its in_dtype is the
    dtype of the operand it reads as A). `config` None: nothing to launch (an empty result, or zeros for K = 0)."""

    layout: operands.MatmulPlan
    epilogue: epilogue.Epilogue
    config: GemmConfig | None
    signature: tuple = ()   # what it was planned for, when planned on stand-ins (ptxgemm.gemm.signatures)


def kernel_dtypes(a, b, swapped: bool) -> tuple[str, str | None]:
    """(in_dtype, b_dtype) of the kernel's A and B: the caller's a and b, or b and a when the problem is computed
    as C^T = B^T A^T (a mixed fp8 pair then trades places with its operands)."""
    ka, kb = (b, a) if swapped else (a, b)
    return dtype_name(ka.dtype), b_dtype_of(ka, kb)


def plan_call(a, b, out, config: GemmConfig | None, epi: epilogue.Epilogue, *, device, ctas: int | None = None,
              spill_check=None) -> CallPlan:
    """The whole plan of `out = epi(a @ b)` from array descriptors (anything with shape, strides, dtype and ptr):
    every rule checked, no GPU touched. `device` (.name, .sm_count) drives the selection; `spill_check(config)` says
    whether ptxas spills a fused pick (default: ask ptxas, see `spills`). `device` may be a callable, asked only
    when a kernel must be picked (an empty problem needs no GPU). GemmPlan binds the result to memory and
    a kernel; ptxgemm.tools.emulator executes it on host memory."""
    check_dtypes(a, b)
    out_dtype = check_out_dtype(out.dtype, "out")
    check_config(config)
    epi = epi.at_k(_problem_k(a, b))
    transposed = config is not None and config.transposed_store
    lay = _layout(a, b, out, transposed, epi)
    if lay.a is None:  # nothing to multiply: an empty result, or zeros (K = 0 and nothing added)
        return CallPlan(lay, epi, None)
    if callable(device):
        device = device()
    cfg = _resolve_config(config, *kernel_dtypes(a, b, lay.swapped), out_dtype, *_majors(lay),
                          (lay.m, lay.n, lay.k), device=device, ctas=ctas, batches=lay.batches,
                          fused=epi.config_fields(lay.swapped, lay.n), spill_check=spill_check)
    if cfg.transposed_store != transposed:  # the selection chose the transposed store (swap-AB): plan for it
        lay = _layout(a, b, out, True, epi)
        kin, kb = kernel_dtypes(a, b, lay.swapped)
        cfg = dataclasses.replace(cfg, in_dtype=kin, b_dtype=kb, **dict(zip(("a_major", "b_major"), _majors(lay))),
                                  **epi.config_fields(lay.swapped, lay.n))
    check_ctas(ctas, cfg.cluster_size)
    return CallPlan(lay, epi, cfg)


def _problem_k(a, b) -> int:
    return int(a.shape[-1]) if len(a.shape) else 0


def parse_epilogue(a, b, convert, **args) -> epilogue.Epilogue:
    """The epilogue arguments checked against the problem of a @ b (the caller's M, N, K); `convert(x, name)`
    makes an array argument a descriptor (a device array, or a host stand-in when planning before the upload)."""
    problem = operands.plan_matmul(a.shape, a.strides, 0, b.shape, b.strides, 0, a.dtype.itemsize, 4)
    return epilogue.parse(**args, m=problem.m, n=problem.n, k=problem.k, in_dtype=dtype_name(a.dtype),
                          batched=bool(problem.batch_shape), convert=convert)
