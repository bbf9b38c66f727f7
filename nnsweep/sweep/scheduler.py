"""What the studies are asked and told: the coordinator's decisions as pure functions of its state.

No Optuna, tracker, executor or clock here: the caller passes ``now``, starts what
:attr:`Scheduler.placement` plans and reports back, so every rule is tested in
milliseconds with fakes. The rules: a configuration (or byte-identical artifact) measured
before on a device is reused, one in flight is waited for (:attr:`Phase.TWIN`); reused
trials are told to the study but do not count toward the budget, and a device whose
proposals are all repeats for ``repeat_cap`` asks, or that measured its whole finite
space, is exhausted; a result is held until the device's fp32 baseline is known; a
measurement without an answer within its limit is hung; a lost device is retried every
``revive_every_s`` and waited for up to ``lost_timeout_s`` once the others are done.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nnsweep.core.config import DeploymentConfig
from nnsweep.core.results import TrialRecord, TrialStatus
from nnsweep.sweep.device_state import DeviceState
from nnsweep.sweep.lifecycle import Phase, Role, Ticket
from nnsweep.sweep.placement import Placement

if TYPE_CHECKING:
    from nnsweep.sweep.gate import Gate

__all__ = ["Admission", "Scheduler", "Settlement", "default_depth", "reuse_key"]


def default_depth(converters: Mapping[str, int]) -> int:
    """Trials in flight per device: three per conversion slot (3 with one slot).

    A device measures only while nothing converts on its machine, so what is converted
    waits, ready, until the slots are all free at once, and a ready trial still counts as
    in flight. Too few in flight and the slots idle: with 3 on two slots a sweep ran in
    waves (two conversions, the third alone on one core, then the measurements). Three per
    slot keeps them fed between batches of measurements, while the sampler's proposals
    lag its results by at most that many trials (the study's constant liar covers them).
    Queued starts are asked beyond it (:meth:`Scheduler.wanted`).
    """
    return 3 * max(1, sum(converters.values()))


def reuse_key(model_digest: str, config: DeploymentConfig) -> str:
    """What makes two trials the same measurement on one device: the model and the configuration."""
    return hashlib.sha256(f"{model_digest}\0{config.digest()}".encode()).hexdigest()


class Admission(enum.Enum):
    NEW = "new"  # convert and measure it
    REUSE = "reuse"  # tried before on this device: tell it what that gave (values, or the failure)
    TWIN = "twin"  # the same configuration is in flight: wait for it


@dataclass
class Settlement:
    """What a result releases: trials to tell now, twins that reuse it, twins to run alone."""

    tell: list[Ticket] = field(default_factory=list)
    reuse: list[tuple[Ticket, TrialRecord]] = field(default_factory=list)
    alone: list[Ticket] = field(default_factory=list)


class Scheduler:
    """The coordinator's rules (see the module docstring).

    Args:
        converter_machine: the coordinator's machine (:class:`~nnsweep.sweep.placement.Placement`).
        converters: conversions that may run at once (:class:`~nnsweep.sweep.placement.Placement`).
        repeat_cap: proposals in a row that repeat a tried configuration before a
            device is called exhausted.
        divert_after: repeats in a row after which the next trial is an untried
            configuration the caller draws (:meth:`diverts`), so the budget is spent on
            distinct configurations even when the sampler keeps returning to known ones.
        lost_timeout_s: how long a lost device is waited for once the others are done.
        revive_every_s: how often a lost device's agent is restarted.
        gate: which READY trials run on the host for their quality first (:mod:`nnsweep.sweep.gate`).
    """

    def __init__(
        self,
        converter_machine: str,
        converters: int | Mapping[str, int] = 1,
        *,
        repeat_cap: int = 50,
        divert_after: int = 3,
        lost_timeout_s: float = 300.0,
        revive_every_s: float = 5.0,
        gate: Gate | None = None,
    ) -> None:
        self.repeat_cap = repeat_cap
        self.divert_after = divert_after
        self.lost_timeout_s = lost_timeout_s
        self.revive_every_s = revive_every_s
        self.devices: dict[str, DeviceState] = {}
        self.placement = Placement(self.devices, converter_machine, converters, gate)

    def add(self, device: DeviceState) -> None:
        self.devices[device.name] = device

    def restore(self, device: str, record: TrialRecord, key: str, role: Role) -> None:
        """Account a trial an earlier run of the sweep told (on resume)."""
        self.devices[device].account(record, key, role)

    # ----------------------------------------------------------- proposals
    def wanted(self, device: str, now: float, queued: int = 0) -> int:
        """How many new trials to ask the device's study for now.

        Args:
            queued: trials queued in the study (the starts, requeued trials): they wait
                for no result, so all of them are asked at once, beyond the depth. The
                conversion slots then work through every start without idling between
                batches of measurements; the depth bounds only how far the sampler's
                proposals lag its results.
        """
        d = self.devices[device]
        if d.lost or d.exhausted or (d.deadline is not None and now > d.deadline):
            return 0
        if d.space_size is not None and len(d.told_keys()) >= d.space_size:
            d.exhausted = True
            return 0
        in_flight = sum(1 for t in d.tickets if t.phase is not Phase.HELD)
        wanted = min(max(d.depth - in_flight, queued), d.budget - d.counted - len(d.tickets))
        if d.space_size is not None:  # never ask for more than the space has left untried
            untried = d.space_size - len(d.told_keys() | {t.key for t in d.tickets})
            wanted = min(wanted, untried)
        return max(0, wanted)

    def diverts(self, device: str) -> bool:
        """Whether the device's next trial should be an untried configuration, not the sampler's."""
        return self.devices[device].repeats_in_row >= self.divert_after

    def admit(self, ticket: Ticket, now: float) -> tuple[Admission, TrialRecord | None]:
        """Take a freshly asked trial: reuse a measurement, wait for a twin, or run it."""
        d = self.devices[ticket.device]
        ticket.start(now)
        if ticket.role is Role.BASELINE:
            d.baseline_waiting = False
        # a key told as a reuse is a repeat too: else a sampler proposing it again would convert
        # it to the same bytes and tell it free, over and over, never reaching the repeat cap
        earlier = d.measured.get(ticket.key) or d.failures.get(ticket.key) or d.reuses.get(ticket.key)
        # settled but not yet told (held until the baseline is known): its outcome is as good, and
        # its twins were released when it settled, so one that waited on it now would wait forever
        settled = (t.outcome for t in d.tickets if t.key == ticket.key and t.outcome is not None)
        earlier = earlier or next(settled, None)
        d.tickets.append(ticket)
        if earlier is not None:
            d.repeats_in_row += 1
            if d.repeats_in_row >= self.repeat_cap:
                d.exhausted = True
            return Admission.REUSE, earlier
        d.repeats_in_row = 0
        twin = next((t for t in d.tickets if t.key == ticket.key and t is not ticket and t.twin_of is None), None)
        if twin is not None:
            ticket.twin_of = twin
            ticket.move(Phase.TWIN, now)
            return Admission.TWIN, None
        return Admission.NEW, None

    def converted(self, ticket: Ticket, artifact_sha: str, now: float) -> None:
        ticket.artifact_sha = artifact_sha
        ticket.move(Phase.READY, now)

    def gated(self, ticket: Ticket, quality: Mapping[str, float], now: float) -> None:
        """The trial's host run broke no quality bound (``quality``: its figures there, empty
        when it could not run there): it waits for its device."""
        self.placement.evaluated(ticket)
        ticket.gate = dict(quality)
        ticket.move(Phase.READY, now)

    # ------------------------------------------------------------ outcomes
    def settle(self, ticket: Ticket, record: TrialRecord, now: float) -> Settlement:
        """A result is known: tell it now or hold it until the baseline is known."""
        d = self.devices[ticket.device]
        self.placement.evaluated(ticket)
        ticket.outcome = record
        out = Settlement()
        if ticket.role is Role.BASELINE and record.status.measured:
            d.baseline = record
            out.tell.append(ticket)
            out.tell.extend(self._release_held(d))
        elif d.baseline is None and d.baseline_pending(ticket):
            ticket.move(Phase.HELD, now)
        else:
            out.tell.append(ticket)
        for twin in [t for t in d.tickets if t.twin_of is ticket]:
            twin.twin_of = None
            if record.status.measured:
                out.reuse.append((twin, record))
            else:
                twin.move(Phase.PROPOSED, now)  # the original failed: try this one on its own
                out.alone.append(twin)
        return out

    def _release_held(self, d: DeviceState) -> list[Ticket]:
        return list(d.live(Phase.HELD))

    def told(self, ticket: Ticket, record: TrialRecord, now: float) -> None:
        """The study has the trial's outcome (values, or a failure)."""
        d = self.devices[ticket.device]
        ticket.outcome = record
        ticket.move(Phase.FAILED if record.status is TrialStatus.FAILED else Phase.TOLD, now)
        d.tickets.remove(ticket)
        d.account(record, ticket.key, ticket.role)

    def failed(self, ticket: Ticket, record: TrialRecord, now: float) -> Settlement:
        """The trial failed (conversion, benchmark, evaluation): settle its twins, release
        held trials if it was the baseline, then account it with :meth:`told`."""
        out = self.settle_failure(ticket, record, now)
        self.told(ticket, record, now)
        return out

    def settle_failure(self, ticket: Ticket, record: TrialRecord, now: float) -> Settlement:
        d = self.devices[ticket.device]
        self.placement.evaluated(ticket)
        out = Settlement()
        for twin in [t for t in d.tickets if t.twin_of is ticket]:
            twin.twin_of = None
            twin.move(Phase.PROPOSED, now)
            out.alone.append(twin)
        if ticket.role is Role.BASELINE:
            # No measured baseline: held trials are judged against the eager fp32 model.
            out.tell.extend(t for t in self._release_held(d) if t is not ticket)
        return out

    def requeue(self, ticket: Ticket, now: float, *, lost: bool = False) -> None:
        """The trial was interrupted (never a measurement); with ``lost`` its device's agent died."""
        d = self.devices[ticket.device]
        self.placement.evaluated(ticket)
        for twin in [t for t in d.tickets if t.twin_of is ticket]:
            twin.twin_of = None
            twin.move(Phase.PROPOSED, now)
        if ticket.role is Role.BASELINE:
            d.baseline_waiting = True  # its parameters go back to the queue
        ticket.move(Phase.REQUEUED, now)
        d.tickets.remove(ticket)
        if lost:
            d.lost, d.lost_since, d.next_revive = True, now, now + 2.0

    def retry(self, ticket: Ticket, now: float, pause_s: float = 0.0) -> None:
        """An infrastructure failure while converting, or the artifact gone from the cache
        before it was measured: convert again (anywhere), not before ``pause_s`` from ``now``."""
        ticket.converted_on = None
        ticket.artifact_sha = None
        ticket.not_before = now + pause_s
        ticket.move(Phase.PROPOSED, now)

    def ready_with(self, artifact_sha: str) -> list[Ticket]:
        """The trials, on any device, READY to measure the artifact ``artifact_sha``."""
        return [t for d in self.devices.values() for t in d.live(Phase.READY) if t.artifact_sha == artifact_sha]

    # ------------------------------------------------------------ watchdog
    def hung(self, now: float, limit_s: float) -> list[Ticket]:
        """Measurements with no answer ``limit_s`` after they started (each reported once)."""
        out = []
        for d in self.devices.values():
            for t in d.live(Phase.MEASURING):
                since = t.measuring_since
                if not t.hung and since is not None and now - since > limit_s:
                    t.hung = True
                    out.append(t)
        return out

    def revivals(self, now: float) -> list[str]:
        """Lost devices due for another attempt to restart their agent."""
        due = [d for d in self.devices.values() if d.lost and now >= d.next_revive]
        for d in due:
            d.next_revive = now + self.revive_every_s
        return [d.name for d in due]

    def revived(self, device: str) -> None:
        self.devices[device].lost = False

    def finished(self, now: float) -> bool:
        """Nothing live anywhere, and no lost device still worth waiting for."""
        for d in self.devices.values():
            if d.lost:
                others_busy = any(not o.lost and (o.tickets or self.wanted(o.name, now)) for o in self.devices.values())
                waiting = others_busy or now - d.lost_since < self.lost_timeout_s
                if waiting and d.counted + len(d.tickets) < d.budget:
                    return False
                continue
            if d.tickets or self.wanted(d.name, now):
                return False
        return True
