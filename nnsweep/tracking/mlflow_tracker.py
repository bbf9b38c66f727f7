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
import math
import shutil
import tempfile
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nnsweep.core.results import TrialRecord, TrialStatus
from nnsweep.tracking.background import BackgroundTracker
from nnsweep.tracking.base import NullTracker, Tracker
from nnsweep.tracking.uris import absolute_sqlite_uri, artifact_location

if TYPE_CHECKING:
    from nnsweep.core.config import DeploymentConfig

__all__ = ["MlflowTracker", "TrialFields", "tracker_for", "trial_fields"]

_log = logging.getLogger(__name__)

_SWEEP, _DEVICE, _KIND, _TRIAL = "nnsweep.sweep", "nnsweep.device", "nnsweep.kind", "nnsweep.trial"
_SWEEP_ID = "nnsweep.sweep_id"  # one generation of a sweep (its studies' id): --fresh starts a new one
# MLflow 3.17's limits (mlflow.utils.validation): tag/param value lengths, params + tags per log_batch.
_TAG_LIMIT = 8000
_PARAM_LIMIT = 6000
_BATCH_LIMIT = 100
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
                        tags={_SWEEP: self.sweep, "mlflow.note.content": f"nnsweep sweep {self.sweep}"},
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
        ps = [Param(k, _clip(v, _PARAM_LIMIT)) for k, v in (params or {}).items()]
        ts = [RunTag(k, _clip(v, _TAG_LIMIT)) for k, v in (tags or {}).items()]
        while True:
            p_now, ps = ps[:_BATCH_LIMIT], ps[_BATCH_LIMIT:]
            t_now, ts = ts[: _BATCH_LIMIT - len(p_now)], ts[_BATCH_LIMIT - len(p_now) :]
            self.client.log_batch(run_id, metrics=ms, params=p_now, tags=t_now)
            ms = []
            if not ps and not ts:
                return


