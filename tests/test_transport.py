"""The local transport: measurements forked from a warm worker per runtime, under the
machine's measurement lock; it travels to a Ray actor without its worker processes."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import numpy as np
import pytest

from nnsweep.agents import LocalTransport, MeasureReply, MeasureRequest
from nnsweep.bench import MachineLock, MeasureSettings
from nnsweep.core.artifact import IOSpec


@pytest.fixture(scope="module")
def onnx_bytes(tiny_onnx) -> bytes:  # type: ignore[no-untyped-def]
    return bytes(tiny_onnx(np.ones((4, 3), dtype=np.float32)))


def _request(onnx_bytes: bytes) -> MeasureRequest:
    return MeasureRequest(
        runtime="onnxruntime",
        artifact_name="tiny.onnx",
        artifact_bytes=onnx_bytes,
        io=IOSpec(),
        threads=1,
        backends=("cpu",),
        inputs=np.ones((3, 4), dtype=np.float32),
        settings=MeasureSettings(warmup=1, iters=10),
    )


def test_request_and_reply_keep_their_fields() -> None:
    assert [f.name for f in dataclasses.fields(MeasureRequest)][:8] == [
        "runtime", "artifact_name", "artifact_bytes", "io", "threads", "backends", "inputs", "settings"
    ]  # fmt: skip
    assert [f.name for f in dataclasses.fields(MeasureReply)][:2] == ["timing", "outputs"]


def test_measurements_fork_from_one_warm_worker(onnx_bytes: bytes, tmp_path: Path) -> None:
    transport = LocalTransport(lock=MachineLock(tmp_path / "m.lock"))
    try:
        first = transport.measure(_request(onnx_bytes))
        worker = transport.worker("onnxruntime")
        assert worker is not None and worker.running
        pid = worker.ready["pid"]
        second = transport.measure(_request(onnx_bytes))
        assert (first.timing.isolation, second.timing.isolation) == ("fork", "fork")
        assert worker.ready["pid"] == pid  # the same worker
        np.testing.assert_allclose(second.outputs, np.full((3, 3), 4.0))  # type: ignore[arg-type]
        assert second.timing.lock_wait_ms >= 0 and "lock_wait" in second.timing.phases_ms
    finally:
        transport.close()
    assert not worker.running


def test_not_warm_means_a_fresh_process(onnx_bytes: bytes, tmp_path: Path) -> None:
    transport = LocalTransport(warm=False, lock=MachineLock(tmp_path / "m.lock"))
    assert transport.measure(_request(onnx_bytes)).timing.isolation == "fresh"
    assert transport.worker("onnxruntime") is None


def test_it_pickles_without_its_workers(onnx_bytes: bytes, tmp_path: Path) -> None:
    transport = LocalTransport("box", lock=MachineLock(tmp_path / "m.lock"))
    try:
        transport.measure(_request(onnx_bytes))
        copy = pickle.loads(pickle.dumps(transport))
        assert copy.machine == "box" and copy.warm and copy._workers == {}
        assert copy.lock.path == tmp_path / "m.lock"
    finally:
        transport.close()


def test_prepare_starts_the_warm_workers_before_the_first_measurement() -> None:
    transport = LocalTransport()
    try:
        transport.prepare(["onnxruntime", "no-such-runtime"])
        assert transport._workers["onnxruntime"].running  # imported now, not inside a measurement
        assert transport._workers["no-such-runtime"].broken  # left to the fresh-process fallback
    finally:
        transport.close()


def test_closing_stops_a_worker_added_meanwhile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A sweep that stops on an error closes its transport while the thread starting the warm
    # workers may still add one: iterating the dict raised "dictionary changed size during
    # iteration", over the sweep's own error.
    from nnsweep.bench._warm import WarmWorker

    transport = LocalTransport(lock=MachineLock(tmp_path / "m.lock"))
    closed: list[str] = []

    def close(worker: WarmWorker) -> None:
        closed.append(worker.runtime)
        if worker.runtime == "onnxruntime" and "torch" not in transport._workers:
            transport.worker("torch")  # added while the first one closes

    monkeypatch.setattr(WarmWorker, "close", close)
    transport.worker("onnxruntime")
    transport.close()
    assert set(closed) == {"onnxruntime", "torch"} and transport._workers == {}  # (close may run again at exit)
