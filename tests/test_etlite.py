"""The torch-free ExecuTorch runner (device_agents/etlite) against ExecuTorch's Python runtime.

Built here from the executorch package this environment has (no download), it runs the
same .pte files a lite board runs and must give the same outputs, bit for bit.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from nnsweep.artifacts import deploy
from nnsweep.core.config import DeploymentConfig, QuantConfig
from nnsweep.runtimes.executorch import etlite as _etlite
from nnsweep.runtimes.executorch.runner import ExecuTorchRunner

REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "device_agents" / "etlite" / "build.sh"


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory, monkeypatch_module: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    if shutil.which("g++") is None:
        pytest.skip("needs g++ to build the torch-free runner")
    dest = tmp_path_factory.mktemp("etlite")
    subprocess.run(["bash", str(BUILD), sys.executable, str(dest)], check=True, capture_output=True, timeout=600)
    monkeypatch_module.setenv(_etlite.ENV_DIR, str(dest))
    found = _etlite.find()
    lib = found.load()
    _etlite.set_threads(lib, 1)
    return found, lib


@pytest.fixture(scope="module")
def monkeypatch_module():  # type: ignore[no-untyped-def]
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.mark.slow
@pytest.mark.parametrize(
    "config",
    [
        DeploymentConfig("executorch", ("xnnpack",)),
        DeploymentConfig("executorch", ("xnnpack",), QuantConfig("static_int8")),
        DeploymentConfig("executorch", ("portable",)),
    ],
    ids=["fp32-xnnpack", "int8-xnnpack", "fp32-portable"],
)
def test_torch_free_runner_matches_executorch_bit_for_bit(library, digits, tmp_path: Path, config) -> None:  # type: ignore[no-untyped-def]
    from importlib import metadata

    from nnsweep.artifacts.cache import ArtifactCache

    found, lib = library
    assert found.version == metadata.version("executorch")  # the host's release: no skew
    assert "XnnpackBackend" in _etlite.backends(lib)
    artifact, _ = deploy.convert(digits, config, ArtifactCache(tmp_path))
    inputs = digits.dataset.evaluation.inputs[:32]
    pybindings = ExecuTorchRunner(artifact.path, artifact.io, 1, config.backends)
    pybindings.load()
    program = _etlite.EtLiteProgram(lib, artifact.path)
    try:
        for x in inputs:
            want = pybindings.to_float(pybindings.run(pybindings.prepare(x[None])))
            got = program([artifact.io.prepare_input(x[None])])
            np.testing.assert_array_equal(pybindings.to_float([torch.from_numpy(np.array(g)) for g in got]), want)
    finally:
        program.close()
