"""What a sweep specification holds once parsed: frozen dataclasses, the metrics an
objective may name, and the bounds of numeric fields."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from nnsweep.core.config import Calibration, Granularity, Interface, QuantConfig, QuantMode
from nnsweep.core.fields import REQUIRED, check_settings, setting
from nnsweep.core.measure import MAX_ITERS, MAX_MEASURE_SECONDS, MAX_WARMUP, MeasureSettings
from nnsweep.core.metrics import ACCURACY, BUILTIN, LATENCY_P50, UserMetric
from nnsweep.core.quant import OptionValue
from nnsweep.core.task_data import MAX_SAMPLES, TaskData

__all__ = [
    "DEFAULT_GROUP_SIZES",
    "MAX_FLOAT_LAYERS",
    "MAX_ITERS",
    "MAX_MEASURE_SECONDS",
    "MAX_NODES",
    "MAX_PARTITIONS",
    "MAX_REPEATS",
    "MAX_SAMPLES",
    "MAX_SECONDS",
    "MAX_THREADS",
    "MAX_TRIALS",
    "MAX_WARMUP",
    "METRICS",
    "SECTIONS",
    "Bridge",
    "Budget",
    "Constraints",
    "IntRange",
    "MeasureSettings",
    "Npu",
    "Objective",
    "SearchSettings",
    "SearchSpace",
    "Strategy",
    "SweepSpec",
    "Tracking",
]

# Metrics an objective may name, and where they come from.
METRICS: dict[str, str] = {m.name: m.description for m in BUILTIN.values() if m.objective}

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # always used with fullmatch
# Bounds of numeric spec fields: far beyond any sensible value, so a typo (1e26,
# .inf) is an error naming the bound instead of an overflow deep inside a run.
MAX_TRIALS = 100_000
MAX_SECONDS = 30 * 24 * 3600.0  # budget.timeout_s
MAX_THREADS = 1024
MAX_PARTITIONS = 10_000
MAX_NODES = 1_000_000
MAX_FLOAT_LAYERS = 10_000
MAX_REPEATS = 1_000
# space.group_size: torchao's default group and ONNX Runtime's default block, both powers of two
DEFAULT_GROUP_SIZES = (32, 128)


@dataclass(frozen=True)
class IntRange:
    """An inclusive integer range searched with ``suggest_int``."""

    low: int
    high: int


@dataclass(frozen=True)
class SearchSpace:
    """What a sweep may choose (``space``), before each device narrows it to what it has.

    ``calibration`` is filtered per runtime; partition limits apply to delegating runtimes
    only; ``quant_options`` keys are a runtime's own quantizer options
    (:attr:`~nnsweep.core.runtimes.RuntimeInfo.quant_options`), unlisted ones at their defaults.
    """

    runtimes: tuple[str, ...] = setting(("executorch",), "runtimes to search", key="runtime")
    quant: tuple[QuantMode, ...] = setting((QuantMode.FP32,), "quantization modes")
    granularity: tuple[Granularity, ...] = setting((Granularity.PER_CHANNEL,), "int8 weight scales per")
    calibration: tuple[Calibration, ...] = setting((Calibration.MINMAX,), "how static int8 ranges are observed")
    interface: tuple[Interface, ...] = setting((Interface.CORE,), "ExecuTorch's program interface")
    backends: Mapping[str, tuple[str, ...]] = setting(
        MappingProxyType({}), "runtime -> backends whose every preference order is searched"
    )
    max_delegated_partitions: tuple[int, ...] = setting(
        (0,), "most partitions given to a delegate (0: no limit)", ge=0, le=MAX_PARTITIONS
    )
    min_nodes_per_partition: IntRange = setting(
        IntRange(1, 1), "fewest nodes in a delegated partition: a list or {low, high}", ge=1, le=MAX_NODES
    )
    threads: tuple[int, ...] = setting((1,), "CPU threads", ge=1, le=MAX_THREADS)
    float_layers: tuple[int, ...] = setting(
        (0,),
        "most sensitive layers a quantized model keeps float (0: none): a list or {low, high}",
        ge=0,
        le=MAX_FLOAT_LAYERS,
        ranges=True,
    )
    quant_options: Mapping[str, Mapping[str, tuple[OptionValue, ...]]] = setting(
        MappingProxyType({}), "runtime -> its quantizer option -> the values to search"
    )
    group_size: tuple[int, ...] = setting(
        DEFAULT_GROUP_SIZES, "input features per 4-bit weight scale (int4_weight)", choices=QuantConfig.GROUP_SIZES
    )

    def __post_init__(self) -> None:
        check_settings(self)


@dataclass(frozen=True)
class Objective:
    metric: str
    direction: Literal["maximize", "minimize"]


@dataclass(frozen=True)
class Budget:
    """Per device: ``trials`` measured (or reused) trials, within ``timeout_s`` seconds."""

    trials: int = setting(24, "trials per device, measured or reused", ge=1, le=MAX_TRIALS)
    timeout_s: float | None = setting(
        None, "stop asking for new trials on a device after this many seconds", gt=0, le=MAX_SECONDS, unit="seconds"
    )

    def __post_init__(self) -> None:
        check_settings(self)


Strategy = Literal["nnsweep", "random", "optuna"]
"""What proposes after a study's starts (``search.strategy``)."""


