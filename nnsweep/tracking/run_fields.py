"""What a trial's record is as an MLflow run: its params, tags and metrics, and the
status an ended run recorded. Pure functions of the record: :mod:`~nnsweep.tracking.mlflow_tracker`
writes them, ``benchmarks/fault_injection.py`` checks a run holds them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nnsweep.core.results import TrialRecord, TrialStatus

if TYPE_CHECKING:
    from nnsweep.core.config import DeploymentConfig

__all__ = [
    "DEVICE_TAG",
    "KIND_TAG",
    "PARAM_LIMIT",
    "SWEEP_TAG",
    "TAG_LIMIT",
    "TRIAL_TAG",
    "TrialFields",
    "clip",
    "end_tags",
    "ended_as",
    "finite_metrics",
    "run_params",
    "start_tags",
    "trial_fields",
]

SWEEP_TAG, DEVICE_TAG, KIND_TAG, TRIAL_TAG = "nnsweep.sweep", "nnsweep.device", "nnsweep.kind", "nnsweep.trial"
# MLflow 3.17's limits (mlflow.utils.validation): tag and param value lengths.
TAG_LIMIT = 8000
PARAM_LIMIT = 6000


@dataclass(frozen=True)
class TrialFields:
    """What a trial's run holds once it has ended: its params, tags (without MLflow's own
    ``mlflow.*``, the sweep id and the ``pareto``/``best`` marks of the front) and metrics
    (without the front's re-measured figures)."""

    params: dict[str, str]
    tags: dict[str, str]
    metrics: dict[str, float]


def trial_fields(sweep: str, record: TrialRecord) -> TrialFields:
    """The params, tags and metrics :class:`MlflowTracker` logs for a told trial: what its run
    must hold, whatever happened to the run that logged it (benchmarks/fault_injection.py)."""
    tags = {**start_tags(sweep, record.device, record.number, record.config), **end_tags(record)}
    params = {k: clip(v, PARAM_LIMIT) for k, v in run_params(record.config).items()}
    return TrialFields(params, {k: clip(v, TAG_LIMIT) for k, v in tags.items()}, finite_metrics(record.metrics))


def start_tags(sweep: str, device: str, number: int, config: DeploymentConfig) -> dict[str, str]:
    return {
        SWEEP_TAG: sweep,
        DEVICE_TAG: device,
        KIND_TAG: "trial",
        TRIAL_TAG: str(number),
        "device": device,
        "runtime": config.runtime,
        "backends": ",".join(config.backends),
        "config": config.label(),
        "status": "running",
    }


def run_params(config: DeploymentConfig) -> dict[str, str]:
    return {**config.flat(), "config_digest": config.digest()}


def end_tags(record: TrialRecord) -> dict[str, str]:
    tags = {
        "status": record.status.value,
        "estimated": str(record.estimated).lower(),
        # Measured under qemu-user on another CPU: real kernels, no real board's latency.
        "emulated": str(record.emulated).lower(),
        **{str(k): str(v) for k, v in record.tags.items()},
    }
    parts = record.partitions
    if parts:
        sizes = ",".join(str(s) for s in parts.get("sizes", []))
        tags["partitions"] = f"{parts.get('count', 0)}" + (f" (sizes {sizes})" if sizes else "")
    if record.reason:
        tags["failure_reason"] = record.reason
    if record.feasible is not None:
        tags["feasible"] = str(record.feasible).lower()
    if record.reused_from is not None:
        tags["reused_from"] = str(record.reused_from)
    return tags


def ended_as(run_status: str, status_tag: str) -> TrialStatus | None:
    """What an ended run recorded: its terminal MLflow status, and the status tag for FINISHED."""
    if run_status == "FINISHED":
        return TrialStatus(status_tag) if status_tag in (TrialStatus.OK, TrialStatus.REUSED) else None
    return {"FAILED": TrialStatus.FAILED, "KILLED": TrialStatus.INTERRUPTED}.get(run_status)


def finite_metrics(metrics: Mapping[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in metrics.items():
        number = float(value)
        if math.isfinite(number):
            out[key] = number
    return out


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
