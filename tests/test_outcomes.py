"""What a result says: records, the judgement against the baseline, the time breakdown."""

from __future__ import annotations

import math

import pytest

from nnsweep.core.config import DeploymentConfig, QuantConfig, QuantMode
from nnsweep.core.results import TrialRecord, TrialStatus
from nnsweep.spec import Constraints, Objective
from nnsweep.sweep import outcomes
from nnsweep.sweep.lifecycle import Phase, Ticket

CFG = DeploymentConfig("onnxruntime", ("cpu",), QuantConfig(QuantMode.FP32))
OBJ = (Objective("accuracy", "maximize"), Objective("latency_p50_ms", "minimize"))


def _ok(number: int, accuracy: float, latency: float, **extra: float) -> TrialRecord:
    metrics = {"accuracy": accuracy, "latency_p50_ms": latency, **extra}
    return TrialRecord("s", "d", number, CFG, TrialStatus.OK, metrics=metrics, samples_ms=(latency,) * 10)


def test_judge_against_the_baseline() -> None:
    base = _ok(0, 0.97, 2.0)
    j = outcomes.judge(
        _ok(1, 0.955, 1.0), OBJ, base, Constraints({"accuracy": 0.01}), {"accuracy": 0.99}, phases={"measuring": 3.0}
    )
    assert j.values == (0.955, 1.0) and j.record.metrics["speedup_vs_fp32"] == 2.0
    assert math.isclose(j.record.metrics["accuracy_drop"], 0.015)
    assert math.isclose(j.constraints["accuracy_drop"], 0.005)
    assert j.record.feasible is False and j.record.metrics["time_measuring_s"] == 3.0


SQNR_OBJ = (Objective("sqnr_db", "maximize"), Objective("latency_p50_ms", "minimize"))


def test_the_sqnr_constraint_judges_a_regression_output() -> None:
    noisy = _ok(1, 1.0, 1.0, sqnr_db=18.4, max_abs_err=0.2)
    j = outcomes.judge(noisy, SQNR_OBJ, None, Constraints(min={"sqnr_db": 30.0}), {"accuracy": 1.0})
    assert j.values == (18.4, 1.0) and j.record.feasible is False
    assert math.isclose(j.constraints["sqnr_db"], 11.6) and "accuracy_drop" not in j.constraints
    both = outcomes.judge(
        _ok(2, 0.99, 1.0, sqnr_db=41.0, max_abs_err=0.01),
        SQNR_OBJ,
        None,
        Constraints({"accuracy": 0.01}, {"sqnr_db": 30.0}),
        {"accuracy": 1.0},
    )
    assert set(both.constraints) == {"accuracy_drop", "sqnr_db"} and both.record.feasible is True


def test_an_output_identical_to_fp32_is_told_not_failed() -> None:
    # bench leaves out an infinite SQNR (JSON has no infinity); a sweep with SQNR as an objective
    # failed every trial whose output was exact, the fp32 baseline included.
    exact = _ok(0, 1.0, 1.0, max_abs_err=0.0)
    j = outcomes.judge(exact, SQNR_OBJ, None, Constraints(min={"sqnr_db": 30.0}), {"accuracy": 1.0})
    assert j.record.status is TrialStatus.OK and j.values == (outcomes.IDENTICAL_SQNR_DB, 1.0)
    assert j.record.feasible is True
    on_zero = outcomes.judge(
        _ok(1, 1.0, 1.0, max_abs_err=0.5), SQNR_OBJ, None, Constraints(min={"sqnr_db": 30.0}), {"accuracy": 1.0}
    )
    assert on_zero.values == (-outcomes.IDENTICAL_SQNR_DB, 1.0) and on_zero.record.feasible is False
    unmeasured = outcomes.judge(_ok(2, 1.0, 1.0), SQNR_OBJ, None, Constraints(min={"sqnr_db": 30.0}), {"accuracy": 1.0})
    assert unmeasured.values is None and unmeasured.record.status is TrialStatus.FAILED


def test_judge_without_a_measured_baseline_uses_the_eager_model() -> None:
    j = outcomes.judge(_ok(1, 0.985, 1.0), OBJ, None, Constraints({"accuracy": 0.01}), {"accuracy": 0.99})
    assert j.record.feasible is True and "speedup_vs_fp32" not in j.record.metrics


def test_an_objective_not_measured_fails_the_trial() -> None:
    rec = TrialRecord("s", "d", 1, CFG, TrialStatus.OK, metrics={"accuracy": 0.9, "latency_p50_ms": math.inf})
    j = outcomes.judge(rec, OBJ, None, Constraints(), {"accuracy": 1.0})
    assert j.values is None and j.record.status is TrialStatus.FAILED and "latency_p50_ms" in (j.record.reason or "")


def test_a_repeat_of_a_failure_is_a_failure_that_names_the_first() -> None:
    ticket = Ticket("d", 5, CFG, "k")
    first = TrialRecord("s", "d", 2, CFG, TrialStatus.FAILED, reason="no kernel")
    again = outcomes.reused(ticket, first)
    assert again.status is TrialStatus.FAILED and again.reused_from == 2
    assert "failed in trial 2: no kernel" in (again.reason or "")
    ok = outcomes.reused(ticket, _ok(3, 0.9, 1.0, time_measuring_s=4.0))
    assert ok.status is TrialStatus.REUSED and ok.reused_from == 3 and "time_measuring_s" not in ok.metrics


def test_time_breakdown_sums_phases_and_timed_runs_and_skips_repeats() -> None:
    ticket = Ticket("d", 1, CFG, "k")
    ticket.start(0.0)
    ticket.move(Phase.CONVERTING, 1.0)
    ticket.move(Phase.FAILED, 4.0)
    failed = outcomes.failed("s", ticket, "conversion failed")
    measured = _ok(2, 0.9, 1.5, time_converting_s=2.0, time_ready_s=0.5, time_measuring_s=5.0)
    repeat = outcomes.reused(Ticket("d", 3, CFG, "k"), measured)
    out = outcomes.time_breakdown([failed, measured, repeat])
    assert out == {
        "waiting to convert": 1.0,
        "converting": 5.0,
        "waiting for the device": 0.5,
        "measuring": 5.0,
        "timed runs": 0.015,
    }


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (MemoryError("cannot allocate"), "transient"),
        (TimeoutError(), "transient"),
        (RuntimeError("a worker's own bug"), "transient"),  # unforeseen: not the configuration's doing
        ("benchmark timed out after 600 s", "transient"),
        ("benchmark hung: no result within 660 s", "transient"),
        ("static int8 toolchain unavailable", "deterministic"),
    ],
)
def test_a_failure_says_whether_a_retry_can_help(error: object, kind: str) -> None:
    from nnsweep.core.errors import ConversionError
    from nnsweep.core.results import failure_kind

    assert failure_kind(error).value == kind  # type: ignore[arg-type]
    assert failure_kind(ConversionError("executorch conversion failed: unsupported op")).value == "deterministic"
