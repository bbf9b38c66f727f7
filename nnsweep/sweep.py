"""The coordinator: one Optuna study per device, conversions and measurements
dispatched through an :class:`~nnsweep.execution.Executor`, results told to Optuna
and logged through a :class:`~nnsweep.tracking.Tracker`.

Scheduling rules:

* a device measures one artifact at a time (its agent serialises too);
* **measurement isolation**: while a device on machine M measures, nothing else
  runs on M: no conversion (when M is the conversion machine) and no other
  device's measurement. Devices on other machines are pipelined: their next
  artifacts are converted while they measure;
* a configuration whose digest was measured on a device before is not measured
  again there; neither is an artifact byte-identical to one measured before
  (same placement, same threads): the earlier result is reused;
* a trial that fails to convert or measure is told FAIL with its reason; an
  infrastructure failure (an agent lost) requeues the trial instead.

Resuming: trials left RUNNING by a killed coordinator are told FAIL (marked
``interrupted``, not counted) and their parameters enqueued again, so finished
trials are never re-run and the budget counts each configuration once.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
import warnings
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nnsweep import runtimes
from nnsweep.agents import Capabilities, MeasureReply, MeasureRequest
from nnsweep.artifacts import Artifact
from nnsweep.bench import MeasureSettings
from nnsweep.config import DeploymentConfig, QuantMode
from nnsweep.errors import InfrastructureError, SpecError, TrialError
from nnsweep.execution import ConvertRequest, Executor, ModelSource
from nnsweep.report import best_trial, pareto_front
from nnsweep.results import TrialRecord, TrialStatus, metrics_from_result
from nnsweep.space import DeviceSpace, baseline_configs, device_space, params_for, suggest
from nnsweep.spec import SweepSpec

if TYPE_CHECKING:
    import numpy as np
    import optuna

    from nnsweep.models import ModelBundle
    from nnsweep.tracking import Tracker

__all__ = ["DeviceProgress", "DeviceResult", "Sweep", "SweepStats", "open_study", "study_records"]

log = logging.getLogger(__name__)

_ROLE = "role"  # trial user attr: "baseline" for the fp32 baseline
_RECORD = "record"  # trial user attr: the TrialRecord as a dict
_STATUS = "status"


def _storage(spec: SweepSpec) -> Any:
    import optuna

    if spec.storage == "journal":
        from optuna.storages.journal import JournalFileBackend

        spec.state_dir.mkdir(parents=True, exist_ok=True)
        return optuna.storages.JournalStorage(JournalFileBackend(str(spec.state_dir / "optuna.journal")))
    return optuna.storages.RDBStorage(spec.storage)


def study_name(spec: SweepSpec, device: str) -> str:
    return f"{spec.name}/{device}"


def open_study(spec: SweepSpec, device: str, *, create: bool = True) -> optuna.Study:
    """The device's study (created with the sweep's directions when ``create``)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = _storage(spec)
    if not create:
        return optuna.load_study(study_name=study_name(spec, device), storage=storage)
    with warnings.catch_warnings():
        # Multivariate TPE with groups models the conditional space (per-runtime
        # dimensions) jointly; Optuna 5 still labels both options experimental.
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.TPESampler(seed=0, n_startup_trials=8, multivariate=True, group=True)
    return optuna.create_study(
        storage=storage,
        study_name=study_name(spec, device),
        directions=[o.direction for o in spec.objectives],
        sampler=sampler,
        load_if_exists=True,
    )


def study_records(study: optuna.Study) -> list[TrialRecord]:
    """The records of a study's finished trials (measured, reused or failed)."""
    records = []
    for t in study.get_trials(deepcopy=False):
        data = t.user_attrs.get(_RECORD)
        if data is not None and t.state.is_finished():
            records.append(TrialRecord.from_dict(data))
    return records


@dataclass(frozen=True)
class DeviceProgress:
    """A snapshot for the progress display."""

    device: str
    done: int
    budget: int
    failed: int
    reused: int
    activity: str
    best: str | None
    lost: bool = False


@dataclass
class SweepStats:
    """Coordinator figures for ``benchmarks/sweep_overhead.py``."""

    overhead_ms: list[float] = field(default_factory=list)  # ask + dispatch + tell + log, per trial (wall)
    overhead_cpu_ms: list[float] = field(default_factory=list)  # the same in the coordinator thread's CPU time
    busy_s: dict[str, float] = field(default_factory=dict)  # device -> time spent measuring
    first_measure_at: dict[str, float] = field(default_factory=dict)
    finished_at: float = 0.0
    started_at: float = 0.0
    conversions: int = 0
    cache_hits: int = 0


