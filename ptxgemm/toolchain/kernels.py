"""A config's kernel as text and as a cubin: the template rendered with the config's numbers (ptxgemm.kernel.codegen),
assembled by whole-program ptxas (ptxgemm.toolchain.compiler, cached on disk)."""
from __future__ import annotations

import functools

from ..kernel import codegen
from ..kernel.config import GemmConfig
from ..kernel.params import template_params
from . import compiler


def render_gemm(config: GemmConfig) -> str:
    params = template_params(config)
    return codegen.render(params["template_name"], **params)


def compile_gemm(config: GemmConfig) -> compiler.CompiledKernel:
    """PTX → cubin for `config` (the cubin is cached on disk by PTX text, ptxas version and flags)."""
    return compiler.compile_ptx(render_gemm(config))


@functools.lru_cache(maxsize=None)
def spills(config: GemmConfig) -> bool:
    """Whether ptxas spills registers in `config`'s kernel: once per config and process (every later plan of the
    problem asks again), compiled (cubins are cached on disk; the chosen one is loaded
    next anyway). GemmConfig.fused_registers estimates the fused epilogue's
    registers, but ptxas hoists its vector loads as far as it sees room, so the selection asks ptxas (the measured
    cases: tests/test_epilogue.py's spill check). Without ptxas there is no report, and no spill is assumed."""
    kernel = compile_gemm(config)
    fn = kernel.report.functions.get(config.kernel_name) if kernel.report is not None else None
    return fn is not None and fn.spill_store_bytes > 0
