"""The user's own task: metrics in the spec, scored on a deployment's outputs, judged as bounds."""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pytest

from nnsweep.bench.task import load_task
from nnsweep.core.config import DeploymentConfig, QuantConfig, QuantMode
from nnsweep.core.errors import MetricError, SpecError
from nnsweep.core.metrics import UserMetric
from nnsweep.core.results import TrialRecord, TrialStatus
from nnsweep.spec import Constraints, Objective, parse_spec
from nnsweep.sweep import outcomes

METRIC_FILE = """
import numpy as np

def mean_first(outputs, targets):
    return float(np.mean(outputs[0]))

def shapes(outputs, targets):
    return float(len(outputs) * 1000 + outputs[0].shape[1] * 10 + outputs[1].shape[2])

def boxes_seen(outputs, targets):
    return float(sum(len(t["boxes"]) for t in targets))

def broken(outputs, targets):
    raise KeyError("scores")

def nan(outputs, targets):
    return float("nan")

def text(outputs, targets):
    return "0.5"

def slow(outputs, targets):
    import time
    time.sleep(5)
    return 1.0
"""


@pytest.fixture
def metric_file(tmp_path: Path) -> Path:
    path = tmp_path / "task_metrics.py"
    path.write_text(METRIC_FILE)
    return path


def _task(path: Path, name: str, targets: object = None, shapes: tuple[tuple[int, ...], ...] = ((3,),)):
    return load_task((UserMetric(name, f"{path}:{name}", "maximize"),), targets, shapes)


def test_a_metric_gets_each_output_in_its_own_shape_and_the_targets_untouched(metric_file: Path) -> None:
    rows = np.arange(2 * (3 + 8), dtype=np.float32).reshape(2, 11)
    task = _task(metric_file, "shapes", shapes=((3,), (2, 4)))
    outs = task.outputs(rows)
    assert [o.shape for o in outs] == [(2, 3), (2, 2, 4)]
    assert np.array_equal(outs[1].reshape(2, -1), rows[:, 3:])
    assert task.score(rows) == {"shapes": 2000 + 30 + 4}
    targets = [{"boxes": [[0, 0, 1, 1]] * k} for k in (0, 3)]  # varying length, as a detector's
    assert _task(metric_file, "boxes_seen", targets).score(np.zeros((2, 3))) == {"boxes_seen": 3.0}


@pytest.mark.parametrize(
    ("name", "words"), [("broken", "raised KeyError"), ("nan", "not a finite number"), ("text", "str, not a number")]
)
def test_a_metric_failing_on_one_deployment_fails_that_trial_naming_it(
    metric_file: Path, name: str, words: str
) -> None:
    with pytest.raises(MetricError, match=f"metric {name} .*{words}"):
        _task(metric_file, name).score(np.zeros((2, 3)))


@pytest.mark.parametrize(
    ("name", "words"),
    [("broken", "raised on the fp32 outputs: KeyError"), ("nan", "not a finite number"), ("text", "not a number")],
)
def test_a_metric_failing_on_the_fp32_outputs_is_the_users_mistake(metric_file: Path, name: str, words: str) -> None:
    with pytest.raises(SpecError, match=words) as err:
        _task(metric_file, name).check(np.zeros((2, 3)))
    assert err.value.field == f"metrics.{name}"


def test_a_metric_that_takes_too_long_on_the_fp32_outputs_is_refused(metric_file: Path) -> None:
    started = time.monotonic()
    with pytest.raises(SpecError, match=r"took more than 0\.2 s") as err:
        _task(metric_file, "slow").check(np.zeros((2, 3)), timeout_s=0.2)
    assert err.value.field == "metrics.slow" and time.monotonic() - started < 4


def test_a_metric_that_does_not_import_names_its_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import no_such_package_here\n")
    with pytest.raises(SpecError, match="does not import: ModuleNotFoundError") as err:
        load_task((UserMetric("m", f"{bad}:f", "maximize"),), None, ((1,),))
    assert err.value.field == "metrics.m.function"


BASE = {"name": "t", "model": "digits", "space": {"runtime": ["onnxruntime"]}}


def test_the_spec_takes_user_metrics_as_objectives_and_bounds(metric_file: Path) -> None:
    spec = parse_spec(
        {
            **BASE,
            "metrics": {"map50": {"function": "task_metrics.py:mean_first", "goal": "maximize"}},
            "objectives": {"map50": "maximize", "latency_p50_ms": "minimize"},
            "constraints": {"max_drop": {"map50": 0.03}, "min": {"map50": 0.25}, "max": {"size_bytes": 2e6}},
        },
        source=metric_file.parent / "sweep.yaml",
    )
    assert spec.metrics == (UserMetric("map50", f"{metric_file.resolve()}:mean_first", "maximize"),)
    assert [o.metric for o in spec.objectives] == ["map50", "latency_p50_ms"]
    assert spec.constraints == Constraints({"map50": 0.03}, {"map50": 0.25}, {"size_bytes": 2e6})


def test_the_older_constraint_keys_fold_into_the_bounds() -> None:
    spec = parse_spec({**BASE, "constraints": {"max_accuracy_drop": 0.01, "min_sqnr_db": 30}})
    assert spec.constraints == Constraints({"accuracy": 0.01}, {"sqnr_db": 30.0}, {})
    assert spec.max_accuracy_drop == 0.01