@dataclass(frozen=True)
class DeviceResult:
    """A device's outcome: all its trials, the feasible Pareto front and the best one."""

    device: str
    capabilities: Capabilities
    records: tuple[TrialRecord, ...]
    pareto: tuple[TrialRecord, ...]
    best: TrialRecord | None
    baseline: TrialRecord | None


@dataclass
class _Flight:
    device: str
    trial: optuna.Trial
    config: DeploymentConfig
    digest: str
    role: str | None
    artifact: Artifact | None = None
    cache_hit: bool = False
    measuring: Future[MeasureReply] | None = None
    measure_started: float = 0.0
    duplicate_of: _Flight | None = None
    overhead_s: float = 0.0
    overhead_cpu_s: float = 0.0
    hung: bool = False
    timed: bool = False  # measured on a device that only times; waiting for outputs from the host

    def add_overhead(self, started: tuple[float, float]) -> None:
        wall, cpu = _clocks()
        self.overhead_s += wall - started[0]
        self.overhead_cpu_s += cpu - started[1]


@dataclass
class _Device:
    name: str
    caps: Capabilities
    space: DeviceSpace
    study: optuna.Study
    done: int = 0
    failed: int = 0
    reused: int = 0
    flights: list[_Flight] = field(default_factory=list)
    measured: dict[str, TrialRecord] = field(default_factory=dict)  # config digest -> record
    by_artifact: dict[tuple[str, str, tuple[str, ...], int], TrialRecord] = field(default_factory=dict)
    baseline: TrialRecord | None = None
    held: list[tuple[_Flight, TrialRecord]] = field(default_factory=list)
    deadline: float | None = None
    lost: bool = False
    lost_since: float = 0.0
    next_revive: float = 0.0


