"""``nn.EmbeddingBag`` as an embedding and a reduction (``nnsweep/runtimes/common/bags.py``): the same
values as the bag, in the bag's place, and the exporting runtimes deploy it."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from torch import nn

from nnsweep.runtimes.common.bags import unbag_embeddings


def _ids(padding: int | None) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 50, (6, 5), generator=generator)
    if padding is not None:
        ids[0, :2] = padding  # a bag with some padding
        ids[1] = padding  # a bag of padding alone
    return ids


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding", [None, 3])
def test_the_rewrite_gives_what_the_bag_gives(mode: str, padding: int | None) -> None:
    torch.manual_seed(0)
    bag = nn.EmbeddingBag(50, 8, mode=mode, padding_idx=padding)
    model = nn.Sequential(bag)
    rewritten = copy.deepcopy(model)
    assert unbag_embeddings(rewritten) == 1
    ids = _ids(padding)
    assert torch.allclose(rewritten(ids), bag(ids), atol=1e-6)
    assert rewritten.state_dict().keys() == model.state_dict().keys()  # the weight keeps its name


def test_per_sample_weights_scale_the_rows_of_a_sum() -> None:
    torch.manual_seed(0)
    bag = nn.EmbeddingBag(50, 8, mode="sum")
    holder = nn.Module()
    holder.bag = copy.deepcopy(bag)
    unbag_embeddings(holder)
    ids, weights = _ids(None), torch.rand(6, 5)
    assert torch.allclose(holder.bag(ids, per_sample_weights=weights), bag(ids, per_sample_weights=weights), atol=1e-6)


def test_a_bag_called_with_offsets_keeps_embedding_bag() -> None:
    torch.manual_seed(0)
    bag = nn.EmbeddingBag(50, 8, mode="mean")
    model = nn.Sequential(copy.deepcopy(bag))
    unbag_embeddings(model)
    flat, offsets = torch.tensor([1, 2, 3, 4, 5]), torch.tensor([0, 2])
    assert torch.allclose(model[0](flat, offsets), bag(flat, offsets))


class _Tower(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bag = nn.EmbeddingBag(200, 16, mode="mean")
        self.head = nn.Linear(16, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.bag(ids))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("runtime", "mode", "floor_db"),
    [("executorch", "fp32", 100.0), ("litert", "fp32", 100.0), ("onnxruntime", "fp16", 40.0)],
)
def test_a_model_with_an_embedding_bag_deploys(runtime: str, mode: str, floor_db: float, tmp_path: Path) -> None:
    # Before: ExecuTorch "Missing operator: aten::_embedding_bag.out" when loaded; litert-torch
    # "Lowering not found: aten._embedding_bag.default"; ONNX Runtime's fp16 could not type the
    # Loop torch.onnx writes for a bag.
    from nnsweep.api import measure
    from nnsweep.bench import MeasureSettings

    torch.manual_seed(0)
    result = measure(
        _Tower().eval(),
        torch.randint(0, 200, (1, 6)),
        runtime=runtime,
        quant={"mode": mode},
        settings=MeasureSettings(warmup=1, iters=5),
        cache_dir=tmp_path,
    )
    assert result.evaluation.fidelity.sqnr_db > floor_db


def test_the_export_that_names_layers_for_mixed_precision_has_no_bag_loop(tmp_path: Path) -> None:
    # ONNX Runtime with float_layers exports with module paths in the node names; that export
    # kept the bag's Loop, whose table lookup no float region reached: with the head float,
    # the table stayed int8 (65.5 dB against fp32; the plain export's lookup: 146.9 dB).
    import onnx

    from nnsweep.runtimes.common import float_fallback
    from nnsweep.runtimes.common.float_region import onnx_float_region

    float_fallback.export_onnx_scoped(_Tower().eval(), torch.randint(0, 200, (1, 6)), tmp_path / "m.onnx")
    model = onnx.load(str(tmp_path / "m.onnx"))
    assert "Loop" not in {n.op_type for n in model.graph.node}
    assert onnx_float_region(model, ("head",)) == [n.name for n in model.graph.node]
