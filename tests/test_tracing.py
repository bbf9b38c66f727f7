"""A ranking and a conversion in two threads of one process (a sweep on the local executor
ranks on its loop while its worker thread converts): each traces the model in turn."""

from __future__ import annotations

import threading
from pathlib import Path

from nnsweep.artifacts import deploy
from nnsweep.artifacts.cache import ArtifactCache
from nnsweep.core.config import DeploymentConfig
from nnsweep.core.quant import QuantConfig, QuantMode
from nnsweep.core.tracing import TRACING
from nnsweep.sensitivity import ranking as ranking_module


def test_no_other_thread_traces_while_a_ranking_runs(digits, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    seen: list[bool] = []
    real = ranking_module.evaluator

    def watched(*args, **kwargs):  # type: ignore[no-untyped-def]
        other = threading.Thread(target=lambda: seen.append(TRACING.acquire(blocking=False)))
        other.start()
        other.join()
        return real(*args, **kwargs)

    monkeypatch.setattr(ranking_module, "evaluator", watched)
    report, _ = ranking_module.ranking(digits, "onnxruntime", None, tmp_path)
    assert report.layers and seen == [False]


def test_a_ranking_and_conversions_on_two_threads_both_finish(digits, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    failures: list[BaseException] = []
    cache = ArtifactCache(tmp_path / "cache")

    def convert_all() -> None:
        for mode in (QuantMode.FP32, QuantMode.DYNAMIC_INT8, QuantMode.STATIC_INT8):
            config = DeploymentConfig(runtime="onnxruntime", quant=QuantConfig(mode=mode))
            try:
                deploy.convert(digits, config, cache)
            except BaseException as exc:  # the test's verdict, below
                failures.append(exc)

    reports: list[object] = []

    def rank() -> None:
        try:
            reports.append(ranking_module.ranking(digits, "onnxruntime", None, tmp_path / "rank")[0])
        except BaseException as exc:  # the test's verdict, below
            failures.append(exc)

    threads = [threading.Thread(target=convert_all, daemon=True), threading.Thread(target=rank, daemon=True)]
    for thread in threads:
        thread.start()
    for thread in threads:  # tracing at once fails, or hangs: minutes here mean it hung
        thread.join(timeout=300)
    assert not any(thread.is_alive() for thread in threads), "a ranking and a conversion hung each other"
    assert failures == [] and len(reports) == 1
