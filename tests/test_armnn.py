"""The armnn runtime: Arm NN 20.08 (library 22.0) through Debian's PyArmNN in the system Python.

Real runs: the TFLite parser's bias-less FULLY_CONNECTED rejection and its fix, the
preferred-backend order falling through to CpuRef on x86 (the report says so), fp32
and int8 digits measured in the system Python, and the capability probe.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import litert_torch
import numpy as np
import pytest
import torch
from ai_edge_litert import schema_py_generated as schema
from torch import nn

from nnsweep.artifacts import deploy
from nnsweep.artifacts.cache import ArtifactCache
from nnsweep.bench import MeasureSettings, measure_in_subprocess
from nnsweep.core.artifact import IOSpec
from nnsweep.core.config import DeploymentConfig, Granularity, Interface, PartitionLimits, QuantConfig
from nnsweep.core.errors import ConversionError, SpecError
from nnsweep.models import ModelSnapshot
from nnsweep.runtimes.armnn import probe as armnn_probe
from nnsweep.runtimes.armnn import tflite as armnn_tflite
from nnsweep.runtimes.armnn.converter import armnn_placement, armnn_refusal
from nnsweep.runtimes.armnn.runner import FP16_SUFFIX, report_from_dot, upstream_version
from nnsweep.runtimes.common import tflite
from nnsweep.runtimes.litert import probe as litert_probe
from nnsweep.spec import parse_spec
from nnsweep.sweep.space import device_space

SETTINGS = MeasureSettings(warmup=1, iters=5)


def _config(mode: str = "fp32", backends: tuple[str, ...] = ("CpuAcc", "CpuRef"), **quant: object) -> DeploymentConfig:
    return DeploymentConfig("armnn", backends, quant=QuantConfig(mode, **quant))  # type: ignore[arg-type]


def test_config_realises_the_preferred_backend_order() -> None:
    assert _config().backends == ("CpuAcc", "CpuRef")
    assert _config(backends=("GpuAcc",)).backends == ("GpuAcc", "CpuRef")  # CpuRef runs every layer
    assert DeploymentConfig("armnn").backends == ("CpuAcc", "CpuRef")
    with pytest.raises(SpecError, match="unknown armnn backend 'cpuacc'"):
        _config(backends=("cpuacc",))
    # Arm NN 20.08's reference backend aborts on per-channel int8 weights: per tensor only.
    with pytest.raises(SpecError, match="armnn static_int8 supports per_tensor, not per_channel"):
        _config("static_int8")
    assert _config("static_int8", granularity="per_tensor", interface="full").quant.interface is Interface.FULL
    with pytest.raises(SpecError, match="Arm NN assigns each layer"):
        DeploymentConfig("armnn", partitions=PartitionLimits(min_nodes_per_partition=2))


def test_report_from_dot_counts_layers_per_backend_and_notes_missing_backends() -> None:
    dot = "\n".join(
        f'{i} [label="{{{kind}|LayerName : l{i}\\lLayerType : {kind}\\lBackendID : {backend}\\l}}"];'
        for i, (kind, backend) in enumerate(
            [
                ("Input", "CpuAcc"),
                ("Convolution2d", "CpuAcc"),
                ("Activation", "CpuAcc"),
                ("Mean", "CpuRef"),
                ("FullyConnected", "CpuAcc"),
                ("Output", "CpuAcc"),
            ]
        )
    )
    report = report_from_dot(dot, ("GpuAcc", "CpuAcc", "CpuRef"), ["GpuAcc"], ["CpuAcc", "CpuRef"])
    assert report.nodes_by_backend == {"CpuAcc": 3, "CpuRef": 1}
    assert report.sizes == [2, 1] and report.fallback_ops == {"Mean": 1}
    assert report.notes == (
        "GpuAcc is not available here (this machine's Arm NN has: CpuAcc, CpuRef): its layers fall through to CpuAcc",
    )


def test_parser_rejects_fully_connected_without_bias_until_the_converter_adds_one(tmp_path: Path) -> None:
    torch.manual_seed(0)
    module = nn.Sequential(nn.Flatten(), nn.Linear(16, 4, bias=False)).eval()
    path = tmp_path / "fc.tflite"
    with contextlib.redirect_stdout(io.StringIO()):
        litert_torch.convert(module, (torch.randn(1, 16),)).export(str(path))
    with pytest.raises(ConversionError, match="must be non-negative, received: -1"):
        armnn_placement(path, ("CpuRef",))
    model = tflite.load(path)
    assert armnn_tflite.add_fully_connected_bias(model) == 1
    tflite.save(model, path)
    assert armnn_placement(path, ("CpuRef",)).nodes_by_backend == {"CpuRef": 1}
    # And Arm NN computes the same as PyTorch with the zero bias.
    x = np.arange(16, dtype=np.float32).reshape(1, 16) / 16
    timing, outputs = measure_in_subprocess(
        runtime="armnn", artifact=path, io=IOSpec(), threads=1, backends=("CpuRef",), inputs=x, settings=SETTINGS
    )
    np.testing.assert_allclose(outputs, module(torch.from_numpy(x)).detach().numpy(), atol=1e-5)
    assert timing.latency.count == SETTINGS.iters


def test_a_linear_layer_on_a_sequence_runs_once_its_fully_connected_is_made_2d(tmp_path: Path) -> None:
    # A linear layer on (1, T, D) is a FULLY_CONNECTED with keep_num_dims, which Arm NN 20.08
    # ignores: "TensorShape set on OutputSlot[0] does not match the inferred shape. : [1,6,5] != [6,5]".
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(8, 5), nn.ReLU()).eval()
    path = tmp_path / "sequence.tflite"
    with contextlib.redirect_stdout(io.StringIO()):
        litert_torch.convert(module, (torch.randn(1, 6, 8),)).export(str(path))
    with pytest.raises(ConversionError, match=r"does not match the inferred shape"):
        armnn_placement(path, ("CpuRef",))
    model = tflite.load(path)
    assert armnn_tflite.flatten_fully_connected(model) == 1
    assert tflite.operators(model)[-2:] == ["FULLY_CONNECTED", "RESHAPE"]
    tflite.save(model, path)
    x = np.random.default_rng(0).standard_normal((1, 6, 8)).astype(np.float32)
    _, outputs = measure_in_subprocess(
        runtime="armnn", artifact=path, io=IOSpec(), threads=1, backends=("CpuRef",), inputs=x, settings=SETTINGS
    )
    np.testing.assert_allclose(outputs.reshape(1, 6, 5), module(torch.from_numpy(x)).detach().numpy(), atol=1e-5)


class _Decoder(nn.Module):
    """A strided convolution and a transposed one back up, each followed by a ReLU (fused)."""

    def __init__(self) -> None:
        super().__init__()
        self.down = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.up = nn.ConvTranspose2d(8, 4, 4, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.up(torch.relu(self.down(x))))


def _exported(model: type[nn.Module], tmp_path: Path) -> tuple[nn.Module, Path]:
    """``model`` (seeded) on a (1, 3, 16, 16) input, as litert-torch writes it, before nnsweep's changes."""
    torch.manual_seed(0)
    module = model().eval()
    path = tmp_path / f"{model.__name__}.tflite"
    with contextlib.redirect_stdout(io.StringIO()):
        litert_torch.convert(module, (torch.randn(1, 3, 16, 16),)).export(str(path))
    return module, path