@dataclass(frozen=True)
class SearchSettings:
    """How a device's study begins and which trials are timed (``search.*``)."""

    mode_starts: bool = setting(True, "a new study first measures each runtime's default in each quantization mode")
    warm_start: bool = setting(True, "a new device's study starts from the configurations other devices found best")
    quality_first: bool = setting(True, "check quality bounds on this machine before a trial is timed on the device")
    profile: Literal["none", "front", "all"] = setting(
        "front", "profile per operator at the end: the front, best and fp32 baseline (front), or every trial (all)"
    )
    explain: Literal["none", "infeasible"] = setting(
        "infeasible",
        "compare each layer with fp32 at the end, for the fastest trials a quality bound turned away (3 per device)",
    )
    strategy: Strategy = setting(
        "nnsweep", "what proposes after the starts: nnsweep's moves and sampler, random search, or Optuna's default"
    )
    seed: int = setting(0, "the sampler's seed: a sweep run again with another seed proposes differently", ge=0)

    def __post_init__(self) -> None:
        check_settings(self)


@dataclass(frozen=True)
class Constraints:
    """Bounds a feasible trial meets (``constraints``), each keyed by metric name.

    ``max_accuracy_drop`` and ``min_sqnr_db`` are older spellings of ``max_drop.accuracy`` and
    ``min.sqnr_db``: the spec folds them in, so only the three mappings decide.
    """

    max_drop: Mapping[str, float] = setting(
        MappingProxyType({}), "metric -> how far it may move the wrong way from the device's fp32 baseline"
    )
    min: Mapping[str, float] = setting(MappingProxyType({}), "metric -> its lowest allowed value")
    max: Mapping[str, float] = setting(MappingProxyType({}), "metric -> its highest allowed value")
    max_accuracy_drop: float | None = setting(None, "max_drop.accuracy's older spelling", ge=0, le=1, compare=False)
    min_sqnr_db: float | None = setting(None, "min.sqnr_db's older spelling", ge=0, le=200, compare=False)

    def __post_init__(self) -> None:
        check_settings(self)

    def __bool__(self) -> bool:
        return bool(self.max_drop or self.min or self.max)

    def names(self) -> set[str]:
        """Every metric a bound names."""
        return {*self.max_drop, *self.min, *self.max}


@dataclass(frozen=True)
class Tracking:
    """Where MLflow records the sweep (``tracking``); ``experiment`` defaults to the sweep's name."""

    uri: str = setting("sqlite:///mlflow.db", "MLflow tracking URI", max_length=2000)
    experiment: str | None = setting(None, "MLflow experiment (default: the sweep's name)", max_length=200)

    def __post_init__(self) -> None:
        check_settings(self)


@dataclass(frozen=True)
class Npu:
    """An Ethos-U device estimated by Vela (``npus.<device>``)."""

    target: str = setting(REQUIRED, "Vela's accelerator configuration, e.g. ethos-u55-128", max_length=100)

    def __post_init__(self) -> None:
        check_settings(self)


