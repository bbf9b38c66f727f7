"""A sweep decided by a user metric ranks its layers by that metric: the float layers
``float_layers`` keeps are the ones that matter to the user's task (real quantizers)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from nnsweep.core.metrics import UserMetric
from nnsweep.core.quant import Granularity
from nnsweep.sensitivity.rank import LayerSensitivity, SensitivityReport
from nnsweep.sensitivity.ranking import cached_ranking, ranking, report_from_dict, report_to_dict
from nnsweep.sensitivity.scoring import RankingMetric


def _agreement(outputs, targets):  # type: ignore[no-untyped-def]
    """Top-1 against the targets, as a user would write it (what the built-in ranking scores)."""
    return float((outputs[0].argmax(axis=1) == np.asarray(targets)).mean())


def _errors(outputs, targets):  # type: ignore[no-untyped-def]
    """A metric to minimise: the share of samples wrong (top-1 turned upside down)."""
    return 1.0 - _agreement(outputs, targets)


@pytest.fixture(scope="module")
def labelled(digits):  # type: ignore[no-untyped-def]
    """digits with the fp32 model's top-1 as the calibration split's targets: a user metric of
    top-1 against them scores exactly what the built-in ranking scores."""
    from nnsweep.models import Split, reference_outputs

    calibration = digits.dataset.calibration
    top1 = reference_outputs(digits, calibration.inputs).argmax(axis=1)
    split = Split(calibration.inputs, None, top1)
    return dataclasses.replace(digits, dataset=dataclasses.replace(digits.dataset, calibration=split))


@pytest.mark.parametrize("runtime", ["onnxruntime", "torch"])
@pytest.mark.parametrize("goal", ["maximize", "minimize"])
def test_a_user_metric_of_top1_ranks_as_the_builtin_ranking_does(
    labelled, tmp_path: Path, runtime: str, goal: str
) -> None:  # type: ignore[no-untyped-def]
    function = _agreement if goal == "maximize" else _errors
    metric = RankingMetric(UserMetric("agree", function, goal), function)
    builtin, _ = ranking(labelled, runtime, None, tmp_path / "a")
    by_metric, hit = ranking(labelled, runtime, None, tmp_path / "b", metric=metric)
    assert not hit
    assert (by_metric.metric, by_metric.goal, by_metric.split) == ("agree", goal, "calibration")
    assert by_metric.ranked() == builtin.ranked()
    sign = 1.0 if goal == "maximize" else -1.0
    offset = 0.0 if goal == "maximize" else 1.0
    for mine, theirs in zip(by_metric.layers, builtin.layers, strict=True):
        assert mine.quantize_one == pytest.approx(offset + sign * theirs.quantize_one)
        assert mine.quantize_one_sqnr == pytest.approx(theirs.quantize_one_sqnr)


def test_without_calibration_targets_the_metric_scores_the_evaluation_split(digits, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    metric = RankingMetric(UserMetric("agree", _agreement, "maximize"), _agreement)
    report, _ = ranking(digits, "onnxruntime", None, tmp_path, metric=metric)
    assert report.split == "evaluation" and report.metric == "agree"
    assert 0.0 <= report.whole_int8 <= 1.0 and 0.0 <= report.all_float <= 1.0


def test_metric_rankings_are_kept_apart_from_top1_rankings_and_from_each_other(labelled, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    first = UserMetric("agree", _agreement, "maximize")
    ranking(labelled, "onnxruntime", None, tmp_path, metric=RankingMetric(first, _agreement))
    digest = labelled.digest
    assert cached_ranking(digest, "onnxruntime", Granularity.PER_TENSOR, tmp_path) is None
    assert cached_ranking(digest, "onnxruntime", Granularity.PER_TENSOR, tmp_path, first).metric == "agree"
    other = UserMetric("agree", _errors, "minimize")
    assert cached_ranking(digest, "onnxruntime", Granularity.PER_TENSOR, tmp_path, other) is None


def test_a_metric_file_that_changes_is_a_new_ranking(labelled, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from nnsweep.models import import_function

    source = tmp_path / "task.py"
    source.write_text("import numpy as np\ndef agree(o, t):\n    return float((o[0].argmax(1) == t).mean())\n")
    metric = UserMetric("agree", f"{source}:agree", "maximize")
    ranking(
        labelled,
        "onnxruntime",
        None,
        tmp_path / "c",
        metric=RankingMetric(metric, import_function(metric.function, field="f")),
    )
    assert cached_ranking(labelled.digest, "onnxruntime", None, tmp_path / "c", metric) is not None
    source.write_text(source.read_text() + "# changed\n")
    assert cached_ranking(labelled.digest, "onnxruntime", None, tmp_path / "c", metric) is None


def test_a_metric_that_raises_on_a_quantized_model_ranks_that_layer_most_sensitive() -> None:
    from nnsweep.sensitivity.scoring import MetricScoring

    def picky(outputs, targets):  # type: ignore[no-untyped-def]
        if outputs[0][0, 0] > 0.5:
            raise ValueError("no boxes")
        return 1.0

    metric = RankingMetric(UserMetric("picky", picky, "maximize"), picky)
    scoring = MetricScoring(metric, [0, 1], ((2,),), np.zeros((2, 2)))
    assert scoring(np.zeros((2, 2))).accuracy == 1.0
    assert scoring(np.ones((2, 2))).accuracy == -math.inf


def test_a_minimised_metric_ranks_its_largest_rise_first() -> None:
    layers = (LayerSensitivity("a", math.nan, 12.0), LayerSensitivity("b", math.nan, 15.0))
    report = SensitivityReport(16.0, 10.0, layers, 1.0, 4, metric="perplexity", goal="minimize", split="evaluation")
    assert report.ranked() == ["b", "a"]
    assert report.score(layers[1], "quantize_one") == pytest.approx(5.0)
    again = report_from_dict(report_to_dict(report))
    assert (again.metric, again.goal, again.split) == ("perplexity", "minimize", "evaluation")


def test_the_report_table_names_the_metric() -> None:
    from dashboards.sections import sensitivity_table

    layers = (LayerSensitivity("blocks.0", math.nan, 0.4, math.nan, 20.0),)
    report = SensitivityReport(0.3, 0.6, layers, 1.0, 3, metric="map50", split="calibration")
    html = sensitivity_table("onnxruntime", "per_tensor", report)
    assert "map50 on the calibration split" in html and "map50 lost when quantized alone" in html
    assert "+0.2" in html


def test_a_sweep_ranks_by_its_first_user_objective_else_a_bounded_user_metric() -> None:
    from nnsweep.spec import parse_spec
    from nnsweep.sweep.rankings import ranking_metric

    base = {"name": "s", "model": "builtin:digits", "devices": ["host"]}
    metrics = {
        "f1": {"function": "numpy:mean", "goal": "maximize"},
        "iou": {"function": "numpy:max", "goal": "maximize"},
    }
    spec = parse_spec({**base, "metrics": metrics, "objectives": {"iou": "maximize", "latency_p50_ms": "minimize"}})
    assert ranking_metric(spec) == "iou"
    spec = parse_spec({**base, "metrics": metrics, "constraints": {"min": {"f1": 0.5}}})
    assert ranking_metric(spec) == "f1"
    assert ranking_metric(parse_spec({**base, "metrics": metrics})) is None
    assert ranking_metric(parse_spec(base)) is None


_NLL = """
import numpy as np


