"""A worked example of a user's own task: a small semantic segmenter scored by mean IoU.

Everything a sweep needs comes from this file (``sweeps/segment.yaml`` names each function):

``model``
    a tiny U-Net for 3x32x32 images: two stride-2 steps down to 8x8, back up with skip
    connections, and per-pixel logits over four classes (background, rectangle, ellipse,
    triangle). Trained from the seeded data below on first use (seconds on one CPU core)
    and kept in nnsweep's model cache, so a sweep's workers load it instead of training.
``evaluation_data`` / ``calibration_data``
    seeded synthetic scenes of one to three shapes in random colours on a noisy
    background, overlapping at times (the later shape on top); nothing is downloaded.
    The targets are the class masks, (N, 32, 32) int64.
``miou``
    the metric: the arg-max class per pixel, then torchmetrics' Jaccard index over the
    whole evaluation set, averaged over the four classes (mean IoU as segmentation
    benchmarks report it).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
from pathlib import Path

import numpy as np
import torch
from torch import nn

__all__ = ["CLASSES", "calibration_data", "evaluation_data", "miou", "model", "scenes", "train_model"]

CLASSES = ("background", "rectangle", "ellipse", "triangle")
SIZE = 32
SEED = 0
TRAIN, CALIBRATION, EVALUATION = 1024, 64, 256
EPOCHS, BATCH, LR = 10, 64, 5e-3


# --- data ---------------------------------------------------------------------------------


def _shape_mask(kind: int, x0: int, y0: int, w: int, h: int) -> np.ndarray:
    """A boolean SIZE x SIZE mask of one filled shape whose bounding box is (x0, y0, w, h);
    ``kind`` is its class (1 rectangle, 2 ellipse, 3 triangle)."""
    yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32)
    inside = (xx >= x0) & (xx < x0 + w) & (yy >= y0) & (yy < y0 + h)
    if kind == 2:  # ellipse inscribed in the box
        cx, cy = x0 + (w - 1) / 2, y0 + (h - 1) / 2
        inside &= ((xx - cx) / (w / 2)) ** 2 + ((yy - cy) / (h / 2)) ** 2 <= 1.0
    elif kind == 3:  # triangle: apex at the top centre, base along the bottom
        cx = x0 + (w - 1) / 2
        inside &= np.abs(xx - cx) <= (w / 2) * (yy - y0 + 1) / h
    return inside


def scenes(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` images (n, 3, SIZE, SIZE) float32 in [-1, 1] and their class masks (n, SIZE,
    SIZE) int64, from a seeded RNG."""
    rng = np.random.default_rng(seed)
    images = np.empty((n, 3, SIZE, SIZE), np.float32)
    masks = np.zeros((n, SIZE, SIZE), np.int64)
    for i in range(n):
        image = rng.uniform(0.0, 0.3, (3, 1, 1)) + rng.normal(0.0, 0.05, (3, SIZE, SIZE))
        for _ in range(int(rng.integers(1, 4))):
            w, h = (int(v) for v in rng.integers(7, 17, 2))
            x0, y0 = int(rng.integers(0, SIZE - w + 1)), int(rng.integers(0, SIZE - h + 1))
            kind = int(rng.integers(1, len(CLASSES)))
            inside = _shape_mask(kind, x0, y0, w, h)
            image[:, inside] = rng.uniform(0.5, 1.0, 3)[:, None]
            masks[i][inside] = kind
        images[i] = np.clip(image, 0.0, 1.0) * 2.0 - 1.0
    return images, masks


def evaluation_data() -> tuple[np.ndarray, np.ndarray]:
    """The held-out scenes and their masks: ``(inputs, targets)``."""
    return scenes(EVALUATION, SEED + 2)


def calibration_data() -> np.ndarray:
    """Scenes for static quantization's ranges (inputs only: calibration needs no targets)."""
    return scenes(CALIBRATION, SEED + 1)[0]


# --- model --------------------------------------------------------------------------------


