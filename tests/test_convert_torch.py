"""Real PyTorch (TorchScript + quantized engine) conversions of digits, measured in a child process."""

from __future__ import annotations

import copy
import hashlib
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from nnsweep.artifacts import deploy
from nnsweep.artifacts.cache import ArtifactCache
from nnsweep.artifacts.deploy import DeploymentResult
from nnsweep.bench import MeasureSettings, evaluate
from nnsweep.bench._harness import run_all
from nnsweep.convert import IOSpec
from nnsweep.core.config import Calibration, DeploymentConfig, Granularity, Interface, QuantConfig, QuantMode
from nnsweep.core.errors import BenchmarkError
from nnsweep.models import ModelBundle, ModelSnapshot
from nnsweep.runtimes.common.fx import own_flow_sqnr_db
from nnsweep.runtimes.torch.runner import TorchScriptRunner, pick_engine

SETTINGS = MeasureSettings(warmup=1, iters=5)

FP32 = DeploymentConfig("torch")
FP16 = DeploymentConfig("torch", quant=QuantConfig(QuantMode.FP16))
DYNAMIC = DeploymentConfig("torch", ("x86",), QuantConfig(QuantMode.DYNAMIC_INT8))
STATIC_X86 = DeploymentConfig("torch", ("x86",), QuantConfig(QuantMode.STATIC_INT8, Granularity.PER_CHANNEL))
STATIC_X86_FULL = DeploymentConfig("torch", ("x86",), QuantConfig(QuantMode.STATIC_INT8, interface=Interface.FULL))
STATIC_QNNPACK = DeploymentConfig("torch", ("qnnpack",), QuantConfig(QuantMode.STATIC_INT8, Granularity.PER_TENSOR))
QAT = DeploymentConfig("torch", ("x86",), QuantConfig(QuantMode.QAT_INT8, qat_epochs=1))


class _Measured:
    """Each configuration converted and measured once for the whole module."""

    def __init__(self, bundle: ModelBundle, cache: ArtifactCache) -> None:
        self.bundle = bundle
        self.cache = cache
        self.snapshot = ModelSnapshot.of(bundle)
        self._results: dict[DeploymentConfig, DeploymentResult] = {}

    def __call__(self, config: DeploymentConfig) -> DeploymentResult:
        if config not in self._results:
            artifact, _ = deploy.convert(self.bundle, config, self.cache)
            self._results[config] = deploy.measure(self.snapshot, artifact, SETTINGS)
        return self._results[config]


