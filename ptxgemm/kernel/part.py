"""What every part of a GemmConfig shares (kernel/tile.py's Tile, kernel/config_parts.py's four): the check of its
fields' types, read from their annotations, and numpy's names for dtypes, which the dtype fields are stored as.
"""
from __future__ import annotations

import dataclasses
import functools
import numbers
import operator

import numpy as np

from ..errors import ConfigError

_DTYPE_NAMES: dict = {}


def dtype_name(d) -> str | None:
    """numpy's name of a dtype or anything numpy reads as one ('bfloat16' and the fp8 types too: ml_dtypes registers
    them), None for None; remembered per spelling: numpy builds a name anew on every read (0.75 us), and a matmul
    call's plan key reads two, the cost model a few hundred per selection."""
    if d is None:
        return None
    try:
        name = _DTYPE_NAMES.get(d)
    except TypeError:   # unhashable: ask numpy each time
        return _numpy_dtype_name(d)
    if name is None:
        name = _DTYPE_NAMES[d] = _numpy_dtype_name(d)
    return name


def _numpy_dtype_name(d) -> str:
    try:
        return np.dtype(d).name
    except TypeError:
        import ml_dtypes  # noqa: F401 - registers 'bfloat16' with numpy

        return np.dtype(d).name


@functools.cache
def _field_types(cls) -> tuple[tuple[str, str, bool], ...]:
    """(name, kind, optional) of every field of a part, read once from its annotations: kind "dtype" for the names
    in its DTYPE_FIELDS, else the annotated type ("int", "bool", "str")."""
    return tuple((f.name, "dtype" if f.name in cls.DTYPE_FIELDS else f.type.replace(" | None", ""),
                  f.type.endswith("| None")) for f in dataclasses.fields(cls))


@functools.cache
def field_values(cls) -> tuple[tuple[str, ...], operator.attrgetter]:
    """(names, getter) of a part's fields: `getter(part)` is the tuple of their values, read in C (a config reads
    every part's on each construction)."""
    names = tuple(f.name for f in dataclasses.fields(cls))
    return names, operator.attrgetter(*names)


class Part:
    """A frozen dataclass of some of a GemmConfig's fields. Its __post_init__ calls `check_types` before its own
    rules, so that no rule formats or compares a value of the wrong type."""

    DTYPE_FIELDS: tuple[str, ...] = ()   # fields that hold a dtype: stored as numpy's name of it

    def check_types(self) -> None:
        """Each field's type: whole numbers (not bools), bools, strings, dtypes (anything numpy reads as one, stored
        as its name), each optional where its annotation says `| None`. A whole number of another type (numpy's)
        is stored as an int, so that equal configs hash alike."""
        for name, kind, optional in _field_types(type(self)):
            value = getattr(self, name)
            if value is None and optional:
                continue
            if kind == "dtype":
                try:
                    object.__setattr__(self, name, dtype_name(value))
                    continue
                except TypeError:
                    ok = False
            elif kind == "int":
                ok = type(value) is int or (isinstance(value, numbers.Integral)
                                            and not isinstance(value, (bool, np.bool_)))
            elif kind == "bool":
                ok = isinstance(value, (bool, np.bool_))
            else:
                ok = isinstance(value, str)
            if not ok:
                what = {"dtype": "a dtype", "int": "a whole number", "bool": "True or False"}.get(kind, "a string")
                raise ConfigError(f"{name}: must be {what}{' or None' if optional else ''}, got "
                                  f"{type(value).__name__} {value!r}")
            if kind == "int" and type(value) is not int:
                object.__setattr__(self, name, int(value))

    def fields(self) -> dict:
        """The fields by name (values as stored: normalized and checked)."""
        names, values = field_values(type(self))
        return dict(zip(names, values(self)))

    def replace(self, **changes):
        """This part with `changes`, checked anew."""
        return type(self)(**{**self.fields(), **changes})
