"""Shared fixtures: everything lives in tmp_path; the trained digits weights are
shared by the whole session so digits trains once per test run."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def digits(models_dir: Path):  # type: ignore[no-untyped-def]
    from nnsweep.models import load_model

    return load_model("digits", cache_dir=models_dir)


@pytest.fixture(scope="session")
def digits_gn(models_dir: Path):  # type: ignore[no-untyped-def]
    from nnsweep.models import load_model

    return load_model("digits_gn", cache_dir=models_dir)


@pytest.fixture
def cache(tmp_path: Path):  # type: ignore[no-untyped-def]
    from nnsweep.artifacts.cache import ArtifactCache

    return ArtifactCache(tmp_path / "cache")


@pytest.fixture(scope="session")
def tiny_onnx():  # type: ignore[no-untyped-def]
    """Makes a 4 -> 3 MatMul ONNX model with the given (4, 3) weights, as bytes: enough for
    ONNX Runtime to load and run, and cheap enough for tests of the measuring machinery."""

    def make(weights):  # type: ignore[no-untyped-def]
        from onnx import TensorProto, helper, numpy_helper

        graph = helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["y"])],
            "tiny",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
            [numpy_helper.from_array(weights, "w")],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        return bytes(model.SerializeToString())

    return make


@pytest.fixture(scope="session")
def ray_token(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One Ray token for every cluster of the test session (0600 once written): a Ray client
    reads its token once per process, and the test process is a client of each cluster."""
    return tmp_path_factory.mktemp("ray") / "auth_token"
