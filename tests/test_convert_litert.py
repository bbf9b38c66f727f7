"""Real LiteRT conversions (litert-torch, no TensorFlow): fp32 and int8 .tflite of digits,
the full and core interfaces, XNNPACK placement read from the interpreter, and the
flatbuffer edits the .tflite runtimes share."""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Callable
from pathlib import Path

import litert_torch
import numpy as np
import pytest
import torch
from ai_edge_litert import schema_py_generated as schema
from torch import nn

from nnsweep.artifacts import deploy
from nnsweep.artifacts.cache import ArtifactCache
from nnsweep.artifacts.deploy import DeploymentResult
from nnsweep.bench import MeasureSettings
from nnsweep.bench._harness import run_all
from nnsweep.core.artifact import IOSpec
from nnsweep.core.config import DeploymentConfig, Granularity, Interface, PartitionLimits, QuantConfig
from nnsweep.core.errors import SpecError
from nnsweep.models import ModelSnapshot
from nnsweep.runtimes.armnn import tflite as armnn_tflite
from nnsweep.runtimes.common import tflite
from nnsweep.runtimes.litert.runner import LiteRTRunner, interpreter, placement

SETTINGS = MeasureSettings(warmup=1, iters=5)


def _config(mode: str = "fp32", backends: tuple[str, ...] = ("xnnpack", "cpu"), **quant: object) -> DeploymentConfig:
    return DeploymentConfig("litert", backends, quant=QuantConfig(mode, **quant))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def measured(digits, tmp_path_factory) -> Callable[[DeploymentConfig], DeploymentResult]:  # type: ignore[no-untyped-def]
    cache = ArtifactCache(tmp_path_factory.mktemp("litert-cache"))
    snapshot = ModelSnapshot.of(digits)
    done: dict[str, DeploymentResult] = {}

    def get(config: DeploymentConfig) -> DeploymentResult:
        if config.digest() not in done:
            artifact, hit = deploy.convert(digits, config, cache)
            done[config.digest()] = deploy.measure(snapshot, artifact, SETTINGS, cache_hit=hit)
        return done[config.digest()]

    return get


def _tflite(module: nn.Module, x: torch.Tensor, path: Path) -> Path:
    with contextlib.redirect_stdout(io.StringIO()):
        litert_torch.convert(module.eval(), (x,)).export(str(path))
    return path


def _run(path: Path, x: np.ndarray, backends: tuple[str, ...] = ("cpu",)) -> np.ndarray:
    interp = interpreter(path, backends, 1)
    interp.set_tensor(interp.get_input_details()[0]["index"], x)
    interp.invoke()
    return interp.get_tensor(interp.get_output_details()[0]["index"])  # type: ignore[no-any-return]


def test_config_rejects_what_the_tflite_path_cannot_do() -> None:
    with pytest.raises(SpecError, match=r"qat_int8: QAT is not wired"):
        _config("qat_int8")
    with pytest.raises(SpecError, match="partitions: litert takes no partition limits: LiteRT's XNNPACK"):
        DeploymentConfig("litert", partitions=PartitionLimits(max_delegated_partitions=1))
    assert _config(backends=("xnnpack",)).backends == ("xnnpack", "cpu")  # the builtin kernels close the order
    assert _config(backends=("cpu", "xnnpack")).backends == ("cpu",)
    assert _config("static_int8", interface="full").quant.interface is Interface.FULL


def test_fully_connected_bias_is_added_and_changes_nothing_in_litert(tmp_path: Path) -> None:
    torch.manual_seed(0)
    path = _tflite(nn.Sequential(nn.Flatten(), nn.Linear(16, 4, bias=False)), torch.randn(1, 16), tmp_path / "m.tflite")
    model = tflite.load(path)
    fc = model.subgraphs[0].operators[tflite.operators(model).index("FULLY_CONNECTED")]
    assert len(fc.inputs) < 3 or fc.inputs[2] == -1  # what litert-torch writes for a bias-less Linear
    assert armnn_tflite.add_fully_connected_bias(model) == 1
    assert armnn_tflite.add_fully_connected_bias(model) == 0  # idempotent
    fixed = tmp_path / "fixed.tflite"
    tflite.save(model, fixed)
    bias = tflite.load(fixed).subgraphs[0].operators[0].inputs[2]
    assert bias >= 0
    x = np.arange(16, dtype=np.float32).reshape(1, 16)
    np.testing.assert_array_equal(_run(path, x), _run(fixed, x))


