"""What the coordinator does with each finished future, and what a finished sweep returns.

:class:`Results` takes the outcome of a conversion, a measurement or a host evaluation
to the scheduler and the recorder: a :class:`~nnsweep.core.errors.TrialError` (or anything
unforeseen raised on a worker) fails that trial and the sweep goes on; an
:class:`~nnsweep.core.errors.InfrastructureError` is retried or requeues the trial and is
never recorded as a result. :func:`finish` winds each device down, re-measures its
Pareto candidates and builds its :class:`DeviceResult`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from nnsweep.agents import Capabilities, MeasureReply, MeasureRequest
from nnsweep.artifacts.key import conversion_digest
from nnsweep.core.errors import InfrastructureError, TrialError
from nnsweep.core.metrics import drop
from nnsweep.core.results import FailureKind, TrialRecord, failure_kind
from nnsweep.sweep import outcomes, studies
from nnsweep.sweep.explains import explain_trials, explained
from nnsweep.sweep.front import BestChoice, best_choice, pareto_front
from nnsweep.sweep.gate import breaks_a_bound, with_host_quality
from nnsweep.sweep.lifecycle import Phase, Ticket
from nnsweep.sweep.profiles import profile_trials, profiled
from nnsweep.sweep.remeasure import Spread, remeasure

if TYPE_CHECKING:
    import optuna

    from nnsweep.execution import Executor
    from nnsweep.spec import SweepSpec
    from nnsweep.sweep.host import HostSide
    from nnsweep.sweep.recorder import Recorder
    from nnsweep.sweep.scheduler import Scheduler
    from nnsweep.tracking import Tracker

__all__ = ["DeviceResult", "Results", "SweepStats", "finish"]

log = logging.getLogger(__name__)

CONVERT_RETRIES = 2  # an infrastructure failure (a full disk) is retried, never recorded
# Seconds a conversion waits before its first and later retries after an infrastructure
# failure: a disk a cleaner frees, a worker's machine that settles, gets that long.
CONVERT_BACKOFF_S = (5.0, 30.0)
TRANSIENT_RETRIES = 2  # a transient failure (timeout, hang, MemoryError, a crashed worker) is tried again


@dataclass
class SweepStats:
    """Coordinator figures for ``benchmarks/sweep_overhead.py``."""

    overhead_ms: list[float] = field(default_factory=list)  # ask + dispatch + tell + log, per trial (wall)
    overhead_cpu_ms: list[float] = field(default_factory=list)  # the same in the coordinator thread's CPU time
    busy_s: dict[str, float] = field(default_factory=dict)  # device -> time spent measuring
    starting_s: dict[str, float] = field(default_factory=dict)  # device -> time its agent took to get ready
    first_measure_at: dict[str, float] = field(default_factory=dict)
    finished_at: float = 0.0
    started_at: float = 0.0
    conversions: int = 0
    cache_hits: int = 0
    converted_on: dict[str, int] = field(default_factory=dict)  # machine -> conversions started there


@dataclass(frozen=True)
class DeviceResult:
    """A device's outcome: all its trials, the feasible Pareto front and the best one."""

    device: str
    capabilities: Capabilities
    records: tuple[TrialRecord, ...]
    pareto: tuple[TrialRecord, ...]
    best: TrialRecord | None
    baseline: TrialRecord | None
    breakdown: Mapping[str, float] = field(default_factory=dict)  # seconds per phase (outcomes.time_breakdown)
    space_size: int | None = None  # configurations in the device's space (None: unbounded)
    exhausted: bool = False  # every configuration of its space was tried
    spread: tuple[Spread, ...] = ()  # its Pareto candidates and baseline re-measured in fresh processes
    fell_off: tuple[int, ...] = ()  # trials on the sweep's front that the re-measured figures took off it
    choice: BestChoice = field(default_factory=lambda: BestChoice(None))  # how the best was chosen (ties)
    lost: bool = False  # its agent was lost and did not come back: the sweep ended without its remaining trials
    profiles: Mapping[int, Mapping[str, object]] = field(default_factory=dict)  # trial -> per-operator profile
    divergences: Mapping[int, Mapping[str, object]] = field(default_factory=dict)  # trial -> layers against fp32


