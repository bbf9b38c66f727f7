"""The held-out model of the search benchmark: a small MLP-Mixer on digits that int8 hurts.

``benchmarks/search_table.py --space heldout`` measures its table
(``benchmarks/data/search_table_heldout_threads1.json``), which the sampler was not
designed on: the sampler was tuned on the ``digits_outlier`` table, a convolutional
net whose outlier channels sit in its last block. This model differs in structure
(linear layers over tokens, no convolution, no normalisation) and in where the
outliers are (the first block's channel MLP).

Data: scikit-learn's bundled 8x8 digits (``nnsweep.models.digits.digits_dataset``,
nothing downloaded), upsampled to 16x16 and read as 16 tokens (rows) of 16 pixels.
Trained in seconds on one CPU thread with a fixed seed; the weights are cached under
nnsweep's cache directory (``$NNSWEEP_CACHE``, ...) by the digest of the recipe, so a
second load costs milliseconds.

Structure (MLP-Mixer without normalisation; about 7 M multiply-adds). Every linear
layer sees a 2-D input (tokens folded into the batch): with 3-D inputs ExecuTorch's
XNNPACK lowering failed (``ConvertToLinearPass``: "t() expects a tensor with <= 2
dimensions") for dynamic int8 per tensor and for every partition limit, measured on
executorch as installed here. ::

    embed            linear 16 -> 128 per token                      16 x 128
    mixers.i         token MLP: transpose, linear 16 -> 64, ReLU, linear 64 -> 16,
                     transpose, + input;
                     channel MLP: fc1 128 -> 512, ReLU, fc2 512 -> 128, + input
                     (i = 0, 1, 2)
    head             mean over tokens, linear 128 -> 10

Why int8 hurts it: outlier channels in a channel MLP's hidden activation, the input
of its down projection (where transformers' feed-forward blocks also show large
activation outliers). In ``mixers.0.fc1`` four output channels have their
bias reparameterised with a fixed gain of 256 during training
(``torch.nn.utils.parametrize``, the shift starting at 16); the parametrization is
removed after training, so the deployed model is a plain ``nn.Linear`` whose bias is
about 4090 on those channels. They are near-constant across inputs and act as biases of
``fc2``; the other 508 channels carry the information at a much smaller scale.

The tensor between ``mixers.0.fc1`` (with its ReLU) and ``mixers.0.fc2`` therefore
spans about [0, 4100] (after the ReLU) while the other channels reach 27 at most (the
median channel's maximum is about 11). Runtimes quantize activations per tensor (a
step of about 16 here), so those channels keep one or two levels: per-channel *weight*
scales do not help. Keeping that tensor in float means keeping its producer and its
consumer (``mixers.0.fc1`` and ``mixers.0.fc2``) in float; the rest can be int8.

Use it as a model reference: ``benchmarks/heldout_model.py:heldout_mixer``.
"""

from __future__ import annotations

from pathlib import Path

import torch
from heldout_common import SIZE, heldout_dataset, train_with_outliers, trained
from torch import nn

from nnsweep.models import Dataset, Split

__all__ = ["heldout_dataset", "heldout_mixer"]

NAME = "heldout_mixer"
EPOCHS = 15
LR = 3e-3
DIM = 128
TOKEN_HIDDEN = 64
HIDDEN = 512
DEPTH = 3
OUTLIER_BLOCK = 0  # the block whose fc1 bias carries the outlier channels
OUTLIER_CHANNELS = (5, 77, 200, 431)
OUTLIER_GAIN = 256.0
OUTLIER_SHIFT = 16.0  # initial shift of the outlier channels, before the gain


class Mixer(nn.Module):
    """Token MLP (across the 16 tokens) and channel MLP (across the 128 features), each residual."""

    def __init__(self) -> None:
        super().__init__()
        self.token1 = nn.Linear(SIZE, TOKEN_HIDDEN)
        self.token_act = nn.ReLU()
        self.token2 = nn.Linear(TOKEN_HIDDEN, SIZE)
        self.fc1 = nn.Linear(DIM, HIDDEN)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(HIDDEN, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (batch * tokens, DIM)
        t = x.reshape(-1, SIZE, DIM).transpose(1, 2).reshape(-1, SIZE)  # (batch * DIM, tokens)
        t = self.token2(self.token_act(self.token1(t)))
        x = x + t.reshape(-1, DIM, SIZE).transpose(1, 2).reshape(-1, DIM)
        return x + self.fc2(self.act(self.fc1(x)))


class MixerNet(nn.Module):
    """Classifier for 1x16x16 digits read as 16 tokens of 16 pixels; see the module docstring."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(SIZE, DIM)
        self.mixers = nn.Sequential(*(Mixer() for _ in range(DEPTH)))
        self.head = nn.Linear(DIM, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.mixers(self.embed(x.reshape(-1, SIZE)))  # (batch, 1, 16, 16) -> (batch * 16 tokens, 16)
        return self.head(x.reshape(-1, SIZE, DIM).mean(dim=1))


def _outlier_linear(model: MixerNet) -> nn.Linear:
    block = model.mixers[OUTLIER_BLOCK]
    if not isinstance(block, Mixer):
        raise TypeError(f"mixers[{OUTLIER_BLOCK}] is {type(block).__name__}")
    return block.fc1


def _train(model: nn.Module, data: Split) -> None:
    if not isinstance(model, MixerNet):
        raise TypeError(f"a MixerNet, not {type(model).__name__}")
    fc1 = _outlier_linear(model)
    train_with_outliers(
        model, data, fc1, OUTLIER_CHANNELS, gain=OUTLIER_GAIN, shift=OUTLIER_SHIFT, epochs=EPOCHS, lr=LR
    )


def heldout_mixer() -> tuple[nn.Module, torch.Tensor, Dataset]:
    """The trained model, an example input (batch 1) and its data: a model function for
    nnsweep (``benchmarks/heldout_model.py:heldout_mixer``)."""
    return trained(NAME, MixerNet, Path(__file__), _train)
