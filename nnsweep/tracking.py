"""Tracking: the only module that imports mlflow.

One MLflow experiment per sweep, one parent run per (sweep, device), one child
run per trial. Everything goes through ``MlflowClient`` with explicit run ids and
batched ``log_batch`` calls, from the coordinator only. Runs are found again by
tags, so a resumed sweep reuses its parent runs and never duplicates a trial's run.
"""

from __future__ import annotations

import json
import logging
import math
import queue
import tempfile
import threading
import time
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from nnsweep.results import TrialRecord, TrialStatus

if TYPE_CHECKING:
    from nnsweep.config import DeploymentConfig

__all__ = ["BackgroundTracker", "MlflowTracker", "NullTracker", "Tracker", "absolute_sqlite_uri"]

_SWEEP, _DEVICE, _KIND, _TRIAL = "nnsweep.sweep", "nnsweep.device", "nnsweep.kind", "nnsweep.trial"
_TAG_LIMIT = 5000  # MLflow's maximum tag value length (characters)
_END_STATUS = {
    TrialStatus.OK: "FINISHED",
    TrialStatus.REUSED: "FINISHED",
    TrialStatus.FAILED: "FAILED",
    TrialStatus.INTERRUPTED: "KILLED",
}


class Tracker(Protocol):
    """Where the coordinator reports a sweep. Call order per device: :meth:`open_device`,
    then :meth:`start_trial`/:meth:`finish_trial` per trial, :meth:`mark_front`,
    :meth:`close_device`."""

    def open_device(self, device: str, info: Mapping[str, str]) -> None: ...

    def start_trial(self, device: str, number: int, config: DeploymentConfig) -> None: ...

    def finish_trial(self, record: TrialRecord) -> None: ...

    def mark_front(self, device: str, pareto: Collection[int], best: int | None) -> None: ...

    def close_device(self, device: str, status: str = "FINISHED") -> None: ...

    def logged(self, device: str) -> set[int]:
        """Trials of ``device`` already recorded (the coordinator backfills the others)."""
        ...


class NullTracker:
    """Records nothing (``nnsweep run --no-tracking``)."""

    def open_device(self, device: str, info: Mapping[str, str]) -> None:
        return None

    def start_trial(self, device: str, number: int, config: DeploymentConfig) -> None:
        return None

    def finish_trial(self, record: TrialRecord) -> None:
        return None

    def mark_front(self, device: str, pareto: Collection[int], best: int | None) -> None:
        return None

    def close_device(self, device: str, status: str = "FINISHED") -> None:
        return None

    def logged(self, device: str) -> set[int]:
        return set()


