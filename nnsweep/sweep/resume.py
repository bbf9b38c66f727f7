"""Opening a sweep: refuse before anything is written, then open or resume each device.

:func:`check` runs everything that may refuse the sweep — the fingerprint against
the studies an earlier run left, the devices' capabilities against the spec's space —
and writes nothing (no study, no tracking store). :func:`open_devices` then creates or
resumes the device's study: it settles what a killed run left
(:func:`nnsweep.sweep.studies.finish_interrupted`), seeds the default deployments once,
rebuilds the scheduler's view from the study's records, and logs again every trial
the tracker does not have as the study does.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from nnsweep.core.results import FailureKind, TrialRecord, TrialStatus, failure_kind
from nnsweep.sweep import studies
from nnsweep.sweep.device_state import DeviceState
from nnsweep.sweep.lifecycle import Role
from nnsweep.sweep.recorder import DeviceRun
from nnsweep.sweep.scheduler import Scheduler, reuse_key
from nnsweep.sweep.space import (
    DeviceSpace,
    LayersFor,
    baseline_configs,
    device_space,
    mode_starts,
    params_for,
    placeholder_layers,
    space_size,
)
from nnsweep.sweep.state import check_fingerprint

if TYPE_CHECKING:
    from concurrent.futures import Future

    import optuna

    from nnsweep.agents import Capabilities
    from nnsweep.core.config import DeploymentConfig
    from nnsweep.execution import Executor, ModelSource
    from nnsweep.spec import SweepSpec
    from nnsweep.tracking import Tracker

__all__ = ["Plan", "check", "open_devices"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Plan:
    """What :func:`check` found: each device's capabilities and space, and the sweep's
    id (``None``: a new sweep, whose first study makes one)."""

    devices: Mapping[str, tuple[Capabilities, DeviceSpace]]
    sweep_id: str | None
    converters_ready: Mapping[str, Future[None]] = field(default_factory=dict)  # machine -> its workers ready

    def notices(self) -> list[str]:
        """What the sweep says about its devices before it starts: an x86 CPU without VNNI
        under ONNX Runtime int8 (:func:`~nnsweep.sweep.accepted.saturation_notice`)."""
        from nnsweep.sweep.accepted import saturation_notice

        return [line for caps, space in self.devices.values() if (line := saturation_notice(caps, space)) is not None]


def check(
    spec: SweepSpec,
    executor: Executor,
    fingerprint: Mapping[str, str],
    *,
    fresh: bool,
    layers_for: LayersFor = placeholder_layers,
    source: ModelSource | None = None,
) -> Plan:
    """Refuse the sweep now, or say how to open it (``executor`` started: its agents probe).

    Args:
        source: the model the conversion workers load while the devices are probed.

    Raises:
        SweepChanged: the studies were made for another model or spec (exit 2).
        SpecError: a device can serve none of the spec's space (exit 2).
    """
    if fresh:
        for name in studies.delete_studies(spec):
            log.warning("deleted study %s (--fresh)", name)
    sweep_id = None
    for name in studies.existing_studies(spec):
        study = studies.open_study(spec, name.split("/", 1)[1], create=False)
        check_fingerprint(spec.name, studies.fingerprint_of(study), fingerprint)
        sweep_id = sweep_id or studies.sweep_id_of(study)
    ready = executor.warm_converters(source, spec.space.runtimes) if source is not None else {}
    devices = {}
    for name in spec.devices:
        caps = executor.capabilities(name)
        devices[name] = (caps, device_space(spec, name, caps.runtimes, caps.cores, layers_for))
    return Plan(devices, sweep_id, ready)


def _kind(record: TrialRecord) -> FailureKind:
    """A failed record's kind (records written before kinds existed: read from the reason)."""
    tag = record.tags.get("failure_kind")
    return FailureKind(tag) if tag in set(FailureKind) else failure_kind(record.reason or "")


WARM_SEEDS = 1000  # seed indexes of warm-start configurations start here (defaults count from 0)


def _warm_start(spec: SweepSpec, device: str, space: DeviceSpace, study: optuna.Study) -> None:
    """Seed a new device's study with the Pareto configurations other devices of the sweep
    already found (those its space holds), after its own defaults: a new device usually
    resembles one already swept (``search.warm_start``)."""
    from nnsweep.sweep.front import pareto_front

    found: dict[str, DeploymentConfig] = {}
    for other in spec.devices:
        if other == device:
            continue
        try:
            records = studies.study_records(studies.open_study(spec, other, create=False))
        except studies.NoStudy:
            continue
        for record in pareto_front(records, spec.objectives):
            if record.config.runtime in space.choices:
                found.setdefault(record.config.digest(), record.config)
    for k, config in enumerate(found.values()):
        studies.enqueue(study, params_for(config, space), Role.START, seed=WARM_SEEDS + k)
    if found:
        log.info("%s: warm start with %d Pareto configurations of the other devices", device, len(found))


