"""Rendering PTX from the jinja2 templates in ptxgemm/kernel/templates/.

Undefined template variables are errors (StrictUndefined): a typo in a template must fail loudly at render
time, never emit an empty string into the PTX.
"""
from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path

import jinja2

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"


def template_dir() -> Path:
    """The templates ship inside the package (ptxgemm/kernel/templates, package data), so this holds for an installed wheel
    and for a source checkout alike."""
    return TEMPLATE_DIR


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir())),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["hex"] = lambda v: f"0x{int(v):x}"
    env.filters["f32"] = _f32_literal
    return env


def _f32_literal(v: float) -> str:
    """PTX's exact fp32 literal (0fXXXXXXXX) of `v` rounded to fp32."""
    import struct

    return "0f%08X" % struct.unpack(">I", struct.pack(">f", float(v)))[0]


_ENTRY_PARAM = re.compile(r"\.param \.(?:align \d+ \.b8|(\w+)) (\w+)")


def entry_params(ptx: str) -> list[tuple[str, str]]:
    """(type, name) of each parameter of the PTX's first `.entry`, in order; type "" for the byte arrays (the
    tensor maps). What the host must pack, read from what the kernel declares."""
    head = ptx[ptx.index(".visible .entry"):ptx.index(")\n.maxntid")]
    return _ENTRY_PARAM.findall(head)


def render(template: str, **params) -> str:
    """Render one template to PTX text. `params` are the template's named values."""
    text = environment().get_template(template).render(**params)
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.isascii():  # ptxas rejects any non-ASCII byte, comments included
            raise ValueError(f"{template}: rendered line {number} is not ASCII: {line.strip()!r}")
    return text


# ---------------------------------------------------------------------------------------------------------------
# Source map: which template line made each line of PTX
# ---------------------------------------------------------------------------------------------------------------

_MARK = re.compile(r"//@(src|call):([\w.]+):(\d+)")
_EXPR = re.compile(r"\{\{(-?)(.*?)(-?)\}\}")


def _mark_source(name: str, source: str) -> str:
    """The template text with a `//@src:NAME:LINE` comment at the end of every line that can emit PTX, and every
    `{{ expr }}` wrapped so that a macro's multi-line output gets `//@call:NAME:LINE` (its call site) on each line.
    Only comments are added, never lines, so the marked render has the plain render's lines in the same places."""
    out, in_comment = [], False
    for number, line in enumerate(source.split("\n"), start=1):
        stripped = line.strip()
        if in_comment:
            in_comment = "#}" not in line
            out.append(line)
            continue
        if "{#" in line and "#}" not in line[line.index("{#"):]:
            in_comment = True
            out.append(line)
            continue
        if not stripped or stripped.startswith(("{%", "{#")):
            out.append(line)  # block tags and comments emit nothing (trim_blocks, lstrip_blocks)
            continue
        line = _EXPR.sub(lambda m: f'{{{{{m.group(1)} ({m.group(2)}) | called_at("{name}", {number}) {m.group(3)}}}}}',
                         line)
        out.append(f"{line}//@src:{name}:{number}")
    return "\n".join(out)


def _called_at(value, name: str, number: int):
    # A macro's output carries the marks of its own lines; a plain value (a register name, a number) does not.
    if isinstance(value, str) and "//@src:" in value:
        return "\n".join(f"{line}//@call:{name}:{number}" for line in value.split("\n"))
    return value


class _MarkingLoader(jinja2.FileSystemLoader):
    def get_source(self, environment, template):
        source, filename, uptodate = super().get_source(environment, template)
        return _mark_source(template, source), filename, uptodate


@functools.lru_cache(maxsize=1)
def _marking_environment() -> jinja2.Environment:
    # its own template cache, as large as jinja2's default: without one (cache_size=0) every `{% import %}` of a
    # render recompiled the marked template it names, about 110 compilations and 15 s per source-mapped render
    env = environment().overlay(loader=_MarkingLoader(str(template_dir())), cache_size=400)
    env.filters["called_at"] = _called_at
    return env


@dataclasses.dataclass(frozen=True)
class LineOrigin:
    """Where one rendered line came from: the template line that holds its text, and the macro call sites that
    expanded it, innermost first (empty for text written in the top template itself)."""

    template: str
    line: int
    calls: tuple[tuple[str, int], ...] = ()

    def __str__(self) -> str:
        via = "".join(f" via {t}:{n}" for t, n in self.calls)
        return f"{self.template}:{self.line}{via}"


def render_with_origins(template: str, **params) -> tuple[str, list[LineOrigin | None]]:
    """`render(template, **params)` and, for each of its lines, the template line it came from (None for lines
    that no template line can claim, e.g. blank ones)."""
    text = render(template, **params)
    marked = _marking_environment().get_template(template).render(**params)
    plain_lines, marked_lines = text.splitlines(), marked.splitlines()
    if len(plain_lines) != len(marked_lines):
        raise AssertionError(f"{template}: source-map render has {len(marked_lines)} lines, the plain one "
                             f"{len(plain_lines)}")
    origins: list[LineOrigin | None] = []
    for number, (plain, tagged) in enumerate(zip(plain_lines, marked_lines), start=1):
        if _MARK.sub("", tagged).rstrip() != plain.rstrip():
            raise AssertionError(f"{template}: source-map render differs from the plain one at line {number}: "
                                 f"{plain!r} vs {_MARK.sub('', tagged)!r}")
        marks = _MARK.findall(tagged)
        src = next(((t, int(n)) for kind, t, n in marks if kind == "src"), None)
        calls = []
        if src is not None:  # call sites recorded after the text's own mark belong to it, innermost first
            after = marks[marks.index(("src", src[0], str(src[1]))) + 1:]
            for kind, t, n in after:
                if kind != "call":
                    break
                calls.append((t, int(n)))
        origins.append(LineOrigin(src[0], src[1], tuple(calls)) if src else None)
    return text, origins
