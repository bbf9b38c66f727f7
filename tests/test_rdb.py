"""nnsweep/sweep/rdb.py on sqlite: an operation that meets a dropped connection waits and is
tried again (tests/test_team.py restarts a real PostgreSQL under a sweep)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.storages import RDBStorage
from sqlalchemy.exc import IntegrityError, OperationalError

from nnsweep.sweep.rdb import StorageUnavailable, is_connection_error, retrying_storage


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def _down(times: int, monkeypatch: pytest.MonkeyPatch, name: str = "_get_trials") -> list[int]:
    """RDBStorage's ``name`` fails as a restarted database makes it fail, ``times`` times."""
    calls = [0]
    real = getattr(RDBStorage, name)

    def flaky(self: RDBStorage, *args: object, **kwargs: object) -> object:
        calls[0] += 1
        if calls[0] <= times:
            cause = OperationalError("SELECT 1", {}, Exception("server closed the connection unexpectedly"))
            raise optuna.exceptions.StorageInternalError("An exception is raised during the commit.") from cause
        return real(self, *args, **kwargs)

    monkeypatch.setattr(RDBStorage, name, flaky)
    return calls


def test_an_operation_waits_out_an_outage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    storage = retrying_storage(f"sqlite:///{tmp_path / 'o.db'}", sleep=clock.sleep, clock=lambda: clock.now)
    study = optuna.create_study(storage=storage, study_name="s")
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    calls = _down(3, monkeypatch)
    assert len(study.get_trials()) == 1  # through Optuna's cache, which calls _get_trials
    assert calls[0] == 4 and len(clock.slept) == 3


def test_an_outage_longer_than_the_patience_is_an_infrastructure_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = _Clock()
    url = f"sqlite:///{tmp_path / 'o.db'}"
    storage = retrying_storage(url, patience_s=60, sleep=clock.sleep, clock=lambda: clock.now)
    study = optuna.create_study(storage=storage, study_name="s")
    _down(1000, monkeypatch, "get_study_user_attrs")
    with pytest.raises(StorageUnavailable, match="did not answer for 6"):
        study.user_attrs  # noqa: B018
    assert 60 <= clock.now < 80


def test_other_errors_are_not_retried() -> None:
    assert not is_connection_error(IntegrityError("INSERT", {}, Exception("duplicate key")))
    assert not is_connection_error(ValueError("bad"))
    assert is_connection_error(OperationalError("SELECT 1", {}, Exception("connection refused")))


def test_a_state_change_committed_before_the_connection_dropped_is_not_made_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = _Clock()
    storage = retrying_storage(f"sqlite:///{tmp_path / 'o.db'}", sleep=clock.sleep, clock=lambda: clock.now)
    study = optuna.create_study(storage=storage, study_name="s")
    trial = study.ask()
    real = RDBStorage.set_trial_state_values
    calls = [0]

    def committed_then_dropped(self: RDBStorage, *args: object, **kwargs: object) -> object:
        calls[0] += 1
        result = real(self, *args, **kwargs)  # type: ignore[arg-type]
        if calls[0] == 1:  # the commit went through; its answer did not
            cause = OperationalError("COMMIT", {}, Exception("server closed the connection unexpectedly"))
            raise optuna.exceptions.StorageInternalError("An exception is raised during the commit.") from cause
        return result

    monkeypatch.setattr(RDBStorage, "set_trial_state_values", committed_then_dropped)
    study.tell(trial, 1.0)  # the retry finds the trial COMPLETE already: done, not an error
    assert calls[0] == 2
    assert [t.state.name for t in study.get_trials()] == ["COMPLETE"]
