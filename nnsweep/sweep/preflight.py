"""Check a sweep's storage and tracking URIs before anything starts.

Otherwise a wrong ``storage:`` or ``tracking.uri`` would surface late and loud (a long
SQLAlchemy traceback, or MLflow retrying an unreachable server for minutes after Ray
started and the model loaded). These checks run first, take a few seconds at most (``timeout_s``), write
nothing, and fail with one :class:`~nnsweep.core.errors.SpecError` naming the field.

What is checked:
    ``journal``                 the folder the journal goes in can be created and written
    ``sqlite:///FILE``          the file's folder exists and is writable; an existing file is SQLite
                                (for tracking: one MLflow can open, not one whose creation stopped part way)
    other database URLs         the dialect and its driver are installed, and the server answers
    ``http(s)://`` (tracking)   the MLflow server answers ``/health``
    ``databricks`` (tracking)   accepted as is (its credentials live in its own config)
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from nnsweep.core.errors import SpecError

__all__ = ["TIMEOUT_S", "check_spec", "check_storage", "check_tracking"]

TIMEOUT_S = 5.0
"""How long a server may take to answer before the URI is reported as unreachable."""

_SQLITE_MAGIC = b"SQLite format 3\x00"
_TRACKING_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql", "http", "https")


def check_spec(spec: Any, *, tracking: bool = True, timeout_s: float = TIMEOUT_S) -> None:
    """Check ``spec.storage`` and (unless ``tracking`` is off) ``spec.tracking.uri``.

    Raises:
        SpecError: naming ``storage`` or ``tracking.uri`` and what is wrong.
    """
    check_storage(spec.storage, spec.state_dir, timeout_s=timeout_s)
    if tracking:
        check_tracking(spec.tracking.uri, timeout_s=timeout_s)


def check_storage(storage: str, state_dir: Path, *, timeout_s: float = TIMEOUT_S) -> None:
    """``journal`` (a file in ``state_dir``) or a database URL Optuna can open."""
    if storage == "journal":
        _writable_folder(state_dir, "storage", "the sweep's state folder")
        return
    _check_database(storage, "storage", timeout_s)


def check_tracking(uri: str, *, timeout_s: float = TIMEOUT_S) -> None:
    """A tracking URI MLflow can use: sqlite, a database URL, an http(s) server, databricks."""
    if uri in ("databricks", "databricks-uc") or uri.startswith(("databricks://", "databricks-uc://")):
        return
    scheme = urlsplit(uri).scheme.split("+")[0].lower() if "://" in uri else ""
    if scheme not in _TRACKING_SCHEMES:
        raise SpecError(
            "tracking.uri",
            f"{_short(uri)}: use sqlite:///mlflow.db, a database URL (postgresql://...) or http(s)://SERVER",
        )
    if scheme in ("http", "https"):
        _check_server(uri, timeout_s)
        return
    if (path := _check_database(uri, "tracking.uri", timeout_s)) is not None:
        _check_mlflow_can_open(path)


def _check_mlflow_can_open(path: Path) -> None:
    """An existing MLflow database whose creation or upgrade stopped part way (a full disk,
    a killed process): MLflow fails on it at every open, after the sweep has started."""
    from nnsweep.tracking.sqlite_store import runs_held, why_mlflow_cannot_open

    if (reason := why_mlflow_cannot_open(path)) is None:
        return
    runs = runs_held(path)
    if runs == 0:
        advice = "it holds no runs: remove it (or move it aside) and run again"
    else:
        held = "runs" if runs is None else f"{runs} run{'s' if runs != 1 else ''}"
        advice = f"it holds {held}: restore it from a copy, or move it aside to start a new database"
    raise SpecError("tracking.uri", f"{str(path)!r}: {reason}; {advice}")


def _short(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return line if len(line) <= 160 else line[:157] + "..."


def _writable_folder(folder: Path, field: str, what: str) -> None:
    """``folder`` exists and is writable, or its nearest existing ancestor is (it will be created)."""
    probe = folder
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise SpecError(field, f"{what} {str(folder)!r} cannot be created: {str(probe)!r} is not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise SpecError(field, f"{what} {str(folder)!r} is not writable (no write permission on {str(probe)!r})")


def _check_database(url_text: str, field: str, timeout_s: float) -> Path | None:
    """Check a database URL; returns the file of an sqlite database that exists (else None)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        url = make_url(url_text)
    except (ArgumentError, ValueError) as exc:
        raise SpecError(field, f"{_short(url_text)} is not a database URL: {_first_line(exc)}") from None
    shown = url.render_as_string(hide_password=True)
    try:
        url.get_dialect()
    except NoSuchModuleError:
        raise SpecError(
            field, f"unknown database {url.drivername!r} in {_short(shown)}; use sqlite:///FILE or postgresql://..."
        ) from None
    except ImportError as exc:
        raise SpecError(field, f"the driver for {url.drivername!r} is not installed: {_first_line(exc)}") from None
    if url.get_backend_name() == "sqlite":
        return _check_sqlite(url.database, field)
    _connect(url, shown, field, timeout_s)
    return None


