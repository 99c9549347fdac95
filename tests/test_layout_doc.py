"""docs/layout.md lists every module of the package with the first sentence of its docstring, in the order a call
travels. This test regenerates the page and compares; `python tests/test_layout_doc.py write` rewrites it."""
from __future__ import annotations

import ast
import re
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "layout.md"
ORDER = ("kernel", "toolchain", "runtime", "plan", "select", "bench", "tools", "cli")
TOP = ("__init__.py", "__main__.py", "errors.py", "accuracy.py", "gemm.py", "grouped.py", "tuning.py")
HEADER = """# Repository layout

What each folder and module holds, in the order a call travels: config → PTX (kernel/) → cubin (toolchain/) →
launch (runtime/, gemm.py), with planning (plan/) and selection (select/) before the launch, and the
measuring (bench/), inspecting (tools/) and command line (cli/) around it. Each line is the first sentence of
the module's own docstring; docs/architecture.md says how the layers depend on each other.
`python tests/test_layout_doc.py write` regenerates this page (tests/test_layout_doc.py checks it is current).
"""
FOOTER = """tests/                    pytest; GPU tests carry the marker `gpu` and skip, saying why, without one
docs/                     the pages linked from the README; docs/results/ holds the runs they cite
.ci/run                   what CI runs: the README's test command"""


def first_sentence(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    text = " ".join(doc.split("\n\n")[0].split())
    m = re.match(r"(.+?[.])(\s+[A-Z(`]|$)", text)
    return m.group(1) if m else text


def entry(path: Path, indent: int) -> list[str]:
    lines = textwrap.wrap(first_sentence(path), 118 - indent - 24) or [""]
    return [" " * indent + f"{path.name:<24}{lines[0]}"] + [" " * (indent + 24) + line for line in lines[1:]]


def render() -> str:
    pkg = REPO / "ptxgemm"
    out = [HEADER, "```", "ptxgemm/"]
    for name in TOP:
        out += entry(pkg / name, 2)
    for folder in ORDER:
        out += entry(pkg / folder / "__init__.py", 2)
        out[-len(entry(pkg / folder / "__init__.py", 2))] = out[-len(entry(pkg / folder / "__init__.py", 2))].replace(
            "  __init__.py ", f"  {folder + '/':<11} ", 1)
        for module in sorted((pkg / folder).glob("*.py")):
            if module.name != "__init__.py":
                out += entry(module, 4)
        if folder == "kernel":
            out.append("    templates/              the jinja2 PTX templates, shipped in the wheel as package data")
    out += [FOOTER, "```", ""]
    return "\n".join(out)


def test_the_layout_page_lists_every_module_as_its_docstring_says():
    assert PAGE.read_text() == render(), "docs/layout.md is stale: run `python tests/test_layout_doc.py write`"


if __name__ == "__main__" and sys.argv[1:] == ["write"]:
    PAGE.write_text(render())
