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

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from nnsweep.core import runtimes
from nnsweep.core.config import Calibration, Granularity, Interface, QuantMode
from nnsweep.core.errors import SpecError

__all__ = [
    "METRICS",
    "Bridge",
    "Budget",
    "IntRange",
    "Objective",
    "SearchSpace",
    "SweepSpec",
    "Tracking",
    "check_input_shape",
    "excerpt",
    "load_spec",
    "load_yaml",
    "parse_spec",
    "read_text",
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

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # always used with fullmatch

# Bounds of numeric spec fields: far beyond any sensible value, so a typo (1e26,
# .inf) is an error naming the bound instead of an overflow deep inside a run.
MAX_TRIALS = 100_000
MAX_SECONDS = 30 * 24 * 3600.0  # budget.timeout_s
MAX_MEASURE_SECONDS = 24 * 3600.0  # one measurement's timeout / minimum duration
MAX_WARMUP = 100_000
MAX_ITERS = 1_000_000
MAX_THREADS = 1024
MAX_PARTITIONS = 10_000
MAX_NODES = 1_000_000
MAX_REPEATS = 1_000
MAX_INPUT_ELEMENTS = 1 << 24  # one input (batch 1) of at most 16,777,216 floats (64 MB)
MAX_EXCERPT = 60  # characters of an offending value quoted in a message
_MAX_NODES = 100_000  # values in a YAML document once aliases are expanded: an alias bomb is refused


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
        until_stable, ci_rel, max_duration_s: keep timing until the p50's 95 % confidence
            interval is within ``ci_rel`` of it, for at most ``max_duration_s``
            (:class:`nnsweep.bench.MeasureSettings`).
        remeasure: at the end, measure each Pareto candidate this many more times, each
            in a fresh process, and report the spread (:mod:`nnsweep.sweep.remeasure`; 0: off).
        mode_starts: after its default deployments, a device's new study measures each
            runtime's default deployment in each quantization mode
            (:func:`nnsweep.sweep.space.mode_starts`; ``search.mode_starts``).
        warm_start: a device's new study starts with the Pareto configurations the
            sweep's other devices found (``search.warm_start``).
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
    until_stable: bool = False
    ci_rel: float = 0.01
    max_duration_s: float = 10.0
    remeasure: int = 3
    mode_starts: bool = True
    warm_start: bool = True
    bridges: Mapping[str, Bridge] = field(default_factory=dict)
    npus: Mapping[str, str] = field(default_factory=dict)
    source: Path | None = field(default=None, compare=False)


def _default_objectives() -> dict[str, Literal["maximize", "minimize"]]:
    return {"accuracy": "maximize", "latency_p50_ms": "minimize"}


@functools.lru_cache(maxsize=1)
def _pydantic_models() -> Any:
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
        space: SpaceIn = Field(default_factory=SpaceIn)
        budget: BudgetIn = Field(default_factory=BudgetIn)
        measure: MeasureIn = Field(default_factory=MeasureIn)
        tracking: TrackingIn = Field(default_factory=TrackingIn)
        storage: Text = Field(default="journal", min_length=1, max_length=2000)
        bridges: dict[Text, BridgeIn] = Field(default_factory=dict)
        npus: dict[Text, NpuIn] = Field(default_factory=dict)
        search: SearchIn = Field(default_factory=SearchIn)

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
        return SpecError(path, f"unknown value {excerpt(err.get('input'))}; allowed: {err['ctx']['expected']}")
    message = str(err["msg"]).removeprefix("Value error, ")
    return SpecError(path, f"{message} (got {excerpt(err.get('input'))})")


def excerpt(value: Any, limit: int = MAX_EXCERPT) -> str:
    """A short ``repr`` of ``value`` for an error message (at most ``limit`` characters).

    Bounded in time as well as length: nested containers are cut at a few items and
    levels before anything is rendered, so an alias bomb costs nothing to quote.
    """
    import reprlib

    r = reprlib.Repr()
    r.maxlevel, r.maxlist, r.maxtuple, r.maxdict, r.maxset = 2, 4, 4, 3, 4
    r.maxstring, r.maxother, r.maxlong = limit, limit, limit
    text = r.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
    seen: set[Any] = set()
    for value in values:
        if value in seen:
            raise SpecError(path, f"lists {excerpt(value)} twice")
        seen.add(value)


def _key(key: Any, limit: int = MAX_EXCERPT) -> str:
    """A mapping key as part of a field path (or any text), clipped to a short excerpt."""
    text = str(key)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_argument(value: str | None, path: str) -> None:
    """A value handed to another program (ssh, adb, a shell on the device) as an argument:
    it must not be read as an option there."""
    if value is None:
        return
    if value.startswith("-"):
        raise SpecError(path, f"{excerpt(value)} starts with '-': it would be read as an option, not a value")
    if not value.strip() or any(ch in value for ch in "\0\n\r"):
        raise SpecError(path, f"{excerpt(value)} is empty or holds a NUL or line break")


def _to_dataclasses(raw: Any, source: Path | None) -> SweepSpec:
    from nnsweep.models import check_reference

    if not _NAME.fullmatch(raw.name):
        raise SpecError("name", f"{excerpt(raw.name)}: use letters, digits, '_', '-', '.' (at most 64 characters)")
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
            raise SpecError(f"space.runtime[{i}]", f"unknown runtime {excerpt(name)}; allowed: {', '.join(known)}")
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
            raise SpecError(f"space.backends.{_key(rt)}", f"unknown runtime; allowed: {', '.join(known)}")
        allowed = runtimes.get(rt).backends
        if not names:
            raise SpecError(f"space.backends.{rt}", "is empty; list at least one backend")
        for i, b in enumerate(names):
            if b not in allowed:
                raise SpecError(
                    f"space.backends.{rt}[{i}]", f"unknown {rt} backend {excerpt(b)}; allowed: {', '.join(allowed)}"
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
            raise SpecError(f"objectives.{_key(metric)}", f"unknown metric; allowed: {', '.join(METRICS)}")
    for i, device in enumerate(raw.devices):
        if not _NAME.fullmatch(device):
            raise SpecError(f"devices[{i}]", f"{excerpt(device)} is not a device name (letters, digits, '_', '-', '.')")
    _check_unique(list(raw.devices), "devices")
    if raw.input_shape is not None:
        check_input_shape(tuple(raw.input_shape), "input_shape")
    bridges = {}
    for name, b in raw.bridges.items():
        path = f"bridges.{_key(name)}"
        if name not in raw.devices:
            raise SpecError(path, f"{excerpt(name)} is not in devices {excerpt(raw.devices)}")
        if b.transport == "ssh" and not b.host:
            raise SpecError(f"{path}.host", "is required for transport ssh (user@host)")
        if b.transport == "adb" and b.host:
            raise SpecError(f"{path}.host", "is for ssh; adb devices are chosen by serial")
        _check_argument(b.host, f"{path}.host")
        _check_argument(b.serial, f"{path}.serial")
        _check_argument(b.workdir, f"{path}.workdir")
        for runtime, tool in b.tools.items():
            _check_argument(tool, f"{path}.tools.{_key(runtime)}")
        for runtime in (*b.tools, *b.push_tools):
            if runtime not in ("torch", "litert"):
                raise SpecError(
                    f"{path}.tools.{_key(runtime)}", "no benchmark tool is known for it; known: torch, litert"
                )
        missing = [rt for rt in b.push_tools if rt not in b.tools and b.transport == "ssh"]
        if missing:
            raise SpecError(f"{path}.tools.{missing[0]}", "give the path on the device to push the tool to")
        for runtime, local in b.push_tools.items():
            if not (base / local).is_file():
                raise SpecError(f"{path}.push_tools.{runtime}", f"file {excerpt(local)} does not exist")
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
            raise SpecError(
                f"npus.{_key(name)}", f"{excerpt(name)} is not in devices ({excerpt(', '.join(raw.devices))})"
            )
        if name in bridges:
            raise SpecError(f"npus.{name}", "is already a bridge device")
        if npu.target not in runtimes.ETHOS_U_TARGETS:
            targets = ", ".join(runtimes.ETHOS_U_TARGETS)
            raise SpecError(
                f"npus.{name}.target", f"unknown Ethos-U configuration {excerpt(npu.target)}; allowed: {targets}"
            )
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
        state_dir=base / ".nnsweep" / raw.name,
        weights=(base / raw.weights) if raw.weights else None,
        input_shape=tuple(raw.input_shape) if raw.input_shape else None,
        until_stable=raw.measure.until_stable,
        ci_rel=raw.measure.ci_rel,
        max_duration_s=raw.measure.max_duration_s,
        remeasure=raw.measure.remeasure,
        mode_starts=raw.search.mode_starts,
        warm_start=raw.search.warm_start,
        bridges=bridges,
        npus=npus,
        source=source,
    )


def check_input_shape(shape: tuple[int, ...], field: str) -> tuple[int, ...]:
    """An input shape of batch 1 the host can allocate (at most MAX_INPUT_ELEMENTS floats).

    Raises:
        SpecError: an empty shape, a dimension < 1, a batch other than 1, or too many elements.
    """
    if not shape or any(d < 1 for d in shape):
        raise SpecError(field, f"{excerpt(shape)}: every dimension must be >= 1")
    if len(shape) > 8:
        raise SpecError(field, f"{excerpt(shape)}: at most 8 dimensions")
    elements = 1
    for d in shape:
        elements *= d
        if elements > MAX_INPUT_ELEMENTS:
            raise SpecError(field, f"{excerpt(shape)} has more than {MAX_INPUT_ELEMENTS:,} elements")
    return shape


def read_text(path: Path, field: str) -> str:
    """The UTF-8 text of a file the user named in ``field``.

    Raises:
        SpecError: the file is missing, unreadable, or not UTF-8 (naming the byte offset).
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise SpecError(field, f"file {excerpt(str(path))} does not exist") from None
    except IsADirectoryError:
        raise SpecError(field, f"{excerpt(str(path))} is a directory, not a file") from None
    except OSError as exc:
        raise SpecError(field, f"cannot read {excerpt(str(path))}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(field, f"{excerpt(str(path))} is not UTF-8 text (byte {exc.start})") from None


def _yaml_loader() -> Any:
    """PyYAML's safe loader, refusing duplicate keys and alias bombs."""
    import yaml
    from yaml.constructor import ConstructorError
    from yaml.nodes import MappingNode

    class Loader(yaml.SafeLoader):
        def get_single_node(self) -> Any:
            node = super().get_single_node()
            if node is not None and _expanded_size(node, {}) > _MAX_NODES:
                raise yaml.YAMLError(f"expands to more than {_MAX_NODES:,} values (aliases: *name)")
            return node

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if isinstance(node, MappingNode):
                seen: set[Any] = set()
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node, deep=True)
                    try:
                        duplicate = key in seen
                        seen.add(key)
                    except TypeError:
                        continue  # an unhashable key: construct_mapping reports it
                    if duplicate:
                        raise ConstructorError(None, None, f"duplicate key {excerpt(key)}", key_node.start_mark)
            return super().construct_mapping(node, deep=deep)

    return Loader


