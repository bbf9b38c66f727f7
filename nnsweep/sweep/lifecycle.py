"""The trial lifecycle: one state enum and the only function that moves a trial.

A :class:`Ticket` goes PROPOSED -> CONVERTING -> READY -> MEASURING -> EVALUATING ->
HELD -> TOLD; the moves :func:`Ticket.move` accepts are in ``_MOVES``. Besides that path:
reuse (a configuration or byte-identical artifact measured before) jumps to TOLD/HELD;
TWIN waits on an identical configuration in flight; a contended measurement goes back to
READY once; an artifact that left the cache goes back to PROPOSED; any live phase may end
FAILED or REQUEUED (interrupted or device lost: never a measurement). EVALUATING: a device
that only times (a phone) gave latencies and the host runs the artifact for outputs.
HELD: the result waits for the device's fp32 baseline. TOLD, FAILED and REQUEUED are
terminal. Every move is stamped with the caller's clock, so a ticket's history is its
time breakdown.
GATING: a READY trial runs on the coordinator's host for its outputs first; one that
breaks a quality bound there is TOLD (infeasible, never timed on the device), the others
go back to READY (:mod:`nnsweep.sweep.gate`).
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nnsweep.core.errors import NnsweepError

if TYPE_CHECKING:
    from nnsweep.core.config import DeploymentConfig
    from nnsweep.core.results import TrialRecord

__all__ = ["IllegalTransition", "Phase", "Role", "Ticket"]


class Phase(enum.StrEnum):
    PROPOSED = "proposed"
    CONVERTING = "converting"
    READY = "ready"
    GATING = "gating"
    MEASURING = "measuring"
    EVALUATING = "evaluating"
    TWIN = "twin"
    HELD = "held"
    TOLD = "told"
    FAILED = "failed"
    REQUEUED = "requeued"

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL


class Role(enum.StrEnum):
    """Why a trial exists: the device's fp32 ``baseline`` (the accuracy constraint and the
    speed-ups refer to it), a runtime's ``default`` deployment measured first, a ``start``
    the coordinator queued before the sampler (a runtime's default in each quantization
    mode, or another device's Pareto configuration), a move the coordinator made from the
    results so far (``repair``: an int8 configuration that broke the accuracy constraint
    with one more layer float; ``refine``: a neighbour of the best, or a front point with
    one more layer float; see :mod:`nnsweep.sweep.moves`), or a configuration the sampler
    proposed (``search``). Every trial's record carries it as its ``role`` tag."""

    BASELINE = "baseline"
    DEFAULT = "default"
    START = "start"
    REPAIR = "repair"
    REFINE = "refine"
    SEARCH = "search"


_TERMINAL = frozenset({Phase.TOLD, Phase.FAILED, Phase.REQUEUED})
_ENDINGS = frozenset({Phase.FAILED, Phase.REQUEUED})
_MOVES: dict[Phase, frozenset[Phase]] = {
    Phase.PROPOSED: frozenset({Phase.CONVERTING, Phase.READY, Phase.TWIN, Phase.HELD, Phase.TOLD}) | _ENDINGS,
    Phase.CONVERTING: frozenset({Phase.READY, Phase.PROPOSED}) | _ENDINGS,
    Phase.READY: frozenset({Phase.MEASURING, Phase.GATING, Phase.HELD, Phase.TOLD, Phase.PROPOSED}) | _ENDINGS,
    Phase.GATING: frozenset({Phase.READY, Phase.HELD, Phase.TOLD}) | _ENDINGS,
    Phase.MEASURING: frozenset({Phase.READY, Phase.EVALUATING, Phase.HELD, Phase.TOLD, Phase.PROPOSED}) | _ENDINGS,
    Phase.EVALUATING: frozenset({Phase.HELD, Phase.TOLD}) | _ENDINGS,
    Phase.TWIN: frozenset({Phase.HELD, Phase.TOLD, Phase.PROPOSED}) | _ENDINGS,
    Phase.HELD: frozenset({Phase.TOLD, Phase.FAILED}),
    Phase.TOLD: frozenset(),
    Phase.FAILED: frozenset(),
    Phase.REQUEUED: frozenset(),
}


class IllegalTransition(NnsweepError, RuntimeError):
    """A bug in the coordinator: a trial was moved in a way its lifecycle forbids."""


@dataclass(eq=False)
class Ticket:
    """One trial of one device while the coordinator holds it.

    Args:
        device: the device's name.
        number: the trial's number in the device's study.
        config: the deployment it tries.
        key: what makes two trials the same measurement on this device (model and configuration digests).
        role: why it exists.
    """

    device: str
    number: int
    config: DeploymentConfig
    key: str
    role: Role = Role.SEARCH
    phase: Phase = Phase.PROPOSED
    artifact_sha: str | None = None  # set when it reaches READY
    converted_on: str | None = None  # the machine converting it, set when it enters CONVERTING
    twin_of: Ticket | None = None  # set while it is a TWIN
    outcome: TrialRecord | None = None  # set when it is HELD or TOLD
    gate: Mapping[str, float] | None = None  # its quality on the host, set when it passed the gate
    hung: bool = False
    not_before: float = 0.0  # a conversion retried after an infrastructure failure waits until then
    history: list[tuple[Phase, float]] = field(default_factory=list)

    def move(self, to: Phase, now: float) -> None:
        """Move to ``to`` at time ``now``.

        Raises:
            IllegalTransition: the lifecycle has no such move from the current phase.
        """
        if to not in _MOVES[self.phase]:
            raise IllegalTransition(f"{self.device} trial {self.number}: {self.phase} -> {to} is not a legal move")
        if not self.history:
            self.history.append((self.phase, now))
        self.phase = to
        self.history.append((to, now))

    def start(self, now: float) -> None:
        """Stamp the moment the trial was proposed (its history starts here)."""
        if not self.history:
            self.history.append((self.phase, now))

    def durations(self, now: float | None = None) -> dict[str, float]:
        """Seconds spent in each phase (phases entered twice are summed); with ``now``, the
        phase the ticket is still in counts up to ``now`` (a trial is judged before its last move)."""
        out: dict[str, float] = {}
        marks = list(self.history)
        if now is not None and marks and not self.phase.terminal:
            marks.append((self.phase, now))
        for (phase, since), (_, until) in itertools.pairwise(marks):
            out[phase.value] = out.get(phase.value, 0.0) + (until - since)
        return out

    @property
    def measuring_since(self) -> float | None:
        """When the current measurement started (``None`` unless MEASURING)."""
        if self.phase is not Phase.MEASURING:
            return None
        return self.history[-1][1]
