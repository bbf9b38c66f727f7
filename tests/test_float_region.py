"""The ops between layers kept float stay float (nnsweep.runtimes.common.float_region) in PT2E graphs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch
import torch.nn.functional as F

from nnsweep.core.config import Granularity, QuantConfig
from nnsweep.runtimes.common import float_fallback
from nnsweep.runtimes.common.float_region import between, fx_float_region
from nnsweep.runtimes.common.pt2e import export

if TYPE_CHECKING:
    from nnsweep.models import ModelBundle

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


class _Branches(torch.nn.Module):
    """Functional ops of no module between the layers: ReLU, a residual add, a concatenation, a mean."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.c = torch.nn.Conv2d(8, 8, 1)
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.a(x))
        z = y + F.relu(self.b(y))
        w = torch.cat([z, self.c(z)], 1)
        return self.head(w.mean((2, 3)))


ALL = ("a", "b", "c", "head")


def _graph() -> torch.fx.GraphModule:
    torch.manual_seed(0)
    return export(_Branches().eval(), torch.randn(1, 3, 8, 8), dynamic_batch=False).module(check_guards=False)


def _ops(graph: torch.fx.GraphModule) -> set[str]:
    return {n.name for n in graph.graph.nodes if n.op == "call_function"}


def test_between_keeps_the_largest_set_that_meets_float_nodes_only() -> None:
    # a chain x -> 1 -> 2 -> 3 -> out, and 4 fed by 2 and read by nothing else
    producers = {1: [None], 2: [1], 3: [2], 4: [2]}
    consumers = {1: [2], 2: [3, 4], 3: [None], 4: [3]}
    assert between({1, 3}, [2, 4], producers.__getitem__, consumers.__getitem__) == {2, 4}
    assert between({1}, [2, 4], producers.__getitem__, consumers.__getitem__) == set()  # 2 feeds 3, not float
    assert between(set(), [2], producers.__getitem__, consumers.__getitem__) == set()


def test_between_meets_ops_float_anyway_but_joins_through_its_own_members() -> None:
    # x -> 1 (kept) -> 2 -> 3 (no int8 kernel) -> 4 -> out
    producers = {1: [None], 2: [1], 3: [2], 4: [3]}
    consumers = {1: [2], 2: [3], 3: [4], 4: [None]}
    get_p, get_c = producers.__getitem__, consumers.__getitem__
    assert between({1}, [2, 4], get_p, get_c) == set()  # 3 counts as int8: 2 feeds it
    assert between({1}, [2, 4], get_p, get_c, float_too={3}) == {2}  # 4 touches no kept layer


def test_every_op_lies_between_when_every_layer_is_float() -> None:
    graph = _graph()
    assert fx_float_region(graph, ALL) == _ops(graph)


def test_an_op_that_meets_an_int8_layer_is_left_to_the_quantizer() -> None:
    graph = _graph()
    region = fx_float_region(graph, ("a", "b"))
    # the add feeds c (int8) and the concatenation: not between; nor the ReLUs beside it
    assert region == {n.name for n in graph.graph.nodes if n.op == "call_function" and _in(n, ("a", "b"))}
    assert fx_float_region(graph, ()) == set()
    assert fx_float_region(graph, ("nothing",)) == set()


def _in(node: torch.fx.Node, layers: tuple[str, ...]) -> bool:
    stack = node.meta.get("nn_module_stack") or {}
    return any(float_fallback.in_modules(path, layers) for path, _ in stack.values())


def _quantizer(runtime: str, keep: tuple[str, ...]):  # type: ignore[no-untyped-def]
    quant = QuantConfig("static_int8", Granularity.PER_TENSOR, float_layers=keep)
    if runtime == "executorch":
        from nnsweep.runtimes.executorch.converter import xnnpack_quantizer

        return xnnpack_quantizer(quant)
    from nnsweep.runtimes.litert.converter import litert_quantizer

    return litert_quantizer(quant, symmetric_activations=False)


