"""Run conversions and measurements on a Ray cluster (a local one by default).

Each device gets one :class:`~nnsweep.agents.DeviceAgent` actor with
``max_concurrency=1``, placed by the custom resource ``device:<name>``: a board
joins the cluster offering ``device:<its name>``, and its agent lands there.
Conversions run on actors that need the ``nnsweep-converter`` resource: the head
offers it (``nnsweep agent head --converters N``) and so may any node that joins
with ``--converters N`` (a build server; boards carry runtimes, not the conversion
toolchain). Each actor reports its machine; the scheduler spreads conversions over
machines by their slots. An actor on another machine than the coordinator converts
into its own machine's cache and sends the entry back, which the coordinator puts
into its cache: a configuration is converted once, and found there on a re-run.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from nnsweep.agents import (
    Capabilities,
    DeviceAgent,
    LocalTransport,
    MeasureReply,
    MeasureRequest,
    Transport,
    converter_versions,
    refuse_version_skew,
)
from nnsweep.artifacts.cache import Artifact, ArtifactCache
from nnsweep.bench.profile import Profile
from nnsweep.core.errors import AgentLost, ConversionStorageError, InfrastructureError, SpecError
from nnsweep.execution._base import ConvertRequest, Executor, ModelSource
from nnsweep.execution._converter import ConverterWorker, node_machine
from nnsweep.execution._ray_connection import connect, refuse_foreign

__all__ = ["CONVERSION_MEMORY", "CONVERTER_RESOURCE", "RayExecutor", "device_resource", "local_conversion_slots"]

log = logging.getLogger(__name__)

CONVERTER_RESOURCE = "nnsweep-converter"


def device_resource(device: str) -> str:
    return f"device:{device}"


def _relay(source: Future[Any]) -> Future[Any]:
    """A future that re-raises Ray's wrapped errors as nnsweep's: a dead actor is
    :class:`AgentLost`; an error raised inside a task comes back as itself."""
    import ray.exceptions

    out: Future[Any] = Future()

    def done(f: Future[Any]) -> None:
        exc = f.exception()
        if exc is None:
            out.set_result(f.result())
        elif isinstance(exc, ray.exceptions.RayActorError):
            out.set_exception(AgentLost(f"agent lost: {type(exc).__name__}: {str(exc).splitlines()[0]}"))
        elif isinstance(exc, ray.exceptions.RayTaskError) and isinstance(exc.cause, Exception):
            out.set_exception(exc.cause)
        else:
            out.set_exception(exc)

    source.add_done_callback(done)
    return out


def _all_done(futures: list[Future[Any]]) -> Future[None]:
    """A future done once each of ``futures`` is, whatever each gave (a worker that failed to
    get ready says so at its first conversion)."""
    together: Future[None] = Future()
    left = len(futures)
    lock = threading.Lock()

    def one_done(_: Future[Any]) -> None:
        nonlocal left
        with lock:
            left -= 1
            last = left == 0
        if last:
            together.set_result(None)

    if not futures:
        together.set_result(None)
    for future in futures:
        future.add_done_callback(one_done)
    return together


def _unpacked(source: Future[Any], cache: ArtifactCache) -> Future[Any]:
    """A future of the artifact in this machine's ``cache``, from one of a packed entry."""
    out: Future[Any] = Future()

    def done(f: Future[Any]) -> None:
        try:
            packed, hit = f.result()
            out.set_result((cache.unpack(packed), hit))
        except OSError as exc:
            out.set_exception(
                ConversionStorageError(f"cannot store a shipped artifact in {cache.root}: {exc}", path=cache.root)
            )
        except Exception as exc:  # the conversion's own error, passed on as it is
            out.set_exception(exc)

    source.add_done_callback(done)
    return out


CONVERSION_MEMORY = 3 * 2**30  # a conversion process's budget; see local_conversion_slots


