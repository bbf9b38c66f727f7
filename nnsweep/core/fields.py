"""One definition per setting: a frozen dataclass field carries its default, bounds and help.

A spec section (``measure``, ``budget``, ...) is a frozen dataclass whose fields are made
with :func:`setting`; the spec's pydantic schema, the dataclass's own check and the
command-line options that mirror a key are all derived from that one field, so a default
or a bound is written once.

Example:
    >>> @dataclass(frozen=True)
    ... class Demo:
    ...     iters: int = setting(200, "timed runs", ge=1, le=1000)
    ...     def __post_init__(self) -> None:
    ...         check_settings(self)
    >>> Demo().iters, bounds_text(Demo, "iters")
    (200, '>= 1 and <= 1,000')
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from nnsweep.core.errors import SpecError

__all__ = [
    "Setting",
    "bounds_text",
    "check_settings",
    "number_text",
    "setting",
    "setting_of",
    "settings_of",
    "value_type",
]

_KEY = "nnsweep.setting"


@dataclass(frozen=True)
class Setting:
    """A setting's help and bounds (``None``: unbounded on that side).

    Args:
        help: what it does, in a few words (the CLI's help and the schema's description).
        ge, gt, le, lt: inclusive and exclusive bounds of a number.
        max_length: the longest a text may be (texts are never empty).
        unit: how a command-line option says a number: ``seconds``, ``fraction`` or ``""``.
    """

    help: str
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    max_length: int | None = None
    unit: str = ""

    def bounds(self) -> dict[str, Any]:
        """The bounds as pydantic's ``Field`` takes them."""
        named = {"ge": self.ge, "gt": self.gt, "le": self.le, "lt": self.lt}
        out: dict[str, Any] = {k: v for k, v in named.items() if v is not None}
        if self.max_length is not None:
            out |= {"min_length": 1, "max_length": self.max_length}
        return out


def setting(
    default: Any,
    help: str,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    max_length: int | None = None,
    unit: str = "",
) -> Any:
    """A dataclass field with its default, bounds and help: the one place they are written."""
    meta = Setting(help, ge=ge, gt=gt, le=le, lt=lt, max_length=max_length, unit=unit)
    return field(default=default, metadata={_KEY: meta})


def setting_of(cls: type, name: str) -> tuple[Setting, Any]:
    """The setting ``name`` of the dataclass ``cls`` and its default."""
    for f in dataclasses.fields(cls):
        if f.name == name and _KEY in f.metadata:
            return f.metadata[_KEY], f.default
    raise KeyError(f"{cls.__name__}.{name} is not a setting")


def settings_of(cls: type) -> list[tuple[str, type, Setting, Any]]:
    """Every setting of ``cls`` in field order: name, value type, bounds and help, default."""
    hints = _hints(cls)
    return [(f.name, hints[f.name], f.metadata[_KEY], f.default) for f in dataclasses.fields(cls) if _KEY in f.metadata]


def value_type(annotation: Any) -> tuple[type, bool]:
    """The plain type of an annotation (``int``, ``float``, ``bool``, ``str``) and whether it may be ``None``."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        present = [a for a in typing.get_args(annotation) if a is not type(None)]
        return present[0], True
    return annotation, False


def bounds_text(cls: type, name: str) -> str:
    """The bounds of ``cls.name`` in words, e.g. ``>= 1 and <= 1,000,000``."""
    meta, _ = setting_of(cls, name)
    named = ((">=", meta.ge), (">", meta.gt), ("<=", meta.le), ("<", meta.lt))
    return " and ".join(f"{op} {number_text(v)}" for op, v in named if v is not None)


def number_text(value: float) -> str:
    """A bound as a reader takes it in: ``1,000,000``, ``86,400``, ``0.01``."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def check_settings(obj: Any) -> None:
    """Check each setting of a dataclass instance against its type and bounds.

    Raises:
        SpecError: naming the first field that is out of bounds or of the wrong type.
    """
    for name, annotation, meta, _ in settings_of(type(obj)):
        value = getattr(obj, name)
        kind, optional = value_type(annotation)
        if value is None and optional:
            continue
        if kind is bool:
            ok, what = isinstance(value, bool), "true or false"
        elif kind is int:
            ok, what = isinstance(value, int) and not isinstance(value, bool), "an integer"
        elif kind is float:
            number = isinstance(value, int | float) and not isinstance(value, bool)
            ok, what = number and math.isfinite(value), "a finite number"
        elif typing.get_origin(kind) is typing.Literal:
            allowed = typing.get_args(kind)
            ok, what = value in allowed, "one of " + ", ".join(map(str, allowed))
        else:
            ok, what = isinstance(value, str) and bool(value), "a non-empty text"
            ok = ok and (meta.max_length is None or len(value) <= meta.max_length)
        limits = bounds_text(type(obj), name)
        if ok and kind in (int, float):
            ok = _within(value, meta)
        if not ok:
            raise SpecError(name, f"must be {what}{' ' + limits if limits else ''}, got {value!r}")


def _within(value: float, meta: Setting) -> bool:
    return not (
        (meta.ge is not None and value < meta.ge)
        or (meta.gt is not None and value <= meta.gt)
        or (meta.le is not None and value > meta.le)
        or (meta.lt is not None and value >= meta.lt)
    )
