"""MLflow tracking on a real sqlite store."""

from __future__ import annotations

from pathlib import Path

import pytest

from nnsweep.config import DeploymentConfig, QuantConfig
from nnsweep.results import TrialRecord, TrialStatus
from nnsweep.tracking import MlflowTracker, NullTracker, absolute_sqlite_uri

CFG = DeploymentConfig("executorch", ("xnnpack",), QuantConfig("static_int8"))


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(tmp_path)
    return "sqlite:///mlflow.db"  # relative, as specs write it: the tracker resolves it


def _ok(number: int, latency: float = 0.5) -> TrialRecord:
    return TrialRecord(
        "sw", "host", number, CFG, TrialStatus.OK,
        metrics={"accuracy": 0.97, "latency_p50_ms": latency, "sqnr_db": float("inf")},
        partitions={"count": 2, "sizes": [12, 3]}, samples_ms=(0.5, 0.6), feasible=True,
        tags={"artifact_sha256": "ab" * 32},
    )  # fmt: skip


def _runs(uri: str) -> list:  # type: ignore[type-arg]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(absolute_sqlite_uri(uri))
    exp = client.get_experiment_by_name("exp")
    return client.search_runs([exp.experiment_id]) if exp else []


def test_parent_and_child_runs_carry_params_metrics_tags_and_artifacts(store: str) -> None:
    from mlflow.tracking import MlflowClient

    t = MlflowTracker(store, "exp", "sw")
    t.open_device("host", {"arch": "x86_64"})
    t.start_trial("host", 0, CFG)
    t.finish_trial(_ok(0))
    t.finish_trial(TrialRecord("sw", "host", 1, CFG, TrialStatus.FAILED, reason="no kernel for aten.foo"))
    t.mark_front("host", [0], 0)
    t.close_device("host")
    runs = {r.data.tags.get("nnsweep.trial", "parent"): r for r in _runs(store)}
    parent, ok, failed = runs["parent"], runs["0"], runs["1"]
    assert parent.data.tags["arch"] == "x86_64" and parent.info.status == "FINISHED"
    assert ok.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert ok.data.params["quant.mode"] == "static_int8" and ok.data.params["config_digest"] == CFG.digest()
    assert ok.data.metrics["latency_p50_ms"] == 0.5 and "sqnr_db" not in ok.data.metrics  # inf is not logged
    assert ok.data.tags["partitions"] == "2 (sizes 12,3)" and ok.data.tags["runtime"] == "executorch"
    assert (ok.data.tags["pareto"], ok.data.tags["best"]) == ("true", "true")
    assert failed.info.status == "FAILED" and failed.data.tags["failure_reason"] == "no kernel for aten.foo"
    assert failed.data.tags["pareto"] == "false"
    files = {f.path for f in MlflowClient(absolute_sqlite_uri(store)).list_artifacts(ok.info.run_id)}
    assert files == {"config.json", "partitions.json", "latency_samples.json"}


def test_resume_reuses_runs_and_kills_those_left_running(store: str) -> None:
    first = MlflowTracker(store, "exp", "sw")
    first.open_device("host", {})
    first.start_trial("host", 0, CFG)
    first.finish_trial(_ok(0))
    first.start_trial("host", 1, CFG)  # the process dies here: run 1 stays RUNNING

    second = MlflowTracker(store, "exp", "sw")
    second.open_device("host", {})
    second.start_trial("host", 0, CFG)  # already there: no duplicate
    runs = _runs(store)
    assert len(runs) == 3  # one parent, two trials
    by_trial = {r.data.tags.get("nnsweep.trial"): r for r in runs}
    assert by_trial["1"].info.status == "KILLED"
    assert by_trial["0"].info.status == "FINISHED"


def test_constructing_a_tracker_writes_nothing(store: str, tmp_path: Path) -> None:
    MlflowTracker(store, "exp", "sw")
    assert not (tmp_path / "mlflow.db").exists()


def test_null_tracker_accepts_the_protocol() -> None:
    t = NullTracker()
    t.open_device("host", {})
    t.start_trial("host", 0, CFG)
    t.finish_trial(_ok(0))
    t.mark_front("host", [0], 0)
    t.close_device("host")


def test_background_tracker_writes_in_order_and_flushes(store: str) -> None:
    from nnsweep.tracking import BackgroundTracker

    t = BackgroundTracker(MlflowTracker(store, "exp", "sw"))
    t.open_device("host", {})
    for n in range(3):
        t.start_trial("host", n, CFG)
        t.finish_trial(_ok(n))
    assert t.logged("host") == {0, 1, 2}  # logged() waits for the queue
    t.close_device("host")
    t.close()
    assert {r.info.status for r in _runs(store)} == {"FINISHED"}