def local_conversion_slots(cpus: int | None = None, available: int | None = None) -> int:
    """Conversions a local cluster runs at once: one per core, as many as memory allows.

    Conversions never run beside a measurement on their machine (the scheduler's rule),
    so between measurements every core may convert: torch.export, quantization and
    lowering are mostly one Python thread each. Each conversion process gets
    :data:`CONVERSION_MEMORY`, three times what a cold ExecuTorch static-int8
    conversion of mobilenet_v3_small peaked at here (1.05 GB maximum resident set of
    the whole ``nnsweep bench`` process, ``/usr/bin/time -v``).

    Args:
        cpus: this machine's cores (default: ``os.cpu_count()``).
        available: bytes of memory available now (default: psutil's reading).
    """
    import os

    cpus = cpus or os.cpu_count() or 1
    if available is None:
        import psutil

        available = int(psutil.virtual_memory().available)
    return max(1, min(cpus, available // CONVERSION_MEMORY))


def _agent_placement(device: str, *, bridge: bool) -> dict[str, Any]:
    """Where a device's agent runs, as actor options. A Ray-node device hosts its own agent.
    A bridge device is driven from the coordinator's machine: the phone is attached there
    (adb), its ssh keys are there. A bridge agent once asked for a sliver of the conversion
    resource instead, which the conversion actors hold whole: it never started."""
    if not bridge:
        return {"resources": {device_resource(device): 1}}
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = ray.get_runtime_context().get_node_id()
    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=here, soft=False)}


def device_nodes(nodes: Sequence[Mapping[str, Any]]) -> dict[str, list[tuple[str, str | None]]]:
    """Per device, the live nodes of ``ray.nodes()`` that offer it: (address, machine label)."""
    offering: dict[str, list[tuple[str, str | None]]] = {}
    for node in nodes:
        if not node.get("Alive"):
            continue
        where = (str(node.get("NodeManagerAddress", "?")), (node.get("Labels") or {}).get("nnsweep-machine"))
        for resource in node.get("Resources", {}):
            if resource.startswith("device:"):
                offering.setdefault(resource.removeprefix("device:"), []).append(where)
    return offering


def _check_one_node_each(devices: Sequence[str], offering: Mapping[str, list[tuple[str, str | None]]]) -> None:
    """Refuse a device two nodes offer: its agent would land on either (after a loss, on the
    other), so one device's trials would mix two boards' figures, and ``nnsweep devices``
    showed one of them.

    Raises:
        SpecError: naming the device and the nodes.
    """
    for device in devices:
        nodes = offering.get(device, [])
        if len(nodes) > 1:
            where = "; ".join(f"{address}, machine {machine or '?'}" for address, machine in nodes)
            raise SpecError(
                "devices",
                f"{device!r} is offered by {len(nodes)} nodes of the cluster ({where}): a device is one board; "
                "stop all but one, or rejoin the others under their own names (nnsweep agent join --device NAME)",
            )


def _pings(agent: Any) -> bool:
    """Whether a new agent answers (within 60 s)."""
    return _probe_outcome(agent.ping.remote()) == "back"


def _bridge_back(device: str, probes: dict[str, Any], agent: Any, respawn: Callable[[], Any]) -> bool:
    """Whether a lost bridge device is back: the probe an earlier call began (``probes``)
    answered. If not, that probe goes on, or ``agent`` probes again (a new one from
    ``respawn`` if it died); the loop goes on meanwhile (an unreachable ssh board takes its
    connect timeout). A new agent alone once counted as back: an unplugged phone was "back"
    every 2.5 s, lost again at its first command, and the sweep never ended."""
    probe = probes.pop(device, None)
    if _unanswered(probe):
        probes[device] = probe
        return False
    answer = "away" if probe is None else _probe_outcome(probe)
    if answer == "back":
        return True
    probes[device] = (respawn() if answer == "dead" or agent is None else agent).probe_again.remote()
    return False


def _probe_outcome(probe: Any) -> str:
    """An answered probe's outcome: ``back``; ``away``, the agent found no device (it runs on);
    ``dead``, the agent itself died (killed after a hung measurement, or its process lost)."""
    import ray

    try:
        ray.get(probe, timeout=60)
    except ray.exceptions.RayTaskError:
        return "away"
    except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
        return "dead"
    return "back"


def _unanswered(probe: Any) -> bool:
    """Whether a probe was begun (a Ray object ref) and has no answer yet."""
    import ray

    return probe is not None and not ray.wait([probe], timeout=0)[0]


def _probe_answer(device: str, probe: Any, timeout_s: float = 600.0) -> Capabilities:
    """What ``device``'s agent answered its probe (a Ray object ref), or why it did not.

    Raises:
        AgentLost: the agent died, or did not answer within ``timeout_s``.
    """
    import ray

    try:
        caps: Capabilities = ray.get(probe, timeout=timeout_s)
    except ray.exceptions.RayActorError as exc:
        raise AgentLost(f"agent of {device} died while probing: {exc}") from exc
    except ray.exceptions.GetTimeoutError:
        raise AgentLost(f"agent of {device} did not answer its probe in {timeout_s:.0f} s") from None
    except ray.exceptions.RayTaskError as exc:
        raise (exc.cause if isinstance(exc.cause, Exception) else exc) from None
    return caps