def _expanded_size(node: Any, sizes: dict[int, int]) -> int:
    """How many values ``node`` becomes once every alias is expanded (memoised per node)."""
    key = id(node)
    if key not in sizes:
        sizes[key] = 1  # a cycle counts once; PyYAML's constructor rejects what it cannot build
        children = node.value if isinstance(node.value, list) else []
        total = 1
        for child in children:
            for item in child if isinstance(child, tuple) else (child,):
                total += _expanded_size(item, sizes)
                if total > _MAX_NODES:
                    break
        sizes[key] = total
    return sizes[key]


def load_yaml(path: Path, field: str) -> Any:
    """Parse a YAML (or JSON) file the user named in ``field``: UTF-8, no duplicate keys,
    no alias bombs.

    Raises:
        SpecError: the file is missing, not UTF-8 or not valid YAML (with the line and column).
    """
    import yaml

    text = read_text(path, field)
    try:
        return yaml.load(text, Loader=_yaml_loader())  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(field, f"{_key(path, 200)} is not valid YAML{where}: {_key(problem, 120)}") from None
    except RecursionError:
        raise SpecError(field, f"{excerpt(str(path))} nests too deeply") from None


def load_spec(path: Path) -> SweepSpec:
    """Read and validate a sweep YAML file.

    The sweep's state (its Optuna journal) lives in ``.nnsweep/<name>`` beside the
    file, so running the same spec from another directory resumes the same sweep.

    Raises:
        SpecError: the file is missing, is not YAML, or does not validate.
    """
    data = load_yaml(path, "spec")
    return parse_spec(data, source=path.resolve())
