"""The figures that decide: re-measured medians replace the sweep's p50, the front, the
best and every speed-up follow them, and overlapping intervals are ties."""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from nnsweep.agents import MeasureReply, MeasureRequest
from nnsweep.bench import MeasureSettings
from nnsweep.bench._harness import Timing
from nnsweep.bench._stats import LatencyStats
from nnsweep.core.artifact import IOSpec
from nnsweep.core.config import DeploymentConfig
from nnsweep.core.results import TrialRecord, TrialStatus
from nnsweep.spec import Objective
from nnsweep.sweep.front import best_choice, decide, pareto_front
from nnsweep.sweep.remeasure import Spread, median_interval, remeasure

OBJECTIVES = (Objective("accuracy", "maximize"), Objective("latency_p50_ms", "minimize"))


def _record(number: int, p50: float, accuracy: float, threads: int = 1, **extra: object) -> TrialRecord:
    config = DeploymentConfig("onnxruntime", ("cpu",), threads=threads)
    metrics = {"latency_p50_ms": p50, "accuracy": accuracy, "speedup_vs_fp32": 1.0}
    return TrialRecord("s", "host", number, config, TrialStatus.OK, metrics=metrics, feasible=True, **extra)  # type: ignore[arg-type]


def _request(config: DeploymentConfig) -> MeasureRequest:
    return MeasureRequest("onnxruntime", "m.onnx", b"", IOSpec(), config.threads, ("cpu",), None, MeasureSettings())  # type: ignore[arg-type]


def _reply(p50: float) -> Future[MeasureReply]:
    samples = (p50,) * 5
    timing = Timing(1.0, 1.0, LatencyStats.from_samples(samples), samples, 10.0, 5.0, 1, 0.5)
    f: Future[MeasureReply] = Future()
    f.set_result(MeasureReply(timing, None))
    return f


def _pooled(sweep: float, *fresh: float) -> dict[str, float]:
    return Spread(0, DeploymentConfig("onnxruntime"), sweep, fresh, (0.0,) * len(fresh)).metrics()


def test_remeasured_figures_reorder_the_front_the_best_and_the_speedups() -> None:
    baseline, fast, slow = _record(0, 2.0, 0.965), _record(1, 1.0, 0.96), _record(2, 1.2, 0.965)
    records = [baseline, fast, slow]
    assert [r.number for r in pareto_front(records, OBJECTIVES)] == [1, 2]
    # Three fresh processes say #1's sweep figure was a lucky one and the baseline was slow then.
    pooled = {0: _pooled(2.0, 1.5, 1.5, 1.6), 1: _pooled(1.0, 1.4, 1.45, 1.5), 2: _pooled(1.2, 1.15, 1.2, 1.18)}
    decided = decide(records, pooled, baseline=0)
    by = {r.number: r for r in decided}
    assert by[1].metrics["latency_p50_ms"] == pytest.approx(1.425)  # median of 1.0, 1.4, 1.45, 1.5
    assert by[1].metrics["latency_p50_ms_sweep"] == 1.0
    # #1 is now slower and less accurate than #2: off the front, and #2 is the best.
    assert [r.number for r in pareto_front(decided, OBJECTIVES)] == [2]
    assert best_choice(decided, OBJECTIVES).record is by[2]
    # Every speed-up divides by the baseline's pooled median (1.55), not its sweep figure.
    assert by[2].metrics["speedup_vs_fp32"] == pytest.approx(1.55 / by[2].metrics["latency_p50_ms"])


def test_a_reused_trial_takes_the_figures_of_the_trial_it_reuses() -> None:
    original, twin = _record(1, 1.0, 0.96), _record(4, 1.0, 0.96, threads=1, reused_from=1)
    decided = decide([original, twin], {1: _pooled(1.0, 2.0, 2.0, 2.0)}, baseline=None)
    assert decided[1].metrics["latency_p50_ms"] == 2.0


def test_overlapping_intervals_are_a_tie_broken_by_the_next_objective() -> None:
    a, b = _record(1, 1.00, 0.95), _record(2, 1.05, 0.97)
    a = TrialRecord(**{**a.__dict__, "metrics": {**a.metrics, "latency_p50_ms_lo": 0.9, "latency_p50_ms_hi": 1.1}})
    b = TrialRecord(**{**b.__dict__, "metrics": {**b.metrics, "latency_p50_ms_lo": 0.95, "latency_p50_ms_hi": 1.2}})
    choice = best_choice([a, b], OBJECTIVES)
    assert choice.record is b and choice.tied == (1,) and choice.broken_by == "accuracy"
    assert choice.tied_on == "latency_p50_ms"
    # Apart, no tie: the faster one is best.
    c = TrialRecord(**{**b.__dict__, "metrics": {**b.metrics, "latency_p50_ms_lo": 1.15, "latency_p50_ms_hi": 1.3}})
    assert best_choice([a, c], OBJECTIVES) == best_choice([a, c], OBJECTIVES).__class__(a)


@pytest.mark.parametrize(("n", "coverage"), [(1, 0.0), (2, 0.5), (4, 0.875), (5, 0.9375), (6, 0.96875), (9, 0.9609375)])
def test_the_median_interval_holds_its_stated_coverage(n: int, coverage: float) -> None:
    low, high, got = median_interval([float(x) for x in range(n)])
    assert got == pytest.approx(coverage)
    assert low <= (n - 1) / 2 <= high


def test_the_candidates_are_measured_again_interleaved() -> None:
    sent: list[int] = []

    def measure(request: MeasureRequest) -> Future[MeasureReply]:
        sent.append(request.threads)
        return _reply(1.0)

    remeasure([_record(1, 1.0, 0.9, threads=1), _record(2, 1.0, 0.9, threads=2)], _request, measure, processes=3)
    assert sent == [1, 2, 1, 2, 1, 2]  # A B A B A B: a drift of the machine hits both alike
