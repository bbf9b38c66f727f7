"""A warm measuring worker: ``python -m nnsweep.bench._zygote RUNTIME``.

It imports a runtime's runner once, then forks one child per measurement, which runs
:func:`nnsweep.bench._child.run_request` and exits. The child keeps what a fresh process
gives (its own peak memory, its thread count set before the runtime loads anything, a crash
kills only it) and saves the interpreter start and runtime import. Forking is safe because
the parent only imports and never runs an inference, so no runtime lock is held at the fork.

Protocol (one JSON object per line): ``{"ready": ...}`` once, then for each
``{"request": PATH, "stderr": PATH, "timeout_s": S}`` an answer
``{"pid", "exit", "signal", "timed_out", "fork_ms", "maxrss_kb"}`` after the child ended.
End of input kills a running child and ends the worker.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import select
import signal
import sys
import time
from pathlib import Path

from nnsweep.core import runtimes


def _preload(runtime: str) -> tuple[str, ...]:
    """What the runtime's runner imports when it loads a first artifact
    (:attr:`~nnsweep.core.runtimes.RuntimeInfo.preload`): imported here, never loading a
    program, it is saved in every child; only where the first of them is installed."""
    modules = runtimes.get(runtime).preload
    return modules if modules and importlib.util.find_spec(modules[0]) is not None else ()


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class _Lines:
    """Lines from a file descriptor, read without Python's buffering (so select works)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = b""

    def readline(self) -> bytes | None:
        """One line, or ``None`` at end of input."""
        while b"\n" not in self.buf:
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return None
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line


def _send(obj: dict[str, object]) -> None:
    os.write(1, (json.dumps(obj) + "\n").encode())


def _child(request: Path, stderr: Path) -> None:
    """In the forked child: never returns."""
    code = 70
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        err = os.open(stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)  # not the worker's request pipe
        os.dup2(err, 1)  # a runtime that prints must not write into the reply pipe
        os.dup2(err, 2)
        os.close(null)
        os.close(err)
        from nnsweep.bench._child import run_request

        code = run_request(request)
    except BaseException:  # the child must never return into the worker's loop
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def fork_child(request: Path, stderr: Path, timeout_s: float, lines: _Lines | None = None) -> dict[str, object] | None:
    """Measure ``request`` in a child forked from this process and wait for it to end.

    Returns:
        How it ended (``pid``, ``exit``, ``signal``, ``timed_out``, ``fork_ms``,
        ``maxrss_kb``); ``None`` when ``lines`` (a client's input) ended meanwhile,
        after the child was killed: nobody wants that measurement.
    """
    sys.stdout.flush()  # what is buffered here must not be written again by the child
    sys.stderr.flush()
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        _child(request, stderr)
    fork_ms = (time.perf_counter() - t0) * 1e3
    pidfd = os.pidfd_open(pid)
    watched = [pidfd] if lines is None else [pidfd, lines.fd]
    deadline = time.monotonic() + timeout_s
    timed_out = alive = False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                os.kill(pid, signal.SIGKILL)
                break
            ready, _, _ = select.select(watched, [], [], left)
            if pidfd in ready:
                alive = True
                break
            if lines is not None and lines.fd in ready and lines.readline() is None:
                os.kill(pid, signal.SIGKILL)
                os.wait4(pid, 0)
                return None
    except BaseException:  # Ctrl-C in this process: the child must not outlive the wait
        os.kill(pid, signal.SIGKILL)
        os.wait4(pid, 0)
        raise
    finally:
        os.close(pidfd)
    _, status, usage = os.wait4(pid, 0)
    return {
        "pid": pid,
        "exit": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "timed_out": timed_out and not alive,
        "fork_ms": fork_ms,
        "maxrss_kb": usage.ru_maxrss,
    }


def _serve_one(order: dict[str, object], lines: _Lines) -> bool:
    """Measure one request in a forked child; ``False`` when input ended meanwhile."""
    request, stderr = Path(str(order["request"])), Path(str(order["stderr"]))
    outcome = fork_child(request, stderr, float(order["timeout_s"]), lines)  # type: ignore[arg-type]
    if outcome is None:
        return False
    _send(outcome)
    return True


def main(argv: list[str]) -> int:
    runtime = argv[1]
    # The client ends the worker by closing its input; Ctrl-C goes to the client.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    t0 = time.perf_counter()
    try:
        from nnsweep.core import runtimes

        info = runtimes.get(runtime)
        importlib.import_module("nnsweep.bench._child")
        runtimes.load_object(info.runner)
        for module in _preload(runtime):
            importlib.import_module(module)
    except Exception as exc:  # the process boundary: the client falls back to a fresh process
        _send({"ready": False, "error": f"{type(exc).__name__}: {exc}"})
        return 1
    _send(
        {
            "ready": True,
            "pid": os.getpid(),
            "threads": _threads(),
            "rss_mb": _rss_mb(),
            "import_ms": (time.perf_counter() - t0) * 1e3,
        }
    )
    lines = _Lines(0)
    while True:
        line = lines.readline()
        if line is None:
            return 0
        if not line.strip():
            continue
        if not _serve_one(json.loads(line), lines):
            return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
