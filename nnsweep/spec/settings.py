"""What a sweep specification holds once parsed: frozen dataclasses, the metrics an
objective may name, and the bounds of numeric fields."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from nnsweep.core.config import Calibration, Granularity, Interface, QuantMode
from nnsweep.core.metrics import BUILTIN, UserMetric
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
        float_layers: how many of the most sensitive layers an int8 configuration keeps
            in float (0: the whole model int8), for runtimes that can.
        quant_options: per runtime, the values of its own quantizer options to search
            (:attr:`~nnsweep.core.runtimes.RuntimeInfo.quant_options`, e.g. ONNX Runtime's
            ``quant_format``); an option not listed stays at its default.
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
    """A validated sweep.

    Args:
        name: the sweep's name (study and experiment names derive from it).
        model: a model reference (see :func:`nnsweep.models.load_model`).
        devices: device names; ``host`` is this machine.
        objectives: what to optimise, in order.
        max_accuracy_drop: accuracy may fall at most this much below the device's
            fp32 baseline (``None``: no constraint).
        min_sqnr_db: each output's SQNR against the fp32 model must be at least this many
            dB (``None``: no constraint); the constraint for models whose outputs are not
            classes (an image, a regression). An output of class ids beside others does not
            count (:meth:`nnsweep.bench.Fidelity.worst`).
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
        quality_first: a trial whose artifact breaks a quality bound on the coordinator's
            machine is not timed on the device (:mod:`nnsweep.sweep.gate`; ``search.quality_first``).
        tracking: MLflow tracking URI and experiment.
        storage: ``journal`` (a file beside the spec's state) or an RDB URL for Optuna.
        bridges: devices driven over adb/ssh (see :class:`Bridge`).
        npus: device -> Ethos-U configuration, for estimate-only NPU devices.
        state_dir: where the sweep keeps its Optuna journal and bookkeeping.
        metrics: the user's own metrics (the spec's ``metrics``), usable wherever a built-in is.
        constraints: every bound, ``max_accuracy_drop`` and ``min_sqnr_db`` folded in.
        data: where the evaluation and calibration data come from (``None``: the model's own).
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
    min_sqnr_db: float | None = None
    bridges: Mapping[str, Bridge] = field(default_factory=dict)
    npus: Mapping[str, str] = field(default_factory=dict)
    source: Path | None = field(default=None, compare=False)
    metrics: tuple[UserMetric, ...] = ()
    constraints: Constraints = field(default_factory=Constraints)
    data: TaskData | None = None


def _default_objectives() -> dict[str, Literal["maximize", "minimize"]]:
    return {"accuracy": "maximize", "latency_p50_ms": "minimize"}
