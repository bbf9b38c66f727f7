"""Real ONNX Runtime conversions of digits: export, each quantization mode, the full
interface, provider placement, and the runner (measured in its own process)."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

from nnsweep.artifacts import deploy
from nnsweep.artifacts.cache import Artifact, ArtifactCache
from nnsweep.artifacts.deploy import DeploymentResult
from nnsweep.bench import MeasureSettings
from nnsweep.bench._harness import run_all
from nnsweep.core import runtimes
from nnsweep.core.artifact import IOSpec
from nnsweep.core.config import Calibration, DeploymentConfig, Granularity, Interface, QuantConfig, QuantMode
from nnsweep.core.errors import BenchmarkError
from nnsweep.core.options import x86_without_vnni
from nnsweep.models import ModelSnapshot
from nnsweep.runtimes.onnxruntime.runner import OnnxRuntimeRunner, providers_for

SETTINGS = MeasureSettings(warmup=1, iters=5)


# ONNX Runtime's advice for int8 on x86 without VNNI: 7-bit weights, against int16 saturation
# in its u8s8 kernels. digits static int8 per channel on an AVX2 AMD EPYC: 15.9 dB SQNR with
# full-range weights, 33.4 dB with reduce_range (the same accuracy within an image).
INT8_OPTIONS = (("reduce_range", True),) if x86_without_vnni() else ()


def _config(mode: str = "fp32", backends: tuple[str, ...] = ("cpu",), **quant: object) -> DeploymentConfig:
    if mode in ("dynamic_int8", "static_int8") and "options" not in quant:
        quant["options"] = INT8_OPTIONS
    return DeploymentConfig("onnxruntime", backends, quant=QuantConfig(mode, **quant))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def ort_cache(tmp_path_factory: pytest.TempPathFactory) -> ArtifactCache:
    return ArtifactCache(tmp_path_factory.mktemp("ort-cache"))


@pytest.fixture(scope="module")
def snapshot(digits) -> ModelSnapshot:  # type: ignore[no-untyped-def]
    return ModelSnapshot.of(digits)


@pytest.fixture(scope="module")
def measured(digits, ort_cache, snapshot) -> Callable[[DeploymentConfig], DeploymentResult]:  # type: ignore[no-untyped-def]
    """Convert through the cache and measure in a child process, once per config in this module."""
    done: dict[str, DeploymentResult] = {}

    def get(config: DeploymentConfig) -> DeploymentResult:
        if config.digest() not in done:
            artifact, hit = deploy.convert(digits, config, ort_cache)
            done[config.digest()] = deploy.measure(snapshot, artifact, SETTINGS, cache_hit=hit)
        return done[config.digest()]

    return get


def _graph(artifact: Artifact) -> onnx.GraphProto:
    return onnx.load(str(artifact.path)).graph


def _ops(artifact: Artifact) -> set[str]:
    return {n.op_type for n in _graph(artifact).node}


def _weight_dtypes(artifact: Artifact) -> set[str]:
    """Element types of the Conv and Gemm weights (the initializers of rank 2 and more)."""
    return {str(numpy_helper.to_array(i).dtype) for i in _graph(artifact).initializer if len(i.dims) >= 2}


@pytest.mark.parametrize(
    ("mode", "ops", "weights"),
    [
        ("fp32", {"Conv", "Gemm"}, {"float32"}),
        ("fp16", {"Conv", "Cast"}, {"float16"}),
        ("dynamic_int8", {"DynamicQuantizeLinear", "ConvInteger", "MatMulInteger"}, {"int8"}),
        ("static_int8", {"QuantizeLinear", "DequantizeLinear"}, {"int8"}),
        ("a16w8", {"QuantizeLinear", "DequantizeLinear"}, {"int8"}),
    ],
)
def test_each_mode_converts_runs_and_keeps_accuracy(  # type: ignore[no-untyped-def]
    digits, measured, mode: str, ops: set[str], weights: set[str]
) -> None:
    fp32 = measured(_config())
    result = measured(_config(mode))
    artifact, timing, ev = result.artifact, result.timing, result.evaluation

    assert sorted(p.name for p in artifact.path.parent.iterdir() if p.suffix == ".onnx") == ["model.onnx"]
    assert ops <= _ops(artifact)
    assert _weight_dtypes(artifact) == weights
    io_types = {v.type.tensor_type.elem_type for v in (*_graph(artifact).input, *_graph(artifact).output)}
    assert io_types == {onnx.TensorProto.FLOAT} and artifact.io == IOSpec()  # float in and out

    assert timing.latency.count == SETTINGS.iters and 0 < timing.latency.p50 < 100 and timing.threads == 1
    assert ev.samples == len(digits.dataset.evaluation.labels) and ev.accuracy is not None and ev.accuracy >= 0.95
    assert ev.accuracy >= fp32.evaluation.accuracy - 0.01  # type: ignore[operator]
    if mode == "fp32":
        assert ev.fidelity.max_abs_err < 1e-4 and ev.fidelity.top1_agreement == 1.0
    else:
        assert artifact.size_bytes < 0.75 * fp32.artifact.size_bytes
        assert 20 < ev.fidelity.sqnr_db < 100  # quantization error is there, and small

    report = artifact.partitions
    assert set(report.nodes_by_backend) == {"cpu"} and report.nodes_by_backend["cpu"] > 0
    assert report.partitions == () and report.fallback_ops == {} and report.notes == ()


def test_a16w8_quantizes_activations_to_int16_and_keeps_more_of_fp32_than_int8(measured) -> None:  # type: ignore[no-untyped-def]
    a16w8, int8 = measured(_config("a16w8")), measured(_config("static_int8"))
    graph = _graph(a16w8.artifact)
    inits = {i.name: i for i in graph.initializer}
    zero_points = [inits[n.input[2]] for n in graph.node if n.op_type == "QuantizeLinear" and n.input[2] in inits]
    assert zero_points and {z.data_type for z in zero_points} == {onnx.TensorProto.INT16}
    # int8 weights bound what int16 activations gain: 38.4 against 33.1 dB on digits here
    assert a16w8.evaluation.fidelity.sqnr_db > int8.evaluation.fidelity.sqnr_db + 3


def test_static_per_channel_within_one_point_of_fp32(measured) -> None:  # type: ignore[no-untyped-def]
    fp32 = measured(_config()).evaluation
    int8 = measured(_config("static_int8", granularity=Granularity.PER_CHANNEL)).evaluation
    assert abs(int8.accuracy - fp32.accuracy) <= 0.01  # type: ignore[operator]
    assert int8.fidelity.top1_agreement >= 0.98


def test_full_interface_takes_uint8_and_matches_core(measured) -> None:  # type: ignore[no-untyped-def]
    core = measured(_config("static_int8"))
    full = measured(_config("static_int8", interface=Interface.FULL))
    io = full.artifact.io
    assert (io.input_dtype, io.output_dtype) == ("uint8", "uint8")
    assert io.input_scale and io.input_scale > 0 and io.output_scale and io.output_scale > 0
    assert io.input_zero_point is not None and 0 <= io.input_zero_point <= 255
    graph = _graph(full.artifact)
    assert graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.UINT8
    assert graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.UINT8
    assert not any(n.op_type == "QuantizeLinear" and graph.input[0].name in n.input for n in graph.node)
    assert full.evaluation.accuracy == core.evaluation.accuracy
    assert abs(full.evaluation.fidelity.sqnr_db - core.evaluation.fidelity.sqnr_db) < 0.5


def test_full_interface_outputs_equal_core_outputs(digits, measured) -> None:  # type: ignore[no-untyped-def]
    """Quantizing outside the model (IOSpec) is what the removed QuantizeLinear did inside."""
    outs = []
    for interface in (Interface.CORE, Interface.FULL):
        artifact = measured(_config("static_int8", interface=interface)).artifact
        runner = OnnxRuntimeRunner(artifact.path, artifact.io, 1, artifact.config.backends)
        runner.load()
        outs.append(run_all(runner, digits.dataset.evaluation.inputs[:64]))
    assert np.abs(outs[0] - outs[1]).max() <= 1e-5


def test_unavailable_provider_is_noted_and_its_nodes_fall_back_to_cpu(measured) -> None:  # type: ignore[no-untyped-def]
    assert providers_for(("xnnpack", "cpu")) == (["CPUExecutionProvider"], ["xnnpack"])
    on_cpu = measured(_config()).artifact.partitions
    result = measured(_config(backends=("xnnpack", "cpu")))
    report = result.artifact.partitions
    assert report.backends == ("xnnpack", "cpu")
    assert report.nodes_by_backend == on_cpu.nodes_by_backend  # nothing went anywhere else
    assert sum(report.fallback_ops.values()) == report.nodes_by_backend["cpu"]
    assert report.fallback_ops["Conv"] == 7  # digits: stem + three depthwise-separable blocks
    assert report.partitions == ()
    assert len(report.notes) == 1 and report.notes[0].startswith("xnnpack: XnnpackExecutionProvider is not available")
    assert result.evaluation.accuracy == measured(_config()).evaluation.accuracy


def test_granularity_changes_the_weight_scales(digits, ort_cache) -> None:  # type: ignore[no-untyped-def]
    scales = {}
    for granularity in (Granularity.PER_TENSOR, Granularity.PER_CHANNEL):
        artifact, _ = deploy.convert(digits, _config("static_int8", granularity=granularity), ort_cache)
        graph = _graph(artifact)
        inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
        # The DequantizeLinear of each int8 weight: its scale has one entry per output channel or one in all.
        scales[granularity] = [
            inits[n.input[1]].size
            for n in graph.node
            if n.op_type == "DequantizeLinear" and n.input[0] in inits and inits[n.input[0]].dtype == np.int8
        ]
        assert len(scales[granularity]) == 8  # 7 Conv + 1 Gemm
    assert set(scales[Granularity.PER_TENSOR]) == {1}
    assert sorted(scales[Granularity.PER_CHANNEL]) == [10, 16, 16, 32, 32, 64, 64, 128]  # output channels


def test_dynamic_int8_keeps_a_linear_layer_float(digits, ort_cache) -> None:  # type: ignore[no-untyped-def]
    """quantize_dynamic renames each Gemm (to <name>_MatMul) before it excludes nodes: the
    classifier kept float must still be float, not a MatMulInteger."""
    ops = {}
    for layers in ((), ("classifier",)):
        artifact, _ = deploy.convert(digits, _config("dynamic_int8", float_layers=layers), ort_cache)
        ops[layers] = [n.op_type for n in _graph(artifact).node]
    assert ops[()].count("MatMulInteger") == 1 and ops[()].count("ConvInteger") == 7
    assert ops[("classifier",)].count("MatMulInteger") == 0 and ops[("classifier",)].count("ConvInteger") == 7


@pytest.mark.parametrize("calibration", [Calibration.ENTROPY, Calibration.PERCENTILE])
def test_calibration_method_narrows_activation_ranges(measured, calibration: Calibration) -> None:  # type: ignore[no-untyped-def]
    """Entropy and percentile clip the calibrated range inside min/max: smaller scales,
    at least somewhere (ORT's entropy defaults alone would reproduce min/max exactly)."""

    def activation_scales(artifact: Artifact) -> dict[str, float]:
        graph = _graph(artifact)
        inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
        return {n.input[1]: float(inits[n.input[1]]) for n in graph.node if n.op_type == "QuantizeLinear"}

    minmax = activation_scales(measured(_config("static_int8")).artifact)
    result = measured(_config("static_int8", calibration=calibration))
    other = activation_scales(result.artifact)
    assert other.keys() == minmax.keys()
    assert all(other[k] <= minmax[k] * (1 + 1e-6) for k in minmax)
    assert any(other[k] < minmax[k] * 0.95 for k in minmax)
    assert result.evaluation.accuracy >= measured(_config()).evaluation.accuracy - 0.01


def test_group_norm_model_quantizes(digits_gn, ort_cache) -> None:  # type: ignore[no-untyped-def]
    """GroupNorm exports as InstanceNormalization, whose per-channel parameters ORT's QDQ
    quantizer cannot share ("shared mode is not supported for weight"): found by the quickstart."""
    artifact, _ = deploy.convert(digits_gn, _config("static_int8"), ort_cache)
    runner = OnnxRuntimeRunner(artifact.path, artifact.io, 1, artifact.config.backends)
    runner.load()
    outputs = run_all(runner, digits_gn.dataset.evaluation.inputs)
    assert (outputs.argmax(1) == digits_gn.dataset.evaluation.labels).mean() >= 0.95
    assert "InstanceNormalization" in _ops(artifact)


def test_runner_applies_threads_and_reports_an_unloadable_model(measured, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    artifact = measured(_config()).artifact
    runner = OnnxRuntimeRunner(artifact.path, artifact.io, 2, ("cpu",))
    runner.load()
    assert runner._session.get_session_options().intra_op_num_threads == 2
    assert runner._session.get_providers() == ["CPUExecutionProvider"]

    broken = tmp_path / "model.onnx"
    broken.write_bytes(b"not a protobuf")
    with pytest.raises(BenchmarkError, match=r"cannot load model\.onnx: InvalidProtobuf"):
        OnnxRuntimeRunner(broken, IOSpec(), 1, ("cpu",)).load()


def test_runner_module_does_not_import_torch() -> None:
    """Boards run this module with onnxruntime and numpy only."""
    code = "import sys, nnsweep.runtimes.onnxruntime.runner; sys.exit(int('torch' in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# ONNX Runtime's own quantizer options (quant.options): every combination its quantizer takes.
_STATIC_OPTIONS = [
    {"quant_format": fmt, "activation_type": act, "weight_type": weight, "reduce_range": reduce}
    for fmt in ("qdq", "qoperator")
    for act, weight in (("uint8", "int8"), ("uint8", "uint8"), ("int8", "int8"))
    for reduce in (False, True)
]
_DYNAMIC_OPTIONS = [{"weight_type": w, "reduce_range": r} for w in ("int8", "uint8") for r in (False, True)]


def _weights(artifact: Artifact) -> dict[str, np.ndarray]:
    """The quantized Conv and Gemm weights (integer initializers of rank 2 and more), by name."""
    arrays = {i.name: numpy_helper.to_array(i) for i in _graph(artifact).initializer if len(i.dims) >= 2}
    return {name: a for name, a in arrays.items() if a.dtype.kind in "iu"}


def _check_options(result: DeploymentResult, fp32: DeploymentResult, options: dict[str, object]) -> None:
    """The artifact is what ``options`` asks for, runs, and keeps accuracy within a point of fp32."""
    artifact, ev = result.artifact, result.evaluation
    weights = _weights(artifact)
    dtypes = {name: str(w.dtype) for name, w in weights.items()}
    if options.get("quant_format") == "qoperator" and artifact.config.quant.granularity is Granularity.PER_CHANNEL:
        # ORT 1.32's QOperator QLinearConv quantizes per-channel weights to int8 whatever
        # weight_type says (operators/conv.py); the linear layer follows it.
        assert {t for n, t in dtypes.items() if n.startswith("features")} == {"int8"}
        assert dtypes["classifier.weight_quantized"] == options["weight_type"]
    else:
        assert dtypes and set(dtypes.values()) == {options["weight_type"]}
    # reduce_range: 7-bit weights (ORT 1.32 writes -64..64 and 0..128 in static, 0..127 in dynamic)
    spans = [int(w.max()) - int(w.min()) for w in weights.values()]
    assert max(spans) <= 128 if options["reduce_range"] else max(spans) > 128
    ops = _ops(artifact)
    if options.get("quant_format") == "qoperator":
        assert {"QLinearConv", "QGemm"} <= ops and "Conv" not in ops
    elif "quant_format" in options:
        assert {"QuantizeLinear", "DequantizeLinear", "Conv"} <= ops and "QLinearConv" not in ops
    else:
        assert {"DynamicQuantizeLinear", "ConvInteger", "MatMulInteger"} <= ops
    assert ev.accuracy is not None and ev.accuracy >= fp32.evaluation.accuracy - 0.01  # type: ignore[operator]
    assert ev.fidelity.top1_agreement >= 0.98


@pytest.mark.parametrize(
    ("mode", "options", "interface"),
    [
        ("static_int8", {"quant_format": "qoperator", "activation_type": "int8", "weight_type": "int8"}, "full"),
        ("static_int8", {"weight_type": "uint8", "reduce_range": True}, "core"),
        ("dynamic_int8", {"weight_type": "uint8", "reduce_range": True}, None),
    ],
)
def test_quantizer_options_reach_the_model(measured, mode: str, options: dict[str, object], interface) -> None:  # type: ignore[no-untyped-def]
    full = {o.name: o.default for o in runtimes.get("onnxruntime").options_for(QuantMode(mode))} | options
    result = measured(_config(mode, interface=interface, options=options))
    _check_options(result, measured(_config()), full)
    if interface == "full":  # the model's ends take the activations' type: int8 here
        io = result.artifact.io
        assert (io.input_dtype, io.output_dtype) == (full["activation_type"],) * 2
        graph = _graph(result.artifact)
        assert graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.INT8
        core = measured(_config(mode, options=options))
        assert result.evaluation.accuracy == core.evaluation.accuracy


@pytest.mark.slow
@pytest.mark.parametrize("interface", ["core", "full"])
@pytest.mark.parametrize("options", _STATIC_OPTIONS, ids=lambda o: "-".join(str(v) for v in o.values()))
def test_every_static_option_combination_converts_and_keeps_accuracy(measured, options, interface) -> None:  # type: ignore[no-untyped-def]
    result = measured(_config("static_int8", interface=interface, options=options))
    _check_options(result, measured(_config()), options)
    if interface == "full":
        assert result.artifact.io.input_dtype == options["activation_type"]


@pytest.mark.slow
@pytest.mark.parametrize("options", _DYNAMIC_OPTIONS, ids=lambda o: "-".join(str(v) for v in o.values()))
def test_every_dynamic_option_combination_converts_and_keeps_accuracy(measured, options) -> None:  # type: ignore[no-untyped-def]
    _check_options(measured(_config("dynamic_int8", options=options)), measured(_config()), options)


def test_float_layers_stay_float_in_qoperator_format(digits, ort_cache) -> None:  # type: ignore[no-untyped-def]
    options = {"quant_format": "qoperator"}
    config = _config("static_int8", granularity=Granularity.PER_TENSOR, options=options, float_layers=("classifier",))
    artifact, _ = deploy.convert(digits, config, ort_cache)
    ops = _ops(artifact)
    assert "QLinearConv" in ops and "QGemm" not in ops and "Gemm" in ops


def test_the_converter_keeps_the_activation_between_two_float_layers_float(gelu_between, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The converter's own path (not only the sensitivity recipe): with ``a`` and ``b`` float, no
    quantize/dequantize pair sits anywhere from ``a``'s output to ``b``'s input; ``c`` is int8."""
    from nnsweep.models import load_model, register_live
    from nnsweep.runtimes.onnxruntime.converter import OnnxRuntimeConverter

    bundle = load_model(register_live("gelu_between", gelu_between, torch.randn(1, 1, 8, 8)))
    config = _config("static_int8", granularity=Granularity.PER_TENSOR, float_layers=("a", "b"))
    result = OnnxRuntimeConverter().convert(bundle, config, tmp_path)
    graph = onnx.load(str(tmp_path / result.filename)).graph
    producer = {o: n for n in graph.node for o in n.output}
    conv_b = next(n for n in graph.node if n.op_type == "Conv" and n.name.startswith("b/"))
    seen, frontier = [], [conv_b.input[0]]  # walk back from b's input to a's output
    while frontier:
        node = producer.get(frontier.pop())
        if node is None or node.name.startswith("a/"):
            continue
        seen.append(node.op_type)
        frontier.extend(node.input)
    assert "Erf" in seen and not {"QuantizeLinear", "DequantizeLinear"} & set(seen)
    assert any(n.op_type == "DequantizeLinear" for n in graph.node)  # the rest is int8


class _Normed(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.fc(x)))


def test_a_layernorms_per_tensor_scale_is_a_debug_line_not_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # ORT's quantizer warns once per LayerNorm per quantization that its 1-D scale has no
    # channel axis, and quantizes it per tensor: a two-layer transformer printed 55 lines.
    from nnsweep.models import load_model, register_live
    from nnsweep.runtimes.common.float_fallback import ORT_PER_TENSOR_NOTE
    from nnsweep.runtimes.onnxruntime.converter import OnnxRuntimeConverter

    torch.manual_seed(0)
    bundle = load_model(register_live("normed", _Normed().eval(), torch.randn(1, 16)))
    caplog.set_level(logging.DEBUG)
    config = _config("static_int8", granularity=Granularity.PER_CHANNEL)
    OnnxRuntimeConverter().convert(bundle, config, tmp_path)
    notes = [r for r in caplog.records if ORT_PER_TENSOR_NOTE in r.getMessage()]
    assert notes and all(r.levelno == logging.DEBUG and r.name.startswith("nnsweep.") for r in notes)


class _Recurrent(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gru = torch.nn.GRU(6, 8, batch_first=True)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(x)
        return self.head(out[:, -1])


def test_an_rnns_flat_weights_are_not_an_export_warning(tmp_path: Path) -> None:
    # nn.GRU refreshes _flat_weights in forward: every exporter warned it "was assigned during
    # export" on every conversion and ranking of a recurrent model; torch restores it itself.
    import warnings

    from nnsweep.models import load_model, register_live
    from nnsweep.runtimes.common.converter import rnn_export_warning_silenced

    torch.manual_seed(0)
    bundle = load_model(register_live("recurrent", _Recurrent().eval(), torch.randn(1, 5, 6)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        artifact, _ = deploy.convert(bundle, _config(), ArtifactCache(tmp_path))
        with rnn_export_warning_silenced():  # any other attribute still warns
            warnings.warn("The tensor attribute self.cache was assigned during export.", UserWarning, stacklevel=1)
    assert artifact.path.exists()
    assert [str(w.message)[:60] for w in caught if "assigned during export" in str(w.message)] == [
        "The tensor attribute self.cache was assigned during export."
    ]


class _ThreeDimAttention(torch.nn.Module):
    """scaled_dot_product_attention on 3-D (batch, tokens, features) tensors: torch.onnx's
    translation takes only 4-D ones."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(8, 24)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, -1)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v).mean(1)


def test_attention_on_3d_tensors_exports_from_the_decomposed_program(tmp_path: Path) -> None:
    # torch.onnx refused it ("only 4D query, key, and value are supported"); the retry from
    # the program torch.export decomposes (nnsweep.runtimes.common.onnx_export) exports it.
    from nnsweep.models import load_model, register_live

    torch.manual_seed(0)
    bundle = load_model(register_live("attention3d", _ThreeDimAttention().eval(), torch.randn(1, 4, 8)))
    artifact, _ = deploy.convert(bundle, _config(), ArtifactCache(tmp_path))
    runner = OnnxRuntimeRunner(artifact.path, artifact.io, 1, ("cpu",))
    runner.load()
    x = bundle.dataset.evaluation.inputs[:4]
    with torch.no_grad():
        want = bundle.module(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(run_all(runner, x), want, rtol=1e-4, atol=1e-5)


class _InverseErf(torch.nn.Module):
    """``erfinv``: torch.onnx has no translation of it, decomposed or not."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.special.erfinv(torch.tanh(self.fc(x)) * 0.5)


def test_an_export_failure_names_its_cause_not_the_exporters_next_steps(tmp_path: Path) -> None:
    # torch.onnx's message starts "Failed to convert ... This is step 3/3 ... Next steps:" in
    # terminal colours; the cause is in its exception summary, many lines below. When the
    # retry fails too, the first failure is the one reported.
    from nnsweep.core.errors import ConversionError
    from nnsweep.models import load_model, register_live

    torch.manual_seed(0)
    bundle = load_model(register_live("erfinv", _InverseErf().eval(), torch.randn(1, 4, 8)))
    with pytest.raises(ConversionError) as caught:
        deploy.convert(bundle, _config(), ArtifactCache(tmp_path))
    reason = str(caught.value)
    assert "\x1b[" not in reason and "Next steps" not in reason
    assert "No ONNX function found for <OpOverload(op='prims.erf_inv'" in reason
    assert "\n" not in reason


def test_the_exporters_optimizer_notes_go_to_the_debug_log_and_errors_stay(caplog: pytest.LogCaptureFixture) -> None:
    # torch.onnx's passes warn when they skip a fold (an nn.EmbeddingBag printed three lines).
    import logging

    from nnsweep.runtimes.common.converter import package_warnings_to_debug_log

    log = logging.getLogger("nnsweep.test")
    folding = logging.getLogger("onnxscript.optimizer._constant_folding")
    with caplog.at_level("DEBUG"), package_warnings_to_debug_log(log, "onnxscript", "onnx_ir"):
        folding.warning("Skipping constant folding for op SequenceEmpty with multiple outputs.")
        folding.error("a real failure")
        logging.getLogger("nnsweep.other").warning("ours")
    folding.warning("after the block")
    seen = [(r.name, r.levelname, r.getMessage()) for r in caplog.records]
    assert seen == [
        (
            "nnsweep.test",
            "DEBUG",
            "onnxscript.optimizer._constant_folding: Skipping constant folding for op "
            "SequenceEmpty with multiple outputs.",
        ),
        ("onnxscript.optimizer._constant_folding", "ERROR", "a real failure"),
        ("nnsweep.other", "WARNING", "ours"),
        ("onnxscript.optimizer._constant_folding", "WARNING", "after the block"),
    ]


class _MaskedAttention(torch.nn.Module):
    """Causal attention scores masked with -inf before the softmax, as decoders mask them."""

    def __init__(self) -> None:
        super().__init__()
        self.q = torch.nn.Linear(16, 16)
        self.k = torch.nn.Linear(16, 16)
        self.head = torch.nn.Linear(16, 4)
        self.register_buffer("mask", torch.tril(torch.ones(8, 8, dtype=torch.bool)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = (self.q(x) @ self.k(x).transpose(1, 2) / 4.0).masked_fill(~self.mask, float("-inf"))
        return self.head((torch.softmax(scores, dim=-1) @ x).mean(dim=1))


def test_static_int8_leaves_float_what_a_mask_fills_with_minus_infinity(tmp_path: Path) -> None:
    # The calibrated range of the masked scores is [-inf, max]: quantized, their scale was
    # infinite and zero point NaN (numpy's "invalid value" warnings), and the deployment had
    # 0.7 dB against fp32. The PT2E runtimes leave the masking float and have 33 dB.
    from nnsweep.core.errors import ConversionError
    from nnsweep.models import load_model, register_live

    torch.manual_seed(0)
    bundle = load_model(register_live("masked_attention", _MaskedAttention().eval(), torch.randn(1, 8, 16)))
    cache = ArtifactCache(tmp_path)
    # 7-bit weights: on an x86 host without VNNI (AVX2 only), ORT's u8s8 kernels saturate their
    # int16 sums, which costs this model about 10 dB whatever the mask (ORT's own advice there)
    seven_bit = QuantConfig("static_int8", options={"reduce_range": True})
    artifact, hit = deploy.convert(bundle, DeploymentConfig("onnxruntime", quant=seven_bit), cache)
    result = deploy.measure(ModelSnapshot.of(bundle), artifact, MeasureSettings(warmup=1, iters=3), cache_hit=hit)
    assert result.evaluation.fidelity.sqnr_db > 25
    entropy = DeploymentConfig("onnxruntime", quant=QuantConfig("static_int8", calibration=Calibration.ENTROPY))
    with pytest.raises(ConversionError, match=r"^entropy calibration cannot make a histogram .*calibrate with minmax"):
        deploy.convert(bundle, entropy, cache)


class _SuperResolution(torch.nn.Module):
    """ESPCN-style: three convolutions with tanh between, then ``PixelShuffle`` (depth to space)."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(1, 32, 5, padding=2)
        self.c2 = torch.nn.Conv2d(32, 16, 3, padding=1)
        self.c3 = torch.nn.Conv2d(16, 4, 3, padding=1)
        self.shuffle = torch.nn.PixelShuffle(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.shuffle(self.c3(torch.tanh(self.c2(torch.tanh(self.c1(x))))))


def test_the_layer_ranking_scores_the_quantizers_arithmetic_not_the_hosts_int8_kernels(tmp_path: Path) -> None:
    # Run with its QDQ pairs fused, ONNX Runtime's int8 kernels entered the ranking. On an x86
    # host without VNNI their u8s8 sums saturate in int16: this model read 13 dB against fp32
    # whole-model int8 there (33 dB unfused) and the ranking put c2 first, where LiteRT's
    # (its quantized program in torch, on any host) puts c3. The two quantizers make the same
    # decisions here (asymmetric 8-bit activations, symmetric per-channel int8 weights, minmax),
    # so their rankings must agree on any host.
    from nnsweep.models import load_model, register_live
    from nnsweep.sensitivity.ranking import ranking

    torch.manual_seed(0)
    bundle = load_model(register_live("super_resolution", _SuperResolution().eval(), torch.randn(1, 1, 24, 24)))
    onnx_ranking, _ = ranking(bundle, "onnxruntime", Granularity.PER_CHANNEL, tmp_path)
    litert_ranking, _ = ranking(bundle, "litert", Granularity.PER_CHANNEL, tmp_path)
    assert onnx_ranking.ranked()[0] == litert_ranking.ranked()[0] == "c3"
    assert abs(onnx_ranking.whole_int8_sqnr - litert_ranking.whole_int8_sqnr) < 1.0
    litert_sqnr = {e.layer: e.quantize_one_sqnr for e in litert_ranking.layers}
    for entry in onnx_ranking.layers:
        assert abs(entry.quantize_one_sqnr - litert_sqnr[entry.layer]) < 1.0, entry


class _TableBias(torch.nn.Module):
    """A bias computed by a layer from a constant table alone (Swin's relative position
    bias): the ONNX exporter folds ``mlp`` into a constant, so no node comes from it."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(12, 16)
        self.mlp = torch.nn.Linear(2, 16)
        self.head = torch.nn.Linear(16, 4)
        self.register_buffer("table", torch.randn(5, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.fc(x) + self.mlp(self.table).mean(0)))


def test_a_layer_folded_into_a_constant_is_nothing_to_keep_float(tmp_path: Path) -> None:
    # It was refused: "no ONNX node comes from the module(s) mlp kept in float" (and the
    # layer ranking of such a model stopped there).
    from nnsweep.models import load_model, register_live
    from nnsweep.runtimes.onnxruntime.converter import OnnxRuntimeConverter

    torch.manual_seed(0)
    bundle = load_model(register_live("table_bias", _TableBias().eval(), torch.randn(1, 12)))
    config = _config("static_int8", float_layers=("mlp", "head"))
    result = OnnxRuntimeConverter().convert(bundle, config, tmp_path)
    graph = onnx.load(str(tmp_path / result.filename)).graph
    assert not [n for n in graph.node if n.name.startswith("mlp/")]
    head = [n for n in graph.node if n.name.startswith("head/")]
    assert head and not [n for n in head if n.op_type.startswith("QLinear") or n.op_type == "QGemm"]


def test_a_model_the_onnx_exporter_cannot_decompose_exports_from_the_decomposed_program(tmp_path: Path) -> None:
    """torch 2.14's ONNX exporter refused Hugging Face's Swin ("Failed to decompose the FX
    graph for ONNX compatibility ... Cannot view a tensor with shape"); the program
    ``torch.export`` decomposes exports."""
    pytest.importorskip("transformers")
    from nnsweep.models import load_model
    from nnsweep.runtimes.onnxruntime.converter import OnnxRuntimeConverter

    bundle = load_model(str(Path(__file__).parents[1] / "benchmarks" / "probe_hf.py") + ":swin")
    result = OnnxRuntimeConverter().convert(bundle, _config("fp32"), tmp_path)
    runner = OnnxRuntimeRunner(tmp_path / result.filename, result.io, 1, ("cpu",))
    runner.load()
    x = bundle.dataset.evaluation.inputs[:4]
    with torch.no_grad():
        want = bundle.module(torch.from_numpy(x))
    want = (want[0] if isinstance(want, tuple) else want).numpy()
    np.testing.assert_allclose(run_all(runner, x), want, rtol=1e-3, atol=1e-4)


class _AttentionBlock(torch.nn.Module):
    """A transformer block's linear layers on 3-D tensors: ONNX Runtime's MatMulAddFusion makes
    the feed-forward one a Gemm between two reshapes when the model is pre-processed."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.q, self.k, self.v, self.o, self.ff = (torch.nn.Linear(width, width) for _ in range(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        attention = torch.softmax(self.q(h) @ self.k(h).transpose(1, 2), dim=-1) @ self.v(h)
        return self.ff(self.o(attention) + h)


@pytest.mark.parametrize("mode", ["static_int8", "dynamic_int8"])
def test_float_linear_layers_on_3d_tensors_give_a_model_a_session_starts(tmp_path: Path, mode: str) -> None:
    # The session over the quantized model fused a float MatMul and Add again and named its
    # reshape's shape as the pre-processing had named one it kept ("gemm_input_shape"):
    # "Attempt to replace the existing tensor", and no session (Hugging Face's BERT).
    from nnsweep.models import load_model, register_live
    from nnsweep.runtimes.onnxruntime.converter import OnnxRuntimeConverter

    torch.manual_seed(0)
    bundle = load_model(register_live("attention_block", _AttentionBlock().eval(), torch.randn(1, 8, 16)))
    config = _config(mode, float_layers=("q", "k", "v", "o", "ff"))
    result = OnnxRuntimeConverter().convert(bundle, config, tmp_path)
    runner = OnnxRuntimeRunner(tmp_path / result.filename, result.io, 1, ("cpu",))
    runner.load()
    x = bundle.dataset.evaluation.inputs[:4]
    with torch.no_grad():
        want = bundle.module(torch.from_numpy(x)).numpy().reshape(len(x), -1)
    got = run_all(runner, x)
    sqnr_db = 10 * np.log10(np.sum(want**2) / np.sum((got - want) ** 2))
    assert sqnr_db > 30, sqnr_db  # every linear layer float: the int8 left is the LayerNorm's input
