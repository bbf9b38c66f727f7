"""One measurement at a time on this machine, whoever asks.

Two sweeps started at once (each with its own local Ray), or a sweep and a
``nnsweep bench``, would otherwise time their artifacts on the same cores at the
same time. Every local measurement therefore holds an exclusive ``flock(2)`` on
one file per machine while its measuring process runs.

Why ``flock``: the kernel drops the lock when the last descriptor of the open
file goes away, which includes the holder being killed (``SIGKILL``, the OOM
killer): a dead process cannot leave the machine locked, and there is no stale
lock file to clean up. The descriptor is opened close-on-exec, so measuring
processes started while it is held do not keep it alive. ``flock`` needs only
read access to the file, so users other than its creator can lock it too.

The lock file lives in ``/run/lock`` (a tmpfs writable by everyone on Debian
and most Linux systems) when that exists, else in the system's temporary
directory; the holder writes its pid and what it measures into the file, so a
waiter can say whom it waits for.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from nnsweep.core.errors import InfrastructureError

__all__ = ["LockWait", "MachineLock", "default_lock_path"]

LOCK_NAME = "nnsweep-measure.lock"


def default_lock_path() -> Path:
    """``$NNSWEEP_MEASURE_LOCK`` if set; else ``/run/lock/nnsweep-measure.lock`` if
    ``/run/lock`` is writable, else the same name in the system's temporary directory.

    The variable is for nodes that simulate separate machines on one (a benchmark of
    the coordinator, a demo): give each its own file and their measurements may
    overlap, which no real measurement should.
    """
    if os.environ.get("NNSWEEP_MEASURE_LOCK"):
        return Path(os.environ["NNSWEEP_MEASURE_LOCK"])
    run_lock = Path("/run/lock")
    if run_lock.is_dir() and os.access(run_lock, os.W_OK | os.X_OK):
        return run_lock / LOCK_NAME
    return Path(tempfile.gettempdir()) / LOCK_NAME


@dataclass(frozen=True)
class LockWait:
    """How getting the lock went.

    Args:
        waited_ms: from asking to holding.
        holder: what the lock file said when the lock was busy (``"PID what"``),
            empty when it was free.
    """

    waited_ms: float
    holder: str = ""


class MachineLock:
    """The machine-wide measurement lock.

    Args:
        path: the lock file (default :func:`default_lock_path`); tests pass their own.
        poll_s: how often a waiter with a timeout retries.

    Example:
        >>> import tempfile, pathlib
        >>> lock = MachineLock(pathlib.Path(tempfile.mkdtemp()) / "m.lock")
        >>> with lock.hold("doctest") as wait:
        ...     wait.holder
        ''
    """

    def __init__(self, path: Path | None = None, poll_s: float = 0.02) -> None:
        self.path = path or default_lock_path()
        self.poll_s = poll_s

    def _open(self) -> tuple[int, bool]:
        flags = os.O_CREAT | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags | os.O_RDWR, 0o666)
        except PermissionError:
            # Created by another user with a restrictive umask: flock needs read access only.
            try:
                return os.open(self.path, os.O_RDONLY | os.O_CLOEXEC), False
            except OSError as exc:
                raise InfrastructureError(f"cannot open the measurement lock {self.path}: {exc}") from exc
        except OSError as exc:
            raise InfrastructureError(f"cannot open the measurement lock {self.path}: {exc}") from exc
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o666)  # let other users' sweeps lock it too (works only for its creator)
        return fd, True

    @contextlib.contextmanager
    def hold(self, what: str = "", timeout_s: float | None = None) -> Iterator[LockWait]:
        """Hold the lock for the ``with`` block; wait for it first if it is busy.

        Args:
            what: written into the lock file for waiters to show (e.g. the artifact).
            timeout_s: give up after this long (``None``: wait as long as it takes).

        Yields:
            How long it waited and for whom.

        Raises:
            InfrastructureError: the lock file cannot be opened, or ``timeout_s`` passed.
        """
        fd, writable = self._open()
        try:
            started = time.perf_counter()
            holder = ""
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise InfrastructureError(f"cannot lock {self.path}: {exc}") from exc
                holder = _read(fd)
                self._wait(fd, timeout_s, holder)
            waited_ms = (time.perf_counter() - started) * 1e3
            if writable:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)
                    os.pwrite(fd, f"{os.getpid()} {what}".encode(errors="replace"), 0)
            yield LockWait(waited_ms=waited_ms, holder=holder)
        finally:
            os.close(fd)  # releases the lock

    def _wait(self, fd: int, timeout_s: float | None, holder: str) -> None:
        if timeout_s is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
            return
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise InfrastructureError(
                        f"the measurement lock {self.path} is still held after {timeout_s:.0f} s "
                        f"(holder: {holder or 'unknown'})"
                    ) from None
                time.sleep(self.poll_s)


def _read(fd: int) -> str:
    try:
        return os.pread(fd, 512, 0).decode(errors="replace").strip()
    except OSError:
        return ""
