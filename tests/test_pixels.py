"""Models that take uint8 pixels and scale them themselves (``x.float() / 255``), as a
camera's frame comes: loaded with seeded pixels over 0-255, deployed with the pixels kept
uint8 on every runtime that has the cast."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from nnsweep.core.errors import SpecError
from nnsweep.models import Dataset, Split, load_model, register_live


class Camera(torch.nn.Module):
    """A uint8 RGB frame in, scaled and centred by the model, two convolutions, ten classes."""

    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.Conv2d(8, 16, 3, stride=2, padding=1),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
        )
        self.head = torch.nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x.float() / 255.0 - 0.5))


def _camera() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return Camera().eval(), torch.zeros(1, 3, 16, 16, dtype=torch.uint8)


def test_a_pixel_model_without_data_gets_seeded_pixels_over_the_whole_byte() -> None:
    bundle = load_model(register_live("camera", *_camera()))
    for split in (bundle.dataset.calibration, bundle.dataset.evaluation):
        assert split.inputs.dtype == np.uint8 and split.inputs.shape[1:] == (3, 16, 16)
        assert split.inputs.min() == 0 and split.inputs.max() == 255
    assert bundle.example_input.dtype == torch.uint8
    assert np.array_equal(bundle.example_input.numpy(), bundle.dataset.evaluation.inputs[:1])
    again = load_model(register_live("camera_again", *_camera()))
    assert np.array_equal(again.dataset.calibration.inputs, bundle.dataset.calibration.inputs)  # seeded


def test_a_pixel_model_takes_its_own_uint8_data_and_refuses_float_data() -> None:
    net, example = _camera()
    pixels = np.random.RandomState(1).randint(0, 256, size=(8, 3, 16, 16)).astype(np.uint8)
    bundle = load_model(register_live("camera_data", net, example, Dataset(Split(pixels[:4]), Split(pixels))))
    assert np.array_equal(bundle.dataset.evaluation.inputs, pixels)
    floats = Dataset(calibration=Split(pixels.astype(np.float32)), evaluation=Split(pixels))
    with pytest.raises(SpecError, match="calibration inputs are float32 but the example input is uint8"):
        load_model(register_live("camera_float_data", net, example, floats))


def _input_dtype(runtime: str, path: Path) -> str:
    """The dtype the artifact's input takes, read from the artifact itself."""
    if runtime == "onnxruntime":
        import onnxruntime as ort

        return str(ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).get_inputs()[0].type)
    if runtime == "litert":
        from ai_edge_litert.interpreter import Interpreter

        return np.dtype(Interpreter(str(path)).get_input_details()[0]["dtype"]).name
    from executorch.runtime import Runtime

    from nnsweep.runtimes.executorch.etlite import _DTYPES

    program = Runtime.get().load_program(str(path))  # a Method does not keep its Program alive
    method = program.load_method("forward")
    return _DTYPES[int(method.metadata.input_tensor_meta(0).dtype())].name


# Measured with this architecture on (1, 3, 32, 32) frames, not this 16x16 example:
# ONNX Runtime static int8 27.9 dB, LiteRT 47.6 dB;
# the floors tell a working pixel path from garbage, not one toolchain's precision.
@pytest.mark.slow
@pytest.mark.parametrize(
    ("runtime", "quant", "floor_db", "artifact_input"),
    [
        ("onnxruntime", "fp32", 100.0, "tensor(uint8)"),
        ("onnxruntime", "static_int8", 15.0, "tensor(uint8)"),
        ("onnxruntime", "fp16", 40.0, "tensor(uint8)"),
        ("executorch", "static_int8", 20.0, "uint8"),
        ("executorch", "fp16", 40.0, "uint8"),  # the model's x.float() gives half (convert/half.py)
        ("litert", "static_int8", 20.0, "uint8"),
        ("torch", "static_int8", 15.0, None),  # TorchScript: the cast is in the traced graph
        ("torch", "fp16", 40.0, None),
    ],
)
def test_a_pixel_model_deploys_taking_uint8(
    runtime: str, quant: str, floor_db: float, artifact_input: str | None, tmp_path: Path
) -> None:
    from nnsweep.api import measure
    from nnsweep.bench import MeasureSettings

    net, example = _camera()
    result = measure(
        net,
        example,
        runtime=runtime,
        quant={"mode": quant},
        settings=MeasureSettings(warmup=1, iters=5),
        cache_dir=tmp_path,
    )
    assert result.evaluation.fidelity.sqnr_db > floor_db
    assert result.evaluation.fidelity.top1_agreement >= 0.9
    if artifact_input is not None:
        assert _input_dtype(runtime, result.artifact.path) == artifact_input


@pytest.mark.parametrize("interface", ["core", "full"])
def test_the_ethos_u_npu_refuses_pixels_before_converting(interface: str, tmp_path: Path) -> None:
    """Its Arm passes leave the cast to float on the CPU (measured: 1 op,
    dim_order_ops._to_dim_order_copy), which Vela does not estimate."""
    from nnsweep.artifacts import deploy
    from nnsweep.artifacts.cache import ArtifactCache
    from nnsweep.core.config import DeploymentConfig, Interface, QuantConfig, QuantMode
    from nnsweep.core.errors import ConversionError

    bundle = load_model(register_live("camera_npu", *_camera()))
    config = DeploymentConfig(
        "executorch", ("ethos-u55-128",), QuantConfig(QuantMode.STATIC_INT8, interface=Interface(interface))
    )
    with pytest.raises(ConversionError, match="takes uint8 pixels; their cast to float runs on the CPU beside"):
        deploy.convert(bundle, config, ArtifactCache(tmp_path / "cache"))


@pytest.mark.integration
def test_a_sweep_of_a_pixel_model_measures_uint8_frames(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The sweep's path beyond bench: each runtime's layer ranking on uint8 inputs, the fp32
    # baseline, the snapshot's pixels in the measuring processes.
    from nnsweep.api import sweep
    from nnsweep.core.results import TrialStatus

    monkeypatch.chdir(tmp_path)  # the sweep's state (.nnsweep/) lives in the working directory
    spec = {
        "name": "pixels",
        "space": {"runtime": ["onnxruntime", "litert"], "quant": ["static_int8"], "float_layers": [0, 1]},
        "budget": {"trials": 4},
        "measure": {"warmup": 1, "iters": 10, "remeasure": 0},
    }
    (host,) = sweep(spec, *_camera(), tracking=False, cache_dir=tmp_path / "cache")
    failed = [(r.config.label(), r.reason) for r in host.records if r.status is not TrialStatus.OK]
    assert not failed
    int8 = [r for r in host.records if r.config.quant.mode.is_int8]
    assert {r.config.runtime for r in int8} == {"onnxruntime", "litert"}
    assert all(r.metrics["sqnr_db"] > 15 and r.metrics["accuracy"] >= 0.9 for r in int8)
