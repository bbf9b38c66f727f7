"""Models whose input is uint8 pixels: a camera frame as it comes, scaled in the model.

An edge model often takes the frame's bytes and does ``x.float() / 255`` (and any
normalisation) itself, so the deployed artifact takes what the camera gives. nnsweep
deploys such a model as it is: the pixels stay uint8 in every artifact (the quantizers
start after the model's own cast), and calibration and evaluation need uint8 inputs. A
model that comes without data gets seeded pixels uniform over 0-255.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nnsweep.models._bundle import Dataset, Split

__all__ = ["PIXEL_DTYPE", "synthetic_pixels"]

PIXEL_DTYPE = "uint8"
"""The dtype of the pixel inputs nnsweep deploys (``torch.uint8``)."""


def synthetic_pixels(shape: tuple[int, ...], calibration: int, evaluation: int) -> Dataset:
    """Seeded pixels uniform over 0-255 (no labels: no accuracy)."""
    rng = np.random.RandomState(0)
    cal: Any = rng.randint(0, 256, size=(calibration, *shape[1:])).astype(np.uint8)
    ev: Any = rng.randint(0, 256, size=(evaluation, *shape[1:])).astype(np.uint8)
    return Dataset(calibration=Split(cal), evaluation=Split(ev))
