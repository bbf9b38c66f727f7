"""A decoder language model in a sweep: the spec takes it with per-token objectives and
refuses what its trials never measure; a real sweep converts both graphs into the artifact
cache, times decode steps on the device's agent, scores the device's logits by perplexity,
re-measures its front per token and records it in MLflow and the report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nnsweep.bench import Timing
from nnsweep.bench._stats import LatencyStats
from nnsweep.core.artifact import DecoderShape
from nnsweep.core.errors import SpecError
from nnsweep.core.metrics import DECODE_PER_TOKEN, LATENCY_P50, PERPLEXITY, PREFILL, TOKENS_PER_S, remeasured
from nnsweep.core.results import TrialStatus
from nnsweep.spec import parse_spec


def test_a_decoders_sweep_minimises_perplexity_and_decode_time_by_default() -> None:
    spec = parse_spec({"name": "lm", "model": "tiny_llama"})
    assert spec.decoder
    assert [(o.metric, o.direction) for o in spec.objectives] == [
        (PERPLEXITY, "minimize"),
        (DECODE_PER_TOKEN, "minimize"),
    ]
    assert not parse_spec({"name": "m", "model": "digits"}).decoder


def test_a_decoders_sweep_takes_bounds_on_its_own_metrics() -> None:
    spec = parse_spec(
        {
            "name": "lm",
            "model": "tiny_llama",
            "objectives": {PERPLEXITY: "minimize", TOKENS_PER_S: "maximize"},
            "constraints": {"max_drop": {PERPLEXITY: 0.5}, "max": {PREFILL: 5.0, "size_bytes": 4e6}},
        }
    )
    assert spec.constraints.max_drop == {PERPLEXITY: 0.5}
    assert spec.constraints.max == {PREFILL: 5.0, "size_bytes": 4e6}


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ({"objectives": {"accuracy": "maximize", DECODE_PER_TOKEN: "minimize"}}, "objectives.accuracy"),
        ({"constraints": {"min": {"sqnr_db": 20.0}}}, "constraints.min.sqnr_db"),
        ({"constraints": {"max_accuracy_drop": 0.01}}, "constraints.max_accuracy_drop"),
        ({"metrics": {"f1": {"function": "sklearn.metrics:f1_score", "goal": "maximize"}}}, "metrics"),
        ({"space": {"float_layers": [0, 2], "quant": ["int4_weight"]}}, "space.float_layers"),
        ({"devices": ["phone"], "bridges": {"phone": {"transport": "adb"}}}, "bridges"),
    ],
)
def test_what_a_decoders_trial_never_measures_is_refused_naming_the_field(section: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec({"name": "lm", "model": "tiny_llama", **section})
    assert caught.value.field == field, caught.value


@pytest.mark.parametrize(
    "section",
    [{"objectives": {PERPLEXITY: "minimize"}}, {"constraints": {"max": {DECODE_PER_TOKEN: 5.0}}}],
)
def test_a_decoders_metric_on_another_model_is_refused(section: dict[str, object]) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec({"name": "m", "model": "digits", **section})
    assert "decoder language model's metric" in caught.value.message


def test_a_decoders_figures_and_shape_travel_with_the_timing_and_the_request() -> None:
    samples = (0.2, 0.3, 0.25)
    timing = Timing(
        load_ms=1.0, first_inference_ms=2.0, latency=LatencyStats.from_samples(samples), samples_ms=samples,
        peak_rss_mb=10.0, rss_before_load_mb=5.0, threads=1, loadavg_1m=0.1,
        figures={PREFILL: 0.7, TOKENS_PER_S: 4000.0},
    )  # fmt: skip
    assert Timing.from_dict(timing.to_dict()).figures == {PREFILL: 0.7, TOKENS_PER_S: 4000.0}
    shape = DecoderShape(32, (2, 1, 2, 128, 32), "decode.onnx")
    assert DecoderShape.from_dict(shape.to_dict()) == shape


@pytest.mark.integration
def test_a_decoder_sweep_is_decided_per_token_and_recorded(tmp_path: Path, monkeypatch: Any, models_dir: Path) -> None:
    import mlflow

    from nnsweep.cli.run import _device_trials
    from nnsweep.execution import LocalExecutor
    from nnsweep.models.decoder import eager_perplexity, load_decoder
    from nnsweep.report.html import load_device, render_report
    from nnsweep.sweep.loop import Sweep
    from nnsweep.tracking.mlflow_tracker import MlflowTracker

    monkeypatch.chdir(tmp_path)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "models").symlink_to(models_dir)
    spec = parse_spec(
        {
            "name": "lm",
            "model": "tiny_llama",
            "constraints": {"max_drop": {PERPLEXITY: 0.5}},
            "budget": {"trials": 3},
            "measure": {"warmup": 1, "iters": 5, "remeasure": 1},
            "space": {
                "runtime": ["onnxruntime"],
                "quant": ["fp32", "int4_weight"],
                "group_size": [32, 128],
                "threads": [1],
            },
        }
    )
    tracker = MlflowTracker("sqlite:///mlflow.db", "lm", "lm")
    (host,) = Sweep(spec, LocalExecutor(), tracker, tmp_path / "cache").run()
    measured = [r for r in host.records if r.status is TrialStatus.OK]
    assert {r.config.quant.mode.value for r in measured} == {"fp32", "int4_weight"}, measured
    eager = eager_perplexity(load_decoder("tiny_llama", models_dir))
    for r in measured:
        assert r.metrics[PERPLEXITY] == pytest.approx(eager, rel=0.25), r  # the device's logits, not noise
        assert r.metrics[PREFILL] > 0 and r.metrics[TOKENS_PER_S] > 0
        assert r.samples_ms and r.metrics[DECODE_PER_TOKEN] > 0
        assert r.metrics["size_bytes"] > 0
    fp32 = next(r for r in measured if r.config.quant.mode.value == "fp32")
    int4 = [r for r in measured if r.config.quant.mode.value == "int4_weight"]
    assert all(r.metrics["size_bytes"] < fp32.metrics["size_bytes"] / 2 for r in int4)  # both graphs counted
    # the front is decided on re-measured decode steps: the per-token figure follows the pooled p50
    assert host.spread and all(s.p50_ms for s in host.spread)
    for r in host.pareto:
        if remeasured(LATENCY_P50) in r.metrics:
            assert r.metrics[DECODE_PER_TOKEN] == r.metrics[LATENCY_P50] == r.metrics[remeasured(LATENCY_P50)]
    assert host.best is not None and not host.profiles and not host.divergences
    runs = mlflow.MlflowClient("sqlite:///mlflow.db").search_runs(
        [mlflow.get_experiment_by_name("lm").experiment_id], "tags.mlflow.parentRunId != ''"
    )
    logged = [run.data.metrics for run in runs if PERPLEXITY in run.data.metrics]
    told = [r for r in host.records if r.status.measured]  # repeats told free are logged with their figures too
    assert len(logged) == len(told) and all(DECODE_PER_TOKEN in m and PREFILL in m for m in logged)
    for device in (_device_trials(host), load_device(spec, "host")):
        html = render_report(spec, [device])
        assert "perplexity" in html and "decode per token" in html
    assert np.isfinite(host.best.metrics[PERPLEXITY])


def test_a_users_decoder_is_swept_with_kind_decoder(tmp_path: Path) -> None:
    (tmp_path / "lm.py").write_text("def build():\n    raise AssertionError('the spec imports nothing')\n")
    spec = parse_spec({"name": "lm", "model": "lm.py:build", "kind": "decoder"}, source=tmp_path / "s.yaml")
    assert spec.decoder and spec.objectives[0].metric == PERPLEXITY
    assert not parse_spec({"name": "m", "model": "lm.py:build"}, source=tmp_path / "s.yaml").decoder
    with pytest.raises(SpecError) as caught:
        parse_spec({"name": "m", "model": "digits", "kind": "decoder"})
    assert caught.value.field == "kind"
