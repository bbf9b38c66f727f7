"""Cost-aware proposals: what a candidate would cost to convert and measure, and what it would give.

A sweep's time goes mostly to conversions, and a conversion's slow part is a stage shared
by every configuration of the same runtime and quantization (:func:`stage_of`: the
exported or quantized program, see :mod:`nnsweep.artifacts.stages`), so a candidate whose
stage is built costs only its lowering. :class:`CostModel` learns from the device's
measured trials, with shrinkage toward coarser cells, each candidate's latency and
accuracy, and from its conversions the seconds of a stage and of a lowering per runtime.
It ranks candidates by expected gain (hypervolume) per second and calls a candidate
dominated when a measured feasible trial at least as accurate as its predicted accuracy
is faster than its predicted latency by more than the margin: such a candidate is not
converted.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from nnsweep.core.config import DeploymentConfig, canonical_json
from nnsweep.runtimes.common.converter import quant_settings

__all__ = ["CostConfig", "CostModel", "Prediction", "stage_of"]

Point = tuple[float, float]  # (accuracy: higher is better, latency: lower is better)
_TOL = 1e-9  # a predicted accuracy equal to a measured one, up to rounding, is not higher


@dataclass(frozen=True)
class CostConfig:
    """How cautious the cost model is.

    Args:
        margin: a candidate is dominated only if its predicted latency is more than this
            fraction slower than a measured feasible trial at least as accurate.
        prior_weight: trials' worth of the coarser cell's estimate in a finer cell's
            (shrinkage: a cell with one trial moves halfway to it at 1.0).
        min_evidence: measured trials of the candidate's runtime, backend order and mode
            needed before it may be called dominated (a guess from other runtimes never skips).
        pool: untried candidates ranked per proposal.
        skip_cap: sampler proposals skipped in a row before one is converted anyway.
        default_seconds: a conversion's seconds before any is timed.

    The margin and prior weight were chosen on the search benchmark's in-sample tables
    (benchmarks/results/cost_aware.md has the replays).
    """

    margin: float = 0.25
    prior_weight: float = 0.25
    min_evidence: int = 1
    pool: int = 16
    skip_cap: int = 5
    default_seconds: float = 1.0

    def __post_init__(self) -> None:
        if not (self.margin >= 0 and self.prior_weight > 0 and self.min_evidence >= 0):
            raise ValueError(f"margin and min_evidence must be >= 0, prior_weight > 0: {self}")
        if self.pool < 1 or self.skip_cap < 0 or self.default_seconds <= 0:
            raise ValueError(f"pool must be >= 1, skip_cap >= 0, default_seconds > 0: {self}")


def stage_of(config: DeploymentConfig) -> str:
    """The key of the stage ``config``'s conversion shares with others: its runtime and
    quantization less the interface (what ExecuTorch's program and ONNX Runtime's model
    stages are keyed by; backend order and partition limits only lower it)."""
    return f"{config.runtime}|{canonical_json(quant_settings(config.quant))}"


def _latency_cells(c: DeploymentConfig) -> tuple[tuple[object, ...], ...]:
    """Coarse to fine: what decides latency first is the runtime and where ops run."""
    q = c.quant
    runtime = (c.runtime,)
    order = (*runtime, c.backends)
    mode = (*order, q.mode)
    quant = (*mode, q.granularity, q.calibration)
    layers = (*quant, len(q.float_layers))
    return runtime, order, mode, quant, layers, (*layers, c.partitions)


def _accuracy_cells(c: DeploymentConfig) -> tuple[tuple[object, ...], ...]:
    """Coarse to fine: what decides accuracy first is the quantization mode."""
    q = c.quant
    mode = (q.mode,)
    runtime = (*mode, c.runtime)
    quant = (*runtime, q.granularity, q.calibration)
    layers = (*quant, len(q.float_layers))
    order = (*layers, c.backends)
    return mode, runtime, quant, layers, order, (*order, c.partitions)


@dataclass(frozen=True)
class Prediction:
    """A candidate's predicted accuracy and latency, and how many measured trials share its
    runtime, backend order and mode (``evidence``)."""

    accuracy: float
    latency: float
    evidence: int


@dataclass
class _Shrunk:
    """Means per cell, each shrunk toward its coarser cell's."""

    cells: Callable[[DeploymentConfig], tuple[tuple[object, ...], ...]]
    sums: dict[tuple[object, ...], list[float]] = field(default_factory=dict)
    values: list[float] = field(default_factory=list)

    def add(self, config: DeploymentConfig, value: float) -> None:
        self.values.append(value)
        for cell in self.cells(config):
            self.sums.setdefault(cell, []).append(value)

    def predict(self, config: DeploymentConfig, weight: float) -> float:
        estimate = statistics.fmean(self.values)
        for cell in self.cells(config):
            seen = self.sums.get(cell, [])
            estimate = (sum(seen) + weight * estimate) / (len(seen) + weight)
        return estimate

    def count(self, config: DeploymentConfig, level: int) -> int:
        return len(self.sums.get(self.cells(config)[level], []))


