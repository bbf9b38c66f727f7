"""A new sqlite MLflow database is created whole or not at all (nnsweep.tracking.sqlite_store).
The full-disk case itself, on a real tmpfs: tests/test_full_disk.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from nnsweep.tracking.sqlite_store import TrackingStoreNotCreated, create_whole
from nnsweep.tracking.uris import database_file


def test_a_created_database_is_mlflow_s_and_an_existing_one_is_left_alone(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    db = tmp_path / "mlflow.db"
    uri = f"sqlite:///{db}"
    assert create_whole(uri) is True
    assert [p.name for p in tmp_path.iterdir()] == ["mlflow.db"]  # nothing of the building left
    client = MlflowClient(tracking_uri=uri)  # opens it without creating or migrating anything
    experiment = client.create_experiment("x")
    assert client.get_experiment(experiment).name == "x"
    before = db.read_bytes()
    assert create_whole(uri) is False
    assert db.read_bytes() == before


@pytest.mark.parametrize("uri", ["sqlite:///relative.db", "sqlite:///:memory:", "http://127.0.0.1:5000", "file:///x"])
def test_only_an_absolute_sqlite_file_is_created_here(
    uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert database_file(uri) is None
    assert create_whole(uri) is False
    assert list(tmp_path.iterdir()) == []


def test_a_database_that_cannot_be_written_is_named_and_nothing_is_left(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    db = tmp_path / "a-file" / "mlflow.db"  # its folder is a file: no database can be written there
    with pytest.raises(TrackingStoreNotCreated, match=f"cannot create the MLflow database at {db}: "):
        create_whole(f"sqlite:///{db}")
    assert [p.name for p in tmp_path.iterdir()] == ["a-file"]


def test_what_a_killed_creation_left_is_removed_and_a_live_one_s_is_not(tmp_path: Path) -> None:
    import subprocess
    import sys

    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = tmp_path / f".mlflow.db.{int(ended.stdout)}.creating"
    gone.write_bytes(b"half")
    (tmp_path / f"{gone.name}-journal").write_bytes(b"half")
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as running:
        building = tmp_path / f".mlflow.db.{running.pid}.creating"
        building.write_bytes(b"under way")
        try:
            assert create_whole(f"sqlite:///{tmp_path / 'mlflow.db'}") is True
        finally:
            running.kill()
    assert not gone.exists() and not (tmp_path / f"{gone.name}-journal").exists()
    assert building.exists()  # another process's creation under way is left to it
    assert (tmp_path / "mlflow.db").exists()
