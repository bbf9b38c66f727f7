"""The pydantic schema of a sweep file, built lazily (pydantic loads only when a spec is
parsed), and its errors translated into :class:`SpecError` naming the YAML path."""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import operator
import types
import typing
from typing import Any, Literal

from nnsweep.core.errors import SpecError, excerpt
from nnsweep.core.fields import REQUIRED, Setting, _within, setting_of, settings_of, value_type
from nnsweep.spec.settings import SECTIONS, Bridge, IntRange, Npu, _default_objectives

__all__ = ["schema", "translate"]


@functools.lru_cache(maxsize=1)
def schema() -> Any:
    """Build the pydantic schema lazily (pydantic is imported only when a spec is parsed).

    Each section is derived from its dataclass (:data:`~nnsweep.spec.settings.SECTIONS`,
    :class:`~nnsweep.spec.settings.Bridge`, :class:`~nnsweep.spec.settings.Npu`); written
    here are the top-level keys, which :func:`~nnsweep.spec.build.parse_spec` resolves.
    """
    from typing import Annotated

    from pydantic import BaseModel, ConfigDict, Field, Strict

    Int = Annotated[int, Strict()]
    Text = Annotated[str, Strict()]

    class _Strict(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True, strict=False)

    models = {key: section_model(cls, _Strict) for key, cls in SECTIONS.items()}
    Space, Constraints, Data = models["space"], models["constraints"], models["data"]
    Budget, Measure, Tracking, Search = models["budget"], models["measure"], models["tracking"], models["search"]
    NpuIn = section_model(Npu, _Strict)

    class MetricIn(_Strict):
        function: Text = Field(min_length=1, max_length=1000)
        goal: Literal["maximize", "minimize"]

    BridgeIn = section_model(Bridge, _Strict)

    # the sections' models are built from dataclasses, so mypy cannot see them as types
    class SpecIn(_Strict):
        name: Text
        model: Text = Field(min_length=1, max_length=1000)
        kind: Literal["model", "decoder"] = "model"
        weights: Text | None = None
        input_shape: list[Int] | None = None
        devices: list[Text] = Field(default_factory=lambda: ["host"], min_length=1)
        objectives: dict[Text, Literal["maximize", "minimize"]] = Field(
            default_factory=_default_objectives, min_length=1
        )
        metrics: dict[Text, MetricIn] = Field(default_factory=dict)
        storage: Text = Field(default="journal", min_length=1, max_length=2000)
        bridges: dict[Text, BridgeIn] = Field(default_factory=dict)  # type: ignore[valid-type]
        npus: dict[Text, NpuIn] = Field(default_factory=dict)  # type: ignore[valid-type]
        space: Space = Field(default_factory=Space)  # type: ignore[valid-type]
        constraints: Constraints = Field(default_factory=Constraints)  # type: ignore[valid-type]
        data: Data = Field(default_factory=Data)  # type: ignore[valid-type]
        budget: Budget = Field(default_factory=Budget)  # type: ignore[valid-type]
        measure: Measure = Field(default_factory=Measure)  # type: ignore[valid-type]
        tracking: Tracking = Field(default_factory=Tracking)  # type: ignore[valid-type]
        search: Search = Field(default_factory=Search)  # type: ignore[valid-type]

    return SpecIn


def _strict(kind: type) -> Any:
    """Strict scalars: YAML's `true` is not 1, "5" is not 5, 1e26 is not an integer; floats are finite."""
    from typing import Annotated

    from pydantic import AllowInfNan, Strict

    if kind is float:
        return Annotated[float, Strict(), AllowInfNan(False)]
    return Annotated[kind, Strict()]