def nll(outputs, targets):
    x = outputs[0] - outputs[0].max(1, keepdims=True)
    logp = x - np.log(np.exp(x).sum(1, keepdims=True))
    return float(-logp[np.arange(len(logp)), np.asarray(targets)].mean())
"""


@pytest.mark.slow
def test_sensitivity_ranks_by_a_minimised_metric_of_the_users(tmp_path: Path, models_dir: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    import json

    from nnsweep.cli import main

    (tmp_path / "task.py").write_text(_NLL)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "models").symlink_to(models_dir)
    args = ["--cache-dir", str(cache), "sensitivity", "--model", "digits_outlier", "--runtime", "onnxruntime"]
    metric = ["--metric", f"nll={tmp_path / 'task.py'}:nll", "--goal", "minimize", "--granularity", "per_tensor"]
    assert main([*args, *metric, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["metric"], report["goal"], report["split"]) == ("nll", "minimize", "evaluation")
    # the outlier pair costs most in the user's metric too: its loss rises most
    assert {r["layer"] for r in report["ranked"][:2]} == {"blocks.2.dw", "blocks.2.pw1"}
    assert report["whole_int8"] > report["all_float"] and report["ranked"][0]["cost"] > 0


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--metric", "a=numpy:mean", "--metric", "b=numpy:max"], "give one metric"),
        (["--metric", "nope"], "NAME=module:function"),
        (["--metric", "accuracy=numpy:mean"], "built-in"),
        (["--metric", "m=no_such_module_here:f"], "--metric"),
    ],
)
def test_bad_metric_input_to_sensitivity_exits_2_with_one_line(tmp_path: Path, capsys, extra, says) -> None:  # type: ignore[no-untyped-def]
    from nnsweep.cli import main

    cache = tmp_path / "cache"
    code = main(["--cache-dir", str(cache), "sensitivity", "--runtime", "onnxruntime", *extra])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and says in err, err
    assert not cache.exists()


@pytest.mark.slow
def test_a_sweeps_host_keeps_float_the_layers_its_metric_ranks_first(tmp_path: Path) -> None:
    """The sweep's path: HostSide imports the user's metric, ranks by it, and says so."""
    from nnsweep.bench import MeasureSettings
    from nnsweep.execution import ModelSource
    from nnsweep.sweep.host import HostSide

    (tmp_path / "task.py").write_text(_NLL)
    metric = UserMetric("nll", f"{tmp_path / 'task.py'}:nll", "minimize")
    told: list[str] = []
    source = ModelSource("digits_outlier", tmp_path / "cache")
    host = HostSide(source, MeasureSettings(), notice=told.append, metrics=(metric,), ranked_by="nll")
    host.load()
    kept = host.float_layers("onnxruntime", Granularity.PER_TENSOR, 2)
    assert set(kept) == {"blocks.2.dw", "blocks.2.pw1"}
    assert any("ranked 11 layers by nll on the evaluation split" in line for line in told), told
    report = cached_ranking(
        host.bundle.digest, "onnxruntime", Granularity.PER_TENSOR, tmp_path / "cache", metric, "evaluation"
    )
    assert report is not None and report.metric == "nll" and report.goal == "minimize"