class Results:
    """The handlers of finished futures (see the module docstring).

    Args:
        spec: the sweep.
        executor: to restart a device whose measurement hung.
        host: the coordinator's side of measuring (artifacts, host evaluations, records).
        scheduler: told what converted; requeues what is retried.
        recorder: fails, requeues and settles trials.
        stats: the coordinator's figures.
        hang_limit_s: a measurement with no result this long is hung.
        clock: monotonic seconds.
    """

    def __init__(
        self,
        spec: SweepSpec,
        executor: Executor,
        host: HostSide,
        scheduler: Scheduler,
        recorder: Recorder,
        stats: SweepStats,
        hang_limit_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.spec, self.executor, self.host = spec, executor, host
        self.scheduler, self.recorder, self.stats = scheduler, recorder, stats
        self.hang_limit_s, self.clock = hang_limit_s, clock
        self._retries: dict[str, int] = {}
        self._transient: dict[tuple[str, str], int] = {}  # (device, config digest) -> transient failures
        self._contended: set[tuple[str, int]] = set()  # (device, trial) measured again after contention

    def prepared(self, device: str, since: float, future: Future[None]) -> None:
        """The device's agent is ready (or failed to get ready: its measurements then start
        their runtimes themselves, or find the agent lost)."""
        self.scheduler.devices[device].starting = False
        self.stats.starting_s[device] = self.clock() - since
        if (exc := future.exception()) is not None:
            log.info("%s: its agent did not get ready (%s); measuring goes on", device, exc)

    def converters_ready(self, machine: str, future: Future[None]) -> None:
        """The conversion workers of ``machine`` are ready: conversions may start there."""
        self.scheduler.placement.converters_starting.discard(machine)
        log.debug("the conversion workers of %s are ready", machine)

    def converted(self, digest: str, future: Future[Any]) -> None:
        now = self.clock()
        waiting = self.scheduler.placement.converting(digest)
        try:
            artifact, hit = future.result()
        except TrialError as exc:
            self._conversion_failed(waiting, str(exc), failure_kind(exc), now)
            return
        except InfrastructureError as exc:
            tries = self._count_retry(digest, exc)
            pause = CONVERT_BACKOFF_S[min(tries, len(CONVERT_BACKOFF_S)) - 1]
            log.warning("conversion worker failed (%s); converting again in %.0f s", exc, pause)
            for ticket in waiting:
                self.scheduler.retry(ticket, now, pause)
            return
        except Exception as exc:  # raised on a worker: an unforeseen failure fails these trials only
            reason = f"conversion failed: {type(exc).__name__}: {exc}"
            self._conversion_failed(waiting, reason, FailureKind.TRANSIENT, now)
            return
        self.stats.cache_hits += int(hit)
        from nnsweep.artifacts.deploy import for_config

        for ticket in waiting:  # one artifact for every thread count that waited for it
            self.host.remember(for_config(artifact, ticket.config))
            self.scheduler.converted(ticket, artifact.sha256, now)

    def measure_request(self, ticket: Ticket) -> MeasureRequest | None:
        """What to send the device for ``ticket`` (its artifact's files, read now); None when
        they left the cache after the conversion (a user's ``rm``, a cleaner): then it is
        converted again, counted as one conversion retry with the trials READY with the same
        artifact (its other thread counts), which would find it gone too."""
        try:
            return self.host.measure_request(ticket.config)
        except OSError as exc:
            self._count_retry(conversion_digest(ticket.config), exc)
            same = self.scheduler.ready_with(ticket.artifact_sha) if ticket.artifact_sha else []
            trials = ", ".join(f"{t.device} trial {t.number}" for t in [ticket, *same])
            log.warning("%s: the artifact is gone from the cache (%s); converting again", trials, exc.strerror or exc)
            for t in [ticket, *same]:
                self.scheduler.retry(t, self.clock())
            return None

    def _count_retry(self, digest: str, exc: Exception) -> int:
        """Count an infrastructure failure of the conversion ``digest`` and return how many
        it has had; past the retries, end the run."""
        self._retries[digest] = self._retries.get(digest, 0) + 1
        if self._retries[digest] > CONVERT_RETRIES:
            raise InfrastructureError(
                f"conversion failed {CONVERT_RETRIES + 1} times ({exc}); mend that and run the sweep again: "
                "finished trials are kept, this one is requeued"
            ) from exc
        return self._retries[digest]

    def _again(self, ticket: Ticket, kind: FailureKind) -> bool:
        """Whether a failure of ``kind`` is tried again (transient, and retries left)."""
        if kind is not FailureKind.TRANSIENT:
            return False
        key = (ticket.device, ticket.config.digest())
        self._transient[key] = self._transient.get(key, 0) + 1
        return self._transient[key] <= TRANSIENT_RETRIES

    def _conversion_failed(self, waiting: list[Ticket], reason: str, kind: FailureKind, now: float) -> None:
        for ticket in waiting:
            if self._again(ticket, kind):
                log.warning("%s trial %d: %s (transient); converting again", ticket.device, ticket.number, reason)
                self.scheduler.retry(ticket, now)
            else:
                self.recorder.fail(ticket, reason, kind=kind)

    def _measurement_failed(self, ticket: Ticket, reason: str, kind: FailureKind) -> None:
        if self._again(ticket, kind):
            log.warning("%s trial %d: %s (transient); measuring again later", ticket.device, ticket.number, reason)
            self.recorder.requeue(ticket, f"{reason} (transient: tried again)")
        else:
            self.recorder.fail(ticket, reason, kind=kind)

    def measured(self, ticket: Ticket, future: Future[MeasureReply]) -> None:
        since = ticket.measuring_since or self.clock()
        self.stats.busy_s[ticket.device] = self.stats.busy_s.get(ticket.device, 0.0) + self.clock() - since
        try:
            reply = future.result()
        except TrialError as exc:
            self._measurement_failed(ticket, str(exc), failure_kind(exc))
            return
        except InfrastructureError as exc:
            if ticket.hung:
                self.executor.revive(ticket.device)
                hung = f"benchmark hung: no result within {self.hang_limit_s:.0f} s"
                self._measurement_failed(ticket, hung, FailureKind.TRANSIENT)
            else:
                self.recorder.requeue(ticket, str(exc), lost=True)
            return
        except Exception as exc:  # raised on a worker: an unforeseen failure fails this trial only
            self._measurement_failed(ticket, f"{type(exc).__name__}: {exc}", FailureKind.TRANSIENT)
            return
        if reply.timing.contended and (ticket.device, ticket.number) not in self._contended:
            # Its timed runs shared their cores with other work: that figure says little.
            self._contended.add((ticket.device, ticket.number))
            log.info("%s trial %d met other work on its cores while timed (%.2f cores); measuring again",
                     ticket.device, ticket.number, reply.timing.others_cores or 0.0)  # fmt: skip
            ticket.move(Phase.READY, self.clock())
            return
        if reply.outputs is None:
            self.host.timed[ticket] = reply  # timed on the device; outputs from this host
            ticket.move(Phase.EVALUATING, self.clock())
            return
        self._complete(ticket, reply, on_host=False)

    def evaluated(self, ticket: Ticket, future: Future[Any]) -> None:
        reply = self.host.timed.pop(ticket)
        try:
            outputs = future.result()
        except TrialError as exc:
            self.recorder.fail(ticket, f"evaluation on the host: {exc}")
            return
        self._complete(ticket, dataclasses.replace(reply, outputs=outputs), on_host=True)

    def gated(self, ticket: Ticket, future: Future[Any]) -> None:
        """The host ran a READY trial's artifact for its quality: told infeasible now if that
        breaks a quality bound, else back to READY for its device (:mod:`nnsweep.sweep.gate`).
        A host run that fails lets the trial through: the device decides it."""
        now = self.clock()
        try:
            quality = self.host.quality(ticket.config, future.result())
        except TrialError as exc:
            log.info("%s trial %d: no quality gate (%s); timing it on the device", ticket.device, ticket.number, exc)
            self.scheduler.gated(ticket, {}, now)
            return
        baseline = self.scheduler.devices[ticket.device].baseline
        base = baseline.metrics if baseline is not None else {}
        if breaks_a_bound(self.spec, quality, base, self.host.eager):
            self.recorder.settle(ticket, self.host.untimed_record(self.spec.name, ticket, quality))
        else:
            self.scheduler.gated(ticket, quality, now)

    def _complete(self, ticket: Ticket, reply: MeasureReply, *, on_host: bool) -> None:
        try:
            record = self.host.record(self.spec.name, ticket, reply, on_host=on_host)
        except TrialError as exc:
            self.recorder.fail(ticket, str(exc))
            return
        if ticket.gate is not None:
            record = with_host_quality(record, ticket.gate)
        self.recorder.settle(ticket, record)


def finish(
    spec: SweepSpec,
    executor: Executor,
    host: HostSide,
    scheduler: Scheduler,
    recorder: Recorder,
    tracker: Tracker,
    stopped: Callable[[], bool],
    starting_s: Mapping[str, float],
) -> list[DeviceResult]:
    """Wind each device down (a device that never came back runs its trials next time),
    re-measure its Pareto candidates and its fp32 baseline in fresh processes
    (``spec.measure.remeasure``; not once ``stopped``) and decide its front, best and speed-ups on
    the pooled figures, mark them in the tracker and return its result; ``starting_s``
    (device -> how long its agent took to get ready) joins its time breakdown."""
    results = []
    for name, dev in recorder.devices.items():
        recorder.wind_down(name, f"{name} lost")
        records = studies.study_records(dev.study)
        front = pareto_front(records, spec.objectives)
        spread: list[Spread] = []
        if spec.measure.remeasure and front and not stopped():
            baseline = scheduler.devices[name].baseline
            # by number: the scheduler's baseline record is older than the study's (its
            # figures were re-read since), so it never equals the front's copy
            off_front = baseline is not None and baseline.number not in {r.number for r in front}
            candidates = [*front, *([baseline] if baseline is not None and off_front else [])]
            spread = _remeasure_front(spec, dev.study, candidates, host, partial(executor.measure, name), stopped)
            records = studies.study_records(dev.study)
        decided_front = pareto_front(records, spec.objectives)
        choice = best_choice(records, spec.objectives)
        best = choice.record
        state = scheduler.devices[name]
        profiles: dict[int, Mapping[str, object]] = {}
        if spec.search.profile != "none" and not spec.decoder and not stopped():  # tools of one graph
            baseline_number = studies.baseline_number(dev.study)
            trials = profiled(records, decided_front, best, baseline_number, every=spec.search.profile == "all")
            # an emulated board shares this machine's name, but a profile here would be the x86 host's kernels
            here = state.machine == scheduler.placement.converter_machine and not any(r.emulated for r in records)
            on_device = None if here else partial(executor.profile, name)
            taken = profile_trials(name, trials, host, dev.study, tracker, host.settings.timeout_s, on_device=on_device)
            profiles = {n: p.to_dict() for n, p in taken.items()}
        divergences: Mapping[int, Mapping[str, object]] = {}
        if spec.search.explain != "none" and not spec.decoder and not stopped():
            divergences = explain_trials(name, explained(records), host, dev.study, tracker)
        fell_off = tuple(r.number for r in front if r.number not in {d.number for d in decided_front})
        tracker.mark_front(
            name,
            [r.number for r in decided_front],
            best.number if best else None,
            remeasured={s.number: s.metrics() for s in spread if s.metrics()},
            summary=_best_figures(spec, best),
        )
        lost = state.lost and state.counted < state.budget and not state.exhausted  # its budget cut short
        tracker.close_device(name, "KILLED" if lost else "FINISHED")  # KILLED: as an interrupted one, to be resumed
        breakdown = outcomes.time_breakdown(records)
        if name in starting_s:
            breakdown = {"starting its runtimes": starting_s[name], **breakdown}
        baseline_record = next((r for r in records if state.baseline and r.number == state.baseline.number), None)
        results.append(
            DeviceResult(
                name, dev.caps, tuple(records), tuple(decided_front), best, baseline_record or state.baseline,
                breakdown, state.space_size, state.exhausted, tuple(spread), fell_off, choice, lost, profiles,
                divergences,
            )
        )  # fmt: skip
    return results


REMEASURE_ROUNDS = 3


def _best_figures(spec: SweepSpec, best: TrialRecord | None) -> dict[str, float]:
    """The best trial's objectives, bounded metrics and user metrics, as ``best_<metric>``."""
    if best is None:
        return {}
    names = {o.metric for o in spec.objectives} | spec.constraints.names() | {m.name for m in spec.metrics}
    names |= {drop(n) for n in spec.constraints.max_drop}
    return {f"best_{n}": best.metrics[n] for n in sorted(names) if n in best.metrics}


def _remeasure_front(
    spec: SweepSpec,
    study: optuna.Study,
    candidates: list[TrialRecord],
    host: HostSide,
    measure: Callable[[Any], Any],
    stopped: Callable[[], bool],
) -> list[Spread]:
    """Re-measure ``candidates`` (the front and the baseline), then any trial the pooled
    figures bring onto the front that was not measured again (a candidate that fell off
    can expose a point its sweep figure dominated), up to :data:`REMEASURE_ROUNDS` rounds:
    the front is decided on re-measured figures only. Each round is interleaved within
    itself; the pooled figures are kept in the study."""
    spread: list[Spread] = []
    for _ in range(REMEASURE_ROUNDS):
        if not candidates or stopped():
            break
        log.info("%s: re-measuring %d candidates in fresh processes", study.study_name, len(candidates))
        spread += remeasure(candidates, host.request_if_cached, measure, spec.measure.remeasure, stopped=stopped)
        studies.store_remeasured(study, {s.number: s.metrics() for s in spread})
        done = {s.number for s in spread}
        front = pareto_front(studies.study_records(study), spec.objectives)
        candidates = [r for r in front if r.number not in done and not r.estimated and r.reused_from is None]
    return sorted(spread, key=lambda s: s.number)
