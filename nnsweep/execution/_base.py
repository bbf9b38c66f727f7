"""The executor seam: how the coordinator gets conversions and measurements done."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from nnsweep.agents import Capabilities, MeasureReply, MeasureRequest
from nnsweep.artifacts import Artifact
from nnsweep.config import DeploymentConfig

__all__ = ["ConvertRequest", "Executor", "ModelSource"]


@dataclass(frozen=True)
class ModelSource:
    """How a worker loads the sweep's model (the bundle itself does not travel)."""

    ref: str
    cache_root: Path
    weights: Path | None = None
    input_shape: tuple[int, ...] | None = None


@dataclass(frozen=True)
class ConvertRequest:
    model: ModelSource
    config: DeploymentConfig


class Executor(ABC):
    """Runs conversions on host workers and measurements on device agents.

    Call order: :meth:`start` once, :meth:`capabilities` per device, then any
    number of :meth:`convert` and :meth:`measure` calls (the coordinator decides
    what may overlap), then :meth:`shutdown`. Futures resolve to the result or
    raise: a :class:`~nnsweep.errors.TrialError` fails the trial, an
    :class:`~nnsweep.errors.InfrastructureError` means retry elsewhere.
    """

    @abstractmethod
    def start(self, devices: Sequence[str]) -> None:
        """Connect and start one agent per device.

        Raises:
            InfrastructureError: a device has no place to run (no node offers it).
        """

    @abstractmethod
    def capabilities(self, device: str) -> Capabilities:
        """What the device reports."""

    @abstractmethod
    def convert(self, request: ConvertRequest) -> Future[tuple[Artifact, bool]]:
        """Convert (through the shared artifact cache) on a host worker: the artifact and whether it was cached."""

    @abstractmethod
    def measure(self, device: str, request: MeasureRequest) -> Future[MeasureReply]:
        """Measure on the device's agent."""

    @property
    @abstractmethod
    def converter_machine(self) -> str:
        """The machine conversions run on (no measurement there overlaps a conversion)."""

    @property
    def converter_slots(self) -> int:
        """How many conversions may run at once."""
        return 1

    def revive(self, device: str) -> bool:
        """Start a new agent for a device whose agent was lost, if the device is back.

        Returns whether an agent runs again. Executors that cannot lose agents keep the default.
        """
        return False

    def abandon(self, device: str) -> None:  # noqa: B027 (an optional hook)
        """Stop the device's agent (a hung measurement); its pending futures fail with AgentLost."""

    def shutdown(self) -> None:  # noqa: B027 (an optional hook)
        """Release workers and agents."""
