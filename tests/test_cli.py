"""The `nnsweep` command: bad input exits 2 with one line and writes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
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
        (["--iters", "0"], "--iters", "give 1 to 1,000,000"),
        (["--iters", "-5"], "--iters", "give 1 to 1,000,000"),
        (["--iters", "1e29"], "--iters", "not an integer"),
        (["--iters", "10000000000000000000000000000"], "--iters", "give 1 to 1,000,000"),
        (["--timeout", "inf"], "--timeout", "give more than 0 to 86400 seconds"),
        (["--timeout", "nan"], "--timeout", "give more than 0 to 86400 seconds"),
        (["--threads", "true"], "--threads", "not an integer"),
        (["--input-shape", "1,3,100000,100000"], "--input-shape", "more than 16,777,216 elements"),
        (["--input-shape", "1,x"], "--input-shape", "comma list of integers"),
        (["--model", "no_such_module_xyz:build"], "--model", "does not import"),
        (["--model", "missing.py:build"], "--model", "does not exist"),
        (["--runtime", "onnxruntime", "--quant", "qat_int8"], "--quant", "no training loop"),
        (["--runtime", "torch", "--max-partitions", "2"], "--max-partitions", "executorch"),
        (["--granularity", "per_row", "--quant", "static_int8"], "--granularity", "per_tensor, per_channel"),
        (["--float-layers", "-1", "--quant", "static_int8"], "--float-layers", "give 0 to 10,000"),
        (["--float-layers", "2", "--quant", "fp32"], "--float-layers", "give one of those --quant"),
        (
            ["--float-layers", "2", "--quant", "static_int8", "--backends", "ethos-u55-128"],
            "--float-layers",
            "int8 only",
        ),
        # ONNX Runtime's own quantizer options: a bad value, a refused pair, the wrong mode or runtime
        (
            ["--runtime", "onnxruntime", "--quant", "static_int8", "--quant-format", "qop"],
            "--quant-format",
            "qoperator",
        ),
        (["--runtime", "onnxruntime", "--quant", "static_int8", "--weight-type", "int4"], "--weight-type", "uint8"),
        (["--runtime", "onnxruntime", "--quant", "static_int8", "--reduce-range", "yes"], "--reduce-range", "true"),
        (
            [
                "--runtime",
                "onnxruntime",
                "--quant",
                "static_int8",
                "--activation-type",
                "int8",
                "--weight-type",
                "uint8",
            ],
            "--activation-type",
            "refuses int8 activations with uint8 weights",
        ),
        (
            ["--runtime", "onnxruntime", "--quant", "dynamic_int8", "--activation-type", "int8"],
            "--activation-type",
            "applies to static_int8",
        ),
        (["--runtime", "onnxruntime", "--quant", "fp32", "--reduce-range"], "--reduce-range", "dynamic_int8"),
        (
            ["--runtime", "executorch", "--quant", "static_int8", "--quant-format", "qdq"],
            "--quant-format",
            "onnxruntime",
        ),
        (["--runtime", "torch", "--quant", "dynamic_int8", "--weight-type", "uint8"], "--weight-type", "onnxruntime"),
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


def test_run_trials_below_one_is_a_usage_error(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("name: x\nmodel: digits\n")
    proc = _run(["--cache-dir", str(tmp_path / "cache"), "run", str(spec), "--trials", "0"], tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("nnsweep: error: --trials: must be at least 1")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


def test_best_and_report_of_a_sweep_that_never_ran_say_so_in_one_line_and_exit_2(tmp_path: Path) -> None:
    # `report` exited 1 here while `best` exited 2: both are the user's next step, not a failure
    spec = tmp_path / "s.yaml"
    spec.write_text("name: never_run\nmodel: digits\n")
    for command in (["best", str(spec)], ["report", str(spec), "--no-tracking"]):
        proc = _run(command, tmp_path)
        assert proc.returncode == 2 and "nnsweep run" in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]  # nothing written


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
    assert all(r.info.status in ("FINISHED", "FAILED") for r in children)
    # one run per told trial; the space holds 4 configurations, each tried once (budget 5),
    # and a repeat the sampler proposed is told for free, with a run of its own
    assert len([r for r in children if "reused_from" not in r.data.tags]) == 4
    assert [a.path for a in client.list_artifacts(parent.info.run_id) if a.path.endswith(".html")] == ["report.html"]
    best = [r for r in children if r.data.tags.get("best") == "true"]
    assert len(best) == 1
    number = best[0].data.tags["nnsweep.trial"]
    # What the terminal printed, the report and MLflow name the same best trial.
    assert f"Best on host: trial #{number} " in proc.stdout
    assert f'Best on host: <span class="best-label">#{number} ' in report.read_text(encoding="utf-8")


def test_global_options_go_before_or_after_the_subcommand(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cache = tmp_path / "cache"
    assert main(["bench", "--cache-dir", str(cache), "-v", "--runtime", "tflite"]) == 2
    assert main(["agent", "head", "--cache-dir", str(cache), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "--runtime" in err and "--port" in err and not cache.exists()


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["report", "s.yaml", "--ui-url", "javascript:alert(1)"], "http:// or https://"),
        (["report", "s.yaml", "--ui-url", "http://ok/ onmouseover=x"], "spaces"),
        (["ui", "s.yaml", "--port", "-5"], "give 1 to 65,535"),
        (["agent", "head", "--port", "70000"], "give 1 to 65,535"),
        (["agent", "join", "--address", "h:1", "--device", "b", "--dashboard-agent-port", "0"], "give 1 to"),
    ],
)
def test_option_values_are_bounded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], text: str
) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and text in err


def test_the_ui_on_a_port_another_process_holds_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """MLflow's server logged the failed bind and exited 0, as if the UI had run."""
    import socket

    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\nmodel: digits\ndevices: [host]\nspace: {runtime: [onnxruntime]}\n")
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert main(["ui", str(spec), "--port", str(port)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"nnsweep: error: --port: {port} on 127.0.0.1 cannot be used ("), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]  # no MLflow database made


