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

from nnsweep.core.results import TrialRecord, TrialStatus
from nnsweep.spec import Objective
from nnsweep.sweep.lifecycle import Ticket

__all__ = [
    "IDENTICAL_SQNR_DB",
    "PHASE_NAMES",
    "Judgement",
    "failed",
    "interrupted",
    "judge",
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
    max_accuracy_drop: float | None,
    eager_accuracy: float,
    phases: Mapping[str, float] | None = None,
    min_sqnr_db: float | None = None,
) -> Judgement:
    """Add speed-up and accuracy drop against the baseline, and the objective values.

    Args:
        record: a measured or reused record.
        objectives: the sweep's objectives, in order.
        baseline: the device's measured fp32 baseline (``None``: not measured; the
            accuracy drop is then against ``eager_accuracy``, the fp32 model run eagerly).
        max_accuracy_drop: the accuracy constraint (``None``: none).
        eager_accuracy: the fp32 model's own accuracy on the evaluation split.
        phases: seconds the trial spent in each lifecycle phase (logged as ``time_<phase>_s``).
        min_sqnr_db: the SQNR constraint (``None``: none).

    Returns:
        The judgement; ``values`` is ``None`` (and the record FAILED) when an objective was not measured.
    """
    metrics = dict(record.metrics)
    metrics.update({f"time_{phase}_s": seconds for phase, seconds in (phases or {}).items()})
    base = baseline.metrics if baseline is not None else {}
    if base.get("latency_p50_ms") and metrics.get("latency_p50_ms"):
        metrics["speedup_vs_fp32"] = base["latency_p50_ms"] / metrics["latency_p50_ms"]
    if "sqnr_db" not in metrics and (sqnr := _unbounded_sqnr(metrics)) is not None:
        metrics["sqnr_db"] = sqnr
    constraints: dict[str, float] = {}
    if max_accuracy_drop is not None and "accuracy" in metrics:
        reference = base.get("accuracy", eager_accuracy)
        metrics["accuracy_drop"] = reference - metrics["accuracy"]
        constraints["accuracy_drop"] = metrics["accuracy_drop"] - max_accuracy_drop
    if min_sqnr_db is not None and "sqnr_db" in metrics:
        constraints["sqnr_db"] = min_sqnr_db - metrics["sqnr_db"]
    feasible = all(c <= 1e-12 for c in constraints.values()) if constraints else None
    values = []
    for obj in objectives:
        value = metrics.get(obj.metric)
        if value is None or not math.isfinite(value):
            reason = f"objective {obj.metric} not measured"
            bad = dataclasses.replace(record, status=TrialStatus.FAILED, reason=reason, metrics=metrics)
            return Judgement(bad, None, {})
        values.append(float(value))
    return Judgement(dataclasses.replace(record, metrics=metrics, feasible=feasible), tuple(values), constraints)


def _unbounded_sqnr(metrics: Mapping[str, float]) -> float | None:
    """The SQNR a measurement left out as infinite (``bench`` writes ``null``): an output
    identical to fp32's, or noise on an all-zero one (None: fidelity was not measured)."""
    err = metrics.get("max_abs_err")
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
