"""torchao's ``convert_pt2e`` for a graph quantized after training, without its QAT fold.

``convert_pt2e`` runs torchao's QAT conv-BatchNorm fold whenever the graph holds a
BatchNorm, and that fold exports its pattern graphs anew on each call, most of a LeViT's
static-int8 conversion (benchmarks/results/conversion.md, "A BatchNorm after a linear
layer"). It has nothing to
fold in a graph prepared for post-training quantization: ``prepare_pt2e`` folds each
BatchNorm that follows a convolution or a linear layer into it, and one left after anything
else (LeViT's, after a linear layer and a flatten) matches none of the fold's patterns,
which start at a convolution.

So while convert runs, each BatchNorm is called through a function of this module (the
same op, the same arguments), which torchao does not take for a BatchNorm, and is put
back after: the converted graph is the one ``convert_pt2e`` gives, node for node. QAT's
graphs, whose BatchNorms the fold is for, go to ``convert_pt2e`` itself.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["convert_ptq"]


def _batch_norm(*args: Any, **kwargs: Any) -> Any:
    return torch.ops.aten.batch_norm.default(*args, **kwargs)


def _batch_norm_no_training(*args: Any, **kwargs: Any) -> Any:
    return torch.ops.aten._native_batch_norm_legit_no_training.default(*args, **kwargs)


# Each BatchNorm op torchao's fold looks for in an eval graph -> the function that stands in for it.
_STAND_INS: dict[Any, Any] = {
    torch.ops.aten.batch_norm.default: _batch_norm,
    torch.ops.aten._native_batch_norm_legit_no_training.default: _batch_norm_no_training,
}
_OPS = {stand_in: op for op, stand_in in _STAND_INS.items()}


def _retarget(graph: torch.fx.GraphModule, targets: dict[Any, Any]) -> None:
    """Call each node whose target is a key of ``targets`` through its value instead."""
    moved = False
    for node in graph.graph.nodes:
        if node.op == "call_function" and node.target in targets:
            node.target = targets[node.target]
            moved = True
    if moved:
        graph.recompile()


def convert_ptq(prepared: torch.nn.Module, **kwargs: Any) -> torch.fx.GraphModule:
    """``convert_pt2e(prepared, **kwargs)`` for a graph prepared with ``prepare_pt2e`` (not
    ``prepare_qat_pt2e``) and calibrated; the same graph, without the QAT fold's cost."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e

    assert isinstance(prepared, torch.fx.GraphModule), "a prepared PT2E graph"
    _retarget(prepared, _STAND_INS)
    converted: torch.fx.GraphModule = convert_pt2e(prepared, **kwargs)
    _retarget(converted, _OPS)
    return converted
