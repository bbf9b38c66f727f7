"""Sweep specifications: YAML in, a frozen :class:`SweepSpec` out.

pydantic validates the user's file here and only here; past :func:`load_spec`
only frozen dataclasses travel. Every error names the field path as written in
the YAML (``space.quant[2]``) and what is allowed.

Example:
    >>> spec = parse_spec({"name": "demo", "model": "digits", "space": {"runtime": ["executorch"]}})
    >>> spec.devices, spec.space.runtimes, spec.budget.trials
    (('host',), ('executorch',), 24)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from nnsweep import runtimes
from nnsweep.config import Calibration, Granularity, Interface, QuantMode
from nnsweep.errors import SpecError

__all__ = [
    "METRICS",
    "Bridge",
    "Budget",
    "IntRange",
    "Objective",
    "SearchSpace",
    "SweepSpec",
    "Tracking",
    "load_spec",
    "parse_spec",
]

# Metrics an objective may name, and where they come from.
METRICS: dict[str, str] = {
    "accuracy": "top-1 on the evaluation split (top-1 agreement with fp32 for models without labels)",
    "top1_agreement": "top-1 agreement with the fp32 reference",
    "sqnr_db": "signal-to-quantization-noise ratio vs the fp32 reference",
    "latency_mean_ms": "mean latency",
    "latency_p50_ms": "median latency",
    "latency_p90_ms": "90th percentile latency",
    "latency_p99_ms": "99th percentile latency",
    "size_bytes": "artifact size",
    "peak_rss_mb": "peak resident memory of the measuring process",
}

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class IntRange:
    """An inclusive integer range searched with ``suggest_int``."""

    low: int
    high: int


@dataclass(frozen=True)
class SearchSpace:
    """What a sweep may choose, before each device narrows it to what it has.

    Args:
        runtimes: runtimes to try.
        quant: quantization modes.
        granularity: weight granularities for int8 modes.
        calibration: calibration methods for static modes (filtered per runtime).
        interface: ``core``/``full`` for static modes.
        backends: per runtime, the backends whose preference orders are searched
            (all orders of them); runtimes not listed use their default order.
        max_delegated_partitions: choices for delegating runtimes.
        min_nodes_per_partition: range for delegating runtimes.
        threads: thread counts.
    """

    runtimes: tuple[str, ...]
    quant: tuple[QuantMode, ...]
    granularity: tuple[Granularity, ...]
    calibration: tuple[Calibration, ...]
    interface: tuple[Interface, ...]
    backends: Mapping[str, tuple[str, ...]]
    max_delegated_partitions: tuple[int, ...]
    min_nodes_per_partition: IntRange
    threads: tuple[int, ...]


@dataclass(frozen=True)
class Objective:
    metric: str
    direction: Literal["maximize", "minimize"]


@dataclass(frozen=True)
class Budget:
    """Per device: ``trials`` measured (or reused) trials, within ``timeout_s`` seconds."""

    trials: int
    timeout_s: float | None


@dataclass(frozen=True)
class Tracking:
    uri: str
    experiment: str


@dataclass(frozen=True)
class Bridge:
    """A device driven from a host over adb or ssh (it cannot run Ray itself).

    Args:
        transport: ``adb`` or ``ssh``.
        target: the adb serial (``None``: the only device attached) or ssh's ``user@host``.
        tools: runtime -> path of its benchmark tool on the device.
        push_tools: runtime -> a tool binary on the host to push there first.
        executable: the adb/ssh command (default: found on PATH).
        workdir: a writable directory on the device.
        repeats: tool runs per measurement (their means are the latency samples).
    """

    transport: Literal["adb", "ssh"]
    target: str | None
    tools: Mapping[str, str]
    push_tools: Mapping[str, Path]
    executable: str | None
    workdir: str | None
    repeats: int


@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep.

    Args:
        name: the sweep's name (study and experiment names derive from it).
        model: a model reference (see :func:`nnsweep.models.load_model`).
        devices: device names; ``host`` is this machine.
        objectives: what to optimise, in order.
        max_accuracy_drop: accuracy may fall at most this much below the device's
            fp32 baseline (``None``: no constraint).
        space: the search space.
        budget: per-device trial budget.
        warmup, iters, min_duration_s, timeout_s: measurement settings.
        tracking: MLflow tracking URI and experiment.
        storage: ``journal`` (a file beside the spec's state) or an RDB URL for Optuna.
        bridges: devices driven over adb/ssh (see :class:`Bridge`).
        npus: device -> Ethos-U configuration, for estimate-only NPU devices.
        state_dir: where the sweep keeps its Optuna journal and bookkeeping.
    """

    name: str
    model: str
    devices: tuple[str, ...]
    objectives: tuple[Objective, ...]
    max_accuracy_drop: float | None
    space: SearchSpace
    budget: Budget
    warmup: int
    iters: int
    min_duration_s: float
    timeout_s: float
    tracking: Tracking
    storage: str
    state_dir: Path
    weights: Path | None = None
    input_shape: tuple[int, ...] | None = None
    bridges: Mapping[str, Bridge] = field(default_factory=dict)
    npus: Mapping[str, str] = field(default_factory=dict)
    source: Path | None = field(default=None, compare=False)