def test_a_transposed_convolution_runs_once_its_bias_is_an_add(tmp_path: Path) -> None:
    # litert-torch writes the bias as TRANSPOSE_CONV's fourth input, which Arm NN 20.08 refuses.
    module, path = _exported(_Decoder, tmp_path)
    with pytest.raises(ConversionError, match=r"cannot take TRANSPOSE_CONV"):
        armnn_placement(path, ("CpuRef",))
    model = tflite.load(path)
    assert armnn_tflite.split_transpose_conv_bias(model) == 1
    tflite.save(model, path)
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    _, outputs = measure_in_subprocess(
        runtime="armnn", artifact=path, io=IOSpec(), threads=1, backends=("CpuRef",), inputs=x, settings=SETTINGS
    )
    expected = module(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(outputs.reshape(expected.shape), expected, atol=1e-5)  # the ReLU included


class _Grouped(nn.Module):
    """A ResNeXt-style grouped convolution (groups=4) between two ordinary ones."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 16, 3, padding=1)
        self.g = nn.Conv2d(16, 16, 3, padding=1, groups=4)
        self.p = nn.Conv2d(16, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.p(torch.relu(self.g(torch.relu(self.a(x)))))


def test_a_grouped_convolution_is_computed_right_once_split_by_group(tmp_path: Path) -> None:
    # Arm NN 20.08 takes a grouped CONV_2D without a word and computes it as one group.
    module, path = _exported(_Grouped, tmp_path)
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    expected = module(torch.from_numpy(x)).detach().numpy()

    def on_armnn() -> np.ndarray:
        _, outputs = measure_in_subprocess(
            runtime="armnn", artifact=path, io=IOSpec(), threads=1, backends=("CpuRef",), inputs=x, settings=SETTINGS
        )
        return np.asarray(outputs).reshape(expected.shape)

    wrong = on_armnn() - expected
    assert 10 * np.log10(np.sum(expected**2) / np.sum(wrong**2)) < 60  # the silent fault, as Arm NN 20.08 has it
    model = tflite.load(path)
    assert armnn_tflite.split_grouped_convolutions(model) == 1
    assert tflite.operators(model).count("CONV_2D") == 6 and "SPLIT" in tflite.operators(model)
    tflite.save(model, path)
    np.testing.assert_allclose(on_armnn(), expected, atol=1e-4)


@pytest.mark.parametrize("mode", ["fp32", "static_int8"])
@pytest.mark.parametrize(("model", "floor_db"), [(_Decoder, 25), (_Grouped, 30)], ids=["transposed", "grouped"])
def test_a_transposed_or_grouped_convolution_converts_and_keeps_its_outputs(
    tmp_path: Path, model: type[nn.Module], floor_db: float, mode: str
) -> None:
    from nnsweep.models import load_model, register_live

    torch.manual_seed(0)
    bundle = load_model(register_live(f"{model.__name__}_armnn", model().eval(), torch.randn(1, 3, 16, 16)))
    config = _config(mode, granularity=Granularity.PER_TENSOR) if mode != "fp32" else _config()
    artifact, hit = deploy.convert(bundle, config, ArtifactCache(tmp_path))
    result = deploy.measure(ModelSnapshot.of(bundle), artifact, SETTINGS, cache_hit=hit)
    assert result.evaluation.fidelity.sqnr_db > (100 if mode == "fp32" else floor_db)


@pytest.mark.parametrize("mode", ["fp32", "static_int8"])
def test_a_gru_given_its_state_converts_and_keeps_its_outputs(tmp_path: Path, mode: str) -> None:
    from nnsweep.models import load_model, register_live

    class Recurrent(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = nn.GRU(8, 16, batch_first=True)
            self.fc = nn.Linear(16, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out, h = self.rnn(x, torch.zeros(1, x.shape[0], 16))
            return self.fc(out[:, -1] + h[0])

    torch.manual_seed(0)
    bundle = load_model(register_live("recurrent_armnn", Recurrent().eval(), torch.randn(1, 6, 8)))
    config = _config(mode, granularity=Granularity.PER_TENSOR) if mode != "fp32" else _config()
    artifact, hit = deploy.convert(bundle, config, ArtifactCache(tmp_path))
    result = deploy.measure(ModelSnapshot.of(bundle), artifact, SETTINGS, cache_hit=hit)
    assert result.evaluation.fidelity.sqnr_db > (100 if mode == "fp32" else 25)


class _SelfAttention(nn.Module):
    """Two heads of attention without projections: the matmuls of activations are BATCH_MATMULs."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x @ x.transpose(-1, -2), dim=-1) @ x


def test_a_parser_refusal_names_the_release_and_the_operator(tmp_path: Path) -> None:
    path = tmp_path / "bmm.tflite"
    with contextlib.redirect_stdout(io.StringIO()):
        litert_torch.convert(_SelfAttention().eval(), (torch.randn(1, 2, 4, 8),)).export(str(path))
    index = tflite.operators(tflite.load(path)).index("BATCH_MATMUL")
    # The parser itself prints the opcode as a character: "Operator code ~ is out of range 0-w".
    with pytest.raises(
        ConversionError, match=rf"^Arm NN 20\.08's TFLite parser cannot take BATCH_MATMUL \(operator #{index} "
    ):
        armnn_placement(path, ("CpuRef",))


class _ScoresOfTwoProjections(nn.Module):
    """q @ k^T of two linear projections: litert-torch writes a FULLY_CONNECTED whose weights are k."""

    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(8, 8)
        self.k = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.q(x) @ self.k(x).transpose(1, 2)


def test_a_fully_connected_of_computed_weights_is_refused_saying_so(tmp_path: Path) -> None:
    # The parser said "Buffer #16 has 0 bytes. For tensor: [8,16] expecting: 512 bytes".
    torch.manual_seed(0)
    path = tmp_path / "scores.tflite"
    with contextlib.redirect_stdout(io.StringIO()):
        litert_torch.convert(_ScoresOfTwoProjections().eval(), (torch.randn(1, 6, 8),)).export(str(path))
    model = tflite.load(path)  # as the converter leaves it for Arm NN
    armnn_tflite.add_fully_connected_bias(model)
    armnn_tflite.flatten_fully_connected(model)
    tflite.save(model, path)
    with pytest.raises(
        ConversionError, match=r"^Arm NN 20\.08 takes a FULLY_CONNECTED only with constant weights; operator #\d+ "
    ):
        armnn_placement(path, ("CpuRef",))


def test_an_fp16_tflite_meets_the_float16_tensors_and_computed_weights_the_parser_lacks(tmp_path: Path) -> None:
    # LiteRT's fp16 .tflite (float16 weights, each read through a DEQUANTIZE) as the Arm NN
    # converter would leave it; each step past one refusal meets the next. Why Arm NN's fp16
    # is its optimizer's ReduceFp32ToFp16 on the fp32 file instead.
    from nnsweep.runtimes.litert.edge_quantizer import quantize_fp16

    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 4)).eval()
    fp32, path = tmp_path / "fp32.tflite", tmp_path / "fp16.tflite"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        litert_torch.convert(module, (torch.randn(1, 16),)).export(str(fp32))
        quantize_fp16(fp32, path)
    model = tflite.load(path)
    armnn_tflite.add_fully_connected_bias(model)
    tflite.save(model, path)
    # ai-edge-quantizer writes the DEQUANTIZE's code (6) in builtin_code only; 20.08 reads the
    # deprecated byte, 0, which is ADD.
    with pytest.raises(ConversionError, match=r"cannot take DEQUANTIZE .*ParseAdd"):
        armnn_placement(path, ("CpuRef",))
    for code in model.operatorCodes:
        code.deprecatedBuiltinCode = min(max(code.builtinCode, code.deprecatedBuiltinCode), 127)
    tflite.save(model, path)
    with pytest.raises(ConversionError, match="takes a FULLY_CONNECTED only with constant weights"):
        armnn_placement(path, ("CpuRef",))
    # Without the DEQUANTIZEs, the float16 weights read directly: no FLOAT16 tensors either.
    dequantize = schema.BuiltinOperator.DEQUANTIZE
    graph = model.subgraphs[0]
    read_as = {op.outputs[0]: op.inputs[0] for op in graph.operators if tflite.builtin_code(model, op) == dequantize}
    graph.operators = [op for op in graph.operators if tflite.builtin_code(model, op) != dequantize]
    for op in graph.operators:
        op.inputs = [read_as.get(i, i) for i in op.inputs]
    tflite.save(model, path)
    # (The parser prints the type's enum value as a character, 1, before its name.)
    with pytest.raises(ConversionError, match=r"FULLY_CONNECTED .*Unsupported data type .? = FLOAT16"):
        armnn_placement(path, ("CpuRef",))


