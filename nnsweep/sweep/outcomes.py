"""What a trial's result says: its record, and its judgement against the device's baseline.

Pure functions from data to data (no study, no tracker), shared by the live
coordinator and by resume, so a trial told from its record after a kill gets
exactly the values it would have got live.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nnsweep.core.metrics import LATENCY_P50, MAX_ABS_ERR, SPEEDUP, SQNR, UserMetric, drop
from nnsweep.core.metrics import row as metric_row
from nnsweep.core.results import TrialRecord, TrialStatus
from nnsweep.spec import Constraints, Objective
from nnsweep.sweep.lifecycle import Ticket

__all__ = [
    "IDENTICAL_SQNR_DB",
    "PHASE_NAMES",
    "QUALITY_FROM",
    "Judgement",
    "failed",
    "interrupted",
    "judge",
    "quality_violations",
    "reused",
    "time_breakdown",
]


def failed(sweep: str, ticket: Ticket, reason: str, now: float | None = None) -> TrialRecord:
    """A failed trial's record; its metrics are only where its time went (``time_<phase>_s``, up to ``now``)."""
    metrics = {f"time_{phase}_s": seconds for phase, seconds in ticket.durations(now).items()}
    return TrialRecord(
        sweep, ticket.device, ticket.number, ticket.config, TrialStatus.FAILED, metrics=metrics, reason=reason
    )


def interrupted(sweep: str, ticket: Ticket, reason: str) -> TrialRecord:
    return TrialRecord(sweep, ticket.device, ticket.number, ticket.config, TrialStatus.INTERRUPTED, reason=reason)


def reused(ticket: Ticket, earlier: TrialRecord) -> TrialRecord:
    """``ticket``'s record when it repeats ``earlier``'s measurement (same configuration,
    or a byte-identical artifact run the same way), or ``earlier``'s failure."""
    if earlier.status is TrialStatus.FAILED:
        reason = f"the same configuration failed in trial {earlier.number}: {earlier.reason}"
        return dataclasses.replace(failed(earlier.sweep, ticket, reason), reused_from=earlier.number)
    return TrialRecord(
        sweep=earlier.sweep,
        device=ticket.device,
        number=ticket.number,
        config=ticket.config,
        status=TrialStatus.REUSED,
        metrics={k: v for k, v in earlier.metrics.items() if not k.startswith("time_")},
        partitions=dict(earlier.partitions),
        reused_from=earlier.reused_from if earlier.reused_from is not None else earlier.number,
        estimated=earlier.estimated,
        emulated=earlier.emulated,
        tags={k: v for k, v in earlier.tags.items() if k != "cache_hit"},
    )


QUALITY_FROM = "quality_from"  # a gated sweep's tag: whose outputs decided quality, "host" or "device"

# What an output identical to the fp32 model's counts as, in dB, in a sweep. Its SQNR is
# infinite (float32's rounding alone gives about 140 dB); Optuna and MLflow store finite
# numbers. Noise on an all-zero reference output counts as its negative.
IDENTICAL_SQNR_DB = 200.0


@dataclass(frozen=True)
class Judgement:
    """A record as told to the study: its values, its constraints (name -> value, feasible
    when at most 0), or why it cannot be told."""

    record: TrialRecord
    values: tuple[float, ...] | None
    constraints: Mapping[str, float]


