"""A worked example of a user's own task: a small single-shot detector scored by mAP@0.5.

Everything a sweep needs comes from this file (``sweeps/detect.yaml`` names each function):

``model``
    a CenterNet-style detector for 3x48x48 images: a few convolutions down to a 12x12
    grid and two raw heads, per-class centre heatmaps (logits) and a box per cell
    (centre offset and size, in cells). Trained from the seeded data below on first use
    (seconds on one CPU core) and kept in nnsweep's model cache, so a sweep's workers
    load it instead of training again.
``evaluation_data`` / ``calibration_data``
    seeded synthetic scenes of one to four shapes (rectangle, ellipse, triangle) in
    random colours on a noisy background; nothing is downloaded. The targets are one
    dict per image, ``{"boxes": (k, 4) xyxy pixels, "labels": (k,)}``, with ``k`` varying.
``map50``
    the metric: decodes the raw outputs as a user's post-processing would (peaks of the
    heatmap, top-k, per-class non-maximum suppression, all in numpy) and scores them with
    torchmetrics' ``MeanAveragePrecision`` at IoU 0.5.

The deployed model keeps only the network: decoding, suppression and matching run on the
coordinator, on the outputs each deployment (any runtime, maybe int8) sent back.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = [
    "CLASSES",
    "calibration_data",
    "decode",
    "encode",
    "evaluation_data",
    "map50",
    "model",
    "scenes",
    "train_model",
]

CLASSES = ("rectangle", "ellipse", "triangle")
SIZE = 48  # image side, pixels
STRIDE = 4  # pixels per grid cell
GRID = SIZE // STRIDE
SEED = 0
TRAIN, CALIBRATION, EVALUATION = 1024, 64, 256
EPOCHS, BATCH, LR = 12, 64, 4e-3
TOP_K = 20  # detections kept per image before suppression
NMS_IOU = 0.5
NOISE, MIN_COLOUR = 0.1, 0.35  # background noise, the darkest shape colour channel
MIN_SIDE, MAX_SIDE, MAX_OBJECTS = 6, 16, 4


# --- data ---------------------------------------------------------------------------------


def _shape_mask(kind: int, x0: int, y0: int, w: int, h: int) -> np.ndarray:
    """A boolean SIZE x SIZE mask of one filled shape whose bounding box is (x0, y0, w, h)."""
    yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32)
    inside = (xx >= x0) & (xx < x0 + w) & (yy >= y0) & (yy < y0 + h)
    if kind == 1:  # ellipse inscribed in the box
        cx, cy = x0 + (w - 1) / 2, y0 + (h - 1) / 2
        inside &= ((xx - cx) / (w / 2)) ** 2 + ((yy - cy) / (h / 2)) ** 2 <= 1.0
    elif kind == 2:  # triangle: apex at the top centre, base along the bottom
        cx = x0 + (w - 1) / 2
        half = (w / 2) * (yy - y0 + 1) / h
        inside &= np.abs(xx - cx) <= half
    return inside


def scenes(n: int, seed: int) -> tuple[np.ndarray, list[dict[str, np.ndarray]]]:
    """``n`` images (n, 3, SIZE, SIZE) float32 in [-1, 1] and their boxes, from a seeded RNG.

    Each image holds one to four shapes that do not overlap, so every box is the tight
    box of a fully visible shape.
    """
    rng = np.random.default_rng(seed)
    images = np.empty((n, 3, SIZE, SIZE), np.float32)
    targets = []
    for i in range(n):
        image = rng.uniform(0.0, 0.3, (3, 1, 1)) + rng.normal(0.0, NOISE, (3, SIZE, SIZE))
        boxes: list[list[float]] = []
        labels: list[int] = []
        for _ in range(int(rng.integers(1, MAX_OBJECTS + 1))):
            for _attempt in range(20):
                w, h = (int(v) for v in rng.integers(MIN_SIDE, MAX_SIDE + 1, 2))
                x0, y0 = int(rng.integers(0, SIZE - w + 1)), int(rng.integers(0, SIZE - h + 1))
                if all(x0 >= b[2] + 1 or x0 + w + 1 <= b[0] or y0 >= b[3] + 1 or y0 + h + 1 <= b[1] for b in boxes):
                    break
            else:
                continue  # no free place for another shape: the image keeps fewer
            kind = int(rng.integers(0, len(CLASSES)))
            mask = _shape_mask(kind, x0, y0, w, h)
            ys, xs = np.nonzero(mask)
            colour = rng.uniform(MIN_COLOUR, 1.0, 3)
            image[:, mask] = colour[:, None]
            boxes.append([float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1)])
            labels.append(kind)
        images[i] = np.clip(image, 0.0, 1.0) * 2.0 - 1.0
        targets.append({"boxes": np.array(boxes, np.float32).reshape(-1, 4), "labels": np.array(labels, np.int64)})
    return images, targets


def evaluation_data() -> tuple[np.ndarray, list[dict[str, np.ndarray]]]:
    """The held-out scenes and their boxes: ``(inputs, targets)``."""
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


class Detector(nn.Module):
    """Backbone to a 12x12 grid (stride 4), then two 1x1 heads: ``(heatmap logits
    (classes, 12, 12), box (4, 12, 12))``, the box as centre offset in its cell (x, y) and
    width and height in cells."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            _conv(3, 12, stride=2),
            _conv(12, 24, stride=2),
            _conv(24, 24),
            _conv(24, 32, dilation=2),  # a receptive field as large as the largest shape
        )
        self.heatmap = nn.Conv2d(32, len(CLASSES), 1)
        self.box = nn.Conv2d(32, 4, 1)
        nn.init.constant_(self.heatmap.bias, -2.19)  # a prior of 0.1 per cell: steady focal loss at the start

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f = self.features(x)
        return self.heatmap(f), self.box(f)


