"""Every Tracker, built-in Converter and built-in Runner through the same checks: what the
coordinator and the measuring process rely on, whatever implementation they are given.

Converters convert the digits model in fp32 with the runtime's default backends (once per
runtime for the module); a runtime whose toolchain does not load here is skipped. A runner
runs in this process, or under the runtime's own interpreter (``RuntimeInfo.python``) as
its measurements do.
"""

from __future__ import annotations

import inspect
import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakes.tracking import RecordingTracker

from nnsweep.bench import Runner
from nnsweep.bench._foreign import python_command
from nnsweep.convert import ConversionResult, Converter
from nnsweep.core import runtimes
from nnsweep.core.artifact import IOSpec
from nnsweep.core.config import DeploymentConfig
from nnsweep.core.metrics import ACCURACY, LATENCY_P50, low, remeasured
from nnsweep.core.results import TrialRecord, TrialStatus
from nnsweep.tracking import BackgroundTracker, MlflowTracker, NullTracker, Tracker

# ---------------------------------------------------------------------------- trackers

CONFIG = DeploymentConfig("onnxruntime", ("cpu",))
TRACKERS = ("null", "background around a recording fake", "mlflow", "background around mlflow")
RECORDS = {"null": False}  # whether logged() and trial_links() reflect the trials (default: yes)


def _make(kind: str, uri: str, experiment: str) -> Any:
    if kind == "null":
        return NullTracker()
    if kind == "background around a recording fake":
        return BackgroundTracker(RecordingTracker())
    mlflow = MlflowTracker(uri, experiment, "sweep")
    return mlflow if kind == "mlflow" else BackgroundTracker(mlflow)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One MLflow database for the module (making one takes seconds); an experiment per test."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


@pytest.fixture(params=TRACKERS)
def tracker(request: pytest.FixtureRequest, store: str) -> Iterator[Any]:
    made = _make(request.param, store, request.node.name)
    yield made
    if hasattr(made, "close"):  # a background tracker's thread
        made.close()


def _record(number: int, status: TrialStatus = TrialStatus.OK) -> TrialRecord:
    metrics = {ACCURACY: 0.97, LATENCY_P50: 0.5} if status is TrialStatus.OK else {}
    reason = None if status is TrialStatus.OK else "conversion failed: no kernel for it"
    return TrialRecord("sweep", "host", number, CONFIG, status, metrics=metrics, reason=reason)


def _records(request: pytest.FixtureRequest) -> bool:
    return RECORDS.get(request.node.callspec.params["tracker"], True)


@pytest.mark.parametrize("kind", TRACKERS)
def test_a_tracker_has_every_method_of_the_contract(kind: str, store: str) -> None:
    made = _make(kind, store, "signatures")
    try:
        for name, method in inspect.getmembers(Tracker, inspect.isfunction):
            if name.startswith("_"):
                continue
            theirs = getattr(made, name, None)
            assert callable(theirs), f"{kind} has no {name}"
            expected = list(inspect.signature(method).parameters)[1:]
            assert list(inspect.signature(theirs).parameters) == expected, f"{kind}.{name}'s parameters"
    finally:
        if hasattr(made, "close"):
            made.close()


def test_a_tracker_takes_a_device_through_the_documented_order(
    tracker: Any, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    records = _records(request)
    tracker.bind("generation-1")
    tracker.open_device("host", {"arch": "x86_64", "runtimes": "onnxruntime"})
    tracker.quiet(True)  # the machine measures: writes may wait, and are not lost
    tracker.start_trial("host", 0, CONFIG)
    tracker.finish_trial(_record(0))
    tracker.quiet(False)
    tracker.start_trial("host", 1, CONFIG)
    tracker.finish_trial(_record(1, TrialStatus.FAILED))
    expected = {0: TrialStatus.OK, 1: TrialStatus.FAILED} if records else {}
    assert tracker.logged("host") == expected
    figures = {remeasured(LATENCY_P50): 0.48, low(LATENCY_P50): 0.47}
    tracker.mark_front("host", [0], 0, remeasured={0: figures}, summary={f"best_{LATENCY_P50}": 0.48})
    report = tmp_path / "report.html"
    report.write_text("<html></html>")
    tracker.log_device_artifact("host", "report.html", report)
    tracker.log_trial_artifact("host", 0, "profile.json", report)
    tracker.log_trial_artifact("host", 42, "profile.json", report)  # a trial it never logged: nothing happens
    tracker.close_device("host")
    assert tracker.logged("host") == expected  # closing a device keeps its record
    links = tracker.trial_links("host")
    assert set(links) == (set(expected) if records else set()) and all(isinstance(v, str) for v in links.values())
    assert tracker.attach_device("host") is records
    assert tracker.attach_device("elsewhere") is False
    assert tracker.logged("elsewhere") == {}


def test_a_disowned_trial_is_no_longer_logged(tracker: Any, request: pytest.FixtureRequest) -> None:
    tracker.bind("generation-1")
    tracker.open_device("host", {"arch": "x86_64"})
    for number in (0, 1):
        tracker.start_trial("host", number, CONFIG)
        tracker.finish_trial(_record(number))
    tracker.disown_trial("host", 1)
    tracker.disown_trial("host", 7)  # a trial it has no record of: nothing happens
    assert tracker.logged("host") == ({0: TrialStatus.OK} if _records(request) else {})
    tracker.close_device("host")


# ---------------------------------------------------------------------------- converters and runners

BUILTIN = tuple(n for n in runtimes.listed_names() if runtimes.get(n).converter.startswith("nnsweep.runtimes."))


def _config(name: str) -> DeploymentConfig:
    return DeploymentConfig(name, runtimes.get(name).default_backends)


@pytest.fixture(scope="module")
def converted(digits, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], tuple[Path, ConversionResult]]:  # type: ignore[no-untyped-def]
    """Runtime name -> (its output directory, its converter's result on digits in fp32)."""
    done: dict[str, tuple[Path, ConversionResult]] = {}

    def convert(name: str) -> tuple[Path, ConversionResult]:
        if name not in done:
            info = runtimes.get(name)
            if runtimes.probe(info, {}) is None:
                pytest.skip(f"{name} does not load on this machine")
            try:
                converter = runtimes.load_object(info.converter)()
            except ImportError as exc:
                pytest.skip(f"{name}'s converter does not import here: {exc}")
            assert isinstance(converter, Converter)
            out = tmp_path_factory.mktemp(name)
            done[name] = out, converter.convert(digits, _config(name), out)
        return done[name]

    return convert


