"""``torch.onnx.export`` as nnsweep's ONNX exports call it, with one retry.

torch 2.14's ONNX exporter takes the model through ``torch.export`` and then its own
decomposition table, which failed on Hugging Face's Swin: a ``.contiguous()`` before
the ``.view`` that merges the attention heads was lost on the way, and the view was
refused ("Failed to decompose the FX graph for ONNX compatibility ... Cannot view a
tensor with shape torch.Size([16, 16, 2, 12]) and strides (384, 12, 192, 1)"). The
program decomposed by ``torch.export``'s own default table, as ExecuTorch takes it,
exports. That is the retry, for a model the direct export fails on only: what exports
directly keeps the ops the exporter keeps whole (``aten.linear`` as ``MatMul``,
``layer_norm`` as ``LayerNormalization``).
"""

from __future__ import annotations

import logging
from typing import Any

import torch

__all__ = ["onnx_program"]

_log = logging.getLogger(__name__)


def onnx_program(module: torch.nn.Module, example: torch.Tensor, **options: Any) -> Any:
    """``torch.onnx.export(module, (example,), dynamo=True, **options)``; if that fails,
    the same export of ``module``'s ``torch.export`` program with the default
    decompositions applied. The first failure is raised when the retry fails too."""
    try:
        return torch.onnx.export(module, (example,), dynamo=True, **options)
    except Exception as first:  # toolchain code: any failure gets the one retry
        _log.debug("ONNX export failed (%s); again from the decomposed torch.export program", first)
        try:
            program = torch.export.export(module, (example,), strict=False).run_decompositions()
            return torch.onnx.export(program, (example,), dynamo=True, **options)
        except Exception as second:
            _log.debug("ONNX export of the decomposed program failed too (%s)", second)
            raise first from None
