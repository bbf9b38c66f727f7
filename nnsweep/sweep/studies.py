"""The Optuna side of a sweep: one study per (sweep, device), and everything nnsweep stores on it.

This module alone knows the attribute keys. A study holds:

* per study: the sweep's **fingerprint** (what its results are tied to: model,
  measure settings, objectives, constraints, space) and the **sweep id** that
  names this generation of the sweep in the tracker;
* per trial: its :class:`~nnsweep.sweep.lifecycle.Role`, its :class:`~nnsweep.core.results.TrialRecord`
  (written *before* the trial is told, so a trial that has a record and is still
  RUNNING was killed between the two and is told from its record on resume), the
  index of the default deployment it seeds (``seed``) and, for a trial put back in the
  queue, the trial it replaces (``requeue_of``), which makes requeueing idempotent.

The report and the CLI read studies through :func:`study_records` and
:func:`baseline_number`, never through attribute names.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nnsweep.core.errors import SpecError
from nnsweep.core.results import TrialRecord
from nnsweep.sweep import front
from nnsweep.sweep.lifecycle import Role

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

    from nnsweep.spec import SweepSpec

__all__ = [
    "NoStudy",
    "baseline_number",
    "delete_studies",
    "enqueue",
    "fingerprint_of",
    "mend_storage",
    "open_study",
    "queued",
    "record_of",
    "remeasured",
    "role_of",
    "store_divergences",
    "store_profiles",
    "store_remeasured",
    "stored_divergences",
    "stored_profiles",
    "study_name",
    "study_records",
    "sweep_id_of",
    "tell_failure",
    "tell_record",
]

log = logging.getLogger(__name__)

_ROLE = "role"
_RECORD = "record"
_STATUS = "status"
_REASON = "reason"
_SEED = "seed"
_REQUEUE_OF = "requeue_of"
_FINGERPRINT = "nnsweep.fingerprint"
_REMEASURED = "nnsweep.remeasured"
_PROFILES = "nnsweep.profiles"
_DIVERGENCES = "nnsweep.divergences"
_SWEEP_ID = "nnsweep.sweep_id"
_INVALID = "invalid"  # status of a sampled combination no configuration can express


class NoStudy(SpecError):
    """The sweep has no study for a device yet (it never ran there)."""


def study_name(spec: SweepSpec, device: str) -> str:
    return f"{spec.name}/{device}"


def _journal_path(spec: SweepSpec) -> Path:
    """The sweep's Optuna journal (``storage: journal``)."""
    return spec.state_dir / "optuna.journal"


def mend_storage(spec: SweepSpec) -> None:
    """Set right what a writer killed mid-write left in the sweep's storage: for the run
    that holds the sweep's run lock, before it writes (:func:`nnsweep.sweep.journal.drop_torn_tail`;
    a database keeps whole transactions itself)."""
    if spec.storage == "journal":
        from nnsweep.sweep.journal import drop_torn_tail

        drop_torn_tail(_journal_path(spec))


def _storage(spec: SweepSpec, *, create: bool) -> Any:
    if spec.storage == "journal":
        from nnsweep.sweep.journal import open_journal

        journal = _journal_path(spec)
        if not create and not journal.is_file():
            return None  # never ran: read nothing, and create no state directory
        spec.state_dir.mkdir(parents=True, exist_ok=True)
        return open_journal(journal)
    from sqlalchemy.exc import IntegrityError

    from nnsweep.sweep.rdb import retrying_storage  # a database restart mid-sweep is waited out

    try:
        return retrying_storage(spec.storage)
    except IntegrityError:
        # Two first sweeps into an empty database at once both create Optuna's tables and one
        # fails on a unique index (seen with PostgreSQL); the tables exist now, so try once more.
        time.sleep(1.0)
        return retrying_storage(spec.storage)


def _sampler(spec: SweepSpec) -> Any:
    # Chosen on the tabular search benchmark (benchmarks/search_replay.py, benchmarks/results/search.md);
    # search.strategy picks another only to compare with it (benchmarks/time_to_answer.py).
    from nnsweep.sweep.sampler import sampler_for

    return sampler_for(spec.search.strategy, spec.search.seed)


