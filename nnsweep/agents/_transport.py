"""How an agent reaches its device: the one seam that makes devices swappable.

A transport probes the device once and measures artifacts on it. ``local`` runs
each measurement in a process of its own on this machine, forked from a warm
worker that has the runtime imported; the bridge transports
(adb, ssh) push the artifact and run the runtime's own benchmark tool there.
"""

from __future__ import annotations

import contextlib
import json
import logging
import subprocess
import sys
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from nnsweep.agents._capabilities import Capabilities
from nnsweep.bench import (
    MachineLock,
    MeasureSettings,
    Timing,
    WarmWorker,
    WorkerUnavailable,
    measure_in_subprocess,
    profile_in_subprocess,
)
from nnsweep.bench.profile import Profile
from nnsweep.core.artifact import DecoderShape, IOSpec
from nnsweep.core.errors import BenchmarkError, InfrastructureError

if TYPE_CHECKING:
    from nnsweep.artifacts.cache import Artifact

log = logging.getLogger(__name__)

__all__ = ["LocalTransport", "MeasureReply", "MeasureRequest", "Transport"]


@dataclass(frozen=True)
class MeasureRequest:
    """One artifact to measure on a device (sent over Ray, so it carries the bytes)."""

    runtime: str
    artifact_name: str
    artifact_bytes: bytes
    io: IOSpec
    threads: int
    backends: tuple[str, ...]
    inputs: np.ndarray
    settings: MeasureSettings
    sidecars: Mapping[str, bytes] = field(default_factory=dict)
    estimates: Mapping[str, float] = field(default_factory=dict)
    fresh: bool = False  # in a fresh process, never one forked from a warm worker (re-measures)
    decoder: DecoderShape | None = None  # a decoder language model's graphs: inputs are its held-out text

    @classmethod
    def of(cls, artifact: Artifact, inputs: np.ndarray, settings: MeasureSettings) -> MeasureRequest:
        """The request to measure ``artifact`` on ``inputs`` (its bytes and sidecars read now)."""
        return cls(
            runtime=artifact.config.runtime,
            artifact_name=artifact.path.name,
            artifact_bytes=artifact.path.read_bytes(),
            io=artifact.io,
            threads=artifact.config.threads,
            backends=artifact.config.backends,
            inputs=inputs,
            settings=settings,
            sidecars={name: path.read_bytes() for name, (path, _) in artifact.sidecars.items()},
            estimates=dict(artifact.estimates),
        )


@dataclass(frozen=True)
class MeasureReply:
    """What the device saw.

    Args:
        timing: the latency figures.
        outputs: the outputs on every input, for evaluation; ``None`` when the device's
            tool only times (the coordinator then evaluates the artifact on the host).
        estimated: the latency is a compiler's estimate, not a measurement.
        source: how the latency was obtained (``local``, ``adb: mean of 40 runs x 5``, ...).
        estimates: a compiler's estimates for the target (cycles, memory), logged as such.
        emulated: the latency was measured under emulation (an aarch64 userland on a
            non-Arm CPU): a real run of the device's kernels, but no figure for a real board.
    """

    timing: Timing
    outputs: np.ndarray | None
    estimated: bool = False
    source: str = "local"
    estimates: Mapping[str, float] = field(default_factory=dict)
    emulated: bool = False


class Transport(ABC):
    """Reaches one device.

    Call order: :meth:`probe` once when the agent starts, then :meth:`measure`
    once per trial, never two at a time (the agent serialises them).
    """

    name: str = "abstract"

    @abstractmethod
    def probe(self, device: str) -> Capabilities:
        """What the device has."""

    def prepare(self, runtimes: Sequence[str]) -> None:  # noqa: B027 (an optional hook)
        """Get ready to measure these runtimes (before the first artifact arrives)."""

    @abstractmethod
    def measure(self, request: MeasureRequest) -> MeasureReply:
        """Measure one artifact; raise :class:`~nnsweep.core.errors.BenchmarkError` if it fails."""

    def profile(self, request: MeasureRequest) -> Profile:
        """Profile one artifact per operator on the device, after its timed runs
        (:mod:`nnsweep.bench.profile`); a transport that cannot says why."""
        return Profile(reason=f"the {self.name} transport takes no per-operator profile on its device")


