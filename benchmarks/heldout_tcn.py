"""The fourth held-out model of the search benchmark: a temporal convolution network over an image's rows.

``benchmarks/search_table.py --space tcn`` measures its table
(``benchmarks/data/search_table_tcn_threads1.json``). It checks the front's ascent (the
moves' last step, ``nnsweep.sweep.moves``), which was designed on the ResNet table: the
model was written, and its table measured, after that change was committed (01d6cf7).

Structure, unlike the other held-out models: the 16x16 image is read as a sequence of
16 rows of 16 values; temporal blocks of two dilated convolutions along the sequence
(dilation 1, 2, 4) with BatchNorm and GELU; a max over the sequence; a linear head.
The first and last blocks are residual, the middle one is not. The convolutions are
``Conv2d`` with (3, 1) kernels over (steps, 1), as sequence models for TFLite are often
written. (A ``Conv1d`` version found that ExecuTorch 1.5.1's XNNPACK backend fails a
float ``Conv1d`` beside int8 layers; the converter now writes such a layer as a
``Conv2d`` itself: benchmarks/results/mixed_precision.md.)

What int8 breaks: four channels of ``block2.bn1``'s shift (the BatchNorm bias) are
trained through a fixed gain of 256 (``torch.nn.utils.parametrize``, removed after
training; the shift starts at 16), so after the GELU they sit near 4000 for every input
while the other channels reach a few units. BatchNorm folds into ``block2.conv1``, so
that convolution's output and ``block2.conv2``'s input carry them; activations are
quantized per tensor on every runtime, and the informative channels keep one or two
levels. ``block2.bn2`` removes their near-constant contribution again, so the float
model trains; the middle block has no residual, so nothing bypasses it.

Data: scikit-learn's bundled 8x8 digits upsampled to 16x16 (``heldout_common.heldout_dataset``;
nothing downloaded). Trained in seconds on one CPU thread with a fixed seed; the
weights are cached under nnsweep's cache directory by the digest of this file, the
toolchain and the data. ::

    rows      the image as 16 steps of 16 values                              16 x 16
    stem      conv 1x1, 16 -> 128, GELU                                       128 x 16
    block1    x + BN(conv 3x1(GELU(BN(conv 3x1(x))))), dilation 1            128 x 16
    block2    the same without the residual, dilation 2                       128 x 16
    block3    as block1, dilation 4                                           128 x 16
    pool      max over the 16 steps                                           128
    head      linear 128 -> 10

Use it as a model reference: ``benchmarks/heldout_tcn.py:heldout_tcn``.
"""

from __future__ import annotations

from pathlib import Path

import torch
from heldout_common import SIZE, train_with_outliers, trained
from torch import nn

from nnsweep.models import Dataset, Split

NAME = "heldout_tcn"
EPOCHS = 20
LR = 3e-3
WIDTH = 128
OUTLIER_CHANNELS = (5, 43, 77, 101)
OUTLIER_GAIN = 256.0
OUTLIER_SHIFT = 16.0  # initial bias of the outlier channels, before the gain


class Block(nn.Module):
    """Two dilated convolutions along the sequence with BatchNorm and GELU, around an optional residual."""

    def __init__(self, dilation: int, residual: bool = True) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(WIDTH, WIDTH, (3, 1), padding=(dilation, 0), dilation=(dilation, 1), bias=False)
        self.bn1 = nn.BatchNorm2d(WIDTH)
        self.act = nn.GELU()
        self.conv2 = nn.Conv2d(WIDTH, WIDTH, (3, 1), padding=(dilation, 0), dilation=(dilation, 1), bias=False)
        self.bn2 = nn.BatchNorm2d(WIDTH)
        self.residual = residual

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn2(self.conv2(self.act(self.bn1(self.conv1(x)))))
        return x + y if self.residual else y


class TCN(nn.Module):
    """Classifier for 1x16x16 digits read row by row; see the module docstring."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(SIZE, WIDTH, 1), nn.GELU())
        self.block1 = Block(1)
        self.block2 = Block(2, residual=False)
        self.block3 = Block(4)
        self.head = nn.Linear(WIDTH, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # (N, 1, 16, 16) -> (N, 16 values, 16 steps, 1): a sequence, as 2-D convolutions over (steps, 1)
        rows = x.flatten(1, 2).transpose(1, 2).unsqueeze(-1)
        y = self.block3(self.block2(self.block1(self.stem(rows))))
        return self.head(y.amax(dim=(2, 3)))


def _train(model: nn.Module, data: Split) -> None:
    if not isinstance(model, TCN):
        raise TypeError(f"a TCN, not {type(model).__name__}")
    train_with_outliers(
        model, data, model.block2.bn1, OUTLIER_CHANNELS, gain=OUTLIER_GAIN, shift=OUTLIER_SHIFT, epochs=EPOCHS, lr=LR
    )


def heldout_tcn() -> tuple[nn.Module, torch.Tensor, Dataset]:
    """The trained model, an example input (batch 1) and its data: a model function for
    nnsweep (``benchmarks/heldout_tcn.py:heldout_tcn``)."""
    return trained(NAME, TCN, Path(__file__), _train)