@pytest.fixture(scope="module")
def measured(digits: ModelBundle, tmp_path_factory: pytest.TempPathFactory) -> _Measured:
    return _Measured(digits, ArtifactCache(tmp_path_factory.mktemp("torch") / "cache"))


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    """Convert with one intra-op thread: on this 2-core machine, two OpenMP threads next to any other
    busy process spin and make QAT fine-tuning 5-10x slower. The measuring processes set their own."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _restore_quantized_engine() -> Iterator[None]:
    """Runners loaded in this process select the engine, as they do in their own measuring process."""
    engine = torch.backends.quantized.engine
    yield
    torch.backends.quantized.engine = engine


def _accuracy(result: DeploymentResult) -> float:
    accuracy = result.evaluation.accuracy
    if accuracy is None:
        raise AssertionError("digits has labels: accuracy must be measured")
    return accuracy


def test_pick_engine_takes_the_first_supported_and_names_the_skipped() -> None:
    # Every engine of the order is supported by this build, so fall-through is shown with a given list.
    assert pick_engine(["qnnpack", "x86"], supported=["x86", "fbgemm"]) == ("x86", ("qnnpack",))
    assert pick_engine(["onednn", "qnnpack"], supported=["x86"]) == (None, ("onednn", "qnnpack"))
    assert pick_engine([], supported=["x86"]) == (None, ())
    assert pick_engine(["x86"]) == ("x86", ())  # this x86 build has the x86 engine


@pytest.mark.parametrize(
    "config", [FP32, FP16, DYNAMIC, STATIC_X86, QAT], ids=["fp32", "fp16", "dynamic", "static", "qat"]
)
def test_each_mode_converts_and_runs(measured: _Measured, config: DeploymentConfig) -> None:
    result = measured(config)
    fp32 = measured(FP32)
    assert result.artifact.path.name == "model.pt"
    assert result.timing.latency.count == SETTINGS.iters and result.timing.latency.p50 > 0
    assert result.evaluation.samples == len(measured.bundle.dataset.evaluation.inputs)
    assert _accuracy(result) >= _accuracy(fp32) - 0.02
    # fp16 and int8 weights make the file smaller; dynamic int8 only quantizes the one Linear layer.
    if config is not FP32 and config is not DYNAMIC:
        assert result.artifact.size_bytes < 0.7 * fp32.artifact.size_bytes


def test_fp32_is_the_eager_model(measured: _Measured) -> None:
    result = measured(FP32)
    assert _accuracy(result) >= 0.95
    # Freezing folds BatchNorm into the convolutions: equal up to float rounding.
    assert result.evaluation.fidelity.max_abs_err < 1e-4
    assert result.evaluation.fidelity.top1_agreement == 1.0


def test_fp16_keeps_a_float32_interface(measured: _Measured) -> None:
    result = measured(FP16)
    assert result.artifact.io.input_dtype == "float32" and result.artifact.io.output_dtype == "float32"
    # Half precision is far closer to fp32 than int8 (about 58 dB on digits), yet not identical.
    assert 40 < result.evaluation.fidelity.sqnr_db < 100


def test_static_int8_per_channel_x86_within_one_point_of_fp32(measured: _Measured) -> None:
    result = measured(STATIC_X86)
    assert _accuracy(result) >= _accuracy(measured(FP32)) - 0.01
    assert 20 < result.evaluation.fidelity.sqnr_db < 60


@pytest.mark.slow
def test_static_int8_qnnpack_per_tensor_keeps_accuracy_with_plain_relu(measured: _Measured) -> None:
    # digits uses ReLU, which QNNPACK gets right on x86 (its conv + ReLU6 is not: see the ReLU6 test below).
    result = measured(STATIC_QNNPACK)
    assert _accuracy(result) >= _accuracy(measured(FP32)) - 0.01
    assert result.artifact.partitions.nodes_by_backend.get("qnnpack", 0) > 0


def test_full_interface_takes_quint8_and_matches_core(measured: _Measured) -> None:
    core, full = measured(STATIC_X86), measured(STATIC_X86_FULL)
    io = full.artifact.io
    assert (io.input_dtype, io.output_dtype) == ("uint8", "uint8")
    assert io.input_scale and io.output_scale and io.input_zero_point is not None
    assert full.evaluation.accuracy == core.evaluation.accuracy
    assert full.evaluation.fidelity.sqnr_db == pytest.approx(core.evaluation.fidelity.sqnr_db, abs=0.01)
    # Stripping the boundary removes exactly the input quantize and the output dequantize.
    assert "cpu" not in full.artifact.partitions.nodes_by_backend
    assert core.artifact.partitions.nodes_by_backend["cpu"] == 2


def _layers(module: nn.Module) -> tuple[int, int]:
    convs = sum(isinstance(m, nn.Conv2d) for m in module.modules())
    linears = sum(isinstance(m, nn.Linear) for m in module.modules())
    return convs, linears


def test_partition_report_counts_quantized_and_float_ops(measured: _Measured) -> None:
    convs, linears = _layers(measured.bundle.module)
    # digits: conv-bn-relu blocks, then average pooling, flatten and a Linear classifier.
    fp32 = measured(FP32).artifact.partitions
    assert fp32.nodes_by_backend == {"cpu": 2 * convs + 2 + linears}  # BatchNorm folded away by freezing
    assert fp32.fallback_ops == {} and fp32.partitions == ()

    static = measured(STATIC_X86).artifact.partitions
    # conv+bn+relu fuse into one quantized::conv2d_relu each; pooling and flatten run on quantized tensors.
    assert static.nodes_by_backend == {"x86": convs + linears + 2, "cpu": 2}
    assert static.fallback_ops == {} and static.partitions == ()

    dynamic = measured(DYNAMIC).artifact.partitions
    assert dynamic.nodes_by_backend["x86"] == linears  # quantized::linear_dynamic
    assert dynamic.fallback_ops["aten::_convolution"] == convs  # dynamic quantization leaves convolutions float
    assert dynamic.fallback_ops["aten::relu"] == convs


def test_qat_per_channel_keeps_accuracy(measured: _Measured) -> None:
    result = measured(QAT)
    assert _accuracy(result) >= _accuracy(measured(FP32)) - 0.01
    assert result.artifact.partitions.nodes_by_backend["x86"] > 0


def test_runner_refuses_an_artifact_quantized_for_another_engine(measured: _Measured) -> None:
    artifact, _ = deploy.convert(measured.bundle, STATIC_QNNPACK, measured.cache)
    runner = TorchScriptRunner(artifact.path, artifact.io, 1, ("x86",))
    with pytest.raises(BenchmarkError, match="quantized for the qnnpack engine"):
        runner.load()


def test_runner_reports_an_unloadable_artifact(tmp_path: Path) -> None:
    path = tmp_path / "model.pt"
    path.write_bytes(b"not a TorchScript archive")
    with pytest.raises(BenchmarkError, match=r"cannot load model\.pt"):
        TorchScriptRunner(path, IOSpec(), 1, ()).load()
    with pytest.raises(BenchmarkError, match="only on Android"):
        TorchScriptRunner(path, IOSpec(), 1, ("nnapi",)).load()


def test_nnapi_conversion_writes_a_lite_interpreter_model(digits: ModelBundle, cache: ArtifactCache) -> None:
    config = DeploymentConfig("torch", ("nnapi",), QuantConfig(QuantMode.STATIC_INT8, Granularity.PER_TENSOR))
    artifact, _ = deploy.convert(digits, config, cache)
    assert artifact.path.name == "model.ptl" and artifact.size_bytes > 0
    assert artifact.partitions.count == 1 and artifact.partitions.partitions[0].backend == "nnapi"


@pytest.mark.slow
@pytest.mark.parametrize(
    "config",
    [
        DeploymentConfig("torch", ("x86",), QuantConfig(QuantMode.STATIC_INT8, calibration=Calibration.HISTOGRAM)),
        DeploymentConfig("torch", ("x86",), QuantConfig(QuantMode.STATIC_INT8, Granularity.PER_TENSOR)),
        DeploymentConfig("torch", ("qnnpack",), QuantConfig(QuantMode.STATIC_INT8, Granularity.PER_CHANNEL)),
        DeploymentConfig("torch", ("fbgemm",), QuantConfig(QuantMode.STATIC_INT8)),
        DeploymentConfig("torch", ("onednn",), QuantConfig(QuantMode.STATIC_INT8)),
        DeploymentConfig("torch", ("x86",), QuantConfig(QuantMode.QAT_INT8, Granularity.PER_TENSOR)),
        DeploymentConfig("torch", ("qnnpack",), QuantConfig(QuantMode.QAT_INT8, interface=Interface.FULL)),
        DeploymentConfig("torch", ("x86",), QuantConfig(QuantMode.DYNAMIC_INT8, Granularity.PER_TENSOR)),
    ],
    ids=lambda c: c.label(),
)
def test_more_int8_variants_keep_accuracy(measured: _Measured, config: DeploymentConfig) -> None:
    result = measured(config)
    assert _accuracy(result) >= _accuracy(measured(FP32)) - 0.01
    engine = config.backends[0]
    assert result.artifact.partitions.nodes_by_backend[engine] > 0


def _with_relu6(bundle: ModelBundle) -> ModelBundle:
    """The trained digits net with each ReLU replaced by ReLU6 (its activations stay below 6: same accuracy)."""
    module = copy.deepcopy(bundle.module)
    for parent in list(module.modules()):
        for name, child in parent.named_children():
            if isinstance(child, nn.ReLU):
                setattr(parent, name, nn.ReLU6())
    name = f"{bundle.name}-relu6"
    digest = hashlib.sha256(f"{bundle.digest}:relu6".encode()).hexdigest()  # ReLU6 has no weights to tell it apart
    return ModelBundle(name, module, bundle.example_input, bundle.dataset, digest)


def test_qnnpack_conv_relu6_is_visibly_broken_on_x86(digits: ModelBundle, cache: ArtifactCache) -> None:
    """QNNPACK's conv + ReLU6 is numerically wrong on x86 (docs/explanation/architecture.md §5):
    accuracy and fidelity show it."""
    bundle = _with_relu6(digits)
    reference = ModelSnapshot.of(bundle).reference
    labels = bundle.dataset.evaluation.labels
    sqnr, accuracy = {}, {}
    for engine in ("x86", "qnnpack"):
        config = DeploymentConfig("torch", (engine,), QuantConfig(QuantMode.STATIC_INT8, Granularity.PER_TENSOR))
        artifact, _ = deploy.convert(bundle, config, cache)
        runner = TorchScriptRunner(artifact.path, artifact.io, 1, config.backends)
        runner.load()
        result = evaluate(run_all(runner, bundle.dataset.evaluation.inputs), reference, labels)
        sqnr[engine], accuracy[engine] = result.fidelity.sqnr_db, result.accuracy or 0.0
    assert sqnr["x86"] > 20 and accuracy["x86"] > 0.95
    # Measured here: about 0.5 dB and chance-level top-1 (10 %). Not hidden: a sweep's accuracy gate must catch it.
    assert sqnr["qnnpack"] < 5 and accuracy["qnnpack"] < 0.5


@pytest.mark.slow
def test_torchvision_mobilenet_v2_quantizes_whole_on_x86(tmp_path: Path) -> None:
    from nnsweep.models import load_model

    bundle = load_model("torchvision:mobilenet_v2")
    config = DeploymentConfig("torch", ("x86",), QuantConfig(QuantMode.STATIC_INT8))
    artifact, _ = deploy.convert(bundle, config, ArtifactCache(tmp_path / "cache"))
    convs, linears = _layers(bundle.module)
    report = artifact.partitions
    # Every conv (ReLU6 folded in as a quantized clamp or fused), residual add, pooling and the classifier run int8.
    assert report.nodes_by_backend["x86"] >= convs + linears and report.nodes_by_backend["cpu"] == 2
    assert report.fallback_ops == {}
    result = deploy.measure(ModelSnapshot.of(bundle), artifact, SETTINGS)
    assert result.evaluation.accuracy is None  # torchvision nets come with synthetic, unlabelled data
    assert result.timing.latency.count == SETTINGS.iters


class _TinyEncoder(nn.Module):
    """nn.TransformerEncoder as users write it (batch first, eval): its layers take the
    inference fast path, and its attention keeps its out_proj as a float Linear."""

    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x).mean(dim=1))


# The attention slow path compares a traced shape with an int (embed_dim): a constant either way.
@pytest.mark.filterwarnings("ignore:Converting a tensor to a Python boolean:torch.jit.TracerWarning")
def _assert_deployed_matches_eager(bundle: ModelBundle, artifact: Path, atol: float) -> None:
    """The traced artifact, one sample a call, gives the eager model's outputs on 4 inputs."""
    deployed = torch.jit.load(str(artifact))
    x = torch.from_numpy(bundle.dataset.evaluation.inputs[:4])
    with torch.no_grad():
        expected = bundle.module(x)
        got = torch.cat([deployed(sample[None]) for sample in x])
    assert torch.allclose(got, expected, atol=atol)


