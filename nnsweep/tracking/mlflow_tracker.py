"""Tracking: the only module that imports mlflow.

One MLflow experiment per sweep, one parent run per (sweep, device), one child
run per trial. Everything goes through ``MlflowClient`` with explicit run ids and
batched ``log_batch`` calls, from the coordinator only. Runs are found again by
tags, so a resumed sweep reuses its parent runs and never duplicates a trial's run.

Where artifacts go: with a local sqlite store MLflow 3.17 would put them in
``<working directory>/mlruns/<experiment id>`` (the client's default artifact root,
resolved against whatever directory the first client happened to start in), which
is neither beside the database nor stable between runs. :class:`MlflowTracker`
creates the experiment with an explicit location instead: ``mlartifacts/<experiment>``
beside the database file, an absolute path that ``mlflow ui --backend-store-uri
sqlite:///…`` reads directly. Remote stores (``http(s)://``, databases) keep MLflow's
default.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nnsweep.core.results import TrialRecord, TrialStatus
from nnsweep.tracking.background import BackgroundTracker
from nnsweep.tracking.base import NullTracker, Tracker
from nnsweep.tracking.run_fields import (
    DEVICE_TAG,
    KIND_TAG,
    PARAM_LIMIT,
    SWEEP_TAG,
    TAG_LIMIT,
    TRIAL_TAG,
    clip,
    end_tags,
    ended_as,
    finite_metrics,
    run_params,
    start_tags,
)
from nnsweep.tracking.uris import absolute_sqlite_uri, artifact_location

if TYPE_CHECKING:
    from nnsweep.core.config import DeploymentConfig

__all__ = ["MlflowTracker", "tracker_for"]

_log = logging.getLogger(__name__)

_SWEEP_ID = "nnsweep.sweep_id"  # one generation of a sweep (its studies' id): --fresh starts a new one
_BATCH_LIMIT = 100  # MLflow 3.17's params + tags per log_batch (mlflow.utils.validation)
_END_STATUS = {
    TrialStatus.OK: "FINISHED",
    TrialStatus.REUSED: "FINISHED",
    TrialStatus.FAILED: "FAILED",
    TrialStatus.INTERRUPTED: "KILLED",
}


class _Experiment:
    """One MLflow experiment through one ``MlflowClient``: created on first use, searched
    page by page, written in batches within MLflow's limits. Constructing it writes nothing."""

    def __init__(self, uri: str, name: str, sweep: str) -> None:
        self.uri, self.name, self.sweep = uri, name, sweep
        self._client: Any = None
        self._id: str | None = None

    @property
    def client(self) -> Any:
        """The ``MlflowClient``, created on first use."""
        if self._client is None:
            from mlflow.tracking import MlflowClient

            from nnsweep.tracking.sqlite_store import create_whole

            create_whole(self.uri)
            self._client = MlflowClient(tracking_uri=self.uri)
        return self._client

    @property
    def id(self) -> str:
        """The experiment's id, created on first use (restored if it was deleted)."""
        if self._id is None:
            found = self.client.get_experiment_by_name(self.name)
            if found is None:
                self._id = str(
                    self.client.create_experiment(
                        self.name,
                        artifact_location=artifact_location(self.uri, self.name),
                        tags={SWEEP_TAG: self.sweep, "mlflow.note.content": f"nnsweep sweep {self.sweep}"},
                    )
                )
            else:
                if found.lifecycle_stage == "deleted":
                    _log.warning("MLflow experiment %r was deleted; restoring it", self.name)
                    self.client.restore_experiment(found.experiment_id)
                self._id = str(found.experiment_id)
        return self._id

    def exists(self) -> bool:
        """Whether the experiment exists (and is not deleted), creating and restoring nothing."""
        if self._id is None:
            found = self.client.get_experiment_by_name(self.name)
            if found is None or found.lifecycle_stage == "deleted":
                return False
            self._id = str(found.experiment_id)
        return True

    def search(self, filter_string: str) -> list[Any]:
        runs: list[Any] = []
        token = None
        while True:
            page = self.client.search_runs(
                [self.id],
                filter_string,
                max_results=1000,
                order_by=["attributes.start_time ASC"],
                page_token=token,
            )
            runs.extend(page)
            token = page.token
            if not token:
                return runs

    def log_batch(
        self,
        run_id: str,
        metrics: Mapping[str, float] | None = None,
        params: Mapping[str, str] | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> None:
        """One ``log_batch`` (more only past MLflow's 100 params + tags per batch)."""
        from mlflow.entities import Metric, Param, RunTag

        stamp = _now_ms()
        ms = [Metric(k, v, stamp, 0) for k, v in (metrics or {}).items()]
        ps = [Param(k, clip(v, PARAM_LIMIT)) for k, v in (params or {}).items()]
        ts = [RunTag(k, clip(v, TAG_LIMIT)) for k, v in (tags or {}).items()]
        while True:
            p_now, ps = ps[:_BATCH_LIMIT], ps[_BATCH_LIMIT:]
            t_now, ts = ts[: _BATCH_LIMIT - len(p_now)], ts[_BATCH_LIMIT - len(p_now) :]
            self.client.log_batch(run_id, metrics=ms, params=p_now, tags=t_now)
            ms = []
            if not ps and not ts:
                return


@dataclass
class _TrialRuns:
    """What the tracker knows of each trial's run, by ``(device, trial number)``."""

    ids: dict[tuple[str, int], str] = field(default_factory=dict)
    status: dict[tuple[str, int], str] = field(default_factory=dict)  # its MLflow run status
    labels: dict[tuple[str, int], str] = field(default_factory=dict)  # its configuration's label
    ended: dict[tuple[str, int], TrialStatus] = field(default_factory=dict)  # what it recorded when it ended
    # A failed write is tried again (BackgroundTracker): these say which step of a run's start it reached.
    unanswered: set[tuple[str, int]] = field(default_factory=set)  # create_run raised: the run may exist
    unparamed: set[tuple[str, int]] = field(default_factory=set)  # the run exists; its params are not written

    def forget(self, key: tuple[str, int]) -> str | None:
        """Drop everything known of the trial's run; its id, if one was known."""
        for known in (self.status, self.labels, self.ended):
            known.pop(key, None)
        self.unanswered.discard(key)
        self.unparamed.discard(key)
        return self.ids.pop(key, None)


class MlflowTracker:
    """Logs a sweep to MLflow: an experiment per sweep, a parent run per device, a child run per trial.

    Run ids are cached after :meth:`open_device` (one search, to resume), so a trial costs
    two writes to start and five to finish. Not thread-safe: wrap it in
    :class:`BackgroundTracker` to take it off the caller's path. ``uri`` is any tracking URI
    (a relative ``sqlite:///mlflow.db`` is resolved now); ``experiment`` is created if
    missing (:func:`artifact_location`); ``sweep`` tags the runs so a resume finds them.

    Example:
        >>> tracker = MlflowTracker("sqlite:///mlflow.db", "quickstart", "quickstart")  # writes nothing yet
    """

    def __init__(self, uri: str, experiment: str, sweep: str) -> None:
        self.uri = absolute_sqlite_uri(uri)
        self.sweep = sweep
        self.sweep_id = ""
        self._experiment = _Experiment(self.uri, experiment, sweep)
        self._parents: dict[str, str] = {}
        self._runs = _TrialRuns()

    @property
    def client(self) -> Any:
        """The ``MlflowClient``, created on first use: constructing the tracker writes nothing."""
        return self._experiment.client

    @property
    def experiment_id(self) -> str:
        """The sweep's experiment, created on first use (restored if it was deleted)."""
        return self._experiment.id

    def bind(self, sweep_id: str) -> None:
        """Find and create runs of this generation of the sweep only (tag ``nnsweep.sweep_id``)."""
        if sweep_id != self.sweep_id:
            self.sweep_id = sweep_id
            self._parents.clear()
            self._runs = _TrialRuns()

    def _filter(self, device: str, kind: str) -> str:
        # Names reach here validated by nnsweep.spec ([A-Za-z0-9_.-]) and sweep ids are hex: nothing to escape.
        text = (
            f"tags.`{SWEEP_TAG}` = '{self.sweep}' and tags.`{DEVICE_TAG}` = '{device}' and tags.`{KIND_TAG}` = '{kind}'"
        )
        if self.sweep_id:
            text += f" and tags.`{_SWEEP_ID}` = '{self.sweep_id}'"
        return text

    def _ids(self) -> dict[str, str]:
        return {_SWEEP_ID: self.sweep_id} if self.sweep_id else {}

    def open_device(self, device: str, info: Mapping[str, str]) -> None:
        """Get or create the device's parent run (set RUNNING) and load its trials' run ids.

        Child runs left RUNNING by a sweep that was killed are terminated as ``KILLED``.
        """
        tags = {SWEEP_TAG: self.sweep, DEVICE_TAG: device, KIND_TAG: "device", "device": device, **self._ids()}
        tags.update({str(k): str(v) for k, v in info.items()})
        parents = self._experiment.search(self._filter(device, "device"))
        if parents:
            run_id = str(parents[0].info.run_id)
            if parents[0].info.status != "RUNNING":
                self.client.update_run(run_id, status="RUNNING")
        else:
            run_id = str(self.client.create_run(self.experiment_id, run_name=device, tags=tags).info.run_id)
        self._experiment.log_batch(run_id, tags=tags)  # capabilities may have changed since the last run
        self._parents[device] = run_id
        self._load_children(device, close_running=True)

    def attach_device(self, device: str) -> bool:
        """Load the device's parent run and its trials' run ids, changing nothing (no
        experiment or run is created): what ``nnsweep report`` needs to link and attach."""
        if device in self._parents:
            return True
        if not self._experiment.exists():
            return False
        parents = self._experiment.search(self._filter(device, "device"))
        if not parents:
            return False
        self._parents[device] = str(parents[0].info.run_id)
        self._load_children(device, close_running=False)
        return True

    def _load_children(self, device: str, *, close_running: bool) -> None:
        for child in self._experiment.search(self._filter(device, "trial")):
            number = int(child.data.tags[TRIAL_TAG])
            key = (device, number)
            if key in self._runs.ids:
                continue  # a duplicate from an older version: keep the first
            run_id = str(child.info.run_id)
            self._runs.ids[key] = run_id
            self._runs.labels[key] = child.data.tags.get("config") or (child.info.run_name or "").removeprefix(
                f"{device} #{number} "
            )
            status = str(child.info.status)
            if status == "RUNNING" and close_running:
                self._experiment.log_batch(run_id, tags={"status": TrialStatus.INTERRUPTED.value})
                self.client.set_terminated(run_id, status="KILLED")
                status = "KILLED"
            self._runs.status[key] = status
            ended = ended_as(status, child.data.tags.get("status", ""))
            if ended is not None:
                self._runs.ended[key] = ended

    def _parent(self, device: str) -> str:
        if device not in self._parents:
            self.open_device(device, {})
        return self._parents[device]

    def _child(self, device: str, number: int, config: DeploymentConfig) -> str:
        """The trial's run, created once however often a write to it fails and is tried again.

        Each step is recorded as soon as it has happened: a run whose ``create_run`` got no
        answer (the server may have made it) is looked for before another is made, and a run
        whose params were not written gets them on the next call.
        """
        key = (device, number)
        run_id = self._runs.ids.get(key)
        if run_id is None:
            run_id = self._adopted(key) if key in self._runs.unanswered else None
        if run_id is None:
            label = config.label()
            tags = {"mlflow.parentRunId": self._parent(device), **self._ids()}
            tags.update(start_tags(self.sweep, device, number, config))
            self._runs.unanswered.add(key)
            made = self.client.create_run(self.experiment_id, run_name=f"{device} #{number} {label}", tags=tags)
            run_id = str(made.info.run_id)
            self._runs.unanswered.discard(key)
            self._runs.ids[key], self._runs.status[key], self._runs.labels[key] = run_id, "RUNNING", label
            self._runs.unparamed.add(key)
        if key in self._runs.unparamed:
            self._experiment.log_batch(run_id, params=run_params(config))  # the same values again: allowed
            self._runs.unparamed.discard(key)
        return run_id

    def _adopted(self, key: tuple[str, int]) -> str | None:
        """The run an unanswered ``create_run`` made after all (its params then written again), or None."""
        device, number = key
        found = self._experiment.search(self._filter(device, "trial") + f" and tags.`{TRIAL_TAG}` = '{number}'")
        self._runs.unanswered.discard(key)
        if not found:
            return None
        run_id = str(found[0].info.run_id)
        self._runs.ids[key], self._runs.status[key] = run_id, str(found[0].info.status)
        self._runs.labels[key] = found[0].data.tags.get("config", "")
        self._runs.unparamed.add(key)
        return run_id

    def start_trial(self, device: str, number: int, config: DeploymentConfig) -> None:
        """Create the trial's child run (or reuse the one a previous run of the sweep made)."""
        self._child(device, number, config)

    def finish_trial(self, record: TrialRecord) -> None:
        """Log the trial's metrics, tags and JSON artifacts, then end its run.

        The run ends ``FINISHED`` (ok, reused), ``FAILED`` or ``KILLED`` (interrupted).
        Non-finite metrics (an infinite SQNR of an exact model) are left out.
        """
        run_id = self._child(record.device, record.number, record.config)
        self._experiment.log_batch(run_id, metrics=finite_metrics(record.metrics), tags=end_tags(record))
        parts = record.partitions
        # The artifact repository is looked up (one get_run) for the first file and cached by MLflow.
        self.client.log_dict(run_id, record.config.to_dict(), "config.json")
        if parts:
            self.client.log_dict(run_id, dict(parts), "partitions.json")
        if record.samples_ms:
            self.client.log_text(run_id, json.dumps(list(record.samples_ms)), "latency_samples.json")
        status = _END_STATUS[record.status]
        self.client.set_terminated(run_id, status=status)
        self._runs.status[(record.device, record.number)] = status
        self._runs.ended[(record.device, record.number)] = record.status

    def disown_trial(self, device: str, number: int) -> None:
        """Delete the trial's run (MLflow keeps it, restorable with ``mlflow runs restore``, until
        ``mlflow gc``): the study holds no result for it, so the UI should not show one."""
        run_id = self._runs.forget((device, number))
        if run_id is not None:
            self.client.delete_run(run_id)

    def mark_front(
        self,
        device: str,
        pareto: Collection[int],
        best: int | None,
        remeasured: Mapping[int, Mapping[str, float]] | None = None,
        summary: Mapping[str, float] | None = None,
    ) -> None:
        """Tag the device's finished trial runs ``pareto`` and ``best`` (``true``/``false``),
        log each re-measured run's pooled figures; put ``best_trial``, ``best_config`` and the
        ``summary`` figures on the parent run."""
        front = set(pareto)
        figures = remeasured or {}
        for (dev, number), run_id in self._runs.ids.items():
            if dev == device and self._runs.status.get((dev, number)) == "FINISHED":
                self._experiment.log_batch(
                    run_id,
                    metrics=finite_metrics(figures.get(number, {})),
                    tags={"pareto": str(number in front).lower(), "best": str(number == best).lower()},
                )
        label = "" if best is None else self._runs.labels.get((device, best), "")
        self._experiment.log_batch(
            self._parent(device),
            metrics=finite_metrics(summary or {}),
            tags={"best_trial": "" if best is None else str(best), "best_config": label},
        )

    def quiet(self, on: bool) -> None:
        """Nothing to hold: this tracker writes when it is called (:class:`BackgroundTracker` holds)."""
        return None

    def close_device(self, device: str, status: str = "FINISHED") -> None:
        """End the device's parent run with ``status`` (``FINISHED``, ``FAILED``, ``KILLED``)."""
        parent = self._parents.get(device)
        if parent is not None:
            self.client.set_terminated(parent, status=status)

    def logged(self, device: str) -> dict[int, TrialStatus]:
        """Trial number -> the status its run ended with (known after :meth:`open_device`).

        A run ended ``KILLED`` counts as interrupted: a trial the study has as measured
        is then logged again, with its metrics.
        """
        return {number: status for (dev, number), status in self._runs.ended.items() if dev == device}

    def log_device_artifact(self, device: str, name: str, path: Path) -> None:
        """Attach a file or folder (the HTML report, a Pareto plot) to the device's parent run.

        Args:
            device: the device.
            name: its path among the run's artifacts (``report.html``, ``plots/front.png``).
            path: the local file or folder.
        """
        _log_file(self.client, self._parent(device), name, path)

    def log_trial_artifact(self, device: str, number: int, name: str, path: Path) -> None:
        """Attach a file to the trial's run (none logged: nothing to attach it to)."""
        run_id = self._runs.ids.get((device, number))
        if run_id is not None:
            _log_file(self.client, run_id, name, path)

    def trial_links(self, device: str) -> dict[int, str]:
        """Trial number -> the MLflow UI's path to its run (``#/experiments/<id>/runs/<run>``)."""
        return {
            number: f"#/experiments/{self.experiment_id}/runs/{run_id}"
            for (dev, number), run_id in sorted(self._runs.ids.items())
            if dev == device
        }


def tracker_for(uri: str, experiment: str, sweep: str, *, enabled: bool = True) -> Tracker:
    """What ``nnsweep run`` logs through: MLflow on a background thread, or nothing.

    Call ``close()`` on it at the end (when it has one) to write what is still queued.
    """
    if not enabled:
        return NullTracker()
    return BackgroundTracker(MlflowTracker(uri, experiment, sweep))


def _log_file(client: Any, run_id: str, name: str, path: Path) -> None:
    """Log a file or folder as the run's artifact ``name`` (a file renamed on the way if need be)."""
    folder, _, leaf = name.strip("/").rpartition("/")
    if path.is_dir():
        client.log_artifacts(run_id, str(path), name.strip("/"))
    elif leaf == path.name:
        client.log_artifact(run_id, str(path), folder or None)
    else:
        with tempfile.TemporaryDirectory(prefix="nnsweep-artifact-") as tmp:
            renamed = Path(tmp) / leaf
            shutil.copyfile(path, renamed)
            client.log_artifact(run_id, str(renamed), folder or None)


def _now_ms() -> int:
    return int(time.time() * 1000)