@pytest.mark.parametrize("runtime", ["executorch", "litert"])
def test_with_every_layer_float_nothing_is_quantized(runtime: str) -> None:
    """ExecuTorch 1.5.1's concatenation annotator ignores the quantizer's filter, and the
    propagation after it carried its int8 on to the mean: with every layer float, the
    concatenation and the mean were still quantized (35-40 dB against fp32 on held-out models)."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    graph = _graph()
    x = torch.randn(4, 3, 8, 8)
    with torch.no_grad():
        expected = graph(x[:1])
    prepared = prepare_pt2e(graph, _quantizer(runtime, ALL))
    with torch.no_grad():
        for sample in x:
            prepared(sample[None])
    converted = convert_pt2e(prepared)
    quantize_ops = [n for n in converted.graph.nodes if n.op == "call_function" and "quantize" in str(n.target)]
    assert quantize_ops == []
    with torch.no_grad():
        torch.testing.assert_close(converted(x[:1]), expected)


@pytest.mark.parametrize("runtime", ["executorch", "litert"])
def test_with_some_layers_float_the_rest_is_still_quantized(runtime: str) -> None:
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    graph = _graph()
    prepared = prepare_pt2e(graph, _quantizer(runtime, ("a", "b")))
    observed = {n.name for n in prepared.graph.nodes if n.op == "call_module" and "activation_post_process" in n.name}
    assert observed  # c and head are int8


class _CalledTwice(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.mid = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.a(x))
        z = F.relu(self.mid(F.relu(self.mid(y))))
        return self.head(torch.cat([y, z], 1).mean((2, 3)))


def _fx_quantized(module: torch.nn.Module, name: str, keep: tuple[str, ...]) -> torch.nn.Module:
    from nnsweep.models import load_model, register_live

    return _fx_quantize(load_model(register_live(name, module, torch.randn(1, 3, 8, 8))), keep)


def _fx_quantize(bundle: ModelBundle, keep: tuple[str, ...]) -> torch.nn.Module:
    """torch's static int8 of ``bundle`` (per tensor, x86), ``keep`` float."""
    from nnsweep.runtimes.common.fx import quantize_fx, quantized_engine

    quant = QuantConfig("static_int8", Granularity.PER_TENSOR, float_layers=keep)
    with quantized_engine("x86"):
        return quantize_fx(bundle, quant, "x86")


def test_fx_with_every_layer_float_nothing_is_quantized() -> None:
    """torch.ao FX leaves a layer float by module name, but not the ReLU, add, concatenation
    and mean around it (it gives a per-call qconfig for functions only, never for methods)."""
    torch.manual_seed(0)
    module = _Branches().eval()
    converted = _fx_quantized(module, "fx_branches_all", ALL)
    assert "quantize_per_tensor" not in converted.code
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(converted(x), module(x))


@pytest.mark.parametrize("keep", [("a",), ("mid",), ("a", "head")])
def test_fx_int8_ops_keep_their_observers_beside_float_ones(keep: tuple[str, ...]) -> None:
    """An int8 op's output observer stays when float ops read it: without it ``convert_fx``
    fed the second call of a shared int8 layer a float tensor (a NotImplementedError)."""
    torch.manual_seed(0)
    module = _CalledTwice().eval()
    converted = _fx_quantized(module, f"fx_called_twice_{'_'.join(keep)}", keep)
    assert "quantize_per_tensor" in converted.code
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        got, expected = converted(x), module(x)
    assert (got - expected).abs().max() < 0.1 * expected.abs().max()