@pytest.mark.slow
def test_fp16_is_the_fp32_file_reduced_by_arm_nns_optimizer(digits, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cache = ArtifactCache(tmp_path / "cache")
    snapshot = ModelSnapshot.of(digits)
    fp32, _ = deploy.convert(digits, _config(), cache)
    fp16, _ = deploy.convert(digits, _config("fp16"), cache)
    assert fp16.path.name.endswith(FP16_SUFFIX) and fp16.sha256 != fp32.sha256  # never told as fp32's reuse
    assert any("ReduceFp32ToFp16" in note for note in fp16.partitions.notes)
    # the optimizer put fp16 conversions around the float layers: the report is Arm NN's own
    assert {"ConvertFp32ToFp16", "ConvertFp16ToFp32"} <= set(fp16.partitions.fallback_ops)
    result = deploy.measure(snapshot, fp16, SETTINGS, cache_hit=False)
    sqnr = result.evaluation.fidelity.sqnr_db
    assert 35 < sqnr < 120, sqnr  # fp16 rounding: close to fp32, not bit-identical
    assert result.evaluation.accuracy >= 0.95  # type: ignore[operator]


def test_a16w8_is_refused_naming_the_int64_biases_the_parser_lacks(tmp_path: Path) -> None:
    # LiteRT's a16w8 .tflite (int16 activations, int8 weights, int64 biases), its operator
    # codes readable by 20.08 (above) and its biases explicit, as the converter would leave it.
    from nnsweep.runtimes.litert.edge_quantizer import quantize_a16w8

    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 4)).eval()
    fp32, path = tmp_path / "fp32.tflite", tmp_path / "a16w8.tflite"
    samples = (np.random.default_rng(i).standard_normal((1, 16)).astype(np.float32) for i in range(4))
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        litert_torch.convert(module, (torch.randn(1, 16),)).export(str(fp32))
        quantize_a16w8(fp32, path, samples)
    model = tflite.load(path)
    for code in model.operatorCodes:
        code.deprecatedBuiltinCode = min(max(code.builtinCode, code.deprecatedBuiltinCode), 127)
    armnn_tflite.add_fully_connected_bias(model)
    tflite.save(model, path)
    with pytest.raises(ConversionError, match=r"FULLY_CONNECTED .*Unsupported data type .? = INT64"):
        armnn_placement(path, ("CpuRef",))
    with pytest.raises(SpecError, match="no INT64 tensors"):
        _config("a16w8")


