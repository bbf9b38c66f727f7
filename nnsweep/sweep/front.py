"""Pareto fronts, the best configuration per device (ties included), the one
configuration across devices, and the figures that decide them (:func:`decide`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nnsweep.core.config import DeploymentConfig
from nnsweep.core.metrics import DECODE_PER_TOKEN, LATENCY_P50, SPEEDUP, high, low, remeasured
from nnsweep.core.results import TrialRecord
from nnsweep.spec import Objective

__all__ = [
    "BestChoice",
    "DeviceCost",
    "SharedChoice",
    "best_across_devices",
    "best_choice",
    "best_trial",
    "decide",
    "dominates",
    "pareto_front",
    "weakly_dominates",
]


def _vector(record: TrialRecord, objectives: Sequence[Objective]) -> tuple[float, ...] | None:
    """Objective values turned so that larger is better; ``None`` if one is missing."""
    out = []
    for obj in objectives:
        value = record.metrics.get(obj.metric)
        if value is None or not math.isfinite(value):
            return None
        out.append(value if obj.direction == "maximize" else -value)
    return tuple(out)


def _dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return all(x >= y for x, y in zip(a, b, strict=True)) and any(x > y for x, y in zip(a, b, strict=True))


def dominates(a: TrialRecord, b: TrialRecord, objectives: Sequence[Objective]) -> bool:
    """Whether ``a`` is at least as good as ``b`` on every objective and better on one
    (False when either lacks an objective)."""
    va, vb = _vector(a, objectives), _vector(b, objectives)
    return va is not None and vb is not None and _dominates(va, vb)


def weakly_dominates(a: TrialRecord, b: TrialRecord, objectives: Sequence[Objective]) -> bool:
    """Whether ``a`` is at least as good as ``b`` on every objective (equal counts; False
    when either lacks an objective)."""
    va, vb = _vector(a, objectives), _vector(b, objectives)
    return va is not None and vb is not None and all(x >= y for x, y in zip(va, vb, strict=True))


def pareto_front(records: Sequence[TrialRecord], objectives: Sequence[Objective]) -> list[TrialRecord]:
    """The feasible measured trials no other feasible trial dominates, fastest first.

    Trials that reuse another trial's measurement are left out (the original stands
    for them), and so are trials whose objectives are missing.
    """
    candidates = [
        (r, v)
        for r in records
        if r.status.value == "ok" and r.feasible is not False and (v := _vector(r, objectives)) is not None
    ]
    front = [r for r, v in candidates if not any(_dominates(w, v) for _, w in candidates)]
    # One entry per distinct objective vector: equal points add nothing to a front.
    seen: set[tuple[float, ...]] = set()
    unique = []
    for r in sorted(front, key=lambda r: _sort_key(r, objectives)):
        vec = _vector(r, objectives)
        if vec is not None and vec not in seen:
            seen.add(vec)
            unique.append(r)
    return unique


def _sort_key(record: TrialRecord, objectives: Sequence[Objective]) -> tuple[float, ...]:
    vec = _vector(record, objectives) or ()
    order = [i for i, o in enumerate(objectives) if o.direction == "minimize"]
    order += [i for i, o in enumerate(objectives) if o.direction == "maximize"]
    return (*(-vec[i] for i in order), record.number)


def best_trial(records: Sequence[TrialRecord], objectives: Sequence[Objective]) -> TrialRecord | None:
    """The configuration to deploy (:func:`best_choice`'s record)."""
    return best_choice(records, objectives).record


@dataclass(frozen=True)
class BestChoice:
    """The best configuration of a device and how it was chosen.

    Args:
        record: the chosen trial (``None``: no feasible measured trial).
        tied: the other front trials whose interval on the first objective overlaps the
            leader's: on that objective they cannot be told apart.
        broken_by: the objective that chose among the tied (``None``: no tie).
        tied_on: the objective they are tied on.
    """

    record: TrialRecord | None
    tied: tuple[int, ...] = ()
    broken_by: str | None = None
    tied_on: str | None = None


def _interval(record: TrialRecord, metric: str) -> tuple[float, float] | None:
    lo, hi = record.metrics.get(low(metric)), record.metrics.get(high(metric))
    return None if lo is None or hi is None else (lo, hi)


def best_choice(records: Sequence[TrialRecord], objectives: Sequence[Objective]) -> BestChoice:
    """On the feasible Pareto front, the best on the first objective to minimise (latency,
    usually; with only objectives to maximise, the first of them), ties broken by the others.

    Ties are ties: front trials whose interval on that objective (``<metric>_lo`` and
    ``_hi``, set by a re-measurement) overlaps the leader's are tied with it, and the
    next objectives in order choose among them.
    """
    front = pareto_front(records, objectives)
    if not front:
        return BestChoice(None)
    order = [o for o in objectives if o.direction == "minimize"] + [o for o in objectives if o.direction == "maximize"]
    first = order[0].metric
    leader = front[0]
    around = _interval(leader, first)
    tied = [leader]
    if around is not None:
        for r in front[1:]:
            other = _interval(r, first)
            if other is not None and other[0] <= around[1] and around[0] <= other[1]:
                tied.append(r)
    if len(tied) == 1:
        return BestChoice(leader)

    def key(r: TrialRecord) -> tuple[float, ...]:
        vec = _vector(r, order) or ()
        return (*(-x for x in vec[1:]), -vec[0], r.number)

    ranked = sorted(tied, key=key)
    winner, runner = ranked[0], ranked[1]
    broken_by = next(
        (o.metric for o in order[1:] if winner.metrics.get(o.metric) != runner.metrics.get(o.metric)), first
    )
    return BestChoice(winner, tuple(sorted(r.number for r in tied if r is not winner)), broken_by, first)


def decide(
    records: Sequence[TrialRecord], pooled: Mapping[int, Mapping[str, float]], baseline: int | None
) -> list[TrialRecord]:
    """The records with the figures that decide: a re-measured trial's p50 is the median of
    its pooled p50s (``pooled[number]``, see :class:`~nnsweep.sweep.remeasure.Spread`), and
    so is that of every trial that reuses its measurement; then every speed-up is taken
    against the baseline's decided p50. The sweep's own figure stays as ``latency_p50_ms_sweep``.

    Args:
        pooled: trial number -> its re-measurement metrics (``latency_p50_ms_remeasured``, ...).
        baseline: the trial number of the device's fp32 baseline.
    """
    decided = []
    for r in records:
        figures = pooled.get(r.number) or (pooled.get(r.reused_from) if r.reused_from is not None else None)
        if figures and remeasured(LATENCY_P50) in figures:
            metrics = {**r.metrics, **figures, LATENCY_P50: figures[remeasured(LATENCY_P50)]}
            if DECODE_PER_TOKEN in r.metrics:  # a decoder's latency is its decode step's
                metrics[DECODE_PER_TOKEN] = metrics[LATENCY_P50]
            r = dataclasses.replace(r, metrics=metrics)
        decided.append(r)
    base = next((r for r in decided if r.number == baseline), None)
    base_p50 = base.metrics.get(LATENCY_P50) if base is not None else None
    if not base_p50:
        return decided
    return [
        dataclasses.replace(r, metrics={**r.metrics, SPEEDUP: base_p50 / r.metrics[LATENCY_P50]})
        if r.metrics.get(LATENCY_P50) and SPEEDUP in r.metrics
        else r
        for r in decided
    ]


@dataclass(frozen=True)
class DeviceCost:
    """What shipping one configuration costs on one device, against that device's own best.

    Args:
        device: the device.
        record: the configuration's trial there.
        own_best: the device's best trial.
        slowdown: ``record``'s cost over ``own_best``'s (1.0: it is the device's best).
    """

    device: str
    record: TrialRecord
    own_best: TrialRecord
    slowdown: float


@dataclass(frozen=True)
class SharedChoice:
    """The one configuration to ship to every device, and what it costs on each."""

    config: DeploymentConfig
    metric: str
    costs: tuple[DeviceCost, ...]

    @property
    def worst_slowdown(self) -> float:
        return max(c.slowdown for c in self.costs)


def best_across_devices(
    records: Mapping[str, Sequence[TrialRecord]], objectives: Sequence[Objective]
) -> SharedChoice | None:
    """The configuration feasible on every device with the smallest worst-case slowdown
    against each device's own best (ties: the smaller mean slowdown, then the digest).

    The cost is the first objective to minimise (latency, usually). A configuration counts
    on a device when it was measured there (or reused a measurement) and met the constraint.

    Returns:
        ``None`` when no configuration is feasible on every device, or no objective is minimised.
    """
    metric = next((o.metric for o in objectives if o.direction == "minimize"), None)
    if metric is None or not records:
        return None
    bests: dict[str, TrialRecord] = {}
    usable: dict[str, dict[str, TrialRecord]] = {}
    for device, trials in records.items():
        best = best_trial(trials, objectives)
        if best is None:
            return None
        bests[device] = best
        usable[device] = {}
        for r in sorted(trials, key=lambda r: r.number):
            if r.status.measured and r.feasible is not False and math.isfinite(r.metrics.get(metric, math.inf)):
                usable[device].setdefault(r.config.digest(), r)
    shared = set.intersection(*(set(found) for found in usable.values()))
    candidates = []
    for digest in shared:
        costs = tuple(
            DeviceCost(d, usable[d][digest], bests[d], usable[d][digest].metrics[metric] / bests[d].metrics[metric])
            for d in records
        )
        slowdowns = [c.slowdown for c in costs]
        candidates.append((max(slowdowns), sum(slowdowns) / len(slowdowns), digest, costs))
    if not candidates:
        return None
    _, _, digest, costs = min(candidates)
    return SharedChoice(costs[0].record.config, metric, costs)
