"""Outcomes into records: a settled trial becomes a study tell and a tracker call.

The :class:`Recorder` is the one place the coordinator writes results. For every
outcome it writes the study first (the record of truth, in the kill-safe order of
:mod:`nnsweep.sweep.studies`), then moves the ticket in the scheduler, then hands the
record to the tracker (which a later run rebuilds from the study if it was lost).
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nnsweep.core.results import FailureKind, TrialRecord, TrialStatus, failure_kind
from nnsweep.sweep import outcomes, studies
from nnsweep.sweep.lifecycle import Phase, Role, Ticket
from nnsweep.sweep.moves import next_move
from nnsweep.sweep.sampler import moves_on
from nnsweep.sweep.space import params_for, untried

if TYPE_CHECKING:
    import optuna

    from nnsweep.agents import Capabilities
    from nnsweep.core.config import DeploymentConfig
    from nnsweep.spec import SweepSpec
    from nnsweep.sweep.scheduler import Scheduler, Settlement
    from nnsweep.sweep.space import DeviceSpace
    from nnsweep.tracking import Tracker

__all__ = ["DeviceRun", "Recorder"]

log = logging.getLogger(__name__)


@dataclass
class DeviceRun:
    """A device as the coordinator holds it: what it has, its space, its study, and the
    live Optuna trial behind each of its tickets."""

    caps: Capabilities
    space: DeviceSpace
    study: optuna.Study
    trials: dict[Ticket, optuna.Trial] = field(default_factory=dict)


class Recorder:
    """Writes each outcome to the study, the scheduler and the tracker, in that order.

    Args:
        spec: the sweep.
        scheduler: the sweep's scheduler (told about every outcome).
        tracker: where trials are logged.
        devices: device name -> its run.
        eager: the fp32 model's own quality metrics (the reference when no baseline was measured).
        clock: monotonic seconds.
    """

    def __init__(
        self,
        spec: SweepSpec,
        scheduler: Scheduler,
        tracker: Tracker,
        devices: dict[str, DeviceRun],
        eager: Mapping[str, float],
        clock: Callable[[], float],
    ) -> None:
        self.spec, self.scheduler, self.tracker, self.devices = spec, scheduler, tracker, devices
        self.eager, self.clock = eager, clock

    def settle(self, ticket: Ticket, record: TrialRecord) -> None:
        """A result is known (measured, or a repeat): tell it now or hold it."""
        if record.status is TrialStatus.FAILED:  # a repeat of a configuration that failed
            self.fail(ticket, record.reason or "", record)
            return
        self._apply(self.scheduler.settle(ticket, record, self.clock()))

    def _apply(self, settlement: Settlement) -> None:
        for ticket in settlement.tell:
            self.tell(ticket)
        for twin, earlier in settlement.reuse:
            self.settle(twin, outcomes.reused(twin, earlier))

    def tell(self, ticket: Ticket) -> None:
        """Judge a settled ticket against the baseline and tell it to its study."""
        dev = self.devices[ticket.device]
        assert ticket.outcome is not None  # set by Scheduler.settle
        judged = outcomes.judge(
            ticket.outcome,
            self.spec.objectives,
            self.scheduler.devices[ticket.device].baseline,
            self.spec.constraints,
            self.eager,
            ticket.durations(self.clock()),
            self.spec.metrics,
        )
        trial = dev.trials.pop(ticket)
        record = _with_role(judged.record, ticket)
        if judged.values is None:
            studies.tell_failure(dev.study, trial, record, record.reason or "")
        else:
            studies.tell_record(dev.study, trial, record, judged.values, judged.constraints)
        self.scheduler.told(ticket, record, self.clock())
        self.tracker.finish_trial(record)

    def fail(
        self, ticket: Ticket, reason: str, record: TrialRecord | None = None, kind: FailureKind | None = None
    ) -> None:
        """This trial failed (its conversion, benchmark or evaluation): the sweep goes on.
        Its record says which kind of failure (``failure_kind``: from ``kind``, else read
        from the reason)."""
        dev = self.devices[ticket.device]
        record = _with_role(record or outcomes.failed(self.spec.name, ticket, reason, self.clock()), ticket)
        if "failure_kind" not in record.tags:
            tags = {**record.tags, "failure_kind": (kind or failure_kind(reason)).value}
            record = dataclasses.replace(record, tags=tags)
        studies.tell_failure(dev.study, dev.trials.pop(ticket), record, reason)
        settlement = self.scheduler.failed(ticket, record, self.clock())
        self.tracker.finish_trial(record)
        log.info("%s trial %d failed: %s", ticket.device, ticket.number, reason)
        self._apply(settlement)

    def requeue(self, ticket: Ticket, reason: str, *, lost: bool = False) -> None:
        """Not a measurement (interrupted, or the device's agent was lost): run it again later."""
        dev = self.devices[ticket.device]
        studies.requeue(dev.study, dev.trials.pop(ticket), ticket.role)
        self.scheduler.requeue(ticket, self.clock(), lost=lost)
        self.tracker.finish_trial(_with_role(outcomes.interrupted(self.spec.name, ticket, reason), ticket))
        if lost:
            log.warning("%s lost (%s); trial %d requeued", ticket.device, reason, ticket.number)

    def invalid(self, device: str, trial: optuna.Trial, reason: str) -> None:
        """A sampled combination no configuration can express: fail it without a record."""
        studies.tell_failure(self.devices[device].study, trial, None, reason)
        self.scheduler.devices[device].counted += 1  # it spent an ask of the budget
        log.warning("%s trial %d: %s", device, trial.number, reason)

    def divert(self, device: str, tried: Callable[[DeploymentConfig], bool], rng: random.Random) -> None:
        """Queue an untried configuration, drawn at random, as the device's next trial."""
        dev = self.devices[device]
        config = untried(dev.space, tried, rng)
        if config is not None:
            studies.enqueue(dev.study, params_for(config, dev.space), Role.SEARCH)

    def move(self, device: str, tried: Callable[[DeploymentConfig], bool]) -> None:
        """Queue the coordinator's move (a repair, or a neighbour of the best: see
        :mod:`nnsweep.sweep.moves`) as the device's next trial, once nothing is queued."""
        dev = self.devices[device]
        if studies.queued(dev.study) or not moves_on(self.spec.search.strategy):
            return
        measured = list(self.scheduler.devices[device].measured.values())  # as told, restored on resume
        move = next_move(measured, self.spec.objectives, dev.space, tried)
        if move is not None:
            config, role = move
            studies.enqueue(dev.study, params_for(config, dev.space), role)

    def wind_down(self, device: str, reason: str) -> None:
        """Tell what is held (measured: kept, even without the baseline), requeue the rest."""
        state = self.scheduler.devices[device]
        for ticket in list(state.live(Phase.HELD)):
            self.tell(ticket)
        for ticket in list(state.tickets):
            self.requeue(ticket, reason)


def _with_role(record: TrialRecord, ticket: Ticket) -> TrialRecord:
    """The record tagged with why its trial exists (``role``: see :class:`Role`)."""
    return dataclasses.replace(record, tags={**record.tags, "role": ticket.role.value})
