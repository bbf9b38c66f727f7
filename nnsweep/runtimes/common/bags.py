"""``nn.EmbeddingBag`` as an embedding and a reduction, for the converters that export.

ExecuTorch's portable kernels have no ``embedding_bag`` (the program converts, then fails to
load: "Missing operator: aten::_embedding_bag.out"), and litert-torch has no lowering for
it ("Lowering not found: aten._embedding_bag.default"). A bag of a fixed number of ids per
sample, ``bag(ids)`` with ``ids`` of shape ``(batch, n)``, is an embedding lookup and a sum,
mean or max over the ``n`` rows, which both toolchains take. :func:`unbag_embeddings` puts
such a module in each bag's place in the converter's copy of the model, with the same
weight under the same name; a bag called with ``offsets`` (ids in one flat list) or a
``max_norm`` keeps ``F.embedding_bag``, and its conversion fails as it did.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["unbag_embeddings", "unbagged_copy"]


def unbagged_copy(model: nn.Module) -> nn.Module:
    """The converter's own copy of ``model`` to export: deep, in eval mode, each bag taken
    apart (:func:`unbag_embeddings`); ``model`` is not touched."""
    import copy

    module = copy.deepcopy(model).eval()
    unbag_embeddings(module)
    return module


def unbag_embeddings(model: nn.Module) -> int:
    """Put an :class:`_EmbeddingThenReduce` in the place of each ``nn.EmbeddingBag`` of
    ``model``, in place; return how many. Callers pass their own copy of the model."""
    bags = [(name, sub) for name, sub in model.named_modules() if type(sub) is nn.EmbeddingBag]
    for name, bag in bags:
        parent, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, attr, _EmbeddingThenReduce(bag))
    return len(bags)


class _EmbeddingThenReduce(nn.Module):
    """What ``bag`` computes on ids of shape ``(batch, n)``: rows looked up, then reduced over
    ``n`` by ``bag.mode``, the rows of ``bag.padding_idx`` left out (a bag of padding alone
    gives zeros, as ``F.embedding_bag`` does); ``per_sample_weights`` scale the rows (sum)."""

    def __init__(self, bag: nn.EmbeddingBag) -> None:
        super().__init__()
        self.weight = bag.weight
        self.bag_options: dict[str, Any] = {
            "max_norm": bag.max_norm,
            "norm_type": bag.norm_type,
            "scale_grad_by_freq": bag.scale_grad_by_freq,
            "mode": bag.mode,
            "sparse": bag.sparse,
            "include_last_offset": bag.include_last_offset,
            "padding_idx": bag.padding_idx,
        }

    def forward(
        self, ids: torch.Tensor, offsets: torch.Tensor | None = None, per_sample_weights: torch.Tensor | None = None
    ) -> torch.Tensor:
        if offsets is not None or ids.dim() != 2 or self.bag_options["max_norm"] is not None:
            return F.embedding_bag(ids, self.weight, offsets, per_sample_weights=per_sample_weights, **self.bag_options)
        mode, padding_idx = self.bag_options["mode"], self.bag_options["padding_idx"]
        rows = F.embedding(ids, self.weight)
        if per_sample_weights is not None:
            rows = rows * per_sample_weights.unsqueeze(-1)
        if padding_idx is None:
            if mode == "sum":
                return rows.sum(1)
            return rows.mean(1) if mode == "mean" else rows.amax(1)
        keep = (ids != padding_idx).unsqueeze(-1)
        if mode == "max":
            most = rows.masked_fill(~keep, float("-inf")).amax(1)
            return torch.where(keep.any(1), most, torch.zeros_like(most))
        total = (rows * keep).sum(1)
        return total if mode == "sum" else total / keep.sum(1).clamp(min=1)
