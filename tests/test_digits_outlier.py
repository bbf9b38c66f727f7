"""The ``digits_outlier`` built-in: int8 hurts it, keeping two named layers float repairs it.

Training takes about 10 s (one thread), so the tests that need the trained model are
``slow``; the naming and mapping helpers are checked without it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from nnsweep.core.config import DeploymentConfig, QuantConfig
from nnsweep.core.errors import ConversionError
from nnsweep.models import BUILTIN, check_reference
from nnsweep.runtimes.common import float_fallback, float_region
from nnsweep.runtimes.torch import sensitivity as torch_evaluators
from nnsweep.sensitivity import rank as sensitivity

OUTLIER_PAIR = frozenset({"blocks.2.dw", "blocks.2.pw1"})


def test_digits_outlier_is_builtin() -> None:
    assert "digits_outlier" in BUILTIN
    assert check_reference("digits_outlier") == "builtin"


def test_quantizable_layers_are_module_paths() -> None:
    from nnsweep.models.digits_outlier import OutlierNet

    layers = sensitivity.quantizable_layers(OutlierNet())
    assert layers[0] == "stem.0" and layers[-1] == "classifier"
    assert set(layers) >= OUTLIER_PAIR
    assert "blocks.2.dw_bn" not in layers  # BatchNorm folds into its convolution


def test_in_modules_matches_whole_path_components() -> None:
    assert float_fallback.in_modules("blocks.2.pw1", ["blocks.2"])
    assert float_fallback.in_modules("blocks.2", ["blocks.2"])
    assert not float_fallback.in_modules("blocks.20.pw1", ["blocks.2"])
    assert not float_fallback.in_modules("blocks.2.dw_bn", ["blocks.2.dw"])


def test_onnx_nodes_in_reads_the_scope_before_the_first_separator() -> None:
    """ONNX Runtime's fusions (quant_pre_process) append to a scoped name: a linear layer on
    a 3-D input becomes ``<path>/node_MatMul_6/MatMulAddFusion``; its reshapes carry no scope."""
    from onnx import helper

    names = ["/node_view", "mixers.0.fc1/node_MatMul_6/MatMulAddFusion", "gemm_input_reshape", "mixers.0.fc2/node_add"]
    nodes = [helper.make_node("Identity", ["x"], ["y"], name=n) for n in names]
    model = helper.make_model(helper.make_graph(nodes, "g", [], []))
    assert float_fallback.onnx_nodes_in(model, ["mixers.0.fc1"]) == [names[1]]
    assert float_fallback.onnx_nodes_in(model, ["mixers.0"]) == [names[1], names[3]]
    assert float_fallback.onnx_nodes_in(model, ["node_MatMul_6"]) == []


@pytest.fixture(scope="module")
def outlier(models_dir: Path):  # type: ignore[no-untyped-def]
    from nnsweep.models import load_model

    return load_model("digits_outlier", cache_dir=models_dir)


def _top1(module: torch.nn.Module, bundle) -> float:  # type: ignore[no-untyped-def]
    split = bundle.dataset.evaluation
    with torch.no_grad():
        preds = module(torch.from_numpy(split.inputs)).argmax(1).numpy()
    return float((preds == split.labels).mean())


@pytest.mark.slow
def test_trains_deterministically(outlier) -> None:  # type: ignore[no-untyped-def]
    from nnsweep.models.digits_outlier import load_digits_outlier

    again = load_digits_outlier(cache_dir=None)  # trains afresh
    assert again.digest == outlier.digest
    assert _top1(outlier.module, outlier) > 0.95


@pytest.mark.slow
def test_outlier_channels_are_in_the_trained_model(outlier) -> None:  # type: ignore[no-untyped-def]
    from nnsweep.models.digits_outlier import OUTLIER_CHANNELS

    shift = outlier.module.blocks[2].dw_bn.bias.detach()
    others = [c for c in range(len(shift)) if c not in OUTLIER_CHANNELS]
    assert shift[list(OUTLIER_CHANNELS)].min() > 100 * shift[others].abs().max()


@pytest.mark.slow
@pytest.mark.parametrize("per_channel", [False, True])
def test_torch_int8_drops_and_the_pair_kept_float_recovers(outlier, per_channel: bool) -> None:  # type: ignore[no-untyped-def]
    fp32 = _top1(outlier.module, outlier)
    evaluate = torch_evaluators.torch_fx_evaluator(outlier, outlier.dataset.evaluation, per_channel=per_channel)
    assert evaluate(frozenset()).accuracy < fp32 - 0.01
    assert evaluate(OUTLIER_PAIR).accuracy > fp32 - 0.01
    # One end of the outlier tensor alone repairs nothing: the other end still quantizes it.
    assert evaluate(frozenset({"blocks.2.pw1"})).accuracy < fp32 - 0.01


@pytest.mark.slow
def test_quantize_one_ranks_the_outlier_pair_first(outlier) -> None:  # type: ignore[no-untyped-def]
    candidates = ["blocks.1.pw1", "blocks.2.dw", "blocks.2.pw1", "blocks.2.pw2"]
    evaluate = torch_evaluators.torch_fx_evaluator(outlier, outlier.dataset.calibration)
    report = sensitivity.measure(candidates, evaluate, methods=("quantize_one",))
    assert set(sensitivity.keep_float(report, 2)) == OUTLIER_PAIR


@pytest.mark.slow
def test_onnx_node_names_carry_module_paths_through_preprocessing(outlier, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import onnx

    source = tmp_path / "model.onnx"
    float_fallback.export_onnx_scoped(outlier.module, outlier.example_input, source)
    calibration = outlier.dataset.calibration.inputs[:16]
    target = tmp_path / "int8.onnx"
    excluded = float_fallback.ort_quantize_static(
        source, target, (calibration[i : i + 1] for i in range(len(calibration))), sorted(OUTLIER_PAIR)
    )
    assert sorted(name.partition("/")[0] for name in excluded) == sorted(OUTLIER_PAIR)
    convs = {n.name: n for n in onnx.load(str(target)).graph.node if n.op_type == "Conv"}
    assert set(excluded) <= set(convs)  # the excluded convolutions stay float Conv nodes


def test_a_float_layer_that_names_no_module_fails_the_conversion(outlier, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # A layer the exporter folded into a constant has no ONNX node and nothing to keep float;
    # a path that names no module of the model is a mistake, on every runtime.
    from nnsweep.artifacts import deploy
    from nnsweep.artifacts.cache import ArtifactCache

    quant = QuantConfig("static_int8", float_layers=("blocks.9",))
    for runtime in ("onnxruntime", "executorch"):
        with pytest.raises(ConversionError, match=r"float_layers names blocks\.9: no module of digits_outlier"):
            deploy.convert(outlier, DeploymentConfig(runtime, quant=quant), ArtifactCache(tmp_path))


def test_a_model_pre_processed_once_quantizes_to_the_same_bytes_each_time(gelu_between, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The ONNX Runtime ranking pre-processes its model once and quantizes it on every run
    (mobilenet_v3_small's ranking 56.1-57.9 s -> 45.0-47.2 s): the same model as pre-processing each time."""
    import numpy as np

    source = tmp_path / "m.onnx"
    float_fallback.export_onnx_scoped(gelu_between, torch.randn(1, 1, 8, 8), source)
    calibration = [np.random.default_rng(i).standard_normal((1, 1, 8, 8)).astype(np.float32) for i in range(4)]
    prepared = tmp_path / "prepared.onnx"
    float_fallback.ort_pre_process(source, prepared)
    for keep in ([], ["a", "b"], ["c"]):
        each, once = tmp_path / "each.onnx", tmp_path / "once.onnx"
        excluded = float_fallback.ort_quantize_static(source, each, iter(calibration), keep)
        assert float_fallback.ort_quantize_prepared(prepared, once, iter(calibration), keep) == excluded
        assert once.read_bytes() == each.read_bytes()


