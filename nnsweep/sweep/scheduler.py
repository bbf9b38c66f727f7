"""What runs next, and where: the coordinator's decisions as pure functions of its state.

No Optuna, no tracker, no executor and no clock of its own live here: the caller
passes ``now`` and performs the :class:`Action` objects :meth:`Scheduler.plan`
returns, then reports back what happened. That keeps every rule testable in
milliseconds with fakes (``tests/test_scheduler.py``):

* **one measurement per machine**: a device measures one artifact at a time, and
  while any device on machine M measures nothing else runs on M — no other
  device's measurement and, when M converts, no conversion and no host evaluation.
  Devices on other machines are pipelined: their next artifacts convert meanwhile;
* **conversions where there is room**: each machine that converts has its slots;
  a conversion goes to a free slot on a machine that measures nothing now,
  machines without devices first (a build server), so a device's own machine
  converts only when nothing else can;
* **duplicate reuse**: a configuration measured before on a device is not measured
  again there (:attr:`Admission.REUSE`), nor is an artifact byte-identical to one
  measured before with the same runtime, backends and threads; a configuration
  already in flight on the device waits for it (:attr:`Phase.TWIN`);
* **repeats are free**: reused trials are told to the study (it learns from them)
  but do not count toward the budget; a device whose proposals are all repeats
  for ``repeat_cap`` asks in a row, or that has measured its whole finite space,
  is exhausted;
* **held baseline**: a result is held until the device's fp32 baseline, which the
  accuracy constraint refers to, is known (or has failed);
* **hang watchdog**: a measurement with no answer within its limit is declared hung;
* **lost devices**: a device whose agent died is retried every ``revive_every_s``
  and waited for up to ``lost_timeout_s`` once the others are done.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from nnsweep.artifacts.key import conversion_digest
from nnsweep.core.config import DeploymentConfig
from nnsweep.core.results import TrialRecord, TrialStatus
from nnsweep.sweep.lifecycle import Phase, Role, Ticket

__all__ = [
    "Action",
    "Admission",
    "DeviceState",
    "Scheduler",
    "Settlement",
    "default_depth",
    "execution_key",
    "reuse_key",
]


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


def execution_key(artifact_sha: str, ticket: Ticket) -> tuple[str, str, tuple[str, ...], int]:
    """What makes two measurements of one artifact the same: its bytes, and the runtime,
    backend order and threads that run them (one ``.tflite`` runs in LiteRT and in Arm
    NN, with or without XNNPACK: equal bytes alone are not an equal measurement)."""
    c = ticket.config
    return (artifact_sha, c.runtime, c.backends, c.threads)


class Admission(enum.Enum):
    NEW = "new"  # convert and measure it
    REUSE = "reuse"  # tried before on this device: tell it what that gave (values, or the failure)
    TWIN = "twin"  # the same configuration is in flight: wait for it


@dataclass(frozen=True)
class Action:
    """Something the caller must start: ``convert``, ``measure``, ``evaluate`` (run a
    timed-only device's artifact on the host for its outputs) or ``reuse`` (an
    artifact byte-identical to one measured before: tell ``earlier``'s values)."""

    kind: str
    ticket: Ticket
    earlier: TrialRecord | None = None
    machine: str | None = None  # where a ``convert`` runs


@dataclass
class Settlement:
    """What a result releases: trials to tell now, twins that reuse it, twins to run alone."""

    tell: list[Ticket] = field(default_factory=list)
    reuse: list[tuple[Ticket, TrialRecord]] = field(default_factory=list)
    alone: list[Ticket] = field(default_factory=list)


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
            c = record.config
            self.by_artifact.setdefault((sha, c.runtime, c.backends, c.threads), record)
        if role is Role.BASELINE:
            self.baseline = record


class Scheduler:
    """The coordinator's rules (see the module docstring).

    Args:
        converter_machine: the coordinator's machine: host evaluations run there, and
            its conversions unless ``converters`` says otherwise.
        converters: conversions that may run at once: a number (all on
            ``converter_machine``) or, per machine, its slots.
        repeat_cap: proposals in a row that repeat a tried configuration before a
            device is called exhausted.
        divert_after: repeats in a row after which the next trial is an untried
            configuration the caller draws (:meth:`diverts`), so the budget is spent on
            distinct configurations even when the sampler keeps returning to known ones.
        lost_timeout_s: how long a lost device is waited for once the others are done.
        revive_every_s: how often a lost device's agent is restarted.
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
    ) -> None:
        self.converter_machine = converter_machine
        self.converters = {converter_machine: converters} if isinstance(converters, int) else dict(converters)
        self.repeat_cap = repeat_cap
        self.divert_after = divert_after
        self.lost_timeout_s = lost_timeout_s
        self.revive_every_s = revive_every_s
        self.devices: dict[str, DeviceState] = {}
        self._evaluating: set[Ticket] = set()  # EVALUATING tickets whose host run has started

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

    def converting(self, digest: str) -> list[Ticket]:
        """Tickets waiting for the conversion with this :func:`conversion_digest` (any device)."""
        return [
            t for d in self.devices.values() for t in d.live(Phase.CONVERTING) if conversion_digest(t.config) == digest
        ]

    def quiet(self) -> bool:
        """Whether the coordinator's own machine is measuring: then the coordinator's work
        there (asking the samplers, tracking writes) waits; it is milliseconds, and it
        would run beside the timed runs. Conversions never run there meanwhile anyway."""
        return self._machine_measuring(self.converter_machine)

    # -------------------------------------------------------------- plans
    def _machine_measuring(self, machine: str) -> bool:
        return machine in self._measuring()

    def plan(self, now: float) -> list[Action]:
        """What to start now, measurements first (a device waiting on a ready artifact is wasted time)."""
        actions: list[Action] = []
        converting = self._converting()
        busy = set(converting.values()) | ({self.converter_machine} if self._evaluating else set())
        busy |= {d.machine for d in self.devices.values() if d.starting}  # imports would perturb the timing
        for d in self.devices.values():
            if d.lost or d.machine in busy or self._machine_measuring(d.machine):
                continue
            for ticket in list(d.live(Phase.READY)):
                assert ticket.artifact_sha is not None  # set by converted()
                earlier = d.by_artifact.get(execution_key(ticket.artifact_sha, ticket))
                if earlier is not None:
                    actions.append(Action("reuse", ticket, earlier))
                    continue
                ticket.move(Phase.MEASURING, now)
                actions.append(Action("measure", ticket))
                break
        measuring = self._measuring()
        if self.converter_machine not in measuring:  # nothing runs beside a measurement on its machine
            for d in self.devices.values():
                for ticket in d.live(Phase.EVALUATING):
                    if ticket not in self._evaluating:
                        self._evaluating.add(ticket)
                        actions.append(Action("evaluate", ticket))
        actions.extend(self._conversions(converting, measuring, now))
        return actions

    def plan_conversions(self, now: float) -> list[Action]:
        """The conversions :meth:`plan` would start now, and nothing else. The coordinator starts
        them between two asks: what is asked converts while the next ask works (a runtime's
        first float-layer trial waits for its sensitivity ranking, minutes on a large model)."""
        return self._conversions(self._converting(), self._measuring(), now)

    def _converting(self) -> dict[str, str]:
        """Conversion digest -> the machine converting it."""
        return {
            conversion_digest(t.config): t.converted_on
            for d in self.devices.values()
            for t in d.live(Phase.CONVERTING)
            if t.converted_on is not None
        }

    def _measuring(self) -> set[str]:
        """The machines measuring now."""
        return {d.machine for d in self.devices.values() if any(True for _ in d.live(Phase.MEASURING))}

    def _conversions(self, converting: dict[str, str], measuring: set[str], now: float) -> list[Action]:
        """Start conversions in free slots: machines without devices first, never beside a measurement."""
        device_machines = {d.machine for d in self.devices.values()}
        used = list(converting.values())
        free = {m: n - used.count(m) for m, n in self.converters.items() if m not in measuring}
        order = sorted(free, key=lambda m: (m in device_machines, m))
        actions: list[Action] = []
        for d in self.devices.values():
            for ticket in list(d.live(Phase.PROPOSED)):
                digest = conversion_digest(ticket.config)
                if digest in converting:  # joins the conversion already under way
                    ticket.converted_on = converting[digest]
                    ticket.move(Phase.CONVERTING, now)
                    continue
                machine = next((m for m in order if free[m] > 0), None)
                if machine is None:
                    return actions
                free[machine] -= 1
                converting[digest] = ticket.converted_on = machine
                ticket.move(Phase.CONVERTING, now)
                actions.append(Action("convert", ticket, machine=machine))
        return actions

    # ------------------------------------------------------------ outcomes
    def settle(self, ticket: Ticket, record: TrialRecord, now: float) -> Settlement:
        """A result is known: tell it now or hold it until the baseline is known."""
        d = self.devices[ticket.device]
        self._evaluating.discard(ticket)
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
        self._evaluating.discard(ticket)
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
        self._evaluating.discard(ticket)
        for twin in [t for t in d.tickets if t.twin_of is ticket]:
            twin.twin_of = None
            twin.move(Phase.PROPOSED, now)
        if ticket.role is Role.BASELINE:
            d.baseline_waiting = True  # its parameters go back to the queue
        ticket.move(Phase.REQUEUED, now)
        d.tickets.remove(ticket)
        if lost:
            d.lost, d.lost_since, d.next_revive = True, now, now + 2.0

    def retry(self, ticket: Ticket, now: float) -> None:
        """An infrastructure failure while converting: convert again (anywhere)."""
        ticket.converted_on = None
        ticket.move(Phase.PROPOSED, now)

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
