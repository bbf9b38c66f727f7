"""What one trial produced: the record the coordinator, the tracker and the report share."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nnsweep.core.config import DeploymentConfig
from nnsweep.core.metrics import (
    ACCURACY,
    FIRST_INFERENCE,
    LOAD,
    MAX_ABS_ERR,
    MEAN_ABS_ERR,
    PEAK_RSS,
    SIZE,
    SQNR,
    TOP1_AGREEMENT,
)

__all__ = ["FLOAT_SQNR_DB", "FailureKind", "TrialRecord", "TrialStatus", "failure_kind", "metrics_from_result"]

# At or above this SQNR (dB) against fp32, outputs differ from fp32's by no more than float
# arithmetic does: float32's rounding alone gives about 140 dB, int8 weights or activations
# 60 dB at most. An int8 trial measured there is float in effect (TrialRecord.float_in_effect).
FLOAT_SQNR_DB = 100.0


class TrialStatus(enum.StrEnum):
    """``ok``: measured · ``reused``: an identical deployment was measured before ·
    ``failed``: conversion or benchmark failed (the reason says why) ·
    ``interrupted``: the sweep stopped mid-trial (requeued; never a measurement)."""

    OK = "ok"
    REUSED = "reused"
    FAILED = "failed"
    INTERRUPTED = "interrupted"

    @property
    def measured(self) -> bool:
        return self in (TrialStatus.OK, TrialStatus.REUSED)


class FailureKind(enum.StrEnum):
    """Why a trial failed, as far as a retry is concerned.

    ``deterministic``: the toolchain refused this configuration (a converter's or a
    runtime's error); the same configuration fails again, so it is recorded and reused.
    ``transient``: the machine, not the configuration (a timeout or a hang under load, a
    MemoryError, a lost or crashed worker, anything unforeseen); retried in the run and
    again when the sweep resumes. A failed record carries it as its ``failure_kind`` tag.
    """

    DETERMINISTIC = "deterministic"
    TRANSIENT = "transient"


_TRANSIENT_SIGNS = ("timed out", "hung", "memoryerror", "out of memory", "killed", "lost")


def failure_kind(error: BaseException | str) -> FailureKind:
    """The kind of a failure, from its exception (or a recorded reason).

    Example:
        >>> failure_kind(MemoryError()), failure_kind("benchmark timed out after 600 s")
        (<FailureKind.TRANSIENT: 'transient'>, <FailureKind.TRANSIENT: 'transient'>)
    """
    from nnsweep.core.errors import TrialError

    if isinstance(error, MemoryError | TimeoutError | ConnectionError):
        return FailureKind.TRANSIENT
    if isinstance(error, BaseException) and not isinstance(error, TrialError):
        return FailureKind.TRANSIENT  # unforeseen, raised on a worker: not the configuration's doing
    text = str(error).lower()
    return FailureKind.TRANSIENT if any(sign in text for sign in _TRANSIENT_SIGNS) else FailureKind.DETERMINISTIC


@dataclass(frozen=True)
class TrialRecord:
    """One trial on one device.

    ``number`` is the Optuna trial number in the device's study; ``metrics`` maps flat names
    (``latency_p50_ms``, ``accuracy``, ...) to values, empty when failed, and ``reason`` says
    why; ``partitions`` is ``PartitionReport.to_dict()``; ``samples_ms`` the per-run
    latencies (so a noisy measurement can be recognised); ``feasible`` whether it met the
    constraints (``None``: not measured); ``reused_from`` the trial whose measurement it
    reuses. ``estimated``: the latency is a compiler estimate; ``emulated``: measured under
    emulation (accuracy and fidelity are still the device's own). ``tags``: extra labels.
    """

    sweep: str
    device: str
    number: int
    config: DeploymentConfig
    status: TrialStatus
    metrics: Mapping[str, float] = field(default_factory=dict)
    reason: str | None = None
    partitions: Mapping[str, Any] = field(default_factory=dict)
    samples_ms: tuple[float, ...] = ()
    feasible: bool | None = None
    reused_from: int | None = None
    estimated: bool = False
    emulated: bool = False
    tags: Mapping[str, str] = field(default_factory=dict)

    @property
    def float_in_effect(self) -> bool:
        """An int8 trial whose outputs measured within float32's rounding of fp32's (SQNR at
        least :data:`FLOAT_SQNR_DB`): no int8 kernel changed what it computes."""
        sqnr = self.metrics.get(SQNR)
        return self.config.quant.mode.is_int8 and sqnr is not None and sqnr >= FLOAT_SQNR_DB

    def to_dict(self) -> dict[str, Any]:
        return {
            "sweep": self.sweep,
            "device": self.device,
            "number": self.number,
            "config": self.config.to_dict(),
            "status": self.status.value,
            "metrics": dict(self.metrics),
            "reason": self.reason,
            "partitions": dict(self.partitions),
            "samples_ms": list(self.samples_ms),
            "feasible": self.feasible,
            "reused_from": self.reused_from,
            "estimated": self.estimated,
            "emulated": self.emulated,
            "tags": dict(self.tags),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TrialRecord:
        return cls(
            sweep=d["sweep"],
            device=d["device"],
            number=int(d["number"]),
            config=DeploymentConfig.from_dict(d["config"]),
            status=TrialStatus(d["status"]),
            metrics=dict(d.get("metrics") or {}),
            reason=d.get("reason"),
            partitions=dict(d.get("partitions") or {}),
            samples_ms=tuple(d.get("samples_ms") or ()),
            feasible=d.get("feasible"),
            reused_from=d.get("reused_from"),
            estimated=bool(d.get("estimated", False)),
            emulated=bool(d.get("emulated", False)),
            tags=dict(d.get("tags") or {}),
        )


def metrics_from_result(result: Mapping[str, Any]) -> dict[str, float]:
    """Flatten a ``DeploymentResult.to_dict()`` into the metric names sweeps use.

    ``accuracy`` falls back to top-1 agreement with fp32 for models without labels,
    so an ``accuracy`` objective works for every model (the tag ``accuracy_source`` says which).
    """
    lat = result["latency_ms"]
    fid = result["fidelity"]
    out: dict[str, float] = {f"latency_{k}_ms": float(v) for k, v in lat.items()}
    out.update(
        {
            LOAD: float(result[LOAD]),
            FIRST_INFERENCE: float(result[FIRST_INFERENCE]),
            PEAK_RSS: float(result[PEAK_RSS]),
            SIZE: float(result[SIZE]),
            TOP1_AGREEMENT: float(fid[TOP1_AGREEMENT]),
            MAX_ABS_ERR: float(fid[MAX_ABS_ERR]),
            MEAN_ABS_ERR: float(fid[MEAN_ABS_ERR]),
            "threads": float(result["threads"]),
            "partition_count": float(result["partitions"]["count"]),
        }
    )
    if result.get("loadavg_1m") is not None:
        out["loadavg_1m"] = float(result["loadavg_1m"])
    if result.get("p50_ci95_ms"):  # how sure the p50 is: its 95 % confidence interval
        out["p50_ci95_low_ms"], out["p50_ci95_high_ms"] = (float(v) for v in result["p50_ci95_ms"])
    if fid.get(SQNR) is not None:
        out[SQNR] = float(fid[SQNR])
    acc = result.get(ACCURACY)
    out[ACCURACY] = float(acc) if acc is not None else float(fid[TOP1_AGREEMENT])
    out.update({name: float(value) for name, value in (result.get("metrics") or {}).items()})
    return out