class BackgroundTracker:
    """Runs another tracker's calls on one background thread, in order.

    The coordinator hands over a trial's record in microseconds instead of waiting
    ~75 ms for MLflow's database and artifact writes. Calls that end a device
    (:meth:`mark_front`, :meth:`close_device`) wait until everything before them is
    written. A failed write is logged and dropped: the Optuna study is the record of
    truth, and the next run of the sweep backfills trials missing from the tracker.

    Args:
        inner: the tracker that does the writing.
    """

    def __init__(self, inner: Tracker) -> None:
        self.inner = inner
        self._queue: queue.Queue[tuple[str, tuple[Any, ...]] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._drain, name="nnsweep-tracking", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is not None:
                    name, args = item
                    try:
                        getattr(self.inner, name)(*args)
                    except Exception as exc:  # tracking must never stop a sweep; see the class docstring
                        logging.getLogger(__name__).warning("tracking %s failed: %s", name, exc)
            finally:
                self._queue.task_done()
            if item is None:
                return

    def _later(self, name: str, *args: Any) -> None:
        self._queue.put((name, args))

    def flush(self) -> None:
        """Wait until every call so far is written."""
        self._queue.join()

    def open_device(self, device: str, info: Mapping[str, str]) -> None:
        self.flush()
        self.inner.open_device(device, info)

    def start_trial(self, device: str, number: int, config: DeploymentConfig) -> None:
        self._later("start_trial", device, number, config)

    def finish_trial(self, record: TrialRecord) -> None:
        self._later("finish_trial", record)

    def mark_front(self, device: str, pareto: Collection[int], best: int | None) -> None:
        self.flush()
        self.inner.mark_front(device, pareto, best)

    def close_device(self, device: str, status: str = "FINISHED") -> None:
        self.flush()
        self.inner.close_device(device, status)

    def logged(self, device: str) -> set[int]:
        self.flush()
        return self.inner.logged(device)

    def close(self) -> None:
        """Write what is queued and stop the thread."""
        self._queue.put(None)
        self._thread.join()


def _finite(metrics: Mapping[str, float]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if v is not None and math.isfinite(float(v))}


class MlflowTracker:
    """Logs a sweep to MLflow.

    Args:
        uri: tracking URI (``sqlite:///mlflow.db``, ``http://host:5000``, ``postgresql+psycopg2://…``).
        experiment: experiment name (created if missing).
        sweep: the sweep's name (tags find runs again on resume).
    """

    def __init__(self, uri: str, experiment: str, sweep: str) -> None:
        self.uri = absolute_sqlite_uri(uri)
        self.experiment_name = experiment
        self.sweep = sweep
        self._client: Any = None
        self._experiment_id: str | None = None
        self._parents: dict[str, str] = {}
        self._children: dict[tuple[str, int], str] = {}
        self._finished: set[tuple[str, int]] = set()

    @property
    def client(self) -> Any:
        # Created on first use: constructing the tracker must not write anything.
        if self._client is None:
            from mlflow.tracking import MlflowClient

            self._client = MlflowClient(tracking_uri=self.uri)
        return self._client

    @property
    def experiment_id(self) -> str:
        if self._experiment_id is None:
            found = self.client.get_experiment_by_name(self.experiment_name)
            if found is None:
                self._experiment_id = self.client.create_experiment(
                    self.experiment_name,
                    tags={_SWEEP: self.sweep, "mlflow.note.content": f"nnsweep sweep {self.sweep}"},
                )
            else:
                self._experiment_id = found.experiment_id
        return self._experiment_id

    def _search(self, filter_string: str) -> list[Any]:
        runs: list[Any] = []
        token = None
        while True:
            page = self.client.search_runs([self.experiment_id], filter_string, max_results=1000, page_token=token)
            runs.extend(page)
            token = page.token
            if not token:
                return runs

    def open_device(self, device: str, info: Mapping[str, str]) -> None:
        """Get or create the device's parent run; close its children left RUNNING as KILLED."""
        from mlflow.entities import RunTag

        base = f"tags.`{_SWEEP}` = '{self.sweep}' and tags.`{_DEVICE}` = '{device}'"
        parents = self._search(f"{base} and tags.`{_KIND}` = 'device'")
        tags = {_SWEEP: self.sweep, _DEVICE: device, _KIND: "device", "device": device, **info}
        if parents:
            run_id = parents[0].info.run_id
            self.client.update_run(run_id, status="RUNNING")
        else:
            run_id = self.client.create_run(self.experiment_id, tags=tags, run_name=device).info.run_id
        self.client.log_batch(run_id, tags=[RunTag(k, str(v)[:_TAG_LIMIT]) for k, v in tags.items()])
        self._parents[device] = run_id
        for child in self._search(f"{base} and tags.`{_KIND}` = 'trial'"):
            number = int(child.data.tags[_TRIAL])
            self._children[(device, number)] = child.info.run_id
            if child.info.status != "RUNNING":
                self._finished.add((device, number))
            else:
                self.client.set_tag(child.info.run_id, "status", TrialStatus.INTERRUPTED.value)
                self.client.set_terminated(child.info.run_id, status="KILLED")

    def _child(self, device: str, number: int, config: DeploymentConfig) -> str:
        from mlflow.entities import Param

        key = (device, number)
        if key in self._children:
            return self._children[key]
        tags = {
            "mlflow.parentRunId": self._parents[device],
            _SWEEP: self.sweep,
            _DEVICE: device,
            _KIND: "trial",
            _TRIAL: str(number),
            "device": device,
            "runtime": config.runtime,
            "backends": ",".join(config.backends),
            "status": "running",
        }
        run = self.client.create_run(
            self.experiment_id, run_name=f"{device} #{number} {config.label()}", tags=tags, start_time=_now_ms()
        )
        params = {**config.flat(), "config_digest": config.digest()}
        self.client.log_batch(run.info.run_id, params=[Param(k, v[:6000]) for k, v in params.items()])
        self._children[key] = run.info.run_id
        return str(run.info.run_id)

    def start_trial(self, device: str, number: int, config: DeploymentConfig) -> None:
        self._child(device, number, config)

    def finish_trial(self, record: TrialRecord) -> None:
        from mlflow.entities import Metric, RunTag

        run_id = self._child(record.device, record.number, record.config)
        stamp = _now_ms()
        parts = record.partitions
        tags = {
            "status": record.status.value,
            "estimated": str(record.estimated).lower(),
            **{k: str(v) for k, v in record.tags.items()},
        }
        if parts:
            sizes = ",".join(str(s) for s in parts.get("sizes", []))
            tags["partitions"] = f"{parts.get('count', 0)}" + (f" (sizes {sizes})" if sizes else "")
        if record.reason:
            tags["failure_reason"] = record.reason[:_TAG_LIMIT]
        if record.feasible is not None:
            tags["feasible"] = str(record.feasible).lower()
        if record.reused_from is not None:
            tags["reused_from"] = str(record.reused_from)
        metrics = [Metric(k, v, stamp, 0) for k, v in _finite(record.metrics).items()]
        self.client.log_batch(run_id, metrics=metrics, tags=[RunTag(k, v[:_TAG_LIMIT]) for k, v in tags.items()])
        files: dict[str, Any] = {"config.json": record.config.to_dict()}
        if parts:
            files["partitions.json"] = dict(parts)
        if record.samples_ms:
            files["latency_samples.json"] = list(record.samples_ms)
        with tempfile.TemporaryDirectory(prefix="nnsweep-run-") as tmp:
            for name, content in files.items():
                (Path(tmp) / name).write_text(json.dumps(content, indent=1))
            self.client.log_artifacts(run_id, tmp)  # one call: each log_* looks the run up again
        self.client.set_terminated(run_id, status=_END_STATUS[record.status], end_time=stamp)
        self._finished.add((record.device, record.number))

    def mark_front(self, device: str, pareto: Collection[int], best: int | None) -> None:
        from mlflow.entities import RunTag

        front = set(pareto)
        for (dev, number), run_id in self._children.items():
            if dev != device:
                continue
            tags = [RunTag("pareto", str(number in front).lower()), RunTag("best", str(number == best).lower())]
            self.client.log_batch(run_id, tags=tags)
        parent = self._parents.get(device)
        if parent is not None:
            self.client.set_tag(parent, "best_trial", "" if best is None else str(best))

    def close_device(self, device: str, status: str = "FINISHED") -> None:
        parent = self._parents.get(device)
        if parent is not None:
            self.client.set_terminated(parent, status=status)

    def logged(self, device: str) -> set[int]:
        """Trial numbers of the device whose runs are finished (known after :meth:`open_device`)."""
        return {number for dev, number in self._finished if dev == device}

    def log_device_artifact(self, device: str, path: Path) -> None:
        """Attach a file (the HTML report, a Pareto plot) to the device's parent run."""
        self.client.log_artifact(self._parents[device], str(path))

    def trial_links(self, device: str) -> dict[int, str]:
        """Trial number -> the MLflow UI's path to its run (``#/experiments/<id>/runs/<run>``)."""
        return {
            number: f"#/experiments/{self.experiment_id}/runs/{run_id}"
            for (dev, number), run_id in self._children.items()
            if dev == device
        }


def absolute_sqlite_uri(uri: str, base: Path | None = None) -> str:
    """``sqlite:///mlflow.db`` (relative to the working directory) as an absolute URI.

    MLflow caches database engines by URI, so a relative one would keep pointing
    at the first directory it was used from.
    """
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri.startswith(prefix + "/"):
        return prefix + str((base or Path.cwd()) / uri[len(prefix) :])
    return uri


def _now_ms() -> int:
    return int(time.time() * 1000)