def test_a_head_on_a_port_another_process_holds_is_refused_before_its_token_is_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ray's head waited 40 s for its GCS, then printed a traceback, exit 1."""
    import socket

    token = tmp_path / "auth_token"
    with socket.socket() as held:
        held.bind(("0.0.0.0", 0))
        held.listen()
        port = held.getsockname()[1]
        assert main(["agent", "head", "--port", str(port), "--token-file", str(token)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"nnsweep: error: --port: {port} on 0.0.0.0 cannot be used ("), err
    assert not token.exists()


def test_a_cache_folder_that_is_a_file_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`bench --cache-dir FILE` trained and converted, then ended with exit 1 when it first wrote
    the artifact (`cannot write the artifact at FILE/staging: Not a directory`)."""
    afile = tmp_path / "afile"
    afile.write_text("mine\n")
    bench = ["bench", "--model", "digits", "--runtime", "onnxruntime"]
    monkeypatch.delenv("NNSWEEP_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(afile))
    for argv, line in [
        (["--cache-dir", str(afile), *bench], f"--cache-dir: {str(afile)!r} is not a folder: give a folder"),
        (
            ["--cache-dir", str(afile / "sub"), *bench],
            f"--cache-dir: {str(afile / 'sub')!r} lies under {str(afile)!r}, which is not a folder: give a folder",
        ),
        (bench, f"the cache: {str(afile / '.cache' / 'nnsweep')!r} lies under {str(afile)!r}, which is not a "
         "folder: give a folder with --cache-dir or NNSWEEP_CACHE"),
    ]:  # fmt: skip
        assert main(argv) == 2
        assert capsys.readouterr().err.strip().splitlines() == [f"nnsweep: error: {line}"]
    monkeypatch.setenv("NNSWEEP_CACHE", str(afile))
    assert main(bench) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"nnsweep: error: NNSWEEP_CACHE: {str(afile)!r} is not a folder: set it to a folder, or unset it"
    assert afile.read_text() == "mine\n" and sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_a_report_path_that_cannot_be_a_file_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`report --out FOLDER` (or '', the current one) named its temporary file, `--out FILE/x.html`
    said "File exists", both exit 1; `run` found out only after the whole sweep."""
    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\nmodel: digits\ndevices: [host]\nspace: {runtime: [onnxruntime]}\nbudget: {trials: 1}\n")
    (tmp_path / "folder").mkdir()
    (tmp_path / "afile").write_text("mine\n")
    cases = [
        (["--out", "folder"], "--out: 'folder' is a folder: give the HTML file's path, e.g. folder/s.html"),
        (["--out", ""], "--out: '.' is a folder: give the HTML file's path, e.g. s.html"),
        (["--out", "afile/x/r.html"], "--out: 'afile/x/r.html' lies under 'afile', which is not a folder"),
    ]
    for options, line in cases:
        assert main(["report", str(spec), "--no-tracking", *options]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [f"nnsweep: error: {line}"]
        run_options = ["--report", *options[1:]]
        assert main(["--cache-dir", "c", "run", str(spec), "--executor", "local", *run_options]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [f"nnsweep: error: {line.replace('--out', '--report')}"]
    (tmp_path / "reports").write_text("mine\n")  # the default folder is a file
    assert main(["--cache-dir", "c", "run", str(spec), "--executor", "local"]) == 2
    assert capsys.readouterr().err.strip() == (
        "nnsweep: error: --report (default reports/s.html): 'reports/s.html' lies under 'reports', which is "
        "not a folder: give another path with --report"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "folder", "reports", "s.yaml"]  # nothing written


def test_non_utf8_files_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"runtime: onnxruntime\nquant: {mode: \xff\xfe}\n")
    assert main(["--cache-dir", str(tmp_path / "c"), "bench", "--config", str(bad)]) == 2
    assert main(["run", str(bad)]) == 2
    token = tmp_path / "token"
    token.write_bytes(b"\xff\xfe")
    token.chmod(0o600)
    assert main(["agent", "join", "--address", "h:1", "--device", "b", "--token-file", str(token)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("nnsweep: error:") for line in lines), lines
    assert "not UTF-8" in lines[0] and "not UTF-8" in lines[1] and "not ASCII" in lines[2]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml", "token"]


def test_config_values_of_the_wrong_kind_are_input_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.yaml"
    for text in ("runtime: torch\nbackends: 5\n", "runtime: torch\nquant: [1]\n", "runtime: [1]\n", "a: 1\na: 2\n"):
        config.write_text(text)
        assert main(["--cache-dir", str(tmp_path / "c"), "bench", "--config", str(config)]) == 2, text
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 4 and all(line.startswith("nnsweep: error:") for line in lines), lines


def test_a_join_refuses_a_token_others_can_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    token = tmp_path / "auth_token"
    token.write_text("0123abcd")
    token.chmod(0o644)
    assert main(["agent", "join", "--address", "h:1", "--device", "b", "--token-file", str(token)]) == 2
    err = capsys.readouterr().err
    assert "mode 0644" in err and "chmod 600" in err and len(err.strip().splitlines()) == 1


def test_an_unexpected_error_is_one_line_and_the_traceback_needs_v(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import nnsweep.cli.devices

    def broken(args: object, cache_dir: Path) -> int:
        raise KeyError("surprise\nsecond line")

    monkeypatch.setattr(nnsweep.cli.devices, "run", broken)
    assert main(["devices"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("nnsweep: error: KeyError:") and "-v" in err
    assert main(["devices", "-v"]) == 1
    assert "Traceback" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("storage", "uri", "text"),
    [
        ("nosuch://x", "sqlite:///mlflow.db", "storage: unknown database 'nosuch'"),
        ("sqlite:///missing/dir/o.db", "sqlite:///mlflow.db", "storage: the folder of"),
        ("journal", "http://127.0.0.1:9", "tracking.uri: cannot reach"),
        ("journal", "file:///tmp/mlruns", "tracking.uri:"),
    ],
)
def test_storage_and_tracking_uris_are_checked_before_anything_starts(
    tmp_path: Path, storage: str, uri: str, text: str
) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(f"name: s\nmodel: digits\nstorage: '{storage}'\ntracking: {{uri: '{uri}'}}\n")
    proc = _run(["--cache-dir", str(tmp_path / "cache"), "run", str(spec)], tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"nnsweep: error: {text}") and proc.stderr.count("\n") == 1, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda db: db.write_bytes(b"SQLite format 3\0" + bytes(3000)), "file is not a database"),
        (lambda db: os.truncate(db, db.stat().st_size // 2), "database disk image is malformed"),
    ],
    ids=["header-only", "cut-in-half"],
)
def test_a_damaged_sqlite_database_is_refused_by_name_before_anything_starts(
    tmp_path: Path, damage: Callable[[Path], object], reason: str
) -> None:
    """MLflow and Optuna failed on it with `DatabaseError: file is not a database` (and `-v`)."""
    import sqlite3

    db = tmp_path / "mlflow.db"
    with sqlite3.connect(db) as made:  # a database with a few pages, as a tracking store has
        made.execute("CREATE TABLE t (x BLOB)")
        made.executemany("INSERT INTO t VALUES (?)", [(bytes(2000),) for _ in range(40)])
    made.close()
    damage(db)
    before = db.read_bytes()
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\nmodel: digits\ntracking: {uri: 'sqlite:///mlflow.db'}\n")
    proc = _run(["--cache-dir", str(tmp_path / "cache"), "run", str(spec)], tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (
        f"nnsweep: error: tracking.uri: '{db}' is a damaged SQLite database ({reason}): restore it or move it aside\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db", "s.yaml"] and db.read_bytes() == before


@pytest.mark.integration
def test_a_space_a_device_cannot_serve_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """The Ethos-U mistake: an executorch order that does not name the NPU target."""
    spec = tmp_path / "npu.yaml"
    spec.write_text(
        "name: npu\nmodel: digits\ndevices: [u55]\nnpus: {u55: {target: ethos-u55-128}}\n"
        "space: {runtime: [executorch, onnxruntime]}\ntracking: {uri: sqlite:///mlflow.db}\n"
    )
    proc = _run(["--cache-dir", str(tmp_path / "cache"), "run", str(spec), "--executor", "local"], tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert "write space.backends: {executorch: [ethos-u55-128]}" in line and "onnxruntime does not load there" in line
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / ".nnsweep").exists()


def test_best_across_devices_picks_one_configuration_for_all(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml

    from nnsweep.core.config import DeploymentConfig, QuantConfig, QuantMode
    from nnsweep.core.results import TrialRecord, TrialStatus
    from nnsweep.spec import load_spec
    from nnsweep.sweep import studies
    from nnsweep.sweep.lifecycle import Role

    path = tmp_path / "two.yaml"
    path.write_text("name: two\nmodel: digits\ndevices: [laptop, board]\n")
    spec = load_spec(path)
    latencies = {"laptop": {1: 4.0, 2: 2.5, 4: 2.0}, "board": {1: 10.0, 2: 11.0, 4: 30.0}}
    for device, by_threads in latencies.items():
        study = studies.open_study(spec, device)
        for number, (threads, latency) in enumerate(by_threads.items()):
            config = DeploymentConfig("onnxruntime", ("cpu",), QuantConfig(QuantMode.FP32), threads=threads)
            metrics = {"accuracy": 0.95, "latency_p50_ms": latency}
            emulated = device == "board"
            record = TrialRecord(
                "two", device, number, config, TrialStatus.OK, metrics=metrics, feasible=True, emulated=emulated
            )
            studies.enqueue(study, {}, Role.SEARCH)
            studies.tell_record(study, study.ask(), record, [0.95, latency], {})
    assert main(["best", str(path), "--across-devices"]) == 0
    chosen = yaml.safe_load(capsys.readouterr().out)
    assert chosen["config"]["threads"] == 2 and chosen["worst_slowdown"] == 1.25
    assert chosen["devices"]["board"]["slowdown"] == 1.1
    assert chosen["devices"]["laptop"]["own_best_config"].endswith("t4")
    assert chosen["devices"]["board"]["emulated"] is True and chosen["devices"]["laptop"]["emulated"] is False
    assert main(["best", str(path), "--across-devices", "--device", "board"]) == 2


def test_devices_shows_the_exact_space_values_each_device_accepts(capsys: pytest.CaptureFixture[str]) -> None:
    from nnsweep.core.runtimes import get

    assert main(["devices"]) == 0
    text = capsys.readouterr().out
    assert "    onnxruntime: backends cpu\n" in text
    assert "calibration: entropy, minmax, percentile" in text  # onnxruntime's own calibrations
    assert f"threads: 1 to {os.cpu_count()}" in text
    assert "    int8 flags: " in text  # this machine's, read from /proc/cpuinfo
    assert main(["devices", "--json"]) == 0
    (host,) = json.loads(capsys.readouterr().out)
    ort = host["space"]["runtime"]["onnxruntime"]
    # the registry's modes, exactly: a spec that keeps to these values is accepted on this device
    assert set(ort["quant"]) == {m.value for m in get("onnxruntime").modes}
    assert ort["quant"]["fp32"] == [] and "per_tensor" in ort["quant"]["static_int8"]
    assert ort["partition_limits"] is False and host["space"]["runtime"]["executorch"]["partition_limits"] is True


@pytest.mark.parametrize(
    ("args", "option", "allowed"),
    [
        (["--runtime", "nope"], "--runtime", "allowed: executorch"),
        (["--runtime", "onnxruntime", "--quant", "fp32"], "--quant", "not an int8 or int4_weight mode"),
        (["--runtime", "armnn", "--granularity", "per_channel"], "--granularity", "per_tensor"),
    ],
)
def test_bad_sensitivity_input_exits_2_with_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], option: str, allowed: str
) -> None:
    cache = tmp_path / "cache"
    code = main(["--cache-dir", str(cache), "sensitivity", *args])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert option in err and allowed in err, err
    assert not cache.exists()


@pytest.mark.slow
def test_sensitivity_ranks_the_outlier_pair_first_and_is_kept(tmp_path: Path, models_dir: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "models").symlink_to(models_dir)
    args = ["--cache-dir", str(cache), "sensitivity", "--model", "digits_outlier", "--runtime", "onnxruntime"]
    first = _run([*args, "--granularity", "per_tensor", "--json"], tmp_path)
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout)
    # the four outlier channels sit between blocks.2.dw and blocks.2.pw1: quantizing either alone costs most
    assert {r["layer"] for r in report["ranked"][:2]} == {"blocks.2.dw", "blocks.2.pw1"}
    assert report["whole_int8"] < report["all_float"] - 0.05 and not report["cache_hit"]
    again = json.loads(_run([*args, "--granularity", "per_tensor", "--json"], tmp_path).stdout)
    assert again["cache_hit"] and again["ranked"] == report["ranked"]
    # bench --float-layers 2 keeps that pair float: back within a point of fp32, and says so
    bench = ["--cache-dir", str(cache), "bench", "--model", "digits_outlier", "--runtime", "onnxruntime"]
    whole = json.loads(
        _run([*bench, "--quant", "static_int8", "--granularity", "per_tensor", "--json"], tmp_path).stdout
    )
    fp32 = json.loads(_run([*bench, "--json"], tmp_path).stdout)
    mixed_proc = _run(
        [*bench, "--quant", "static_int8", "--granularity", "per_tensor", "--float-layers", "2", "--json"], tmp_path
    )
    mixed = json.loads(mixed_proc.stdout)
    assert whole["accuracy"] < fp32["accuracy"] - 0.01 <= mixed["accuracy"]
    assert sorted(mixed["config"]["quant"]["float_layers"]) == ["blocks.2.dw", "blocks.2.pw1"]
    assert any("kept in float" in note for note in mixed["partitions"]["notes"])
    too_many = _run([*bench, "--quant", "static_int8", "--float-layers", "99"], tmp_path)
    assert too_many.returncode == 2 and "above the model's" in too_many.stderr


_DECIDED = """
import torch
from torch import nn


def build():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 6), nn.ReLU(), nn.Linear(6, 3))
    with torch.no_grad():
        model[2].bias.copy_(torch.tensor([100.0, 0.0, 0.0]))  # class 0 whatever int8 does
    return model.eval(), torch.randn(1, 6)
"""


def test_sensitivity_says_when_the_split_tells_no_layer_apart(tmp_path: Path) -> None:
    # A model that int8 does not hurt on the calibration split: every layer costs 0 points, so
    # the outputs' SQNR alone orders them, and the user is told so.
    (tmp_path / "decided.py").write_text(_DECIDED)
    args = ["--cache-dir", str(tmp_path / "cache"), "sensitivity", "--model", "decided.py:build"]
    shown = _run([*args, "--runtime", "onnxruntime"], tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "every layer costs the same top-1 here" in shown.stdout and "+0.00 points" in shown.stdout
    report = json.loads(_run([*args, "--runtime", "onnxruntime", "--json"], tmp_path).stdout)
    assert report["all_tie"] and [r["cost"] for r in report["ranked"]] == [0.0, 0.0]
    first, second = (r["sqnr_db"] for r in report["ranked"])
    assert first <= second  # the layer whose int8 distorts the outputs more comes first


@pytest.mark.slow
def test_float_layers_that_leave_nothing_int8_are_called_float_in_effect(tmp_path: Path, recurrent: Path) -> None:
    # ONNX Runtime's static int8 does not quantize an LSTM: with the head kept float, the
    # artifact is float whatever its mode says. The ranking marks the LSTM, bench says so.
    common = ["--cache-dir", str(tmp_path / "cache")]
    model = ["--model", f"{recurrent}:build", "--runtime", "onnxruntime", "--quant", "static_int8"]
    report = json.loads(_run([*common, "sensitivity", *model, "--json"], tmp_path).stdout)
    assert {r["layer"]: r["inert"] for r in report["ranked"]} == {"head": False, "lstm": True}
    table = _run([*common, "sensitivity", *model], tmp_path).stdout
    assert "lstm" in table and "(int8 changes nothing: this quantizer leaves it float)" in table
    kept = _run([*common, "bench", *model, "--float-layers", "1", "--iters", "5", "--json"], tmp_path)
    assert kept.returncode == 0, kept.stderr
    assert json.loads(kept.stdout)["config"]["quant"]["float_layers"] == ["head"]  # stdout stays JSON
    note = "with 1 layer float, no layer left int8 changes the outputs (onnxruntime's static int8 leaves the rest"
    assert note in kept.stderr and "VNNI" not in kept.stderr  # nothing int8: no kernel to saturate
    whole = _run([*common, "bench", *model, "--iters", "5", "--json"], tmp_path)
    assert whole.returncode == 0 and "float in effect" not in whole.stderr  # its head runs int8
    # the LSTM alone, whole model: no ranking is asked for, the measurement says it
    bare = _run([*common, "bench", *model, "--iters", "5", "--json", "--model", f"{recurrent}:bare"], tmp_path)
    assert bare.returncode == 0 and not json.loads(bare.stdout)["config"]["quant"].get("float_layers")
    said = "onnxruntime static_int8: the outputs are within float32's rounding of fp32's ("
    assert said in bare.stderr and "; compare it with --quant fp32" in bare.stderr and "VNNI" not in bare.stderr
    # the ranking is static int8's: ONNX Runtime's dynamic int8 quantizes the LSTM (DynamicQuantizeLSTM)
    dynamic = [*model[:-1], "dynamic_int8", "--float-layers", "1", "--iters", "5", "--json"]
    kept_dynamic = _run([*common, "bench", *dynamic], tmp_path)
    assert kept_dynamic.returncode == 0 and "float in effect" not in kept_dynamic.stderr


@pytest.mark.slow
def test_a_quantizer_that_fails_on_the_model_is_one_line_and_no_ranking_is_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """litert-torch 0.10's GRU annotator indexes a hidden state the call does not pass: the line
    names the GRU and the call that converts, not the bare IndexError it said before."""
    cache = tmp_path / "cache"
    model = f"{Path(__file__).resolve().parent.parent / 'benchmarks' / 'fidelity_models.py'}:gru"
    code = main(["--cache-dir", str(cache), "sensitivity", "--model", model, "--runtime", "litert"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert "litert's quantizer cannot rank the layers of this model (NotImplementedError" in last
    assert "needs a GRU called as out, h = gru(x, h0)" in last
    assert not list(cache.glob("sensitivity/*/*.json"))


@pytest.mark.slow
def test_a_model_without_layers_ranks_none_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "pool.py"
    model.write_text(
        "import torch\n"
        "def pool():\n"
        "    model = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1))\n"
        "    return model.eval(), torch.randn(1, 3, 8, 8)\n"
    )
    args = [
        "--cache-dir",
        str(tmp_path / "cache"),
        "sensitivity",
        "--model",
        f"{model}:pool",
        "--runtime",
        "onnxruntime",
    ]
    assert main(args) == 0
    assert "none: the model has no convolution, linear layer" in capsys.readouterr().out
    assert main([*args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ranked"] == []


def test_bench_defaults_to_the_runtimes_own_granularity() -> None:
    from nnsweep.cli.bench import _default_granularity

    quant: dict[str, object] = {"mode": "static_int8"}
    _default_granularity("armnn", quant)  # Arm NN's parser takes per-tensor int8 only
    assert quant["granularity"] == "per_tensor"
    quant = {"mode": "static_int8"}
    _default_granularity("onnxruntime", quant)
    assert "granularity" not in quant  # QuantConfig's default (per channel) stands
    quant = {"mode": "static_int8", "granularity": "per_channel"}
    _default_granularity("armnn", quant)
    assert quant["granularity"] == "per_channel"  # given: kept (and refused by the config's check)


def test_stdout_holds_the_result_alone_whatever_else_writes_there() -> None:
    # Python prints, writes to descriptor 1 (native code) and child processes all go to stderr
    # while a command works; its result alone reaches stdout.
    script = (
        "import os, subprocess, sys\n"
        "from nnsweep.cli._output import results, results_apart\n"
        "with results_apart():\n"
        "    print('printed by a library')\n"
        "    sys.stdout.flush()\n"
        "    os.write(1, b'written by native code\\n')\n"
        "    subprocess.run([sys.executable, '-c', 'print(\"a child process\")'], check=True)\n"
        "    results().write('{\"result\": 1}\\n')\n"
        "print('after the command')\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert proc.stdout == '{"result": 1}\nafter the command\n'
    for noise in ("printed by a library", "written by native code", "a child process"):
        assert noise in proc.stderr


@pytest.mark.integration
def test_bench_json_stays_json_when_the_model_prints(tmp_path: Path) -> None:
    # litert-torch's quantizer prints to stdout ("Relu partition has more than one output node"),
    # which made `bench --json` unreadable; a user's model that prints stands in for it here.
    model = tmp_path / "noisy.py"
    model.write_text(
        "import os, torch\n"
        "def noisy():\n"
        "    print('a model that prints')\n"
        "    os.write(1, b'and writes to descriptor 1\\n')\n"
        "    torch.manual_seed(0)\n"
        "    return torch.nn.Sequential(torch.nn.Linear(8, 4)).eval(), torch.randn(1, 8)\n"
    )
    proc = _run(
        ["--cache-dir", str(tmp_path / "cache"), "bench", "--model", f"{model}:noisy", "--iters", "5", "--json"],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["latency_ms"]["p50"] > 0
    assert "a model that prints" in proc.stderr and "and writes to descriptor 1" in proc.stderr


@pytest.mark.slow
def test_the_litert_ranking_keeps_what_its_quantizer_prints_off_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # litert-torch 0.10 prints "Relu partition has more than one output node" where one
    # nn.ReLU module follows an add and is called twice (torchvision's ResNet blocks).
    from nnsweep.core.quant import Granularity
    from nnsweep.models import load_model
    from nnsweep.sensitivity.ranking import evaluator

    (tmp_path / "res.py").write_text(
        "import torch\n"
        "from torch import nn\n"
        "class Res(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.a, self.b = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)\n"
        "        self.relu, self.head = nn.ReLU(), nn.Linear(8, 10)\n"
        "    def forward(self, x):\n"
        "        y = self.relu(self.a(x))\n"
        "        return self.head(self.relu(self.b(y) + y).mean((2, 3)))\n"
        "def res():\n"
        "    torch.manual_seed(0)\n"
        "    return Res().eval(), torch.randn(1, 3, 8, 8)\n"
    )
    evaluate = evaluator(load_model(f"{tmp_path}/res.py:res"), "litert", Granularity.PER_CHANNEL)
    capsys.readouterr()
    assert 0.0 <= evaluate(frozenset({"b"})).accuracy <= 1.0
    assert capsys.readouterr().out == ""


_MODELS_NNSWEEP_CANNOT_TAKE = """
import torch


class OneHot(torch.nn.Module):
    def forward(self, ids):
        return torch.nn.functional.one_hot(ids, 10).float().sum(1)


def one_hot():
    return OneHot(), torch.randint(0, 10, (1, 6))


def scripted():
    return torch.jit.trace(torch.nn.Linear(4, 2).eval(), torch.randn(1, 4)), torch.randn(1, 4)


def double():
    return torch.nn.Linear(4, 2).double().eval(), torch.randn(1, 4, dtype=torch.float64)


def half_weights():
    return torch.nn.Linear(4, 2).half().eval(), torch.randn(1, 4)


def exported():
    x = torch.randn(1, 4)
    return torch.export.export(torch.nn.Linear(4, 2).eval(), (x,)), x


def exported_module():
    x = torch.randn(1, 4)
    return torch.export.export(torch.nn.Linear(4, 2).eval(), (x,)).module(), x
"""


@pytest.mark.parametrize(
    ("builder", "text"),
    [
        ("one_hot", "takes integer inputs but has no nn.Embedding, so nnsweep cannot tell which values are valid"),
        ("scripted", "returned a TorchScript module (TopLevelTracedModule): nnsweep converts through torch.export"),
        ("double", "the example input is float64; nnsweep deploys float32 models (its fp32 baseline)"),
        ("half_weights", "the parameter weight is float16; nnsweep deploys float32 models"),
        ("exported", "returned a torch.export program: nnsweep exports the model itself"),
        ("exported_module", "returned the module of a torch.export program: nnsweep exports the model itself"),
    ],
)
@pytest.mark.parametrize("command", ["bench", "sensitivity"])
def test_a_model_nnsweep_cannot_take_is_one_line_saying_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], builder: str, text: str, command: str
) -> None:
    (tmp_path / "user.py").write_text(_MODELS_NNSWEEP_CANNOT_TAKE)
    cache = tmp_path / "cache"
    args = ["--cache-dir", str(cache), command, "--model", f"{tmp_path}/user.py:{builder}", "--runtime", "onnxruntime"]
    assert main([*args, "--quant", "static_int8"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nnsweep: error: --model:") and text in lines[0], lines
    assert not cache.exists() or not any(cache.rglob("*.onnx"))


def test_a_torchvision_model_given_too_small_an_input_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # VGG's five poolings take 16x16 to nothing; before, the BatchNorm recalibration met it
    # first: "nnsweep: error: RuntimeError: ... Output size is too small", exit 1
    args = ["--cache-dir", str(tmp_path / "cache"), "bench", "--model", "torchvision:vgg11_bn"]
    assert main([*args, "--input-shape", "1,3,16,16", "--runtime", "onnxruntime"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "torchvision:vgg11_bn fails on its example input of shape (1, 3, 16, 16)" in lines[0]


@pytest.mark.parametrize(
    ("machine", "flags", "quant", "options", "hinted"),
    [
        ("x86_64", "fma avx2", "static_int8", {}, True),  # AVX2 only: ORT's u8s8 kernels saturate
        ("x86_64", "avx2 avx512_vnni", "static_int8", {}, False),
        ("x86_64", "avx2 avx_vnni", "static_int8", {}, False),
        ("x86_64", "fma avx2", "static_int8", {"reduce_range": True}, False),  # the advice taken
        ("x86_64", "fma avx2", "static_int8", {"weight_type": "uint8"}, False),  # u8u8 does not saturate
        ("x86_64", "fma avx2", "dynamic_int8", {}, True),  # a transformer encoder: 5.3 dB, 36.1 with reduce_range
        ("x86_64", "fma avx2", "dynamic_int8", {"reduce_range": True}, False),
        ("x86_64", "fma avx2", "fp32", {}, False),
        ("aarch64", "fp asimd", "static_int8", {}, False),
    ],
)
def test_bench_notes_the_saturating_int8_kernels_of_an_x86_cpu_without_vnni(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, machine: str, flags: str, quant: str, options: dict, hinted: bool
) -> None:
    import platform

    from nnsweep.cli._bench_notes import saturation_hint
    from nnsweep.core.config import DeploymentConfig, QuantConfig

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
    monkeypatch.setattr(platform, "machine", lambda: machine)
    config = DeploymentConfig("onnxruntime", quant=QuantConfig(quant, options=options))
    hint = saturation_hint(config, cpuinfo)
    assert (hint is not None) == hinted
    assert hint is None or "--reduce-range true" in hint
    torch_config = DeploymentConfig("torch", quant=QuantConfig("static_int8"))
    assert saturation_hint(torch_config, cpuinfo) is None
    assert saturation_hint(config, tmp_path / "absent") is None


def test_a_command_nnsweep_suggests_quotes_a_path_with_spaces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # before: "run `nnsweep run /…/my sweeps/s.yaml` first", which pastes as two arguments
    from nnsweep.cli.run import _results_text
    from nnsweep.spec import load_spec

    folder = tmp_path / "my sweeps"
    folder.mkdir()
    spec_file = folder / "s.yaml"
    spec_file.write_text("name: spaced\nmodel: digits\nspace: {runtime: [onnxruntime], quant: [fp32]}\n")
    assert main(["--cache-dir", str(tmp_path / "cache"), "report", str(spec_file)]) == 2
    assert f"run `nnsweep run '{spec_file}'` first" in capsys.readouterr().err
    assert _results_text(load_spec(spec_file), [], tracking=True).endswith(f"`nnsweep ui '{spec_file}'`")


@pytest.mark.parametrize(
    ("quant", "said"),
    [
        (
            {"mode": "static_int8", "float_layers": ["body.0", "nope.layer"]},
            "--config: quant.float_layers: 'nope.layer': no module of tiny.py:build has that path "
            "(`nnsweep sensitivity --model tiny.py:build --runtime onnxruntime` lists its layers)",
        ),
        ({"mode": "fp32", "float_layers": ["body.0"]}, "--config: quant.float_layers: keeps layers of an int8 or"),
    ],
)
def test_a_config_file_s_float_layers_are_checked_before_anything_is_converted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], quant: dict[str, object], said: str
) -> None:
    """A name of no module (a typo in a --config) was found by the converter: exit 1,
    "failed", after the model was loaded and its conversion begun; float layers under fp32
    were dropped without a word."""
    (tmp_path / "tiny.py").write_text(
        "import torch\n"
        "class Tiny(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.body = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))\n"
        "    def forward(self, x):\n"
        "        return self.body(x)\n"
        "def build():\n"
        "    return Tiny().eval(), torch.randn(1, 8)\n"
    )
    config = {"runtime": "onnxruntime", "backends": ["cpu"], "quant": quant}
    (tmp_path / "c.json").write_text(json.dumps({"config": config}))
    cache = tmp_path / "cache"
    model = str(tmp_path / "tiny.py") + ":build"
    code = main(["--cache-dir", str(cache), "bench", "--model", model, "--config", str(tmp_path / "c.json")])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert said.replace("tiny.py:build", model) in err
    artifacts = cache / "artifacts"
    assert not artifacts.exists() or not any(artifacts.rglob("*.onnx")), "nothing converted"


class _NoSweep:
    """What replaces the sweep: it takes the spec and runs nothing (no device, no trial)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def run(self) -> list[object]:
        return []

    def stop(self) -> None:
        pass


@pytest.mark.parametrize("tracking", [True, False])
def test_run_names_the_mlflow_store_only_when_it_tracks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tracking: bool
) -> None:
    # before: `--no-tracking` still printed "MLflow: sqlite:///mlflow.db", a database it never wrote
    import nnsweep.cli._report_file
    import nnsweep.sweep.loop

    monkeypatch.setattr(nnsweep.sweep.loop, "Sweep", _NoSweep)
    monkeypatch.setattr(nnsweep.cli._report_file, "_publish_report", lambda *a, **k: Path("report.html"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text("name: quiet\nmodel: digits\nspace: {runtime: [onnxruntime], quant: [fp32]}\n")
    options = [] if tracking else ["--no-tracking"]
    assert main(["--cache-dir", str(tmp_path / "cache"), "run", "s.yaml", "--executor", "local", *options]) == 0
    out = capsys.readouterr().out
    assert "Report: report.html" in out
    assert ("MLflow: sqlite:///mlflow.db (experiment 'quiet')" in out) is tracking
    assert ("MLflow" in out) is tracking
