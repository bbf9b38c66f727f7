"""Re-measure each device's Pareto candidates in fresh processes when its sweep ends.

One measurement is one process's run. Another process can land on other cores, get
other memory and meet other load, so its p50 differs; the candidates a user picks
from deserve to be measured more than once. At the end of a sweep each Pareto
candidate of a measuring device is measured ``processes`` more times, each in a
fresh process (never one forked from a warm worker), with the sweep's own settings,
and the spread of those p50s is reported: the coefficient of variation between
processes, with the machine's load next to it. Estimated latencies (an NPU
compiler's) are not measurements and are skipped.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass

from nnsweep.agents import MeasureReply, MeasureRequest
from nnsweep.core.config import DeploymentConfig
from nnsweep.core.errors import NnsweepError
from nnsweep.core.results import TrialRecord

__all__ = ["Spread", "remeasure"]


@dataclass(frozen=True)
class Spread:
    """One Pareto candidate measured again in fresh processes.

    Args:
        number: its trial number.
        config: its configuration.
        sweep_p50_ms: the p50 the sweep measured.
        p50_ms: each fresh process's p50.
        loadavg_1m: the machine's 1-minute load average at each of them.
        error: why it could not be measured again (then ``p50_ms`` is empty).
    """

    number: int
    config: DeploymentConfig
    sweep_p50_ms: float
    p50_ms: tuple[float, ...] = ()
    loadavg_1m: tuple[float, ...] = ()
    error: str = ""

    @property
    def cv(self) -> float | None:
        """The p50's coefficient of variation between the fresh processes (``None`` with fewer than 2)."""
        if len(self.p50_ms) < 2 or statistics.fmean(self.p50_ms) <= 0:
            return None
        return statistics.stdev(self.p50_ms) / statistics.fmean(self.p50_ms)

    def to_dict(self) -> dict[str, object]:
        return {
            "trial": self.number,
            "config": self.config.label(),
            "sweep_p50_ms": self.sweep_p50_ms,
            "p50_ms": list(self.p50_ms),
            "cv": self.cv,
            "loadavg_1m": list(self.loadavg_1m),
            "error": self.error,
        }


def remeasure(
    front: Sequence[TrialRecord],
    request_for: Callable[[DeploymentConfig], MeasureRequest | None],
    measure: Callable[[MeasureRequest], Future[MeasureReply]],
    processes: int,
    stopped: Callable[[], bool] = lambda: False,
) -> list[Spread]:
    """Measure each candidate of ``front`` ``processes`` times, each in a fresh process.

    Args:
        request_for: the measure request of a configuration (``None``: its artifact is gone).
        measure: sends a request to the device's agent (one measurement at a time there).
        stopped: polled while waiting; once true, what is not measured yet is left out.
    """
    candidates = [r for r in front if not r.estimated and r.reused_from is None]
    pending: list[tuple[TrialRecord, float, list[Future[MeasureReply]]]] = []
    spreads: list[Spread] = []
    for record in candidates:
        request = request_for(record.config)
        p50 = record.metrics.get("latency_p50_ms", 0.0)
        if request is None:
            spreads.append(Spread(record.number, record.config, p50, error="its artifact is no longer in the cache"))
            continue
        fresh = dataclasses.replace(request, fresh=True)
        pending.append((record, p50, [measure(fresh) for _ in range(processes)]))
    for record, p50, futures in pending:
        p50s, loads, errors = [], [], []
        for future in futures:
            while not future.done() and not stopped():
                wait([future], timeout=0.5)
            if not future.done():
                return sorted(spreads, key=lambda s: s.number)  # interrupted: the rest is not waited for
            try:
                timing = future.result().timing
            except NnsweepError as exc:  # a measurement that failed now: said, not averaged in
                errors.append(str(exc))
                continue
            p50s.append(timing.latency.p50)
            loads.append(timing.loadavg_1m if timing.loadavg_1m is not None else float("nan"))
        spreads.append(Spread(record.number, record.config, p50, tuple(p50s), tuple(loads), "; ".join(errors)[:400]))
    return sorted(spreads, key=lambda s: s.number)
