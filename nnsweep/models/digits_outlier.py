"""The built-in ``digits_outlier`` model: a digits classifier that int8 hurts.

Same data as ``digits`` (scikit-learn's bundled 8x8 digits, nothing downloaded),
upsampled to 16x16 so that the wide pointwise convolutions do enough work for int8
to pay; trained in seconds with a fixed seed, weights cached by recipe digest.

Structure (ConvNeXt / MobileNetV3-like; about 6 M multiply-adds)::

    stem      conv3x3 1->32, BN, hardswish                         16x16
    blocks.0  dw3x3/2 32, BN; pw1 32->256, BN, ReLU; pw2 256->64, BN   8x8
    blocks.1  dw3x3 64, BN; pw1 64->384, BN, ReLU; pw2 384->64, BN, + input
    blocks.2  dw3x3/2 64, BN; pw1 64->384, BN, ReLU; pw2 384->128, BN  4x4
    head      global average pool, linear 128 -> 10

The blocks use ReLU, not hardswish: ONNX Runtime's QDQ int8 runs hardswish as a
float HardSigmoid and Mul between dequantize and quantize, which made the int8 model
slower than fp32 here; with ReLU (fused into the int8 convolution) int8 pays. The
pointwise convolutions are wide (256-384 channels) for the same reason.

Why int8 hurts it: activation outlier channels. In ``blocks.2`` four channels of
the depthwise convolution's BatchNorm have their shift (beta) reparameterised with a
fixed gain of 256 during training (``torch.nn.utils.parametrize``, shift starting at
4); the parametrization is removed after training, so the deployed model is a plain
BatchNorm whose beta is about 1000 on those channels. Those channels are nearly
constant and act as biases, as the "massive activations" of large language models
do (a few channels hundreds to thousands of times the median, near-constant across
inputs); the other 60 channels, at most about 6, carry the class information.

The tensor between ``blocks.2.dw`` (its BN folds into the conv) and ``blocks.2.pw1``
therefore spans about [-5, 1025]. Every runtime quantizes activations per tensor, so
its scale is about 4 (uint8, 255 steps; about 8 with torch's x86 7-bit activations)
and the informative channels keep one or two levels. fp32 top-1 is 99.1 %; whole-model
static int8 measured 11 to 18 % with per-tensor weights on ONNX Runtime, torch (x86),
ExecuTorch and LiteRT, and 11 to 83 % with per-channel weights: per-channel *weight*
scales cannot repair an activation tensor.

Keeping that tensor in float means keeping its producer (``blocks.2.dw``) *and* its
consumer (``blocks.2.pw1``) in float: a runtime quantizes a tensor when either end
of it is quantized (the producer's output or the consumer's input). Everything else
can be int8, which recovers the fp32 accuracy (benchmarks/results/mixed_precision.md).
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
