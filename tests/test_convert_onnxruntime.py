"""Real ONNX Runtime conversions of digits (export, quantization, provider placement)."""

from __future__ import annotations

import pytest

from nnsweep import deploy
from nnsweep.bench import evaluate
from nnsweep.bench._harness import run_all
from nnsweep.bench.runners.onnxruntime import OnnxRuntimeRunner, providers_for
from nnsweep.config import Calibration, DeploymentConfig, Granularity, Interface, QuantConfig


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from nnsweep.artifacts import ArtifactCache

    return ArtifactCache(tmp_path_factory.mktemp("ort-cache"))


def _run(bundle, cache, config: DeploymentConfig):  # type: ignore[no-untyped-def]
    artifact, _ = deploy.convert(bundle, config, cache)
    runner = OnnxRuntimeRunner(artifact.path, artifact.io, 1, config.backends)
    runner.load()
    outputs = run_all(runner, bundle.dataset.evaluation.inputs)
    return artifact, evaluate(outputs, deploy.reference_outputs(bundle), bundle.dataset.evaluation.labels)


@pytest.fixture(scope="module")
def fp32(digits, shared_cache):  # type: ignore[no-untyped-def]
    return _run(digits, shared_cache, DeploymentConfig("onnxruntime"))


def test_fp32_export_matches_eager_and_runs_on_cpu(fp32) -> None:  # type: ignore[no-untyped-def]
    artifact, ev = fp32
    assert artifact.path.suffix == ".onnx"
    assert ev.fidelity.max_abs_err < 1e-3 and ev.accuracy >= 0.95
    assert set(artifact.partitions.nodes_by_backend) == {"cpu"}


def test_an_unavailable_provider_falls_through_and_is_reported(digits, shared_cache) -> None:  # type: ignore[no-untyped-def]
    assert providers_for(("xnnpack", "cpu")) == (["CPUExecutionProvider"], ["xnnpack"])
    artifact, _ = _run(digits, shared_cache, DeploymentConfig("onnxruntime", ("xnnpack", "cpu")))
    assert artifact.partitions.notes and "xnnpack" in artifact.partitions.notes[0]
    assert set(artifact.partitions.nodes_by_backend) == {"cpu"}
    assert artifact.partitions.fallback_ops  # every node fell back to cpu, by op type


@pytest.mark.parametrize("granularity", [Granularity.PER_TENSOR, Granularity.PER_CHANNEL])
@pytest.mark.parametrize("calibration", [Calibration.MINMAX, Calibration.ENTROPY, Calibration.PERCENTILE])
def test_static_qdq_within_one_point(digits, shared_cache, fp32, granularity, calibration) -> None:  # type: ignore[no-untyped-def]
    config = DeploymentConfig("onnxruntime", quant=QuantConfig("static_int8", granularity, calibration))
    artifact, ev = _run(digits, shared_cache, config)
    assert ev.accuracy >= fp32[1].accuracy - 0.01
    assert 20 < ev.fidelity.sqnr_db < 80
    assert artifact.size_bytes < fp32[0].size_bytes


def test_full_interface_takes_uint8(digits, shared_cache) -> None:  # type: ignore[no-untyped-def]
    _, core = _run(digits, shared_cache, DeploymentConfig("onnxruntime", quant=QuantConfig("static_int8")))
    artifact, full = _run(
        digits,
        shared_cache,
        DeploymentConfig("onnxruntime", quant=QuantConfig("static_int8", interface=Interface.FULL)),
    )
    assert artifact.io.input_dtype == "uint8" and artifact.io.output_dtype == "uint8"
    assert artifact.io.input_scale and artifact.io.output_scale
    assert abs(full.accuracy - core.accuracy) <= 0.005


@pytest.mark.parametrize("mode", ["fp16", "dynamic_int8"])
def test_fp16_and_dynamic(digits, shared_cache, fp32, mode: str) -> None:  # type: ignore[no-untyped-def]
    _, ev = _run(digits, shared_cache, DeploymentConfig("onnxruntime", quant=QuantConfig(mode)))
    assert ev.accuracy >= fp32[1].accuracy - 0.01


def test_group_norm_model_quantizes(digits_gn, shared_cache) -> None:  # type: ignore[no-untyped-def]
    """GroupNorm exports as InstanceNormalization, whose per-channel parameters ORT's QDQ
    quantizer cannot share ("shared mode is not supported for weight"): found by the quickstart."""
    _, ev = _run(digits_gn, shared_cache, DeploymentConfig("onnxruntime", quant=QuantConfig("static_int8")))
    assert ev.accuracy >= 0.95
