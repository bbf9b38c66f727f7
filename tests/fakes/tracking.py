"""A tracker that keeps what it is told in memory, for tests at the tracker seam."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path

from nnsweep.core.results import TrialRecord, TrialStatus

__all__ = ["RecordingTracker"]


class RecordingTracker:
    """Stands at the tracker seam: remembers what the coordinator reported.

    Args:
        stop_after: raise KeyboardInterrupt once this many trials have finished, as if the
            user pressed Ctrl-C right there.
    """

    def __init__(self, stop_after: int | None = None) -> None:
        self.started: list[tuple[str, int]] = []
        self.finished: list[TrialRecord] = []
        self.front: dict[str, tuple[list[int], int | None]] = {}
        self.closed: dict[str, str] = {}
        self.remeasured: dict[str, dict] = {}  # type: ignore[type-arg]
        self.summary: dict[str, dict] = {}  # type: ignore[type-arg]
        self.quiet_calls: list[bool] = []
        self.artifacts: dict[str, dict[str, Path]] = {}
        self.stop_after = stop_after

    def bind(self, sweep_id: str) -> None:
        assert sweep_id  # every study of a sweep carries its generation's id

    def open_device(self, device: str, info: Mapping[str, str]) -> None:
        assert "arch" in info

    def start_trial(self, device: str, number: int, config: object) -> None:
        self.started.append((device, number))

    def finish_trial(self, record: TrialRecord) -> None:
        self.finished.append(record)
        if self.stop_after is not None and len(self.finished) == self.stop_after:
            raise KeyboardInterrupt

    def disown_trial(self, device: str, number: int) -> None:
        self.finished = [r for r in self.finished if (r.device, r.number) != (device, number)]

    def mark_front(
        self,
        device: str,
        pareto: Collection[int],
        best: int | None,
        remeasured: Mapping[int, Mapping[str, float]] | None = None,
        summary: Mapping[str, float] | None = None,
    ) -> None:
        self.front[device] = (list(pareto), best)
        self.remeasured[device] = dict(remeasured or {})
        self.summary[device] = dict(summary or {})

    def close_device(self, device: str, status: str = "FINISHED") -> None:
        self.closed[device] = status

    def quiet(self, on: bool) -> None:
        self.quiet_calls.append(on)

    def logged(self, device: str) -> dict[int, TrialStatus]:
        return {r.number: r.status for r in self.finished if r.device == device}

    def log_device_artifact(self, device: str, name: str, path: Path) -> None:
        self.artifacts.setdefault(device, {})[name] = path

    def log_trial_artifact(self, device: str, number: int, name: str, path: Path) -> None:
        self.artifacts.setdefault(f"{device}#{number}", {})[name] = path

    def trial_links(self, device: str) -> dict[int, str]:
        return {number: f"#/trials/{device}/{number}" for number in self.logged(device)}

    def attach_device(self, device: str) -> bool:
        return any(r.device == device for r in self.finished)