def test_dynamic_int8_converts_a_transformer_encoder(tmp_path: Path) -> None:
    from nnsweep.models import load_model, register_live
    from nnsweep.runtimes.torch.converter import TorchConverter

    torch.manual_seed(0)
    bundle = load_model(register_live("tiny_encoder", _TinyEncoder().eval(), torch.randn(1, 8, 16)))
    result = TorchConverter().convert(bundle, DYNAMIC, tmp_path)
    assert torch.backends.mha.get_fastpath_enabled()  # switched off for the trace only
    # linear1 and linear2 of both layers and the head; attention's out_proj stays float
    assert result.partitions.nodes_by_backend["x86"] == 5
    _assert_deployed_matches_eager(bundle, tmp_path / result.filename, atol=0.05)


def test_static_int8_converts_a_layernorm_traced_through_as_convnext_has(tmp_path: Path) -> None:
    # torchvision's LayerNorm2d (an nn.LayerNorm subclass that permutes) is traced through:
    # its quantized layer_norm takes the weight as a get_attr of a dotted path, which the
    # scale inlining read with getattr ("'GraphModule' object has no attribute 'norm.weight'").
    from torchvision.models.convnext import LayerNorm2d

    from nnsweep.models import load_model, register_live
    from nnsweep.runtimes.torch.converter import TorchConverter

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3), LayerNorm2d(8), nn.Flatten(), nn.Linear(8 * 6 * 6, 4)).eval()
    bundle = load_model(register_live("layernorm2d", net, torch.randn(1, 3, 8, 8)))
    result = TorchConverter().convert(bundle, STATIC_X86, tmp_path)
    _assert_deployed_matches_eager(bundle, tmp_path / result.filename, atol=0.1)


