"""Task accuracy and fidelity against the fp32 reference (as TFLite's ``inference_diff``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["Evaluation", "Fidelity", "evaluate"]


@dataclass(frozen=True)
class Fidelity:
    """How far the deployed outputs are from the fp32 reference on the same inputs.

    ``sqnr_db`` is ``inf`` when the outputs are identical.
    """

    top1_agreement: float
    max_abs_err: float
    mean_abs_err: float
    sqnr_db: float

    def to_dict(self) -> dict[str, float | None]:
        d: dict[str, float | None] = dict(self.__dict__)
        if not math.isfinite(self.sqnr_db):
            d["sqnr_db"] = None  # JSON has no infinity: null with max_abs_err 0 means bit-identical
        return d


@dataclass(frozen=True)
class Evaluation:
    """Top-1 accuracy on the evaluation split (``None`` without labels) and fidelity."""

    accuracy: float | None
    fidelity: Fidelity
    samples: int


def evaluate(outputs: np.ndarray, reference: np.ndarray, labels: np.ndarray | None) -> Evaluation:
    """Compare deployed ``outputs`` (N, classes) with the fp32 ``reference`` and ``labels``.

    Raises:
        ValueError: shapes differ, or outputs contain NaN/inf.
    """
    out = np.asarray(outputs, dtype=np.float64).reshape(len(outputs), -1)
    ref = np.asarray(reference, dtype=np.float64).reshape(len(reference), -1)
    if out.shape != ref.shape:
        raise ValueError(f"deployed outputs have shape {out.shape}, the reference {ref.shape}")
    if not np.isfinite(out).all():
        raise ValueError("deployed outputs contain NaN or infinity")
    err = out - ref
    noise = float(np.sum(err**2))
    signal = float(np.sum(ref**2))
    if noise == 0.0:
        sqnr = math.inf
    elif signal == 0.0:
        sqnr = -math.inf
    else:
        sqnr = 10.0 * math.log10(signal / noise)
    top = out.argmax(axis=1)
    fidelity = Fidelity(
        top1_agreement=float(np.mean(top == ref.argmax(axis=1))),
        max_abs_err=float(np.abs(err).max()),
        mean_abs_err=float(np.abs(err).mean()),
        sqnr_db=sqnr,
    )
    accuracy = None if labels is None else float(np.mean(top == np.asarray(labels)))
    return Evaluation(accuracy=accuracy, fidelity=fidelity, samples=len(out))
