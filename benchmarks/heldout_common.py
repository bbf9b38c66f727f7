"""What the search benchmark's held-out models share: their data, and training with outlier channels.

``heldout_model.py``, ``heldout_hybrid.py``, ``heldout_resnet.py``, ``heldout_tcn.py`` and
``heldout_se.py`` are model files (``nnsweep bench --model benchmarks/heldout_model.py:heldout_mixer``);
nnsweep makes the modules beside a model file importable, so each imports this one.

Each model makes int8 fail the same way: a few channels of one parameter (a bias, or
a BatchNorm shift) are trained through a fixed gain (``torch.nn.utils.parametrize``,
removed after training), starting from a large shift, so they end up large and
near-constant across inputs while the other channels stay small. Where they sit, and
so which layers must stay float, differs per model (each module's docstring).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn.utils import parametrize

from nnsweep.artifacts.cache import default_cache_dir
from nnsweep.models import Dataset, Split
from nnsweep.models._trained import train_one_cycle, trained_bundle
from nnsweep.models.digits import digits_dataset

SEED = 0
BATCH = 32
SIZE = 16  # the digits' 8x8 images, upsampled


class Gain(nn.Module):
    """Multiplies a parameter by a fixed per-channel gain (a reparameterisation)."""

    gain: torch.Tensor

    def __init__(self, gain: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("gain", gain)

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        return value * self.gain


def heldout_dataset() -> Dataset:
    """The ``digits`` splits, upsampled to 16x16 (bilinear)."""
    base = digits_dataset()

    def up(split: Split) -> Split:
        x = nn.functional.interpolate(
            torch.from_numpy(split.inputs), size=(SIZE, SIZE), mode="bilinear", align_corners=False
        )
        return Split(np.ascontiguousarray(x.numpy()), split.labels)

    if base.train is None:
        raise RuntimeError("digits_dataset() has no training split")
    return Dataset(train=up(base.train), calibration=up(base.calibration), evaluation=up(base.evaluation))


def train_with_outliers(
    model: nn.Module,
    data: Split,
    owner: nn.Module,
    channels: Sequence[int],
    *,
    gain: float,
    shift: float,
    epochs: int,
    lr: float,
) -> None:
    """Train ``model`` on one CPU thread with ``owner.bias``'s ``channels`` through a fixed
    ``gain``, starting from ``shift`` (before the gain); the gain is folded in afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the same weights on every machine
    try:
        gains = torch.ones(owner.bias.shape[0])
        gains[list(channels)] = gain
        parametrize.register_parametrization(owner, "bias", Gain(gains))
        with torch.no_grad():  # the outlier channels start with a large shift: near-constant, bias-like
            original: torch.Tensor = owner.parametrizations["bias"].original  # type: ignore[union-attr,index]
            original[list(channels)] = shift
        train_one_cycle(model, data, epochs=epochs, batch=BATCH, lr=lr, seed=SEED)
        parametrize.remove_parametrizations(owner, "bias", leave_parametrized=True)
    finally:
        torch.set_num_threads(threads)


def trained(
    name: str, make: Callable[[], nn.Module], recipe: Path, train: Callable[[nn.Module, Split], None]
) -> tuple[nn.Module, torch.Tensor, Dataset]:
    """A model function's answer: the model ``make()`` builds (seeded), trained by
    ``train`` or loaded from nnsweep's cache, an example input and the data. The cache key
    is the digest of ``recipe`` (the model's file) and this file, the toolchain and the
    data: any edit retrains."""
    data = heldout_dataset()
    if data.train is None:
        raise RuntimeError("no training split")
    torch.manual_seed(SEED)
    model = make()
    versions = [importlib.metadata.version(p) for p in ("torch", "scikit-learn")]
    h = hashlib.sha256(recipe.read_bytes() + Path(__file__).read_bytes())
    h.update(repr((versions, data.train.digest())).encode())
    split = data.train
    bundle = trained_bundle(
        name, model, data, h.hexdigest(), default_cache_dir() / "models", lambda: train(model, split)
    )
    return bundle.module, bundle.example_input, data
