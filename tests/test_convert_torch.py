"""Real PyTorch (TorchScript + quantized engine) conversions of digits."""

from __future__ import annotations

import pytest

from nnsweep import deploy
from nnsweep.bench import evaluate
from nnsweep.bench._harness import run_all
from nnsweep.bench.runners.torch import TorchScriptRunner, pick_engine
from nnsweep.config import Calibration, DeploymentConfig, Granularity, Interface, QuantConfig


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from nnsweep.artifacts import ArtifactCache

    return ArtifactCache(tmp_path_factory.mktemp("torch-cache"))


def _run(bundle, cache, config: DeploymentConfig):  # type: ignore[no-untyped-def]
    artifact, _ = deploy.convert(bundle, config, cache)
    runner = TorchScriptRunner(artifact.path, artifact.io, 1, config.backends)
    runner.load()
    outputs = run_all(runner, bundle.dataset.evaluation.inputs)
    return artifact, evaluate(outputs, deploy.reference_outputs(bundle), bundle.dataset.evaluation.labels)


@pytest.fixture(scope="module")
def fp32(digits, shared_cache):  # type: ignore[no-untyped-def]
    return _run(digits, shared_cache, DeploymentConfig("torch"))


def test_engine_order_falls_through_to_the_first_supported() -> None:
    assert pick_engine(["qnnpack", "x86"], supported=["x86", "fbgemm"]) == ("x86", ["qnnpack"])
    assert pick_engine(["qnnpack"], supported=["x86"]) == (None, ["qnnpack"])
    assert pick_engine([], supported=["x86"]) == (None, [])


def test_fp32_is_the_eager_model(fp32) -> None:  # type: ignore[no-untyped-def]
    artifact, ev = fp32
    assert artifact.path.suffix == ".pt"
    assert ev.fidelity.max_abs_err < 1e-4 and ev.accuracy >= 0.95
    assert set(artifact.partitions.nodes_by_backend) == {"cpu"}


@pytest.mark.parametrize("engine", ["x86", "qnnpack"])
@pytest.mark.parametrize("granularity", [Granularity.PER_TENSOR, Granularity.PER_CHANNEL])
def test_static_int8_within_one_point(digits, shared_cache, fp32, engine: str, granularity: Granularity) -> None:  # type: ignore[no-untyped-def]
    config = DeploymentConfig("torch", (engine,), QuantConfig("static_int8", granularity))
    artifact, ev = _run(digits, shared_cache, config)
    assert ev.accuracy >= fp32[1].accuracy - 0.01
    assert 20 < ev.fidelity.sqnr_db < 80
    nodes = artifact.partitions.nodes_by_backend
    assert nodes[engine] > 0  # conv/linear run as quantized:: ops on the engine
    assert "aten::_convolution" not in artifact.partitions.fallback_ops


def test_full_interface_takes_quint8(digits, shared_cache) -> None:  # type: ignore[no-untyped-def]
    _, core = _run(digits, shared_cache, DeploymentConfig("torch", ("x86",), QuantConfig("static_int8")))
    artifact, full = _run(
        digits, shared_cache, DeploymentConfig("torch", ("x86",), QuantConfig("static_int8", interface=Interface.FULL))
    )
    assert artifact.io.input_dtype == "uint8" and artifact.io.input_scale and artifact.io.output_scale
    assert abs(full.accuracy - core.accuracy) <= 0.005


@pytest.mark.parametrize(
    "quant",
    [
        QuantConfig("fp16"),
        QuantConfig("dynamic_int8"),
        QuantConfig("static_int8", calibration=Calibration.HISTOGRAM),
        QuantConfig("qat_int8"),
        QuantConfig("qat_int8", Granularity.PER_TENSOR),
    ],
)
def test_other_modes_keep_accuracy(digits, shared_cache, fp32, quant: QuantConfig) -> None:  # type: ignore[no-untyped-def]
    backends = ("x86",) if quant.mode.is_int8 else ()
    _, ev = _run(digits, shared_cache, DeploymentConfig("torch", backends, quant))
    assert ev.accuracy >= fp32[1].accuracy - 0.02
