"""Optuna's RDB storage (PostgreSQL, MySQL, sqlite URLs) through a database restart.

A database going away mid-sweep is an infrastructure failure: the storage call (one
transaction, which Optuna rolls back) waits and is retried with backoff for up to
``patience_s``; it never becomes a trial's result. Connections are checked before use
(``pool_pre_ping``). A commit applied whose answer was lost can create a trial twice: it
stays RUNNING without a record and is requeued on the next resume
(:func:`nnsweep.sweep.studies.finish_interrupted`); a state already set is not set again.

Example:
    >>> storage = retrying_storage("sqlite:///:memory:")  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any

import optuna
from optuna.storages import BaseStorage, RDBStorage

from nnsweep.core.errors import InfrastructureError

__all__ = ["StorageUnavailable", "is_connection_error", "retrying_storage"]

log = logging.getLogger(__name__)


class StorageUnavailable(InfrastructureError):
    """The study's database did not answer for the whole patience."""


def is_connection_error(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it wraps: Optuna turns SQLAlchemy's errors into
    ``StorageInternalError``) says the database could not be reached or dropped the connection."""
    from sqlalchemy import exc as sa

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, sa.OperationalError | sa.InterfaceError):
            return True
        if isinstance(seen, sa.DBAPIError) and seen.connection_invalidated:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class _Outage:
    """Backoff and the two log lines of one outage (its start, its end)."""

    def __init__(self, patience_s: float, sleep: Callable[[float], None], clock: Callable[[], float]) -> None:
        self.patience_s, self.sleep, self.clock = patience_s, sleep, clock
        self.since: float | None = None

    def wait(self, what: str, exc: BaseException) -> None:
        now = self.clock()
        if self.since is None:
            self.since = now
            log.warning("the study's database does not answer (%s); retrying for up to %.0f s", what, self.patience_s)
        waited = now - self.since
        if waited >= self.patience_s:
            raise StorageUnavailable(f"the study's database did not answer for {waited:.0f} s: {exc}") from exc
        self.sleep(min(2.0 ** min(int(waited), 5), 15.0, max(self.patience_s - waited, 0.1)))

    def over(self) -> None:
        if self.since is not None:
            log.warning("the study's database answers again (after %.0f s)", self.clock() - self.since)
            self.since = None


def _retried(name: str) -> Callable[..., Any]:
    """RDBStorage's method ``name`` (looked up at each call), tried again after a connection error."""

    @functools.wraps(getattr(RDBStorage, name))
    def method(self: _RetryingRDBStorage, *args: Any, **kwargs: Any) -> Any:
        tries = 0
        while True:
            try:
                result = getattr(RDBStorage, name)(self, *args, **kwargs)
            except optuna.exceptions.UpdateFinishedTrialError:
                # A retried state change whose first try was committed: already done.
                if tries and name == "set_trial_state_values" and self._state_is(args, kwargs):
                    self._outage.over()
                    return True
                raise
            except Exception as exc:
                if not is_connection_error(exc):
                    raise
                tries += 1
                self._outage.wait(name, exc)
                continue
            self._outage.over()
            return result

    return method


class _RetryingRDBStorage(RDBStorage):
    _outage: _Outage

    def _state_is(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        trial_id = kwargs.get("trial_id", args[0] if args else None)
        state = kwargs.get("state", args[1] if len(args) > 1 else None)
        return trial_id is not None and RDBStorage.get_trial(self, trial_id).state == state


# Every operation of Optuna's storage interface, and the private ones its cache in front of an
# RDBStorage (optuna.storages._CachedStorage, which create_study puts there) calls directly.
_CACHE_CALLS = ("_create_new_trial", "_get_best_trial_id", "_get_stale_trial_ids", "_get_trials", "_set_trial_param")
_PUBLIC = [name for name, member in vars(BaseStorage).items() if not name.startswith("_") and callable(member)]
for _name in [*_PUBLIC, *_CACHE_CALLS]:
    if callable(getattr(RDBStorage, _name, None)):
        setattr(_RetryingRDBStorage, _name, _retried(_name))


def retrying_storage(
    url: str,
    *,
    patience_s: float = 300.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> RDBStorage:
    """Optuna's ``RDBStorage`` at ``url`` whose operations wait out a database outage of up to ``patience_s``.

    Raises:
        StorageUnavailable: (from an operation) the database did not answer for ``patience_s``.
    """
    storage = _RetryingRDBStorage(url, engine_kwargs={"pool_pre_ping": True})
    storage._outage = _Outage(patience_s, sleep, clock)
    return storage
