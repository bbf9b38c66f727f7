"""A new sqlite MLflow database, created whole or not at all.

MLflow creates a sqlite store's tables the first time a client opens it: its initial
schema, then its alembic migrations (67 in MLflow 3.17), each committed on its own. A
full disk part way leaves a database that is neither empty nor current, and every later
open fails on the migration it stopped in (``table _alembic_tmp_model_version_tags
already exists``) until the user finds and removes the file. :func:`create_whole` runs
MLflow's own table creation on a file beside the database and links it into place only
once it is complete, so the database is whole or absent, and a failure says which file
and why.

A database half-made before (by an nnsweep older than this, or by MLflow itself) is told
apart from one MLflow can open or upgrade by :func:`why_mlflow_cannot_open`, which does on a
copy what MLflow would do to the file.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nnsweep.core.errors import InfrastructureError
from nnsweep.tracking.uris import database_file

__all__ = ["TrackingStoreNotCreated", "create_whole", "runs_held", "why_mlflow_cannot_open"]


# What MLflow's creation meets in a schema made part way: a table, index or column that a
# migration it runs again had already made.
_HALF_MADE = ("already exists", "duplicate column name")


class TrackingStoreNotCreated(InfrastructureError):
    """A new sqlite MLflow database could not be created (a full disk, a read-only folder)."""


def create_whole(uri: str) -> bool:
    """Create the sqlite database of ``uri`` with MLflow's tables unless it exists.

    Returns:
        Whether this call created it (another process may have, meanwhile; then its file is used).

    Raises:
        TrackingStoreNotCreated: the tables could not be written; no database is left at the path.
    """
    path = database_file(uri)
    if path is None or path.exists():
        return False
    import sqlalchemy
    import sqlalchemy.exc

    try:
        from mlflow.store.db.utils import _initialize_tables  # MLflow's own: its schema and migrations
    except ImportError:  # another MLflow: it creates the database itself, as before
        return False

    _drop_abandoned(path)
    building = path.with_name(f".{path.name}.{os.getpid()}.creating")
    try:
        engine = sqlalchemy.create_engine(f"sqlite:///{building}")
        try:
            _initialize_tables(engine)
        finally:
            engine.dispose()
        try:
            os.link(building, path)  # never over a database another process created meanwhile
        except FileExistsError:
            return False
        return True
    except (OSError, sqlalchemy.exc.SQLAlchemyError) as exc:
        reason = getattr(exc, "orig", None) or exc
        raise TrackingStoreNotCreated(
            f"cannot create the MLflow database at {path}: {reason}; nothing was written there: make room and run again"
        ) from exc
    finally:
        for leftover in (building, building.with_name(building.name + "-journal")):
            with contextlib.suppress(OSError):
                leftover.unlink()


def _drop_abandoned(path: Path) -> None:
    """Remove what a process killed while it created ``path``'s tables left beside it."""
    import psutil

    for leftover in path.parent.glob(f".{path.name}.*.creating*"):
        pid = leftover.name[len(path.name) + 2 :].split(".", 1)[0]
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            with contextlib.suppress(OSError):
                leftover.unlink()


def why_mlflow_cannot_open(path: Path) -> str | None:
    """Why MLflow cannot open the existing sqlite database ``path``, or None if it can.

    MLflow creates the tables a database lacks (its initial schema, then its migrations)
    when a client opens it: that upgrades a database an older MLflow made, and fails on one
    whose creation or upgrade stopped part way (``table spans already exists``), on every
    open. Only when MLflow would create tables is anything tried: on a copy (SQLite's
    backup), which is removed; the file itself is only read."""
    import sqlite3
    import tempfile

    if _at_mlflow_head(path):
        return None  # complete: MLflow creates nothing (decided without importing MLflow)
    import sqlalchemy
    import sqlalchemy.exc

    try:
        from mlflow.store.db.utils import _all_tables_exist, _initialize_tables, _is_empty_database
    except ImportError:  # another MLflow: it reports the database itself
        return None
    engine = sqlalchemy.create_engine("sqlite://", creator=lambda: _read_only(path))
    try:
        if _is_empty_database(engine) or _all_tables_exist(engine):
            return None  # MLflow creates every table, or none
    except sqlalchemy.exc.SQLAlchemyError:
        return None  # unreadable or locked: reported where it is opened
    finally:
        engine.dispose()
    with tempfile.TemporaryDirectory(prefix="nnsweep-mlflow-") as folder:
        copy = Path(folder) / "copy.db"
        try:
            with contextlib.closing(_read_only(path)) as source, contextlib.closing(sqlite3.connect(copy)) as target:
                source.backup(target)
        except (OSError, sqlite3.Error):
            return None  # no room for the copy, or the file is busy: MLflow reports what it meets
        trial = sqlalchemy.create_engine(f"sqlite:///{copy}")
        try:
            with _quiet():  # MLflow's and alembic's lines about the copy would read as the file's
                _initialize_tables(trial)
        except sqlalchemy.exc.SQLAlchemyError as exc:
            reason = str(getattr(exc, "orig", None) or exc).splitlines()[0]
            if not any(sign in reason for sign in _HALF_MADE):
                return None  # not the mark of a schema made part way (the copy's own disk full ...)
            return f"MLflow cannot create the tables it lacks ({reason}): its creation or upgrade stopped part way"
        finally:
            trial.dispose()
    return None


def _at_mlflow_head(path: Path) -> bool:
    """Whether the database records the newest schema revision of the installed MLflow's
    migrations, read from its migration files (no import of MLflow: it takes seconds). A
    revision is recorded only after its migration completed, so such a database is whole.
    False whenever that cannot be told (then MLflow's own test decides)."""
    import importlib.util
    import re
    import sqlite3

    spec = importlib.util.find_spec("mlflow")  # finds the package without running it
    if spec is None or not spec.submodule_search_locations:
        return False
    versions = Path(next(iter(spec.submodule_search_locations))) / "store" / "db_migrations" / "versions"
    made, replaced = set(), set()
    try:
        for script in versions.glob("*.py"):
            text = script.read_text()
            made.update(re.findall(r"^revision\s*=\s*[\"']([0-9a-z_]+)[\"']", text, re.M))
            for line in re.findall(r"^down_revision\s*=\s*(.+)$", text, re.M):
                replaced.update(re.findall(r"[\"']([0-9a-z_]+)[\"']", line))
        with contextlib.closing(_read_only(path)) as db:
            recorded = [row[0] for row in db.execute("SELECT version_num FROM alembic_version")]
    except (OSError, UnicodeDecodeError, sqlite3.Error):
        return False
    heads = made - replaced
    return len(heads) == 1 and recorded == list(heads)


def runs_held(path: Path) -> int | None:
    """How many runs the MLflow database ``path`` holds (None: it has no runs table or is unreadable)."""
    import sqlite3

    try:
        with contextlib.closing(_read_only(path)) as db:
            return int(db.execute("SELECT count(*) FROM runs").fetchone()[0])
    except sqlite3.Error:
        return None


def _read_only(path: Path) -> Any:
    import sqlite3

    return sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=5)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """MLflow's and alembic's log lines and warnings held back."""
    import logging
    import warnings

    loggers = [logging.getLogger(name) for name in ("mlflow.store.db.utils", "alembic")]
    levels = [logger.level for logger in loggers]
    try:
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
