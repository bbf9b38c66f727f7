"""Re-measure each device's Pareto candidates and fp32 baseline in fresh processes at the end.

One process's p50 differs from another's (other cores, memory, load), so the figures a
user picks from, and the baseline every speed-up divides by, are measured ``processes``
more times, each in a fresh process with the sweep's settings, interleaved (A B C A B C:
a drift hits every candidate alike). A contended run
(:attr:`nnsweep.bench.Timing.contended`) is measured again. The figure that decides the
front, the best and the speed-ups is the median of the pooled p50s with a
distribution-free interval. Estimated latencies (an NPU compiler's) are skipped.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass

from nnsweep.agents import MeasureReply, MeasureRequest
from nnsweep.core.config import DeploymentConfig
from nnsweep.core.errors import NnsweepError
from nnsweep.core.metrics import LATENCY_P50, coverage, high, low, remeasured, swept
from nnsweep.core.results import TrialRecord

__all__ = ["Spread", "median_interval", "remeasure"]

CONFIDENCE = 0.95


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
        left_out_ms: the p50s of fresh processes whose timed runs met other processes'
            work on their cores (not pooled; each was measured again).
        all_contended: every fresh process met such work; their p50s are pooled anyway.
    """

    number: int
    config: DeploymentConfig
    sweep_p50_ms: float
    p50_ms: tuple[float, ...] = ()
    loadavg_1m: tuple[float, ...] = ()
    error: str = ""
    left_out_ms: tuple[float, ...] = ()
    all_contended: bool = False

    @property
    def cv(self) -> float | None:
        """The p50's coefficient of variation between the fresh processes (``None`` with fewer than 2)."""
        if len(self.p50_ms) < 2 or statistics.fmean(self.p50_ms) <= 0:
            return None
        return statistics.stdev(self.p50_ms) / statistics.fmean(self.p50_ms)

    @property
    def pooled_ms(self) -> tuple[float, ...]:
        """The sweep's p50 and each fresh process's."""
        return (self.sweep_p50_ms, *self.p50_ms) if self.sweep_p50_ms > 0 else self.p50_ms

    @property
    def median_ms(self) -> float | None:
        """The median of the pooled p50s: the figure that decides (``None``: not measured again)."""
        return statistics.median(self.pooled_ms) if self.p50_ms else None

    @property
    def interval_ms(self) -> tuple[float, float, float] | None:
        """(low, high, coverage) of the median, see :func:`median_interval`."""
        return median_interval(self.pooled_ms) if self.p50_ms else None

    @property
    def gap(self) -> float | None:
        """The sweep's p50 relative to the pooled median, minus 1 (``0.1``: the sweep read 10 % slower)."""
        median = self.median_ms
        return None if not median or self.sweep_p50_ms <= 0 else self.sweep_p50_ms / median - 1.0

    def metrics(self) -> dict[str, float]:
        """What a re-measured trial carries: the pooled median, its interval, the sweep's figure."""
        interval = self.interval_ms
        if interval is None or self.median_ms is None:
            return {}
        lo, hi, covered = interval
        return {
            remeasured(LATENCY_P50): self.median_ms,
            low(LATENCY_P50): lo,
            high(LATENCY_P50): hi,
            coverage(LATENCY_P50): covered,
            swept(LATENCY_P50): self.sweep_p50_ms,
            "remeasure_processes": float(len(self.p50_ms)),
            "remeasure_left_out": float(len(self.left_out_ms)),
        }

    def to_dict(self) -> dict[str, object]:
        return {
            "trial": self.number,
            "config": self.config.label(),
            "sweep_p50_ms": self.sweep_p50_ms,
            "p50_ms": list(self.p50_ms),
            "cv": self.cv,
            "loadavg_1m": list(self.loadavg_1m),
            "left_out_ms": list(self.left_out_ms),
            "all_contended": self.all_contended,
            "error": self.error,
        }


