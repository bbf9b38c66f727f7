"""Tracking URIs: a relative sqlite URI made absolute, and where a new experiment's artifacts go."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

__all__ = ["absolute_sqlite_uri", "artifact_location", "database_file"]


def absolute_sqlite_uri(uri: str, base: Path | None = None) -> str:
    """``sqlite:///mlflow.db`` (relative to the working directory) as an absolute URI.

    MLflow reads ``sqlite:///x.db`` relative to the working directory and
    ``sqlite:////abs/x.db`` as absolute. It caches database engines by URI, so a
    relative one would keep pointing at the first directory it was used from.

    Args:
        uri: any tracking URI; only relative sqlite ones change.
        base: the directory a relative path is relative to (default: the working directory).

    Example:
        >>> absolute_sqlite_uri("sqlite:///runs/mlflow.db", Path("/work"))
        'sqlite:////work/runs/mlflow.db'
    """
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri.startswith(prefix + "/") and not uri.startswith(prefix + ":memory:"):
        return prefix + str((base or Path.cwd()) / uri[len(prefix) :])
    return uri


def artifact_location(uri: str, experiment: str) -> str | None:
    """Where a new experiment's artifacts go: ``mlartifacts/<experiment>`` beside a sqlite database.

    MLflow's default would be ``./mlruns/<experiment id>`` in the first client's working
    directory, wherever the database is. Relative sqlite URIs are resolved against the
    working directory. Returns an absolute ``file://`` URI, or ``None`` (MLflow's default)
    for anything that is not a sqlite file: a server keeps its own store, a file store keeps
    artifacts inside its directory.

    Example:
        >>> artifact_location("sqlite:////data/sweeps/mlflow.db", "digits/fast")
        'file:///data/sweeps/mlartifacts/digits_fast'
    """
    db = database_file(absolute_sqlite_uri(uri))
    if db is None:
        return None
    folder = re.sub(r"[^A-Za-z0-9._-]+", "_", experiment).strip(".") or "experiment"
    return (db.parent / "mlartifacts" / folder).as_uri()


def database_file(uri: str) -> Path | None:
    """The file of an absolute sqlite URI; ``None`` for anything else (a relative or
    in-memory one, a server, another database).

    Example:
        >>> database_file("sqlite:////data/sweeps/mlflow.db?timeout=30")
        PosixPath('/data/sweeps/mlflow.db')
    """
    prefix = "sqlite:////"
    if not uri.startswith(prefix):
        return None
    return Path(unquote("/" + uri[len(prefix) :].split("?", 1)[0]))