@dataclass(frozen=True)
class Bridge:
    """A device driven from a host over adb or ssh (``bridges.<device>``; it cannot run Ray itself).

    ``push_tools`` paths are made absolute by the spec (relative to the sweep file's folder).
    """

    transport: Literal["adb", "ssh"] = setting(REQUIRED, "adb or ssh")
    serial: str | None = setting(None, "adb: the device's serial (default: the only device attached)", max_length=200)
    host: str | None = setting(None, "ssh: [user@]host", max_length=300)
    executable: str | None = setting(None, "the adb or ssh command (default: found on PATH)", max_length=1000)
    tools: Mapping[str, str] = setting(MappingProxyType({}), "runtime -> its benchmark tool's path on the device")
    push_tools: Mapping[str, str] = setting(MappingProxyType({}), "runtime -> a tool on the host to push there first")
    workdir: str | None = setting(None, "a writable directory on the device", max_length=1000)
    repeats: int = setting(5, "tool runs per measurement", ge=1, le=MAX_REPEATS)

    def __post_init__(self) -> None:
        check_settings(self)

    @property
    def target(self) -> str | None:
        """The adb serial (``None``: the only device attached) or ssh's ``user@host``."""
        return self.serial if self.transport == "adb" else self.host


@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep: the spec's keys as typed fields (docs/reference/spec.md says each).

    ``max_accuracy_drop`` and ``min_sqnr_db`` are the ``constraints`` (``None``: none;
    an output of class ids beside others does not count for the SQNR); ``budget``, ``measure``
    and ``search`` are those sections (:data:`SECTIONS`, each key defined once there);
    ``storage`` is ``journal`` (a file in ``state_dir``) or an RDB URL for Optuna;
    ``bridges`` and ``npus`` map device names to :class:`Bridge` and Ethos-U targets;
    ``state_dir`` is where the sweep keeps its Optuna journal and bookkeeping.
    ``metrics`` are the user's own (usable wherever a built-in is); ``constraints`` holds every
    bound, the two older keys folded in; ``data`` says where the evaluation and calibration
    data come from (``None``: the model's own); ``decoder``: the model is a decoder language
    model, measured per token (its objectives default to perplexity and decode time per token).
    """

    name: str
    model: str
    devices: tuple[str, ...]
    objectives: tuple[Objective, ...]
    space: SearchSpace
    tracking: Tracking
    storage: str
    state_dir: Path
    weights: Path | None = None
    input_shape: tuple[int, ...] | None = None
    budget: Budget = field(default_factory=Budget)
    measure: MeasureSettings = field(default_factory=MeasureSettings)
    search: SearchSettings = field(default_factory=SearchSettings)
    bridges: Mapping[str, Bridge] = field(default_factory=dict)
    npus: Mapping[str, str] = field(default_factory=dict)
    source: Path | None = field(default=None, compare=False)
    metrics: tuple[UserMetric, ...] = ()
    constraints: Constraints = field(default_factory=Constraints)
    data: TaskData | None = None
    decoder: bool = False  # the model is a decoder language model (nnsweep.models.decoder)

    @property
    def experiment(self) -> str:
        """The MLflow experiment: ``tracking.experiment``, else the sweep's name."""
        return self.tracking.experiment or self.name

    @property
    def max_accuracy_drop(self) -> float | None:
        """``constraints.max_accuracy_drop`` as the spec gave it (it is in ``constraints.max_drop``)."""
        return self.constraints.max_accuracy_drop

    @property
    def min_sqnr_db(self) -> float | None:
        """``constraints.min_sqnr_db`` as the spec gave it (it is in ``constraints.min``)."""
        return self.constraints.min_sqnr_db


# The spec's sections whose keys a frozen dataclass defines, each key once with its default,
# bounds and help (nnsweep.core.fields.setting): the schema and the CLI options derive from them.
SECTIONS: dict[str, type] = {
    "space": SearchSpace,
    "constraints": Constraints,
    "data": TaskData,
    "budget": Budget,
    "measure": MeasureSettings,
    "tracking": Tracking,
    "search": SearchSettings,
}


def _default_objectives() -> dict[str, Literal["maximize", "minimize"]]:
    return {ACCURACY: "maximize", LATENCY_P50: "minimize"}