def _conv(cin: int, cout: int, stride: int = 1, dilation: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride=stride, padding=dilation, dilation=dilation, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(),
    )


class TinyUNet(nn.Module):
    """Encoder 32 -> 16 -> 8 pixels, decoder back with the encoder's features
    concatenated at each scale; per-pixel logits (classes, 32, 32)."""

    def __init__(self) -> None:
        super().__init__()
        self.enc1 = _conv(3, 8)
        self.enc2 = nn.Sequential(_conv(8, 16, stride=2), _conv(16, 16))
        self.enc3 = nn.Sequential(_conv(16, 32, stride=2), _conv(32, 32, dilation=2))
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.dec2 = _conv(32 + 16, 16)
        self.dec1 = _conv(16 + 8, 8)
        self.head = nn.Conv2d(8, len(CLASSES), 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e1 = self.enc1(x)
        e2 = self.enc2(e1)
        e3 = self.enc3(e2)
        d2 = self.dec2(torch.cat([self.up(e3), e2], dim=1))
        d1 = self.dec1(torch.cat([self.up(d2), e1], dim=1))
        return self.head(d1)


def train_model(net: TinyUNet, images: np.ndarray, masks: np.ndarray) -> None:
    """Train ``net`` in place, deterministically: one thread (parallel sums reorder), seeded
    shuffling, Adam with a one-cycle learning rate, per-pixel cross-entropy."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(SEED)
        x, y = torch.from_numpy(images), torch.from_numpy(masks)
        opt = torch.optim.Adam(net.parameters(), lr=LR)
        steps = EPOCHS * ((len(x) + BATCH - 1) // BATCH)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=LR, total_steps=steps)
        gen = torch.Generator().manual_seed(SEED)
        net.train()
        for _ in range(EPOCHS):
            order = torch.randperm(len(x), generator=gen)
            for start in range(0, len(x), BATCH):
                rows = order[start : start + BATCH]
                loss = nn.functional.cross_entropy(net(x[rows]), y[rows])
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()
    finally:
        torch.set_num_threads(threads)
    net.eval()


def _recipe() -> str:
    """The cache key of the trained weights: this file (code, data, hyper-parameters) and torch."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(importlib.metadata.version("torch").encode())
    return h.hexdigest()


def model() -> tuple[nn.Module, torch.Tensor]:
    """The trained segmenter and one evaluation image (batch 1): what nnsweep deploys.

    Trains on the first call in a cache (``$NNSWEEP_CACHE``, else ``~/.cache/nnsweep``) and
    loads the kept weights on every later call, in any process.
    """
    from nnsweep.artifacts.cache import ArtifactCache, default_cache_dir
    from nnsweep.models import Dataset, Split
    from nnsweep.models._trained import trained_bundle

    torch.manual_seed(SEED)
    net = TinyUNet()
    data = Dataset(calibration=Split(calibration_data()), evaluation=Split(evaluation_data()[0][:1]))
    cache = ArtifactCache(default_cache_dir()).models_dir

    def train() -> None:
        train_model(net, *scenes(TRAIN, SEED))

    bundle = trained_bundle("example-segment", net, data, _recipe(), cache, train)
    return bundle.module, bundle.example_input


# --- metric -------------------------------------------------------------------------------


def miou(outputs: list[np.ndarray], targets: np.ndarray) -> float:
    """Mean IoU over the four classes, each class's IoU accumulated over every pixel of the
    evaluation set: ``outputs[0]`` is the deployment's logits (N, 4, 32, 32), ``targets``
    the masks :func:`evaluation_data` gave (N, 32, 32)."""
    from torchmetrics.functional.classification import multiclass_jaccard_index

    predicted = torch.from_numpy(np.asarray(outputs[0]).argmax(axis=1))
    truth = torch.as_tensor(np.asarray(targets), dtype=torch.int64)
    return float(multiclass_jaccard_index(predicted, truth, num_classes=len(CLASSES), average="macro"))
