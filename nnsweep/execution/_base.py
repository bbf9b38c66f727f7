"""The executor seam: how the coordinator gets conversions and measurements done."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nnsweep.agents import Capabilities, MeasureReply, MeasureRequest
from nnsweep.artifacts.cache import Artifact
from nnsweep.bench.profile import Profile
from nnsweep.core.config import DeploymentConfig

if TYPE_CHECKING:
    from nnsweep.core.task_data import TaskData

__all__ = ["ConvertRequest", "Executor", "ModelSource"]


@dataclass(frozen=True)
class ModelSource:
    """How a worker loads the sweep's model (the bundle itself does not travel)."""

    ref: str
    cache_root: Path
    weights: Path | None = None
    input_shape: tuple[int, ...] | None = None
    data: TaskData | None = None  # the user's evaluation and calibration data
    decoder: bool = False  # a decoder language model (nnsweep.models.decoder), not a ModelBundle


@dataclass(frozen=True)
class ConvertRequest:
    """One configuration to convert.

    Args:
        ship: the worker is on another machine than the coordinator: it converts into
            its own machine's cache and sends the entry back as bytes.
    """

    model: ModelSource
    config: DeploymentConfig
    ship: bool = False


class Executor(ABC):
    """Runs conversions on host workers and measurements on device agents.

    Call order: :meth:`start` once, :meth:`capabilities` per device, then any
    number of :meth:`convert` and :meth:`measure` calls (the coordinator decides
    what may overlap), then :meth:`shutdown`. Futures resolve to the result or
    raise: a :class:`~nnsweep.core.errors.TrialError` fails the trial, an
    :class:`~nnsweep.core.errors.InfrastructureError` means retry elsewhere.
    """

    @abstractmethod
    def start(self, devices: Sequence[str]) -> None:
        """Connect, start one agent per device and set each probing its device, without
        waiting for the answers (:meth:`capabilities` waits): the coordinator loads the
        model meanwhile.

        Raises:
            InfrastructureError: a device has no place to run (no node offers it).
        """

    @abstractmethod
    def capabilities(self, device: str) -> Capabilities:
        """What the device reports (the probe :meth:`start` began, once it answers)."""

    @abstractmethod
    def convert(self, request: ConvertRequest, machine: str | None = None) -> Future[tuple[Artifact, bool]]:
        """Convert on a worker of ``machine`` (one of :attr:`converters`; ``None``: any):
        the artifact, in the coordinator's cache, and whether it was cached."""

    @abstractmethod
    def measure(self, device: str, request: MeasureRequest) -> Future[MeasureReply]:
        """Measure on the device's agent."""

    def profile(self, device: str, request: MeasureRequest) -> Future[Profile]:
        """Profile one artifact per operator on the device's agent, after its timed runs.
        Executors without agents keep the default: a profile that says why there is none."""
        done: Future[Profile] = Future()
        done.set_result(Profile(reason=f"{type(self).__name__} has no agent to profile on {device}"))
        return done

    @property
    @abstractmethod
    def converter_machine(self) -> str:
        """The coordinator's machine: host evaluations run there (no measurement there overlaps them)."""

    @property
    def converters(self) -> dict[str, int]:
        """Machine -> how many conversions may run there at once (no measurement on a
        machine overlaps a conversion there)."""
        return {self.converter_machine: 1}

    def import_converters(self, runtimes: Sequence[str]) -> None:  # noqa: B027 (optional)
        """Let the conversion workers import these runtimes' converters now, without waiting
        for them, while the coordinator loads the model (the model itself waits for
        :meth:`warm_converters`: a built-in model's first load writes its weights to the cache)."""

    def warm_converters(self, source: ModelSource, runtimes: Sequence[str]) -> Mapping[str, Future[None]]:
        """Let the conversion workers load the model and import these runtimes' converters
        now, without waiting for them.

        Returns:
            Machine -> a future done when all of its conversion workers are ready (failed
            or not: a worker that could not load the model reports it at its first
            conversion). The coordinator starts no conversion on a machine until then, so a
            trial's converting is the workers' conversion and not their start-up (its
            trial waits to convert meanwhile). Empty: nothing to wait for.
        """
        return {}

    def prepare(self, device: str, runtimes: Sequence[str]) -> Future[None] | None:
        """Let the device's agent get ready for these runtimes (start their warm workers).

        Returns:
            A future done when the agent is ready (the coordinator measures nothing on
            the device's machine until then), or ``None``: nothing to wait for.
        """
        return None

    def revive(self, device: str) -> bool:
        """Start a new agent for a device whose agent was lost, if the device is back.

        Returns whether an agent runs again. Executors that cannot lose agents keep the default.
        """
        return False

    def abandon(self, device: str) -> None:  # noqa: B027 (an optional hook)
        """Stop the device's agent (a hung measurement); its pending futures fail with AgentLost."""

    def shutdown(self) -> None:  # noqa: B027 (an optional hook)
        """Release workers and agents."""
