"""Rendering PTX from the jinja2 templates in ptx_templates/.

Undefined template variables are errors (StrictUndefined): a typo in a template must fail loudly at render
time, never emit an empty string into the PTX.
"""
from __future__ import annotations

import functools
from pathlib import Path

import jinja2

TEMPLATE_DIR = Path(__file__).resolve().parent.parent / "ptx_templates"


def _template_dir() -> Path:
    if TEMPLATE_DIR.is_dir():
        return TEMPLATE_DIR
    import importlib.resources

    return Path(str(importlib.resources.files("ptx_templates")))


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_template_dir())),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["hex"] = lambda v: f"0x{int(v):x}"
    return env


def render(template: str, **params) -> str:
    """Render one template to PTX text. `params` are the template's named values."""
    text = environment().get_template(template).render(**params)
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.isascii():  # ptxas rejects any non-ASCII byte, comments included
            raise ValueError(f"{template}: rendered line {number} is not ASCII: {line.strip()!r}")
    return text