def test_a_machine_without_pyarmnn_is_told_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A stand-in for a system Python without Debian's packages (this one has them): before,
    # the line was "Arm NN (release unknown) could not place the model (exit 1): ... No module
    # named 'numpy'", after the whole export.
    import dataclasses
    import os

    from nnsweep.core import runtimes
    from nnsweep.runtimes.armnn import converter as armnn_convert

    bare = tmp_path / "python3"
    bare.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'numpy'\" >&2\nexit 1\n")
    os.chmod(bare, 0o755)
    info = dataclasses.replace(runtimes.get("armnn"), python=str(bare))
    monkeypatch.setattr(armnn_convert.runtimes, "get", lambda name: info)
    with pytest.raises(ConversionError) as caught:
        armnn_placement(tmp_path / "model.tflite", ("CpuRef",))
    said = str(caught.value)
    assert "python3-pyarmnn" in said and "make system-deps" in said and "no module numpy" in said


def test_a_layer_no_backend_runs_is_named_with_the_backends_reason(tmp_path: Path) -> None:
    message = (
        "WARNING: Layer of type FullyConnected is not supported on requested backend CpuRef for input data type "
        "Float32 and output data type Float32 (reason: Reference Fully Connected: input and weights types "
        "mismatched.\nReference Fully Connected: bias and weight types mismatch.\n), falling back to the next "
        "backend.ERROR: Layer of type FullyConnected is not supported on any preferred backend [CpuRef ]"
    )
    assert armnn_refusal(message, tmp_path / "unused.tflite") == (
        "Arm NN 20.08 has no backend of the order for the FullyConnected layer: "
        "Reference Fully Connected: input and weights types mismatched."
    )


