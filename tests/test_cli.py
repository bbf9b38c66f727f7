"""The `nnsweep` command: bad input exits 2 with one line and writes nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nnsweep.cli import main


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nnsweep.cli", *args], cwd=cwd, capture_output=True, text=True)


@pytest.mark.parametrize(
    ("args", "option", "allowed"),
    [
        (["--runtime", "tflite"], "--runtime", "executorch, onnxruntime, torch"),
        (["--backends", "xnnpack,gpu"], "--backends", "allowed: xnnpack, ethos-u55-32"),
        (["--quant", "int4"], "--quant", "fp32, fp16, dynamic_int8, static_int8, qat_int8"),
        (["--iters", "0"], "--iters", ">= 1"),
        (["--iters", "-5"], "--iters", ">= 1"),
        (["--model", "no_such_module_xyz:build"], "--model", "does not import"),
        (["--model", "missing.py:build"], "--model", "does not exist"),
        (["--runtime", "onnxruntime", "--quant", "qat_int8"], "--quant", "no training loop"),
        (["--runtime", "torch", "--max-partitions", "2"], "--max-partitions", "executorch"),
        (["--granularity", "per_row", "--quant", "static_int8"], "--granularity", "per_tensor, per_channel"),
    ],
)
def test_bad_bench_input_exits_2_with_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], option: str, allowed: str
) -> None:
    cache = tmp_path / "cache"
    code = main(["--cache-dir", str(cache), "bench", *args])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert option in err and allowed in err
    assert not cache.exists()


def test_argparse_errors_are_one_line_too(tmp_path: Path) -> None:
    proc = _run(["bench", "--iters", "many"], tmp_path)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "--iters" in proc.stderr


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("name: x\nspace: {runtime: [executorch]}\n", "model"),
        ("name: x\nmodel: digits\nspace: {runtime: [tflite]}\n", "space.runtime[0]"),
        ("name: x\nmodel: digits\nspace: {quant: []}\n", "space.quant"),
        ("name: x\nmodel: digits\nbudget: {trials: -1}\n", "budget.trials"),
        ("name: x\nmodel: digits\nspace: {runtime: [executorch\n", "spec"),
        ("name: x\nmodel: digits\nsurprise: 1\n", "surprise"),
    ],
)
def test_bad_specs_exit_2_before_anything_is_written(tmp_path: Path, text: str, field: str) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(text)
    proc = _run(["--cache-dir", str(tmp_path / "cache"), "run", str(spec)], tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"nnsweep: error: {field}:")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]  # no mlflow.db, no .nnsweep, no cache


def test_best_without_a_study_says_so(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("name: never_run\nmodel: digits\n")
    proc = _run(["best", str(spec)], tmp_path)
    assert proc.returncode == 1 and "run `nnsweep run" in proc.stderr


@pytest.mark.integration
def test_bench_json_then_cache_hit(tmp_path: Path, models_dir: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "models").symlink_to(models_dir)
    args = [
        "--cache-dir",
        str(cache),
        "bench",
        "--model",
        "digits",
        "--quant",
        "static_int8",
        "--iters",
        "20",
        "--json",
    ]
    first = _run(args, tmp_path)
    assert first.returncode == 0, first.stderr
    result = json.loads(first.stdout)
    assert result["cache_hit"] is False and result["accuracy"] > 0.95
    assert set(result["latency_ms"]) == {"mean", "p50", "p90", "p99", "std", "min", "max"}
    assert set(result["partitions"]) >= {"count", "sizes", "nodes_by_backend", "fallback_ops"}
    assert result["config"]["quant"]["mode"] == "static_int8"
    again = json.loads(_run(args, tmp_path).stdout)
    assert again["cache_hit"] is True and again["artifact"] == result["artifact"]
    # the chosen configuration round-trips through --config
    config_file = tmp_path / "cfg.json"
    config_file.write_text(json.dumps({"config": result["config"]}))
    third = json.loads(
        _run(
            ["--cache-dir", str(cache), "bench", "--config", str(config_file), "--iters", "5", "--json"], tmp_path
        ).stdout
    )
    assert third["config_digest"] == result["config_digest"] and third["cache_hit"] is True


@pytest.mark.integration
def test_bench_summary_reads_like_benchmark_model(tmp_path: Path, models_dir: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "models").symlink_to(models_dir)
    proc = _run(["--cache-dir", str(cache), "bench", "--model", "digits_gn", "--iters", "20"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for needle in (
        "Inference timings in us",
        "Peak memory footprint (MB)",
        "Accuracy (top-1",
        "Delegated partitions:",
        "Fell back: aten.native_group_norm",
    ):
        assert needle in out


@pytest.mark.integration
@pytest.mark.slow
def test_run_logs_every_trial_to_mlflow_and_writes_the_report(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    spec = tmp_path / "tiny.yaml"
    spec.write_text(
        "name: tiny\nmodel: digits\nbudget: {trials: 5}\nmeasure: {warmup: 1, iters: 20}\n"
        "space: {runtime: [executorch, onnxruntime], quant: [fp32, static_int8], threads: [1]}\n"
    )
    proc = _run(["--cache-dir", str(tmp_path / "cache"), "run", str(spec), "--executor", "local"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = tmp_path / "reports" / "tiny.html"
    assert f"Report: {report.relative_to(tmp_path)}" in proc.stdout

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("tiny")
    runs = client.search_runs([experiment.experiment_id])
    parent = next(r for r in runs if r.data.tags.get("nnsweep.kind") == "device")
    children = [r for r in runs if r.data.tags.get("nnsweep.kind") == "trial"]
    assert len(children) == 5 and all(r.info.status in ("FINISHED", "FAILED") for r in children)
    assert [a.path for a in client.list_artifacts(parent.info.run_id) if a.path.endswith(".html")] == ["report.html"]
    best = [r for r in children if r.data.tags.get("best") == "true"]
    assert len(best) == 1
    number = best[0].data.tags["nnsweep.trial"]
    # What the terminal printed, the report and MLflow name the same best trial.
    assert f"Best on host: trial #{number} " in proc.stdout
    assert f'Best on host: <span class="best-label">#{number} ' in report.read_text(encoding="utf-8")