def judge(
    record: TrialRecord,
    objectives: Sequence[Objective],
    baseline: TrialRecord | None,
    constraints: Constraints,
    eager: Mapping[str, float],
    phases: Mapping[str, float] | None = None,
    user: tuple[UserMetric, ...] = (),
) -> Judgement:
    """Add speed-up and each bounded metric's drop against the baseline, and the objective values.

    Args:
        record: a measured or reused record.
        objectives: the sweep's objectives, in order.
        baseline: the device's measured fp32 baseline (``None``: not measured; a drop is
            then against ``eager``, the fp32 model run eagerly).
        constraints: the sweep's bounds (a violated bound makes the trial infeasible).
        eager: the fp32 model's own quality metrics on the evaluation split.
        phases: seconds the trial spent in each lifecycle phase (logged as ``time_<phase>_s``).
        user: the user's metrics (their goals say which way a drop goes).

    Returns:
        The judgement; ``values`` is ``None`` (and the record FAILED) when an objective was not measured.
    """
    metrics = dict(record.metrics)
    metrics.update({f"time_{phase}_s": seconds for phase, seconds in (phases or {}).items()})
    base = baseline.metrics if baseline is not None else {}
    if base.get(LATENCY_P50) and metrics.get(LATENCY_P50):
        metrics[SPEEDUP] = base[LATENCY_P50] / metrics[LATENCY_P50]
    if SQNR not in metrics and (sqnr := _unbounded_sqnr(metrics)) is not None:
        metrics[SQNR] = sqnr
    bounds = quality_violations(metrics, base, constraints, eager, user)
    feasible = all(c <= 1e-12 for c in bounds.values()) if bounds else None
    untimed = record.tags.get(QUALITY_FROM) == "host"  # broke a quality bound on the host: never timed
    if untimed:
        feasible = False
    values = []
    for obj in objectives:
        value = metrics.get(obj.metric)
        if untimed and value is None:  # the worst value there is: it is on no front either way
            value = math.inf if obj.direction == "minimize" else -math.inf
        elif value is None or not math.isfinite(value):
            reason = f"objective {obj.metric} not measured"
            bad = dataclasses.replace(record, status=TrialStatus.FAILED, reason=reason, metrics=metrics)
            return Judgement(bad, None, {})
        values.append(float(value))
    return Judgement(dataclasses.replace(record, metrics=metrics, feasible=feasible), tuple(values), bounds)


def quality_violations(
    metrics: dict[str, float],
    base: Mapping[str, float],
    constraints: Constraints,
    eager: Mapping[str, float],
    user: tuple[UserMetric, ...],
    only: set[str] | None = None,
) -> dict[str, float]:
    """Each bound's violation (feasible at most 0), keyed as Optuna's constraint values are;
    the drops are added to ``metrics``. ``only``: the bounds on these metrics alone."""
    out: dict[str, float] = {}
    for name, bound in constraints.max_drop.items():
        reference = base.get(name, eager.get(name))
        if name not in metrics or reference is None or (only is not None and name not in only):
            continue
        sign = 1.0 if metric_row(name, user).goal == "maximize" else -1.0
        metrics[drop(name)] = sign * (reference - metrics[name])
        out[drop(name)] = metrics[drop(name)] - bound
    for name, bound in constraints.min.items():
        if name in metrics and (only is None or name in only):
            out[name if name == SQNR else f"min_{name}"] = bound - metrics[name]
    for name, bound in constraints.max.items():
        if name in metrics and (only is None or name in only):
            out[f"max_{name}"] = metrics[name] - bound
    return out


def _unbounded_sqnr(metrics: Mapping[str, float]) -> float | None:
    """The SQNR a measurement left out as infinite (``bench`` writes ``null``): an output
    identical to fp32's, or noise on an all-zero one (None: fidelity was not measured)."""
    err = metrics.get(MAX_ABS_ERR)
    if err is None or not math.isfinite(err):
        return None
    return IDENTICAL_SQNR_DB if err == 0 else -IDENTICAL_SQNR_DB


# Phase -> what the time breakdown calls it.
PHASE_NAMES = {
    "proposed": "waiting to convert",
    "converting": "converting",
    "ready": "waiting for the device",
    "measuring": "measuring",
    "evaluating": "evaluating on the host",
    "gating": "quality gate on the host",
    "twin": "waiting for a twin",
    "held": "held for the baseline",
}


def time_breakdown(records: Sequence[TrialRecord]) -> dict[str, float]:
    """Where a device's trials spent their time, summed (seconds): each lifecycle phase, and
    ``timed runs`` — the timed inferences alone, the physical limit of a sweep. Repeats of an
    earlier trial cost nothing and are left out; so are trials of runs before phases were logged."""
    out: dict[str, float] = {}
    for r in records:
        if r.reused_from is not None:
            continue
        for key, value in r.metrics.items():
            if key.startswith("time_") and key.endswith("_s"):
                name = PHASE_NAMES.get(key[5:-2], key[5:-2])
                out[name] = out.get(name, 0.0) + float(value)
        out["timed runs"] = out.get("timed runs", 0.0) + sum(r.samples_ms) / 1000.0
    return out