def test_probe_reports_arm_nn_and_its_backends() -> None:
    versions: dict[str, str] = {}
    assert armnn_probe.backends(versions) == ("CpuRef",)  # x86: the reference backend only
    # Debian's python3-pyarmnn 20.08-12: release 20.08, whose library calls itself 22.0 (soname 22)
    assert versions["armnn"] == "20.08"
    assert versions["armnn-library"].startswith("22.")
    assert litert_probe.backends({}) == ("xnnpack", "cpu")


def test_the_release_is_the_debian_version_without_epoch_or_revision() -> None:
    assert upstream_version("20.08-12") == "20.08"
    assert upstream_version("1:23.08-6\n") == "23.08"
    assert upstream_version("") is None


def test_space_keeps_the_orders_and_granularities_arm_nn_has() -> None:
    spec = parse_spec(
        {
            "name": "t",
            "model": "digits",
            "devices": ["host"],
            "space": {
                "runtime": ["armnn", "litert"],
                "quant": ["fp32", "static_int8"],
                "granularity": ["per_tensor", "per_channel"],
                "backends": {"armnn": ["GpuAcc", "CpuAcc", "CpuRef"], "litert": ["xnnpack", "cpu"]},
            },
        }
    )
    space = device_space(spec, "host", {"armnn": ("CpuRef",), "litert": ("xnnpack", "cpu")}, cores=2)
    assert space.choices["armnn"].orders == ("CpuRef",)
    assert space.choices["armnn"].granularities == (Granularity.PER_TENSOR,)
    assert space.choices["litert"].orders == ("xnnpack>cpu", "cpu")
    assert space.choices["litert"].granularities == (Granularity.PER_TENSOR, Granularity.PER_CHANNEL)


