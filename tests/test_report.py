from __future__ import annotations

from nnsweep.core.config import DeploymentConfig
from nnsweep.core.results import TrialRecord, TrialStatus
from nnsweep.report.text import render_table
from nnsweep.spec import Objective
from nnsweep.sweep.front import best_trial, pareto_front

OBJ = (Objective("accuracy", "maximize"), Objective("latency_p50_ms", "minimize"))


def _rec(
    n: int, acc: float, lat: float, status: TrialStatus = TrialStatus.OK, feasible: bool | None = True
) -> TrialRecord:
    return TrialRecord(
        "s",
        "host",
        n,
        DeploymentConfig("executorch"),
        status,
        {"accuracy": acc, "latency_p50_ms": lat},
        feasible=feasible,
    )


def test_front_drops_dominated_infeasible_reused_and_failed() -> None:
    records = [
        _rec(0, 0.98, 1.0),
        _rec(1, 0.97, 0.5),
        _rec(2, 0.96, 0.6),  # dominated by 1
        _rec(3, 0.99, 0.1, feasible=False),  # would dominate all, but breaks the constraint
        _rec(4, 0.97, 0.5, TrialStatus.REUSED),
        TrialRecord("s", "host", 5, DeploymentConfig("torch"), TrialStatus.FAILED, reason="boom"),
        _rec(6, 0.97, 0.5),  # same point as 1: adds nothing
    ]
    front = pareto_front(records, OBJ)
    assert [r.number for r in front] == [1, 0]  # fastest first
    assert best_trial(records, OBJ).number == 1  # type: ignore[union-attr]


def test_no_feasible_trial_means_no_best() -> None:
    assert best_trial([_rec(0, 0.9, 1.0, feasible=False)], OBJ) is None


def test_table_shows_status_and_reasons() -> None:
    text = render_table(
        [
            _rec(0, 0.98, 1.0),
            TrialRecord("s", "host", 1, DeploymentConfig("torch"), TrialStatus.FAILED, reason="no kernel"),
        ],
        OBJ,
    )
    assert "98.00%" in text and "failed: no kernel" in text
    assert text.splitlines()[0].split()[:4] == ["#", "configuration", "accuracy", "latency_p50_ms"]


def test_an_int8_trial_measured_within_float_rounding_is_marked_float_in_effect() -> None:
    from nnsweep.core.results import FLOAT_SQNR_DB

    def trial(number: int, mode: str, sqnr: float | None) -> TrialRecord:
        metrics = {"accuracy": 0.97, "latency_p50_ms": 0.5} | ({} if sqnr is None else {"sqnr_db": sqnr})
        config = DeploymentConfig("onnxruntime", quant={"mode": mode})
        return TrialRecord("s", "host", number, config, TrialStatus.OK, metrics=metrics)

    lstm = trial(0, "static_int8", 136.7)  # an LSTM alone: ONNX Runtime's static int8 leaves it float
    assert lstm.float_in_effect and trial(1, "dynamic_int8", 200.0).float_in_effect  # 200: identical outputs
    assert not trial(2, "static_int8", FLOAT_SQNR_DB - 0.1).float_in_effect  # int8's noise
    assert not trial(3, "fp32", 140.0).float_in_effect and not trial(4, "static_int8", None).float_in_effect
    rows = render_table([lstm, trial(2, "static_int8", 33.0)], OBJ).splitlines()[2:]
    assert rows[0].endswith("ok (float in effect)") and rows[1].rstrip().endswith("ok")


def _on(device: str, number: int, threads: int, latency: float, feasible: bool = True) -> TrialRecord:
    from nnsweep.core.config import QuantConfig, QuantMode

    config = DeploymentConfig("onnxruntime", ("cpu",), QuantConfig(QuantMode.FP32), threads=threads)
    metrics = {"accuracy": 0.95, "latency_p50_ms": latency}
    return TrialRecord("s", device, number, config, TrialStatus.OK, metrics=metrics, feasible=feasible)


def test_one_configuration_for_all_devices_minimises_the_worst_slowdown() -> None:
    from nnsweep.sweep.front import best_across_devices

    objectives = OBJ
    records = {
        # the laptop is fastest with 4 threads, the board with 1; 4 threads break the board's constraint
        "laptop": [_on("laptop", 0, 1, 4.0), _on("laptop", 1, 2, 2.5), _on("laptop", 2, 4, 2.0)],
        "board": [_on("board", 0, 1, 10.0), _on("board", 1, 2, 11.0), _on("board", 2, 4, 30.0, feasible=False)],
    }
    choice = best_across_devices(records, objectives)
    assert choice is not None and choice.config.threads == 2  # worst slowdown 1.25 (laptop), not 2.0 (threads=1)
    costs = {c.device: c for c in choice.costs}
    assert costs["laptop"].slowdown == 1.25 and costs["laptop"].own_best.config.threads == 4
    assert costs["board"].slowdown == 1.1 and choice.worst_slowdown == 1.25
    assert best_across_devices({"laptop": records["laptop"], "board": records["board"][2:]}, objectives) is None