def _check_sqlite(database: str | None, field: str) -> Path | None:
    """Check an sqlite database's file; returns it if it exists and has content (else None)."""
    if not database or database == ":memory:":
        raise SpecError(field, "an in-memory sqlite database keeps nothing; give a file: sqlite:///name.db")
    path = Path(database)
    if not path.is_absolute():
        path = Path.cwd() / path  # sqlite, MLflow and Optuna read a relative file from the working directory
    if path.exists():
        if path.is_dir():
            raise SpecError(field, f"{str(path)!r} is a folder, not a database file")
        try:
            with path.open("rb") as f:
                head = f.read(len(_SQLITE_MAGIC))
        except OSError as exc:
            raise SpecError(field, f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
        if head and head != _SQLITE_MAGIC:
            raise SpecError(field, f"{str(path)!r} exists and is not an SQLite database")
        if head:
            _check_readable(path, field)
        if not os.access(path, os.W_OK):
            raise SpecError(field, f"{str(path)!r} is not writable")
        return path if head else None
    if not path.parent.is_dir():
        raise SpecError(field, f"the folder of {str(path)!r} does not exist")
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise SpecError(field, f"cannot create {str(path)!r}: its folder is not writable")
    return None


def _check_readable(path: Path, field: str) -> None:
    """An SQLite file whose pages cannot be read (cut short, overwritten): refused here, where
    MLflow and Optuna would fail on it with ``DatabaseError: file is not a database``."""
    import contextlib
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=5)) as db:
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.OperationalError:  # locked or busy: another process's, not a damaged file
        return
    except sqlite3.DatabaseError as exc:
        raise SpecError(
            field, f"{str(path)!r} is a damaged SQLite database ({exc}): restore it or move it aside"
        ) from None


def _bounded(what: str, field: str, timeout_s: float, call: Any) -> None:
    """Run ``call`` in a daemon thread; a SpecError if it raises or does not return in time."""
    outcome: list[BaseException | None] = []

    def target() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as exc:  # reported below as the field's error
            outcome.append(exc)

    thread = threading.Thread(target=target, name="nnsweep-preflight", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not outcome:
        raise SpecError(field, f"{what} did not answer within {timeout_s:g} s")
    if outcome[0] is not None:
        raise SpecError(field, f"cannot reach {what}: {_first_line(outcome[0])}")


def _connect(url: Any, shown: str, field: str, timeout_s: float) -> None:
    from sqlalchemy import create_engine

    connect_args: dict[str, Any] = {}
    if url.get_backend_name() in ("postgresql", "mysql"):
        connect_args["connect_timeout"] = max(1, int(timeout_s))

    def connect() -> None:
        engine = create_engine(url, connect_args=connect_args, poolclass=_null_pool())
        try:
            with engine.connect():
                pass
        finally:
            engine.dispose()

    _bounded(_short(shown), field, timeout_s, connect)


def _null_pool() -> Any:
    from sqlalchemy.pool import NullPool

    return NullPool


def _check_server(uri: str, timeout_s: float) -> None:
    import urllib.error
    import urllib.request

    health = uri.rstrip("/") + "/health"

    def get() -> None:
        try:
            with urllib.request.urlopen(health, timeout=timeout_s) as reply:  # http(s) only: checked by the caller
                if reply.status != 200:
                    raise OSError(f"{health} answered {reply.status}")
        except urllib.error.HTTPError as exc:
            raise OSError(f"{health} answered {exc.code} (is this an MLflow server?)") from None
        except urllib.error.URLError as exc:
            raise OSError(str(exc.reason)) from None

    _bounded(_short(uri), "tracking.uri", timeout_s, get)
