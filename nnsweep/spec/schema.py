"""The pydantic schema of a sweep file, built lazily (pydantic loads only when a spec is
parsed), and its errors translated into :class:`SpecError` naming the YAML path."""

from __future__ import annotations

import functools
from typing import Any, Literal

from nnsweep.core.config import Calibration, Granularity, Interface, QuantConfig, QuantMode
from nnsweep.core.errors import SpecError, excerpt
from nnsweep.core.fields import setting_of, settings_of, value_type
from nnsweep.spec.settings import (
    DEFAULT_GROUP_SIZES,
    MAX_FLOAT_LAYERS,
    MAX_NODES,
    MAX_PARTITIONS,
    MAX_SAMPLES,
    MAX_THREADS,
    SECTIONS,
    Bridge,
    _default_objectives,
)

__all__ = ["schema", "translate"]


@functools.lru_cache(maxsize=1)
def schema() -> Any:
    """Build the pydantic schema lazily (pydantic is imported only when a spec is parsed)."""
    from typing import Annotated

    from pydantic import AllowInfNan, BaseModel, ConfigDict, Field, Strict, field_validator

    # Strict numbers: YAML's `true` is not 1, "5" is not 5, 1e26 is not an integer; floats are finite.
    Int = Annotated[int, Strict()]
    Float = Annotated[float, Strict(), AllowInfNan(False)]
    Text = Annotated[str, Strict()]
    Bool = Annotated[bool, Strict()]
    strict: dict[type, Any] = {int: Int, float: Float, str: Text, bool: Bool}

    class _Strict(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True, strict=False)

    class RangeIn(_Strict):
        low: Int = Field(ge=1, le=MAX_NODES)
        high: Int = Field(ge=1, le=MAX_NODES)

    class CountRangeIn(_Strict):
        low: Int = Field(ge=0, le=MAX_FLOAT_LAYERS)
        high: Int = Field(ge=0, le=MAX_FLOAT_LAYERS)

    class SpaceIn(_Strict):
        runtime: list[Text] = Field(default_factory=lambda: ["executorch"], min_length=1)
        quant: list[QuantMode] = Field(default_factory=lambda: [QuantMode.FP32], min_length=1)
        granularity: list[Granularity] = Field(default_factory=lambda: [Granularity.PER_CHANNEL], min_length=1)
        calibration: list[Calibration] = Field(default_factory=lambda: [Calibration.MINMAX], min_length=1)
        interface: list[Interface] = Field(default_factory=lambda: [Interface.CORE], min_length=1)
        backends: dict[Text, list[Text]] = Field(default_factory=dict)
        max_delegated_partitions: list[Int] = Field(default_factory=lambda: [0], min_length=1)
        min_nodes_per_partition: RangeIn | list[Int] = Field(default_factory=lambda: [1])
        threads: list[Int] = Field(default_factory=lambda: [1], min_length=1)
        float_layers: CountRangeIn | list[Int] = Field(default_factory=lambda: [0])
        group_size: list[Int] = Field(default_factory=lambda: list(DEFAULT_GROUP_SIZES), min_length=1)
        # runtime -> its quantizer option -> the values to search (names, or true/false)
        quant_options: dict[Text, dict[Text, list[Text | Bool]]] = Field(default_factory=dict)

        @field_validator("float_layers")
        @classmethod
        def _counts(cls, v: Any) -> Any:
            if isinstance(v, list) and (not v or any(not 0 <= x <= MAX_FLOAT_LAYERS for x in v)):
                raise ValueError(f"list at least one count, each between 0 and {MAX_FLOAT_LAYERS} (0 = all int8)")
            return v

        @field_validator("group_size")
        @classmethod
        def _group_sizes(cls, v: list[int]) -> list[int]:
            if any(x not in QuantConfig.GROUP_SIZES for x in v):
                raise ValueError(f"every value must be one of {', '.join(map(str, QuantConfig.GROUP_SIZES))}")
            return v

        @field_validator("max_delegated_partitions")
        @classmethod
        def _non_negative(cls, v: list[int]) -> list[int]:
            if any(not 0 <= x <= MAX_PARTITIONS for x in v):
                raise ValueError(f"every value must be between 0 and {MAX_PARTITIONS} (0 = no limit)")
            return v

        @field_validator("threads")
        @classmethod
        def _positive(cls, v: list[int]) -> list[int]:
            if any(not 1 <= x <= MAX_THREADS for x in v):
                raise ValueError(f"every value must be between 1 and {MAX_THREADS}")
            return v

    BudgetIn = section_model(SECTIONS["budget"], "BudgetIn", _Strict, strict)
    MeasureIn = section_model(SECTIONS["measure"], "MeasureIn", _Strict, strict)

    class TrackingIn(_Strict):
        uri: Text = Field(default="sqlite:///mlflow.db", min_length=1, max_length=2000)
        experiment: Text | None = Field(default=None, min_length=1, max_length=200)

    class ConstraintsIn(_Strict):
        max_accuracy_drop: Float | None = Field(default=None, ge=0, le=1)
        min_sqnr_db: Float | None = Field(default=None, ge=0, le=200)
        # metric -> bound: its drop below the device's fp32 baseline, and absolute bounds
        max_drop: dict[Text, Float] = Field(default_factory=dict)
        min: dict[Text, Float] = Field(default_factory=dict)
        max: dict[Text, Float] = Field(default_factory=dict)

    class MetricIn(_Strict):
        function: Text = Field(min_length=1, max_length=1000)
        goal: Literal["maximize", "minimize"]

    class DataSourceIn(_Strict):
        source: Text = Field(min_length=1, max_length=2000)
        max_samples: Int | None = Field(default=None, ge=1, le=MAX_SAMPLES)
        seed: Int = Field(default=0, ge=0, le=2**32 - 1)
        transform: Text | None = Field(default=None, min_length=1, max_length=1000)
        input_column: Text | None = Field(default=None, min_length=1, max_length=200)
        target_column: Text | None = Field(default=None, min_length=1, max_length=200)

    class DataIn(_Strict):
        evaluation: DataSourceIn | None = None
        calibration: DataSourceIn | None = None

    class BridgeIn(_Strict):
        transport: Literal["adb", "ssh"]
        serial: Text | None = None
        host: Text | None = None
        executable: Text | None = None
        tools: dict[Text, Text] = Field(default_factory=dict)
        push_tools: dict[Text, Text] = Field(default_factory=dict)
        workdir: Text | None = None
        repeats: Int = setting_field(Bridge, "repeats")

    SearchIn = section_model(SECTIONS["search"], "SearchIn", _Strict, strict)

    class NpuIn(_Strict):
        target: Text

    class SpecIn(_Strict):
        name: Text
        model: Text = Field(min_length=1, max_length=1000)
        weights: Text | None = None
        input_shape: list[Int] | None = None
        devices: list[Text] = Field(default_factory=lambda: ["host"], min_length=1)
        objectives: dict[Text, Literal["maximize", "minimize"]] = Field(
            default_factory=_default_objectives, min_length=1
        )
        constraints: ConstraintsIn = Field(default_factory=ConstraintsIn)
        metrics: dict[Text, MetricIn] = Field(default_factory=dict)
        data: DataIn = Field(default_factory=DataIn)
        space: SpaceIn = Field(default_factory=SpaceIn)
        budget: BudgetIn = Field(default_factory=BudgetIn)  # type: ignore[valid-type]  # built from a dataclass
        measure: MeasureIn = Field(default_factory=MeasureIn)  # type: ignore[valid-type]  # built from a dataclass
        tracking: TrackingIn = Field(default_factory=TrackingIn)
        storage: Text = Field(default="journal", min_length=1, max_length=2000)
        bridges: dict[Text, BridgeIn] = Field(default_factory=dict)
        npus: dict[Text, NpuIn] = Field(default_factory=dict)
        search: SearchIn = Field(default_factory=SearchIn)  # type: ignore[valid-type]  # built from a dataclass

    return SpecIn


def section_model(cls: type, name: str, base: type, strict: dict[type, Any]) -> Any:
    """The pydantic model of a spec section defined by the dataclass ``cls``: each
    :func:`~nnsweep.core.fields.setting` a key with its type (``strict``'s for its plain
    type), default and bounds."""
    from pydantic import create_model

    keys: dict[str, Any] = {}
    for key, annotation, _, _ in settings_of(cls):
        kind, optional = value_type(annotation)
        typed = strict.get(kind, kind)  # a Literal is its own strict type
        keys[key] = (typed | None if optional else typed, setting_field(cls, key))
    return create_model(name, __base__=base, **keys)


def setting_field(cls: type, name: str) -> Any:
    """pydantic's ``Field`` for the setting ``cls.name``: its default, bounds and help."""
    from pydantic import Field

    meta, default = setting_of(cls, name)
    return Field(default=default, description=meta.help, **meta.bounds())


# The names pydantic gives the branches of a union field (a range or a list, for one).
_BRANCHES = ("RangeIn", "CountRangeIn", "list[int]", "str", "bool")
_RANGES = ("RangeIn", "CountRangeIn")


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
