"""The PT2E rankings' rewrite of a BatchNorm that PT2E's prepare leaves (one after a linear
layer, as LeViT has them) into its affine map, which spares torchao's convert its QAT fold."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

from nnsweep.convert.executorch import xnnpack_quantizer
from nnsweep.convert.pt2e import export, ready_for_calibration
from nnsweep.core.quant import Calibration, Granularity, QuantConfig, QuantMode
from nnsweep.sensitivity.ranking import batch_norms_as_affine


class _LinearThenNorm(nn.Module):
    """LeViT's MLP layer: a linear layer over tokens, then a BatchNorm1d over the flattened tokens."""

    def __init__(self) -> None:
        super().__init__()
        self.fc, self.norm, self.out = nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.fc(x).flatten(0, 1)).reshape(x.shape[0], x.shape[1], 16)
        return self.out(torch.relu(h))


def _norms(graph: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in graph.graph.nodes if n.op == "call_function" and "batch_norm" in str(n.target)]


def _calibrated(decomposed: bool) -> tuple[nn.Module, torch.Tensor, torch.fx.GraphModule, torch.fx.GraphModule]:
    """The model, an input, and two copies of its program prepared and calibrated alike."""
    torch.manual_seed(0)
    model = _LinearThenNorm().eval()
    with torch.no_grad():  # statistics and an affine far from the identity
        model.norm.running_mean.uniform_(-2, 2)
        model.norm.running_var.uniform_(0.2, 4)
        model.norm.weight.uniform_(0.5, 2)
        model.norm.bias.uniform_(-1, 1)
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
    return model, x, copies[0], copies[1]


@pytest.mark.parametrize("decomposed", [False, True], ids=["batch_norm", "native_batch_norm_no_training"])
def test_a_batch_norm_left_after_prepare_becomes_its_affine_map(decomposed: bool) -> None:
    _, x, kept, rewritten = _calibrated(decomposed)
    assert len(_norms(kept)) == 1  # what PT2E's prepare leaves, and torchao's convert would fold
    assert batch_norms_as_affine(rewritten) == 1
    assert not _norms(rewritten)
    with torch.no_grad():  # the observed graphs compute in float
        torch.testing.assert_close(rewritten(x), kept(x), rtol=1e-5, atol=1e-5)


def test_the_rewritten_graph_quantizes_as_the_one_with_its_batch_norm() -> None:
    model, x, kept, rewritten = _calibrated(decomposed=False)
    batch_norms_as_affine(rewritten)
    with torch.no_grad():
        quantized = convert_pt2e(kept)(x)  # the slow convert: its QAT fold exports its patterns
        torch.testing.assert_close(convert_pt2e(rewritten)(x), quantized, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(quantized, model(x), rtol=0.1, atol=0.1)  # int8, near fp32
