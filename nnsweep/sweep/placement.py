"""What starts now, and where: the coordinator's placement rules as pure functions of its state.

The caller passes ``now``, performs the :class:`Action` objects :meth:`Placement.plan`
returns, and reports to the :class:`~nnsweep.sweep.scheduler.Scheduler`. The rules: one
measurement per machine (while a device on machine M measures, nothing else runs on M:
no other measurement, conversion or host evaluation; other machines convert meanwhile);
conversions go to a free slot on a machine that measures nothing now, machines without
devices first; a trial whose artifact is converting already (another thread count) joins
that conversion; an artifact byte-identical to one measured before with the same
runtime, backends and threads is not measured again (:func:`execution_key`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nnsweep.artifacts.key import conversion_digest
from nnsweep.core.results import TrialRecord
from nnsweep.sweep.device_state import DeviceState, execution_key
from nnsweep.sweep.lifecycle import Phase, Ticket

if TYPE_CHECKING:
    from nnsweep.sweep.gate import Gate

__all__ = ["Action", "Placement"]


@dataclass(frozen=True)
class Action:
    """Something the caller must start: ``convert``, ``measure``, ``evaluate`` (run a
    timed-only device's artifact on the host for its outputs), ``gate`` (run an artifact on
    the host for its quality before the device times it) or ``reuse`` (an
    artifact byte-identical to one measured before: tell ``earlier``'s values)."""

    kind: str
    ticket: Ticket
    earlier: TrialRecord | None = None
    machine: str | None = None  # where a ``convert`` runs


class Placement:
    """The placement rules (see the module docstring) over the scheduler's devices.

    Args:
        devices: the scheduler's devices, by name (shared, not copied).
        converter_machine: the coordinator's machine: host evaluations run there, and
            its conversions unless ``converters`` says otherwise.
        converters: conversions that may run at once: a number (all on
            ``converter_machine``) or, per machine, its slots.
        gate: which READY trials run on the host for their quality before they are timed
            (:mod:`nnsweep.sweep.gate`; ``None``: none).
    """

    def __init__(
        self,
        devices: Mapping[str, DeviceState],
        converter_machine: str,
        converters: int | Mapping[str, int] = 1,
        gate: Gate | None = None,
    ) -> None:
        self.devices = devices
        self.converter_machine = converter_machine
        self.converters = {converter_machine: converters} if isinstance(converters, int) else dict(converters)
        self.converters_starting: set[str] = set()  # machines whose conversion workers are not ready: none there yet
        self.gate = gate
        self._evaluating: set[Ticket] = set()  # EVALUATING and GATING tickets whose host run has started

    def plan(self, now: float) -> list[Action]:
        """What to start now: host quality gates, then measurements (a device waiting on a
        ready artifact is wasted time), host evaluations and conversions."""
        actions: list[Action] = self._gates(now)
        converting = self._converting()
        busy = set(converting.values()) | ({self.converter_machine} if self._evaluating else set())
        busy |= {d.machine for d in self.devices.values() if d.starting}  # imports would perturb the timing
        for d in self.devices.values():
            if d.lost or d.machine in busy or d.machine in self._measuring():
                continue
            for ticket in list(d.live(Phase.READY)):
                assert ticket.artifact_sha is not None  # set by Scheduler.converted()
                if self._gated(ticket, d):
                    continue  # waits for its gate: the host is measuring now
                earlier = d.by_artifact.get(execution_key(ticket.artifact_sha, ticket.config))
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

    def _gated(self, ticket: Ticket, device: DeviceState) -> bool:
        """Whether ``ticket`` runs on the host before its device times it: the gate wants it,
        and the device is on another machine (on the host itself, the host's time is the
        device's: its measurement gives the outputs at no extra start)."""
        return self.gate is not None and device.machine != self.converter_machine and self.gate(ticket, device)

    def _gates(self, now: float) -> list[Action]:
        """READY trials the gate wants run on the host first, while the host measures nothing."""
        if self.gate is None or self.converter_machine in self._measuring():
            return []
        actions = []
        for d in self.devices.values():
            if d.lost:
                continue
            for ticket in list(d.live(Phase.READY)):
                if self._gated(ticket, d):
                    ticket.move(Phase.GATING, now)
                    self._evaluating.add(ticket)
                    actions.append(Action("gate", ticket))
        return actions

    def plan_conversions(self, now: float) -> list[Action]:
        """The conversions :meth:`plan` would start now, and nothing else. The coordinator starts
        them between two asks: what is asked converts while the next ask works (a runtime's
        first float-layer trial waits for its sensitivity ranking, minutes on a large model)."""
        return self._conversions(self._converting(), self._measuring(), now)

    def quiet(self) -> bool:
        """Whether the coordinator's own machine is measuring: then the coordinator's work
        there (asking the samplers, tracking writes) waits; it is milliseconds, and it
        would run beside the timed runs. Conversions never run there meanwhile anyway."""
        return self.converter_machine in self._measuring()

    def converting(self, digest: str) -> list[Ticket]:
        """Tickets waiting for the conversion with this :func:`conversion_digest` (any device)."""
        return [
            t for d in self.devices.values() for t in d.live(Phase.CONVERTING) if conversion_digest(t.config) == digest
        ]

    def evaluated(self, ticket: Ticket) -> None:
        """The ticket's host evaluation, if one ran, is over (it settled, failed or was requeued)."""
        self._evaluating.discard(ticket)

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
        closed = measuring | self.converters_starting
        free = {m: n - used.count(m) for m, n in self.converters.items() if m not in closed}
        order = sorted(free, key=lambda m: (m in device_machines, m))
        actions: list[Action] = []
        for d in self.devices.values():
            for ticket in list(d.live(Phase.PROPOSED)):
                digest = conversion_digest(ticket.config)
                if digest in converting:  # joins the conversion already under way
                    ticket.converted_on = converting[digest]
                    ticket.move(Phase.CONVERTING, now)
                    continue
                if ticket.not_before > now:  # a retry's pause is not over
                    continue
                machine = next((m for m in order if free[m] > 0), None)
                if machine is None:
                    return actions
                free[machine] -= 1
                converting[digest] = ticket.converted_on = machine
                ticket.move(Phase.CONVERTING, now)
                actions.append(Action("convert", ticket, machine=machine))
        return actions
