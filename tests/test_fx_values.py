"""Values torch's FX quantization takes for float activations (``nnsweep/runtimes/common/fx_values.py``):
arithmetic on input shapes folded into constants where it meets a tensor, the model left
alone where it does not; observers of integer tensors taken out."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import fx, nn

from nnsweep.core.config import DeploymentConfig, QuantConfig, QuantMode
from nnsweep.runtimes.common.fx_values import drop_non_float_observers, fold_shape_arithmetic


class _ScaledAttention(nn.Module):
    """Attention whose scale comes from the runtime shape, as research code writes it."""

    def __init__(self, dim: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.head = nn.Linear(dim, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).unbind(2)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * (d // self.heads) ** -0.5
        out = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), v).reshape(b, n, d)
        return self.head(out.sum(1) / x.shape[1])


class _Reshapes(nn.Module):
    """Reads shapes only to reshape: nothing to fold."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x.view(x.shape[0], -1))


def _shape_reads(module: nn.Module) -> int:
    assert isinstance(module, fx.GraphModule)
    return sum(
        1
        for n in module.graph.nodes
        if (n.op == "call_method" and n.target == "size") or (n.target is getattr and n.args[1] == "shape")
    )


def test_shape_arithmetic_meeting_a_tensor_becomes_constants_of_the_example_shape() -> None:
    torch.manual_seed(0)
    model, x = _ScaledAttention().eval(), torch.randn(1, 6, 16)
    folded = fold_shape_arithmetic(model, (x,))
    assert _shape_reads(folded) == 1  # x.shape, for its batch size
    assert dict(folded.named_modules()).keys() >= {"qkv", "head"}  # the layers keep their names
    assert "0.3535" in folded.code and "/ 6" in folded.code
    assert torch.equal(folded(x), model(x))
    batch = torch.randn(3, 6, 16)  # the batch size stays a value of the graph: QAT and the ranking run batches
    assert torch.allclose(folded(batch), model(batch), atol=1e-6)


def test_a_model_that_reads_shapes_only_to_reshape_is_left_as_it_is() -> None:
    model = _Reshapes().eval()
    assert fold_shape_arithmetic(model, (torch.randn(1, 2, 4),)) is model


