"""MLflow tracking on a real sqlite store in tmp_path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nnsweep.core.config import DeploymentConfig, QuantConfig
from nnsweep.core.results import TrialRecord, TrialStatus
from nnsweep.tracking import (
    BackgroundTracker,
    MlflowTracker,
    NullTracker,
    absolute_sqlite_uri,
    artifact_location,
)

CFG = DeploymentConfig("executorch", ("xnnpack",), QuantConfig("static_int8"))
FP32 = DeploymentConfig("executorch", ("xnnpack",), QuantConfig("fp32"))


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(tmp_path)
    return "sqlite:///mlflow.db"  # relative, as specs write it: the tracker resolves it


def _ok(number: int, latency: float = 0.5, config: DeploymentConfig = CFG) -> TrialRecord:
    return TrialRecord(
        "sw", "host", number, config, TrialStatus.OK,
        metrics={"accuracy": 0.97, "latency_p50_ms": latency, "sqnr_db": float("inf"), "max_abs_err": float("nan")},
        partitions={"count": 3, "sizes": [12, 7, 2]}, samples_ms=(0.5, 0.6), feasible=True,
        tags={"artifact_sha256": "ab" * 32},
    )  # fmt: skip


def _client(uri: str) -> Any:
    from mlflow.tracking import MlflowClient

    return MlflowClient(absolute_sqlite_uri(uri))


def _runs(uri: str, experiment: str = "exp") -> list[Any]:
    client = _client(uri)
    exp = client.get_experiment_by_name(experiment)
    return list(client.search_runs([exp.experiment_id])) if exp else []


def _by_trial(uri: str) -> dict[str, Any]:
    return {r.data.tags.get("nnsweep.trial", "parent"): r for r in _runs(uri)}


def test_parent_and_child_runs_carry_params_metrics_tags_and_artifacts(store: str, tmp_path: Path) -> None:
    t = MlflowTracker(store, "exp", "sw")
    t.open_device("host", {"arch": "x86_64", "runtimes": "executorch,torch"})
    t.start_trial("host", 0, CFG)
    t.finish_trial(_ok(0))
    t.close_device("host")

    runs = _by_trial(store)
    assert set(runs) == {"parent", "0"}
    parent, child = runs["parent"], runs["0"]
    assert parent.info.run_name == "host" and parent.info.status == "FINISHED"
    assert parent.data.tags["arch"] == "x86_64" and parent.data.tags["nnsweep.kind"] == "device"
    assert child.info.run_name == f"host #0 {CFG.label()}" and child.info.status == "FINISHED"
    tags = child.data.tags
    assert tags["mlflow.parentRunId"] == parent.info.run_id
    assert (tags["nnsweep.sweep"], tags["nnsweep.device"], tags["nnsweep.kind"]) == ("sw", "host", "trial")
    assert (tags["runtime"], tags["backends"], tags["status"]) == ("executorch", "xnnpack,portable", "ok")
    assert (tags["partitions"], tags["feasible"], tags["estimated"]) == ("3 (sizes 12,7,2)", "true", "false")
    assert tags["artifact_sha256"] == "ab" * 32 and "failure_reason" not in tags
    assert child.data.params == {**CFG.flat(), "config_digest": CFG.digest()}
    assert child.data.metrics == {"accuracy": 0.97, "latency_p50_ms": 0.5}  # inf and nan are left out

    client = _client(store)
    assert {f.path for f in client.list_artifacts(child.info.run_id)} == {
        "config.json",
        "partitions.json",
        "latency_samples.json",
    }
    got = Path(client.download_artifacts(child.info.run_id, "", str(tmp_path / "dl")))
    assert DeploymentConfig.from_dict(json.loads((got / "config.json").read_text())) == CFG
    assert json.loads((got / "partitions.json").read_text()) == {"count": 3, "sizes": [12, 7, 2]}
    assert json.loads((got / "latency_samples.json").read_text()) == [0.5, 0.6]


def test_artifacts_land_beside_the_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # MLflow's default would be ./mlruns here
    uri = f"sqlite:///{tmp_path / 'store' / 'x.db'}"  # sqlite:////abs/...
    (tmp_path / "store").mkdir()
    t = MlflowTracker(uri, "my sweep/v1", "sw")
    t.open_device("host", {})
    t.finish_trial(_ok(0))
    exp = _client(uri).get_experiment_by_name("my sweep/v1")
    assert exp.artifact_location == (tmp_path / "store" / "mlartifacts" / "my_sweep_v1").as_uri()
    run_id = t.trial_links("host")[0].rsplit("/", 1)[1]
    assert (tmp_path / "store" / "mlartifacts" / "my_sweep_v1" / run_id / "artifacts" / "config.json").is_file()
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("sqlite:////data/x.db", "file:///data/mlartifacts/exp"),
        ("sqlite:////data/x.db?timeout=30", "file:///data/mlartifacts/exp"),
        ("sqlite:///runs/x.db", "file:///cwd/runs/mlartifacts/exp"),
        ("sqlite:///:memory:", None),
        ("http://127.0.0.1:5000", None),
        ("postgresql+psycopg2://u@db/mlflow", None),
    ],
)
def test_artifact_location(uri: str, expected: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Path, "cwd", classmethod(lambda cls: Path("/cwd")))
    assert artifact_location(uri, "exp") == expected


def test_failed_interrupted_and_reused_trials(store: str) -> None:
    t = MlflowTracker(store, "exp", "sw")
    t.open_device("host", {})
    t.start_trial("host", 0, CFG)
    t.finish_trial(TrialRecord("sw", "host", 0, CFG, TrialStatus.FAILED, reason="no kernel for aten.foo\n" * 1000))
    t.start_trial("host", 1, CFG)
    t.finish_trial(TrialRecord("sw", "host", 1, CFG, TrialStatus.INTERRUPTED, reason="agent lost"))
    reused = TrialRecord("sw", "host", 2, CFG, TrialStatus.REUSED, metrics={"accuracy": 0.9}, reused_from=0)
    t.finish_trial(reused)  # never started: the run is created on the way
    runs = _by_trial(store)
    failed = runs["0"]
    assert failed.info.status == "FAILED" and failed.data.tags["status"] == "failed"
    reason = failed.data.tags["failure_reason"]
    assert reason.startswith("no kernel for aten.foo\n") and len(reason) == 8000 and reason.endswith("…")
    assert failed.data.metrics == {}
    assert runs["1"].info.status == "KILLED" and runs["1"].data.tags["status"] == "interrupted"
    assert runs["2"].info.status == "FINISHED" and runs["2"].data.tags["reused_from"] == "0"
    assert runs["2"].data.params["config_digest"] == CFG.digest()
    # what each run ended with, so a resume can tell which runs disagree with the study
    assert t.logged("host") == {0: TrialStatus.FAILED, 1: TrialStatus.INTERRUPTED, 2: TrialStatus.REUSED}


def test_resume_reuses_runs_and_kills_those_left_running(store: str) -> None:
    first = MlflowTracker(store, "exp", "sw")
    first.open_device("host", {"cpu": "old"})
    first.start_trial("host", 0, CFG)
    first.finish_trial(_ok(0))
    first.start_trial("host", 1, CFG)  # the process dies here: run 1 and the parent stay RUNNING
    first.close_device("host")
    before = _by_trial(store)

    second = MlflowTracker(store, "exp", "sw")
    second.open_device("host", {"cpu": "new"})
    after = _by_trial(store)
    assert after["parent"].info.run_id == before["parent"].info.run_id
    assert after["parent"].info.status == "RUNNING" and after["parent"].data.tags["cpu"] == "new"
    assert after["1"].info.status == "KILLED" and after["1"].data.tags["status"] == "interrupted"
    assert second.logged("host") == {0: TrialStatus.OK, 1: TrialStatus.INTERRUPTED}

    second.start_trial("host", 0, CFG)  # already there: no duplicate
    second.finish_trial(_ok(1))  # the same number again: the same run
    second.start_trial("host", 2, CFG)
    runs = _runs(store)
    assert len(runs) == 4  # one parent, three trials
    by_trial = {r.data.tags.get("nnsweep.trial", "parent"): r for r in runs}
    assert by_trial["0"].info.run_id == before["0"].info.run_id
    assert by_trial["1"].info.run_id == before["1"].info.run_id and by_trial["1"].info.status == "FINISHED"
    assert by_trial["2"].info.status == "RUNNING"
    eid = by_trial["0"].info.experiment_id
    assert second.trial_links("host") == {
        n: f"#/experiments/{eid}/runs/{by_trial[str(n)].info.run_id}" for n in (0, 1, 2)
    }
    other = MlflowTracker(store, "exp", "another-sweep")  # same experiment, another sweep: its own runs
    other.open_device("host", {})
    assert other.logged("host") == {} and len(_runs(store)) == 5


def test_a_disowned_trial_is_deleted_and_its_number_gets_a_run_of_its_own(store: str) -> None:
    """What a study restored from an older copy leaves: the store has a result the study
    does not. Deleted (restorable in MLflow), it no longer stands in the UI beside the trial
    that measures the configuration again, and a trial given its number is a new run."""
    first = MlflowTracker(store, "exp", "sw")
    first.open_device("host", {})
    first.finish_trial(_ok(0))
    first.finish_trial(_ok(1, config=FP32))
    old = _by_trial(store)["1"].info.run_id

    second = MlflowTracker(store, "exp", "sw")
    second.open_device("host", {})
    second.disown_trial("host", 1)
    second.disown_trial("host", 7)  # none recorded: nothing to do
    assert second.logged("host") == {0: TrialStatus.OK}
    assert _client(store).get_run(old).info.lifecycle_stage == "deleted"
    second.finish_trial(_ok(1, latency=0.7))  # another configuration under the number: no param clash
    runs = _by_trial(store)
    assert runs["1"].info.run_id != old and runs["1"].data.params["quant.mode"] == "static_int8"
    assert runs["1"].data.metrics["latency_p50_ms"] == 0.7
    third = MlflowTracker(store, "exp", "sw")
    third.open_device("host", {})
    assert third.logged("host") == {0: TrialStatus.OK, 1: TrialStatus.OK}


def test_a_fresh_generation_of_a_sweep_gets_runs_of_its_own(store: str) -> None:
    old = MlflowTracker(store, "exp", "sw")
    old.bind("generation-1")
    old.open_device("host", {})
    old.finish_trial(_ok(0))
    new = MlflowTracker(store, "exp", "sw")
    new.bind("generation-2")  # `nnsweep run --fresh`: new studies, new sweep id
    new.open_device("host", {})
    assert new.logged("host") == {}
    new.finish_trial(_ok(0))
    runs = _runs(store)
    assert len(runs) == 4  # a parent and a trial run per generation; the old ones are kept
    assert {r.data.tags["nnsweep.sweep_id"] for r in runs} == {"generation-1", "generation-2"}
    again = MlflowTracker(store, "exp", "sw")
    again.bind("generation-1")
    again.open_device("host", {})
    assert again.logged("host") == {0: TrialStatus.OK}


def test_mark_front_tags_finished_trials_and_the_parent(store: str) -> None:
    t = MlflowTracker(store, "exp", "sw")
    t.open_device("host", {})
    t.finish_trial(_ok(0, 0.5))
    t.finish_trial(_ok(1, 0.4, config=FP32))
    t.finish_trial(_ok(2, 0.9))
    t.finish_trial(TrialRecord("sw", "host", 3, CFG, TrialStatus.FAILED, reason="boom"))
    t.start_trial("host", 4, CFG)  # still running

    resumed = MlflowTracker(store, "exp", "sw")  # labels and statuses come back from the store
    resumed.open_device("host", {})
    resumed.mark_front("host", [0, 1], 1)
    runs = _by_trial(store)
    assert {n: (runs[n].data.tags["pareto"], runs[n].data.tags["best"]) for n in "012"} == {
        "0": ("true", "false"),
        "1": ("true", "true"),
        "2": ("false", "false"),
    }
    assert "pareto" not in runs["3"].data.tags and "pareto" not in runs["4"].data.tags  # FAILED, KILLED
    assert runs["parent"].data.tags["best_trial"] == "1"
    assert runs["parent"].data.tags["best_config"] == FP32.label()

    resumed.mark_front("host", [0], None)  # a later front moves the tags
    runs = _by_trial(store)
    assert runs["1"].data.tags["pareto"] == "false" and runs["1"].data.tags["best"] == "false"
    assert runs["parent"].data.tags["best_trial"] == ""


def test_device_artifacts_and_many_capability_tags(store: str, tmp_path: Path) -> None:
    t = MlflowTracker(store, "exp", "sw")
    info = {f"cap.{i}": str(i) for i in range(150)}  # more than MLflow's 100 tags per log_batch
    t.open_device("host", info)
    report = tmp_path / "report-tmp123.html"
    report.write_text("<html></html>")
    plots = tmp_path / "plots"
    plots.mkdir()
    (plots / "front.json").write_text("{}")
    t.log_device_artifact("host", "report.html", report)
    t.log_device_artifact("host", "pareto/plots", plots)
    parent = _by_trial(store)["parent"]
    assert all(parent.data.tags[k] == v for k, v in info.items())
    client = _client(store)
    assert {f.path for f in client.list_artifacts(parent.info.run_id)} == {"report.html", "pareto"}
    assert [f.path for f in client.list_artifacts(parent.info.run_id, "pareto/plots")] == ["pareto/plots/front.json"]


def test_constructing_a_tracker_writes_nothing(store: str, tmp_path: Path) -> None:
    MlflowTracker(store, "exp", "sw")
    assert list(tmp_path.iterdir()) == []


def test_null_tracker_records_nothing(store: str, tmp_path: Path) -> None:
    t = NullTracker()
    t.open_device("host", {"arch": "x86_64"})
    t.start_trial("host", 0, CFG)
    t.finish_trial(_ok(0))
    t.mark_front("host", [0], 0)
    t.log_device_artifact("host", "report.html", tmp_path / "missing.html")
    assert t.logged("host") == {} and t.trial_links("host") == {}
    t.close_device("host")
    assert list(tmp_path.iterdir()) == []


def test_background_tracker_writes_in_order_and_flushes(store: str) -> None:
    t = BackgroundTracker(MlflowTracker(store, "exp", "sw"))
    t.open_device("host", {})
    for n in range(3):
        t.start_trial("host", n, CFG)
        t.finish_trial(_ok(n))
    assert t.logged("host") == dict.fromkeys(range(3), TrialStatus.OK)  # logged() waits for the queue
    assert set(t.trial_links("host")) == {0, 1, 2}
    t.close_device("host")
    t.close()
    assert {r.info.status for r in _runs(store)} == {"FINISHED"}


def test_a_quiet_background_tracker_holds_its_writes_until_released() -> None:
    import threading

    from nnsweep.tracking import BackgroundTracker, NullTracker

    class Counting(NullTracker):
        def __init__(self) -> None:
            self.bound = threading.Event()

        def start_trial(self, device: str, number: int, config: object) -> None:  # type: ignore[override]
            self.bound.set()

    inner = Counting()
    tracker = BackgroundTracker(inner)
    tracker.quiet(True)  # the machine measures
    tracker.start_trial("host", 0, None)  # type: ignore[arg-type]
    assert not inner.bound.wait(0.3)  # held: nothing written beside the timed runs
    tracker.quiet(False)
    assert inner.bound.wait(5)
    tracker.close()


def test_an_outage_loses_no_trial_the_writes_land_in_order_once_the_server_is_back() -> None:
    import dataclasses

    from nnsweep.core.config import DeploymentConfig
    from nnsweep.core.results import TrialRecord, TrialStatus
    from nnsweep.tracking import BackgroundTracker, NullTracker

    class Flaky(NullTracker):
        """A tracking server that is away while ``down`` (every write raises), with what landed."""

        def __init__(self) -> None:
            self.down = True
            self.landed: list[tuple[str, int]] = []

        def _write(self, what: str, number: int) -> None:
            if self.down:
                raise ConnectionError("Connection refused")
            self.landed.append((what, number))

        def start_trial(self, device: str, number: int, config: object) -> None:  # type: ignore[override]
            self._write("start", number)

        def finish_trial(self, record: TrialRecord) -> None:
            self._write("finish", record.number)

        def close_device(self, device: str, status: str = "FINISHED") -> None:
            self._write("close", -1)

    record = TrialRecord("s", "host", 0, DeploymentConfig("onnxruntime"), TrialStatus.OK)
    inner = Flaky()
    tracker = BackgroundTracker(inner, drain_s=5.0)
    for n in range(3):  # the server is away for three trials
        tracker.start_trial("host", n, record.config)
        tracker.finish_trial(dataclasses.replace(record, number=n))
    tracker.flush()
    assert inner.landed == [] and tracker.unlogged == 3
    inner.down = False  # back: the next write brings the kept ones first, in order
    tracker.start_trial("host", 3, record.config)
    tracker.flush()
    assert inner.landed == [
        ("start", 0),
        ("finish", 0),
        ("start", 1),
        ("finish", 1),
        ("start", 2),
        ("finish", 2),
        ("start", 3),
    ]
    assert tracker.close() == 0


def test_a_server_still_away_at_the_end_is_counted_not_fatal() -> None:
    from nnsweep.core.config import DeploymentConfig
    from nnsweep.core.results import TrialRecord, TrialStatus
    from nnsweep.tracking import BackgroundTracker, NullTracker

    class Away(NullTracker):
        def finish_trial(self, record: TrialRecord) -> None:
            raise ConnectionError("Connection refused")

        def close_device(self, device: str, status: str = "FINISHED") -> None:
            raise ConnectionError("Connection refused")

        def logged(self, device: str) -> dict:  # type: ignore[type-arg]
            raise ConnectionError("Connection refused")

    tracker = BackgroundTracker(Away(), drain_s=1.5)
    tracker.finish_trial(TrialRecord("s", "host", 0, DeploymentConfig("onnxruntime"), TrialStatus.OK))
    tracker.close_device("host")  # does not raise: kept
    assert tracker.logged("host") == {}  # a read-back answers as if nothing were logged
    assert tracker.close() == 1  # tried again with backoff for drain_s, then counted


class _RepliesLost:
    """An ``MlflowClient`` whose named calls reach the store and then raise once each, as a
    call does whose answer an outage swallowed (the server wrote; the client never heard)."""

    def __init__(self, inner: Any, lost: set[str]) -> None:
        self.inner, self.lost = inner, lost

    def __getattr__(self, name: str) -> Any:
        call = getattr(self.inner, name)
        if name not in self.lost:
            return call

        def lost(*args: Any, **kwargs: Any) -> Any:
            call(*args, **kwargs)
            self.lost.discard(name)
            raise ConnectionError(f"{name}: connection reset by peer")

        return lost


@pytest.mark.parametrize("lost", ["create_run", "log_batch"])
def test_a_trial_start_tried_again_after_a_lost_reply_makes_one_run(store: str, lost: str) -> None:
    """The background tracker tries a failed start again; the server may have done part of it
    (found by tests/test_team.py: a trial run left RUNNING beside its FINISHED twin)."""
    t = MlflowTracker(store, "exp", "sw")
    t.open_device("host", {})
    t._experiment._client = _RepliesLost(t.client, {lost})
    with pytest.raises(ConnectionError):
        t.start_trial("host", 0, CFG)
    t.start_trial("host", 0, CFG)  # tried again, as BackgroundTracker does
    t.finish_trial(_ok(0))
    trials = [r for r in _runs(store) if r.data.tags.get("nnsweep.kind") == "trial"]
    assert [(r.data.tags["nnsweep.trial"], r.info.status) for r in trials] == [("0", "FINISHED")]
    assert trials[0].data.params["config_digest"] == CFG.digest()
    assert trials[0].data.params["quant.mode"] == "static_int8"
