"""One device as the scheduler sees it: its live trials, what it has told, and its budget.

:class:`DeviceState` is plain data with the bookkeeping that belongs to it (what counts
toward the budget, what a later trial may reuse). The rules that read it live in
:mod:`nnsweep.sweep.scheduler` (proposals, outcomes) and :mod:`nnsweep.sweep.placement`
(what starts where).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nnsweep.core.results import TrialRecord, TrialStatus
from nnsweep.sweep.lifecycle import Phase, Role, Ticket

if TYPE_CHECKING:
    from nnsweep.core.config import DeploymentConfig

__all__ = ["DeviceState", "execution_key"]


def execution_key(artifact_sha: str, config: DeploymentConfig) -> tuple[str, str, tuple[str, ...], int]:
    """What makes two measurements of one artifact the same: its bytes, and the runtime,
    backend order and threads that run them (one ``.tflite`` runs in LiteRT and in Arm
    NN, with or without XNNPACK: equal bytes alone are not an equal measurement)."""
    return (artifact_sha, config.runtime, config.backends, config.threads)


@dataclass
class DeviceState:
    """One device as the scheduler sees it."""

    name: str
    machine: str
    budget: int
    depth: int = 3
    deadline: float | None = None
    space_size: int | None = None
    baseline_waiting: bool = False  # a baseline trial sits in the study's queue
    baseline: TrialRecord | None = None
    tickets: list[Ticket] = field(default_factory=list)  # live (not terminal)
    measured: dict[str, TrialRecord] = field(default_factory=dict)  # ticket key -> record
    failures: dict[str, TrialRecord] = field(default_factory=dict)  # ticket key -> its failed record
    # ticket key -> its record, told as a reuse of a measurement (e.g. a partition limit
    # that changed no byte): tried, though not measured under its own key
    reuses: dict[str, TrialRecord] = field(default_factory=dict)
    by_artifact: dict[tuple[str, str, tuple[str, ...], int], TrialRecord] = field(default_factory=dict)
    counted: int = 0  # told trials that spend budget: measured or failed
    failed: int = 0
    reused: int = 0
    repeats_in_row: int = 0
    exhausted: bool = False
    starting: bool = False  # its agent starts its runtimes' warm workers: its machine measures nothing
    lost: bool = False
    lost_since: float = 0.0
    next_revive: float = 0.0

    def live(self, *phases: Phase) -> Iterator[Ticket]:
        return (t for t in self.tickets if not phases or t.phase in phases)

    def tried(self, key: str) -> bool:
        """Whether a configuration (by its reuse key) was measured, failed or is in flight here."""
        if key in self.measured or key in self.failures or key in self.reuses:
            return True
        return any(t.key == key for t in self.tickets)

    def told_keys(self) -> set[str]:
        """The configurations (by reuse key) told: measured, failed, or told as a reuse of
        another key's measurement (a byte-identical artifact)."""
        return self.measured.keys() | self.failures.keys() | self.reuses.keys()

    def baseline_pending(self, ticket: Ticket) -> bool:
        """Whether a baseline other than ``ticket`` will still be measured."""
        return self.baseline_waiting or any(t.role is Role.BASELINE and t is not ticket for t in self.tickets)

    def account(self, record: TrialRecord, key: str, role: Role) -> None:
        """Count a told trial: budget, failures, repeats, and what later trials may reuse."""
        if record.status is TrialStatus.INTERRUPTED:
            return
        if record.status is TrialStatus.REUSED or record.reused_from is not None:
            self.reused += 1  # a repeat: told, but free
            self.reuses.setdefault(key, record)
            return
        self.counted += 1
        if record.status is TrialStatus.FAILED:
            self.failed += 1
            self.failures.setdefault(key, record)
            return
        self.measured.setdefault(key, record)
        sha = record.tags.get("artifact_sha256")
        if sha:
            self.by_artifact.setdefault(execution_key(sha, record.config), record)
        if role is Role.BASELINE:
            self.baseline = record
