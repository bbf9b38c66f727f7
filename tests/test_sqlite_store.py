"""A new sqlite MLflow database is created whole or not at all (nnsweep.tracking.sqlite_store).
The full-disk case itself, on a real tmpfs: tests/test_full_disk.py."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from nnsweep.tracking.sqlite_store import TrackingStoreNotCreated, create_whole, runs_held, why_mlflow_cannot_open
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


def _revisions(uri: str) -> list[str]:
    """MLflow's schema revisions, oldest first."""
    from alembic.script import ScriptDirectory
    from mlflow.store.db.utils import _get_alembic_config

    script = ScriptDirectory.from_config(_get_alembic_config(uri))
    return [r.revision for r in reversed(list(script.walk_revisions()))]


def _half_made(db: Path) -> None:
    """What MLflow's own creation leaves when the disk fills part way (here SQLite's page
    limit stands for the disk: 40 pages of the ~100 a whole database takes)."""
    import sqlalchemy
    import sqlalchemy.exc
    from mlflow.store.db.utils import _initialize_tables

    engine = sqlalchemy.create_engine(f"sqlite:///{db}")
    sqlalchemy.event.listen(engine, "connect", lambda con, _: con.execute("PRAGMA max_page_count = 40"))
    with pytest.raises(sqlalchemy.exc.OperationalError, match="database or disk is full"):
        _initialize_tables(engine)
    engine.dispose()


@pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")  # MLflow's migrations warn on sqlite
def test_a_database_whose_creation_stopped_part_way_is_told_apart_and_left_as_it_was(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    db = tmp_path / "mlflow.db"
    _half_made(db)
    with pytest.raises(Exception, match="already exists"):  # what MLflow does with it, at every open
        MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments()
    before = db.read_bytes()
    reason = why_mlflow_cannot_open(db)
    assert reason is not None and "its creation or upgrade stopped part way" in reason, reason
    assert db.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["mlflow.db"]
    assert runs_held(db) == 0


@pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")
def test_a_database_an_older_mlflow_made_is_one_mlflow_upgrades(tmp_path: Path) -> None:
    import sqlalchemy
    from alembic import command
    from mlflow.store.db.utils import InitialBase, _get_alembic_config
    from mlflow.tracking import MlflowClient

    db = tmp_path / "mlflow.db"
    uri = f"sqlite:///{db}"
    engine = sqlalchemy.create_engine(uri)
    InitialBase.metadata.create_all(engine)
    with engine.begin() as connection:
        config = _get_alembic_config(uri)
        config.attributes["connection"] = connection
        command.upgrade(config, _revisions(uri)[5])  # an older MLflow's schema, complete
    engine.dispose()
    assert _revision(db) == _revisions(uri)[5]
    before = db.read_bytes()
    assert why_mlflow_cannot_open(db) is None
    assert db.read_bytes() == before  # only a copy was upgraded
    client = MlflowClient(tracking_uri=uri)  # MLflow upgrades the file itself
    client.create_experiment("x")
    assert _revision(db) == _revisions(uri)[-1] and runs_held(db) == 0


def _revision(db: Path) -> str:
    import sqlite3

    with contextlib.closing(sqlite3.connect(db)) as con:
        return str(con.execute("SELECT version_num FROM alembic_version").fetchone()[0])


def test_a_complete_or_empty_database_is_not_tried(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "mlflow.db"
    create_whole(f"sqlite:///{db}")
    assert why_mlflow_cannot_open(db) is None
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    assert why_mlflow_cannot_open(empty) is None and runs_held(empty) is None


def test_a_sweep_on_a_half_made_database_is_refused_by_name_before_anything_starts(tmp_path: Path) -> None:
    """It ended on `OperationalError: (sqlite3.OperationalError) table datasets already exists`
    (exit 1), after the run lock and the study were written; every later run the same."""
    import subprocess
    import sys

    db = tmp_path / "mlflow.db"
    _half_made(db)
    before = db.read_bytes()
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\nmodel: digits\ntracking: {uri: 'sqlite:///mlflow.db'}\n")
    command = [sys.executable, "-m", "nnsweep", "--cache-dir", str(tmp_path / "cache"), "run", str(spec)]
    proc = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (
        f"nnsweep: error: tracking.uri: '{db}': MLflow cannot create the tables it lacks (table datasets already "
        "exists): its creation or upgrade stopped part way; it holds no runs: remove it (or move it aside) and run "
        "again\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db", "s.yaml"] and db.read_bytes() == before


def test_a_half_made_database_that_holds_runs_is_not_called_disposable(tmp_path: Path) -> None:
    """An upgrade stopped part way leaves the runs the database held: restore, never remove."""
    import sqlite3

    from nnsweep.core.errors import SpecError
    from nnsweep.sweep.preflight import check_tracking

    db = tmp_path / "mlflow.db"
    _half_made(db)
    with contextlib.closing(sqlite3.connect(db)) as con, con:
        con.execute("INSERT INTO runs (run_uuid, experiment_id, lifecycle_stage) VALUES ('r1', 0, 'active')")
    with pytest.raises(SpecError, match="it holds 1 run: restore it from a copy, or move it aside"):
        check_tracking(f"sqlite:///{db}")


def test_a_trial_that_fails_for_its_own_reasons_refuses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy's own disk full (or any failure that is not a schema made part way) says
    nothing of the file: it is left for MLflow to open and report."""
    import sqlite3

    import sqlalchemy.exc

    db = tmp_path / "mlflow.db"
    _half_made(db)

    def full(engine: object) -> None:
        raise sqlalchemy.exc.OperationalError("INSERT", {}, sqlite3.OperationalError("database or disk is full"))

    monkeypatch.setattr("mlflow.store.db.utils._initialize_tables", full)
    assert why_mlflow_cannot_open(db) is None


def test_a_complete_database_is_told_whole_without_importing_mlflow(tmp_path: Path) -> None:
    """The preflight runs before anything starts: MLflow's import (seconds) would hold back
    the executor's start on every run with an existing database."""
    import subprocess
    import sys

    from nnsweep.tracking.sqlite_store import _at_mlflow_head

    db = tmp_path / "mlflow.db"
    create_whole(f"sqlite:///{db}")
    assert _at_mlflow_head(db)
    probe = (
        "import sys; from nnsweep.sweep.preflight import check_tracking; "
        f"check_tracking('sqlite:///{db}'); print(sorted(m for m in sys.modules if m.split('.')[0] == 'mlflow'))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
    half = tmp_path / "half.db"
    _half_made(half)
    assert not _at_mlflow_head(half)  # MLflow's own test decides