class CostModel:
    """What the device's trials so far say about an untried candidate.

    Tell it each measured trial (:meth:`measured`), each conversion (:meth:`converted`)
    and each measurement's seconds; then ask :meth:`predict`, :meth:`seconds`,
    :meth:`dominated` and :meth:`best`.

    Example:
        >>> model = CostModel(CostConfig())
        >>> model.seconds(DeploymentConfig(runtime="torch"))  # nothing timed yet
        1.0
    """

    def __init__(self, config: CostConfig) -> None:
        self.config = config
        self._latency = _Shrunk(_latency_cells)
        self._accuracy = _Shrunk(_accuracy_cells)
        self._front: list[Point] = []  # measured feasible points
        self._built: set[str] = set()
        self._fresh: dict[str, list[float]] = {}  # runtime -> seconds of conversions that built their stage
        self._lowering: dict[str, list[float]] = {}  # runtime -> seconds of conversions whose stage was built
        self._measuring: list[float] = []

    # ---------------------------------------------------------------- what happened
    def measured(self, config: DeploymentConfig, point: Point, *, feasible: bool) -> None:
        """A trial of ``config`` measured ``point``; a feasible one joins the front."""
        accuracy, latency = point
        if latency > 0:
            self._latency.add(config, math.log(latency))
        self._accuracy.add(config, accuracy)
        if feasible:
            self._front.append(point)

    def converted(self, config: DeploymentConfig, seconds: float, *, measuring: float | None = None) -> None:
        """``config`` was converted in ``seconds`` (its stage is built from now on), and
        measured in ``measuring`` seconds when it was measured."""
        stage = stage_of(config)
        into = self._lowering if stage in self._built else self._fresh
        into.setdefault(config.runtime, []).append(seconds)
        self._built.add(stage)
        if measuring is not None:
            self._measuring.append(measuring)

    def built(self, stages: Iterable[str]) -> None:
        """Stages already in the cache (from an earlier sweep): they cost nothing to convert."""
        self._built.update(stages)

    # ---------------------------------------------------------------- what is expected
    def predict(self, config: DeploymentConfig) -> Prediction | None:
        """The candidate's expected accuracy and latency (None: nothing measured yet)."""
        if not self._latency.values or not self._accuracy.values:
            return None
        weight = self.config.prior_weight
        latency = math.exp(self._latency.predict(config, weight))
        return Prediction(self._accuracy.predict(config, weight), latency, self._latency.count(config, 2))

    def seconds(self, config: DeploymentConfig) -> float:
        """Expected seconds to convert and measure ``config``: its lowering, plus its stage
        unless built, per runtime as timed in this sweep (all runtimes' when this one has none)."""
        lowering = _median(self._lowering.get(config.runtime)) or _median(_flat(self._lowering))
        fresh = _median(self._fresh.get(config.runtime)) or _median(_flat(self._fresh))
        fresh = fresh if fresh is not None else self.config.default_seconds
        lowering = min(lowering, fresh) if lowering is not None else fresh
        convert = lowering if stage_of(config) in self._built else max(fresh, lowering)
        return convert + (_median(self._measuring) or 0.0)

    def dominated(self, config: DeploymentConfig) -> bool:
        """Whether a measured feasible trial at least as accurate as ``config``'s predicted
        accuracy is faster than its predicted latency by more than the margin."""
        p = self.predict(config)
        if p is None or p.evidence < self.config.min_evidence:
            return False
        slower = 1 + self.config.margin
        return any(acc >= p.accuracy - _TOL and p.latency > slower * lat for acc, lat in self._front)

    def gain(self, config: DeploymentConfig, reference: Point, min_accuracy: float | None) -> float:
        """The hypervolume the candidate's predicted point, optimistic by the margin, adds to
        the measured front (0 for one predicted dominated or below ``min_accuracy``)."""
        p = self.predict(config)
        if p is None or self.dominated(config) or (min_accuracy is not None and p.accuracy < min_accuracy):
            return 0.0
        point = (p.accuracy, p.latency / (1 + self.config.margin))
        return max(0.0, hypervolume([*self._front, point], reference) - hypervolume(self._front, reference))

    def best(
        self, candidates: Sequence[DeploymentConfig], reference: Point, min_accuracy: float | None = None
    ) -> DeploymentConfig | None:
        """The candidate with the highest expected gain per second (None: none is expected to gain)."""
        scored = [(self.gain(c, reference, min_accuracy) / self.seconds(c), i) for i, c in enumerate(candidates)]
        top = max(scored, default=(0.0, -1))
        return candidates[top[1]] if top[0] > 0 else None


def hypervolume(points: Iterable[Point], reference: Point) -> float:
    """The area ``points`` dominate up to ``reference`` (accuracy above it, latency below it)."""
    inside = sorted({p for p in points if p[0] > reference[0] and p[1] < reference[1]}, key=lambda p: (p[1], -p[0]))
    area, best_accuracy = 0.0, reference[0]
    for accuracy, latency in inside:
        if accuracy > best_accuracy:
            area += (accuracy - best_accuracy) * (reference[1] - latency)
            best_accuracy = accuracy
    return area


def _flat(by_runtime: dict[str, list[float]]) -> list[float]:
    return [s for values in by_runtime.values() for s in values]


def _median(values: Sequence[float] | None) -> float | None:
    return statistics.median(values) if values else None