class RayExecutor(Executor):
    """Executor on Ray.

    Args:
        address: an existing cluster (``HOST:PORT``); ``None`` starts a local one
            whose only device is ``host``.
        converters: conversion actors to start (local cluster: :func:`local_conversion_slots`).
        transports: device -> transport for bridge devices driven from a host.
        machines: device -> machine name, for devices that share a physical machine
            but should be treated as separate ones (benchmarks of the coordinator
            itself; their latencies are then not isolated).
    """

    def __init__(
        self,
        address: str | None = None,
        converters: int | None = None,
        transports: Mapping[str, Transport] | None = None,
        machines: dict[str, str] | None = None,
    ) -> None:
        self.address = address
        self._machines = dict(machines or {})
        self._wanted_converters = converters
        self._transports = dict(transports or {})
        self._agents: dict[str, Any] = {}
        self._probes: dict[str, Any] = {}  # device -> the answer to the probe start() began
        self._converters: dict[str, list[Any]] = {}  # machine -> its conversion actors
        self._outstanding: dict[int, int] = {}  # id of a conversion actor -> its conversions not yet answered
        self._outstanding_lock = threading.Lock()  # answers arrive on Ray's threads
        self._last_converted: dict[int, Hashable] = {}  # id of a conversion actor -> what it converted last
        self._started_ray = False
        self._machine = ""  # the coordinator's

    def _connect(self) -> None:
        import ray

        if ray.is_initialized():
            refuse_foreign(ray)  # a notebook's own ray.init(): not the cluster nnsweep would sweep on
            return
        self._started_ray = True  # from here on, shutdown() stops whatever ray.init got to start
        slots = self._wanted_converters or local_conversion_slots()
        connect(ray, self.address, {device_resource("host"): 1, CONVERTER_RESOURCE: slots})

    def cluster_devices(self) -> list[str]:
        """The devices the cluster's live nodes offer (``device:<name>`` resources)."""
        import ray

        self._connect()
        return sorted(device_nodes(ray.nodes()))

    def probe(self, devices: Sequence[str]) -> dict[str, Capabilities]:
        """Start agents for ``devices`` (no conversion workers) and ask each what it has."""
        self._connect()
        self._label_machines(devices)
        for device in devices:
            self._spawn(device)
        return {device: self.capabilities(device) for device in devices}

    def start(self, devices: Sequence[str]) -> None:
        import ray

        self._connect()
        available = ray.cluster_resources()
        for device in devices:
            if device_resource(device) not in available and device not in self._transports:
                raise InfrastructureError(
                    f"no node of the cluster offers device {device!r}; start its agent with "
                    f"`nnsweep agent join --address HEAD:PORT --device {device}`"
                )
        self._label_machines(devices)
        slots = int(available.get(CONVERTER_RESOURCE, 0))
        if slots < 1:
            raise InfrastructureError(
                f"no node offers the {CONVERTER_RESOURCE} resource: conversions have nowhere to run"
            )
        slots = min(slots, self._wanted_converters or slots)
        worker = ray.remote(ConverterWorker).options(num_cpus=1, resources={CONVERTER_RESOURCE: 1})
        actors: list[Any] = [worker.remote() for _ in range(slots)]
        for actor, machine in zip(actors, ray.get([a.machine.remote() for a in actors]), strict=True):
            self._converters.setdefault(machine, []).append(actor)
        self._machine = node_machine()  # this process's node: where host evaluations run
        log.info("conversion slots per machine: %s", {m: len(a) for m, a in self._converters.items()})
        for device in devices:
            self._spawn(device)
            self._probes[device] = self._agents[device].capabilities.remote()

    def _spawn(self, device: str) -> None:
        import ray

        transport = self._transports.get(device) or LocalTransport(self._machines.get(device))
        placement = _agent_placement(device, bridge=device in self._transports)
        self._agents[device] = (
            ray.remote(DeviceAgent)
            .options(num_cpus=0, max_concurrency=1, max_restarts=0, **placement)
            .remote(device, transport)
        )

    def _label_machines(self, devices: Sequence[str] = ()) -> None:
        """Machine names from node labels (``nnsweep-machine``, set by ``nnsweep agent join``),
        after checking that no device of ``devices`` is offered by two nodes."""
        import ray

        offering = device_nodes(ray.nodes())
        _check_one_node_each(devices, offering)
        for device, nodes in offering.items():
            machine = nodes[0][1]
            if machine:
                self._machines.setdefault(device, machine)

    def _offered(self, device: str) -> bool:
        import ray

        return device in device_nodes(ray.nodes())

    def revive(self, device: str) -> bool:
        if device in self._transports:  # a phone or ssh board: no node rejoins, its probe tells
            respawn = functools.partial(self._respawn, device)
            return _bridge_back(device, self._probes, self._agents.get(device), respawn)
        return self._offered(device) and _pings(self._respawn(device))  # its node rejoined, its agent runs

    def _respawn(self, device: str) -> Any:
        """A new agent for ``device`` in place of the lost one."""
        import ray

        old = self._agents.pop(device, None)
        if old is not None:
            ray.kill(old, no_restart=True)
        self._label_machines()
        self._spawn(device)
        return self._agents[device]

    def abandon(self, device: str) -> None:
        import ray

        agent = self._agents.get(device)
        if agent is not None:
            ray.kill(agent, no_restart=True)

    def capabilities(self, device: str) -> Capabilities:
        probe = self._probes.pop(device, None) or self._agents[device].capabilities.remote()
        return refuse_version_skew(_probe_answer(device, probe), converter_versions())

    def convert(self, request: ConvertRequest, machine: str | None = None) -> Future[tuple[Artifact, bool]]:
        if machine is None or machine not in self._converters:
            machine = next(iter(self._converters))
        # Same model, runtime and quantization: the same exported program and edge program.
        affinity = (request.model, request.config.runtime, request.config.quant)
        worker = self._least_busy(self._converters[machine], affinity)
        ship = machine != self._machine
        sent = worker.convert.remote(dataclasses.replace(request, ship=ship)).future()
        sent.add_done_callback(lambda _: self._answered(worker))
        reply = _relay(sent)
        return _unpacked(reply, ArtifactCache(request.model.cache_root)) if ship else reply

    def import_converters(self, runtimes: Sequence[str]) -> None:
        for actors in self._converters.values():
            for actor in actors:  # its next call (the model's load) waits behind it on the actor
                actor.import_converters.remote(list(runtimes))

    def warm_converters(self, source: ModelSource, runtimes: Sequence[str]) -> Mapping[str, Future[None]]:
        ready = {}
        for machine, actors in self._converters.items():  # a conversion sent to an actor would queue behind its warm
            ship = machine != self._machine
            ready[machine] = _all_done([actor.warm.remote(source, list(runtimes), ship).future() for actor in actors])
        return ready

    def _least_busy(self, actors: list[Any], affinity: Hashable) -> Any:
        """The actor with the fewest conversions under way: an actor works through its calls
        one by one, so a call sent in turn to a busy one would wait while another is idle.

        Of the actors tied, the one whose last conversion had the same ``affinity``: its
        process keeps that conversion's edge program, which a partition-limit variant
        starts from (:mod:`nnsweep.runtimes.executorch.lowering`)."""
        with self._outstanding_lock:
            fewest = min(self._outstanding.get(id(a), 0) for a in actors)
            tied = [a for a in actors if self._outstanding.get(id(a), 0) == fewest]
            worker = next((a for a in tied if self._last_converted.get(id(a)) == affinity), tied[0])
            self._outstanding[id(worker)] = fewest + 1
            self._last_converted[id(worker)] = affinity
        return worker

    def _answered(self, worker: Any) -> None:
        with self._outstanding_lock:
            self._outstanding[id(worker)] -= 1

    def prepare(self, device: str, runtimes: Sequence[str]) -> Future[None]:
        return _relay(self._agents[device].prepare.remote(list(runtimes)).future())

    def measure(self, device: str, request: MeasureRequest) -> Future[MeasureReply]:
        return _relay(self._agents[device].measure.remote(request).future())

    def profile(self, device: str, request: MeasureRequest) -> Future[Profile]:
        return _relay(self._agents[device].profile.remote(request).future())

    @property
    def converter_machine(self) -> str:
        return self._machine

    @property
    def converters(self) -> dict[str, int]:
        return {machine: len(actors) for machine, actors in self._converters.items()}

    def shutdown(self) -> None:
        if not (self._started_ray or self._agents or self._converters):
            # Nothing of ours to stop: and `import ray` may be what an interrupt cut short
            # (a second import of a half-initialised ray fails on a circular import).
            return
        import ray

        for actor in [*self._agents.values(), *(a for actors in self._converters.values() for a in actors)]:
            ray.kill(actor, no_restart=True)
        self._agents.clear()
        self._converters.clear()
        if self._started_ray:
            ray.shutdown()