class Sweep:
    """Runs one sweep spec.

    Args:
        spec: the validated sweep.
        executor: where conversions and measurements run (local threads or Ray).
        tracker: where trials are logged (MLflow, or nothing).
        cache_root: the artifact cache shared by the coordinator and the conversion workers.
        progress: called with a snapshot of every device whenever something changes.
        depth: trials in flight per device (converting ahead while it measures).
        lost_timeout_s: how long to wait for a lost device to come back once every
            other device is done (its study resumes on the next run either way).
        hang_grace_s: a measurement with no result this long after its own
            timeout is declared hung: the trial fails and the agent is restarted.
    """

    def __init__(
        self,
        spec: SweepSpec,
        executor: Executor,
        tracker: Tracker,
        cache_root: Path,
        *,
        progress: Callable[[list[DeviceProgress]], None] | None = None,
        depth: int = 3,
        lost_timeout_s: float = 300.0,
        hang_grace_s: float = 60.0,
    ) -> None:
        self.lost_timeout_s = lost_timeout_s
        self.hang_grace_s = hang_grace_s
        self.spec = spec
        self.executor = executor
        self.tracker = tracker
        self.source = ModelSource(spec.model, cache_root, spec.weights, spec.input_shape)
        self.progress = progress
        self.depth = depth
        self.settings = MeasureSettings(spec.warmup, spec.iters, spec.min_duration_s, spec.timeout_s)
        self.stats = SweepStats()
        self._devices: dict[str, _Device] = {}
        self._conversions: dict[str, Future[tuple[Artifact, bool]]] = {}
        # Devices whose tool only times: their artifacts are run on this host for outputs.
        self._to_evaluate: list[tuple[_Flight, MeasureReply]] = []
        self._evaluations: dict[Future[Any], tuple[_Flight, MeasureReply]] = {}
        self._host_pool: ThreadPoolExecutor | None = None
        self._measures: dict[Future[MeasureReply], _Flight] = {}
        self._bundle: ModelBundle | None = None
        self._reference: np.ndarray | None = None

    # ----------------------------------------------------------------- set-up
    def _load_model(self) -> None:
        from nnsweep import deploy
        from nnsweep.artifacts import ArtifactCache
        from nnsweep.models import load_model

        cache = ArtifactCache(self.source.cache_root)
        self._bundle = load_model(
            self.source.ref,
            cache_dir=cache.models_dir,
            weights=self.source.weights,
            input_shape=self.source.input_shape,
        )
        self._reference = deploy.reference_outputs(self._bundle)

    def _open_device(self, name: str) -> _Device:
        caps = self.executor.capabilities(name)
        space = device_space(self.spec, name, caps.runtimes, caps.cores)
        study = open_study(self.spec, name)
        dev = _Device(name, caps, space, study)
        self.tracker.open_device(name, caps.tags())
        self._recover(dev)
        if self.spec.budget.timeout_s is not None:
            dev.deadline = time.monotonic() + self.spec.budget.timeout_s
        return dev

    def _recover(self, dev: _Device) -> None:
        """Read what earlier runs of this sweep left in the study."""
        import optuna
        from optuna.trial import TrialState

        trials = dev.study.get_trials(deepcopy=False)
        logged = self.tracker.logged(dev.name)
        if not trials:
            for i, config in enumerate(baseline_configs(dev.space)):
                role = "baseline" if i == 0 and config.quant.mode is QuantMode.FP32 else "default"
                dev.study.enqueue_trial(params_for(config, dev.space), user_attrs={_ROLE: role})
            return
        for t in trials:
            if t.state == TrialState.RUNNING:
                # Left by a coordinator that died: never a measurement. Run it again.
                optuna.trial.Trial(dev.study, t._trial_id).set_user_attr(_STATUS, TrialStatus.INTERRUPTED.value)
                dev.study.tell(t.number, state=TrialState.FAIL)
                attrs = {_ROLE: t.user_attrs[_ROLE]} if _ROLE in t.user_attrs else {}
                dev.study.enqueue_trial(t.params, user_attrs=attrs)
                log.info("%s: trial %d was interrupted; requeued", dev.name, t.number)
                continue
            record = TrialRecord.from_dict(t.user_attrs[_RECORD]) if _RECORD in t.user_attrs else None
            if record is None or not t.state.is_finished():
                continue
            self._account(dev, record, t.user_attrs.get(_ROLE))
            if t.number not in logged:
                self.tracker.finish_trial(record)  # the study is the record of truth: backfill the tracker

    def _account(self, dev: _Device, record: TrialRecord, role: str | None) -> None:
        if record.status is TrialStatus.INTERRUPTED:
            return
        dev.done += 1
        if record.status is TrialStatus.FAILED:
            dev.failed += 1
        elif record.status is TrialStatus.REUSED:
            dev.reused += 1
        elif record.status is TrialStatus.OK:
            dev.measured.setdefault(record.config.digest(), record)
            sha = record.tags.get("artifact_sha256")
            if sha:
                dev.by_artifact.setdefault(_execution_key(sha, record.config), record)
        if role == "baseline" and record.status.measured:
            dev.baseline = record

    # ------------------------------------------------------------------ loop
    def run(self) -> list[DeviceResult]:
        """Run until every device has spent its budget (or its time).

        Raises:
            KeyboardInterrupt: after recording in-flight trials as interrupted.
        """
        self.stats.started_at = time.monotonic()
        self.executor.start(self.spec.devices)
        self._load_model()
        for name in self.spec.devices:
            self._devices[name] = self._open_device(name)
        self._report_progress()
        try:
            while True:
                self._revive_lost()
                self._watchdog()
                for dev in self._devices.values():
                    self._fill(dev)
                self._schedule()
                pending: list[Future[Any]] = [*self._conversions.values(), *self._measures, *self._evaluations]
                if not pending:
                    if self._all_done():
                        break
                    time.sleep(0.5)  # only lost devices are left: wait for them to come back
                    self._report_progress()
                    continue
                done, _ = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
                for future in done:
                    self._handle(future)
                self._report_progress()
        except KeyboardInterrupt:
            self._interrupt()
            raise
        self.stats.finished_at = time.monotonic()
        return self._finish()

    def _all_done(self) -> bool:
        """Nothing in flight anywhere, and no lost device still worth waiting for."""
        now = time.monotonic()
        for dev in self._devices.values():
            if dev.lost:
                others_busy = any(not d.lost and (d.flights or self._remaining(d)) for d in self._devices.values())
                waiting = others_busy or now - dev.lost_since < self.lost_timeout_s
                if waiting and dev.done + len(dev.held) < self.spec.budget.trials:
                    return False
                continue
            if dev.flights:
                return False
        return True

    def _revive_lost(self) -> None:
        now = time.monotonic()
        for dev in self._devices.values():
            if not dev.lost or now < dev.next_revive:
                continue
            dev.next_revive = now + 5.0
            if self.executor.revive(dev.name):
                dev.lost = False
                log.warning("%s is back; resuming its study", dev.name)

    def _watchdog(self) -> None:
        limit = self.settings.timeout_s + self.hang_grace_s
        now = time.monotonic()
        for flight in self._measures.values():
            if not flight.hung and now - flight.measure_started > limit:
                flight.hung = True
                log.warning(
                    "%s: trial %d gave no result in %.0f s; restarting its agent",
                    flight.device,
                    flight.trial.number,
                    now - flight.measure_started,
                )
                self.executor.abandon(flight.device)

    def _remaining(self, dev: _Device) -> bool:
        if dev.lost or (dev.deadline is not None and time.monotonic() > dev.deadline):
            return False
        return dev.done + len(dev.flights) + len(dev.held) < self.spec.budget.trials

    def _fill(self, dev: _Device) -> None:
        while len(dev.flights) < self.depth and self._remaining(dev):
            started = _clocks()
            trial = dev.study.ask()
            role = trial.user_attrs.get(_ROLE)
            try:
                config = suggest(trial, dev.space)
            except SpecError as exc:
                self._fail_unstarted(dev, trial, f"invalid combination: {exc}")
                continue
            digest = config.digest()
            flight = _Flight(dev.name, trial, config, digest, role)
            earlier = dev.measured.get(digest)
            if earlier is not None:
                self._complete_reused(dev, flight, earlier)
                continue
            twin = next((f for f in dev.flights if f.digest == digest and f.duplicate_of is None), None)
            flight.duplicate_of = twin
            self.tracker.start_trial(dev.name, trial.number, config)
            flight.add_overhead(started)
            dev.flights.append(flight)

    def _machine_busy(self, machine: str) -> bool:
        return any(self._devices[f.device].caps.machine == machine for f in self._measures.values())

    def _schedule(self) -> None:
        # Measurements first: a device waiting on a ready artifact is wasted time.
        converting_here = bool(self._conversions) or bool(self._evaluations)
        for dev in self._devices.values():
            if dev.lost or any(f.measuring is not None for f in dev.flights):
                continue
            machine = dev.caps.machine
            if self._machine_busy(machine):
                continue
            if machine == self.executor.converter_machine and converting_here:
                continue
            ready = next(
                (f for f in dev.flights if f.artifact is not None and f.duplicate_of is None and not f.timed), None
            )
            if ready is None:
                continue
            started = _clocks()
            earlier = dev.by_artifact.get(_execution_key(ready.artifact.sha256, ready.config))  # type: ignore[union-attr]
            if earlier is not None:
                dev.flights.remove(ready)
                self._complete_reused(dev, ready, earlier)
                continue
            self._start_measure(dev, ready)
            ready.add_overhead(started)
        # Conversions and host evaluations: never while the conversion machine measures.
        if self._machine_busy(self.executor.converter_machine):
            return
        while self._to_evaluate:
            flight, reply = self._to_evaluate.pop(0)
            if self._host_pool is None:
                self._host_pool = ThreadPoolExecutor(1, thread_name_prefix="nnsweep-evaluate")
            self._evaluations[self._host_pool.submit(self._outputs_on_host, flight)] = (flight, reply)
        for dev in self._devices.values():
            for flight in dev.flights:
                if flight.artifact is not None or flight.duplicate_of is not None or flight.digest in self._conversions:
                    continue
                started = _clocks()
                hit = self._cached(flight.config)
                if hit is not None:  # converted before: no worker, no CPU, no isolation wait
                    flight.artifact, flight.cache_hit = hit, True
                    self.stats.conversions += 1
                    self.stats.cache_hits += 1
                    flight.add_overhead(started)
                    continue
                if len(self._conversions) >= self.executor.converter_slots:
                    return
                request = ConvertRequest(self.source, flight.config)
                self._conversions[flight.digest] = self.executor.convert(request)
                self.stats.conversions += 1
                flight.add_overhead(started)

    def _cached(self, config: DeploymentConfig) -> Artifact | None:
        from nnsweep import deploy
        from nnsweep.artifacts import ArtifactCache

        assert self._bundle is not None
        return deploy.cached(self._bundle, config, ArtifactCache(self.source.cache_root))

    def _start_measure(self, dev: _Device, flight: _Flight) -> None:
        assert self._bundle is not None and flight.artifact is not None  # set before any flight exists
        artifact = flight.artifact
        request = MeasureRequest(
            runtime=artifact.config.runtime,
            artifact_name=artifact.path.name,
            artifact_bytes=artifact.path.read_bytes(),
            io=artifact.io,
            threads=artifact.config.threads,
            backends=artifact.config.backends,
            inputs=self._bundle.dataset.evaluation.inputs,
            settings=self.settings,
            sidecars={name: path.read_bytes() for name, (path, _) in artifact.sidecars.items()},
            estimates=dict(artifact.estimates),
        )
        flight.measuring = self.executor.measure(dev.name, request)
        flight.measure_started = time.monotonic()
        self.stats.first_measure_at.setdefault(dev.name, flight.measure_started)
        self._measures[flight.measuring] = flight

    # --------------------------------------------------------------- results
    def _outputs_on_host(self, flight: _Flight) -> Any:
        """Run the artifact once per evaluation input on this host, for its outputs only.

        A whole-model backend that exists only on the device (NNAPI) cannot run here:
        its twin without that backend (the same quantized model on CPU kernels) does.
        """
        from nnsweep import deploy
        from nnsweep.artifacts import ArtifactCache

        assert self._bundle is not None and flight.artifact is not None
        a = flight.artifact
        twin = self._host_twin(a.config)
        if twin is not None:
            a, _ = deploy.convert(self._bundle, twin, ArtifactCache(self.source.cache_root))
        settings = MeasureSettings(warmup=0, iters=1, timeout_s=self.settings.timeout_s)
        _, outputs = deploy.run_artifact(a, self._bundle.dataset.evaluation.inputs, settings)
        return outputs

    @staticmethod
    def _host_twin(config: DeploymentConfig) -> DeploymentConfig | None:
        """What runs on the host for ``config``'s outputs: ``None`` for its own artifact; for a
        whole-model backend only the device has (NNAPI), the config without it, on CPU kernels."""
        info = runtimes.get(config.runtime)
        if not (config.backends[:1] and config.backends[0] in info.whole_model):
            return None
        rest = config.backends[1:] or (info.default_backends[-1:] if config.quant.mode.is_int8 else ())
        return dataclasses.replace(config, backends=rest)

    def _handle(self, future: Future[Any]) -> None:
        if future in self._evaluations:
            flight, timed = self._evaluations.pop(future)
            dev = self._devices[flight.device]
            try:
                outputs = future.result()
            except TrialError as exc:
                self._finish_flight(dev, flight, TrialStatus.FAILED, reason=f"evaluation on the host: {exc}")
                return
            self._complete_measured(dev, flight, dataclasses.replace(timed, outputs=outputs), on_host=True)
            return
        if future in self._measures:
            flight = self._measures.pop(future)
            dev = self._devices[flight.device]
            elapsed = time.monotonic() - flight.measure_started
            self.stats.busy_s[dev.name] = self.stats.busy_s.get(dev.name, 0.0) + elapsed
            flight.measuring = None
            try:
                reply: MeasureReply = future.result()
            except TrialError as exc:
                self._finish_flight(dev, flight, TrialStatus.FAILED, reason=str(exc))
                return
            except InfrastructureError as exc:
                if flight.hung:
                    reason = f"benchmark hung: no result within {self.settings.timeout_s + self.hang_grace_s:.0f} s"
                    self._finish_flight(dev, flight, TrialStatus.FAILED, reason=reason)
                    self.executor.revive(dev.name)
                else:
                    self._requeue(dev, flight, str(exc))
                return
            except Exception as exc:  # raised on a worker: an unforeseen failure fails this trial only
                self._finish_flight(dev, flight, TrialStatus.FAILED, reason=f"{type(exc).__name__}: {exc}")
                return
            if reply.outputs is None:
                flight.timed = True
                self._to_evaluate.append((flight, reply))  # timed on the device; outputs from this host
                return
            self._complete_measured(dev, flight, reply)
            return
        digest = next(d for d, f in self._conversions.items() if f is future)
        del self._conversions[digest]
        waiting = [f for d in self._devices.values() for f in d.flights if f.digest == digest and f.artifact is None]
        try:
            artifact, hit = future.result()
        except TrialError as exc:
            for flight in waiting:
                self._finish_flight(self._devices[flight.device], flight, TrialStatus.FAILED, reason=str(exc))
            return
        except InfrastructureError as exc:
            log.warning("conversion worker failed (%s); converting again", exc)
            return  # the flights still lack an artifact, so _schedule submits again
        except Exception as exc:  # raised on a worker: an unforeseen failure fails these trials only
            for flight in waiting:
                reason = f"conversion failed: {type(exc).__name__}: {exc}"
                self._finish_flight(self._devices[flight.device], flight, TrialStatus.FAILED, reason=reason)
            return
        self.stats.cache_hits += int(hit)
        for flight in waiting:
            flight.artifact, flight.cache_hit = artifact, hit

    def _complete_measured(self, dev: _Device, flight: _Flight, reply: MeasureReply, on_host: bool = False) -> None:
        from nnsweep import deploy

        started = _clocks()
        assert self._bundle is not None and self._reference is not None and flight.artifact is not None
        assert reply.outputs is not None  # outputs come from the device or from _outputs_on_host
        try:
            result = deploy.assemble(
                self._bundle, flight.artifact, reply.timing, reply.outputs, self._reference, cache_hit=flight.cache_hit
            )
        except TrialError as exc:
            self._finish_flight(dev, flight, TrialStatus.FAILED, reason=str(exc))
            return
        data = result.to_dict()
        metrics = metrics_from_result(data)
        # A compiler's figures are logged under their own names, never as measurements.
        metrics.update({f"estimate_{k}": float(v) for k, v in reply.estimates.items()})
        tags = {
            "artifact_sha256": flight.artifact.sha256,
            "cache_hit": str(flight.cache_hit).lower(),
            "accuracy_source": ("labels" if data["accuracy"] is not None else "fp32 agreement")
            + (f" (outputs from a host run of {_host_run_text(flight.config)})" if on_host else ""),
            "latency_source": reply.source,
        }
        record = TrialRecord(
            sweep=self.spec.name,
            device=dev.name,
            number=flight.trial.number,
            config=flight.config,
            status=TrialStatus.OK,
            metrics=metrics,
            partitions=data["partitions"],
            samples_ms=tuple(data["samples_ms"]),
            estimated=reply.estimated,
            tags=tags,
        )
        flight.add_overhead(started)
        self._settle(dev, flight, record)

    def _complete_reused(self, dev: _Device, flight: _Flight, earlier: TrialRecord) -> None:
        record = TrialRecord(
            sweep=self.spec.name,
            device=dev.name,
            number=flight.trial.number,
            config=flight.config,
            status=TrialStatus.REUSED,
            metrics=dict(earlier.metrics),
            partitions=dict(earlier.partitions),
            reused_from=earlier.number,
            estimated=earlier.estimated,
            tags={k: v for k, v in earlier.tags.items() if k != "cache_hit"},
        )
        self._settle(dev, flight, record)

    def _settle(self, dev: _Device, flight: _Flight, record: TrialRecord) -> None:
        """Tell now, or hold until the baseline the constraint needs is known."""
        if flight.role == "baseline" and record.status.measured:
            dev.baseline = record
            self._tell(dev, flight, record)
            for held_flight, held_record in dev.held:
                self._tell(dev, held_flight, held_record)
            dev.held.clear()
            return
        if dev.baseline is None and self._baseline_pending(dev):
            dev.held.append((flight, record))
            if flight in dev.flights:
                dev.flights.remove(flight)
            return
        self._tell(dev, flight, record)

    def _baseline_pending(self, dev: _Device) -> bool:
        return any(f.role == "baseline" for f in dev.flights) or any(
            t.user_attrs.get(_ROLE) == "baseline" and not t.state.is_finished()
            for t in dev.study.get_trials(deepcopy=False)
        )

    def _tell(self, dev: _Device, flight: _Flight, record: TrialRecord) -> None:
        started = _clocks()
        metrics = dict(record.metrics)
        base = dev.baseline
        feasible: bool | None = None
        if base is not None and base.metrics.get("latency_p50_ms") and metrics.get("latency_p50_ms"):
            metrics["speedup_vs_fp32"] = base.metrics["latency_p50_ms"] / metrics["latency_p50_ms"]
        reference_accuracy = base.metrics.get("accuracy") if base is not None else None
        if self.spec.max_accuracy_drop is not None and "accuracy" in metrics:
            if reference_accuracy is None:
                reference_accuracy = self._eager_accuracy()
            drop = reference_accuracy - metrics["accuracy"]
            metrics["accuracy_drop"] = drop
            constraint = drop - self.spec.max_accuracy_drop
            flight.trial.set_constraint("accuracy_drop", constraint)
            feasible = constraint <= 1e-12
        values = []
        for obj in self.spec.objectives:
            value = metrics.get(obj.metric)
            if value is None or not math.isfinite(value):
                record = _replace(record, status=TrialStatus.FAILED, reason=f"objective {obj.metric} not measured")
                self._finish_flight(dev, flight, TrialStatus.FAILED, reason=record.reason, record=record)
                return
            values.append(value)
        record = _replace(record, metrics=metrics, feasible=feasible)
        flight.trial.set_user_attr(_RECORD, record.to_dict())
        flight.trial.set_user_attr(_STATUS, record.status.value)
        dev.study.tell(flight.trial, values)
        if record.status is TrialStatus.OK:
            dev.measured.setdefault(flight.digest, record)
            sha = record.tags.get("artifact_sha256")
            if sha:
                dev.by_artifact.setdefault(_execution_key(sha, flight.config), record)
        self._account_told(dev, record)
        self.tracker.finish_trial(record)
        flight.add_overhead(started)
        self.stats.overhead_ms.append(flight.overhead_s * 1000)
        self.stats.overhead_cpu_ms.append(flight.overhead_cpu_s * 1000)
        if flight in dev.flights:
            dev.flights.remove(flight)
        self._resolve_twins(dev, flight, record)

    def _account_told(self, dev: _Device, record: TrialRecord) -> None:
        dev.done += 1
        if record.status is TrialStatus.FAILED:
            dev.failed += 1
        elif record.status is TrialStatus.REUSED:
            dev.reused += 1

    def _resolve_twins(self, dev: _Device, flight: _Flight, record: TrialRecord) -> None:
        for twin in [f for f in dev.flights if f.duplicate_of is flight]:
            dev.flights.remove(twin)
            if record.status.measured:
                self._complete_reused(dev, twin, record)
            else:
                twin.duplicate_of = None
                dev.flights.append(twin)  # the original failed: try this one on its own

    def _eager_accuracy(self) -> float:
        import numpy as np

        assert self._bundle is not None and self._reference is not None
        labels = self._bundle.dataset.evaluation.labels
        if labels is None:
            return 1.0  # accuracy is top-1 agreement with fp32, which fp32 itself meets fully
        return float(np.mean(self._reference.argmax(axis=1) == labels))

    def _finish_flight(
        self,
        dev: _Device,
        flight: _Flight,
        status: TrialStatus,
        *,
        reason: str | None = None,
        record: TrialRecord | None = None,
    ) -> None:
        from optuna.trial import TrialState

        record = record or TrialRecord(
            sweep=self.spec.name,
            device=dev.name,
            number=flight.trial.number,
            config=flight.config,
            status=status,
            reason=reason,
        )
        flight.trial.set_user_attr(_RECORD, record.to_dict())
        flight.trial.set_user_attr(_STATUS, status.value)
        if reason:
            flight.trial.set_user_attr("reason", reason[:2000])
        dev.study.tell(flight.trial, state=TrialState.FAIL)
        if status is not TrialStatus.INTERRUPTED:
            self._account_told(dev, record)
        self.tracker.finish_trial(record)
        if flight in dev.flights:
            dev.flights.remove(flight)
        self._resolve_twins(dev, flight, record)
        if flight.role == "baseline" and status is TrialStatus.FAILED:
            # No measured baseline: held trials are judged against the eager fp32 model.
            for held_flight, held_record in dev.held:
                self._tell(dev, held_flight, held_record)
            dev.held.clear()
        log.info("%s trial %d %s: %s", dev.name, flight.trial.number, status.value, reason)

    def _fail_unstarted(self, dev: _Device, trial: optuna.Trial, reason: str) -> None:
        """A sampled combination no configuration can express: fail it without a record."""
        from optuna.trial import TrialState

        trial.set_user_attr("reason", reason[:2000])
        dev.study.tell(trial, state=TrialState.FAIL)
        dev.done += 1
        dev.failed += 1
        log.warning("%s trial %d: %s", dev.name, trial.number, reason)

    def _requeue(self, dev: _Device, flight: _Flight, reason: str) -> None:
        """An agent was lost mid-measurement: not a measurement; run the trial again later."""
        self._finish_flight(dev, flight, TrialStatus.INTERRUPTED, reason=reason)
        attrs = {_ROLE: flight.role} if flight.role else {}
        dev.study.enqueue_trial(flight.trial.params, user_attrs=attrs)
        dev.lost = True
        dev.lost_since = time.monotonic()
        dev.next_revive = dev.lost_since + 2.0
        log.warning("%s lost (%s); trial %d requeued", dev.name, reason, flight.trial.number)

    def _interrupt(self) -> None:
        for dev in self._devices.values():
            for flight, record in list(dev.held):
                self._tell(dev, flight, record)  # measured: keep it, even without the baseline
            for flight in list(dev.flights):
                self._finish_flight(dev, flight, TrialStatus.INTERRUPTED, reason="sweep interrupted")
                attrs = {_ROLE: flight.role} if flight.role else {}
                dev.study.enqueue_trial(flight.trial.params, user_attrs=attrs)
            self.tracker.close_device(dev.name, "KILLED")

    def _finish(self) -> list[DeviceResult]:
        results = []
        for dev in self._devices.values():
            for flight in list(dev.flights):  # a device that never came back: run these next time
                self._finish_flight(dev, flight, TrialStatus.INTERRUPTED, reason=f"{dev.name} lost")
                attrs = {_ROLE: flight.role} if flight.role else {}
                dev.study.enqueue_trial(flight.trial.params, user_attrs=attrs)
            for flight, record in list(dev.held):
                self._tell(dev, flight, record)
            dev.held.clear()
            records = sorted(study_records(dev.study), key=lambda r: r.number)
            front = pareto_front(records, self.spec.objectives)
            best = best_trial(records, self.spec.objectives)
            self.tracker.mark_front(dev.name, [r.number for r in front], best.number if best else None)
            self.tracker.close_device(dev.name, "FINISHED")
            results.append(DeviceResult(dev.name, dev.caps, tuple(records), tuple(front), best, dev.baseline))
        return results

    # -------------------------------------------------------------- progress
    def _report_progress(self) -> None:
        if self.progress is None:
            return
        snapshot = []
        for dev in self._devices.values():
            records = [r for _, r in dev.held]
            activity = "idle"
            if any(f.measuring is not None for f in dev.flights):
                activity = "measuring " + next(f.config.label() for f in dev.flights if f.measuring is not None)
            elif any(f.digest in self._conversions for f in dev.flights):
                activity = "converting"
            elif any(f.timed for f in dev.flights):
                activity = "evaluating on the host"
            elif dev.flights:
                activity = "waiting"
            best_text = None
            if dev.measured:
                best = best_trial([*dev.measured.values(), *records], self.spec.objectives)
                if best is not None:
                    parts = [f"{o.metric} {best.metrics.get(o.metric, float('nan')):.4g}" for o in self.spec.objectives]
                    best_text = f"#{best.number} {best.config.label()} ({', '.join(parts)})"
            snapshot.append(
                DeviceProgress(
                    dev.name, dev.done, self.spec.budget.trials, dev.failed, dev.reused, activity, best_text, dev.lost
                )
            )
        self.progress(snapshot)


def _host_run_text(config: DeploymentConfig) -> str:
    if Sweep._host_twin(config) is None:
        return "the same artifact"
    return f"the same configuration without {config.backends[0]}, on CPU kernels"


def _execution_key(sha256: str, config: DeploymentConfig) -> tuple[str, str, tuple[str, ...], int]:
    """What makes two measurements of one artifact the same: the bytes, and the runtime,
    backend order and threads that run them. One ``.tflite`` runs in LiteRT and in Arm NN,
    with or without XNNPACK: equal bytes alone are not an equal measurement."""
    return (sha256, config.runtime, config.backends, config.threads)


def _clocks() -> tuple[float, float]:
    """Wall time and this thread's CPU time: on a machine whose cores also measure and
    convert, the wall time of the coordinator's work includes waiting for a core."""
    return time.perf_counter(), time.thread_time()


def _replace(record: TrialRecord, **changes: Any) -> TrialRecord:
    return dataclasses.replace(record, **changes)