def _align_tracker(tracker: Tracker, device: str, told: Mapping[int, TrialRecord]) -> None:
    """Make the tracker show what the study holds (the record of truth): a trial logged
    with another status than its record is logged again; a result the study does not have
    (the study restored from a copy older than the trial) is taken back, since left it
    would stand beside the trial that measures the configuration again."""
    logged = tracker.logged(device)
    for number, record in told.items():
        if logged.get(number) != record.status:
            tracker.finish_trial(record)
    for number, status in logged.items():
        if number not in told and status is not TrialStatus.INTERRUPTED:
            log.warning(
                "%s: trial %d has a result in the tracking store that its study does not have (was the study "
                "restored from an older copy?): that record is deleted, so the store shows what the study holds",
                device,
                number,
            )
            tracker.disown_trial(device, number)


def open_devices(
    spec: SweepSpec,
    plan: Plan,
    fingerprint: Mapping[str, str],
    scheduler: Scheduler,
    tracker: Tracker,
    model_digest: str,
    depth: int,
    now: float,
    retry: frozenset[FailureKind] = frozenset({FailureKind.TRANSIENT}),
) -> dict[str, DeviceRun]:
    """Create or resume each device's study (all under one sweep id) and rebuild the
    scheduler's and the tracker's view of it. A recorded failure of a kind in ``retry``
    (transient ones by default: ``nnsweep run --retry-failed`` adds deterministic ones)
    is queued once more, and not counted as tried."""

    def open_one(name: str, found: tuple[Capabilities, DeviceSpace], sweep_id: str | None) -> tuple[DeviceRun, str]:
        from optuna.trial import TrialState

        caps, space = found
        study = studies.open_study(spec, name)
        sweep_id = sweep_id or studies.sweep_id_of(study)
        if studies.fingerprint_of(study) is None:
            sweep_id = studies.stamp(study, fingerprint, sweep_id)
        assert sweep_id is not None  # stamped on every study this version creates
        tracker.bind(sweep_id)
        tracker.open_device(name, caps.tags())
        for number in studies.finish_interrupted(study, [o.metric for o in spec.objectives]):
            log.info("%s: trial %d was interrupted; requeued", name, number)
        seeded = studies.seeded(study)
        new = not any(t.state.is_finished() for t in study.get_trials(deepcopy=False))
        # What a device measures before its sampler proposes, in this order: its default
        # deployments, the other devices' fronts (warm start), each mode's default (mode starts).
        base = baseline_configs(space)
        for i, config in enumerate(base):
            if i not in seeded:
                role = Role.BASELINE if i == 0 and config.quant.mode.value == "fp32" else Role.DEFAULT
                studies.enqueue(study, params_for(config, space), role, seed=i)
        if spec.search.warm_start and new and not any(i >= WARM_SEEDS for i in seeded):
            _warm_start(spec, name, space, study)
        if spec.search.mode_starts and new:
            for i, config in enumerate(mode_starts(space), start=len(base)):
                if i not in seeded:
                    studies.enqueue(study, params_for(config, space), Role.START, seed=i)
        size = space_size(space)
        log.info("%s: %s configurations in its space", name, size if size is not None else "unbounded")
        deadline = None if spec.budget.timeout_s is None else now + spec.budget.timeout_s
        state = DeviceState(name, caps.machine, spec.budget.trials, depth, deadline, size)
        scheduler.add(state)
        again = studies.retried(study)
        told: dict[int, TrialRecord] = {}  # trials whose record the study has as it ended
        for t in study.get_trials(deepcopy=False):
            role = studies.role_of(t)
            if t.state is TrialState.WAITING and role is Role.BASELINE:
                state.baseline_waiting = True
            record = studies.record_of(t)
            if record is None or not t.state.is_finished():
                continue
            if record.status.measured and t.state is not TrialState.COMPLETE:
                continue  # measured, but never told: not a result (as in studies.study_records)
            told[t.number] = record
            if record.status is TrialStatus.FAILED and t.number not in again and _kind(record) in retry:
                studies.enqueue(study, t.params, role, requeue_of=t.number)
                log.info("%s: trial %d failed (%s); trying it again", name, t.number, _kind(record).value)
            else:
                scheduler.restore(name, record, reuse_key(model_digest, record.config), role)
        _align_tracker(tracker, name, told)
        return DeviceRun(caps, space, study), sweep_id

    devices = {}
    sweep_id = plan.sweep_id
    for name in spec.devices:
        devices[name], sweep_id = open_one(name, plan.devices[name], sweep_id)
    return devices