class MlflowTracker:
    """Logs a sweep to MLflow: an experiment per sweep, a parent run per device, a child run per trial.

    Run ids are cached in memory: after :meth:`open_device` (which searches the
    experiment once, to resume), a trial costs two writes to start (create the run,
    one ``log_batch`` of params) and five to finish (one ``log_batch``, three small
    JSON artifacts, the terminal status). Not thread-safe: call it from one thread
    at a time (wrap it in :class:`BackgroundTracker` to take it off the caller's path).

    Args:
        uri: tracking URI (``sqlite:///mlflow.db`` — relative to the working directory,
            resolved now — ``sqlite:////abs/x.db``, ``http://host:5000``, ``postgresql+psycopg2://…``).
        experiment: experiment name (created if missing; see :func:`artifact_location`).
        sweep: the sweep's name (tags find runs again on resume).

    Example:
        >>> tracker = MlflowTracker("sqlite:///mlflow.db", "quickstart", "quickstart")  # writes nothing yet
    """

    def __init__(self, uri: str, experiment: str, sweep: str) -> None:
        self.uri = absolute_sqlite_uri(uri)
        self.sweep = sweep
        self.sweep_id = ""
        self._experiment = _Experiment(self.uri, experiment, sweep)
        self._parents: dict[str, str] = {}
        self._children: dict[tuple[str, int], str] = {}
        self._status: dict[tuple[str, int], str] = {}  # MLflow run status of each known child
        self._labels: dict[tuple[str, int], str] = {}  # config label of each known child
        self._ended: dict[tuple[str, int], TrialStatus] = {}  # what each ended child recorded
        # A failed write is tried again (BackgroundTracker): these say which step of a child's start it reached.
        self._unanswered: set[tuple[str, int]] = set()  # create_run raised: the run may exist all the same
        self._unparamed: set[tuple[str, int]] = set()  # the run exists; its params are not written yet

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
            for known in (
                self._parents,
                self._children,
                self._status,
                self._labels,
                self._ended,
                self._unanswered,
                self._unparamed,
            ):
                known.clear()

    def _filter(self, device: str, kind: str) -> str:
        # Names reach here validated by nnsweep.spec ([A-Za-z0-9_.-]) and sweep ids are hex: nothing to escape.
        text = f"tags.`{_SWEEP}` = '{self.sweep}' and tags.`{_DEVICE}` = '{device}' and tags.`{_KIND}` = '{kind}'"
        if self.sweep_id:
            text += f" and tags.`{_SWEEP_ID}` = '{self.sweep_id}'"
        return text

    def _ids(self) -> dict[str, str]:
        return {_SWEEP_ID: self.sweep_id} if self.sweep_id else {}

    def open_device(self, device: str, info: Mapping[str, str]) -> None:
        """Get or create the device's parent run (set RUNNING) and load its trials' run ids.

        Child runs left RUNNING by a sweep that was killed are terminated as ``KILLED``.
        """
        tags = {_SWEEP: self.sweep, _DEVICE: device, _KIND: "device", "device": device, **self._ids()}
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
            number = int(child.data.tags[_TRIAL])
            key = (device, number)
            if key in self._children:
                continue  # a duplicate from an older version: keep the first
            run_id = str(child.info.run_id)
            self._children[key] = run_id
            self._labels[key] = child.data.tags.get("config") or (child.info.run_name or "").removeprefix(
                f"{device} #{number} "
            )
            status = str(child.info.status)
            if status == "RUNNING" and close_running:
                self._experiment.log_batch(run_id, tags={"status": TrialStatus.INTERRUPTED.value})
                self.client.set_terminated(run_id, status="KILLED")
                status = "KILLED"
            self._status[key] = status
            ended = _ended_as(status, child.data.tags.get("status", ""))
            if ended is not None:
                self._ended[key] = ended

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
        run_id = self._children.get(key)
        if run_id is None:
            run_id = self._adopted(key) if key in self._unanswered else None
        if run_id is None:
            label = config.label()
            tags = {"mlflow.parentRunId": self._parent(device), **self._ids()}
            tags.update(_start_tags(self.sweep, device, number, config))
            self._unanswered.add(key)
            made = self.client.create_run(self.experiment_id, run_name=f"{device} #{number} {label}", tags=tags)
            run_id = str(made.info.run_id)
            self._unanswered.discard(key)
            self._children[key], self._status[key], self._labels[key] = run_id, "RUNNING", label
            self._unparamed.add(key)
        if key in self._unparamed:
            self._experiment.log_batch(run_id, params=_params(config))  # the same values again: allowed
            self._unparamed.discard(key)
        return run_id

    def _adopted(self, key: tuple[str, int]) -> str | None:
        """The run an unanswered ``create_run`` made after all (its params then written again), or None."""
        device, number = key
        found = self._experiment.search(self._filter(device, "trial") + f" and tags.`{_TRIAL}` = '{number}'")
        self._unanswered.discard(key)
        if not found:
            return None
        run_id = str(found[0].info.run_id)
        self._children[key], self._status[key] = run_id, str(found[0].info.status)
        self._labels[key] = found[0].data.tags.get("config", "")
        self._unparamed.add(key)
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
        self._experiment.log_batch(run_id, metrics=_finite(record.metrics), tags=_end_tags(record))
        parts = record.partitions
        # The artifact repository is looked up (one get_run) for the first file and cached by MLflow.
        self.client.log_dict(run_id, record.config.to_dict(), "config.json")
        if parts:
            self.client.log_dict(run_id, dict(parts), "partitions.json")
        if record.samples_ms:
            self.client.log_text(run_id, json.dumps(list(record.samples_ms)), "latency_samples.json")
        status = _END_STATUS[record.status]
        self.client.set_terminated(run_id, status=status)
        self._status[(record.device, record.number)] = status
        self._ended[(record.device, record.number)] = record.status

    def disown_trial(self, device: str, number: int) -> None:
        """Delete the trial's run (MLflow keeps it, restorable with ``mlflow runs restore``, until
        ``mlflow gc``): the study holds no result for it, so the UI should not show one."""
        key = (device, number)
        run_id = self._children.pop(key, None)
        if run_id is None:
            return
        self.client.delete_run(run_id)
        self._status.pop(key, None)
        self._ended.pop(key, None)
        self._labels.pop(key, None)
        self._unparamed.discard(key)

    def mark_front(
        self,
        device: str,
        pareto: Collection[int],
        best: int | None,
        remeasured: Mapping[int, Mapping[str, float]] | None = None,
    ) -> None:
        """Tag the device's finished trial runs ``pareto`` and ``best`` (``true``/``false``),
        log each re-measured run's pooled figures; put ``best_trial`` and ``best_config`` on
        the parent run."""
        front = set(pareto)
        figures = remeasured or {}
        for (dev, number), run_id in self._children.items():
            if dev == device and self._status.get((dev, number)) == "FINISHED":
                self._experiment.log_batch(
                    run_id,
                    metrics=_finite(figures.get(number, {})),
                    tags={"pareto": str(number in front).lower(), "best": str(number == best).lower()},
                )
        label = "" if best is None else self._labels.get((device, best), "")
        self._experiment.log_batch(
            self._parent(device), tags={"best_trial": "" if best is None else str(best), "best_config": label}
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
        return {number: status for (dev, number), status in self._ended.items() if dev == device}

    def log_device_artifact(self, device: str, name: str, path: Path) -> None:
        """Attach a file or folder (the HTML report, a Pareto plot) to the device's parent run.

        Args:
            device: the device.
            name: its path among the run's artifacts (``report.html``, ``plots/front.png``).
            path: the local file or folder.
        """
        _log_file(self.client, self._parent(device), name, path)

    def trial_links(self, device: str) -> dict[int, str]:
        """Trial number -> the MLflow UI's path to its run (``#/experiments/<id>/runs/<run>``)."""
        return {
            number: f"#/experiments/{self.experiment_id}/runs/{run_id}"
            for (dev, number), run_id in sorted(self._children.items())
            if dev == device
        }


def tracker_for(uri: str, experiment: str, sweep: str, *, enabled: bool = True) -> Tracker:
    """What ``nnsweep run`` logs through: MLflow on a background thread, or nothing.

    Call ``close()`` on it at the end (when it has one) to write what is still queued.
    """
    if not enabled:
        return NullTracker()
    return BackgroundTracker(MlflowTracker(uri, experiment, sweep))


@dataclass(frozen=True)
class TrialFields:
    """What a trial's run holds once it has ended: its params, tags (without MLflow's own
    ``mlflow.*``, the sweep id and the ``pareto``/``best`` marks of the front) and metrics
    (without the front's re-measured figures)."""

    params: dict[str, str]
    tags: dict[str, str]
    metrics: dict[str, float]


def trial_fields(sweep: str, record: TrialRecord) -> TrialFields:
    """The params, tags and metrics :class:`MlflowTracker` logs for a told trial: what its run
    must hold, whatever happened to the run that logged it (benchmarks/fault_injection.py)."""
    tags = {**_start_tags(sweep, record.device, record.number, record.config), **_end_tags(record)}
    params = {k: _clip(v, _PARAM_LIMIT) for k, v in _params(record.config).items()}
    return TrialFields(params, {k: _clip(v, _TAG_LIMIT) for k, v in tags.items()}, _finite(record.metrics))


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


def _start_tags(sweep: str, device: str, number: int, config: DeploymentConfig) -> dict[str, str]:
    return {
        _SWEEP: sweep,
        _DEVICE: device,
        _KIND: "trial",
        _TRIAL: str(number),
        "device": device,
        "runtime": config.runtime,
        "backends": ",".join(config.backends),
        "config": config.label(),
        "status": "running",
    }


def _params(config: DeploymentConfig) -> dict[str, str]:
    return {**config.flat(), "config_digest": config.digest()}


def _end_tags(record: TrialRecord) -> dict[str, str]:
    tags = {
        "status": record.status.value,
        "estimated": str(record.estimated).lower(),
        # Measured under qemu-user on another CPU: real kernels, no real board's latency.
        "emulated": str(record.emulated).lower(),
        **{str(k): str(v) for k, v in record.tags.items()},
    }
    parts = record.partitions
    if parts:
        sizes = ",".join(str(s) for s in parts.get("sizes", []))
        tags["partitions"] = f"{parts.get('count', 0)}" + (f" (sizes {sizes})" if sizes else "")
    if record.reason:
        tags["failure_reason"] = record.reason
    if record.feasible is not None:
        tags["feasible"] = str(record.feasible).lower()
    if record.reused_from is not None:
        tags["reused_from"] = str(record.reused_from)
    return tags


def _ended_as(run_status: str, status_tag: str) -> TrialStatus | None:
    """What an ended run recorded: its terminal MLflow status, and the status tag for FINISHED."""
    if run_status == "FINISHED":
        return TrialStatus(status_tag) if status_tag in (TrialStatus.OK, TrialStatus.REUSED) else None
    return {"FAILED": TrialStatus.FAILED, "KILLED": TrialStatus.INTERRUPTED}.get(run_status)


def _finite(metrics: Mapping[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in metrics.items():
        number = float(value)
        if math.isfinite(number):
            out[key] = number
    return out


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _now_ms() -> int:
    return int(time.time() * 1000)