@pytest.mark.parametrize(
    ("extra", "field", "words"),
    [
        ({"metrics": {"accuracy": {"function": "m.py:f", "goal": "maximize"}}}, "metrics.accuracy", "built-in"),
        (
            {"metrics": {"accuracy_drop": {"function": "m.py:f", "goal": "maximize"}}},
            "metrics.accuracy_drop",
            "built-in",
        ),
        ({"metrics": {"f1": {"function": "nofile.py:f", "goal": "maximize"}}}, "metrics.f1.function", "does not exist"),
        ({"metrics": {"f1": {"function": "no_colon", "goal": "maximize"}}}, "metrics.f1.function", "not a function"),
        ({"metrics": {"f1": {"function": "m.py:f", "goal": "up"}}}, "metrics.f1.goal", "maximize"),
        ({"objectives": {"f1": "maximize"}}, "objectives.f1", "unknown metric"),
        ({"constraints": {"min": {"f2": 0.5}}}, "constraints.min.f2", "unknown metric"),
        ({"constraints": {"max_drop": {"accuracy": -0.1}}}, "constraints.max_drop.accuracy", "at least 0"),
        (
            {"constraints": {"max_accuracy_drop": 0.01, "max_drop": {"accuracy": 0.02}}},
            "constraints.max_accuracy_drop",
            "keep one",
        ),
        ({"constraints": {"min": {"accuracy": 0.9}, "max": {"accuracy": 0.5}}}, "constraints.min.accuracy", "above"),
    ],
)
def test_bad_metrics_and_bounds_are_refused_naming_the_field(
    metric_file: Path, extra: dict, field: str, words: str
) -> None:
    (metric_file.parent / "m.py").write_text("def f(outputs, targets):\n    return 1.0\n")
    with pytest.raises(SpecError, match=words) as err:
        parse_spec({**BASE, **extra}, source=metric_file.parent / "sweep.yaml")
    assert err.value.field == field


CFG = DeploymentConfig("onnxruntime", ("cpu",), QuantConfig(QuantMode.STATIC_INT8))
PPL = UserMetric("perplexity", "m.py:f", "minimize")


def _record(**metrics: float) -> TrialRecord:
    return TrialRecord("s", "host", 3, CFG, TrialStatus.OK, metrics={"latency_p50_ms": 1.0, **metrics})


def test_a_drop_goes_the_way_the_metrics_goal_says() -> None:
    base = _record(map50=0.80, perplexity=10.0)
    objectives = (Objective("perplexity", "minimize"), Objective("latency_p50_ms", "minimize"))
    bounds = Constraints(max_drop={"map50": 0.03, "perplexity": 0.5})
    good = outcomes.judge(_record(map50=0.79, perplexity=10.4), objectives, base, bounds, {}, user=(PPL,))
    assert good.record.feasible is True and good.values == (10.4, 1.0)
    assert math.isclose(good.record.metrics["map50_drop"], 0.01) and math.isclose(
        good.record.metrics["perplexity_drop"], 0.4
    )
    bad = outcomes.judge(_record(map50=0.79, perplexity=11.0), objectives, base, bounds, {}, user=(PPL,))
    assert bad.record.feasible is False and math.isclose(bad.constraints["perplexity_drop"], 0.5)


def test_without_a_measured_baseline_a_drop_is_against_the_eager_fp32_model() -> None:
    objectives = (Objective("map50", "maximize"),)
    judged = outcomes.judge(_record(map50=0.70), objectives, None, Constraints({"map50": 0.05}), {"map50": 0.8})
    assert judged.record.feasible is False and math.isclose(judged.record.metrics["map50_drop"], 0.1)


def test_absolute_bounds_apply_to_built_in_metrics_too() -> None:
    objectives = (Objective("latency_p50_ms", "minimize"),)
    bounds = Constraints(min={"map50": 0.25}, max={"size_bytes": 2e6, "peak_rss_mb": 150})
    ok = outcomes.judge(_record(map50=0.3, size_bytes=1e6, peak_rss_mb=100), objectives, None, bounds, {})
    assert ok.record.feasible is True and len(ok.constraints) == 3
    big = outcomes.judge(_record(map50=0.3, size_bytes=3e6, peak_rss_mb=100), objectives, None, bounds, {})
    assert big.record.feasible is False and big.constraints["max_size_bytes"] == 1e6


@pytest.mark.integration
def test_a_notebook_sweeps_on_a_metric_it_defines_as_a_callable(
    tmp_path: Path, models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import nnsweep.api as ns

    monkeypatch.chdir(tmp_path)  # the sweep's state lives in the working directory
    seen: list[int] = []

    def agreement_count(outputs: list[np.ndarray], targets: np.ndarray) -> float:
        seen.append(len(outputs[0]))
        return float(np.sum(outputs[0].argmax(1) == np.asarray(targets)))

    (cache := tmp_path / "cache").mkdir()
    (cache / "models").symlink_to(models_dir)
    spec = {
        "name": "nb",
        "model": "digits",
        "metrics": {"hits": {"function": agreement_count, "goal": "maximize"}},
        "objectives": {"hits": "maximize", "latency_p50_ms": "minimize"},
        "constraints": {"min": {"hits": 1}},
        "budget": {"trials": 1},
        "measure": {"warmup": 1, "iters": 5, "remeasure": 0},
        "space": {"runtime": ["onnxruntime"]},
    }
    (host,) = ns.sweep(spec, tracking=False, cache_dir=cache)
    (record,) = [r for r in host.records if r.status is TrialStatus.OK]
    assert record.metrics["hits"] == max(seen) * record.metrics["accuracy"] and record.feasible is True
    assert host.best is not None and host.best.number == record.number
