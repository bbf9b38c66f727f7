"""One measurement at a time on this machine, whoever asks.

Every local measurement holds an exclusive ``flock(2)`` on one file per machine while its
measuring process runs, so two sweeps, or a sweep and ``nnsweep bench``, never time on the
same cores at once. ``flock`` because the kernel drops the lock when its holder dies (no
stale lock), it needs only read access (other users lock it too), and the descriptor is
close-on-exec. The path depends on the machine only, not the user or ``$TMPDIR``:
``/run/lock/nnsweep-measure.lock`` when ``/run/lock`` is world-writable, else
``/tmp/nnsweep-measure.lock``; ``$NNSWEEP_MEASURE_LOCK`` overrides it
(:func:`default_lock_path`). Mode 0644 and ``O_NOFOLLOW``: only its creator writes the
holder's note in it, and a planted symlink cannot redirect that write.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from nnsweep.core.errors import InfrastructureError

__all__ = ["LockWait", "MachineLock", "default_lock_path"]

LOCK_NAME = "nnsweep-measure.lock"
LOCK_MODE = 0o644  # others open it read-only, which is all flock needs; only its creator writes the note
RUN_LOCK = Path("/run/lock")  # the system's folder for lock files, when everyone may write it
FALLBACK = Path("/tmp") / LOCK_NAME  # spelled out: never $TMPDIR, which differs between processes
ENV_VAR = "NNSWEEP_MEASURE_LOCK"


def default_lock_path() -> Path:
    """``$NNSWEEP_MEASURE_LOCK`` if set; else ``/run/lock/nnsweep-measure.lock`` if
    ``/run/lock`` is a folder everyone may write (its mode, on a writable mount), else
    ``/tmp/nnsweep-measure.lock``.

    The choice reads the folder's mode, not this process's access nor ``$TMPDIR``, so
    every process of the machine makes the same one. The variable is for a machine
    whose ``/tmp`` differs between processes (a service with a private ``/tmp``: give
    every process the same file) and for nodes that simulate separate machines on one
    (a benchmark of the coordinator, a demo): give each its own file and their
    measurements may overlap, which no real measurement should.
    """
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR])
    try:
        info = RUN_LOCK.stat()
        read_only = bool(os.statvfs(RUN_LOCK).f_flag & os.ST_RDONLY)
    except OSError:
        return FALLBACK
    if stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_IWOTH and not read_only:
        return RUN_LOCK / LOCK_NAME
    return FALLBACK


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
        """A close-on-exec descriptor of the lock file, and whether this process may write it."""
        flags = os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK  # O_NONBLOCK: a FIFO planted there cannot hang us
        try:
            fd = os.open(self.path, flags | os.O_CREAT | os.O_RDWR, LOCK_MODE)
            writable = True
        except PermissionError:
            # Another user's file (0644), or one in a sticky folder that protected_regular
            # keeps from O_CREAT: a read-only descriptor is all flock needs.
            try:
                fd, writable = os.open(self.path, flags | os.O_RDONLY), False
            except OSError as exc:
                raise self._unusable(exc) from exc
        except OSError as exc:
            raise self._unusable(exc) from exc
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise InfrastructureError(
                    f"the measurement lock {self.path} is not a regular file; remove it, "
                    f"or set {ENV_VAR} to a file every process of this machine can read"
                )
        except BaseException:
            os.close(fd)
            raise
        if writable:
            with contextlib.suppress(OSError):
                os.fchmod(fd, LOCK_MODE)  # the umask may have made it 0600: others must open it too
        return fd, writable

    def _unusable(self, exc: OSError) -> InfrastructureError:
        if exc.errno == errno.ELOOP:
            return InfrastructureError(
                f"the measurement lock {self.path} is a symbolic link, which is never followed (anyone "
                f"could plant one in a shared folder); remove it, or set {ENV_VAR} to a regular file"
            )
        return InfrastructureError(
            f"cannot open the measurement lock {self.path}: {exc.strerror or exc}; make it readable by "
            f"every user who measures here (mode {LOCK_MODE:04o}), or set {ENV_VAR} to one file every "
            "process of this machine can read (the same for all, or their measurements may overlap)"
        )

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
            try:
                yield LockWait(waited_ms=waited_ms, holder=holder)
            finally:
                if writable:  # emptied while still held: a later holder that cannot write leaves no stale note
                    with contextlib.suppress(OSError):
                        os.ftruncate(fd, 0)
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
                        f"(holder: {holder or 'unknown: a process that cannot write the lock file, e.g. another user'})"
                    ) from None
                time.sleep(self.poll_s)


def _read(fd: int) -> str:
    try:
        return os.pread(fd, 512, 0).decode(errors="replace").strip()
    except OSError:
        return ""