def _default_objectives() -> dict[str, Literal["maximize", "minimize"]]:
    return {"accuracy": "maximize", "latency_p50_ms": "minimize"}


def _pydantic_models() -> Any:
    """Build the pydantic schema lazily (pydantic is imported only when a spec is parsed)."""
    from pydantic import BaseModel, ConfigDict, Field, field_validator

    class _Strict(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True, strict=False)

    class RangeIn(_Strict):
        low: int = Field(ge=1)
        high: int = Field(ge=1)

    class SpaceIn(_Strict):
        runtime: list[str] = Field(default_factory=lambda: ["executorch"], min_length=1)
        quant: list[QuantMode] = Field(default_factory=lambda: [QuantMode.FP32], min_length=1)
        granularity: list[Granularity] = Field(default_factory=lambda: [Granularity.PER_CHANNEL], min_length=1)
        calibration: list[Calibration] = Field(default_factory=lambda: [Calibration.MINMAX], min_length=1)
        interface: list[Interface] = Field(default_factory=lambda: [Interface.CORE], min_length=1)
        backends: dict[str, list[str]] = Field(default_factory=dict)
        max_delegated_partitions: list[int] = Field(default_factory=lambda: [0], min_length=1)
        min_nodes_per_partition: RangeIn | list[int] = Field(default_factory=lambda: [1])
        threads: list[int] = Field(default_factory=lambda: [1], min_length=1)

        @field_validator("max_delegated_partitions")
        @classmethod
        def _non_negative(cls, v: list[int]) -> list[int]:
            if any(x < 0 for x in v):
                raise ValueError("every value must be >= 0 (0 = no limit)")
            return v

        @field_validator("threads")
        @classmethod
        def _positive(cls, v: list[int]) -> list[int]:
            if any(x < 1 for x in v):
                raise ValueError("every value must be >= 1")
            return v

    class BudgetIn(_Strict):
        trials: int = Field(default=24, ge=1)
        timeout_s: float | None = Field(default=None, gt=0)

    class MeasureIn(_Strict):
        warmup: int = Field(default=5, ge=0)
        iters: int = Field(default=200, ge=1)
        min_duration_s: float = Field(default=0.0, ge=0)
        timeout_s: float = Field(default=600.0, gt=0)

    class TrackingIn(_Strict):
        uri: str = "sqlite:///mlflow.db"
        experiment: str | None = None

    class ConstraintsIn(_Strict):
        max_accuracy_drop: float | None = Field(default=None, ge=0, le=1)

    class BridgeIn(_Strict):
        transport: Literal["adb", "ssh"]
        serial: str | None = None
        host: str | None = None
        executable: str | None = None
        tools: dict[str, str] = Field(default_factory=dict)
        push_tools: dict[str, str] = Field(default_factory=dict)
        workdir: str | None = None
        repeats: int = Field(default=5, ge=1)

    class NpuIn(_Strict):
        target: str

    class SpecIn(_Strict):
        name: str
        model: str
        weights: str | None = None
        input_shape: list[int] | None = None
        devices: list[str] = Field(default_factory=lambda: ["host"], min_length=1)
        objectives: dict[str, Literal["maximize", "minimize"]] = Field(
            default_factory=_default_objectives, min_length=1
        )
        constraints: ConstraintsIn = Field(default_factory=ConstraintsIn)
        space: SpaceIn = Field(default_factory=SpaceIn)
        budget: BudgetIn = Field(default_factory=BudgetIn)
        measure: MeasureIn = Field(default_factory=MeasureIn)
        tracking: TrackingIn = Field(default_factory=TrackingIn)
        storage: str = "journal"
        bridges: dict[str, BridgeIn] = Field(default_factory=dict)
        npus: dict[str, NpuIn] = Field(default_factory=dict)

    return SpecIn


