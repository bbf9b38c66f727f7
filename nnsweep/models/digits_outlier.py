"""The built-in ``digits_outlier`` model: a digits classifier that int8 hurts.

The digits data upsampled to 16x16, a ConvNeXt/MobileNetV3-like net (stem, three
blocks of depthwise 3x3 + wide pointwise convolutions with ReLU, so int8 pays on every
runtime; a linear head), trained in seconds with a fixed seed, weights cached by recipe.

Why int8 hurts it: activation outlier channels. Four channels of ``blocks.2``'s
depthwise BatchNorm are trained with a large shift (a fixed gain of 256 on beta via
``torch.nn.utils.parametrize``, removed after training), so the tensor between
``blocks.2.dw`` and ``blocks.2.pw1`` spans about [-5, 1025] and per-tensor activation
scales leave the informative channels one or two levels. Keeping that tensor float
means keeping both its producer and its consumer float; everything else can be int8
(figures: benchmarks/results/mixed_precision.md).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn.utils import parametrize

from nnsweep.models._bundle import Dataset, ModelBundle, Split
from nnsweep.models._trained import train_one_cycle, trained_bundle
from nnsweep.models.digits import digits_dataset

__all__ = ["NAME", "OUTLIER_BLOCK", "OutlierNet", "load_digits_outlier", "outlier_dataset"]

log = logging.getLogger(__name__)

NAME = "digits_outlier"
SEED = 0
EPOCHS = 12
BATCH = 32
LR = 4e-3
SIZE = 16  # input side after upsampling
STEM = 32
# (in, expanded, out, stride) per block
BLOCKS = ((32, 256, 64, 2), (64, 384, 64, 1), (64, 384, 128, 2))
OUTLIER_BLOCK = 2  # the block whose depthwise BN carries the outlier channels
OUTLIER_CHANNELS = (3, 17, 40, 58)
OUTLIER_GAIN = 256.0
OUTLIER_SHIFT = 4.0  # initial shift of the outlier channels, before the gain


class _Gain(nn.Module):
    """Multiplies a BatchNorm affine parameter by a fixed per-channel gain (a reparameterisation)."""

    def __init__(self, gain: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("gain", gain)

    gain: torch.Tensor

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        return value * self.gain


class Block(nn.Module):
    """Depthwise 3x3 + BN, pointwise expand + BN + ReLU, pointwise project + BN, residual."""

    def __init__(self, cin: int, hidden: int, cout: int, stride: int) -> None:
        super().__init__()
        self.dw = nn.Conv2d(cin, cin, 3, stride=stride, padding=1, groups=cin, bias=False)
        self.dw_bn = nn.BatchNorm2d(cin)
        self.pw1 = nn.Conv2d(cin, hidden, 1, bias=False)
        self.pw1_bn = nn.BatchNorm2d(hidden)
        self.act = nn.ReLU()
        self.pw2 = nn.Conv2d(hidden, cout, 1, bias=False)
        self.pw2_bn = nn.BatchNorm2d(cout)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dw_bn(self.dw(x))
        y = self.act(self.pw1_bn(self.pw1(y)))
        y = self.pw2_bn(self.pw2(y))
        return x + y if self.residual else y


class OutlierNet(nn.Module):
    """Classifier for 1x16x16 digits; see the module docstring."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, STEM, 3, padding=1, bias=False), nn.BatchNorm2d(STEM), nn.Hardswish())
        self.blocks = nn.Sequential(*(Block(*spec) for spec in BLOCKS))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(BLOCKS[-1][2], 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.blocks(self.stem(x)))
        return self.classifier(torch.flatten(x, 1))


def _add_outliers(model: OutlierNet) -> nn.BatchNorm2d:
    block = model.blocks[OUTLIER_BLOCK]
    assert isinstance(block, Block)
    bn = block.dw_bn
    gain = torch.ones(bn.num_features)
    gain[list(OUTLIER_CHANNELS)] = OUTLIER_GAIN
    parametrize.register_parametrization(bn, "bias", _Gain(gain))
    with torch.no_grad():  # the shift of the outlier channels starts large: a near-constant, bias-like channel
        original: torch.Tensor = bn.parametrizations["bias"].original  # type: ignore[union-attr,index]
        original[list(OUTLIER_CHANNELS)] = OUTLIER_SHIFT
    return bn


def _bake_outliers(bn: nn.BatchNorm2d) -> None:
    parametrize.remove_parametrizations(bn, "bias", leave_parametrized=True)


def outlier_dataset() -> Dataset:
    """The ``digits`` splits, upsampled to 16x16 (bilinear)."""
    base = digits_dataset()

    def up(split: Split) -> Split:
        x = torch.from_numpy(split.inputs)
        x = nn.functional.interpolate(x, size=(SIZE, SIZE), mode="bilinear", align_corners=False)
        return Split(np.ascontiguousarray(x.numpy()), split.labels)

    assert base.train is not None
    return Dataset(train=up(base.train), calibration=up(base.calibration), evaluation=up(base.evaluation))


def _train(model: OutlierNet, data: Split, progress: Callable[[str], None] | None) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the same weights on every machine
    try:
        bn = _add_outliers(model)
        train_one_cycle(model, data, epochs=EPOCHS, batch=BATCH, lr=LR, seed=SEED, progress=progress, label=NAME)
        _bake_outliers(bn)
    finally:
        torch.set_num_threads(threads)


def _recipe_digest(data: Dataset) -> str:
    h = hashlib.sha256()
    versions = [importlib.metadata.version(p) for p in ("torch", "scikit-learn")]
    recipe = (
        NAME,
        SEED,
        EPOCHS,
        BATCH,
        LR,
        SIZE,
        STEM,
        BLOCKS,
        OUTLIER_BLOCK,
        OUTLIER_CHANNELS,
        OUTLIER_GAIN,
        OUTLIER_SHIFT,
        versions,
        data.train.digest() if data.train else "",
    )
    h.update(repr(recipe).encode())
    return h.hexdigest()


def load_digits_outlier(cache_dir: Path | None = None, progress: Callable[[str], None] | None = None) -> ModelBundle:
    """Load (training on first use) the ``digits_outlier`` model.

    Args:
        cache_dir: where trained weights are kept; ``None`` trains every time.
        progress: called with a line of text while training.
    """
    data = outlier_dataset()
    torch.manual_seed(SEED)
    model = OutlierNet()
    train = data.train
    assert train is not None
    return trained_bundle(NAME, model, data, _recipe_digest(data), cache_dir, lambda: _train(model, train, progress))
