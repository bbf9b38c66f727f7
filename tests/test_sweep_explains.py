"""A sweep explains, by layer, the fastest trials a quality bound turned away: each layer's
output against fp32 (real explainers), kept on the study, attached to the trial's run, and
shown in the report beside the float_layers that would repair it."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes.tracking import RecordingTracker

from nnsweep.core.config import DeploymentConfig, QuantConfig
from nnsweep.core.results import TrialRecord, TrialStatus
from nnsweep.sweep.explains import DIVERGENCE_ARTIFACT, explained


def _record(number: int, p50: float, mode: str = "static_int8", **fields: object) -> TrialRecord:
    config = DeploymentConfig("onnxruntime", quant=QuantConfig(mode))  # type: ignore[arg-type]
    status = fields.pop("status", TrialStatus.OK)
    return TrialRecord(
        sweep="e", device="host", number=number, config=config, status=status, metrics={"latency_p50_ms": p50},
        **fields,
    )  # type: ignore[arg-type]  # fmt: skip


def test_the_fastest_trials_a_bound_turned_away_are_explained_each_once() -> None:
    records = [
        _record(0, 5.0, "fp32", feasible=False),  # fp32 has nothing to compare with fp32
        _record(1, 3.0, feasible=False),
        _record(2, 1.0, feasible=False),
        _record(3, 0.5, feasible=True),
        _record(4, 2.0, feasible=False, reused_from=2),
        _record(5, 0.1, feasible=False, estimated=True),
        _record(6, 0.2, feasible=False, status=TrialStatus.FAILED),
        _record(7, 2.5, feasible=False),
        _record(8, 4.0, feasible=False),
    ]
    assert [r.number for r in explained(records)] == [2, 7, 1]
    assert [r.number for r in explained(records, limit=1)] == [2]
    assert explained([r for r in records if r.feasible]) == []


def test_the_report_shows_the_first_diverging_layer_and_what_to_keep_float() -> None:
    from dashboards.divergence import divergence_section

    layers = [{"name": "stem.0", "sqnr_db": 35.0}, {"name": "blocks.2.dw", "sqnr_db": 24.0}]
    layers += [{"name": "blocks.2.pw1", "sqnr_db": 3.5}, {"name": "head", "sqnr_db": None}]
    divergence = {
        "layers": layers,
        "first": "blocks.2.pw1",
        "worst": "blocks.2.pw1",
        "suggested_float": ["blocks.2.dw", "blocks.2.pw1"],
        "threshold_db": 20.0,
    }
    records = [_record(1, 1.0, feasible=False), _record(2, 2.0, feasible=False)]
    html = divergence_section("host", records, {1: divergence, 2: {"unavailable": "armnn: no explainer"}})
    assert "Where the numbers diverge: host" in html
    assert "First below 20 dB: <code>blocks.2.pw1</code>" in html
    assert "Keeping <code>blocks.2.dw</code>, <code>blocks.2.pw1</code> float" in html
    assert '<td><code>head</code></td><td class="num">identical</td>' in html
    assert "<code>stem.0</code>" not in html  # the table starts at the first diverging layer
    assert "Not shown: 2 before it, all at or above 20 dB" in html
    assert "#2 " in html and "no layers (armnn: no explainer)" in html
    assert divergence_section("host", records, {}) == ""


@pytest.mark.integration
def test_a_sweep_explains_its_turned_away_int8_trial_and_the_report_shows_it(  # type: ignore[no-untyped-def]
    tmp_path: Path, monkeypatch, models_dir: Path
) -> None:
    from nnsweep.cli.run import _device_trials
    from nnsweep.execution import LocalExecutor
    from nnsweep.report.html import load_device, render_report
    from nnsweep.spec import parse_spec
    from nnsweep.sweep import studies
    from nnsweep.sweep.loop import Sweep

    monkeypatch.chdir(tmp_path)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "models").symlink_to(models_dir)
    spec = parse_spec(
        {
            "name": "e",
            "model": "digits_outlier",  # whole-model int8 breaks it: the bound turns static int8 away
            "constraints": {"max_accuracy_drop": 0.01},
            "budget": {"trials": 2},
            "measure": {"warmup": 1, "iters": 20, "remeasure": 0},
            "space": {"runtime": ["onnxruntime"], "quant": ["fp32", "static_int8"], "threads": [1]},
            "search": {"profile": "none", "quality_first": False},
        }
    )
    tracker = RecordingTracker()
    (host,) = Sweep(spec, LocalExecutor(), tracker, tmp_path / "cache").run()  # type: ignore[arg-type]
    turned_away = [r.number for r in host.records if r.status is TrialStatus.OK and r.feasible is False]
    assert turned_away and set(host.divergences) == set(turned_away[:3])
    number = turned_away[0]
    divergence = host.divergences[number]
    assert divergence["layers"] and divergence["first"], divergence
    # the worst damage is in the block whose pw1 carries the planted outlier channels (pw1, or pw2 reading it)
    assert str(divergence["worst"]).startswith("blocks.2.pw"), divergence
    assert DIVERGENCE_ARTIFACT in tracker.artifacts[f"host#{number}"]
    stored = studies.stored_divergences(studies.open_study(spec, "host", create=False))
    assert stored[number]["first"] == divergence["first"]
    for device in (_device_trials(host), load_device(spec, "host")):
        html = render_report(spec, [device])
        assert "Where the numbers diverge: host" in html and f"<code>{divergence['first']}</code>" in html
