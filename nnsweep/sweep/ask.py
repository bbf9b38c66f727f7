"""A device's next trials: asked of its study, turned into configurations, admitted.

:class:`Asker` is the loop's first step for each device: ask the study for as many
trials as the scheduler wants, let the coordinator's own moves go first (a repair, a
refinement, or an untried configuration when the sampler keeps repeating itself), map
each trial to a :class:`~nnsweep.core.config.DeploymentConfig`, and admit it to the
scheduler (reuse a measurement, wait for a twin, or start it, from the cache when the
artifact was converted before).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from nnsweep.core.config import DeploymentConfig
from nnsweep.core.errors import SpecError
from nnsweep.sweep import outcomes, studies
from nnsweep.sweep.lifecycle import Ticket
from nnsweep.sweep.scheduler import Admission, reuse_key
from nnsweep.sweep.space import suggest
from nnsweep.sweep.studies import role_of

if TYPE_CHECKING:
    from nnsweep.sweep.handlers import SweepStats
    from nnsweep.sweep.host import HostSide
    from nnsweep.sweep.placement import Action
    from nnsweep.sweep.recorder import Recorder
    from nnsweep.sweep.scheduler import Scheduler
    from nnsweep.tracking import Tracker

__all__ = ["Asker"]


class Asker:
    """Asks each device's study for its next trials and admits them.

    Args:
        scheduler: says how many trials to ask for, and admits each.
        recorder: the devices' studies; tells reused trials and queues the coordinator's moves.
        host: the model's digest and the artifact cache.
        tracker: a trial's run starts when it is admitted.
        stats: counts cache hits and times the coordinator's work per trial.
        start: starts an action the scheduler planned (the conversions of trials already
            asked, between two asks: the next ask may rank a runtime's layers for minutes).
    """

    def __init__(
        self,
        scheduler: Scheduler,
        recorder: Recorder,
        host: HostSide,
        tracker: Tracker,
        stats: SweepStats,
        start: Callable[[Action], None],
    ) -> None:
        self.scheduler, self.recorder, self.host, self.tracker = scheduler, recorder, host, tracker
        self.stats, self.start = stats, start
        # untried configurations drawn when the sampler repeats itself (search.seed: one sweep, one draw)
        self._rng = random.Random(recorder.spec.search.seed)

    def ask(self, device: str, now: float) -> None:
        """Ask the device's study for the trials the scheduler wants now and admit each."""
        dev, state, digest = self.recorder.devices[device], self.scheduler.devices[device], self.host.bundle.digest

        def tried(config: DeploymentConfig) -> bool:
            return state.tried(reuse_key(digest, config))

        for n in range(self.scheduler.wanted(device, now, queued=studies.queued(dev.study))):
            if n:  # what is asked converts while the next ask works (it may rank a runtime's layers)
                for action in self.scheduler.placement.plan_conversions(now):
                    self.start(action)
            started = _clocks()
            if self.scheduler.diverts(device):  # the sampler repeats itself: queue an untried configuration
                self.recorder.divert(device, tried, self._rng)
            else:  # a repair or a refinement first, when the results so far call for one
                self.recorder.move(device, tried)
            trial = dev.study.ask()
            try:
                config = suggest(trial, dev.space)
            except SpecError as exc:  # a sampled combination no configuration can express
                self.recorder.invalid(device, trial, f"invalid combination: {exc}")
                continue
            role = role_of(trial)  # type: ignore[arg-type]
            ticket = Ticket(device, trial.number, config, reuse_key(digest, config), role)
            dev.trials[ticket] = trial
            admission, earlier = self.scheduler.admit(ticket, now)
            if admission is Admission.REUSE:
                assert earlier is not None
                self.recorder.settle(ticket, outcomes.reused(ticket, earlier))
                continue
            self.tracker.start_trial(device, trial.number, config)
            if admission is Admission.NEW and (hit := self.host.cached(config)) is not None:
                self.scheduler.converted(ticket, hit.sha256, now)  # converted before: no worker, no wait
                self.stats.conversions += 1
                self.stats.cache_hits += 1
            self.stats.overhead_ms.append((_clocks()[0] - started[0]) * 1000)
            self.stats.overhead_cpu_ms.append((_clocks()[1] - started[1]) * 1000)


def _clocks() -> tuple[float, float]:
    """Wall time and this thread's CPU time: on a machine whose cores also measure and
    convert, the wall time of the coordinator's work includes waiting for a core."""
    return time.perf_counter(), time.thread_time()
