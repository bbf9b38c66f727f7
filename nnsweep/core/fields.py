"""One definition per setting: a frozen dataclass field carries its default, bounds and help.

A spec section (``measure``, ``space``, ...) is a frozen dataclass of :func:`setting` fields;
the pydantic schema, the dataclass's check and the CLI options mirroring a key derive from
them. A list setting (``tuple[X, ...]``) is non-empty without repeats; bounds apply to each value.

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
import operator
import types
import typing
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from nnsweep.core.errors import SpecError

__all__ = [
    "REQUIRED",
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
REQUIRED: Any = dataclasses.MISSING
"""The default of a setting the spec must give (``setting(REQUIRED, ...)``)."""


@dataclass(frozen=True)
class Setting:
    """A setting's help and bounds (``None``: unbounded on that side).

    Args:
        help: what it does, in a few words (the CLI's help and the schema's description).
        ge, gt, le, lt: inclusive and exclusive bounds of a number.
        max_length: the longest a text may be (texts are never empty).
        unit: how a command-line option says a number: ``seconds``, ``fraction`` or ``""``.
        key: the spec's name for it when not the field's (``space.runtime`` is ``runtimes``).
        choices: the values allowed (of each value, for a list).
        ranges: a list of integers the spec may also give as ``{low, high}``.
    """

    help: str
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    max_length: int | None = None
    unit: str = ""
    key: str | None = None
    choices: tuple[Any, ...] | None = None
    ranges: bool = False

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
    key: str | None = None,
    choices: tuple[Any, ...] | None = None,
    ranges: bool = False,
    compare: bool = True,
) -> Any:
    """A dataclass field with its default, bounds and help: the one place they are written.

    ``compare=False`` for a setting another one already says (an older spelling folded in).
    """
    meta = Setting(
        help, ge=ge, gt=gt, le=le, lt=lt, max_length=max_length, unit=unit, key=key, choices=choices, ranges=ranges
    )
    if isinstance(default, list | dict | set):
        raise TypeError("a setting's default is immutable: a tuple, or a MappingProxyType for a mapping")
    if isinstance(default, MappingProxyType):  # a dataclass takes no unhashable default
        return field(default_factory=lambda: default, metadata={_KEY: meta}, compare=compare)
    return field(default=default, metadata={_KEY: meta}, compare=compare)


def setting_of(cls: type, name: str) -> tuple[Setting, Any]:
    """The setting ``name`` of the dataclass ``cls`` and its default."""
    for f in dataclasses.fields(cls):
        if f.name == name and _KEY in f.metadata:
            return f.metadata[_KEY], _default(f)
    raise KeyError(f"{cls.__name__}.{name} is not a setting")


def settings_of(cls: type) -> list[tuple[str, type, Setting, Any]]:
    """Every setting of ``cls`` in field order: name, value type, bounds and help, default."""
    hints = _hints(cls)
    fields = [f for f in dataclasses.fields(cls) if _KEY in f.metadata]
    return [(f.name, hints[f.name], f.metadata[_KEY], _default(f)) for f in fields]


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def value_type(annotation: Any) -> tuple[Any, bool]:
    """An annotation without its ``None`` (``int``, ``str | bool``, ``tuple[int, ...]``) and whether it had one."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = typing.get_args(annotation)
        present = [a for a in args if a is not type(None)]
        if len(present) == len(args):
            return annotation, False
        return functools.reduce(operator.or_, present), True
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
        if typing.get_origin(kind) is tuple:
            ok, what = _check_list(value, typing.get_args(kind)[0], meta)
        else:
            ok, what = _check_one(value, kind, meta)
        if not ok:
            limits = bounds_text(type(obj), name)
            raise SpecError(name, f"must be {what}{' ' + limits if limits else ''}, got {value!r}")


def _check_list(value: Any, item: Any, meta: Setting) -> tuple[bool, str]:
    ok = isinstance(value, tuple) and bool(value) and len(set(value)) == len(value)
    ok = ok and all(_check_one(one, item, meta)[0] for one in value)
    return ok, f"a non-empty list without repeats, each value {_check_one(None, item, meta)[1]}"


def _check_one(value: Any, kind: Any, meta: Setting) -> tuple[bool, str]:
    """Whether ``value`` is of the setting's plain ``kind`` and within its bounds, and what it must be."""
    if meta.choices is not None:
        return value in meta.choices, "one of " + ", ".join(map(str, meta.choices))
    if kind is bool:
        return isinstance(value, bool), "true or false"
    if kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return ok and _within(value, meta), "an integer"
    if kind is float:
        number = isinstance(value, int | float) and not isinstance(value, bool)
        return number and math.isfinite(value) and _within(value, meta), "a finite number"
    if typing.get_origin(kind) is typing.Literal:
        allowed = typing.get_args(kind)
        return value in allowed, "one of " + ", ".join(map(str, allowed))
    if kind is str:
        ok = isinstance(value, str) and bool(value)
        return ok and (meta.max_length is None or len(value) <= meta.max_length), "a non-empty text"
    plain = typing.get_origin(kind) or kind  # a mapping, an enum, a range: the schema checked its parts
    return isinstance(value, plain), f"a {getattr(plain, '__name__', plain)}"


def _within(value: float, meta: Setting) -> bool:
    return not (
        (meta.ge is not None and value < meta.ge)
        or (meta.gt is not None and value <= meta.gt)
        or (meta.le is not None and value > meta.le)
        or (meta.lt is not None and value >= meta.lt)
    )