def _padded_by_name(padding: str) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=padding), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=padding, dilation=2, groups=8)
    )


@pytest.mark.parametrize("padding", ["same", "valid"])
def test_padding_named_by_a_string_is_written_as_its_numbers(padding: str) -> None:
    from nnsweep.runtimes.common.fx import explicit_conv_padding

    torch.manual_seed(0)
    net, x = _padded_by_name(padding).eval(), torch.randn(1, 3, 10, 10)
    copy_ = copy.deepcopy(net)
    assert explicit_conv_padding(copy_) == 2
    assert [m.padding for m in copy_ if isinstance(m, nn.Conv2d)] == (
        [(1, 1), (2, 2)] if padding == "same" else [(0, 0), (0, 0)]
    )
    with torch.no_grad():
        torch.testing.assert_close(copy_(x), net(x), rtol=0, atol=0)
    even = nn.Conv2d(3, 8, 2, padding="same")  # pads one side more: left as it is
    assert explicit_conv_padding(even) == 0 and even.padding == "same"


@pytest.mark.parametrize("padding", ["same", "valid"])
def test_static_int8_converts_convolutions_padded_by_name(tmp_path: Path, padding: str) -> None:
    # The string reached the prepacking: "quantized::conv2d_prepack() Expected a value of
    # type 'List[int]' for argument 'padding' but instead found type 'tuple'".
    from nnsweep.models import load_model, register_live
    from nnsweep.runtimes.torch.converter import TorchConverter

    torch.manual_seed(0)
    net = nn.Sequential(_padded_by_name(padding), nn.Flatten(), nn.LazyLinear(4))
    net(torch.randn(1, 3, 10, 10))  # the lazy layer takes its shape
    bundle = load_model(register_live(f"padded_{padding}", net.eval(), torch.randn(1, 3, 10, 10)))
    result = TorchConverter().convert(bundle, STATIC_X86, tmp_path)
    _assert_deployed_matches_eager(bundle, tmp_path / result.filename, atol=0.1)


@pytest.mark.filterwarnings("ignore:Please use quant_min and quant_max:UserWarning")  # torch's default mapping
def test_static_int8_refuses_a_prelu_while_torchs_own_int8_prelu_is_wrong(tmp_path: Path) -> None:
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    from nnsweep.core.errors import ConversionError
    from nnsweep.models import load_model, register_live
    from nnsweep.runtimes.torch.converter import TorchConverter
    from nnsweep.sensitivity.ranking import ranking

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.PReLU(16), nn.Conv2d(16, 12, 3, padding=1)).eval()
    x = torch.randn(32, 3, 16, 16)
    # torch's own flow, its default mapping: when this passes 20 dB, the refusal can go
    prepared = prepare_fx(copy.deepcopy(net), get_default_qconfig_mapping("x86"), (x[:1],))
    prepared(x)
    with torch.no_grad():
        noise = (convert_fx(prepared)(x) - net(x)).pow(2).mean()
        assert 10 * torch.log10(net(x).pow(2).mean() / noise) < 10
    bundle = load_model(register_live("prelu", net, x[:1]))
    with pytest.raises(
        ConversionError, match=r"int8 PReLU computes wrong values .*: 1; deploy this model with another"
    ):
        TorchConverter().convert(bundle, STATIC_X86, tmp_path)
    with pytest.raises(ConversionError, match=r"int8 PReLU computes wrong values"):  # nor ranked through it
        ranking(bundle, "torch", Granularity.PER_CHANNEL, tmp_path)


class _ShapeLoop(nn.Module):
    """A model torch.fx cannot trace: it iterates over its input's shape, as
    ``F.affine_grid(theta, list(x.shape))`` in a spatial transformer does."""

    def __init__(self) -> None:
        super().__init__()
        self.inp, self.mid, self.head = nn.Linear(6, 16), nn.Linear(16, 16), nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = 1.0
        for size in x.shape[1:]:
            scale = scale / size
        return self.head(torch.relu(self.mid(torch.relu(self.inp(x * scale)))))  # type: ignore[no-any-return]


def test_a_model_fx_cannot_trace_is_ranked_through_dynamic_int8(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Before, the ranking (torch.ao FX) refused it, and so did `--quant dynamic_int8
    # --float-layers K`, though torch's dynamic int8 converts it (quantize_dynamic is eager).
    from nnsweep.models import load_model, register_live
    from nnsweep.runtimes.torch.converter import TorchConverter
    from nnsweep.sensitivity.ranking import cached_ranking, ranking

    torch.manual_seed(0)
    bundle = load_model(register_live("shape_loop", _ShapeLoop().eval(), torch.randn(1, 6)))
    with caplog.at_level("WARNING"):
        report, _ = ranking(bundle, "torch", Granularity.PER_CHANNEL, tmp_path)
    assert "torch.fx cannot trace this model" in caplog.text
    assert report.mode == "dynamic_int8" and sorted(report.ranked()) == ["head", "inp", "mid"]
    assert not any(e.inert for e in report.layers)  # each linear layer is quantized: its int8 shows
    kept = cached_ranking(bundle.digest, "torch", Granularity.PER_CHANNEL, tmp_path)
    assert kept is not None and kept.mode == "dynamic_int8"
    first = report.ranked()[0]
    quant = QuantConfig(mode=QuantMode.DYNAMIC_INT8, granularity=Granularity.PER_CHANNEL, float_layers=(first,))
    config = DeploymentConfig("torch", ("x86",), quant)
    result = TorchConverter().convert(bundle, config, tmp_path)
    assert result.partitions.nodes_by_backend["x86"] == 2  # the two other linear layers
    _assert_deployed_matches_eager(bundle, tmp_path / result.filename, atol=0.05)


def _upsampler(kernel: int | tuple[int, int], padding: int = 0) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.ConvTranspose2d(16, 16, kernel, stride=2, padding=padding)).eval()


