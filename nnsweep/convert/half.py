"""A float model in half precision behind a float32 interface, for the converters that
export an fp16 artifact from PyTorch (ExecuTorch, torch)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = ["HalfPrecision"]


class HalfPrecision(nn.Module):
    """Runs ``model`` in fp16 and takes and returns float32, like ONNX Runtime's
    ``keep_io_types``: a float input is cast to half, every output back to float32.
    Token ids (an integer input) go in as they are: an embedding looks them up."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model.half()

    def forward(self, x: torch.Tensor) -> Any:
        from torch.utils import _pytree

        # Every output back to float32, whatever the structure (a tuple or dict of outputs).
        return _pytree.tree_map(lambda t: t.float(), self.model(x.half() if x.is_floating_point() else x))
