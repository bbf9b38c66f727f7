"""Warm measuring workers: a child forked per measurement from a worker with the runtime
imported keeps what a fresh process gives (its own peak memory, threads set before the
runtime loads, a crash fails only that measurement) with real ONNX Runtime and ExecuTorch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from nnsweep.bench import MeasureSettings
from nnsweep.bench._isolated import measure_in_subprocess
from nnsweep.bench._machine_lock import MachineLock
from nnsweep.bench._warm import WarmWorker
from nnsweep.core.artifact import IOSpec
from nnsweep.core.errors import BenchmarkError

SETTINGS = MeasureSettings(warmup=1, iters=20)


@pytest.fixture(scope="module")
def onnx_model(tmp_path_factory: pytest.TempPathFactory, tiny_onnx) -> Path:  # type: ignore[no-untyped-def]
    """A 4 -> 3 linear layer: enough for ONNX Runtime to load and run."""
    w = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    path = tmp_path_factory.mktemp("onnx") / "tiny.onnx"
    path.write_bytes(tiny_onnx(w))
    return path


@pytest.fixture
def worker():  # type: ignore[no-untyped-def]
    w = WarmWorker("onnxruntime")
    yield w
    w.close()


def _measure(path: Path, lock: MachineLock, worker: WarmWorker | None, settings: MeasureSettings = SETTINGS):  # type: ignore[no-untyped-def]
    inputs = np.random.default_rng(0).random((8, 4), dtype=np.float32)
    return measure_in_subprocess(
        runtime="onnxruntime",
        artifact=path,
        io=IOSpec(),
        threads=1,
        backends=("cpu",),
        inputs=inputs,
        settings=settings,
        worker=worker,
        lock=lock,
    )


def test_a_forked_measurement_matches_a_fresh_one(onnx_model: Path, tmp_path: Path, worker: WarmWorker) -> None:
    lock = MachineLock(tmp_path / "m.lock")
    fresh, fresh_out = _measure(onnx_model, lock, None)
    forked, forked_out = _measure(onnx_model, lock, worker)
    again, _ = _measure(onnx_model, lock, worker)
    assert (fresh.isolation, forked.isolation, again.isolation) == ("fresh", "fork", "fork")
    np.testing.assert_array_equal(fresh_out, forked_out)
    assert forked.latency.count == again.latency.count == SETTINGS.iters
    # The child's peak is its own address space's: at least what it had before loading,
    # never more than a fresh process's (pages it shares but never touches are not its own).
    assert forked.rss_before_load_mb <= forked.peak_rss_mb <= fresh.peak_rss_mb + 5
    assert forked.parent_rss_mb is not None and forked.parent_rss_mb > 0
    assert set(again.phases_ms) >= {"lock_wait", "start", "import", "load", "warmup", "timed", "outputs", "total"}
    assert again.phases_ms["total"] >= again.phases_ms["timed"]
    assert again.held_monotonic is not None and again.held_monotonic[0] < again.held_monotonic[1]
    assert forked.held_monotonic is not None and forked.held_monotonic[1] <= again.held_monotonic[0]


def test_a_crash_fails_only_that_measurement(onnx_model: Path, tmp_path: Path, worker: WarmWorker) -> None:
    lock = MachineLock(tmp_path / "m.lock")
    _measure(onnx_model, lock, worker)  # the worker is up
    assert worker._proc is not None
    zygote = worker._proc.pid
    errors: list[BaseException] = []

    def long_measurement() -> None:
        try:
            _measure(onnx_model, lock, worker, MeasureSettings(warmup=1, iters=20, min_duration_s=60))
        except BaseException as exc:  # handed to the test's thread
            errors.append(exc)

    thread = threading.Thread(target=long_measurement)
    thread.start()
    children = Path(f"/proc/{zygote}/task/{zygote}/children")
    deadline = time.monotonic() + 30
    while not children.read_text().split() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(int(children.read_text().split()[0]), signal.SIGSEGV)  # as a runtime that crashes
    thread.join(timeout=60)
    assert len(errors) == 1 and isinstance(errors[0], BenchmarkError) and "SIGSEGV" in str(errors[0])
    timing, _ = _measure(onnx_model, lock, worker)  # the same worker measures the next one
    assert timing.isolation == "fork" and worker._proc.pid == zygote


def test_a_timeout_kills_the_child_and_the_worker_goes_on(onnx_model: Path, tmp_path: Path, worker: WarmWorker) -> None:
    lock = MachineLock(tmp_path / "m.lock")
    with pytest.raises(BenchmarkError, match="timed out"):
        _measure(onnx_model, lock, worker, MeasureSettings(warmup=1, iters=20, min_duration_s=60, timeout_s=2))
    assert _measure(onnx_model, lock, worker)[0].isolation == "fork"


def test_a_worker_that_died_idle_is_restarted(onnx_model: Path, tmp_path: Path, worker: WarmWorker) -> None:
    lock = MachineLock(tmp_path / "m.lock")
    _measure(onnx_model, lock, worker)
    assert worker._proc is not None
    first = worker._proc.pid
    os.killpg(first, signal.SIGKILL)
    worker._proc.wait()
    assert _measure(onnx_model, lock, worker)[0].isolation == "fork" and worker._proc.pid != first


def test_a_worker_dying_mid_measurement_falls_back_to_a_fresh_process(
    onnx_model: Path, tmp_path: Path, worker: WarmWorker
) -> None:
    lock = MachineLock(tmp_path / "m.lock")
    _measure(onnx_model, lock, worker)
    assert worker._proc is not None
    zygote = worker._proc.pid
    results: list[str] = []
    settings = MeasureSettings(warmup=1, iters=20, min_duration_s=2)
    thread = threading.Thread(target=lambda: results.append(_measure(onnx_model, lock, worker, settings)[0].isolation))
    thread.start()
    children = Path(f"/proc/{zygote}/task/{zygote}/children")
    deadline = time.monotonic() + 30
    while not children.read_text().split() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(zygote, signal.SIGKILL)  # the worker alone: its child is stopped by the client
    thread.join(timeout=120)
    assert results == ["fresh"]


_CLIENT = """
import sys, time
from nnsweep.bench._warm import WarmWorker
w = WarmWorker("onnxruntime")
w.start()
print(w.ready["pid"], flush=True)
time.sleep(600)
"""


def test_the_worker_ends_when_its_client_is_killed() -> None:
    with subprocess.Popen([sys.executable, "-c", _CLIENT], stdout=subprocess.PIPE, text=True) as client:
        assert client.stdout is not None
        zygote = int(client.stdout.readline())
        client.kill()  # SIGKILL: no clean-up code runs; the worker sees its input close
    deadline = time.monotonic() + 30
    while _alive(zygote) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(zygote)


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in status  # a zombie has ended; its reaper may be slow


def test_the_machine_lock_is_held_while_the_child_measures(
    onnx_model: Path, tmp_path: Path, worker: WarmWorker
) -> None:
    path = tmp_path / "m.lock"
    lock = MachineLock(path)
    results: list[float] = []

    def measure() -> None:
        results.append(_measure(onnx_model, lock, worker, MeasureSettings(warmup=1, iters=20))[0].lock_wait_ms)

    with lock.hold("the test"):
        thread = threading.Thread(target=measure)
        thread.start()
        time.sleep(0.5)
        assert thread.is_alive()  # it waits for the lock
    thread.join(timeout=120)
    assert results and results[0] >= 400


@pytest.mark.slow
def test_executorch_threads_are_set_in_each_child_before_loading(digits, cache, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from nnsweep.artifacts import deploy
    from nnsweep.core.config import DeploymentConfig

    artifact, _ = deploy.convert(digits, DeploymentConfig("executorch", ("xnnpack", "portable")), cache)
    worker = WarmWorker("executorch")
    lock = MachineLock(tmp_path / "m.lock")
    try:
        # One threadpool size per child, from one worker that never sized it: changing the
        # size after a program is loaded would segfault (docs/explanation/measurement.md).
        for threads in (1, 2, 1):
            timing, outputs = measure_in_subprocess(
                runtime="executorch",
                artifact=artifact.path,
                io=artifact.io,
                threads=threads,
                backends=artifact.config.backends,
                inputs=digits.dataset.evaluation.inputs[:16],
                settings=SETTINGS,
                worker=worker,
                lock=lock,
            )
            assert timing.isolation == "fork" and timing.threads == threads and outputs.shape[0] == 16
    finally:
        worker.close()


def test_a_worker_that_cannot_start_is_not_retried_and_a_fresh_process_measures(
    onnx_model: Path, tmp_path: Path
) -> None:
    broken = WarmWorker("no-such-runtime")  # it cannot start, as a runtime missing here
    lock = MachineLock(tmp_path / "m.lock")
    try:
        assert _measure(onnx_model, lock, broken)[0].isolation == "fresh"
        assert "no-such-runtime" in broken.broken and not broken.running
        assert _measure(onnx_model, lock, broken)[0].isolation == "fresh"
    finally:
        broken.close()


def test_the_worker_reports_a_failed_import_instead_of_ready() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "nnsweep.bench._zygote", "no-such-runtime"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    reply = json.loads(proc.stdout.splitlines()[0])
    assert proc.returncode == 1 and reply["ready"] is False and "no-such-runtime" in reply["error"]


def test_a_warm_worker_preloads_executorchs_python_runtime_only_where_torch_is(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import importlib.util

    from nnsweep.bench import _zygote

    assert _zygote._preload("executorch") == (
        "torch",
        "executorch.kernels.quantized",
        "executorch.extension.pybindings._C",
    )
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    assert _zygote._preload("executorch") == ()  # a lite board: the torch-free runner, nothing to preload
    assert _zygote._preload("onnxruntime") == ()


def test_executorchs_runner_loads_the_runtime_without_its_compiler() -> None:
    """A fresh measuring process imports ExecuTorch's C++ bindings, not ``executorch.exir``
    (which ``executorch.runtime`` drags in: seconds of every re-measurement)."""
    code = (
        "import sys; from nnsweep.runtimes.executorch.runner import ExecuTorchRunner, bindings\n"
        "ExecuTorchRunner.set_threads(1)\n"
        "print(sorted(bindings()._get_registered_backend_names()), 'executorch.exir' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    backends, compiler = proc.stdout.rsplit(" ", 1)
    assert "XnnpackBackend" in backends and compiler.strip() == "False"
