"""Programmatic dependent launch without a GPU: every GEMM kernel waits for the previous grid on its stream
(griddepcontrol.wait, kernel/templates/grid_dependency.ptx.j2) before its first access to global memory, in every
schedule and kernel kind; the wait and the trigger assemble to their SASS; the copy kernel, launched without the
attribute, has neither. tests/test_grid_dependency_gpu.py shows the wait necessary."""
from __future__ import annotations

import re

import pytest

from ptxgemm.cli.mutants import MUTANT_PRESETS
from ptxgemm.kernel.config import GemmConfig
from ptxgemm.toolchain import compiler
from ptxgemm.toolchain.kernels import render_gemm

#: the instructions that read or write global memory (TMA's bulk copies, the fix-ups' flags and partials, the
#: epilogue's vector loads and stores, the grouped walk's counts)
GLOBAL_ACCESS = re.compile(r"^\s*(@!?%\w+\s+)?(cp\.async\.bulk\.tensor|cp\.reduce\.async\.bulk|ld\.global|st\.global|"
                           r"ld\.acquire|ld\.relaxed|st\.relaxed|red\.|atom\.)")


def _code(ptx: str) -> list[str]:
    return [line.split("//", 1)[0] for line in ptx.splitlines()]


#: every preset plain, and traced where it has a trace build (the grouped kernel has none)
BUILDS = [(p, False) for p in sorted(MUTANT_PRESETS)] + [(p, True) for p in sorted(MUTANT_PRESETS) if "grouped" not in p]


@pytest.mark.parametrize("preset,trace", BUILDS, ids=[f"{p}{'-traced' if t else ''}" for p, t in BUILDS])
def test_every_kernel_waits_for_the_previous_grid_before_touching_global_memory(preset, trace):
    lines = _code(render_gemm(GemmConfig(**{**MUTANT_PRESETS[preset], "trace": trace})))
    waits = [i for i, line in enumerate(lines) if line.strip() == "griddepcontrol.wait;"]
    triggers = [i for i, line in enumerate(lines) if line.strip() == "griddepcontrol.launch_dependents;"]
    assert len(waits) == 1 and len(triggers) == 1, (waits, triggers)
    first_access = next(i for i, line in enumerate(lines) if GLOBAL_ACCESS.match(line))
    assert waits[0] < first_access, lines[first_access]
    assert waits[0] < triggers[0]


def test_the_wait_and_the_trigger_assemble_to_their_sass():
    sass = compiler.compile_ptx(render_gemm(GemmConfig.from_tag("coop128x256"))).sass()
    assert re.search(r"\bACQBULK\b", sass) and re.search(r"\bPREEXIT\b", sass)


def test_the_copy_kernel_has_no_grid_dependency():
    """The relayout kernel is launched without the attribute (runtime/relayout.py), so it must not need the wait:
    it has none, and the stream orders it after whatever came before."""
    from ptxgemm.runtime.relayout import relayout_ptx

    assert all("griddepcontrol" not in relayout_ptx(itemsize) for itemsize in (1, 2, 4))