@pytest.mark.parametrize("engine", ["x86", "fbgemm"])
def test_the_transposed_convolution_probe_agrees_with_torchs_own_flow_on_this_cpu(engine: str) -> None:
    # The fault is the CPU's code path: torch 2.14's x86 engine computed a two-row kernel at
    # -13 to -17 dB on one x86 CPU (no AVX-512 VNNI) and at 31 dB on another (an AMD EPYC
    # with it), where fbgemm was wrong on both; on the EPYC, x86 was wrong for every layer
    # whose channels change (1-D too). The probe tells this machine's case.
    from nnsweep.runtimes.common.fx import _shape, conv_transpose_probe_db

    x = torch.randn(8, 16, 8, 8)
    for kernel in (2, (2, 3)):
        layer = _upsampler(kernel)
        assert (conv_transpose_probe_db(engine, _shape(layer[0])) < 10) == (own_flow_sqnr_db(layer, x, engine) < 10)
    for layer, signal in [
        (nn.ConvTranspose2d(16, 8, 3, stride=2, padding=1), x),
        (nn.ConvTranspose2d(16, 16, 4, stride=2, padding=1, groups=4), x),
        (nn.ConvTranspose1d(16, 8, 8, stride=4, padding=2), torch.randn(8, 16, 16)),
    ]:
        net = nn.Sequential(layer).eval()
        assert (conv_transpose_probe_db(engine, _shape(layer)) < 10) == (own_flow_sqnr_db(net, signal, engine) < 10)
    assert own_flow_sqnr_db(_upsampler(2), x, "qnnpack") > 30  # what the refusal points to, on any CPU


def _decoder(out_channels: int = 8) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    up = nn.ConvTranspose2d(16, out_channels, 2, stride=2)
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), up).eval(), torch.randn(1, 3, 8, 8)


def test_where_the_probe_fails_static_int8_refuses_a_two_row_transposed_convolution_unless_kept_float(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nnsweep.core.errors import ConversionError
    from nnsweep.models import load_model, register_live
    from nnsweep.runtimes.common import fx
    from nnsweep.runtimes.torch.converter import TorchConverter

    monkeypatch.setattr(fx, "conv_transpose_probe_db", lambda engine, shape: -14.0)  # a CPU that gets it wrong
    bundle = load_model(register_live("upsampler", *_decoder()))
    for name in ("refused", "kept", "qnnpack"):
        (tmp_path / name).mkdir()
    with pytest.raises(
        ConversionError,
        match=r"x86 int8 transposed convolution computes wrong values on this CPU .*: 2; keep them float",
    ):
        TorchConverter().convert(bundle, STATIC_X86, tmp_path / "refused")
    kept = QuantConfig(QuantMode.STATIC_INT8, Granularity.PER_CHANNEL, float_layers=("2",))
    TorchConverter().convert(bundle, DeploymentConfig("torch", ("x86",), kept), tmp_path / "kept")
    TorchConverter().convert(bundle, STATIC_QNNPACK, tmp_path / "qnnpack")
    monkeypatch.setattr(fx, "conv_transpose_probe_db", lambda engine, shape: 31.0)  # a CPU that gets it right
    assert fx.wrong_conv_transposes(bundle.module, "x86") == []


@pytest.mark.parametrize("out_channels", [8, 16])  # on an AMD EPYC with VNNI, x86 was wrong for 8, right for 16
def test_on_this_cpu_a_two_row_transposed_convolution_is_refused_exactly_where_its_kernel_is_wrong(
    out_channels: int, tmp_path: Path
) -> None:
    from nnsweep.core.errors import ConversionError
    from nnsweep.models import load_model, register_live
    from nnsweep.runtimes.common.fx import _shape, conv_transpose_probe_db
    from nnsweep.runtimes.torch.converter import TorchConverter
    from nnsweep.sensitivity.ranking import ranking

    net, example = _decoder(out_channels)
    bundle = load_model(register_live(f"upsampler_{out_channels}", net, example))
    if conv_transpose_probe_db("x86", _shape(net[2])) < 10:
        with pytest.raises(ConversionError, match=r"computes wrong values on this CPU"):
            TorchConverter().convert(bundle, STATIC_X86, tmp_path)
        # the ranking scores such a layer through the kernels (their damage) and puts it first
        report, _ = ranking(bundle, "torch", Granularity.PER_CHANNEL, tmp_path / "ranking")
        assert report.ranked()[0] == "2"
    else:
        TorchConverter().convert(bundle, STATIC_X86, tmp_path)
        ts = torch.jit.load(str(tmp_path / "model.pt"))
        x = torch.randn(8, 3, 8, 8)
        with torch.no_grad():
            noise = (ts(x) - net(x)).pow(2).mean()
            assert 10 * torch.log10(net(x).pow(2).mean() / noise) > 20


@pytest.mark.parametrize(
    "up",
    [
        nn.ConvTranspose1d(16, 8, 8, stride=4, padding=2),  # an audio decoder's: x86 wrong on an EPYC with VNNI
        nn.ConvTranspose2d(16, 8, 3, stride=2, padding=1),
    ],
    ids=["1d", "2d_3x3"],
)
def test_on_this_cpu_any_transposed_convolution_is_refused_exactly_where_its_kernel_is_wrong(
    up: nn.Module, tmp_path: Path
) -> None:
    from nnsweep.core.errors import ConversionError
    from nnsweep.models import load_model, register_live
    from nnsweep.runtimes.common.fx import _shape, conv_transpose_probe_db
    from nnsweep.runtimes.torch.converter import TorchConverter

    torch.manual_seed(0)
    conv = nn.Conv1d(4, 16, 3, padding=1) if isinstance(up, nn.ConvTranspose1d) else nn.Conv2d(4, 16, 3, padding=1)
    net = nn.Sequential(conv, nn.ReLU(), up).eval()
    example = torch.randn(1, 4, 16) if isinstance(up, nn.ConvTranspose1d) else torch.randn(1, 4, 8, 8)
    bundle = load_model(register_live(f"transposed_{type(up).__name__}", net, example))
    if conv_transpose_probe_db("x86", _shape(up)) < 10:
        with pytest.raises(ConversionError, match=r"transposed convolution computes wrong values on this CPU .*: 2;"):
            TorchConverter().convert(bundle, STATIC_X86, tmp_path)
    else:
        TorchConverter().convert(bundle, STATIC_X86, tmp_path)
    kept = QuantConfig(QuantMode.STATIC_INT8, Granularity.PER_CHANNEL, float_layers=("2",))
    (tmp_path / "kept").mkdir()
    TorchConverter().convert(bundle, DeploymentConfig("torch", ("x86",), kept), tmp_path / "kept")
    ts = torch.jit.load(str(tmp_path / "kept" / "model.pt"))
    x = torch.randn(8, *example.shape[1:])
    with torch.no_grad():
        noise = (ts(x) - net(x)).pow(2).mean()
        assert 10 * torch.log10(net(x).pow(2).mean() / noise) > 20


def test_the_layer_ranking_scores_the_quantizers_arithmetic_not_the_hosts_int8_kernels(tmp_path: Path) -> None:
    # torch's x86 qconfig gives activations 7 bits against the u8s8 kernels' int16 saturation on
    # x86 CPUs without VNNI, but a tanh's output keeps its fixed full 8-bit range, and the next
    # convolution saturated there: this model read 14.6 dB against fp32 whole-model int8 through
    # the kernels on such a host, 26.6 dB on FX's reference model (the quantizer's arithmetic),
    # which the ranking now scores on every host.
    from nnsweep.models import load_model, register_live
    from nnsweep.sensitivity.ranking import ranking

    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(1, 32, 5, padding=2),
        nn.Tanh(),
        nn.Conv2d(32, 16, 3, padding=1),
        nn.Tanh(),
        nn.Conv2d(16, 4, 3, padding=1),
    ).eval()
    bundle = load_model(register_live("tanh_convolutions", net, torch.randn(1, 1, 24, 24)))
    report, _ = ranking(bundle, "torch", Granularity.PER_CHANNEL, tmp_path)
    assert report.whole_int8_sqnr > 22, report