def test_the_builtin_runtimes_are_all_checked() -> None:
    assert set(BUILTIN) == {"executorch", "onnxruntime", "torch", "litert", "armnn"}


@pytest.mark.parametrize("name", BUILTIN)
def test_a_converter_writes_the_artifact_its_result_describes(name: str, converted) -> None:  # type: ignore[no-untyped-def]
    out, result = converted(name)
    assert isinstance(result, ConversionResult)
    artifact = out / result.filename
    assert artifact.is_file() and artifact.stat().st_size > 0
    assert artifact.resolve().parent == out.resolve()  # inside the directory it was given
    assert artifact.suffix == runtimes.get(name).artifact_suffix
    for sidecar in result.sidecars.values():
        assert (out / sidecar).is_file()
    assert result.io.input_scale is None and result.io.output_scale is None  # fp32 takes and returns float


@pytest.mark.parametrize("name", BUILTIN)
def test_a_converters_partition_report_adds_up(name: str, converted) -> None:  # type: ignore[no-untyped-def]
    report = converted(name)[1].partitions
    config = _config(name)
    assert report.backends == config.backends
    assert report.nodes_by_backend and all(n > 0 for n in report.nodes_by_backend.values())
    assert report.count == len(report.partitions)
    assert report.sizes == sorted(report.sizes, reverse=True)  # largest first
    for backend in {p.backend for p in report.partitions}:
        assert backend in config.backends
        delegated = sum(p.nodes for p in report.partitions if p.backend == backend)
        assert delegated <= report.nodes_by_backend[backend]
    assert all(n > 0 for n in report.fallback_ops.values())
    assert type(report).from_dict(report.to_dict()) == report


# The runner contract in the process that measures: load once, then prepare, run and
# to_float per input; prints each output row's dtype and shape, saves the rows.
_RUN = """
import json, sys
import numpy as np
from nnsweep.core.artifact import IOSpec
from nnsweep.core.runtimes import load_object
reference, path, io, backends, inputs, saved = sys.argv[1:]
runner = load_object(reference)(path, IOSpec.from_dict(json.loads(io)), 1, tuple(json.loads(backends)))
runner.load()
rows = [runner.to_float(runner.run(runner.prepare(x[None]))) for x in np.load(inputs)]
np.save(saved, np.stack(rows))
print(json.dumps({"rows": [[str(r.dtype), list(r.shape)] for r in rows], "placement": runner.placement()}))
"""


def _run_contract(name: str, artifact: Path, io: IOSpec, inputs: np.ndarray, tmp: Path) -> tuple[list[Any], Any]:
    """(each output row as to_float returned it, placement()), under the runtime's own interpreter."""
    info = runtimes.get(name)
    np.save(tmp / "inputs.npy", inputs)
    with python_command(info.python, "nnsweep") as (argv, env):
        args = [info.runner, str(artifact), json.dumps(io.to_dict()), json.dumps(_config(name).backends)]
        command = [*argv[:-2], "-c", _RUN, *args, str(tmp / "inputs.npy"), str(tmp / "rows.npy")]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    rows = np.load(tmp / "rows.npy")
    assert [[str(r.dtype), list(r.shape)] for r in rows] == said["rows"]
    return [r for r in rows], said["placement"]


@pytest.mark.parametrize("name", BUILTIN)
def test_a_runner_returns_the_float_models_outputs_one_row_per_input(
    name: str, converted, digits, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    import torch

    info = runtimes.get(name)
    out, result = converted(name)
    inputs = digits.dataset.evaluation.inputs[:3]
    if info.python is None:  # this environment's runtime: in this process
        runner = runtimes.load_object(info.runner)(out / result.filename, result.io, 1, _config(name).backends)
        assert isinstance(runner, Runner)
        runner.load()
        rows = [runner.to_float(runner.run(runner.prepare(x[None]))) for x in inputs]
        placement = runner.placement()
    else:  # one outside it (RuntimeInfo.python): under its interpreter, as its measurements are
        rows, placement = _run_contract(name, out / result.filename, result.io, inputs, tmp_path)
    with torch.no_grad():
        expected = digits.module(torch.from_numpy(inputs)).numpy()
    for row, want in zip(rows, expected, strict=True):
        assert row.dtype == np.float32 and row.shape == (1, *want.shape)
        np.testing.assert_allclose(row[0], want, rtol=1e-3, atol=1e-3)
    assert placement is None or set(placement) == set(result.partitions.to_dict())
