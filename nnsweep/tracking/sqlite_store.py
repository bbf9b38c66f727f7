"""A new sqlite MLflow database, created whole or not at all.

MLflow creates a sqlite store's tables the first time a client opens it: its initial
schema, then its alembic migrations (67 in MLflow 3.17), each committed on its own. A
full disk part way leaves a database that is neither empty nor current, and every later
open fails on the migration it stopped in (``table _alembic_tmp_model_version_tags
already exists``) until the user finds and removes the file. :func:`create_whole` runs
MLflow's own table creation on a file beside the database and links it into place only
once it is complete, so the database is whole or absent, and a failure says which file
and why.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from nnsweep.core.errors import InfrastructureError
from nnsweep.tracking.uris import database_file

__all__ = ["TrackingStoreNotCreated", "create_whole"]


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
