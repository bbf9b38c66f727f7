"""Re-measuring the Pareto candidates in fresh processes: each request goes out fresh,
the spread between processes is the p50's coefficient of variation, and what cannot
be measured again is said, not averaged in."""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from nnsweep.agents import MeasureReply, MeasureRequest
from nnsweep.bench import MeasureSettings
from nnsweep.bench._harness import Timing
from nnsweep.bench._stats import LatencyStats
from nnsweep.core.artifact import IOSpec
from nnsweep.core.config import DeploymentConfig
from nnsweep.core.errors import BenchmarkError
from nnsweep.core.results import TrialRecord, TrialStatus
from nnsweep.sweep.remeasure import remeasure


def _record(number: int, threads: int, p50: float, **extra: object) -> TrialRecord:
    config = DeploymentConfig("onnxruntime", ("cpu",), threads=threads)
    return TrialRecord("s", "host", number, config, TrialStatus.OK, metrics={"latency_p50_ms": p50}, **extra)  # type: ignore[arg-type]


def _request(config: DeploymentConfig) -> MeasureRequest:
    return MeasureRequest("onnxruntime", "m.onnx", b"", IOSpec(), config.threads, ("cpu",), None, MeasureSettings())  # type: ignore[arg-type]


def _reply(p50: float, others_cores: float | None = None) -> Future[MeasureReply]:
    """A measurement's reply; ``others_cores``: other processes' work on its two cores during its
    100 ms of timed runs, with one thread (so one core spare)."""
    samples = (p50,) * 5
    phases = {} if others_cores is None else {"timed": 100.0, "timed_others_cpu": others_cores * 100.0,
                                              "timed_spare_cpu": 100.0}  # fmt: skip
    timing = Timing(1.0, 1.0, LatencyStats.from_samples(samples), samples, 10.0, 5.0, 1, 0.5, phases_ms=phases)
    f: Future[MeasureReply] = Future()
    f.set_result(MeasureReply(timing, None))
    return f


def test_each_candidate_is_measured_again_in_fresh_processes() -> None:
    sent: list[MeasureRequest] = []
    p50s = iter([1.00, 2.0, 1.02, 2.0, 0.98, 2.0])  # interleaved: #3, #5, #3, #5, ...

    def measure(request: MeasureRequest) -> Future[MeasureReply]:
        sent.append(request)
        return _reply(next(p50s))

    front = [_record(3, 1, 1.01), _record(5, 2, 2.0), _record(6, 4, 0.5, estimated=True)]
    spread = remeasure(front, _request, measure, processes=3)
    assert len(sent) == 6 and all(r.fresh for r in sent)  # the estimate (trial 6) is not a measurement
    assert [s.number for s in spread] == [3, 5]
    assert spread[0].p50_ms == (1.00, 1.02, 0.98) and spread[0].cv == pytest.approx(0.02, rel=1e-6)
    assert spread[1].cv == 0.0 and spread[1].sweep_p50_ms == 2.0 and spread[1].loadavg_1m == (0.5, 0.5, 0.5)


def test_a_figure_that_met_other_work_on_its_cores_is_left_out_and_measured_again() -> None:
    # #3's second process met 1.6 cores of others' work on 2 cores with 1 thread: contended.
    # #5's figures met 0.9 cores: that fits in the core its thread left spare.
    figures = iter([(1.00, 0.0), (2.0, 0.9), (1.60, 1.6), (2.0, 0.9), (1.02, 0.05), (2.0, 0.9), (0.99, 0.0)])
    sent: list[MeasureRequest] = []

    def measure(request: MeasureRequest) -> Future[MeasureReply]:
        sent.append(request)
        return _reply(*next(figures))

    spread = remeasure([_record(3, 1, 1.01), _record(5, 1, 2.0)], _request, measure, processes=3)
    assert len(sent) == 7  # 3 rounds of both, then #3 alone once more
    assert spread[0].p50_ms == (1.00, 1.02, 0.99) and spread[0].left_out_ms == (1.60,)
    assert spread[0].metrics()["remeasure_left_out"] == 1.0 and not spread[0].all_contended
    assert spread[1].p50_ms == (2.0, 2.0, 2.0) and spread[1].left_out_ms == ()


def test_figures_that_all_met_other_work_are_pooled_and_said_so() -> None:
    sent: list[MeasureRequest] = []

    def measure(request: MeasureRequest) -> Future[MeasureReply]:
        sent.append(request)
        return _reply(1.5, others_cores=1.5)

    spread = remeasure([_record(3, 1, 1.0)], _request, measure, processes=2)
    assert len(sent) == 4  # 2, then up to 2 more: it is not measured forever
    assert spread[0].all_contended and spread[0].p50_ms == (1.5,) * 4 and spread[0].left_out_ms == ()


def test_what_cannot_be_measured_again_is_said() -> None:
    def measure(request: MeasureRequest) -> Future[MeasureReply]:
        f: Future[MeasureReply] = Future()
        f.set_exception(BenchmarkError("runtime crashed (SIGSEGV)"))
        return f

    gone = remeasure([_record(1, 1, 1.0)], lambda c: None, measure, processes=2)
    assert gone[0].p50_ms == () and "no longer in the cache" in gone[0].error and gone[0].cv is None
    crashed = remeasure([_record(1, 1, 1.0)], _request, measure, processes=2)
    assert crashed[0].p50_ms == () and "SIGSEGV" in crashed[0].error


class _Host:
    def request_if_cached(self, config: DeploymentConfig) -> MeasureRequest:
        return _request(config)


def test_a_point_the_fallen_candidate_hid_is_measured_again_too() -> None:
    """Re-measured, the front's only point (#1) is slower than #2, whose sweep figure it
    dominated: #2 comes onto the front and is measured again in a second round, so the
    front is decided on re-measured figures only."""
    import optuna

    from nnsweep.spec import parse_spec
    from nnsweep.sweep import studies
    from nnsweep.sweep.handlers import _remeasure_front

    spec = parse_spec({"name": "s", "model": "digits", "measure": {"remeasure": 3}})
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(directions=["maximize", "minimize"])
    for number, threads, p50 in [(0, 1, 2.0), (1, 2, 1.0), (2, 4, 1.05)]:
        trial = study.ask()
        record = TrialRecord(
            "s", "host", number, DeploymentConfig("onnxruntime", ("cpu",), threads=threads), TrialStatus.OK,
            metrics={"accuracy": 1.0, "latency_p50_ms": p50}, feasible=True,
        )  # fmt: skip
        studies.tell_record(study, trial, record, [1.0, p50], {})
    again = {1: 2.0, 2: 1.3, 4: 1.06}  # threads -> what a fresh process measures

    def measure(request: MeasureRequest) -> Future[MeasureReply]:
        return _reply(again[request.threads])

    front = studies.study_records(study)[1:2]
    spread = _remeasure_front(spec, study, [*front, studies.study_records(study)[0]], _Host(), measure, lambda: False)  # type: ignore[arg-type]
    assert [s.number for s in spread] == [0, 1, 2]  # #2 in a second round
    decided = studies.study_records(study)
    best = min(decided, key=lambda r: r.metrics["latency_p50_ms"])
    assert best.number == 2 and best.metrics["latency_p50_ms"] == pytest.approx(1.06)