def open_study(spec: SweepSpec, device: str, *, create: bool = True) -> optuna.Study:
    """The device's study (created with the sweep's directions when ``create``).

    Raises:
        NoStudy: ``create`` is false and the sweep never ran on ``device``.
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = _storage(spec, create=create)
    name = study_name(spec, device)
    if not create:
        try:
            if storage is None:
                raise KeyError(name)
            return optuna.load_study(study_name=name, storage=storage, sampler=_sampler(spec))
        except KeyError:
            raise NoStudy("spec", f"{spec.name} has not run on {device} yet: run `nnsweep run` first") from None
    return optuna.create_study(
        storage=storage,
        study_name=name,
        directions=[o.direction for o in spec.objectives],
        sampler=_sampler(spec),
        load_if_exists=True,
    )


def existing_studies(spec: SweepSpec) -> list[str]:
    """Names of this sweep's device studies in its storage (none when it never ran)."""
    import optuna

    storage = _storage(spec, create=False)
    if storage is None:
        return []
    prefix = f"{spec.name}/"
    return [s.study_name for s in optuna.get_all_study_summaries(storage) if s.study_name.startswith(prefix)]


def delete_studies(spec: SweepSpec) -> list[str]:
    """Delete every device study of the sweep (``nnsweep run --fresh``); returns their names."""
    import optuna

    names = existing_studies(spec)
    storage = _storage(spec, create=False)
    for name in names:
        optuna.delete_study(study_name=name, storage=storage)
    return names


# ----------------------------------------------------------- study attributes
def fingerprint_of(study: optuna.Study) -> dict[str, str] | None:
    value = study.user_attrs.get(_FINGERPRINT)
    return dict(value) if isinstance(value, Mapping) else None


def sweep_id_of(study: optuna.Study) -> str | None:
    value = study.user_attrs.get(_SWEEP_ID)
    return str(value) if value else None


def stamp(study: optuna.Study, fingerprint: Mapping[str, str], sweep_id: str | None) -> str:
    """Store the fingerprint and sweep id on a new study; returns the sweep id."""
    sweep_id = sweep_id or uuid.uuid4().hex
    study.set_user_attr(_FINGERPRINT, dict(fingerprint))
    study.set_user_attr(_SWEEP_ID, sweep_id)
    return sweep_id


# ----------------------------------------------------------- trial attributes
def role_of(trial: FrozenTrial) -> Role:
    return Role(trial.user_attrs.get(_ROLE, Role.SEARCH.value))


def record_of(trial: FrozenTrial) -> TrialRecord | None:
    data = trial.user_attrs.get(_RECORD)
    return TrialRecord.from_dict(data) if data is not None else None


def seeded(study: optuna.Study) -> set[int]:
    """Indexes of the default deployments already in the study (waiting or done)."""
    return {int(t.user_attrs[_SEED]) for t in study.get_trials(deepcopy=False) if _SEED in t.user_attrs}


def enqueue(
    study: optuna.Study,
    params: Mapping[str, Any],
    role: Role,
    *,
    seed: int | None = None,
    requeue_of: int | None = None,
) -> None:
    attrs: dict[str, Any] = {_ROLE: role.value}
    if seed is not None:
        attrs[_SEED] = seed
    if requeue_of is not None:
        attrs[_REQUEUE_OF] = requeue_of
    study.enqueue_trial(dict(params), user_attrs=attrs)


def queued(study: optuna.Study) -> int:
    """How many queued trials the study holds, not yet asked for."""
    from optuna.trial import TrialState

    return len(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))


def requeued(study: optuna.Study) -> set[int]:
    """Trials whose parameters already wait in the queue again."""
    from optuna.trial import TrialState

    return {
        int(t.user_attrs[_REQUEUE_OF])
        for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
        if _REQUEUE_OF in t.user_attrs
    }


def retried(study: optuna.Study) -> set[int]:
    """Trials whose parameters were queued again at some point (in any state since)."""
    return {int(t.user_attrs[_REQUEUE_OF]) for t in study.get_trials(deepcopy=False) if _REQUEUE_OF in t.user_attrs}


def objective_values(record: TrialRecord, metrics: Sequence[str]) -> list[float] | None:
    values = [record.metrics.get(m) for m in metrics]
    if any(v is None for v in values):
        return None
    return [float(v) for v in values if v is not None]


def tell_record(
    study: optuna.Study,
    trial: optuna.Trial,
    record: TrialRecord,
    values: Sequence[float],
    constraints: Mapping[str, float],
) -> None:
    """Tell a measured (or reused) trial: constraints, then record, then values.

    The order is what makes a kill anywhere recoverable: a RUNNING trial with a
    record was killed just before its tell, and :func:`finish_interrupted` tells it.
    """
    for name, value in constraints.items():
        trial.set_constraint(name, value)
    trial.set_user_attr(_RECORD, record.to_dict())
    trial.set_user_attr(_STATUS, record.status.value)
    study.tell(trial, list(values))


