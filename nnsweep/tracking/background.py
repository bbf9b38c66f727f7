"""A tracker that runs another tracker's calls on one background thread, in order."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nnsweep.core.errors import first_line
from nnsweep.core.results import TrialRecord, TrialStatus
from nnsweep.tracking.base import Tracker

if TYPE_CHECKING:
    from nnsweep.core.config import DeploymentConfig

__all__ = ["BackgroundTracker"]

_log = logging.getLogger(__name__)


class BackgroundTracker:
    """Runs another tracker's calls on one background thread, in order.

    The coordinator hands over a record in microseconds instead of waiting for MLflow. Calls
    that end a device or read back (:meth:`mark_front`, :meth:`close_device`, :meth:`logged`,
    :meth:`trial_links`, :meth:`log_device_artifact`) wait for everything before them. A
    failed write is kept, in order, and retried before every later write; :meth:`close`
    retries with backoff for up to ``drain_s`` seconds and :attr:`unlogged` then counts what
    is still not written (the study keeps it, and the next run logs it). A failed read-back
    answers as if nothing were logged. While :meth:`quiet` is on (this machine measures),
    queued writes wait.
    """

    def __init__(self, inner: Tracker, drain_s: float = 120.0) -> None:
        self.inner = inner
        self.drain_s = drain_s
        self._kept: list[tuple[str, tuple[Any, ...]]] = []  # failed writes, in order (drain thread only)
        self._failing = False  # in an outage: said once
        self._queue: queue.Queue[tuple[str, tuple[Any, ...]] | None] = queue.Queue()
        self._loud = threading.Event()  # set: writes may run; cleared while the machine measures
        self._loud.set()
        self._thread = threading.Thread(target=self._drain, name="nnsweep-tracking", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while True:
            item = self._queue.get()
            self._loud.wait()
            try:
                if item is not None:
                    self._kept.append(item)
                    self._write_kept()
            finally:
                self._queue.task_done()
            if item is None:
                return

    def _write_kept(self) -> bool:
        """Write the kept writes in order; stop at the first that fails (kept for later)."""
        while self._kept:
            name, args = self._kept[0]
            try:
                getattr(self.inner, name)(*args)
            except Exception as exc:  # tracking must never stop a sweep; see the class docstring
                if not self._failing:  # once per outage, not once per retry
                    reason = first_line(exc)
                    _log.warning("tracking %s failed (%s); kept, written when the server answers", name, reason)
                self._failing = True
                return False
            self._kept.pop(0)
        if self._failing:
            _log.warning("tracking answers again; the writes kept meanwhile are written")
        self._failing = False
        return True

    @property
    def unlogged(self) -> int:
        """Trials whose record is not written yet (after :meth:`close`: not written at all)."""
        return sum(1 for name, _ in self._kept if name == "finish_trial")

    def quiet(self, on: bool) -> None:
        """Hold queued writes (``on``) while this machine measures, or let them run again.

        A call that must wait for the queue (:meth:`flush` and the read-backs) releases the
        hold first: it is the caller's own work, after the measurement."""
        if on:
            self._loud.clear()
        else:
            self._loud.set()

    def _later(self, name: str, *args: Any) -> None:
        self._queue.put((name, args))

    def flush(self) -> None:
        """Wait until every call so far is written (releasing a :meth:`quiet` hold)."""
        self._loud.set()
        self._queue.join()

    def bind(self, sweep_id: str) -> None:
        self.flush()
        self.inner.bind(sweep_id)

    def open_device(self, device: str, info: Mapping[str, str]) -> None:
        self.flush()
        self.inner.open_device(device, info)

    def start_trial(self, device: str, number: int, config: DeploymentConfig) -> None:
        self._later("start_trial", device, number, config)

    def finish_trial(self, record: TrialRecord) -> None:
        self._later("finish_trial", record)

    def disown_trial(self, device: str, number: int) -> None:
        self._later("disown_trial", device, number)

    def mark_front(
        self,
        device: str,
        pareto: Collection[int],
        best: int | None,
        remeasured: Mapping[int, Mapping[str, float]] | None = None,
        summary: Mapping[str, float] | None = None,
    ) -> None:
        self._later("mark_front", device, pareto, best, remeasured, summary)
        self.flush()

    def close_device(self, device: str, status: str = "FINISHED") -> None:
        self._later("close_device", device, status)
        self.flush()

    def logged(self, device: str) -> dict[int, TrialStatus]:
        self.flush()
        return self._read("logged", {}, device)

    def log_device_artifact(self, device: str, name: str, path: Path) -> None:
        self.flush()  # synchronous: the caller may delete the file right after
        self._read("log_device_artifact", None, device, name, path)

    def log_trial_artifact(self, device: str, number: int, name: str, path: Path) -> None:
        self.flush()  # synchronous: the caller may delete the file right after
        self._read("log_trial_artifact", None, device, number, name, path)

    def trial_links(self, device: str) -> dict[int, str]:
        self.flush()
        return self._read("trial_links", {}, device)

    def attach_device(self, device: str) -> bool:
        self.flush()
        return self._read("attach_device", False, device)

    def _read(self, name: str, otherwise: Any, *args: Any) -> Any:
        """A call that answers at once; with the server away, ``otherwise`` (said in the log)."""
        try:
            return getattr(self.inner, name)(*args)
        except Exception as exc:  # tracking must never stop a sweep; see the class docstring
            _log.warning("tracking %s failed (%s); going on without it", name, first_line(exc))
            return otherwise

    def close(self) -> int:
        """Write what is queued and stop the thread; kept writes are tried again with
        backoff for up to ``drain_s`` seconds. Returns :attr:`unlogged`."""
        self._queue.put(None)
        self._thread.join()
        deadline = time.monotonic() + self.drain_s
        pause = 1.0
        while not self._write_kept() and time.monotonic() + pause < deadline:
            time.sleep(pause)
            pause = min(pause * 2, 15.0)
        return self.unlogged
