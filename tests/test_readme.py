"""The README's examples (and those of docs/gemm.md and docs/tools.md, where its long sections went), produced by
the code they describe, so the pages cannot drift (no GPU needed).

Three kinds of example are checked, all inside fenced code blocks:
- `>>> expression` followed by `ConfigError: message`: the expression, evaluated with the README's own `a` and `b`
  (the assignments of its python blocks), raises that error with exactly that message (its lines joined by
  spaces).
- `$ python -m ptxgemm ...` followed by output lines: the command, run from an empty directory without a GPU,
  prints exactly those lines (stdout, then stderr; trailing spaces and blank lines aside).
- a `BARRIER_STALL while ...` block: the message ptxgemm.runtime.debug builds from a stall record, with `...` standing for
  what depends on the run.
And every error-looking line in a code block must belong to one of them, so a new example cannot go unchecked.
"""
from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ptxgemm

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
#: the README and the pages its longer sections moved to; their examples are held to the code the same way
PAGES = (README, ROOT / "docs" / "gemm.md", ROOT / "docs" / "tools.md")
ERROR_LINE = re.compile(r"^\w*Error: |: error: |^BARRIER_STALL\b")


def code_blocks(text: str) -> list[tuple[str, list[str]]]:
    """[(info string, lines)] of every fenced code block."""
    blocks, current, info = [], None, ""
    for line in text.splitlines():
        if line.startswith("```"):
            if current is None:
                current, info = [], line[3:].strip()
            else:
                blocks.append((info, current))
                current = None
        elif current is not None:
            current.append(line)
    assert current is None, "README.md: an unclosed code block"
    return blocks


def sessions(lines: list[str], prompt: str) -> list[tuple[str, list[str]]]:
    """[(input after the prompt, the output lines up to the next prompt)] of one block."""
    out = []
    for line in lines:
        if line.startswith(prompt):
            out.append((line[len(prompt):], []))
        elif out:
            out[-1][1].append(line)
    return out


BLOCKS = [block for page in PAGES for block in code_blocks(page.read_text())]
REPL = [(expr, output) for _, lines in BLOCKS for expr, output in sessions(lines, ">>> ")]
CONSOLE = [(cmd, output) for _, lines in BLOCKS for cmd, output in sessions(lines, "$ ")]
STALLS = [lines for _, lines in BLOCKS if lines and lines[0].startswith("BARRIER_STALL while")]


def readme_operands() -> dict:
    """The README's `a` and `b`: the imports and the assignments to a and b of its python blocks (blocks marked
    ```python only; a ```python torch block is an interop example that needs a GPU and torch). Each caller gets its
    own namespace; the arrays are made once (random operands of that size take most of a second)."""
    return dict(_readme_namespace())


@functools.lru_cache(maxsize=1)
def _readme_namespace() -> dict:
    setup = [line for info, lines in BLOCKS if info == "python" for line in lines
             if re.match(r"(import |from |a = |b = )", line)]
    namespace: dict = {}
    exec("\n".join(setup), namespace)
    assert {"a", "b", "ptxgemm", "np"} <= set(namespace), "the README's python block no longer defines a and b"
    return namespace


def test_the_readme_has_examples_of_each_kind():
    assert len([1 for _, output in REPL if output and output[0].startswith("ConfigError: ")]) >= 2
    assert any(cmd.startswith("python -m ptxgemm dump") for cmd, _ in CONSOLE)
    assert any(cmd.startswith("python -m ptxgemm swizzle-probe") for cmd, _ in CONSOLE)
    assert any(cmd.startswith("python -m ptxgemm bank-conflicts") for cmd, _ in CONSOLE)
    assert len(STALLS) == 1


def test_every_error_example_is_checked():
    checked = {line for _, output in REPL + CONSOLE for line in output} | {line for block in STALLS for line in block}
    unchecked = [line for _, lines in BLOCKS for line in lines if ERROR_LINE.search(line) and line not in checked]
    assert not unchecked, f"README error examples that no test produces: {unchecked}"


@pytest.mark.parametrize("expr, output", [(e, o) for e, o in REPL if o and o[0].startswith("ConfigError: ")],
                         ids=[e for e, o in REPL if o and o[0].startswith("ConfigError: ")])
def test_config_error_examples(expr, output):
    """ConfigErrors come before any GPU use, so these run anywhere."""
    expected = " ".join(output).removeprefix("ConfigError: ")
    with pytest.raises(ptxgemm.ConfigError) as exc:
        eval(expr, readme_operands())
    assert str(exc.value) == expected


@pytest.mark.parametrize("cmd, output", CONSOLE, ids=[c for c, _ in CONSOLE])
def test_console_examples(cmd, output, tmp_path):
    assert cmd.startswith("python -m ptxgemm "), f"a README console example the test cannot run: {cmd}"
    assert not re.search(r"[|<>;&`]|\$\(", cmd), f"shell syntax in a README console example: {cmd}"
    argv = shlex.split(cmd)
    proc = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})

    def lines(text):
        out = [line.rstrip() for line in text.splitlines()]
        while out and not out[-1]:
            out.pop()
        return out

    assert lines(proc.stdout + proc.stderr) == lines("\n".join(output))
    if any(": error: " in line for line in output):
        assert proc.returncode == 2 and proc.stdout == ""
        assert list(tmp_path.iterdir()) == []  # bad input is refused before anything is written
    else:
        assert proc.returncode == 0, proc.stderr


def test_barrier_stall_example():
    """The debug-mode message, built by StallRecords from a record as the kernel writes it (ptxgemm.runtime.debug)."""
    from ptxgemm.runtime.debug import BarrierStall, StallRecords
    from ptxgemm.kernel.stall_format import MAGIC, RECORD_BYTES, STALL_CODES

    class Buffer:  # the pinned host memory the kernel writes: one record of 8 u32 words per thread
        def __init__(self, threads):
            self.words = np.zeros(threads * RECORD_BYTES // 4, np.uint32)

        def as_u32(self):
            return self.words

    records = StallRecords.__new__(StallRecords)   # no GPU: the same decoding over a plain buffer
    records.threads, records.buffer = 384, Buffer(384)
    thread = 128                                   # consumer 0's first thread, waiting on a full barrier
    records.buffer.words[thread * 8:thread * 8 + 8] = [MAGIC << 16 | STALL_CODES["full"], 0, 0x30400, thread, 0, 3,
                                                       1000, 0]
    with pytest.raises(BarrierStall) as exc:
        records.raise_if_stalled("running " + ptxgemm.GemmConfig(debug=True).describe())
    [block] = STALLS
    pattern = ".+?".join(re.escape(part) for part in " ".join(block).split("..."))
    assert re.fullmatch(pattern, str(exc.value)), (pattern, str(exc.value))