class LocalTransport(Transport):
    """The device is this machine: measure each artifact in a process of its own.

    That process is forked from a warm worker per runtime (started on the first
    measurement with that runtime, kept for the next ones), so the interpreter
    start and the runtime import are paid once per agent, not per measurement;
    if the worker cannot start it is a fresh process. Every measurement holds the
    machine-wide measurement lock while it runs, whoever else measures here (another
    sweep, ``nnsweep bench``); ``Timing.lock_wait_ms`` says how long it waited.

    Args:
        machine: name of the physical machine (defaults to the host name); two
            devices with the same machine never measure at the same time.
        warm: fork measurements from warm workers (``False``: a fresh process each).
        lock: the machine's measurement lock (default: its default path).
    """

    name = "local"

    def __init__(self, machine: str | None = None, *, warm: bool = True, lock: MachineLock | None = None) -> None:
        self.machine = machine
        self.warm = warm
        self.lock = lock
        self._workers: dict[str, WarmWorker] = {}

    def __getstate__(self) -> dict[str, object]:
        # Sent to a Ray actor before any measurement: workers are processes of this side.
        state = dict(self.__dict__)
        state["_workers"] = {}
        return state

    def worker(self, runtime: str) -> WarmWorker | None:
        """The warm worker for ``runtime`` (created, not yet started), or ``None`` if not warm."""
        if not self.warm:
            return None
        if runtime not in self._workers:
            self._workers[runtime] = WarmWorker(runtime)
        return self._workers[runtime]

    def prepare(self, runtimes: Sequence[str]) -> None:
        """Start the warm workers of ``runtimes`` now, while the first artifacts convert, so the
        runtime imports (seconds for ExecuTorch and torch) are not paid inside a measurement.
        A worker that cannot start is left to the fresh-process fallback, as at measure time."""
        if not self.warm:
            return  # every measurement is a fresh process: nothing to start
        for runtime in runtimes:
            worker = self.worker(runtime)
            assert worker is not None  # warm transports have one per runtime
            try:
                worker.start()
            except WorkerUnavailable as exc:
                log.info("warm %s worker unavailable (%s); its measurements use fresh processes", runtime, exc)

    def close(self) -> None:
        """Stop the warm workers (they also stop by themselves when this process ends).

        One at a time off the dict: a sweep that stops on an error early closes this while
        the thread starting its workers (:meth:`prepare`) may still add one, and iterating
        the dict then raised "dictionary changed size during iteration" over the error."""
        while self._workers:
            _, worker = self._workers.popitem()
            worker.close()

    def probe(self, device: str) -> Capabilities:
        cmd = [sys.executable, "-m", "nnsweep.agents._probe", device]
        if self.machine:
            cmd.append(self.machine)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
        if proc.returncode != 0:
            raise InfrastructureError(f"probing {device} failed: {proc.stderr.strip()[-500:]}")
        return Capabilities.from_dict(json.loads(proc.stdout.strip().splitlines()[-1]))

    def measure(self, request: MeasureRequest) -> MeasureReply:
        with _on_disk(request) as artifact:
            worker = None if request.fresh else self.worker(request.runtime)
            timing, outputs = measure_in_subprocess(
                **artifact, settings=request.settings, worker=worker, lock=self.lock, decoder=request.decoder
            )
        return MeasureReply(timing=timing, outputs=outputs)

    def profile(self, request: MeasureRequest) -> Profile:
        """The artifact's per-operator profile from its runtime's profiler, in a process of its own
        here (:func:`~nnsweep.bench.profile_in_subprocess`); a profiler that fails gives its reason."""
        with _on_disk(request) as artifact:
            try:
                return profile_in_subprocess(**artifact, timeout_s=request.settings.timeout_s, lock=self.lock)
            except BenchmarkError as exc:
                return Profile(reason=str(exc))


@contextlib.contextmanager
def _on_disk(request: MeasureRequest) -> Iterator[dict[str, Any]]:
    """The request's artifact written to a folder of its own, as the keyword arguments that
    load it in a measuring or profiling process; the folder goes when the block ends."""
    with tempfile.TemporaryDirectory(prefix="nnsweep-artifact-") as tmp:
        path = Path(tmp) / request.artifact_name
        path.write_bytes(request.artifact_bytes)
        if request.decoder is not None:  # its decode graph beside the prefill graph
            (Path(tmp) / request.decoder.decode_file).write_bytes(request.sidecars[request.decoder.decode_file])
        yield {
            "runtime": request.runtime,
            "artifact": path,
            "io": request.io,
            "threads": request.threads,
            "backends": request.backends,
            "inputs": request.inputs,
        }