def _loc(loc: tuple[Any, ...]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part in ("RangeIn", "list[int]"):
            continue  # pydantic's union branch names mean nothing to the user
        else:
            text += f".{part}" if text else str(part)
    return text or "(top level)"


def _translate(exc: Any) -> SpecError:
    """The first pydantic error as a SpecError naming the field path."""
    err = exc.errors()[0]
    path = _loc(tuple(err["loc"]))
    kind = err["type"]
    if kind == "extra_forbidden":
        return SpecError(path, "unknown key")
    if kind == "missing":
        return SpecError(path, "is required")
    if kind == "enum":
        return SpecError(path, f"unknown value {err.get('input')!r}; allowed: {err['ctx']['expected']}")
    message = str(err["msg"]).removeprefix("Value error, ")
    return SpecError(path, f"{message} (got {err.get('input')!r})")


def parse_spec(data: Any, *, source: Path | None = None) -> SweepSpec:
    """Validate a spec given as a mapping (what ``yaml.safe_load`` returns).

    Raises:
        SpecError: naming the field path and what is allowed.
    """
    from pydantic import ValidationError

    if not isinstance(data, Mapping):
        raise SpecError("(top level)", f"a sweep spec is a mapping of keys, got {type(data).__name__}")
    spec_model = _pydantic_models()
    try:
        raw = spec_model.model_validate(dict(data))
    except ValidationError as exc:
        raise _translate(exc) from None
    return _to_dataclasses(raw, source)


def _check_unique(values: list[Any], path: str) -> None:
    if len(set(values)) != len(values):
        raise SpecError(path, f"lists a value twice: {values}")


def _to_dataclasses(raw: Any, source: Path | None) -> SweepSpec:
    from nnsweep.models import check_reference

    if not _NAME.match(raw.name):
        raise SpecError("name", "use letters, digits, '_', '-', '.' (at most 64 characters)")
    base = source.parent if source is not None else Path.cwd()
    try:
        check_reference(raw.model if not raw.model.split(":")[0].endswith(".py") else str(base / raw.model))
    except SpecError as exc:
        raise SpecError("model", exc.message) from None
    model = raw.model
    if model.split(":")[0].endswith(".py") and not Path(model.split(":")[0]).is_absolute():
        model = str(base / model)

    s = raw.space
    known = runtimes.names()
    for i, name in enumerate(s.runtime):
        if name not in known:
            raise SpecError(f"space.runtime[{i}]", f"unknown runtime {name!r}; allowed: {', '.join(known)}")
    for key, path in (
        ("runtime", "space.runtime"),
        ("quant", "space.quant"),
        ("granularity", "space.granularity"),
        ("calibration", "space.calibration"),
        ("interface", "space.interface"),
        ("max_delegated_partitions", "space.max_delegated_partitions"),
        ("threads", "space.threads"),
    ):
        _check_unique(list(getattr(s, key)), path)
    backends: dict[str, tuple[str, ...]] = {}
    for rt, names in s.backends.items():
        if rt not in known:
            raise SpecError(f"space.backends.{rt}", f"unknown runtime; allowed: {', '.join(known)}")
        allowed = runtimes.get(rt).backends
        if not names:
            raise SpecError(f"space.backends.{rt}", "is empty; list at least one backend")
        for i, b in enumerate(names):
            if b not in allowed:
                raise SpecError(
                    f"space.backends.{rt}[{i}]", f"unknown {rt} backend {b!r}; allowed: {', '.join(allowed)}"
                )
        _check_unique(names, f"space.backends.{rt}")
        backends[rt] = tuple(names)
    if isinstance(s.min_nodes_per_partition, list):
        if not s.min_nodes_per_partition or min(s.min_nodes_per_partition) < 1:
            raise SpecError("space.min_nodes_per_partition", "values must be >= 1")
        mn = IntRange(min(s.min_nodes_per_partition), max(s.min_nodes_per_partition))
    else:
        mn = IntRange(s.min_nodes_per_partition.low, s.min_nodes_per_partition.high)
    if mn.low > mn.high:
        raise SpecError("space.min_nodes_per_partition", f"low ({mn.low}) is above high ({mn.high})")

    for metric in raw.objectives:
        if metric not in METRICS:
            raise SpecError(f"objectives.{metric}", f"unknown metric; allowed: {', '.join(METRICS)}")
    for i, device in enumerate(raw.devices):
        if not _NAME.match(device):
            raise SpecError(f"devices[{i}]", f"{device!r} is not a device name (letters, digits, '_', '-', '.')")
    _check_unique(list(raw.devices), "devices")
    if raw.input_shape is not None and (not raw.input_shape or min(raw.input_shape) < 1):
        raise SpecError("input_shape", "every dimension must be >= 1")
    bridges = {}
    for name, b in raw.bridges.items():
        path = f"bridges.{name}"
        if name not in raw.devices:
            raise SpecError(path, f"{name!r} is not in devices ({', '.join(raw.devices)})")
        if b.transport == "ssh" and not b.host:
            raise SpecError(f"{path}.host", "is required for transport ssh (user@host)")
        if b.transport == "adb" and b.host:
            raise SpecError(f"{path}.host", "is for ssh; adb devices are chosen by serial")
        for runtime in (*b.tools, *b.push_tools):
            if runtime not in ("torch", "litert"):
                raise SpecError(f"{path}.tools.{runtime}", "no benchmark tool is known for it; known: torch, litert")
        missing = [rt for rt in b.push_tools if rt not in b.tools and b.transport == "ssh"]
        if missing:
            raise SpecError(f"{path}.tools.{missing[0]}", "give the path on the device to push the tool to")
        for runtime, local in b.push_tools.items():
            if not (base / local).is_file():
                raise SpecError(f"{path}.push_tools.{runtime}", f"file {local!r} does not exist")
        bridges[name] = Bridge(
            transport=b.transport,
            target=b.serial if b.transport == "adb" else b.host,
            tools=dict(b.tools),
            push_tools={rt: base / p for rt, p in b.push_tools.items()},
            executable=b.executable,
            workdir=b.workdir,
            repeats=b.repeats,
        )
    npus: dict[str, str] = {}
    for name, npu in raw.npus.items():
        if name not in raw.devices:
            raise SpecError(f"npus.{name}", f"{name!r} is not in devices ({', '.join(raw.devices)})")
        if name in bridges:
            raise SpecError(f"npus.{name}", "is already a bridge device")
        if npu.target not in runtimes.ETHOS_U_TARGETS:
            targets = ", ".join(runtimes.ETHOS_U_TARGETS)
            raise SpecError(f"npus.{name}.target", f"unknown Ethos-U configuration {npu.target!r}; allowed: {targets}")
        npus[name] = npu.target
    storage = raw.storage
    if storage != "journal" and "://" not in storage:
        raise SpecError("storage", "use 'journal' or a database URL such as sqlite:///optuna.db or postgresql://...")

    space = SearchSpace(
        runtimes=tuple(s.runtime),
        quant=tuple(s.quant),
        granularity=tuple(s.granularity),
        calibration=tuple(s.calibration),
        interface=tuple(s.interface),
        backends=backends,
        max_delegated_partitions=tuple(s.max_delegated_partitions),
        min_nodes_per_partition=mn,
        threads=tuple(s.threads),
    )
    return SweepSpec(
        name=raw.name,
        model=model,
        devices=tuple(raw.devices),
        objectives=tuple(Objective(m, d) for m, d in raw.objectives.items()),
        max_accuracy_drop=raw.constraints.max_accuracy_drop,
        space=space,
        budget=Budget(raw.budget.trials, raw.budget.timeout_s),
        warmup=raw.measure.warmup,
        iters=raw.measure.iters,
        min_duration_s=raw.measure.min_duration_s,
        timeout_s=raw.measure.timeout_s,
        tracking=Tracking(raw.tracking.uri, raw.tracking.experiment or raw.name),
        storage=storage,
        state_dir=Path.cwd() / ".nnsweep" / raw.name,
        weights=(base / raw.weights) if raw.weights else None,
        input_shape=tuple(raw.input_shape) if raw.input_shape else None,
        bridges=bridges,
        npus=npus,
        source=source,
    )


def load_spec(path: Path) -> SweepSpec:
    """Read and validate a sweep YAML file.

    Raises:
        SpecError: the file is missing, is not YAML, or does not validate.
    """
    import yaml

    if not path.is_file():
        raise SpecError("spec", f"file {str(path)!r} does not exist")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise SpecError("spec", f"{path} is not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    return parse_spec(data, source=path.resolve())