def median_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """A distribution-free interval for the median of ``values``: ``(low, high, coverage)``.

    The interval between the k-th smallest and the k-th largest value holds the true
    median with probability ``1 - 2 P(Binomial(n, 1/2) < k)``, whatever the values'
    distribution (they need only be independent draws). The narrowest such interval
    whose coverage reaches ``confidence`` is returned; with too few values for that
    (fewer than 6 for 95 %) it is the full range, and ``coverage`` says what it holds
    (4 values: 87.5 %).

    Example:
        >>> median_interval([1.0, 1.2, 1.1, 0.9])
        (0.9, 1.2, 0.875)
    """
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        raise ValueError("no values")

    def covers(k: int) -> float:
        return 1.0 - 2.0 * sum(math.comb(n, i) for i in range(k)) / 2.0**n

    k = 1
    while k + 1 <= (n + 1) // 2 and covers(k + 1) >= confidence:
        k += 1
    return xs[k - 1], xs[n - k], covers(k)


def remeasure(
    front: Sequence[TrialRecord],
    request_for: Callable[[DeploymentConfig], MeasureRequest | None],
    measure: Callable[[MeasureRequest], Future[MeasureReply]],
    processes: int,
    stopped: Callable[[], bool] = lambda: False,
) -> list[Spread]:
    """Measure each candidate of ``front`` ``processes`` times, each in a fresh process,
    interleaved: every candidate once, then every candidate again, and so on.

    A figure whose timed runs met other processes' work on its cores beyond what its
    threads left spare (:attr:`nnsweep.bench.Timing.contended`) is left out of the
    pool and measured again, interleaved likewise, up to ``processes`` more times per
    candidate. Where every figure met such work, they are pooled and the spread says so.

    Args:
        request_for: the measure request of a configuration (``None``: its artifact is gone).
        measure: sends a request to the device's agent (one measurement at a time there).
        stopped: polled while waiting; once true, what is not measured yet is left out.
    """
    spreads: list[Spread] = []
    pending: list[_Candidate] = []
    for record in front:
        if record.estimated or record.reused_from is not None:
            continue
        request = request_for(record.config)
        p50 = record.metrics.get(swept(LATENCY_P50), record.metrics.get(LATENCY_P50, 0.0))
        if request is None:
            spreads.append(Spread(record.number, record.config, p50, error="its artifact is no longer in the cache"))
            continue
        pending.append(_Candidate(record, p50, dataclasses.replace(request, fresh=True)))
    rounds = [pending] * processes
    for extra in range(processes + 1):
        for batch in rounds:  # A B C A B C ...: the agent measures them in this order
            for candidate in batch:
                candidate.futures.append(measure(candidate.request))
        for candidate in pending:
            if not candidate.collect(stopped):
                return sorted(spreads, key=lambda s: s.number)  # interrupted: the rest is not waited for
        again = [c for c in pending if c.left_out and len(c.p50s) < processes]
        if not again or extra == processes:
            break
        rounds = [again]
    spreads += [candidate.spread() for candidate in pending]
    return sorted(spreads, key=lambda s: s.number)


@dataclass
class _Candidate:
    """One candidate's fresh figures as they come in: pooled, or left out as contended."""

    record: TrialRecord
    sweep_p50_ms: float
    request: MeasureRequest
    futures: list[Future[MeasureReply]] = dataclasses.field(default_factory=list)
    p50s: list[float] = dataclasses.field(default_factory=list)
    loads: list[float] = dataclasses.field(default_factory=list)
    left_out: list[float] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)

    def collect(self, stopped: Callable[[], bool]) -> bool:
        """Take every sent measurement's figure (``False``: stopped before they all came)."""
        while self.futures:
            future = self.futures[0]
            while not future.done() and not stopped():
                wait([future], timeout=0.5)
            if not future.done():
                return False
            self.futures.pop(0)
            try:
                timing = future.result().timing
            except NnsweepError as exc:  # a measurement that failed now: said, not averaged in
                self.errors.append(str(exc))
                continue
            if timing.contended:
                self.left_out.append(timing.latency.p50)
                continue
            self.p50s.append(timing.latency.p50)
            self.loads.append(timing.loadavg_1m if timing.loadavg_1m is not None else float("nan"))
        return True

    def spread(self) -> Spread:
        record, error = self.record, "; ".join(self.errors)[:400]
        if not self.p50s and self.left_out:  # only contended figures: better than none, and said
            return Spread(record.number, record.config, self.sweep_p50_ms, tuple(self.left_out), error=error,
                          all_contended=True)  # fmt: skip
        return Spread(
            record.number, record.config, self.sweep_p50_ms, tuple(self.p50s), tuple(self.loads), error,
            left_out_ms=tuple(self.left_out),
        )  # fmt: skip