@pytest.mark.slow
def test_fp32_with_xnnpack_matches_the_reference(measured) -> None:  # type: ignore[no-untyped-def]
    result = measured(_config())
    artifact, ev = result.artifact, result.evaluation
    assert artifact.path.name == "model.tflite" and artifact.io == IOSpec()
    assert ev.accuracy is not None and ev.accuracy >= 0.95
    assert ev.fidelity.top1_agreement == 1.0 and ev.fidelity.max_abs_err < 1e-4
    assert result.timing.latency.count == SETTINGS.iters and result.timing.latency.p50 > 0
    report = artifact.partitions
    # XNNPACK takes the whole digits graph in one partition: nothing falls back.
    assert report.backends == ("xnnpack", "cpu") and set(report.nodes_by_backend) == {"xnnpack"}
    assert report.count == 1 and report.sizes == [len(tflite.operators(tflite.load(artifact.path)))]
    assert report.fallback_ops == {}


@pytest.mark.slow
def test_cpu_order_runs_the_builtin_kernels_only(measured) -> None:  # type: ignore[no-untyped-def]
    result = measured(_config(backends=("cpu",)))
    report = result.artifact.partitions
    assert report.partitions == () and set(report.nodes_by_backend) == {"cpu"}
    assert result.evaluation.fidelity.max_abs_err < 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("granularity", [Granularity.PER_CHANNEL, Granularity.PER_TENSOR])
def test_static_int8_core_and_full_keep_accuracy(digits, measured, granularity: Granularity) -> None:  # type: ignore[no-untyped-def]
    fp32 = measured(_config()).evaluation
    core = measured(_config("static_int8", granularity=granularity))
    full = measured(_config("static_int8", granularity=granularity, interface=Interface.FULL))
    # full: litert-torch's own interface, int8 in and out; IOSpec carries the scales.
    io_full = full.artifact.io
    assert (io_full.input_dtype, io_full.output_dtype) == ("int8", "int8") and io_full.input_scale
    core_ops = tflite.operators(tflite.load(core.artifact.path))
    assert core.artifact.io == IOSpec() and core_ops[0] == "QUANTIZE" and core_ops[-1] == "DEQUANTIZE"
    interp = interpreter(core.artifact.path, ("cpu",), 1)
    assert interp.get_input_details()[0]["dtype"] == np.float32
    for result in (core, full):
        ev = result.evaluation
        assert abs(ev.accuracy - fp32.accuracy) <= 0.02  # type: ignore[operator]
        assert 20 < ev.fidelity.sqnr_db < 100 and ev.fidelity.top1_agreement >= 0.97
        assert result.artifact.size_bytes < 0.6 * measured(_config()).artifact.size_bytes
    # The QUANTIZE/DEQUANTIZE at the edges do what IOSpec does outside the model.
    outs = []
    for result in (core, full):
        runner = LiteRTRunner(result.artifact.path, result.artifact.io, 1, ("cpu",))
        runner.load()
        outs.append(run_all(runner, digits.dataset.evaluation.inputs[:64]))
    np.testing.assert_allclose(outs[0], outs[1], atol=1e-5)
    # XNNPACK takes the int8 graph, the edge QUANTIZE/DEQUANTIZE included.
    report = placement(interpreter(core.artifact.path, ("xnnpack", "cpu"), 1), ("xnnpack", "cpu"))
    assert report.nodes_by_backend.get("xnnpack") == len(core_ops)