@pytest.mark.slow
def test_digits_fp32_and_int8_fall_through_to_cpuref_and_keep_accuracy(digits, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cache = ArtifactCache(tmp_path / "cache")
    snapshot = ModelSnapshot.of(digits)
    results = {}
    for config in (
        _config(),
        _config("static_int8", granularity="per_tensor"),
        _config("static_int8", granularity="per_tensor", interface="full"),
    ):
        artifact, hit = deploy.convert(digits, config, cache)
        results[config.label()] = deploy.measure(snapshot, artifact, SETTINGS, cache_hit=hit)
    fp32, core, full = results.values()
    report = fp32.artifact.partitions
    assert report.backends == ("CpuAcc", "CpuRef") and set(report.nodes_by_backend) == {"CpuRef"}
    assert report.partitions == () and sum(report.fallback_ops.values()) == report.nodes_by_backend["CpuRef"]
    assert report.notes and report.notes[0].startswith("CpuAcc is not available here")
    assert fp32.evaluation.fidelity.max_abs_err < 1e-4 and fp32.evaluation.accuracy >= 0.95  # type: ignore[operator]
    assert fp32.timing.latency.count == SETTINGS.iters
    assert full.artifact.io.input_dtype == "int8"
    for int8 in (core, full):
        # Symmetric activations: Arm NN 20.08 pads with integer 0 (asymmetric int8 gave 10.6 % top-1).
        assert abs(int8.evaluation.accuracy - fp32.evaluation.accuracy) <= 0.02  # type: ignore[operator]
        assert int8.evaluation.fidelity.sqnr_db > 20


def test_the_partition_report_comes_from_the_machine_that_measured(digits, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import dataclasses

    from nnsweep.core.artifact import PartitionReport

    artifact, _ = deploy.convert(digits, _config(), ArtifactCache(tmp_path / "cache"))
    snapshot = ModelSnapshot.of(digits)
    timing, outputs = measure_in_subprocess(
        runtime="armnn",
        artifact=artifact.path,
        io=artifact.io,
        threads=1,
        backends=artifact.config.backends,
        inputs=snapshot.evaluation.inputs,
        settings=SETTINGS,
    )
    # The measuring process reports where its own Arm NN put the layers (here: what the converter saw)
    assert timing.placement is not None
    assert PartitionReport.from_dict(timing.placement) == artifact.partitions
    # A board's placement (CpuAcc there) replaces the converting machine's (CpuRef only on x86)
    board = PartitionReport(("CpuAcc", "CpuRef"), {"CpuAcc": 19})
    on_board = dataclasses.replace(timing, placement=board.to_dict())
    result = deploy.assemble(snapshot, artifact, on_board, outputs, cache_hit=True)
    assert result.artifact.partitions == board
    assert result.to_dict()["partitions"]["nodes_by_backend"] == {"CpuAcc": 19}
    unchanged = deploy.assemble(snapshot, artifact, timing, outputs, cache_hit=True)
    assert unchanged.artifact.partitions == artifact.partitions


@pytest.mark.parametrize("align_corners", [False, True])
def test_a_half_pixel_bilinear_resize_is_noted_beside_the_fidelity_it_costs(
    tmp_path: Path, align_corners: bool
) -> None:
    # Arm NN 20.08 ignores RESIZE_BILINEAR's half_pixel_centers, which PyTorch's default
    # align_corners=False gives: 4.3 dB against fp32 where LiteRT has 139 dB. The note is the
    # conversion's, and the device's placement report (which replaces the conversion's) keeps it.
    from nnsweep.models import load_model, register_live

    class Upsampled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, stride=2, padding=1)
            self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=align_corners)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.up(self.conv(x))

    torch.manual_seed(0)
    bundle = load_model(register_live(f"upsampled_{align_corners}", Upsampled().eval(), torch.randn(1, 3, 16, 16)))
    artifact, hit = deploy.convert(bundle, _config(), ArtifactCache(tmp_path))
    result = deploy.measure(ModelSnapshot.of(bundle), artifact, SETTINGS, cache_hit=hit)
    noted = [n for n in result.artifact.partitions.notes if "half-pixel centers" in n]
    sqnr = result.evaluation.fidelity.sqnr_db
    if align_corners:
        assert not noted and sqnr > 100
    else:
        assert noted == [
            "1 bilinear resize(s) sample at half-pixel centers (align_corners=False), which Arm NN 20.08 "
            "ignores: their outputs are shifted (see the fidelity)"
        ]
        assert sqnr < 20


