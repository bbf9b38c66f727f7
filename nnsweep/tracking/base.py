"""The tracker contract every tracker follows, and the tracker that records nothing.

The coordinator is the only caller. Calls for one device come in this order:
``bind`` once per sweep generation, ``open_device`` (or ``attach_device`` to read an
earlier run's), then ``start_trial``/``finish_trial`` per trial, ``mark_front``,
``close_device``; ``disown_trial`` when a device opens. Read-backs (``logged``, ``trial_links``) may come at any time.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from nnsweep.core.results import TrialRecord, TrialStatus

if TYPE_CHECKING:
    from nnsweep.core.config import DeploymentConfig

__all__ = ["NullTracker", "Tracker"]


class Tracker(Protocol):
    """Where the coordinator reports a sweep.

    Call order: :meth:`bind` once; per device :meth:`open_device`; then per trial
    :meth:`start_trial` (optional) and :meth:`finish_trial`; at the end :meth:`mark_front`
    and :meth:`close_device`. :meth:`logged`, :meth:`trial_links` and
    :meth:`log_device_artifact` may be called any time after :meth:`open_device`.
    """

    def bind(self, sweep_id: str) -> None:
        """Record into this generation of the sweep (its studies' sweep id): a sweep started
        again with ``--fresh`` gets new runs instead of reopening the old ones."""
        ...

    def open_device(self, device: str, info: Mapping[str, str]) -> None:
        """Start (or resume) recording ``device``.

        Args:
            device: the device's name.
            info: its capabilities as text (arch, cpu, runtimes, ...), recorded as tags.
        """
        ...

    def start_trial(self, device: str, number: int, config: DeploymentConfig) -> None:
        """A trial was dispatched.

        Args:
            device: the device it runs on.
            number: the Optuna trial number in that device's study.
            config: the deployment being tried.
        """
        ...

    def finish_trial(self, record: TrialRecord) -> None:
        """A trial ended (measured, reused, failed or interrupted); records its outcome."""
        ...

    def disown_trial(self, device: str, number: int) -> None:
        """Take back the record of a trial the study holds no result for (its journal or
        database was restored from a copy older than the trial): a trial given that number
        later gets a record of its own. A tracker with no such record does nothing."""
        ...

    def mark_front(
        self,
        device: str,
        pareto: Collection[int],
        best: int | None,
        remeasured: Mapping[int, Mapping[str, float]] | None = None,
        summary: Mapping[str, float] | None = None,
    ) -> None:
        """Label the device's Pareto-optimal trials and its best trial.

        Args:
            device: the device.
            pareto: trial numbers on the Pareto front.
            best: the trial chosen as best, if any.
            remeasured: trial number -> the figures its re-measurement pooled
                (``latency_p50_ms_remeasured`` and its interval), logged on its run.
            summary: figures of the device as a whole (the best trial's metrics as
                ``best_<metric>``), logged on its parent run.
        """
        ...

    def close_device(self, device: str, status: str = "FINISHED") -> None:
        """Stop recording ``device``; ``status`` is ``FINISHED``, ``FAILED`` or ``KILLED``."""
        ...

    def quiet(self, on: bool) -> None:
        """Hold background writes while the coordinator's machine measures (``on``), or
        release them. A tracker that writes only when called has nothing to hold."""
        ...

    def logged(self, device: str) -> dict[int, TrialStatus]:
        """Trials of ``device`` whose record ended, with the status it ended with (the
        coordinator logs again every trial whose study record says otherwise)."""
        ...

    def log_device_artifact(self, device: str, name: str, path: Path) -> None:
        """Attach a file or folder (the HTML report, a Pareto plot) to the device's record.

        Args:
            device: the device.
            name: where it lands among the record's artifacts (``pareto.html``, ``plots/front.png``).
            path: the local file or folder.
        """
        ...

    def log_trial_artifact(self, device: str, number: int, name: str, path: Path) -> None:
        """Attach a file (a per-operator profile) to a trial's record; nothing when the
        trial has no record (it was never logged)."""
        ...

    def trial_links(self, device: str) -> dict[int, str]:
        """Trial number -> link to the trial's record, relative to the tracking UI's root."""
        ...

    def attach_device(self, device: str) -> bool:
        """Find the device's record of an earlier or current run without changing it
        (for ``nnsweep report``); ``False`` when nothing was recorded for it."""
        ...


class NullTracker:
    """Records nothing (``nnsweep run --no-tracking``)."""

    def bind(self, sweep_id: str) -> None:
        return None

    def open_device(self, device: str, info: Mapping[str, str]) -> None:
        return None

    def start_trial(self, device: str, number: int, config: DeploymentConfig) -> None:
        return None

    def finish_trial(self, record: TrialRecord) -> None:
        return None

    def disown_trial(self, device: str, number: int) -> None:
        return None

    def mark_front(
        self,
        device: str,
        pareto: Collection[int],
        best: int | None,
        remeasured: Mapping[int, Mapping[str, float]] | None = None,
        summary: Mapping[str, float] | None = None,
    ) -> None:
        return None

    def close_device(self, device: str, status: str = "FINISHED") -> None:
        return None

    def quiet(self, on: bool) -> None:
        return None

    def logged(self, device: str) -> dict[int, TrialStatus]:
        return {}

    def log_device_artifact(self, device: str, name: str, path: Path) -> None:
        return None

    def log_trial_artifact(self, device: str, number: int, name: str, path: Path) -> None:
        return None

    def trial_links(self, device: str) -> dict[int, str]:
        return {}

    def attach_device(self, device: str) -> bool:
        return False
