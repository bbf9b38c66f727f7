"""Measure an artifact in a process of its own (see ``_child``) and read back what it saw.

The process is either fresh (``python -m nnsweep.bench._child``) or forked from a
warm worker that has the runtime imported (:class:`~nnsweep.bench._warm.WarmWorker`);
either way it holds the machine's measurement lock
(:class:`~nnsweep.bench._machine_lock.MachineLock`) while it runs.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from nnsweep.bench._foreign import python_command
from nnsweep.bench._harness import MeasureSettings, Timing
from nnsweep.bench._machine_lock import MachineLock
from nnsweep.bench._warm import ForkHere, WarmWorker, WorkerUnavailable
from nnsweep.core import runtimes
from nnsweep.core.artifact import DecoderShape, IOSpec
from nnsweep.core.errors import BenchmarkError

__all__ = ["measure_in_subprocess"]

log = logging.getLogger(__name__)


def _tail(text: str, lines: int = 6) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _as_saved(inputs: np.ndarray) -> np.ndarray:
    """The inputs as the measuring process reads them: float32, or token ids as they are."""
    if np.issubdtype(inputs.dtype, np.integer):
        return np.ascontiguousarray(inputs)
    return np.ascontiguousarray(inputs, dtype=np.float32)


def measure_in_subprocess(
    *,
    runtime: str,
    artifact: Path,
    io: IOSpec,
    threads: int,
    backends: tuple[str, ...],
    inputs: np.ndarray,
    settings: MeasureSettings,
    worker: WarmWorker | ForkHere | None = None,
    lock: MachineLock | None = None,
    decoder: DecoderShape | None = None,
) -> tuple[Timing, np.ndarray]:
    """Time ``artifact`` on ``inputs[0]`` and return its outputs on all ``inputs`` (a ``decoder``:
    its steps on the text ``inputs``, and the logits at each of its positions).

    Args:
        worker: a warm worker for ``runtime`` to fork the measuring process from, or
            :class:`ForkHere` to fork it from this process; ``None`` (or a worker that
            cannot start) measures in a fresh process.
        lock: the machine's measurement lock (default: :class:`MachineLock` at its
            default path); held while the measuring process runs, and the wait for it
            is returned as ``Timing.lock_wait_ms``.

    Raises:
        BenchmarkError: the artifact did not load or run, the process crashed,
            or it took longer than ``settings.timeout_s``.
        InfrastructureError: the measurement lock cannot be opened.
    """
    lock = lock or MachineLock()
    with tempfile.TemporaryDirectory(prefix="nnsweep-bench-") as tmp:
        work = Path(tmp)
        np.save(work / "inputs.npy", _as_saved(inputs))
        request: dict[str, Any] = {
            "runtime": runtime, "artifact": str(artifact), "io": io.to_dict(), "threads": threads,
            "backends": list(backends), "settings": settings.to_dict(), "inputs": str(work / "inputs.npy"),
            "outputs": str(work / "outputs.npy"), "result": str(work / "result.json"),
            "decoder": None if decoder is None else decoder.to_dict(),
        }  # fmt: skip
        with lock.hold(f"{runtime} {artifact.name}") as wait:
            held_from = time.monotonic()
            started = time.perf_counter()
            request["sent_monotonic"] = time.monotonic()
            (work / "request.json").write_text(json.dumps(request))
            isolation, parent_rss = "fresh", None
            stderr: str | None = None
            returncode: int | None = None
            if worker is not None:
                try:
                    outcome = worker.run(work / "request.json", work / "stderr.txt", settings.timeout_s)
                except WorkerUnavailable as exc:
                    # Nothing was measured: a fresh process measures it instead.
                    log.warning("%s; measuring %s in a fresh process", exc, artifact.name)
                    request["sent_monotonic"] = time.monotonic()
                    (work / "request.json").write_text(json.dumps(request))
                else:
                    if outcome.timed_out:
                        raise BenchmarkError(f"benchmark timed out after {settings.timeout_s:.0f} s")
                    isolation, parent_rss = "fork", float(worker.ready.get("rss_mb", 0.0))
                    returncode = outcome.returncode
                    stderr_file = work / "stderr.txt"
                    stderr = stderr_file.read_text(errors="replace") if stderr_file.exists() else ""
            if returncode is None:
                returncode, stderr = _run_fresh(runtime, work / "request.json", settings)
            total_ms = (time.perf_counter() - started) * 1e3
            held = (held_from, time.monotonic())
        timing, outputs = _read_result(runtime, work, returncode, stderr or "")
    phases = {"lock_wait": wait.waited_ms, **timing.phases_ms, "total": total_ms}
    timing = dataclasses.replace(
        timing,
        lock_wait_ms=wait.waited_ms,
        isolation=isolation,
        parent_rss_mb=parent_rss,
        phases_ms=phases,
        held_monotonic=held,
    )
    return timing, outputs


def _run_fresh(runtime: str, request: Path, settings: MeasureSettings) -> tuple[int, str]:
    # A runtime outside this environment (PyArmNN) measures under its own interpreter.
    python = runtimes.get(runtime).python
    try:
        with python_command(python, "nnsweep.bench._child", str(request)) as (argv, env):
            proc = subprocess.run(
                argv, capture_output=True, text=True, timeout=settings.timeout_s, check=False, env=env
            )
    except subprocess.TimeoutExpired:
        raise BenchmarkError(f"benchmark timed out after {settings.timeout_s:.0f} s") from None
    except FileNotFoundError as exc:
        raise BenchmarkError(f"{runtime} needs the interpreter {python}, which is not installed here") from exc
    return proc.returncode, proc.stderr


def _read_result(runtime: str, work: Path, returncode: int, stderr: str) -> tuple[Timing, np.ndarray]:
    result_file = work / "result.json"
    if returncode < 0:
        name = signal.Signals(-returncode).name
        raise BenchmarkError(f"{runtime} runtime crashed ({name}): {_tail(stderr)}")
    if not result_file.exists():
        raise BenchmarkError(f"benchmark process exited with {returncode}: {_tail(stderr)}")
    result = json.loads(result_file.read_text())
    if "error" in result:
        message = result["message"]
        if detail := runtimes.get(runtime).failure_detail:
            message = runtimes.load_object(detail)(message, stderr)
        raise BenchmarkError(f"{result['error']}: {message}")
    return Timing.from_dict(result["timing"]), np.load(work / "outputs.npy")
