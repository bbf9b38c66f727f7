"""Run everything in this process (threads): for tests and machines without Ray."""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from nnsweep.agents import Capabilities, DeviceAgent, LocalTransport, MeasureReply, MeasureRequest, Transport
from nnsweep.artifacts.cache import Artifact
from nnsweep.bench.profile import Profile
from nnsweep.execution._base import ConvertRequest, Executor
from nnsweep.execution._converter import ConverterWorker

__all__ = ["LocalExecutor"]


class LocalExecutor(Executor):
    """Conversions in a worker thread of this process, each device's agent in its own thread.

    Args:
        transports: device -> transport (default: :class:`LocalTransport` on this machine).
    """

    def __init__(self, transports: Mapping[str, Transport] | None = None) -> None:
        self._transports = dict(transports or {})
        self._agents: dict[str, DeviceAgent] = {}
        self._pools: dict[str, ThreadPoolExecutor] = {}
        self._probes: dict[str, Future[Capabilities]] = {}  # device -> the probe start() began
        self._converter = ConverterWorker()
        self._convert_pool = ThreadPoolExecutor(1, thread_name_prefix="nnsweep-convert")

    def start(self, devices: Sequence[str]) -> None:
        for device in devices:
            self._agents[device] = DeviceAgent(device, self._transports.get(device, LocalTransport()))
            self._pools[device] = ThreadPoolExecutor(1, thread_name_prefix=f"nnsweep-{device}")
            self._probes[device] = self._pools[device].submit(self._agents[device].capabilities)

    def capabilities(self, device: str) -> Capabilities:
        probe = self._probes.pop(device, None)
        return probe.result() if probe is not None else self._agents[device].capabilities()

    def revive(self, device: str) -> bool:
        """A lost phone or ssh board is back once it answers a probe again, begun at an
        earlier call on its agent's thread (the sweep's loop goes on meanwhile). Without
        this it stayed lost for the rest of the run, plugged back in or not."""
        if device not in self._transports:
            return False  # this machine's own agent is never lost
        probe = self._probes.pop(device, None)
        if probe is not None and probe.done() and probe.exception() is None:
            return True
        if probe is None or probe.done():
            probe = self._pools[device].submit(self._agents[device].probe_again)
        self._probes[device] = probe
        return False

    def convert(self, request: ConvertRequest, machine: str | None = None) -> Future[tuple[Artifact, bool]]:
        return self._convert_pool.submit(self._converter.convert_here, request)

    def prepare(self, device: str, runtimes: Sequence[str]) -> Future[None]:
        return self._pools[device].submit(self._agents[device].prepare, list(runtimes))

    def measure(self, device: str, request: MeasureRequest) -> Future[MeasureReply]:
        return self._pools[device].submit(self._agents[device].measure, request)

    def profile(self, device: str, request: MeasureRequest) -> Future[Profile]:
        return self._pools[device].submit(self._agents[device].profile, request)

    @property
    def converter_machine(self) -> str:
        return socket.gethostname()

    def busy_seconds(self) -> dict[str, float]:
        return {name: agent.busy_s for name, agent in self._agents.items()}

    def shutdown(self) -> None:
        # Not waiting: after an interrupt, a conversion still running is abandoned (its
        # trial was requeued); at the end of a sweep nothing runs any more.
        self._convert_pool.shutdown(wait=False, cancel_futures=True)
        for pool in self._pools.values():
            pool.shutdown(wait=False, cancel_futures=True)
        for agent in self._agents.values():
            close = getattr(agent.transport, "close", None)
            if close is not None:
                close()  # its warm measuring workers