def _wall(*times: float) -> dict[str, object]:
    return {"type": "Measurement", "unit": "us", "raw": list(times)}


def test_arm_nns_profiler_json_gives_each_workload_its_kind_backend_and_time_per_run() -> None:
    from nnsweep.runtimes.armnn.profile import workload_events

    tree = {
        "ArmNN": {
            "inference_measurements_#1": {
                "type": "Event",
                "Wall clock time_#1": _wall(900.0, 1000.0),
                "PrepareInputs_#2": {"type": "Event", "Wall clock time_#2": _wall(2.0, 4.0)},
                "Execute_#4": {
                    "type": "Event",
                    "Wall clock time_#4": _wall(880.0, 990.0),
                    "CopyMemGeneric_Execute_#6": {"type": "Event", "Wall clock time_#6": _wall(1.0, 1.0)},
                    "RefConvolution2dWorkload_Execute_#13": {
                        "type": "Event",
                        "Wall clock time_#13": _wall(600.0, 700.0),
                    },
                    "NeonQuantizeWorkload_Execute_#14": {"type": "Event", "Wall clock time_#14": _wall(10.0, 20.0)},
                },
            }
        }
    }
    events = list(workload_events(tree))
    assert (0, "RefConvolution2dWorkload_Execute_#13", "Convolution2d", "CpuRef", 0.6) in events
    assert (1, "NeonQuantizeWorkload_Execute_#14", "Quantize", "CpuAcc", 0.02) in events
    assert (0, "CopyMemGeneric_Execute_#6", "CopyMemGeneric", "armnn", 0.001) in events
    assert (1, "PrepareInputs_#2", "PrepareInputs", "armnn", 0.004) in events
    assert len(events) == 8  # four events, two runs each; the inference and Execute totals are not operators


@pytest.mark.slow
def test_an_int8_digits_profile_comes_from_arm_nns_own_profiler(digits, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from nnsweep.bench import profile_in_subprocess

    artifact, _ = deploy.convert(digits, _config("static_int8", granularity="per_tensor"), ArtifactCache(tmp_path))
    profile = profile_in_subprocess(
        runtime="armnn",
        artifact=artifact.path,
        io=artifact.io,
        threads=1,
        backends=artifact.config.backends,
        inputs=ModelSnapshot.of(digits).evaluation.inputs,
        runs=5,
    )
    kinds = {e.kind for e in profile.entries}
    assert {"Convolution2d", "DepthwiseConvolution2d", "Dequantize", "CopyMemGeneric"} <= kinds, kinds
    assert {e.backend for e in profile.entries if e.kind == "Convolution2d"} == {"CpuRef"}  # x86: CpuRef only
    assert 0 < profile.overhead_ms < profile.total_ms and profile.runs == 5