@pytest.mark.parametrize("mode", [QuantMode.STATIC_INT8, QuantMode.QAT_INT8])
@pytest.mark.parametrize("engine", ["x86", "fbgemm", "qnnpack", "onednn"])
def test_each_engine_mapping_builds_silently_with_our_global_qconfig(engine: str, mode: QuantMode) -> None:
    """torch warns about oneDNN's default qconfig on a host without VNNI (AVX2-only EPYC): that host is
    the converter, not the target, and that default is replaced by ours, so the mapping says nothing."""
    from nnsweep.runtimes.common.fx import qconfig_mapping

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mapping = qconfig_mapping(engine, QuantConfig(mode))
    assert [str(w.message) for w in caught] == []
    activation = mapping.global_qconfig.activation()
    activation = getattr(activation, "activation_post_process", activation)  # QAT: the fake-quant's observer
    assert activation.quant_max == (127 if engine in ("x86", "fbgemm") else 255)


@pytest.mark.parametrize("calibration", [Calibration.MINMAX, Calibration.HISTOGRAM])
@pytest.mark.parametrize("engine", ["x86", "qnnpack"])
def test_layernorm_and_transposed_convolutions_calibrate_as_asked_and_silently(
    engine: str, calibration: Calibration
) -> None:
    """The engine's mapping gave LayerNorm, transposed convolutions and PReLU a histogram
    observer built with ``reduce_range``, whatever the calibration: a warning per such op
    (a two-layer transformer printed eleven) and, for minmax, another method on those ops."""
    from torch.ao.quantization.observer import HistogramObserver, MinMaxObserver
    from torch.ao.quantization.quantize_fx import prepare_fx

    from nnsweep.runtimes.common.fx import qconfig_mapping

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = nn.ConvTranspose2d(2, 2, 2, stride=2)
            self.act = nn.PReLU()
            self.norm = nn.LayerNorm(8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.sigmoid(self.norm(self.act(self.up(x))))

    quant = QuantConfig(QuantMode.STATIC_INT8, calibration=calibration)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        graph = prepare_fx(Block().eval(), qconfig_mapping(engine, quant), (torch.randn(1, 2, 4, 4),))
    assert [str(w.message) for w in caught if "reduce_range" in str(w.message)] == []
    asked = HistogramObserver if calibration is Calibration.HISTOGRAM else MinMaxObserver
    observed = {type(m) for name, m in graph.named_modules() if "activation_post_process" in name}
    assert asked in observed
    assert observed - {asked} <= {torch.ao.quantization.observer.FixedQParamsObserver}  # the sigmoid's


_CONVERT = """
import warnings
import torch
from torch import nn
from torch.ao.quantization import get_default_qconfig_mapping
from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx
from nnsweep.runtimes.common.fx import convert_quietly

warnings.simplefilter("always")
model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU()).eval()
example = (torch.randn(1, 1, 8, 8),)
graph = prepare_fx(model, get_default_qconfig_mapping("x86"), example)
graph(*example)
converted = {convert}(graph)
assert converted(*example).shape == (1, 2, 6, 6)
"""


@pytest.mark.slow
def test_converting_says_nothing_of_torchs_quantized_tensor_deprecation() -> None:
    # torch 2.14 warns when convert_fx builds a quantized module (once per process, from C++:
    # a fresh process each); every `nnsweep run`, bench and ranking through torch printed it
    import subprocess
    import sys

    def stderr_of(convert: str) -> str:
        script = _CONVERT.replace("{convert}", convert)
        return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stderr

    deprecation = "quantized tensor creation functions"
    assert deprecation in stderr_of("convert_fx")  # the warning this is about, still there
    assert deprecation not in stderr_of("convert_quietly")
    # the layer ranking runs FX's reference model, which quantizes tensors as it runs
    ranking = subprocess.run([sys.executable, "-c", _RANKING], capture_output=True, text=True, check=True)
    assert deprecation not in ranking.stderr and ranking.stdout.strip() == "0", ranking.stderr


_RANKING = """
import tempfile, warnings
from pathlib import Path
import torch
from torch import nn
from nnsweep.core.config import Granularity
from nnsweep.models import load_model, register_live
from nnsweep.sensitivity.ranking import ranking

warnings.simplefilter("always")
net = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Conv2d(2, 2, 3)).eval()
bundle = load_model(register_live("two_convolutions", net, torch.randn(1, 1, 8, 8)))
with tempfile.TemporaryDirectory() as cache:
    report, _ = ranking(bundle, "torch", Granularity.PER_CHANNEL, Path(cache))
print(len(report.ranked()) - 2)
"""


_DYNAMIC = """
import warnings
import torch
from torch import nn
from nnsweep.runtimes.torch.converter import TorchConverter
from nnsweep.core.config import DeploymentConfig, QuantConfig, QuantMode
from nnsweep.models import load_model, register_live

warnings.simplefilter("always")
mlp = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)).eval()
bundle = load_model(register_live("mlp", mlp, torch.randn(1, 8)))
config = DeploymentConfig("torch", ("x86",), QuantConfig(QuantMode.DYNAMIC_INT8))
TorchConverter().convert(bundle, config, __import__("pathlib").Path({out!r}))
"""


def test_dynamic_int8_says_nothing_of_torchs_quantized_tensor_deprecation(tmp_path: Path) -> None:
    # quantize_dynamic builds quantized Linears too: `bench --quant dynamic_int8` printed it
    import subprocess
    import sys

    script = _DYNAMIC.replace("{out!r}", repr(str(tmp_path)))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert (tmp_path / "model.pt").exists()
    assert "quantized tensor creation functions" not in done.stderr


def test_a_trace_that_keeps_one_branch_says_so_and_its_fidelity_shows_it(branch_on_the_sum, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # TorchScript's trace records the branch the example input took; the fp32 reference is
    # each sample's own output (takes_batches), so the inputs of the other branch disagree.
    bundle = branch_on_the_sum
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        artifact, hit = deploy.convert(bundle, DeploymentConfig("torch", ()), ArtifactCache(tmp_path))
    assert any(issubclass(w.category, torch.jit.TracerWarning) for w in caught)  # still the user's to see
    result = deploy.measure(ModelSnapshot.of(bundle), artifact, MeasureSettings(warmup=1, iters=2), cache_hit=hit)
    notes = result.to_dict()["partitions"]["notes"]
    assert any("TorchScript kept one branch of a condition on tensor values" in note for note in notes), notes
    assert result.evaluation.fidelity.top1_agreement < 1.0


def test_a_trace_through_torchs_own_shape_checks_notes_nothing(tmp_path: Path) -> None:
    # nn.MultiheadAttention asserts that key and value shapes agree; traced, each assert is a
    # "Python boolean" TracerWarning from torch/nn/functional.py. Three printed, and each
    # became a "kept one branch" note, on a model whose every input has the example's shape.
    from nnsweep.models import load_model, register_live

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, dropout=0.0)
            self.head = torch.nn.Linear(16, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.layer(x).mean(dim=1))

    torch.manual_seed(0)
    bundle = load_model(register_live("encoder_trace", Encoder().eval(), torch.randn(1, 6, 16)))
    config = DeploymentConfig("torch", quant=QuantConfig("dynamic_int8"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        artifact, _ = deploy.convert(bundle, config, ArtifactCache(tmp_path))
    assert not [w for w in caught if issubclass(w.category, torch.jit.TracerWarning)]
    assert not [n for n in artifact.partitions.notes if "kept one branch" in n]


@pytest.mark.parametrize("mode", ["static_int8", "qat_int8"])
def test_a_weight_norm_layer_is_quantized_as_its_weight_and_the_model_is_left_as_it_was(mode: str) -> None:
    # torch.ao's QAT takes a layer's own class only: "qat.Conv1d.from_float only works for
    # Conv1d, got ParametrizedConv1d". Removing the parametrization from a deep copy edits the
    # class the copy shares with the user's model: the model then had no 'weight'.
    from torch.nn.utils.parametrizations import weight_norm

    from nnsweep.models import load_model, register_live
    from nnsweep.runtimes.common.fx import quantize_fx, quantized_engine

    torch.manual_seed(0)
    model = nn.Sequential(weight_norm(nn.Conv1d(1, 8, 5, padding=2)), nn.ReLU(), nn.Conv1d(8, 2, 3)).eval()
    bundle = load_model(register_live(f"weight_norm_{mode}", model, torch.randn(1, 1, 32)))
    before = model(bundle.example_input).detach()
    with quantized_engine("x86"):
        converted = quantize_fx(bundle, QuantConfig(mode), "x86")
    assert ".quantized." in type(converted.get_submodule("0")).__module__  # an int8 convolution (with its ReLU)
    torch.testing.assert_close(model(bundle.example_input).detach(), before)
    assert hasattr(model[0], "parametrizations")
    got = converted(bundle.example_input)
    assert float((got - before).pow(2).mean() / before.pow(2).mean()) < 0.01  # within 20 dB


class _Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(8, 16)
        layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        self.head = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.inp(x)).mean(1))


def test_qat_leaves_a_module_torch_runs_float_without_fake_quantizers(tmp_path: Path) -> None:
    # prepare_qat_fx swapped the encoder's Linear layers for QAT ones, which convert_fx (it
    # converts the traced ops) left behind: TorchScript then failed ("Module 'FakeQuantize'
    # has no attribute 'activation_post_process'").
    from nnsweep.models import load_model, register_live
    from nnsweep.runtimes.common.fx import quantize_fx, quantized_engine

    torch.manual_seed(0)
    model = _Encoder().eval()
    bundle = load_model(register_live("qat_encoder", model, torch.randn(1, 6, 8)))
    with quantized_engine("x86"):
        converted = quantize_fx(bundle, QuantConfig("qat_int8"), "x86")
    assert not [name for name, m in converted.named_modules() if "FakeQuantize" in type(m).__name__]
    assert ".quantized." in type(converted.get_submodule("inp")).__module__  # the traced layers are int8
    from nnsweep.runtimes.torch.converter import TorchConverter

    result = TorchConverter().convert(bundle, DeploymentConfig("torch", ("x86",), QuantConfig("qat_int8")), tmp_path)
    deployed = torch.jit.load(str(tmp_path / result.filename))
    torch.testing.assert_close(deployed(bundle.example_input), converted(bundle.example_input))


class _SlicedPositions(nn.Module):
    """A buffer of positions sliced up to the input's length, as Hugging Face's BERT slices
    its position ids (``self.position_ids[:, 0 : seq_length]``): torch.fx traces a parameter's
    slice, but a buffer is a plain tensor, and a traced bound is no index for it."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("positions", torch.randn(1, 32, 6))
        self.head = nn.Linear(6, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[1]
        return self.head(x + self.positions[:, 0:length])  # type: ignore[no-any-return]


class _BranchOnValue(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(6, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return self.head(x)  # type: ignore[no-any-return]
        return self.head(-x)  # type: ignore[no-any-return]


class _IntOfSize(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(6, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(x.reshape(int(x.shape[0]), -1, 6))  # type: ignore[no-any-return]


class _RangeOfSize(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(6, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(x.size(1)):
            x = x * 0.9
        return self.head(x)  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("model", "construct"),
    [
        (_SlicedPositions, "a slice bounded by a traced value"),
        (_BranchOnValue, "control flow on a traced value"),
        (_IntOfSize, "a Python number made of a traced value"),
        (_RangeOfSize, r"an integer made of a traced value \(range\(\) of a size\)"),
        (_ShapeLoop, "iteration over a traced value"),
    ],
)
@pytest.mark.parametrize("mode", [QuantMode.STATIC_INT8, QuantMode.QAT_INT8])
def test_int8_refuses_what_fx_cannot_trace_naming_the_construct_and_the_runtimes_that_take_it(
    tmp_path: Path, model: type[nn.Module], construct: str, mode: QuantMode
) -> None:
    # before: the interpreter's last line ("TypeError: slice indices must be integers or None or
    # have an __index__ method"), which names neither the model's code nor what to do instead
    from nnsweep.core.errors import ConversionError
    from nnsweep.models import load_model, register_live
    from nnsweep.runtimes.torch.converter import TorchConverter

    torch.manual_seed(0)
    bundle = load_model(register_live(model.__name__, model().eval(), torch.randn(1, 5, 6)))
    config = DeploymentConfig("torch", ("x86",), QuantConfig(mode))  # refused before any fine-tuning
    with pytest.raises(ConversionError) as info:
        TorchConverter().convert(bundle, config, tmp_path)
    message = str(info.value)
    assert message.startswith(f"torch's FX int8 quantizer cannot trace this model: {construct}".replace("\\", ""))
    assert "at test_convert_torch.py:" in message and "\n" not in message
    takers = "executorch, onnxruntime or litert" if mode is QuantMode.STATIC_INT8 else "executorch"
    assert f"deploy {mode.value} with {takers} (quantized after torch.export)" in message
    assert isinstance(info.value.__cause__, TypeError | torch.fx.proxy.TraceError)  # the traceback, for -v


@pytest.mark.slow
def test_static_int8_refuses_a_hugging_face_classifier_in_one_line(tmp_path: Path) -> None:
    hf = pytest.importorskip("transformers")
    from nnsweep.core.errors import ConversionError
    from nnsweep.models import load_model, register_live

    class Logits(nn.Module):
        def __init__(self, model: nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.model(ids).logits  # type: ignore[no-any-return]

    torch.manual_seed(0)
    config = hf.BertConfig(
        vocab_size=1000, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=64, num_labels=3,
    )  # fmt: skip
    net = Logits(hf.BertForSequenceClassification(config)).eval()
    bundle = load_model(register_live("bert", net, torch.randint(0, 1000, (1, 16))))
    with pytest.raises(ConversionError, match=r"a slice bounded by a traced value .* at modeling_bert\.py:\d+ "):
        deploy.convert(bundle, STATIC_X86, ArtifactCache(tmp_path / "cache"))


def test_a_model_whose_trace_fails_in_its_own_code_is_ranked_through_dynamic_int8(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # a slice by a traced size fails with the interpreter's TypeError, not torch.fx's TraceError:
    # before, the ranking refused it ("torch's quantizer cannot rank the layers of this model")
    from nnsweep.models import load_model, register_live
    from nnsweep.sensitivity.ranking import ranking

    torch.manual_seed(0)
    bundle = load_model(register_live("sliced_positions", _SlicedPositions().eval(), torch.randn(1, 5, 6)))
    with caplog.at_level("WARNING"):
        report, _ = ranking(bundle, "torch", Granularity.PER_CHANNEL, tmp_path)
    assert "torch.fx cannot trace this model" in caplog.text
    assert report.mode == "dynamic_int8" and report.ranked() == ["head"]