def encode(targets: list[dict[str, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Training targets on the grid: Gaussian centre heatmaps (n, classes, G, G) with 1 at
    each box's centre cell, the box regression (n, 4, G, G) and where it applies (n, G, G)."""
    n = len(targets)
    heat = np.zeros((n, len(CLASSES), GRID, GRID), np.float32)
    box = np.zeros((n, 4, GRID, GRID), np.float32)
    where = np.zeros((n, GRID, GRID), np.float32)
    cells = np.arange(GRID, dtype=np.float32)
    for i, target in enumerate(targets):
        for (x1, y1, x2, y2), label in zip(target["boxes"], target["labels"], strict=True):
            cx, cy, w, h = (x1 + x2) / 2 / STRIDE, (y1 + y2) / 2 / STRIDE, (x2 - x1) / STRIDE, (y2 - y1) / STRIDE
            col, row = min(int(cx), GRID - 1), min(int(cy), GRID - 1)
            sx, sy = max(w / 6, 0.5), max(h / 6, 0.5)
            g = np.exp(-((cells[None, :] - col) ** 2) / (2 * sx**2) - ((cells[:, None] - row) ** 2) / (2 * sy**2))
            heat[i, label] = np.maximum(heat[i, label], g)
            box[i, :, row, col] = (cx - col, cy - row, w, h)
            where[i, row, col] = 1.0
    return heat, box, where


def _focal_loss(logits: torch.Tensor, heat: torch.Tensor) -> torch.Tensor:
    """CenterNet's penalty-reduced focal loss, per object."""
    p = torch.sigmoid(logits).clamp(1e-4, 1 - 1e-4)
    pos = heat.eq(1.0).float()
    pos_loss = torch.log(p) * (1 - p) ** 2 * pos
    neg_loss = torch.log(1 - p) * p**2 * (1 - heat) ** 4 * (1 - pos)
    return -(pos_loss.sum() + neg_loss.sum()) / pos.sum().clamp(min=1.0)


def train_model(net: Detector, images: np.ndarray, targets: list[dict[str, np.ndarray]]) -> None:
    """Train ``net`` in place, deterministically: one thread (parallel sums reorder), seeded
    shuffling, Adam with a one-cycle learning rate."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(SEED)
        x = torch.from_numpy(images)
        heat, box, where = (torch.from_numpy(a) for a in encode(targets))
        opt = torch.optim.Adam(net.parameters(), lr=LR)
        steps = EPOCHS * ((len(x) + BATCH - 1) // BATCH)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=LR, total_steps=steps)
        gen = torch.Generator().manual_seed(SEED)
        net.train()
        for _ in range(EPOCHS):
            order = torch.randperm(len(x), generator=gen)
            for start in range(0, len(x), BATCH):
                rows = order[start : start + BATCH]
                logits, pred = net(x[rows])
                mask = where[rows].unsqueeze(1)
                box_loss = ((pred - box[rows]).abs() * mask).sum() / mask.sum().clamp(min=1.0)
                loss = _focal_loss(logits, heat[rows]) + box_loss
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
    """The trained detector and one evaluation image (batch 1): what nnsweep deploys.

    Trains on the first call in a cache (``$NNSWEEP_CACHE``, else ``~/.cache/nnsweep``) and
    loads the kept weights on every later call, in any process.
    """
    from nnsweep.artifacts.cache import ArtifactCache, default_cache_dir
    from nnsweep.models import Dataset, Split
    from nnsweep.models._trained import trained_bundle

    torch.manual_seed(SEED)
    net = Detector()
    data = Dataset(calibration=Split(calibration_data()), evaluation=Split(evaluation_data()[0][:1]))
    cache = ArtifactCache(default_cache_dir()).models_dir

    def train() -> None:
        train_model(net, *scenes(TRAIN, SEED))

    bundle = trained_bundle("example-detect", net, data, _recipe(), cache, train)
    return bundle.module, bundle.example_input


# --- metric -------------------------------------------------------------------------------


def _iou(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    x1, y1 = np.maximum(box[0], others[:, 0]), np.maximum(box[1], others[:, 1])
    x2, y2 = np.minimum(box[2], others[:, 2]), np.minimum(box[3], others[:, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1])
    return inter / np.maximum(area + areas - inter, 1e-9)


def _nms(boxes: np.ndarray, scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Indices kept by greedy per-class non-maximum suppression, best score first."""
    keep: list[int] = []
    for i in np.argsort(-scores, kind="stable"):
        same = [k for k in keep if labels[k] == labels[i]]
        if not same or _iou(boxes[i], boxes[same]).max() < NMS_IOU:
            keep.append(int(i))
    return np.array(keep, np.int64)


def decode(heat_logits: np.ndarray, box: np.ndarray) -> dict[str, np.ndarray]:
    """One image's detections from its raw outputs: ``{"boxes", "scores", "labels"}``.

    A cell is a candidate where its class score is the largest of its 3x3 neighbourhood
    (CenterNet's peak picking); the ``TOP_K`` best candidates are suppressed per class.
    """
    scores = 1.0 / (1.0 + np.exp(-heat_logits.astype(np.float64)))
    padded = np.pad(scores, ((0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    peaks = scores >= np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(1, 2)).max(axis=(-2, -1))
    flat = np.where(peaks, scores, -np.inf).ravel()
    best = np.argsort(-flat, kind="stable")[:TOP_K]
    best = best[np.isfinite(flat[best])]
    labels, rows, cols = np.unravel_index(best, scores.shape)
    ox, oy, w, h = (box[k, rows, cols].astype(np.float64) for k in range(4))
    cx, cy = (cols + ox) * STRIDE, (rows + oy) * STRIDE
    w, h = np.clip(w, 0, None) * STRIDE, np.clip(h, 0, None) * STRIDE
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
    keep = _nms(boxes, flat[best], labels)
    return {"boxes": boxes[keep], "scores": flat[best][keep], "labels": labels[keep].astype(np.int64)}


def map50(outputs: list[np.ndarray], targets: list[dict[str, Any]]) -> float:
    """mAP at IoU 0.5 over the evaluation images: ``outputs`` are the deployment's two
    outputs stacked over the images (heatmap logits (N, 3, 12, 12), boxes (N, 4, 12, 12)),
    ``targets`` the boxes :func:`evaluation_data` gave."""
    from torchmetrics.detection import MeanAveragePrecision

    heat, box = outputs
    metric = MeanAveragePrecision(box_format="xyxy", iou_type="bbox", iou_thresholds=[0.5])
    preds = [decode(h, b) for h, b in zip(heat, box, strict=True)]
    metric.update(
        [{k: torch.as_tensor(v) for k, v in p.items()} for p in preds],
        [{"boxes": torch.as_tensor(t["boxes"]), "labels": torch.as_tensor(t["labels"])} for t in targets],
    )
    return float(metric.compute()["map_50"])