def tell_failure(study: optuna.Study, trial: optuna.Trial, record: TrialRecord | None, reason: str) -> None:
    """Tell a trial FAIL with its reason (and record, when it has a configuration)."""
    from optuna.trial import TrialState

    if record is not None:
        trial.set_user_attr(_RECORD, record.to_dict())
    trial.set_user_attr(_STATUS, record.status.value if record is not None else _INVALID)
    trial.set_user_attr(_REASON, reason[:2000])
    study.tell(trial, state=TrialState.FAIL)


def requeue(study: optuna.Study, trial: FrozenTrial | optuna.Trial, role: Role) -> None:
    """Put a trial that never finished back in the queue, then tell it FAIL; safe to repeat."""
    from optuna.trial import TrialState

    if trial.number not in requeued(study):
        enqueue(study, trial.params, role, requeue_of=trial.number)
    study.tell(trial.number, state=TrialState.FAIL, skip_if_finished=True)


def finish_interrupted(study: optuna.Study, metrics: Sequence[str]) -> list[int]:
    """Settle the RUNNING trials a killed coordinator left: told from their record when
    they have one, else requeued. Returns the numbers of those requeued."""
    from optuna.trial import TrialState

    again = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        record = record_of(t)
        if record is None:
            requeue(study, t, role_of(t))
            again.append(t.number)
        elif record.status.measured and (values := objective_values(record, metrics)) is not None:
            study.tell(t.number, values)
        else:
            study.tell(t.number, state=TrialState.FAIL)
    return again


def store_remeasured(study: optuna.Study, pooled: Mapping[int, Mapping[str, float]]) -> None:
    """Keep each re-measured trial's pooled figures on the study (a finished trial's own
    attributes cannot change). A later re-measurement replaces an earlier one."""
    stored = dict(study.user_attrs.get(_REMEASURED) or {})
    stored.update({str(number): dict(figures) for number, figures in pooled.items() if figures})
    study.set_user_attr(_REMEASURED, stored)


def remeasured(study: optuna.Study) -> dict[int, dict[str, float]]:
    """Trial number -> the pooled figures :func:`store_remeasured` kept."""
    return {int(n): dict(f) for n, f in (study.user_attrs.get(_REMEASURED) or {}).items()}


def store_profiles(study: optuna.Study, profiles: Mapping[int, Mapping[str, object]]) -> None:
    """Keep each trial's per-operator profile (:meth:`~nnsweep.bench.profile.Profile.to_dict`)
    on the study, for the report; a later profile of a trial replaces an earlier one."""
    _store_per_trial(study, _PROFILES, profiles)


def stored_profiles(study: optuna.Study) -> dict[int, dict[str, object]]:
    """Trial number -> the profile :func:`store_profiles` kept."""
    return _stored_per_trial(study, _PROFILES)


def store_divergences(study: optuna.Study, divergences: Mapping[int, Mapping[str, object]]) -> None:
    """Keep each explained trial's layers against fp32 (:meth:`~nnsweep.bench.divergence.Divergence.to_dict`)
    on the study, for the report; a later one of a trial replaces an earlier one."""
    _store_per_trial(study, _DIVERGENCES, divergences)


def stored_divergences(study: optuna.Study) -> dict[int, dict[str, object]]:
    """Trial number -> the divergence :func:`store_divergences` kept."""
    return _stored_per_trial(study, _DIVERGENCES)


def _store_per_trial(study: optuna.Study, key: str, values: Mapping[int, Mapping[str, object]]) -> None:
    stored = dict(study.user_attrs.get(key) or {})
    stored.update({str(number): dict(value) for number, value in values.items()})
    study.set_user_attr(key, stored)


def _stored_per_trial(study: optuna.Study, key: str) -> dict[int, dict[str, object]]:
    return {int(n): dict(v) for n, v in (study.user_attrs.get(key) or {}).items()}


def study_records(study: optuna.Study) -> list[TrialRecord]:
    """The records of a study's finished trials (measured, reused or failed), by trial
    number, with the figures that decide (:func:`nnsweep.sweep.front.decide`): where the
    sweep's end re-measured a trial, its p50 is the pooled median."""
    return front.decide(_raw_records(study), remeasured(study), baseline_number(study))


def _raw_records(study: optuna.Study) -> list[TrialRecord]:
    records = []
    for t in study.get_trials(deepcopy=False):
        record = record_of(t)
        if record is not None and t.state.is_finished():
            if record.status.measured and t.state.name != "COMPLETE":
                continue  # measured, then interrupted before it was told: not a result
            records.append(record)
    return sorted(records, key=lambda r: r.number)


def baseline_number(study: optuna.Study) -> int | None:
    """The trial number of the device's measured fp32 baseline, if any."""
    for t in study.get_trials(deepcopy=False):
        record = record_of(t)
        if role_of(t) is Role.BASELINE and record is not None and record.status.measured:
            return t.number
    return None