def section_model(cls: type, base: type) -> Any:
    """The pydantic model of the spec section the dataclass ``cls`` defines: each
    :func:`~nnsweep.core.fields.setting` a key (its ``key`` or the field's name) with its
    type, default and bounds, a list's values checked one by one."""
    from pydantic import create_model, field_validator

    keys: dict[str, Any] = {}
    checks: dict[str, Any] = {}
    for name, annotation, meta, _ in settings_of(cls):
        key = meta.key or name
        keys[key] = (_file_type(annotation, meta, base), setting_field(cls, name))
        kind = value_type(annotation)[0]
        if typing.get_origin(kind) is tuple or kind is IntRange:
            check = functools.partial(_check_values, meta=meta, unique=kind is not IntRange)
            checks[f"_values_of_{key}"] = field_validator(key)(check)
    return create_model(f"{cls.__name__}In", __base__=base, __validators__=checks, **keys)


def _file_type(annotation: Any, meta: Setting, base: type) -> Any:
    """The type a spec file gives for a dataclass field's ``annotation``."""
    kind, optional = value_type(annotation)
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if optional:
        return _file_type(kind, meta, base) | None
    if origin is tuple:
        listed: Any = list[_file_type(args[0], meta, base)]  # type: ignore[misc]
        return _range_model(meta, base) | listed if meta.ranges else listed
    if origin is collections.abc.Mapping:
        return dict[_file_type(args[0], meta, base), _file_type(args[1], meta, base)]  # type: ignore[misc]
    if isinstance(kind, types.UnionType):
        return functools.reduce(operator.or_, (_file_type(a, meta, base) for a in args))
    if kind is IntRange:
        return _range_model(meta, base) | list[_strict(int)]  # type: ignore[misc]
    if dataclasses.is_dataclass(kind):
        return section_model(kind, base)  # type: ignore[arg-type]
    if kind in (str, int, float, bool):
        return _strict(kind)
    return kind  # an enum or a Literal is its own strict type


def _range_model(meta: Setting, base: type) -> Any:
    """``{low, high}``: an inclusive range of integers within the setting's bounds."""
    from pydantic import Field, create_model

    bound = Field(**{k: v for k, v in meta.bounds().items() if k in ("ge", "gt", "le", "lt")})
    return create_model("RangeIn", __base__=base, low=(_strict(int), bound), high=(_strict(int), bound))


def _check_values(value: Any, meta: Setting, unique: bool) -> Any:
    """A list's values: none twice (``unique``), each within the setting's bounds or choices."""
    if not isinstance(value, list):
        return value  # a range: its bounds are its fields'
    if not value:
        raise ValueError("list at least one value")
    seen: list[Any] = []
    for item in value:
        if unique and item in seen:
            raise ValueError(f"lists {excerpt(item)} twice")
        seen.append(item)
    if meta.choices is not None and any(item not in meta.choices for item in value):
        raise ValueError(f"every value must be one of {', '.join(map(str, meta.choices))}")
    limits = [(meta.ge, meta.gt), (meta.le, meta.lt)]
    if any(v is not None for pair in limits for v in pair) and not all(_within(item, meta) for item in value):
        raise ValueError(f"every value must be {_range_text(meta)}")
    return value


def _range_text(meta: Setting) -> str:
    low, high = meta.ge if meta.ge is not None else meta.gt, meta.le if meta.le is not None else meta.lt
    return f"between {low:g} and {high:g}" if low is not None and high is not None else ""


def section_values(cls: type, raw: Any, path: str) -> dict[str, Any]:
    """The keyword arguments of ``cls`` from its validated section ``raw``: lists as tuples,
    ranges as the setting's form, nested sections as their dataclasses.

    Raises:
        SpecError: a range whose ``low`` is above its ``high``.
    """
    hints = typing.get_type_hints(cls)
    out: dict[str, Any] = {}
    for name, _, meta, _ in settings_of(cls):
        key = meta.key or name
        out[name] = _value(getattr(raw, key), hints[name], meta, f"{path}.{key}")
    return out


