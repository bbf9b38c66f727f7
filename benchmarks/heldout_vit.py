"""A held-out vision transformer for the layer ranking's tie-break (benchmarks/results/mixed_precision.md §6).

Random weights (seed 0), a 1x3x32x32 input and no dataset: nnsweep scores it by top-1
agreement with fp32 on synthetic inputs, which int8 does not change, so every layer
costs the same top-1 and only the outputs' SQNR against fp32 tells the layers apart.

Structure: a 4x4 patch embedding (``Conv2d``, 64 patches of 32 channels) plus a learned
position table, two ``nn.TransformerEncoderLayer(32, 4, 64)`` with GELU, a LayerNorm, a
mean over the patches and a linear head of 10 classes.

    nnsweep sensitivity --model benchmarks/heldout_vit.py:build --runtime onnxruntime --quant static_int8
    nnsweep bench --model benchmarks/heldout_vit.py:build --runtime executorch --quant static_int8 --float-layers 2
"""

from __future__ import annotations

import torch
from torch import nn


class TinyViT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, 32, 4, stride=4)
        self.pos = nn.Parameter(torch.zeros(1, 64, 32))
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True, activation="gelu")
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(32)
        self.head = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(x).flatten(2).transpose(1, 2) + self.pos
        x = self.encoder(x)
        return self.head(self.norm(x).mean(1))


def build() -> tuple[nn.Module, torch.Tensor]:
    """The model (seed 0) and its example input."""
    torch.manual_seed(0)
    return TinyViT().eval(), torch.randn(1, 3, 32, 32)
