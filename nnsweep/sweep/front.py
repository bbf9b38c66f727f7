"""Pareto fronts, the best configuration per device, and the text tables of a sweep."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nnsweep.core.config import DeploymentConfig
from nnsweep.core.results import TrialRecord
from nnsweep.spec import Objective

__all__ = ["DeviceCost", "SharedChoice", "best_across_devices", "best_trial", "pareto_front"]


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
    """The configuration to deploy: on the feasible Pareto front, the one that is best
    on the first objective to minimise (latency, usually), ties broken by the others;
    with only objectives to maximise, the best on the first of them."""
    front = pareto_front(records, objectives)
    return front[0] if front else None


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
