"""The client of a warm measuring worker (:mod:`nnsweep.bench._zygote`).

A :class:`WarmWorker` starts the worker for one runtime on first use and keeps
it for the next measurements; if it cannot start, or dies, the caller measures
in a fresh process instead (:func:`nnsweep.bench._isolated.measure_in_subprocess`
does both). The worker runs in a process group of its own, so stopping it stops
a child it is measuring with it; it also ends when this process closes its
input, which the kernel does when this process dies.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from nnsweep.bench._foreign import python_command
from nnsweep.core import runtimes
from nnsweep.core.errors import InfrastructureError

__all__ = ["ChildOutcome", "ForkHere", "WarmWorker", "WorkerUnavailable"]

log = logging.getLogger(__name__)

# How long the worker may take to import its runtime (ExecuTorch with torch took
# 12 s on the busy 2-core machine this was written on), and how long past a
# measurement's own timeout a reply may take before the worker counts as hung.
START_TIMEOUT_S = 300.0
REPLY_GRACE_S = 30.0


class WorkerUnavailable(InfrastructureError):
    """The warm worker could not start or stopped answering: measure in a fresh process."""


@dataclass(frozen=True)
class ChildOutcome:
    """How a forked measuring child ended.

    Args:
        returncode: its exit code, or minus the signal that killed it (as :mod:`subprocess`).
        timed_out: the worker killed it at the measurement's timeout.
        fork_ms: the ``fork()`` call itself.
    """

    returncode: int
    timed_out: bool
    fork_ms: float

    @classmethod
    def from_reply(cls, reply: dict[str, Any]) -> ChildOutcome:
        """From the worker's answer (:func:`nnsweep.bench._zygote.fork_child`)."""
        signaled = reply.get("signal") is not None
        code = -int(reply["signal"]) if signaled else int(reply.get("exit") or 0)
        return cls(returncode=code, timed_out=bool(reply.get("timed_out")), fork_ms=float(reply["fork_ms"]))


class WarmWorker:
    """A worker with ``runtime`` imported that forks a child per measurement.

    Args:
        runtime: the runtime whose runner the worker imports.

    Not thread-safe across measurements by design of the device agent (one at a
    time); a lock serialises callers anyway.
    """

    def __init__(self, runtime: str) -> None:
        self.runtime = runtime
        self.ready: dict[str, Any] = {}
        self._proc: subprocess.Popen[bytes] | None = None
        self._stack = contextlib.ExitStack()
        self._buf = b""
        self._lock = threading.Lock()
        self.broken = ""  # why it could not start: not tried again (each try costs an import)

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        """Start the worker and wait until its runtime is imported.

        Raises:
            WorkerUnavailable: it failed to start or to import the runtime.
        """
        if self.running:
            return
        if self.broken:
            raise WorkerUnavailable(self.broken)
        self.close()
        try:
            python = runtimes.get(self.runtime).python
        except ValueError as exc:  # SpecError: not a runtime this nnsweep knows
            self.broken = str(exc)
            raise WorkerUnavailable(self.broken) from exc
        try:
            argv, env = self._stack.enter_context(python_command(python, "nnsweep.bench._zygote", self.runtime))
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # its own process group: stopping it stops its child too
            )
        except OSError as exc:
            self.close()
            self.broken = f"cannot start the {self.runtime} worker: {exc}"
            raise WorkerUnavailable(self.broken) from exc
        try:
            reply = self._read(START_TIMEOUT_S)
        except WorkerUnavailable as exc:
            self.broken = str(exc)
            raise
        if not reply.get("ready"):
            self.close()
            self.broken = f"the {self.runtime} worker did not start: {reply.get('error', reply)}"
            raise WorkerUnavailable(self.broken)
        self.ready = reply
        log.debug("warm %s worker %s ready: %s", self.runtime, reply.get("pid"), reply)

    def run(self, request: Path, stderr: Path, timeout_s: float) -> ChildOutcome:
        """Measure the request file in a forked child and wait for it.

        Raises:
            WorkerUnavailable: the worker is gone or stopped answering (it is stopped).
        """
        with self._lock:
            self.start()
            assert self._proc is not None and self._proc.stdin is not None  # started above
            order = {"request": str(request), "stderr": str(stderr), "timeout_s": timeout_s}
            try:
                self._proc.stdin.write((json.dumps(order) + "\n").encode())
                self._proc.stdin.flush()
            except OSError as exc:
                self.close()
                raise WorkerUnavailable(f"the {self.runtime} worker is gone: {exc}") from exc
            reply = self._read(timeout_s + REPLY_GRACE_S)
        return ChildOutcome.from_reply(reply)

    def _read(self, timeout_s: float) -> dict[str, Any]:
        """The worker's next reply line; stops the worker and raises if none comes."""
        proc = self._proc
        assert proc is not None and proc.stdout is not None  # only called on a started worker
        fd = proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            ready = select.select([fd], [], [], max(left, 0))[0] if left > 0 else []
            chunk = os.read(fd, 65536) if ready else b""
            if not chunk:
                why = "stopped answering" if not ready else "exited"
                self.close()
                raise WorkerUnavailable(f"the {self.runtime} worker {why}")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        try:
            reply: dict[str, Any] = json.loads(line)
        except ValueError as exc:
            self.close()
            raise WorkerUnavailable(f"the {self.runtime} worker said {line[:200]!r}") from exc
        return reply

    def close(self) -> None:
        """Stop the worker and any child it is measuring."""
        proc, self._proc, self._buf = self._proc, None, b""
        if proc is not None:
            _close_pipe(proc.stdin)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # its own group (start_new_session): the worker and its child
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            _close_pipe(proc.stdout)
        self._stack.close()
        self._stack = contextlib.ExitStack()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def _close_pipe(pipe: IO[bytes] | None) -> None:
    if pipe is not None:
        with contextlib.suppress(OSError):
            pipe.close()


class ForkHere:
    """Fork the measuring child from this very process, as a warm worker would.

    For a process that is itself fresh and light, like ``nnsweep bench`` on a cache
    hit: it has imported nnsweep and numpy, started no thread and loaded no model, so
    a child forked from it is as clean as a worker's and saves starting an
    interpreter. :meth:`for_runtime` says when that holds; otherwise measure in a
    fresh process (or a :class:`WarmWorker`).
    """

    def __init__(self) -> None:
        with open("/proc/self/statm") as f:
            rss_mb = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
        self.ready: dict[str, Any] = {"pid": os.getpid(), "rss_mb": rss_mb}

    @classmethod
    def for_runtime(cls, runtime: str) -> ForkHere | None:
        """A forker if ``runtime`` runs under this interpreter and this process is fit to fork."""
        import sys

        try:
            python = runtimes.get(runtime).python
        except ValueError:
            return None
        # A runtime of another interpreter (PyArmNN), a thread that could hold a lock at the
        # fork, or torch's pools and hundreds of MB inherited by the child: a fresh process.
        if python or threading.active_count() > 1 or "torch" in sys.modules:
            return None
        return cls()

    def run(self, request: Path, stderr: Path, timeout_s: float) -> ChildOutcome:
        from nnsweep.bench._zygote import fork_child

        reply = fork_child(request, stderr, timeout_s)
        assert reply is not None  # nothing watched: only a client's worker returns None
        return ChildOutcome.from_reply(reply)
