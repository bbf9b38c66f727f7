"""The coordinator's own moves besides the sampler's: repair, refine, ascend and resplit.

**Repair**: an int8 trial infeasible on accuracy is tried again with one more of its most
sensitive layers float (starting at the fewest float layers any int8 trial on the device
needed). **Refine**: the best feasible trial's untried one-knob neighbours, fine steps
first. **Ascend**: the front's int8 points one float layer up. **Resplit**: each front
point with its other partition limits. The sampler does not know that ``float_layers``
repairs accuracy, hence these moves; docs/explanation/search.md says why each exists.

:func:`next_move` is computed from the device's records alone, so a resumed sweep goes on
where the killed one stopped. The sampler proposes when there is no move.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

from nnsweep.core.config import DeploymentConfig
from nnsweep.core.errors import SpecError
from nnsweep.core.metrics import ACCURACY, BUILTIN, SQNR
from nnsweep.core.results import TrialRecord, TrialStatus
from nnsweep.spec import Objective
from nnsweep.sweep.front import best_trial, dominates, pareto_front, weakly_dominates
from nnsweep.sweep.lifecycle import Role
from nnsweep.sweep.space import DeviceSpace, keeps_float, params_for, suggest

_ACCURACY = Objective(ACCURACY, "maximize")


def _quality(objectives: Sequence[Objective]) -> list[Objective]:
    """The objectives a repair can raise: those the outputs decide (a user's metric is one),
    with the SQNR; ``accuracy`` when no objective is one."""
    chosen = [o for o in objectives if o.metric not in BUILTIN or BUILTIN[o.metric].quality]
    return [*(chosen or [_ACCURACY]), Objective(SQNR, "maximize")]


def _most_accurate_first(records: Sequence[TrialRecord], objectives: Sequence[Objective]) -> list[TrialRecord]:
    first = _quality(objectives)[0]
    sign = -1.0 if first.direction == "maximize" else 1.0  # the best value first, a missing one last
    return sorted(records, key=lambda r: sign * r.metrics.get(first.metric, sign * math.inf))


__all__ = ["neighbours", "next_move", "repaired", "resplit"]


def next_move(
    records: Sequence[TrialRecord],
    objectives: Sequence[Objective],
    space: DeviceSpace,
    tried: Callable[[DeploymentConfig], bool],
) -> tuple[DeploymentConfig, Role] | None:
    """The device's next trial if the coordinator makes one (None: the sampler proposes).

    First a repair, of the most recent infeasible int8 trial the best feasible trial does
    not dominate; then the best feasible trial's first untried neighbour; then a repair
    of the most recent infeasible int8 trial that could still reach the front; then the
    ascent of the front's int8 trials, the most accurate first; then the other partition
    limits of each front point, the most accurate first.

    Args:
        records: the device's told trials (their measured records suffice).
        objectives: the sweep's objectives.
        space: the device's space.
        tried: whether a configuration was tried, or is being tried, on the device.
    """
    best = best_trial(records, objectives)
    learned = _fewest_float_that_met(records)
    broken = [
        r
        for r in sorted(records, key=lambda r: r.number, reverse=True)
        if r.status is TrialStatus.OK and r.feasible is False
    ]
    could_win = [r for r in broken if best is None or not dominates(best, r, objectives)]
    if (fix := _first_repair(could_win, space, learned, tried)) is not None:
        return fix, Role.REPAIR
    if best is not None:
        for near in neighbours(best.config, space):
            if not tried(near):
                return near, Role.REFINE
    feasible = [r for r in records if r.status is TrialStatus.OK and r.feasible]
    could_reach_front = [r for r in broken if not _beaten_even_if_repaired(r, feasible, objectives)]
    if (fix := _first_repair(could_reach_front, space, learned, tried)) is not None:
        return fix, Role.REPAIR
    front = _most_accurate_first(pareto_front(feasible, objectives), objectives)
    for r in front:
        up = repaired(r.config, space)  # the next count; None for fp32 and at the space's highest count
        if up is not None and not tried(up):
            return up, Role.REFINE
    for r in front:
        for near in resplit(r.config, space):
            if not tried(near):
                return near, Role.REFINE
    return None


def resplit(config: DeploymentConfig, space: DeviceSpace) -> list[DeploymentConfig]:
    """The neighbours of ``config`` that change only its partition limits (none where its
    runtime delegates nothing): the same quantized model, split between backends another way."""
    return [
        near for near in neighbours(config, space) if dataclasses.replace(near, partitions=config.partitions) == config
    ]


def _first_repair(
    candidates: Sequence[TrialRecord], space: DeviceSpace, learned: int, tried: Callable[[DeploymentConfig], bool]
) -> DeploymentConfig | None:
    """The first candidate's untried repair (None: none has one)."""
    for r in candidates:
        fix = repaired(r.config, space, at_least=learned)
        if fix is not None and not tried(fix):
            return fix
    return None


def _beaten_even_if_repaired(
    record: TrialRecord, feasible: Sequence[TrialRecord], objectives: Sequence[Objective]
) -> bool:
    """Whether a feasible trial is at least as good as ``record`` would be with the
    accuracy (and SQNR) of the most accurate feasible trial: a repair keeps more layers
    float, so it gains at most that much and nothing on the other objectives."""
    hoped = dict(record.metrics)
    quality = _quality(objectives)
    for o in quality:
        pick = max if o.direction == "maximize" else min
        worst = -math.inf if o.direction == "maximize" else math.inf
        ceiling = pick((r.metrics.get(o.metric, worst) for r in feasible), default=worst)
        if math.isfinite(ceiling):
            hoped[o.metric] = pick(ceiling, hoped.get(o.metric, worst))
    if quality[0].metric not in hoped or not math.isfinite(hoped[quality[0].metric]):
        return False
    return any(weakly_dominates(r, dataclasses.replace(record, metrics=hoped), objectives) for r in feasible)


def _fewest_float_that_met(records: Sequence[TrialRecord]) -> int:
    """The fewest float layers of an int8 trial that met the constraint (0: none did)."""
    counts = [
        len(r.config.quant.float_layers)
        for r in records
        if r.status is TrialStatus.OK and r.feasible and r.config.quant.float_layers
    ]
    return min(counts, default=0)


def repaired(config: DeploymentConfig, space: DeviceSpace, *, at_least: int = 0) -> DeploymentConfig | None:
    """``config`` with the next float-layer count of ``space`` (None: no repair); with
    ``at_least``, the space's first count from there on if it holds one above the
    configuration's (what an earlier repair on the device needed).

    None when the configuration is not int8, its runtime keeps no layers float on this
    device or in its mode (or cannot rank this model's layers), or it already keeps the
    space's highest count.
    """
    quant, choices = config.quant, space.choices.get(config.runtime)
    if choices is None or not keeps_float(config.runtime, quant.mode, choices):
        return None
    counts = sorted(k for k in choices.float_layers if k > len(quant.float_layers))
    if not counts:
        return None
    count = next((k for k in counts if k >= at_least), counts[0])
    try:
        layers = space.layers_for(config.runtime, quant.granularity, count, quant.group_size)
    except SpecError:  # the runtime cannot rank this model's layers: nothing to repair with
        return None
    if len(layers) <= len(quant.float_layers):  # the model has no more layers to keep float
        return None
    return dataclasses.replace(config, quant=dataclasses.replace(quant, float_layers=layers))


class _Answers:
    """Stands in for an Optuna trial: answers each ``suggest_*`` call from ``params``,
    a parameter missing there with its first choice (an int: its lowest), and records
    each parameter's choices in the order :func:`suggest` asks them."""

    def __init__(self, params: dict[str, Any]) -> None:
        self.params = params
        self.asked: dict[str, list[Any]] = {}

    def suggest_categorical(self, name: str, choices: list[Any]) -> Any:
        self.asked[name] = list(choices)
        return self.params.get(name, choices[0])

    def suggest_int(self, name: str, low: int, high: int) -> int:
        self.asked[name] = list(range(low, high + 1))
        value = self.params.get(name, low)
        return int(value)


def _coarse(name: str) -> bool:
    """Whether a parameter is a backend order or a quantization mode (refined last)."""
    return name.endswith((".backends", ".quant"))


def neighbours(config: DeploymentConfig, space: DeviceSpace) -> list[DeploymentConfig]:
    """The configurations of ``space`` one parameter away from ``config``, the runtime
    kept (a parameter a change brings in takes its first choice), without repeats: in
    the order :func:`suggest` asks the parameters, a change of backend order or mode last."""
    params = params_for(config, space)
    probe = _Answers(params)
    suggest(probe, space)  # type: ignore[arg-type]
    seen = {config.digest()}
    found = []
    for name, choices in sorted(probe.asked.items(), key=lambda item: _coarse(item[0])):
        if name == "runtime":
            continue
        for value in choices:
            if value == params.get(name, choices[0]):
                continue
            with contextlib.suppress(SpecError):  # a combination no configuration can express
                other = suggest(_Answers({**params, name: value}), space)  # type: ignore[arg-type]
                if other.digest() not in seen:
                    seen.add(other.digest())
                    found.append(other)
    return found
