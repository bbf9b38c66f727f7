"""The built-in ``digits`` model: scikit-learn's bundled 8x8 digits and a small
MobileNet-style CNN trained on them in seconds, with a fixed seed.

Nothing is downloaded: the data ships inside scikit-learn. The trained weights are
cached by the digest of the training recipe, so a second load costs milliseconds.

Two variants:

``digits``
    conv-bn-relu stem, three depthwise-separable blocks (conv-bn-relu each), global
    average pooling and a linear classifier. XNNPACK takes the whole graph.
``digits_gn``
    the same with GroupNorm in place of BatchNorm. XNNPACK does not take group
    norm, so the graph splits into several delegated partitions: the model on
    which partition limits matter.
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

from nnsweep.models._bundle import Dataset, ModelBundle, Split
from nnsweep.models._trained import trained_bundle

__all__ = ["VARIANTS", "DigitsNet", "bundled_digits", "digits_dataset", "load_digits"]

log = logging.getLogger(__name__)

SEED = 0
EPOCHS = 40
BATCH = 64
LR = 5e-3
_SPLIT = (0.6, 0.1, 0.3)  # train, calibration, evaluation


def _norm(kind: str, channels: int) -> nn.Module:
    return nn.BatchNorm2d(channels) if kind == "bn" else nn.GroupNorm(4, channels)


def _conv_norm_relu(kind: str, cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, groups=groups, bias=False),
        _norm(kind, cout),
        nn.ReLU(),
    )


class DigitsNet(nn.Module):
    """MobileNet-style classifier for 1x8x8 inputs.

    Args:
        norm: ``"bn"`` (BatchNorm, fully delegable) or ``"gn"`` (GroupNorm, splits XNNPACK partitions).
    """

    def __init__(self, norm: str = "bn") -> None:
        super().__init__()
        widths = [(16, 32, 1), (32, 64, 2), (64, 128, 2)]
        layers: list[nn.Module] = [_conv_norm_relu(norm, 1, 16, 3)]
        for cin, cout, stride in widths:
            layers.append(_conv_norm_relu(norm, cin, cin, 3, stride=stride, groups=cin))  # depthwise
            layers.append(_conv_norm_relu(norm, cin, cout, 1))  # pointwise
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


VARIANTS: dict[str, str] = {"digits": "bn", "digits_gn": "gn"}


def digits_dataset() -> Dataset:
    """The 1797 bundled 8x8 digits, scaled to [-1, 1], split 60/10/30 (train,
    calibration, evaluation), stratified, with a fixed seed."""
    images, target = bundled_digits()
    x = (images.astype(np.float32) / 16.0 - 0.5) / 0.5
    x = x[:, None, :, :]
    y = target.astype(np.int64)
    rng = np.random.RandomState(SEED)
    parts: list[list[int]] = [[], [], []]
    for label in range(10):
        idx = rng.permutation(np.flatnonzero(y == label))
        cut1 = round(len(idx) * _SPLIT[0])
        cut2 = cut1 + round(len(idx) * _SPLIT[1])
        for part, chunk in zip(parts, (idx[:cut1], idx[cut1:cut2], idx[cut2:]), strict=True):
            part.extend(chunk.tolist())
    train, cal, ev = (np.array(sorted(p)) for p in parts)
    return Dataset(
        train=Split(x[train], y[train]),
        calibration=Split(x[cal], y[cal]),
        evaluation=Split(x[ev], y[ev]),
    )


def bundled_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's bundled digits as ``load_digits()`` gives them: the images (N x 8 x 8,
    float64, 0 to 16) and the labels.

    Read from the file scikit-learn ships (``sklearn/datasets/data/digits.csv.gz``) the way
    ``load_digits`` reads it, without importing scikit-learn: that import pulls in SciPy and
    cost about 3 s in every process that loads a digits model (each ``nnsweep`` command,
    converter and measuring worker). Where the file is not found, ``load_digits`` itself.
    """
    import gzip
    import importlib.util

    spec = importlib.util.find_spec("sklearn")  # finds the package without running its __init__
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    found = [Path(f) / "datasets" / "data" / "digits.csv.gz" for f in folders]
    path = next((p for p in found if p.is_file()), None)
    if path is None:
        from sklearn.datasets import load_digits as sk_load_digits

        raw = sk_load_digits()
        return raw.images, raw.target
    with gzip.open(path, mode="rt", encoding="utf-8") as text:
        data = np.loadtxt(text, delimiter=",")
    return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int)


def _train(model: nn.Module, data: Split, progress: Callable[[str], None] | None) -> None:
    # One thread: the same weights on every machine (parallel float sums reorder), and
    # no fight for cores with whatever else the machine runs.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _train_epochs(model, data, progress)
    finally:
        torch.set_num_threads(threads)


def _train_epochs(model: nn.Module, data: Split, progress: Callable[[str], None] | None) -> None:
    torch.manual_seed(SEED)
    assert data.labels is not None  # the digits data is labelled by construction
    x = torch.from_numpy(data.inputs)
    y = torch.from_numpy(data.labels)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, EPOCHS)
    gen = torch.Generator().manual_seed(SEED)
    model.train()
    for epoch in range(EPOCHS):
        order = torch.randperm(len(x), generator=gen)
        for start in range(0, len(x), BATCH):
            batch = order[start : start + BATCH]
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x[batch]), y[batch])
            loss.backward()
            opt.step()
        sched.step()
        if progress is not None and (epoch + 1) % 10 == 0:
            progress(f"training digits: epoch {epoch + 1}/{EPOCHS}, loss {loss.item():.3f}")
    model.eval()


def _recipe_digest(variant: str, data: Dataset) -> str:
    h = hashlib.sha256()
    versions = [importlib.metadata.version(p) for p in ("torch", "scikit-learn")]
    recipe = (variant, SEED, EPOCHS, BATCH, LR, _SPLIT, versions, data.train.digest() if data.train else "")
    h.update(repr(recipe).encode())
    return h.hexdigest()


def load_digits(
    variant: str = "digits", cache_dir: Path | None = None, progress: Callable[[str], None] | None = None
) -> ModelBundle:
    """Load (training on first use) a built-in digits model.

    Args:
        variant: ``digits`` or ``digits_gn``.
        cache_dir: where trained weights are kept; ``None`` trains every time.
        progress: called with a line of text while training.
    """
    data = digits_dataset()
    torch.manual_seed(SEED)
    model = DigitsNet(VARIANTS[variant])
    train = data.train
    assert train is not None
    return trained_bundle(
        variant, model, data, _recipe_digest(variant, data), cache_dir, lambda: _train(model, train, progress)
    )