def test_a_model_torch_fx_cannot_trace_is_left_for_prepare_to_report() -> None:
    class Branches(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x if x.sum() > 0 else -x  # data-dependent control flow

    model = Branches()
    assert fold_shape_arithmetic(model, (torch.randn(2),)) is model


def test_a_training_model_is_folded_in_eval_mode_and_given_back_training() -> None:
    class Normed(_ScaledAttention):
        def __init__(self) -> None:
            super().__init__()
            self.norm = nn.BatchNorm1d(6)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return super().forward(self.norm(x))

    model = Normed().train()
    folded = fold_shape_arithmetic(model, (torch.randn(1, 6, 16),))  # a batch of one: BatchNorm in eval
    assert folded is not model and folded.training


def test_torch_static_int8_converts_attention_scaled_by_its_shape_with_and_without_a_float_layer(
    tmp_path: Path,
) -> None:
    # Before: "'float' object has no attribute 'numel'" (prepare_fx observed the scale).
    from nnsweep.models import load_model, register_live
    from nnsweep.runtimes.torch.converter import TorchConverter

    torch.manual_seed(0)
    bundle = load_model(register_live("scaled_attention", _ScaledAttention().eval(), torch.randn(1, 6, 16)))
    x = torch.from_numpy(bundle.dataset.evaluation.inputs[:8])
    with torch.no_grad():
        expected = bundle.module(x)
    quantized_ops = []
    for float_layers in [(), ("qkv",)]:
        config = DeploymentConfig("torch", ("x86",), QuantConfig(QuantMode.STATIC_INT8, float_layers=float_layers))
        out_dir = tmp_path / str(len(float_layers))
        out_dir.mkdir()
        result = TorchConverter().convert(bundle, config, out_dir)
        quantized_ops.append(result.partitions.nodes_by_backend["x86"])
        deployed = torch.jit.load(str(out_dir / result.filename))
        with torch.no_grad():
            got = torch.cat([deployed(sample[None]) for sample in x])
        noise = (got - expected).pow(2).mean()
        assert float(10 * torch.log10(expected.pow(2).mean() / noise)) > 20.0
    assert quantized_ops[1] < quantized_ops[0]  # the layer kept float by its name


class _TopTokens(nn.Module):
    """Keeps the four best-scored tokens: topk indices, gather, flip, index_select by a buffer."""

    def __init__(self, dim: int = 12) -> None:
        super().__init__()
        self.score = nn.Linear(dim, 1)
        self.proj = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, 4)
        self.register_buffer("order", torch.arange(3, -1, -1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        index = self.score(x).squeeze(-1).topk(4, dim=1).indices
        picked = torch.gather(x, 1, index.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
        picked = torch.index_select(torch.flip(picked, dims=[1]), 1, self.order)
        return self.head(torch.relu(self.proj(picked)).mean(1))


@pytest.mark.filterwarnings("ignore:Please use quant_min and quant_max:UserWarning")  # torch's default mapping
def test_observers_of_integer_indices_are_taken_out_and_the_float_ones_kept() -> None:
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize import _is_activation_post_process
    from torch.ao.quantization.quantize_fx import prepare_fx

    torch.manual_seed(0)
    x = torch.randn(1, 10, 12)
    prepared = prepare_fx(_TopTokens().eval(), get_default_qconfig_mapping("x86"), (x,))

    def observed() -> list[str]:
        return [
            n.args[0].name
            for n in prepared.graph.nodes
            if n.op == "call_module" and _is_activation_post_process(prepared.get_submodule(n.target))
        ]

    before = observed()
    assert drop_non_float_observers(prepared, (x,)) == ["getattr_1", "unsqueeze"]  # topk's indices, unsqueezed
    assert observed() == [name for name in before if name not in ("getattr_1", "unsqueeze")]
    prepared(x)  # calibrates: every observer left sees a float tensor


def test_torch_static_int8_converts_a_model_that_gathers_by_topk_indices(tmp_path: Path) -> None:
    # Before: "Quantize only works on Float Tensor, got Long".
    from nnsweep.models import load_model, register_live
    from nnsweep.runtimes.torch.converter import TorchConverter

    torch.manual_seed(0)
    bundle = load_model(register_live("top_tokens", _TopTokens().eval(), torch.randn(1, 10, 12)))
    config = DeploymentConfig("torch", ("x86",), QuantConfig(QuantMode.STATIC_INT8))
    result = TorchConverter().convert(bundle, config, tmp_path)
    deployed = torch.jit.load(str(tmp_path / result.filename))
    x = torch.from_numpy(bundle.dataset.evaluation.inputs[:8])
    with torch.no_grad():
        expected = bundle.module(x)
        got = torch.cat([deployed(sample[None]) for sample in x])
    noise = (got - expected).pow(2).mean()
    assert float(10 * torch.log10(expected.pow(2).mean() / noise)) > 20.0


def test_torch_qat_int8_fine_tunes_attention_scaled_by_its_shape_on_batches(tmp_path: Path) -> None:
    # The batch size is not folded: QAT fine-tunes on batches of 32 where the model takes them
    # (a fold of every shape made it reshape 32 samples as 1).
    from nnsweep.models import load_model, register_live
    from nnsweep.models._bundle import takes_batches
    from nnsweep.runtimes.torch.converter import TorchConverter

    torch.manual_seed(0)
    bundle = load_model(register_live("scaled_attention_qat", _ScaledAttention().eval(), torch.randn(1, 6, 16)))
    assert takes_batches(bundle)
    config = DeploymentConfig("torch", ("x86",), QuantConfig(QuantMode.QAT_INT8, qat_epochs=1))
    result = TorchConverter().convert(bundle, config, tmp_path)
    assert result.partitions.nodes_by_backend["x86"] > 0
