"""What a sweep specification holds once parsed: frozen dataclasses, the metrics an
objective may name, and the bounds of numeric fields."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from nnsweep.core.config import Calibration, Granularity, Interface, QuantMode
from nnsweep.core.fields import check_settings, setting
from nnsweep.core.measure import MAX_ITERS, MAX_MEASURE_SECONDS, MAX_WARMUP, MeasureSettings
from nnsweep.core.metrics import ACCURACY, BUILTIN, LATENCY_P50, UserMetric
from nnsweep.core.quant import OptionValue

if TYPE_CHECKING:
    from nnsweep.models.task_data import TaskData

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
MAX_SAMPLES = 10_000_000  # data.*.max_samples
# space.group_size: torchao's default group and ONNX Runtime's default block, both powers of two
DEFAULT_GROUP_SIZES = (32, 128)


@dataclass(frozen=True)
class IntRange:
    """An inclusive integer range searched with ``suggest_int``."""

    low: int
    high: int


@dataclass(frozen=True)
class SearchSpace:
    """What a sweep may choose, before each device narrows it to what it has.

    One tuple of choices per ``space`` key (docs/reference/spec.md). ``backends`` maps a
    runtime to the backends whose preference orders are searched (every order of them;
    unlisted runtimes use their default order); ``calibration`` is filtered per runtime;
    partition limits apply to delegating runtimes only; ``float_layers`` counts the most
    sensitive layers an int8 configuration keeps float (0: the whole model int8);
    ``quant_options`` maps a runtime to the values of its own quantizer options to search
    (:attr:`~nnsweep.core.runtimes.RuntimeInfo.quant_options`); unlisted options stay at
    their defaults; ``group_size`` the input features per 4-bit weight scale that
    ``int4_weight`` searches.
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
    float_layers: tuple[int, ...] = (0,)
    quant_options: Mapping[str, Mapping[str, tuple[OptionValue, ...]]] = field(default_factory=dict)
    group_size: tuple[int, ...] = DEFAULT_GROUP_SIZES


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
        "none", "profile per operator at the end: the front, best and fp32 baseline (front), or every trial (all)"
    )
    strategy: Strategy = setting(
        "nnsweep", "what proposes after the starts: nnsweep's moves and sampler, random search, or Optuna's default"
    )
    seed: int = setting(0, "the sampler's seed: a sweep run again with another seed proposes differently", ge=0)

    def __post_init__(self) -> None:
        check_settings(self)


@dataclass(frozen=True)
class Constraints:
    """Bounds a feasible trial meets, each keyed by metric name.

    Args:
        max_drop: how far a metric may fall below (for a metric to maximise) or rise above
            (to minimise) the same device's fp32 baseline.
        min, max: absolute bounds, on any metric (a size or memory budget too).
    """

    max_drop: Mapping[str, float] = field(default_factory=dict)
    min: Mapping[str, float] = field(default_factory=dict)
    max: Mapping[str, float] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.max_drop or self.min or self.max)

    def names(self) -> set[str]:
        """Every metric a bound names."""
        return {*self.max_drop, *self.min, *self.max}


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
    repeats: int = setting(5, "tool runs per measurement", ge=1, le=MAX_REPEATS)

    def __post_init__(self) -> None:
        check_settings(self)


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
    data come from (``None``: the model's own).
    """

    name: str
    model: str
    devices: tuple[str, ...]
    objectives: tuple[Objective, ...]
    max_accuracy_drop: float | None
    space: SearchSpace
    tracking: Tracking
    storage: str
    state_dir: Path
    weights: Path | None = None
    input_shape: tuple[int, ...] | None = None
    budget: Budget = field(default_factory=Budget)
    measure: MeasureSettings = field(default_factory=MeasureSettings)
    search: SearchSettings = field(default_factory=SearchSettings)
    min_sqnr_db: float | None = None
    bridges: Mapping[str, Bridge] = field(default_factory=dict)
    npus: Mapping[str, str] = field(default_factory=dict)
    source: Path | None = field(default=None, compare=False)
    metrics: tuple[UserMetric, ...] = ()
    constraints: Constraints = field(default_factory=Constraints)
    data: TaskData | None = None


# The spec's sections whose keys a frozen dataclass defines, each key once with its default,
# bounds and help (nnsweep.core.fields.setting): the schema and the CLI options derive from them.
SECTIONS: dict[str, type] = {"budget": Budget, "measure": MeasureSettings, "search": SearchSettings}


def _default_objectives() -> dict[str, Literal["maximize", "minimize"]]:
    return {ACCURACY: "maximize", LATENCY_P50: "minimize"}
