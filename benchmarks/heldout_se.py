"""The fifth held-out model of the search benchmark: inverted residual blocks with squeeze-and-excitation.

Structure, unlike the other held-out models: inverted residual blocks (a 1x1
expansion, a 3x3 depthwise convolution, a squeeze-and-excitation gate, a 1x1
projection), hardswish activations and a hardsigmoid gate, as MobileNetV3 writes them.
The first block strides, the second has no residual, the third has one.

What int8 breaks: four channels of ``block2.bn_expand``'s shift (the BatchNorm bias)
are trained through a fixed gain of 256 (``torch.nn.utils.parametrize``, removed after
training; the shift starts at 16), so after the hardswish (the identity above 3) they
sit near 4000 for every input while the other channels reach a few units. BatchNorm
folds into ``block2.expand``, so that convolution's output and ``block2.dw``'s input
carry them; activations are quantized per tensor on every runtime, and the informative
channels keep one or two levels. ``block2.bn_dw`` removes their near-constant
contribution again, so the float model trains; the block has no residual, so nothing
bypasses it.

Data: scikit-learn's bundled 8x8 digits upsampled to 16x16 (``heldout_common.heldout_dataset``;
nothing downloaded). Trained in seconds on one CPU thread with a fixed seed; the
weights are cached under nnsweep's cache directory by the digest of this file, the
toolchain and the data. ::

    stem      conv 3x3, 1 -> 32, BatchNorm, hardswish                        32 x 16 x 16
    block1    expand 1x1 32 -> 96, depthwise 3x3 stride 2 (each with
              BatchNorm, hardswish), SE 96 -> 24 -> 96, project 1x1 -> 48,
              BatchNorm; no residual                                         48 x 8 x 8
    block2    the same, 48 -> 144 -> 48, stride 1, no residual               48 x 8 x 8
    block3    as block2, + input                                             48 x 8 x 8
    pool      mean over the 8 x 8 positions                                  48
    fc1       linear 48 -> 128, hardswish                                    128
    fc2       linear 128 -> 10

    SE        x * hardsigmoid(conv 1x1(ReLU(conv 1x1(mean over positions of x))))

Use it as a model reference: ``benchmarks/heldout_se.py:heldout_se``.
"""

from __future__ import annotations

from pathlib import Path

import torch
from heldout_common import train_with_outliers, trained
from torch import nn

from nnsweep.models import Dataset, Split

NAME = "heldout_se"
EPOCHS = 20
LR = 3e-3
STEM = 32
WIDTH = 48
EXPANSION = 3
SE_RATIO = 4  # the gate's bottleneck: the expanded width divided by this
HIDDEN = 128
OUTLIER_CHANNELS = (7, 50, 93, 131)
OUTLIER_GAIN = 256.0
OUTLIER_SHIFT = 16.0  # initial shift of the outlier channels, before the gain


class SqueezeExcite(nn.Module):
    """A per-channel gate from the channels' means: 1x1 reduce, ReLU, 1x1 expand, hardsigmoid."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.reduce = nn.Conv2d(channels, channels // SE_RATIO, 1)
        self.relu = nn.ReLU()
        self.expand = nn.Conv2d(channels // SE_RATIO, channels, 1)
        self.gate = nn.Hardsigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gate(self.expand(self.relu(self.reduce(self.pool(x)))))


class InvertedResidual(nn.Module):
    """1x1 expansion, 3x3 depthwise convolution, squeeze-and-excitation, 1x1 projection, an optional residual."""

    def __init__(self, inputs: int, stride: int = 1, residual: bool = True) -> None:
        super().__init__()
        expanded = inputs * EXPANSION
        self.expand = nn.Conv2d(inputs, expanded, 1, bias=False)
        self.bn_expand = nn.BatchNorm2d(expanded)
        self.act_expand = nn.Hardswish()
        self.dw = nn.Conv2d(expanded, expanded, 3, stride=stride, padding=1, groups=expanded, bias=False)
        self.bn_dw = nn.BatchNorm2d(expanded)
        self.act_dw = nn.Hardswish()
        self.se = SqueezeExcite(expanded)
        self.project = nn.Conv2d(expanded, WIDTH, 1, bias=False)
        self.bn_project = nn.BatchNorm2d(WIDTH)
        self.residual = residual

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.act_expand(self.bn_expand(self.expand(x)))
        y = self.se(self.act_dw(self.bn_dw(self.dw(y))))
        y = self.bn_project(self.project(y))
        return x + y if self.residual else y


class SENet(nn.Module):
    """Classifier for 1x16x16 digits; see the module docstring."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, STEM, 3, padding=1, bias=False), nn.BatchNorm2d(STEM), nn.Hardswish())
        self.block1 = InvertedResidual(STEM, stride=2, residual=False)
        self.block2 = InvertedResidual(WIDTH, residual=False)
        self.block3 = InvertedResidual(WIDTH)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Linear(WIDTH, HIDDEN)
        self.act = nn.Hardswish()
        self.fc2 = nn.Linear(HIDDEN, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.block3(self.block2(self.block1(self.stem(x))))).flatten(1)
        return self.fc2(self.act(self.fc1(x)))


def _train(model: nn.Module, data: Split) -> None:
    if not isinstance(model, SENet):
        raise TypeError(f"a SENet, not {type(model).__name__}")
    train_with_outliers(
        model,
        data,
        model.block2.bn_expand,
        OUTLIER_CHANNELS,
        gain=OUTLIER_GAIN,
        shift=OUTLIER_SHIFT,
        epochs=EPOCHS,
        lr=LR,
    )


def heldout_se() -> tuple[nn.Module, torch.Tensor, Dataset]:
    """The trained model, an example input (batch 1) and its data: a model function for
    nnsweep (``benchmarks/heldout_se.py:heldout_se``)."""
    return trained(NAME, SENet, Path(__file__), _train)
