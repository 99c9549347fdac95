"""How much of the CPU suite's heaviest work a run does: light by default, full with PTXGEMM_FULL_TESTS=1.

The README's test command should take a few minutes on a 2-core machine without a GPU, so by default the tests that
sample a large space (random plans, the recorded PTX digests) take a light sample, and the tests marked `slow` are
skipped. PTXGEMM_FULL_TESTS=1 runs the full counts and the `slow` tests; CI sets it (.ci/run). Neither is silent:
a `slow` test's skip says why in pytest's summary (-ra), and each light count adds a line to the terminal summary
(tests/conftest.py prints `LIGHT`).
"""
from __future__ import annotations

import os

ENV = "PTXGEMM_FULL_TESTS"
#: the full counts and the `slow` tests: PTXGEMM_FULL_TESTS set to anything but "" or "0"
FULL = os.environ.get(ENV, "") not in ("", "0")
SKIP_REASON = f"slow: {ENV}=1 runs it (CI does, .ci/run)"

#: what ran light this session, one line each, for the terminal summary
LIGHT: list[str] = []


def pick(light: int, full: int, what: str) -> int:
    """`full` under PTXGEMM_FULL_TESTS=1, else `light`, noted (with `what` it counts) for the terminal summary."""
    if FULL:
        return full
    line = f"{what}: {light} of {full} ({ENV}=1: all {full})"
    if line not in LIGHT:
        LIGHT.append(line)
    return light