class _Ends(torch.nn.Module):
    """Ops of no module between the model's input and its first layer, and after its last."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.squeeze(1).transpose(1, 2)  # (1, 1, 8, 6) -> (1, 6, 8)
        return torch.softmax(self.head(F.relu(self.proj(rows))).mean(1), -1)


@pytest.mark.parametrize("runtime", ["executorch", "litert", "torch"])
def test_the_models_own_inputs_and_outputs_count_as_float(runtime: str) -> None:
    """With every layer float, the squeeze and transpose after the input and the softmax
    before the output stay float too (torch.ao FX observed the input's squeeze before)."""
    torch.manual_seed(0)
    module = _Ends().eval()
    x = torch.randn(1, 1, 8, 6)
    converted = _quantized_with_nothing_int8("ends", module, x, runtime, ("head", "proj"))
    with torch.no_grad():
        torch.testing.assert_close(converted(x), module(x))


def _quantized_with_nothing_int8(
    name: str, module: torch.nn.Module, x: torch.Tensor, runtime: str, keep: tuple[str, ...]
) -> torch.nn.Module:
    """``module`` static int8 on ``runtime`` (calibrated on ``x``) with ``keep`` float,
    checked to quantize nothing: every op of its PT2E graph lies in the float region."""
    if runtime == "torch":
        from nnsweep.models import load_model, register_live

        converted = _fx_quantize(load_model(register_live(name, module, x)), keep)
        assert "quantize_per_tensor" not in converted.code
        return converted
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    graph = export(module, x, dynamic_batch=False).module(check_guards=False)
    assert fx_float_region(graph, keep) == _ops(graph)
    prepared = prepare_pt2e(graph, _quantizer(runtime, keep))
    prepared(x)
    converted = convert_pt2e(prepared)
    assert not [n for n in converted.graph.nodes if "quantize" in str(n.target)]
    return converted


def test_fx_ops_beside_a_module_torch_leaves_float_stay_float_with_its_neighbours() -> None:
    """torch's static int8 runs ``nn.TransformerEncoder`` float (FX does not trace into it).
    With the head kept float, the mean between the two was quantized (and with every layer
    float, 25.8 dB against fp32 on a two-layer encoder): it is float now, and with the
    embedding float too the outputs are fp32's."""
    from nnsweep.models import load_model

    bundle = load_model(f"{BENCHMARKS / 'fidelity_models.py'}:encoder")  # the model of float_fidelity.py's row
    module = bundle.module
    whole = _fx_quantize(bundle, ())
    assert "mean" in whole.code and "quantize_per_tensor" in whole.code  # K = 0 unchanged
    head_float = _fx_quantize(bundle, ("head",))
    mean = next(n for n in head_float.graph.nodes if n.target == "mean")
    assert mean.args[0].target == "encoder"  # float, as torch runs it
    assert [u.target for u in mean.users] == ["head"]  # no quantize between
    assert "quantize_per_tensor" in head_float.code  # the embedding is still int8
    every = _fx_quantize(bundle, ("embed", "head"))
    assert "quantize_per_tensor" not in every.code
    batch = torch.randn(3, 10, 16)
    with torch.no_grad():
        torch.testing.assert_close(every(batch), module(batch))


class _Positions(torch.nn.Module):
    """Learned positions, a parameter of the root module itself, added between two layers."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(8, 16)
        self.pos = torch.nn.Parameter(torch.randn(6, 16))
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.relu(self.inp(x) + self.pos)).mean(1)


@pytest.mark.parametrize("runtime", ["executorch", "litert", "torch", "onnxruntime"])
def test_the_root_modules_own_parameters_are_constants_between_float_layers(runtime: str, tmp_path: Path) -> None:
    """The add of ``self.pos`` read a weight of two dimensions, so it counted as a layer and
    was left to the quantizer, though the root is no layer float_layers can name: with every
    layer of a transformer encoder float, ExecuTorch and ONNX Runtime stayed at 30-32 dB
    against fp32, torch at 61 dB (its observer on the positions)."""
    torch.manual_seed(0)
    module = _Positions().eval()
    x = torch.randn(1, 6, 8)
    keep = ("head", "inp")
    if runtime == "onnxruntime":
        import onnx

        from nnsweep.runtimes.common.float_region import onnx_float_region

        float_fallback.export_onnx_scoped(module, x, tmp_path / "m.onnx")
        model = onnx.load(str(tmp_path / "m.onnx"))
        add = next(n.name for n in model.graph.node if n.op_type == "Add" and n.name.startswith("/"))
        assert add in onnx_float_region(model, keep)
        assert add not in onnx_float_region(model, ("head",))  # fed by the int8 inp: the quantizer's
        return
    if runtime != "torch":
        graph = export(module, x, dynamic_batch=False).module(check_guards=False)
        assert "add" not in fx_float_region(graph, ("head",))  # fed by the int8 inp: the quantizer's
    converted = _quantized_with_nothing_int8("positions", module, x, runtime, keep)
    with torch.no_grad():
        torch.testing.assert_close(converted(x), module(x))


class _Lookup(torch.nn.Module):
    """An embedding's lookup, and probabilities that are an output and read by an argmax too."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(10, 8)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        probs = self.head(self.emb(ids).mean(1)).softmax(-1)
        return probs, probs.argmax(-1)


def test_onnx_every_node_of_a_lookup_and_an_argmax_head_stays_float(tmp_path: Path) -> None:
    """With its only layer float, the embedding's Gather (ONNX Runtime quantized its table:
    65.5 dB against fp32 on a recommender tower) and the argmax after an output that is read
    by another node too (it flipped a class id: 54.1 dB, top-1 0.94) were left int8."""
    import onnx

    from nnsweep.runtimes.common.float_region import onnx_float_region

    float_fallback.export_onnx_scoped(_Lookup().eval(), torch.tensor([[1, 4, 2]]), tmp_path / "m.onnx")
    model = onnx.load(str(tmp_path / "m.onnx"))
    assert {"Gather", "ArgMax", "Softmax"} <= {n.op_type for n in model.graph.node}
    assert onnx_float_region(model, ("head",)) == [n.name for n in model.graph.node]
