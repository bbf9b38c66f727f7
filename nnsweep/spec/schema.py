"""The pydantic schema of a sweep file, built lazily (pydantic loads only when a spec is
parsed), and its errors translated into :class:`SpecError` naming the YAML path."""

from __future__ import annotations

import functools
from typing import Any, Literal

from nnsweep.core.config import Calibration, Granularity, Interface, QuantMode
from nnsweep.core.errors import SpecError, excerpt
from nnsweep.spec.settings import (
    MAX_FLOAT_LAYERS,
    MAX_ITERS,
    MAX_MEASURE_SECONDS,
    MAX_NODES,
    MAX_PARTITIONS,
    MAX_REPEATS,
    MAX_SAMPLES,
    MAX_SECONDS,
    MAX_THREADS,
    MAX_TRIALS,
    MAX_WARMUP,
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
        # runtime -> its quantizer option -> the values to search (names, or true/false)
        quant_options: dict[Text, dict[Text, list[Text | Annotated[bool, Strict()]]]] = Field(default_factory=dict)

        @field_validator("float_layers")
        @classmethod
        def _counts(cls, v: Any) -> Any:
            if isinstance(v, list) and (not v or any(not 0 <= x <= MAX_FLOAT_LAYERS for x in v)):
                raise ValueError(f"list at least one count, each between 0 and {MAX_FLOAT_LAYERS} (0 = all int8)")
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

    class BudgetIn(_Strict):
        trials: Int = Field(default=24, ge=1, le=MAX_TRIALS)
        timeout_s: Float | None = Field(default=None, gt=0, le=MAX_SECONDS)

    class MeasureIn(_Strict):
        warmup: Int = Field(default=5, ge=0, le=MAX_WARMUP)
        iters: Int = Field(default=200, ge=1, le=MAX_ITERS)
        min_duration_s: Float = Field(default=0.0, ge=0, le=MAX_MEASURE_SECONDS)
        timeout_s: Float = Field(default=600.0, gt=0, le=MAX_MEASURE_SECONDS)
        until_stable: Annotated[bool, Strict()] = False
        ci_rel: Float = Field(default=0.01, gt=0, lt=1)
        max_duration_s: Float = Field(default=10.0, gt=0, le=MAX_MEASURE_SECONDS)
        remeasure: Int = Field(default=3, ge=0, le=20)

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
        repeats: Int = Field(default=5, ge=1, le=MAX_REPEATS)

    class SearchIn(_Strict):
        mode_starts: Annotated[bool, Strict()] = True
        warm_start: Annotated[bool, Strict()] = True
        quality_first: Annotated[bool, Strict()] = True
        strategy: Literal["nnsweep", "random", "optuna"] = "nnsweep"
        seed: Int = Field(default=0, ge=0)

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
        budget: BudgetIn = Field(default_factory=BudgetIn)
        measure: MeasureIn = Field(default_factory=MeasureIn)
        tracking: TrackingIn = Field(default_factory=TrackingIn)
        storage: Text = Field(default="journal", min_length=1, max_length=2000)
        bridges: dict[Text, BridgeIn] = Field(default_factory=dict)
        npus: dict[Text, NpuIn] = Field(default_factory=dict)
        search: SearchIn = Field(default_factory=SearchIn)

    return SpecIn


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