@pytest.mark.parametrize("granularity", ["per_channel", "per_tensor"])
def test_dynamic_int8_is_litert_dynamic_range(tmp_path: Path, granularity: str) -> None:
    from nnsweep.models import load_model, register_live
    from nnsweep.runtimes.litert.converter import LiteRTConverter

    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).eval()
    bundle = load_model(register_live("tiny_mlp", module, torch.randn(1, 16)))
    result = LiteRTConverter().convert(bundle, _config("dynamic_int8", granularity=granularity), tmp_path)
    assert result.io == IOSpec()  # float32 in and out
    model = tflite.load(tmp_path / result.filename)
    assert tflite.operators(model) == ["FULLY_CONNECTED", "FULLY_CONNECTED"]
    subgraph = model.subgraphs[0]
    weights = [subgraph.tensors[op.inputs[1]] for op in subgraph.operators]
    assert all(w.type == schema.TensorType.INT8 for w in weights)
    assert len(weights[0].quantization.scale) == (32 if granularity == "per_channel" else 1)
    assert subgraph.tensors[subgraph.inputs[0]].type == schema.TensorType.FLOAT32
    x = bundle.dataset.evaluation.inputs[:1]
    np.testing.assert_allclose(_run(tmp_path / result.filename, x), module(torch.from_numpy(x)).detach(), atol=0.05)


def test_dynamic_int8_per_tensor_quantizes_depthwise_weights_per_channel_and_runs_them_right(tmp_path: Path) -> None:
    # LiteRT's only kernel for a depthwise convolution with float input and int8 weights
    # reads a scale per channel: with a per-tensor weight it read past the one scale, and
    # the outputs were NaN or garbage. A convolution of one input channel is written as a
    # depthwise one too; an ordinary convolution keeps its one scale.
    from nnsweep.models import load_model, register_live
    from nnsweep.runtimes.litert.converter import LiteRTConverter

    torch.manual_seed(0)
    module = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),  # one input channel: a DEPTHWISE_CONV_2D
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1, groups=8),  # depthwise
        nn.ReLU(),
        nn.Conv2d(8, 16, 1),  # pointwise: CONV_2D
        nn.Flatten(),
        nn.Linear(16 * 8 * 8, 4),
    ).eval()
    bundle = load_model(register_live("tiny_dw", module, torch.randn(1, 1, 8, 8)))
    result = LiteRTConverter().convert(bundle, _config("dynamic_int8", granularity="per_tensor"), tmp_path)
    model = tflite.load(tmp_path / result.filename)
    subgraph = model.subgraphs[0]
    names = tflite.operators(model)
    scales = {
        (i, name): len(subgraph.tensors[op.inputs[1]].quantization.scale)
        for i, (name, op) in enumerate(zip(names, subgraph.operators, strict=True))
        if name in ("DEPTHWISE_CONV_2D", "CONV_2D", "FULLY_CONNECTED")
    }
    assert sorted(scales.values()) == [1, 1, 8, 8]  # both depthwise per channel; conv and linear per tensor
    assert all(n == 8 for (_, name), n in scales.items() if name == "DEPTHWISE_CONV_2D")
    x = np.random.default_rng(0).standard_normal((1, 1, 8, 8)).astype(np.float32)
    expected = module(torch.from_numpy(x)).detach().numpy()
    for backends in (("cpu",), ("xnnpack", "cpu")):
        out = _run(tmp_path / result.filename, x, backends)
        assert np.isfinite(out).all()
        np.testing.assert_allclose(out, expected, atol=0.05 * float(np.abs(expected).max()))


