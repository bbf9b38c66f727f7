"""The coordinator: a thin loop between the scheduler's decisions and their side effects.

:class:`Sweep` asks each device's study for trials (:mod:`nnsweep.sweep.ask`), which the
:class:`~nnsweep.sweep.scheduler.Scheduler` admits and its
:class:`~nnsweep.sweep.placement.Placement` places; it starts what is planned on the
:class:`~nnsweep.execution.Executor` and routes each finished future to
:mod:`nnsweep.sweep.handlers`. Outcomes become study tells and tracker calls. Before
anything is measured a run takes the sweep's lock and checks its fingerprint
(:mod:`nnsweep.sweep.state`); resuming settles what a killed run left and backfills the
tracker from the studies, which are the record of truth.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nnsweep.artifacts.key import conversion_digest
from nnsweep.core.errors import InfrastructureError, SpecError
from nnsweep.core.results import FailureKind
from nnsweep.execution import ConvertRequest, Executor, ModelSource
from nnsweep.spec import Objective, SweepSpec
from nnsweep.sweep import outcomes, resume
from nnsweep.sweep.ask import Asker
from nnsweep.sweep.decoder_host import DecoderHost
from nnsweep.sweep.front import best_trial
from nnsweep.sweep.gate import gate_for
from nnsweep.sweep.handlers import DeviceResult, Results, SweepStats, finish
from nnsweep.sweep.host import HostSide
from nnsweep.sweep.lifecycle import Phase
from nnsweep.sweep.placement import Action
from nnsweep.sweep.rankings import ranking_metric
from nnsweep.sweep.recorder import Recorder
from nnsweep.sweep.scheduler import Scheduler, default_depth
from nnsweep.sweep.state import SweepLock, fingerprint
from nnsweep.sweep.studies import mend_storage, open_study, study_records

if TYPE_CHECKING:
    from nnsweep.tracking import Tracker

__all__ = ["DeviceProgress", "DeviceResult", "Sweep", "SweepStats", "open_study", "study_records"]

log = logging.getLogger(__name__)


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
    space: str = ""  # "642 configurations", "unbounded", or that the space is exhausted


class Sweep:
    """Runs one sweep spec.

    ``executor`` runs conversions and measurements (local threads or Ray); ``tracker`` logs
    trials (MLflow, or nothing); ``cache_root`` is the artifact cache the coordinator and
    conversion workers share. ``progress`` gets every device's snapshot on each change,
    ``notice`` a line when a long step outside the trials starts or moves on. ``depth``:
    trials in flight per device (``None``: :func:`default_depth` of the conversion slots);
    ``lost_timeout_s``: how long a lost device is waited for once the others are done;
    ``hang_grace_s``: past its own timeout, a silent measurement is hung; ``fresh`` and
    ``retry_failed`` are ``nnsweep run``'s options; ``clock`` is monotonic seconds (tests
    pass a fake).
    """

    def __init__(
        self,
        spec: SweepSpec,
        executor: Executor,
        tracker: Tracker,
        cache_root: Path,
        *,
        progress: Callable[[list[DeviceProgress]], None] | None = None,
        notice: Callable[[str], None] | None = None,
        depth: int | None = None,
        lost_timeout_s: float = 300.0,
        hang_grace_s: float = 60.0,
        fresh: bool = False,
        retry_failed: frozenset[FailureKind] = frozenset(),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.spec, self.executor, self.tracker = spec, executor, tracker
        self.retry = frozenset({FailureKind.TRANSIENT}) | retry_failed
        self.progress, self.depth, self.fresh, self.clock = progress, depth, fresh, clock
        self.lost_timeout_s, self.hang_grace_s = lost_timeout_s, hang_grace_s
        self.source = ModelSource(spec.model, cache_root, spec.weights, spec.input_shape, spec.data, spec.decoder)
        self.settings = spec.measure
        self.stats = SweepStats()
        host = DecoderHost if spec.decoder else HostSide
        self.host = host(self.source, self.settings, notice, spec.metrics, ranking_metric(spec))
        self._futures: dict[Future[Any], Callable[[Future[Any]], None]] = {}
        self._scheduler: Scheduler | None = None
        self._recorder: Recorder | None = None
        self._asker: Asker | None = None
        self._results: Results | None = None
        self._stop = threading.Event()
        self._looping = False
        self._phases: dict[str, str] = {}  # device -> what it did at the last snapshot

    def stop(self) -> bool:
        """Ask the run to stop at its next safe point, as Ctrl-C would (from a signal handler
        or another thread): in-flight trials are requeued, measured ones kept.

        Returns:
            Whether the loop will honour it; ``False`` before the loop runs, when nothing is in
            flight and the caller may interrupt at once (opening a sweep is safe to kill).
        """
        self._stop.set()
        return self._looping

    @property
    def scheduler(self) -> Scheduler:
        assert self._scheduler is not None, "run() creates the scheduler"
        return self._scheduler

    @property
    def recorder(self) -> Recorder:
        assert self._recorder is not None, "run() creates the recorder"
        return self._recorder

    @property
    def asker(self) -> Asker:
        assert self._asker is not None, "run() creates the asker"
        return self._asker

    @property
    def results(self) -> Results:
        assert self._results is not None, "run() creates the result handlers"
        return self._results

    # ----------------------------------------------------------------- set-up
    def run(self) -> list[DeviceResult]:
        """Run until every device has spent its budget (or its time, or its space).

        Raises:
            SweepBusy: another process runs this sweep (exit 2).
            SweepChanged: the model or the spec changed since the sweep started (exit 2).
            SpecError: a device can serve none of the spec's space (exit 2; nothing written).
            KeyboardInterrupt: after recording in-flight trials as interrupted.
        """
        self.stats.started_at = self.clock()
        new_state = None  # the outermost folder this run creates for its state, if it creates one
        if not self.spec.state_dir.exists():
            new_state = self.spec.state_dir
            while not new_state.parent.exists():
                new_state = new_state.parent
        lock = SweepLock(self.spec.state_dir, self.spec.name)
        lock.acquire()
        try:
            try:
                mend_storage(self.spec)  # the one writer now: what a killed writer tore can go
                log.info("phase: start-up (starting the executor, loading the model)")
                self.executor.start(self.spec.devices)  # its agents probe their devices while the model loads
                self.executor.import_converters(self.spec.space.runtimes)  # and its workers import
                self.host.load()
                self.host.check_float_layers(self.spec.space.float_layers)
                fp = fingerprint(self.spec, self.host.bundle)
                log.info("phase: recovery (settling what an earlier run left)")
                plan = resume.check(
                    self.spec,
                    self.executor,
                    fp,
                    fresh=self.fresh,
                    layers_for=self.host.float_layers,
                    source=self.source,
                )
                self.host.tell(*plan.notices())
            except SpecError:
                lock.release()
                if new_state is not None:  # refused before anything was measured: leave nothing behind
                    shutil.rmtree(new_state, ignore_errors=True)
                raise
            gate = gate_for(self.spec)
            self._scheduler = Scheduler(
                self.executor.converter_machine, self.executor.converters, lost_timeout_s=self.lost_timeout_s, gate=gate
            )
            devices = resume.open_devices(
                self.spec, plan, fp, self._scheduler, self.tracker, self.host.bundle.digest,
                self.depth or default_depth(self.executor.converters), self.clock(),
                self.retry,
            )  # fmt: skip
            self._recorder = Recorder(self.spec, self._scheduler, self.tracker, devices, self.host.eager, self.clock)
            self._asker = Asker(self._scheduler, self._recorder, self.host, self.tracker, self.stats, self._start)
            hang_limit_s = self.settings.timeout_s + self.hang_grace_s
            self._results = Results(
                self.spec, self.executor, self.host, self._scheduler, self._recorder, self.stats, hang_limit_s,
                self.clock,
            )  # fmt: skip
            for machine, workers in plan.converters_ready.items():  # its first trials wait to convert meanwhile
                self._scheduler.placement.converters_starting.add(machine)
                self._futures[workers] = partial(self._results.converters_ready, machine)
            for name, dev in devices.items():  # warm workers start while the first artifacts convert
                if (ready := self.executor.prepare(name, dev.space.runtimes)) is not None:
                    self._scheduler.devices[name].starting = True
                    self._futures[ready] = partial(self._results.prepared, name, self.clock())
            return self._loop()
        finally:
            lock.release()
            self.host.close()

    # ------------------------------------------------------------------ loop
    def _loop(self) -> list[DeviceResult]:
        self._looping = True
        self._report_progress()
        try:
            while True:
                if self._stop.is_set():
                    raise KeyboardInterrupt
                now = self.clock()
                for device in self.scheduler.revivals(now):
                    if self.executor.revive(device):
                        self.scheduler.revived(device)
                        log.warning("%s is back; resuming its study", device)
                for ticket in self.scheduler.hung(now, self.settings.timeout_s + self.hang_grace_s):
                    log.warning("%s: trial %d gave no result; restarting its agent", ticket.device, ticket.number)
                    self.executor.abandon(ticket.device)
                if not self.scheduler.placement.quiet():  # nothing of ours beside a measurement on this machine
                    for device in self.recorder.devices:
                        self.asker.ask(device, now)
                for action in self.scheduler.placement.plan(now):
                    self._start(action)
                self.tracker.quiet(self.scheduler.placement.quiet())
                if not self._futures:
                    if self.scheduler.finished(self.clock()):
                        break
                    time.sleep(0.5)  # only lost devices are left: wait for them to come back
                    self._report_progress()
                    continue
                done, _ = wait(list(self._futures), timeout=1.0, return_when=FIRST_COMPLETED)
                for future in done:
                    self._futures.pop(future)(future)
                self._report_progress()
        except (KeyboardInterrupt, InfrastructureError):
            self._interrupt()  # an infrastructure failure that retries did not cure ends the run the same way
            raise
        self.stats.finished_at = self.clock()
        log.info("phase: finishing (re-measuring the front, closing the studies)")
        return self._finish()

    def _start(self, action: Action) -> None:
        t = action.ticket
        if action.kind == "reuse":
            assert action.earlier is not None
            self.recorder.settle(t, outcomes.reused(t, action.earlier))
        elif action.kind == "convert":
            self.stats.conversions += 1
            self.stats.converted_on[action.machine or ""] = self.stats.converted_on.get(action.machine or "", 0) + 1
            future: Future[Any] = self.executor.convert(ConvertRequest(self.source, t.config), action.machine)
            self._futures[future] = partial(self.results.converted, conversion_digest(t.config))
        elif action.kind == "measure":
            if (request := self.results.measure_request(t)) is None:
                return  # its artifact left the cache: it converts again
            self.stats.first_measure_at.setdefault(t.device, self.clock())
            self._futures[self.executor.measure(t.device, request)] = partial(self.results.measured, t)
        elif action.kind in ("evaluate", "gate"):  # a run on this host for the outputs alone
            then = self.results.evaluated if action.kind == "evaluate" else self.results.gated
            self._futures[self.host.submit_outputs(t.config)] = partial(then, t)

    def _interrupt(self) -> None:
        for name in self.recorder.devices:
            self.recorder.wind_down(name, "sweep interrupted")
            self.tracker.close_device(name, "KILLED")

    def _finish(self) -> list[DeviceResult]:
        return finish(
            self.spec,
            self.executor,
            self.host,
            self.scheduler,
            self.recorder,
            self.tracker,
            self._stop.is_set,
            self.stats.starting_s,
        )

    def _report_progress(self) -> None:
        if self._scheduler is None:
            return
        snapshot = progress_snapshot(self._scheduler, self.spec.objectives)
        # Said once per change, with -v: where a run is when it stops (benchmarks/fault_injection.py
        # reads these lines to name the phase each of its kills landed in).
        phases = {d.device: d.activity.split(" ", 1)[0] for d in snapshot}
        for device, phase in phases.items():
            if self._phases.get(device) != phase:
                log.info("phase: %s %s", device, phase)
        self._phases = phases
        if self.progress is not None:
            self.progress(snapshot)


def progress_snapshot(scheduler: Scheduler, objectives: Sequence[Objective]) -> list[DeviceProgress]:
    """Each device's progress, as the scheduler knows it."""
    snapshot = []
    for name, state in scheduler.devices.items():
        phases = {t.phase for t in state.tickets}
        activity = next(
            (label for phase, label in _ACTIVITY if phase in phases), "waiting" if state.tickets else "idle"
        )
        if Phase.MEASURING in phases:
            activity += " " + next(t.config.label() for t in state.live(Phase.MEASURING))
        best = best_trial(list(state.measured.values()), objectives)
        best_text = None
        if best is not None:
            parts = [f"{o.metric} {best.metrics.get(o.metric, float('nan')):.4g}" for o in objectives]
            best_text = f"#{best.number} {best.config.label()} ({', '.join(parts)})"
        size = state.space_size
        space = "unbounded" if size is None else f"{size} configurations"
        if state.exhausted:
            space = f"exhausted: all {size} configurations tried" if size is not None else "exhausted: repeats only"
        snapshot.append(
            DeviceProgress(
                name, state.counted, state.budget, state.failed, state.reused, activity, best_text, state.lost, space
            )
        )
    return snapshot


_ACTIVITY = (
    (Phase.MEASURING, "measuring"),
    (Phase.CONVERTING, "converting"),
    (Phase.EVALUATING, "evaluating on the host"),
    (Phase.GATING, "gating on the host"),
)
