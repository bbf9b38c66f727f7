"""The conversion worker's warm-up: the model and the converters loaded before the first conversion."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from nnsweep.core.config import DeploymentConfig
from nnsweep.execution import ConvertRequest, ModelSource
from nnsweep.execution._converter import ConverterWorker


def test_a_warmed_worker_converts_with_the_model_it_loaded(tmp_path: Path) -> None:
    worker = ConverterWorker()
    source = ModelSource("digits", tmp_path)
    worker.warm(source, ["onnxruntime", "no-such-runtime"], ship=False)  # an unknown runtime is skipped
    loaded = worker._bundles[source]
    assert "nnsweep.runtimes.onnxruntime.converter" in sys.modules
    artifact, hit = worker.convert_here(ConvertRequest(source, DeploymentConfig("onnxruntime", ("cpu",))))
    assert worker._bundles[source] is loaded and not hit and artifact.path.exists()


def test_a_model_that_cannot_load_is_left_for_the_conversion_to_report(tmp_path: Path) -> None:
    worker = ConverterWorker()
    worker.warm(ModelSource(str(tmp_path / "missing.pt"), tmp_path), ["onnxruntime"], ship=False)
    assert worker._bundles == {}


def test_a_worker_imports_the_converters_before_any_model_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from nnsweep.core import runtimes as registry

    loaded: list[str] = []
    monkeypatch.setattr(registry, "load_object", lambda path: loaded.append(path))
    worker = ConverterWorker()
    worker.import_converters(["onnxruntime", "no-such-runtime", "executorch"])  # an unknown runtime is skipped
    assert loaded == [registry.get("onnxruntime").converter, registry.get("executorch").converter]
    assert worker._bundles == {}