def test_a_depthwise_weight_without_a_traced_value_is_read_from_its_attribute() -> None:
    from nnsweep.runtimes.litert.converter import _one_input_channel_per_group

    class Convs(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.dw = nn.Parameter(torch.randn(8, 1, 3, 3))
            self.pw = nn.Parameter(torch.randn(8, 8, 1, 1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return nn.functional.conv2d(nn.functional.conv2d(x, self.dw, groups=8), self.pw)

    graph = torch.fx.symbolic_trace(Convs())  # get_attr nodes, no "val" in their meta
    weights = {n.target: n for n in graph.graph.nodes if n.op == "get_attr"}
    assert all("val" not in n.meta for n in weights.values())
    assert _one_input_channel_per_group(graph, weights["dw"])
    assert not _one_input_channel_per_group(graph, weights["pw"])


def test_an_int8_model_that_ends_in_argmax_returns_its_classes_as_they_are(tmp_path: Path) -> None:
    # The core interface put a DEQUANTIZE after every output that was not float32, and
    # refused the argmax's int64 classes as "not a per-tensor quantized int8/uint8 tensor".
    from nnsweep.models import load_model, register_live
    from nnsweep.runtimes.litert.converter import LiteRTConverter

    class Classes(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(16, 5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x).argmax(dim=1, keepdim=True)

    torch.manual_seed(0)
    bundle = load_model(register_live("classes", Classes().eval(), torch.randn(1, 16)))
    result = LiteRTConverter().convert(bundle, _config("static_int8"), tmp_path)
    model = tflite.load(tmp_path / result.filename)
    subgraph = model.subgraphs[0]
    assert subgraph.tensors[subgraph.outputs[0]].type in (schema.TensorType.INT32, schema.TensorType.INT64)
    assert "ARG_MAX" in tflite.operators(model) and "DEQUANTIZE" not in tflite.operators(model)
    x = bundle.dataset.evaluation.inputs[:1]
    assert _run(tmp_path / result.filename, x).reshape(-1)[0] == bundle.module(torch.from_numpy(x)).item()


def _bias_scale_ratios(model: schema.ModelT) -> list[float]:
    """Each int8 FULLY_CONNECTED bias's scale over its input's scale times its weights'."""
    subgraph = model.subgraphs[0]
    ratios = []
    for op in subgraph.operators:
        if tflite.builtin_code(model, op) == schema.BuiltinOperator.FULLY_CONNECTED:
            data, weights, bias = (subgraph.tensors[i] for i in op.inputs[:3])
            scales = [tflite.quant_scales(t) for t in (data, weights, bias)]
            ratios.extend((scales[2] / (scales[0][0] * scales[1])).tolist())  # type: ignore[index,operator]
    return ratios


def test_a_bias_written_for_another_input_scale_is_requantized(tmp_path: Path) -> None:
    # litert-torch 0.10 dropped the requantization before the head and kept the bias of the
    # scale it dropped: the model added 2.5x the head's bias, 9.3 dB, half the classes flipped.
    from nnsweep.models import load_model
    from nnsweep.runtimes.litert.converter import LiteRTConverter

    # Mish, a depthwise convolution with hardswish, pooling to 3x3, a dropout and a linear head
    # (without the dropout, litert-torch writes consistent biases)
    bundle = load_model(f"{Path(__file__).parents[1] / 'benchmarks' / 'probe_models.py'}:mishpool")
    result = LiteRTConverter().convert(bundle, _config("static_int8"), tmp_path)
    assert any("FULLY_CONNECTED" in note and "requantized" in note for note in result.model_notes)
    assert np.allclose(_bias_scale_ratios(tflite.load(tmp_path / result.filename)), 1.0, rtol=1e-4)
    x = bundle.dataset.evaluation.inputs[:8]
    got = np.concatenate([_run(tmp_path / result.filename, sample[None]) for sample in x])
    with torch.no_grad():
        want = bundle.module(torch.from_numpy(x)).numpy()
    sqnr = 10 * np.log10(np.mean(want**2) / np.mean((got - want) ** 2))
    assert sqnr > 25 and (got.argmax(1) == want.argmax(1)).all()


class _Recurrent(nn.Module):
    def __init__(self, with_state: bool) -> None:
        super().__init__()
        self.with_state = with_state
        self.rnn = nn.GRU(8, 16, batch_first=True)
        self.fc = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.with_state:
            out, _ = self.rnn(x)
            return self.fc(out[:, -1])
        out, h = self.rnn(x, torch.zeros(1, x.shape[0], 16))
        return self.fc(out[:, -1] + h[0])


@pytest.mark.filterwarnings("ignore:The tensor attributes self.rnn._flat_weights:UserWarning")  # torch.export's
@pytest.mark.parametrize("with_state", [False, True])
def test_static_int8_names_the_gru_litert_torch_cannot_annotate(tmp_path: Path, with_state: bool) -> None:
    # litert-torch 0.10's GRU annotator reads a second input and two used outputs: a GRU
    # called as gru(x) failed with a bare "IndexError: list index out of range".
    from nnsweep.core.errors import ConversionError
    from nnsweep.models import load_model, register_live
    from nnsweep.runtimes.litert.converter import LiteRTConverter
    from nnsweep.sensitivity.ranking import ranking

    torch.manual_seed(0)
    bundle = load_model(register_live("recurrent", _Recurrent(with_state).eval(), torch.randn(1, 6, 8)))
    if not with_state:
        with pytest.raises(
            ConversionError, match=r"needs a GRU called as out, h = gru\(x, h0\), both outputs used; rnn is not"
        ):
            LiteRTConverter().convert(bundle, _config("static_int8"), tmp_path)
        with pytest.raises(ConversionError, match=r"litert's quantizer cannot rank .*needs a GRU called as"):
            ranking(bundle, "litert", Granularity.PER_CHANNEL, tmp_path)
        return
    result = LiteRTConverter().convert(bundle, _config("static_int8"), tmp_path)  # the call it asks for converts
    x = bundle.dataset.evaluation.inputs[:1]
    np.testing.assert_allclose(
        _run(tmp_path / result.filename, x), bundle.module(torch.from_numpy(x)).detach(), atol=0.1
    )


class _WindowAttention(nn.Module):
    """Attention over 2x2 windows (as Swin partitions them): with a dynamic batch, the
    attention's sizes are arithmetic on the batch size (``4 * batch``)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Conv2d(3, 8, 2, stride=2)
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x).permute(0, 2, 3, 1)
        b, hh, ww, c = h.shape
        win = h.reshape(b, hh // 2, 2, ww // 2, 2, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, 4, c)
        return self.head(self.attn(win, win, win, need_weights=False)[0].reshape(b, -1, c).mean(1))


@pytest.mark.slow
def test_the_ranking_of_window_attention_falls_back_to_one_sample_a_call(tmp_path: Path) -> None:
    # litert-torch's quantizer observed the batch size in "4 * batch" as if it were a tensor:
    # "'int' object has no attribute 'numel'", and the ranking was refused.
    from nnsweep.models import load_model, register_live
    from nnsweep.sensitivity.ranking import ranking

    torch.manual_seed(0)
    bundle = load_model(register_live("windows", _WindowAttention().eval(), torch.randn(1, 3, 8, 8)))
    report, _ = ranking(bundle, "litert", Granularity.PER_CHANNEL, tmp_path)
    assert sorted(report.ranked()) == ["attn", "embed", "head"]


def test_armnn_refuses_dynamic_int8_naming_its_version_and_the_layer() -> None:
    with pytest.raises(SpecError, match=r"Arm NN 20\.08 has no hybrid layers: .*FULLY_CONNECTED"):
        DeploymentConfig("armnn", quant=QuantConfig("dynamic_int8"))


def test_static_int8_says_nothing_of_training_mode(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # An exported module says it is training; litert-torch read the flag and warned, on every
    # static conversion, that an eval-mode model was "converted in training mode".
    from nnsweep.models import load_model, register_live
    from nnsweep.runtimes.litert.converter import export_tflite

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(144, 3)).eval()
    bundle = load_model(register_live("bn_litert", model, torch.randn(1, 1, 8, 8)))
    export_tflite(bundle, _config("static_int8"), tmp_path / "model.tflite")
    assert (tmp_path / "model.tflite").stat().st_size > 0
    assert [r.getMessage() for r in caplog.records if "training mode" in r.getMessage()] == []


def test_what_native_code_writes_to_stderr_in_the_block_goes_to_the_debug_log(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    import logging
    import os

    from nnsweep.runtimes.common.converter import native_stderr_to_debug_log

    log = logging.getLogger("nnsweep.test")
    with caplog.at_level("DEBUG", logger="nnsweep.test"), native_stderr_to_debug_log(log, "a library"):
        os.write(2, b"I0000 port.cc:153] oneDNN custom operations are on\n")
    os.write(2, b"after the block\n")
    assert capfd.readouterr().err == "after the block\n"
    assert [r.getMessage() for r in caplog.records] == [
        "a library wrote to stderr: I0000 port.cc:153] oneDNN custom operations are on\n"
    ]


def test_a_litert_conversion_in_a_fresh_process_writes_nothing_to_stderr(tmp_path: Path) -> None:
    # litert-torch's native library logs on loading and on every conversion; LiteRT's
    # interpreter on its first delegate: none of it is the user's to act on.
    import subprocess
    import sys

    script = (
        "import torch\n"
        "from pathlib import Path\n"
        "from nnsweep.runtimes.litert.converter import LiteRTConverter\n"
        "from nnsweep.core.config import DeploymentConfig\n"
        "from nnsweep.models import load_model, register_live\n"
        "bundle = load_model(register_live('lin', torch.nn.Linear(4, 2).eval(), torch.randn(1, 4)))\n"
        f"LiteRTConverter().convert(bundle, DeploymentConfig('litert', ('xnnpack', 'cpu')), Path({str(tmp_path)!r}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "model.tflite").exists()
    noise = [line for line in proc.stderr.splitlines() if "_pytree.py" not in line]  # torch's own, at import
    assert noise == [], proc.stderr


def test_token_ids_narrowed_to_int32_are_said_in_the_debug_log_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # litert-torch warns on the root logger that it "downcasts 64-bit model I/O to 32-bit";
    # LiteRT's runner feeds the width the model takes, so it is not the user's to act on.
    from nnsweep.models import load_model, register_live
    from nnsweep.runtimes.litert.converter import export_tflite

    class Bag(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed, self.fc = nn.Embedding(30, 8), nn.Linear(8, 3)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.fc(self.embed(ids).mean(dim=1))

    torch.manual_seed(0)
    bundle = load_model(register_live("bag_litert", Bag().eval(), torch.zeros(1, 5, dtype=torch.int64)))
    with caplog.at_level("DEBUG"):
        export_tflite(bundle, _config("fp32"), tmp_path / "model.tflite")
    said = [(r.levelname, r.name) for r in caplog.records if "downcasts 64-bit" in r.getMessage()]
    assert said == [("DEBUG", "nnsweep.runtimes.litert.converter")]
    model = tflite.load(tmp_path / "model.tflite")
    assert model.subgraphs[0].tensors[model.subgraphs[0].inputs[0]].type == schema.TensorType.INT32


def _dense_block() -> tuple[nn.Module, torch.Tensor]:
    # A DenseNet block: each layer's 3x3 convolution (a signed output) is concatenated with the
    # ReLU'd features before it, and a BatchNorm follows each concatenation.
    import torchvision

    torch.manual_seed(0)
    net = torchvision.models.DenseNet(growth_rate=32, block_config=(4,), num_init_features=64, num_classes=10)
    return net.eval(), torch.randn(1, 3, 32, 32)


def test_static_int8_quantizes_a_concatenation_at_a_range_that_covers_its_inputs(tmp_path: Path) -> None:
    # litert-torch 0.10 finds cat and add by the function they were called as, which torch.export
    # records only with strict=True: its cat stayed float, and the .tflite concatenated every input
    # at the first one's int8 range, cutting the convolutions' negative outputs (23.6 dB; 38.5 now).
    from nnsweep.models import load_model, register_live
    from nnsweep.runtimes.litert.converter import LiteRTConverter

    net, x = _dense_block()
    bundle = load_model(register_live("dense_block", net, x))
    result = LiteRTConverter().convert(bundle, _config("static_int8"), tmp_path)
    model = tflite.load(tmp_path / result.filename)
    assert "CONCATENATION" in tflite.operators(model)
    inputs = bundle.dataset.evaluation.inputs[:16]
    got = np.concatenate([_run(tmp_path / result.filename, sample[None]) for sample in inputs])
    with torch.no_grad():
        want = net(torch.from_numpy(inputs)).numpy()
    sqnr = 10 * np.log10(np.mean(want**2) / np.mean((got - want) ** 2))
    assert sqnr > 32, sqnr


def test_static_int8_folds_a_batch_norm_without_changing_what_others_read(tmp_path: Path) -> None:
    # PT2E's prepare folded the BatchNorm into the stem and the cat read the normalised stem
    # (-5.6 dB against fp32; ONNX Runtime 39.0 dB): the BatchNorm now gets its own call of the stem.
    from nnsweep.models import load_model
    from nnsweep.runtimes.litert.converter import LiteRTConverter

    bundle = load_model(f"{Path(__file__).parents[1] / 'benchmarks' / 'probe_models.py'}:stemnorm")
    result = LiteRTConverter().convert(bundle, _config("static_int8"), tmp_path)
    inputs = bundle.dataset.evaluation.inputs[:16]
    got = np.concatenate([_run(tmp_path / result.filename, sample[None]) for sample in inputs])
    with torch.no_grad():
        want = bundle.module(torch.from_numpy(inputs)).numpy()
    sqnr = 10 * np.log10(np.mean(want**2) / np.mean((got - want) ** 2))
    assert sqnr > 30, sqnr


class _Cats(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        twice = torch.cat([x, x], 1)  # one tensor twice: litert-torch's annotator would share it with itself
        ids = torch.cat([torch.arange(4), torch.arange(4)])  # integers: nothing to quantize
        return torch.cat([twice, x * 2], 1) + ids.sum()


def test_only_a_float_cat_of_distinct_inputs_gets_its_source_record() -> None:
    from nnsweep.runtimes.common.pt2e import export
    from nnsweep.runtimes.litert.converter import restore_sources

    graph = export(_Cats(), torch.randn(1, 3), dynamic_batch=False).module(check_guards=False)
    assert restore_sources(graph) == 1
    recorded = [n for n in graph.graph.nodes if "source_fn_stack" in n.meta]
    assert [n.target for n in recorded] == [torch.ops.aten.cat.default]
    assert len(recorded[0].all_input_nodes) == 2 and recorded[0].args[0][0].name == "cat"  # the outer cat


class _ScaledBias(nn.Module):
    """Swin V2's position bias, ``16 * torch.sigmoid(...)``, added to a linear layer's output."""

    def __init__(self) -> None:
        super().__init__()
        self.fc, self.bias, self.head = nn.Linear(12, 16), nn.Linear(12, 16), nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.fc(x) + 16 * torch.sigmoid(self.bias(x)) * 2))


def test_whole_number_scalars_of_float_ops_are_written_as_floats() -> None:
    from nnsweep.runtimes.common.pt2e import export
    from nnsweep.runtimes.litert.converter import float_scalars

    torch.manual_seed(0)
    net, x = _ScaledBias().eval(), torch.randn(1, 12)
    graph = export(net, x, dynamic_batch=False).module(check_guards=False)
    assert float_scalars(graph) == 2  # 16 and 2
    assert float_scalars(graph) == 0
    with torch.no_grad():
        torch.testing.assert_close(graph(x), net(x))


def test_static_int8_converts_a_whole_number_scalar_times_a_tensor(tmp_path: Path) -> None:
    # litert-torch 0.10 made the 16 an int64 tensor and observed it: convert_pt2e failed
    # ("Expecting input to have dtype torch.float32, but got dtype: torch.int64").
    torch.manual_seed(0)
    sqnr = _static_int8_sqnr("scaled_bias", _ScaledBias().eval(), torch.randn(1, 12), tmp_path)
    assert sqnr > 30, sqnr  # 37.0 dB


def _static_int8_sqnr(name: str, net: nn.Module, example: torch.Tensor, tmp_path: Path) -> float:
    """``net`` converted to LiteRT static int8 by nnsweep's converter: the SQNR (dB) of its
    outputs against ``net``'s on 16 evaluation inputs."""
    from nnsweep.models import load_model, register_live
    from nnsweep.runtimes.litert.converter import LiteRTConverter

    bundle = load_model(register_live(name, net, example))
    result = LiteRTConverter().convert(bundle, _config("static_int8"), tmp_path)
    inputs = bundle.dataset.evaluation.inputs[:16]
    got = np.concatenate([_run(tmp_path / result.filename, sample[None]) for sample in inputs])
    with torch.no_grad():
        want = net(torch.from_numpy(inputs)).numpy()
    return float(10 * np.log10(np.mean(want**2) / np.mean((got - want) ** 2)))


class _PadAndResidual(nn.Module):
    """A convolution's output read by an explicit pad (TF-style "same" padding, as Hugging
    Face's MobileNetV2 writes it) and by a residual add: two float readers of one int8 tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.stem, self.pw = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 1)
        self.dw, self.head = nn.Conv2d(8, 8, 3, groups=8), nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.pw(torch.relu(self.stem(x)))
        return self.head((y + self.dw(nn.functional.pad(y, (1, 1, 1, 1)))).mean((2, 3)))


def test_each_reader_of_a_dequantize_gets_its_own_copy() -> None:
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from nnsweep.runtimes.common.pt2e import export
    from nnsweep.runtimes.litert.converter import dequantize_per_reader, litert_quantizer

    torch.manual_seed(0)
    net, x = _PadAndResidual().eval(), torch.randn(1, 3, 12, 12)
    graph = export(net, x, dynamic_batch=False).module(check_guards=False)
    prepared = prepare_pt2e(graph, litert_quantizer(QuantConfig("static_int8"), symmetric_activations=True))
    prepared(x)
    converted = convert_pt2e(prepared, fold_quantize=False)
    want = converted(x)

    def shared() -> list[str]:
        return [n.name for n in converted.graph.nodes if "dequantize" in n.name and len(n.users) > 1]

    assert shared()  # the pad and the add read pw's output through one dequantize
    assert dequantize_per_reader(converted) >= 1
    assert not shared()
    torch.testing.assert_close(converted(x), want, rtol=0, atol=0)


def test_static_int8_converts_an_int8_tensor_read_by_a_pad_and_an_add(tmp_path: Path) -> None:
    # litert-torch 0.10's layout pass overwrote the shared dequantize's shape when it put the
    # pad in NCHW, then failed on the add ("Attempting to convert non-NHWC compatible node
    # to NHWC: dequantize_per_tensor_2").
    torch.manual_seed(0)
    sqnr = _static_int8_sqnr("pad_and_residual", _PadAndResidual().eval(), torch.randn(1, 3, 16, 16), tmp_path)
    assert sqnr > 30, sqnr  # 47.3 dB


def test_litert_dynamic_int8_refuses_float_layers_naming_the_mode_and_the_mode_that_can() -> None:
    with pytest.raises(SpecError) as caught:
        _config("dynamic_int8", float_layers=("0",))
    assert caught.value.field == "quant.float_layers"
    assert "in dynamic_int8" in str(caught.value) and "can in: static_int8" in str(caught.value)
    assert _config("static_int8", float_layers=("0",)).quant.float_layers == ("0",)


def test_litert_torchs_dynamic_range_conversion_makes_a_layer_left_unannotated_int8(tmp_path: Path) -> None:
    """Why LiteRT refuses float layers in dynamic int8 (the test to lift it when litert-torch
    changes): the dynamic patterns annotate the second layer only, and both layers'
    weights come out int8; with neither annotated both stay float."""
    from litert_torch.quantize import pt2e_quantizer
    from litert_torch.quantize.pt2e_quantizer_utils import propagate_annotation
    from litert_torch.quantize.quant_config import QuantConfig as LiteRTQuantConfig
    from torchao.quantization.pt2e import quantize_pt2e

    from nnsweep.runtimes.common.pt2e import export

    def weight_types(annotated: set[str]) -> list[int]:
        torch.manual_seed(0)
        module = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).eval()
        x = torch.randn(1, 16)
        config = pt2e_quantizer.get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True)
        quantizer = pt2e_quantizer.PT2EQuantizer().set_global(config)

        def annotate(model: torch.fx.GraphModule) -> torch.fx.GraphModule:
            def accept(node: torch.fx.Node) -> bool:
                stack = node.meta.get("nn_module_stack", {})
                return any(path.removeprefix("L__self__").strip("_.") in annotated for path, _ in stack.values())

            quantizer._annotate_all_dynamic_patterns(model, config, accept)
            propagate_annotation(model)
            return model

        quantizer.annotate = annotate
        graph = quantize_pt2e.prepare_pt2e(export(module, x, dynamic_batch=False).module(), quantizer)
        graph(x)
        graph = quantize_pt2e.convert_pt2e(graph, fold_quantize=False)
        path = tmp_path / f"{len(annotated)}.tflite"
        with contextlib.redirect_stdout(io.StringIO()):
            litert_torch.convert(graph, (x,), quant_config=LiteRTQuantConfig(pt2e_quantizer=quantizer)).export(
                str(path)
            )
        model = tflite.load(path)
        subgraph = model.subgraphs[0]
        names = tflite.operators(model)
        return [
            subgraph.tensors[op.inputs[1]].type
            for op, name in zip(subgraph.operators, names, strict=True)
            if name == "FULLY_CONNECTED"
        ]

    assert weight_types({"2"}) == [schema.TensorType.INT8, schema.TensorType.INT8]
    assert weight_types(set()) == [schema.TensorType.FLOAT32, schema.TensorType.FLOAT32]