def test_the_nodes_between_two_float_layers_stay_float_and_no_others(gelu_between, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A GELU between two layers kept float is left float too (else ONNX Runtime would put a
    quantize/dequantize pair on the tensor between them); the ReLU that feeds an int8 layer is not."""
    import numpy as np
    import onnx

    source, target = tmp_path / "m.onnx", tmp_path / "int8.onnx"
    float_fallback.export_onnx_scoped(gelu_between, torch.randn(1, 1, 8, 8), source)
    calibration = [np.random.default_rng(i).standard_normal((1, 1, 8, 8)).astype(np.float32) for i in range(4)]
    excluded = float_fallback.ort_quantize_static(source, target, iter(calibration), ["a", "b"])
    nodes = {n.name: n for n in onnx.load(str(target)).graph.node}
    kinds = sorted(nodes[name].op_type for name in excluded)
    assert kinds.count("Conv") == 2 and "Erf" in kinds and "Relu" not in kinds
    quantized = {i for n in nodes.values() if n.op_type == "QuantizeLinear" for i in n.input}
    between = {o for name in excluded if not name.startswith("b/") for o in nodes[name].output}
    assert not between & quantized  # from a's output to b's input, nothing is quantized
    conv_c = next(n for name, n in nodes.items() if name.startswith("c/") and n.op_type == "Conv")
    dequantized = {o for n in nodes.values() if n.op_type == "DequantizeLinear" for o in n.output}
    assert conv_c.input[0] in dequantized  # c is int8: its input comes through a quantize/dequantize pair


def test_onnx_float_region_keeps_only_what_meets_float_nodes() -> None:
    """The region is the largest set of nodes whose inputs are constants or float outputs and
    whose outputs feed float nodes only; unnamed nodes get names first."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((1,), dtype="float32"), "w")
    wa = numpy_helper.from_array(np.ones((1, 1), dtype="float32"), "wa")  # a and c are layers: weights of 2-D
    wc = numpy_helper.from_array(np.ones((1, 1), dtype="float32"), "wc")
    nodes = [
        helper.make_node("Mul", ["x", "wa"], ["t0"], name="a/n0"),  # layer a
        helper.make_node("Mul", ["t0", "w"], ["t1"]),  # unnamed, between a and b
        helper.make_node("Sigmoid", ["t1"], ["t2"], name="s"),  # between
        helper.make_node("Relu", ["t2"], ["t3"], name="b/n1"),  # "layer" b (kept by name)
        helper.make_node("Abs", ["t3"], ["t4"], name="to_int8"),  # feeds c: between only if c is float
        helper.make_node("Mul", ["t4", "wc"], ["t5"], name="c/n2"),  # layer c
        helper.make_node("Sigmoid", ["t5"], ["y"], name="tail"),  # between c and the model's output
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        initializer=[w, wa, wc],
    )
    model = helper.make_model(graph)
    assert float_fallback.name_unnamed_nodes(model) == 1 and model.graph.node[1].name == "Mul_1"
    assert float_region.onnx_float_region(model, ["a", "b"]) == ["a/n0", "Mul_1", "s", "b/n1"]
    assert float_region.onnx_float_region(model, ["a"]) == ["a/n0"]  # nothing between a and an int8 node
    assert float_region.onnx_float_region(model, ["b", "c"]) == ["b/n1", "to_int8", "c/n2", "tail"]
    # the model's output counts as float; so does its input, but a is a layer of its own (int8)
    assert float_region.onnx_float_region(model, ["c"]) == ["c/n2", "tail"]
    assert float_region.onnx_float_region(model, ["nothing"]) == []
    # a layer with a weight between float layers is not kept float unless named
    weight = numpy_helper.from_array(np.ones((2, 2), dtype="float32"), "weight")
    model.graph.initializer.append(weight)
    model.graph.node[2].input.append("weight")  # "s" now has a weight: a layer of its own
    assert float_region.onnx_float_region(model, ["a", "b"]) == ["a/n0", "b/n1"]


class _Attention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(10, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.attn = torch.nn.MultiheadAttention(16, 2, batch_first=True)
        self.unused = torch.nn.Linear(16, 16)
        self.head = torch.nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x + self.embed.weight[:4])
        return self.head(self.attn(h, h, h, need_weights=False)[0].mean(1))


def test_quantizable_layers_are_the_weighted_modules_the_forward_calls() -> None:
    """MultiheadAttention uses out_proj's weight directly, so out_proj has no op of its
    own: the attention block is the layer. A layer never called is no candidate."""
    model = _Attention().eval()
    assert sensitivity.quantizable_layers(model, torch.randn(1, 4, 16)) == ["attn", "head"]
    assert sensitivity.quantizable_layers(model) == ["attn", "attn.out_proj", "unused", "head"]


@pytest.mark.slow
def test_an_attention_block_kept_float_names_its_onnx_nodes(tmp_path: Path) -> None:
    model = _Attention().eval()
    float_fallback.export_onnx_scoped(model, torch.randn(1, 4, 16), tmp_path / "m.onnx")
    import onnx

    nodes = float_fallback.onnx_nodes_in(onnx.load(str(tmp_path / "m.onnx")), ["attn"])
    assert any("MatMul" in n or "Gemm" in n for n in nodes)


class _Hyphenated(torch.nn.Module):
    """Module names with hyphens, as torchvision's RegNet has (``block1-0``)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential()
        self.body.add_module("block1-0", torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()))
        self.body.add_module("block1-1", torch.nn.Conv2d(4, 4, 3))
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.body(x).mean((2, 3)))


def test_a_hyphenated_module_path_is_a_layer_each_toolchain_can_keep_float(tmp_path: Path) -> None:
    import onnx
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    from nnsweep.core.quant import QuantConfig, QuantMode
    from nnsweep.runtimes.common.fx import qconfig_mapping

    model, example = _Hyphenated().eval(), torch.randn(1, 3, 8, 8)
    layers = sensitivity.quantizable_layers(model, example)
    assert layers == ["body.block1-0.0", "body.block1-1", "fc"]
    assert QuantConfig(mode=QuantMode.STATIC_INT8, float_layers=layers[:1]).float_layers == ("body.block1-0.0",)
    # ONNX Runtime: the scoped export names the convolution's node by its path
    float_fallback.export_onnx_scoped(model, example, tmp_path / "m.onnx")
    assert float_fallback.onnx_nodes_in(onnx.load(str(tmp_path / "m.onnx")), ["body.block1-0.0"])
    # PT2E: torch.export's nn_module_stack spells the path the same way
    program = torch.export.export(model, (example,))
    stacks = {p for n in program.graph.nodes for p, _ in (n.meta.get("nn_module_stack") or {}).values()}
    assert "body.block1-0.0" in stacks
    # torch.ao FX: the convolution stays float, the next one is quantized
    int8 = QuantConfig(mode=QuantMode.STATIC_INT8)
    mapping = float_fallback.fx_keep_float(qconfig_mapping("x86", int8), ["body.block1-0.0"])
    prepared = prepare_fx(model, mapping, (example,))
    prepared(example)
    converted = convert_fx(prepared)
    kept = dict(converted.named_modules())
    assert ".quantized." not in type(kept["body.block1-0.0"]).__module__  # float (fused with its ReLU)
    assert ".quantized." in type(kept["body.block1-1"]).__module__


def test_finding_the_called_layers_changes_nothing_in_the_model() -> None:
    from nnsweep.models.digits_outlier import OutlierNet

    model = OutlierNet().train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert sensitivity.quantizable_layers(model, torch.randn(1, 1, 8, 8)) == sensitivity.quantizable_layers(model)
    assert model.training  # its mode is given back
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # BatchNorm statistics untouched


def test_accuracy_ranks_and_the_outputs_sqnr_breaks_its_ties() -> None:
    L = sensitivity.LayerSensitivity
    report = sensitivity.SensitivityReport(
        0.5, 0.99, (L("a", 0.0, 0.99, 0.0, 40.0), L("b", 0.0, 0.99, 0.0, 25.0), L("c", 0.0, 0.90, 0.0, 45.0)), 1.0, 5
    )
    # c costs 9 points; a and b cost none, and b's int8 distorts the outputs more (25 < 40 dB)
    assert report.ranked() == ["c", "b", "a"] and not report.all_tie()
    tied = sensitivity.SensitivityReport(0.9, 0.9, (L("a", 0.0, 0.9, 0.0, 40.0), L("b", 0.0, 0.9, 0.0, 25.0)), 1.0, 4)
    assert tied.ranked() == ["b", "a"] and tied.all_tie()
    # a report without SQNR (nan) keeps the candidates' order among ties
    old = sensitivity.SensitivityReport(0.9, 0.9, (L("a", 0.0, 0.9), L("b", 0.0, 0.9)), 1.0, 4)
    assert old.ranked() == ["a", "b"]


def test_a_layer_whose_int8_changes_nothing_is_inert_and_not_left_int8() -> None:
    # 139.7 dB is what an LSTM under ONNX Runtime's static int8 measured (float32 rounding):
    # its quantizer leaves the LSTM float. nan: not measured, so not known to be inert.
    L = sensitivity.LayerSensitivity
    layers = (L("head", 0.0, 0.9, 0.0, 44.1), L("lstm", 0.0, 0.9, 0.0, 139.7), L("old", 0.0, 0.9))
    assert [e.inert for e in layers] == [False, True, False]
    report = sensitivity.SensitivityReport(0.9, 0.9, layers, 1.0, 5)
    assert report.int8_left([]) == ["head", "old"]
    assert report.int8_left(["head"]) == ["old"] and report.int8_left(["head", "old"]) == []
    assert L("x", 0.0, 0.9, 0.0, sensitivity.INERT_SQNR_DB).inert
    assert not L("x", 0.0, 0.9, 0.0, sensitivity.INERT_SQNR_DB - 0.1).inert


def test_an_int8_artifact_that_measured_float_is_called_float_in_effect() -> None:
    say = sensitivity.measured_float_in_effect
    assert say("onnxruntime", "static_int8", sensitivity.INERT_SQNR_DB - 0.1) is None  # int8's noise
    assert say("onnxruntime", "static_int8", float("nan")) is None  # not measured
    note = say("onnxruntime", "static_int8", 139.6)
    assert note == (
        "onnxruntime static_int8: the outputs are within float32's rounding of fp32's (140 dB SQNR; int8 gives "
        "60 dB at most): int8 changed nothing they show, the artifact is float in effect"
    )
    assert "identical to fp32's" in (say("torch", "dynamic_int8", float("inf")) or "")


def test_a_sweep_says_once_per_runtime_and_mode_that_an_artifact_measured_float(tmp_path: Path, digits) -> None:  # type: ignore[no-untyped-def]
    from nnsweep.core.config import DeploymentConfig
    from nnsweep.models import ModelSnapshot
    from nnsweep.sweep.rankings import LayerRankings

    told: list[str] = []
    rankings = LayerRankings("digits", tmp_path, notice=told.append)
    snapshot = ModelSnapshot.of(digits)
    static = DeploymentConfig(runtime="onnxruntime", quant={"mode": "static_int8"})
    rankings.tell_if_float(static, 45.0, snapshot)  # int8 that shows: nothing to say
    rankings.tell_if_float(DeploymentConfig(runtime="onnxruntime"), float("inf"), snapshot)  # fp32 is float
    assert told == []
    rankings.tell_if_float(static, 140.0, snapshot)
    rankings.tell_if_float(dataclasses.replace(static, threads=2), 141.0, snapshot)  # the same runtime and mode
    rankings.tell_if_float(DeploymentConfig(runtime="onnxruntime", quant={"mode": "dynamic_int8"}), 139.0, snapshot)
    assert [line.split(":")[0] for line in told] == ["onnxruntime static_int8", "onnxruntime dynamic_int8"]


@pytest.mark.slow
def test_a_sweep_says_once_when_its_float_layers_leave_nothing_int8(tmp_path: Path, recurrent: Path) -> None:
    from nnsweep.bench import MeasureSettings
    from nnsweep.core.config import DeploymentConfig
    from nnsweep.execution import ModelSource
    from nnsweep.models import ModelSnapshot
    from nnsweep.sensitivity.ranking import ranking
    from nnsweep.sweep.host import HostSide

    told: list[str] = []
    host = HostSide(ModelSource(f"{recurrent}:build", tmp_path / "cache"), MeasureSettings(), notice=told.append)
    host.load()
    ranking(host.bundle, "onnxruntime", None, tmp_path / "cache")  # ranked before: the host reads it, says nothing
    assert host.float_layers("onnxruntime", None, 0) == () and told == []
    for _ in range(2):  # asked again for the same count: said once
        assert host.float_layers("onnxruntime", None, 1) == ("head",)
    assert host.float_layers("onnxruntime", None, 2) == ("head", "lstm")
    assert told == [
        "onnxruntime: with 1 layer float, no layer left int8 changes the outputs (onnxruntime's static int8 leaves"
        " the rest float): a static int8 artifact is float in effect",
        "onnxruntime: with 2 layers float, no layer left int8 changes the outputs (onnxruntime's static int8 leaves"
        " the rest float): a static int8 artifact is float in effect",
    ]
    # its measurement then says nothing more: the ranking said it first
    quant = {"mode": "static_int8", "granularity": "per_tensor", "float_layers": ["head"]}  # what None ranks
    kept = DeploymentConfig(runtime="onnxruntime", quant=quant)
    host.rankings.tell_if_float(kept, 139.7, ModelSnapshot.of(host.bundle))
    assert len(told) == 2


def test_a_parametrized_weight_is_its_layer_not_a_layer_of_its_own() -> None:
    """weight_norm keeps the weight's factors (g, v, both of two or more dimensions) in a
    parametrization module that the forward calls; the convolution that owns it is the layer."""
    from torch.nn.utils.parametrizations import spectral_norm, weight_norm

    model = torch.nn.Sequential(
        weight_norm(torch.nn.Conv1d(1, 4, 3)), torch.nn.ReLU(), spectral_norm(torch.nn.Conv1d(4, 2, 3))
    ).eval()
    assert sensitivity.quantizable_layers(model, torch.randn(1, 1, 16)) == ["0", "2"]
    assert sensitivity.quantizable_layers(model) == ["0", "2"]
