"""What a sweep specification holds once parsed: frozen dataclasses, the metrics an
objective may name, and the bounds of numeric fields."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from nnsweep.core.config import Calibration, Granularity, Interface, QuantMode
from nnsweep.core.metrics import ACCURACY, BUILTIN, LATENCY_P50, UserMetric
from nnsweep.core.quant import OptionValue

if TYPE_CHECKING:
    from nnsweep.models.task_data import TaskData

__all__ = [
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
    "Bridge",
    "Budget",
    "Constraints",
    "IntRange",
    "Objective",
    "SearchSpace",
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
MAX_MEASURE_SECONDS = 24 * 3600.0  # one measurement's timeout / minimum duration
MAX_WARMUP = 100_000
MAX_ITERS = 1_000_000
MAX_THREADS = 1024
MAX_PARTITIONS = 10_000
MAX_NODES = 1_000_000
MAX_FLOAT_LAYERS = 10_000
MAX_REPEATS = 1_000
MAX_SAMPLES = 10_000_000  # data.*.max_samples


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
    their defaults.
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
    repeats: int


@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep: the spec's keys as typed fields (docs/reference/spec.md says each).

    ``max_accuracy_drop`` and ``min_sqnr_db`` are the ``constraints`` (``None``: none;
    an output of class ids beside others does not count for the SQNR); ``warmup`` ..
    ``remeasure`` are ``measure.*`` (:class:`nnsweep.bench.MeasureSettings`,
    :mod:`nnsweep.sweep.remeasure`); ``mode_starts`` and ``warm_start`` are ``search.*``;
    ``storage`` is ``journal`` (a file in ``state_dir``) or an RDB URL for Optuna;
    ``bridges`` and ``npus`` map device names to :class:`Bridge` and Ethos-U targets;
    ``state_dir`` is where the sweep keeps its Optuna journal and bookkeeping.
    ``metrics`` are the user's own (usable wherever a built-in is); ``constraints`` holds every
    bound, the two older keys folded in; ``data`` says where the evaluation and calibration
    data come from (``None``: the model's own); ``quality_first`` is ``search.quality_first``
    (:mod:`nnsweep.sweep.gate`); ``strategy`` and ``seed`` are ``search.*`` (what proposes
    after the starts, :func:`nnsweep.sweep.sampler.sampler_for`).
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
    quality_first: bool = True
    strategy: str = "nnsweep"
    seed: int = 0
    min_sqnr_db: float | None = None
    bridges: Mapping[str, Bridge] = field(default_factory=dict)
    npus: Mapping[str, str] = field(default_factory=dict)
    source: Path | None = field(default=None, compare=False)
    metrics: tuple[UserMetric, ...] = ()
    constraints: Constraints = field(default_factory=Constraints)
    data: TaskData | None = None


def _default_objectives() -> dict[str, Literal["maximize", "minimize"]]:
    return {ACCURACY: "maximize", LATENCY_P50: "minimize"}