def _value(value: Any, annotation: Any, meta: Setting | None, path: str) -> Any:
    kind, _ = value_type(annotation)
    if value is None:
        return None
    if kind is IntRange:  # given as a range or as a list of its values
        low, high = (min(value), max(value)) if isinstance(value, list) else (value.low, value.high)
        return IntRange(*_ordered(low, high, path))
    if isinstance(value, list):  # a list setting that also takes a range is searched in order
        return tuple(sorted(value)) if meta is not None and meta.ranges else tuple(value)
    if hasattr(value, "low"):
        low, high = _ordered(value.low, value.high, path)
        return tuple(range(low, high + 1))
    if isinstance(value, dict):
        inner = typing.get_args(kind)[1] if typing.get_origin(kind) is collections.abc.Mapping else Any
        return {k: _value(v, inner, None, f"{path}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(kind):
        section = typing.cast(type, kind)
        return section(**section_values(section, value, path))
    return value


def _ordered(low: int, high: int, path: str) -> tuple[int, int]:
    if low > high:
        raise SpecError(path, f"low ({low}) is above high ({high})")
    return low, high


def setting_field(cls: type, name: str) -> Any:
    """pydantic's ``Field`` for the setting ``cls.name``: its default, bounds and help."""
    from pydantic import Field

    meta, default = setting_of(cls, name)
    kind = value_type(typing.get_type_hints(cls)[name])[0]
    scalar = kind in (str, int, float, bool)
    bounds = meta.bounds() if scalar else {}
    if default is REQUIRED:
        return Field(description=meta.help, **bounds)
    if isinstance(default, tuple):
        at_least: dict[str, Any] = {} if meta.ranges else {"min_length": 1}  # else the validator says it
        return Field(default_factory=lambda: list(default), description=meta.help, **at_least)
    if isinstance(default, collections.abc.Mapping):
        return Field(default_factory=lambda: dict(default), description=meta.help)
    if isinstance(default, IntRange):
        return Field(default_factory=lambda: sorted({default.low, default.high}), description=meta.help)
    return Field(default=default, description=meta.help, **bounds)


# The names pydantic gives the branches of a union field (a range or a list, for one).
_BRANCHES = ("RangeIn", "list[int]", "str", "bool")
_RANGES = ("RangeIn",)


def _loc(loc: tuple[Any, ...]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part in _BRANCHES:
            continue  # pydantic's union branch names mean nothing to the user
        else:
            text += f".{part}" if text else str(part)
    return text or "(top level)"


def translate(exc: Any) -> SpecError:
    """The first pydantic error as a SpecError naming the field path.

    A field that takes a range or a list is checked against both and fails in both; the
    error told is that of the shape the user wrote (a list's, a mapping's), or else what
    the field takes.
    """
    errors = exc.errors()
    field = _union_field(errors[0])
    if field is None:
        return _translate_one(errors[0])
    same = [e for e in errors if _union_field(e) == field]
    in_list = [e for e in same if "list[int]" in e["loc"] and e["type"] != "list_type"]
    in_range = [e for e in same if set(_RANGES) & set(e["loc"]) and e["type"] != "model_type"]
    if in_list or in_range:
        return _translate_one((in_list or in_range)[0])
    wanted = "a list of integers or a range, e.g. [1, 2] or {low: 1, high: 4}"
    return SpecError(_loc(field), f"give {wanted} (got {excerpt(errors[0].get('input'))})")


def _union_field(err: Any) -> tuple[Any, ...] | None:
    """The location of the union field ``err`` is in (the part before the branch's name)."""
    loc = tuple(err["loc"])
    for n, part in enumerate(loc):
        if isinstance(part, str) and part in _BRANCHES:
            return loc[:n]
    return None


def _translate_one(err: Any) -> SpecError:
    path = _loc(tuple(err["loc"]))
    kind = err["type"]
    if kind == "extra_forbidden":
        return SpecError(path, "unknown key")
    if kind == "missing":
        return SpecError(path, "is required")
    if kind == "enum":
        return SpecError(path, f"unknown value {excerpt(err.get('input'))}; allowed: {err['ctx']['expected']}")
    message = str(err["msg"]).removeprefix("Value error, ")
    return SpecError(path, f"{message} (got {excerpt(err.get('input'))})")
