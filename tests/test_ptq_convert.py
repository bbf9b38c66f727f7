"""convert_ptq: torchao's convert_pt2e for a graph prepared after training, without the QAT
conv-BatchNorm fold it would run for a BatchNorm PT2E's prepare leaves (one after a linear
layer, as LeViT has them). The converted graph must be the one convert_pt2e gives."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

from nnsweep.core.quant import Calibration, Granularity, QuantConfig, QuantMode
from nnsweep.runtimes.common import ptq_convert
from nnsweep.runtimes.common.pt2e import export, ready_for_calibration
from nnsweep.runtimes.executorch.converter import xnnpack_quantizer


class _NormsLeftAfterPrepare(nn.Module):
    """LeViT's MLP layer (a linear layer, then a BatchNorm1d over the flattened tokens) and a
    convolution whose BatchNorm stays once the program is decomposed before prepare."""

    def __init__(self) -> None:
        super().__init__()
        self.fc, self.norm, self.out = nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Linear(16, 4)
        self.conv, self.conv_norm = nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.fc(x).flatten(0, 1)).reshape(x.shape[0], x.shape[1], 16)
        c = self.conv_norm(self.conv(h[:, None])).mean()
        return self.out(torch.relu(h)) + c


def _norms(graph: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in graph.graph.nodes if n.op == "call_function" and "batch_norm" in str(n.target)]


def _prepared(decomposed: bool) -> tuple[nn.Module, torch.Tensor, list[torch.fx.GraphModule]]:
    """The model, an input, and two copies of its program prepared and calibrated alike."""
    torch.manual_seed(0)
    model = _NormsLeftAfterPrepare().eval()
    with torch.no_grad():  # statistics and an affine far from the identity
        for norm in (model.norm, model.conv_norm):
            norm.running_mean.uniform_(-2, 2)
            norm.running_var.uniform_(0.2, 4)
            norm.weight.uniform_(0.5, 2)
            norm.bias.uniform_(-1, 1)
    x = torch.randn(1, 32, 8)
    program = export(model, x, dynamic_batch=False)
    if decomposed:
        program = program.run_decompositions()
    quant = QuantConfig(QuantMode.STATIC_INT8, granularity=Granularity.PER_CHANNEL, calibration=Calibration.MINMAX)
    copies = []
    for _ in range(2):
        module = copy.deepcopy(program).module(check_guards=False)
        ready_for_calibration(module)
        prepared = prepare_pt2e(module, xnnpack_quantizer(quant))
        with torch.no_grad():
            prepared(x)
        copies.append(prepared)
    return model, x, copies


@pytest.mark.parametrize("decomposed", [False, True], ids=["batch_norm", "native_batch_norm_no_training"])
def test_convert_ptq_gives_the_graph_convert_pt2e_gives(decomposed: bool) -> None:
    model, x, (plain, held) = _prepared(decomposed)
    assert _norms(plain)  # what PT2E's prepare leaves, and torchao's convert would run its QAT fold for
    with torch.no_grad():
        expected = convert_pt2e(plain)  # the slow convert: its QAT fold exports its patterns
        converted = ptq_convert.convert_ptq(held)
        assert converted.code == expected.code  # node for node, the BatchNorms back as they were
        assert [n.target for n in _norms(converted)] == [n.target for n in _norms(expected)]
        torch.testing.assert_close(converted(x), expected(x), rtol=0, atol=0)
        torch.testing.assert_close(converted(x), model(x), rtol=0.1, atol=0.1)  # int8, near fp32


def test_convert_pt2e_sees_no_batch_norm_while_convert_ptq_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """What spares the fold: the graph convert_pt2e is given holds no op torchao takes for a BatchNorm."""
    from torchao.quantization.pt2e.utils import _is_bn_node

    seen: list[int] = []

    def convert(graph: torch.fx.GraphModule, **kwargs: object) -> torch.fx.GraphModule:
        seen.append(sum(1 for n in graph.graph.nodes if _is_bn_node(n)))
        return graph

    monkeypatch.setattr("torchao.quantization.pt2e.quantize_pt2e.convert_pt2e", convert)
    for decomposed in (False, True):
        _, x, (prepared, _) = _prepared(decomposed)
        before = prepared(x)
        converted = ptq_convert.convert_ptq(prepared)
        assert _norms(converted) and all(isinstance(n.target, torch._ops.OpOverload) for n in _norms(converted))
        torch.testing.assert_close(converted(x), before, rtol=0, atol=0)
    assert seen == [0, 0]
