"""The third held-out model of the search benchmark: a small ResNet with outlier channels inside a residual block.

``benchmarks/search_table.py --space resnet`` measures its table
(``benchmarks/data/search_table_resnet_threads1.json``). It checks the repair rule that
was changed after the second held-out table (``heldout_hybrid.py``) was replayed: the
model was written, and its table measured, after that change was committed (260851b).

What int8 breaks: four channels of ``layer1.bn1`` have their shift (the BatchNorm bias)
trained through a fixed gain of 256 (``torch.nn.utils.parametrize``, removed after
training; the shift starts at 16), so after the ReLU they sit near 4000 for every input
while the other channels reach a few units. BatchNorm folds into ``layer1.conv1``, so
that convolution's output and ``layer1.conv2``'s input carry them; activations are
quantized per tensor on every runtime, and the informative channels keep one or two
levels. ``layer1.conv2``'s BatchNorm removes their near-constant contribution again,
so the float model trains. The mechanism is ``digits_outlier``'s (a BatchNorm shift);
the structure is not: full 3x3 convolutions in residual blocks, no depthwise
convolution, the outliers in the first block and beside a skip connection.

A first version put a gain on four weight columns of a linear layer instead; its
float model routed most of its information through those columns, so int8 cost it 0.4
points only (fake-quantized weights, per channel), and it was dropped before any table.

Data: scikit-learn's bundled 8x8 digits upsampled to 16x16 (``heldout_common.heldout_dataset``;
nothing downloaded). Trained in seconds on one CPU thread with a fixed seed; the
weights are cached under nnsweep's cache directory by the digest of this file, the
toolchain and the data. ::

    stem             conv 3x3, 1 -> 32, BatchNorm, ReLU                      32 x 16 x 16
    layer1, layer2   basic residual blocks: conv 3x3, BatchNorm, ReLU,
                     conv 3x3, BatchNorm, + input, ReLU (layer2 with stride 2) 32 x 8 x 8
    pool             mean over the 8 x 8 positions                           32
    fc1              linear 32 -> 128, ReLU                                  128
    fc2              linear 128 -> 10

Use it as a model reference: ``benchmarks/heldout_resnet.py:heldout_resnet``.
"""

from __future__ import annotations

from pathlib import Path

import torch
from heldout_common import train_with_outliers, trained
from torch import nn

from nnsweep.models import Dataset, Split

NAME = "heldout_resnet"
EPOCHS = 20
LR = 3e-3
WIDTH = 32
HIDDEN = 128
OUTLIER_CHANNELS = (2, 11, 19, 27)
OUTLIER_GAIN = 256.0
OUTLIER_SHIFT = 16.0  # initial shift of the outlier channels, before the gain


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with BatchNorm and a skip connection (a 1x1 projection when striding)."""

    def __init__(self, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(WIDTH, WIDTH, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(WIDTH)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(WIDTH, WIDTH, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(WIDTH)
        self.skip = nn.Conv2d(WIDTH, WIDTH, 1, stride=stride, bias=False) if stride > 1 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
        return self.relu(y + self.skip(x))


class ResNet(nn.Module):
    """Classifier for 1x16x16 digits; see the module docstring."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, WIDTH, 3, padding=1, bias=False), nn.BatchNorm2d(WIDTH), nn.ReLU())
        self.layer1 = BasicBlock(stride=1)
        self.layer2 = BasicBlock(stride=2)
        self.fc1 = nn.Linear(WIDTH, HIDDEN)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(HIDDEN, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layer2(self.layer1(self.stem(x))).mean(dim=(2, 3))
        return self.fc2(self.act(self.fc1(x)))


def _train(model: nn.Module, data: Split) -> None:
    if not isinstance(model, ResNet):
        raise TypeError(f"a ResNet, not {type(model).__name__}")
    train_with_outliers(
        model, data, model.layer1.bn1, OUTLIER_CHANNELS, gain=OUTLIER_GAIN, shift=OUTLIER_SHIFT, epochs=EPOCHS, lr=LR
    )


def heldout_resnet() -> tuple[nn.Module, torch.Tensor, Dataset]:
    """The trained model, an example input (batch 1) and its data: a model function for
    nnsweep (``benchmarks/heldout_resnet.py:heldout_resnet``)."""
    return trained(NAME, ResNet, Path(__file__), _train)
