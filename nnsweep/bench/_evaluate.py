"""Task accuracy and fidelity against the fp32 reference (as TFLite's ``inference_diff``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from nnsweep.core.metrics import SQNR
from nnsweep.models import output_columns

__all__ = ["Evaluation", "Fidelity", "evaluate", "predicted_classes"]


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
            d[SQNR] = None  # JSON has no infinity: null with max_abs_err 0 means bit-identical
        return d

    @classmethod
    def worst(cls, parts: list[Fidelity], ids: list[bool] | None = None) -> Fidelity:
        """The worst of several outputs' fidelities, metric by metric. The SQNR is the worst
        of the outputs ``ids`` does not mark (class ids, whose agreement says how close they
        are: an SQNR of numbers that name classes measures nothing), unless it marks all."""
        measured = [p for p, is_ids in zip(parts, ids or [False] * len(parts), strict=True) if not is_ids]
        return cls(
            top1_agreement=min(p.top1_agreement for p in parts),
            max_abs_err=max(p.max_abs_err for p in parts),
            mean_abs_err=max(p.mean_abs_err for p in parts),
            sqnr_db=min(p.sqnr_db for p in measured or parts),
        )


@dataclass(frozen=True)
class Evaluation:
    """Top-1 accuracy on the evaluation split (``None`` without labels) and fidelity.

    For a model with several outputs, ``fidelity`` is the worst over them (each metric
    on its own; the SQNR over those that are not class ids, :meth:`Fidelity.worst`) and
    ``per_output`` holds each output's; accuracy comes from one output
    (the first unless the model's dataset names another). ``positions``: how many classes
    that output gives per sample, each compared on its own (a classifier's 1, a tagger's
    ``T``, a segmentation's ``H x W``).
    """

    accuracy: float | None
    fidelity: Fidelity
    samples: int
    per_output: tuple[Fidelity, ...] = ()
    positions: int = 1


def evaluate(
    outputs: np.ndarray,
    reference: np.ndarray,
    labels: np.ndarray | None,
    *,
    sizes: tuple[int, ...] | None = None,
    accuracy_output: int = 0,
    positions: tuple[int, ...] | None = None,
    class_axes: tuple[int, ...] | None = None,
) -> Evaluation:
    """Compare deployed ``outputs`` (N, classes) with the fp32 ``reference`` and ``labels``.

    Args:
        outputs, reference: (N, total) arrays; a model with several outputs has them side
            by side in each row, ``sizes`` wide each.
        labels: (N,) class labels, or ``None``.
        sizes: per-sample size of each output (``None``: one output).
        accuracy_output: which output's argmax is compared with ``labels``.
        positions: each output's class positions (:func:`predicted_classes`; ``None``: one
            per sample); ``labels`` then have that many per sample.
        class_axes: each output's class axis (:func:`predicted_classes`; ``None``: 0).

    Raises:
        ValueError: shapes differ, or outputs contain NaN/inf.
    """
    out = np.asarray(outputs, dtype=np.float64).reshape(len(outputs), -1)
    ref = np.asarray(reference, dtype=np.float64).reshape(len(reference), -1)
    if out.shape != ref.shape:
        raise ValueError(f"deployed outputs have shape {out.shape}, the reference {ref.shape}")
    if not np.isfinite(out).all():
        raise ValueError("deployed outputs contain NaN or infinity")
    widths = tuple(sizes) if sizes else (out.shape[1],)
    if sum(widths) != out.shape[1]:
        raise ValueError(f"deployed outputs have {out.shape[1]} values per sample, the model's outputs {sum(widths)}")
    places = tuple(positions) if positions else (1,) * len(widths)
    axes = tuple(class_axes) if class_axes else (0,) * len(widths)
    columns = output_columns(widths)
    if not len(places) == len(axes) == len(widths):
        raise ValueError(f"{len(places)} class positions and {len(axes)} class axes for {len(widths)} outputs")
    parts = [_fidelity(out[:, cols], ref[:, cols], p, a) for cols, p, a in zip(columns, places, axes, strict=True)]
    accuracy = None
    if labels is not None:
        scored = out[:, columns[accuracy_output]]
        classes = predicted_classes(
            scored, positions=places[accuracy_output], class_axis=axes[accuracy_output]
        ).reshape(len(scored), -1)
        truth = np.asarray(labels).reshape(len(labels), -1)
        if truth.shape != classes.shape:
            raise ValueError(f"the labels have {truth.shape[1]} classes per sample, the output {classes.shape[1]}")
        accuracy = float(np.mean(classes == truth))
    # One value per class position, a whole number on every input: class ids (a model that
    # ends in argmax, as predicted_classes reads it). Its agreement, not an SQNR, says how
    # close it is.
    ids = [width == p and _whole_numbers(ref[:, cols]) for cols, width, p in zip(columns, widths, places, strict=True)]
    fidelity = parts[0] if len(parts) == 1 else Fidelity.worst(parts, ids)
    return Evaluation(
        accuracy=accuracy,
        fidelity=fidelity,
        samples=len(out),
        per_output=tuple(parts) if len(parts) > 1 else (),
        positions=places[accuracy_output],
    )


def predicted_classes(
    outputs: np.ndarray, like: np.ndarray | None = None, positions: int = 1, class_axis: int = 0
) -> np.ndarray:
    """Each sample's class, or each of its positions' classes: what "top-1" compares.

    Several values per position give their argmax. One value per position has no argmax
    (every deployment would agree with fp32): an integer one is the class itself, a real one
    a binary logit (class 1 above 0); ``like`` (the fp32 reference, default ``outputs``) says
    which kind it is, so deployed outputs are read as the reference is. ``outputs`` are
    (N, width); with ``positions`` > 1 each sample is flattened ``(classes, positions)``
    (``class_axis`` 0, a segmentation's ``(classes, H, W)``) or ``(positions, classes)``
    (``class_axis`` 1, a tagger's ``(T, classes)``). Returns (N,) classes, or
    (N, positions) when ``positions`` > 1.
    """
    out = np.asarray(outputs, dtype=np.float64).reshape(len(outputs), -1)
    kind = out if like is None else np.asarray(like, dtype=np.float64).reshape(len(like), -1)
    positions = positions if out.shape[1] % positions == 0 else 1
    if positions > 1 and class_axis == 1:
        out = out.reshape(len(out), positions, -1).transpose(0, 2, 1)
        kind = kind.reshape(len(kind), positions, -1).transpose(0, 2, 1)
    elif positions > 1:
        out = out.reshape(len(out), -1, positions)
        kind = kind.reshape(len(kind), -1, positions)
    else:
        out, kind = out[:, :, None], kind[:, :, None]
    if out.shape[1] != 1:
        classes = out.argmax(axis=1)
    elif _whole_numbers(kind):
        classes = np.round(out[:, 0]).astype(np.int64)
    else:
        classes = (out[:, 0] > 0).astype(np.int64)
    return classes if positions > 1 else classes[:, 0]


def _whole_numbers(values: np.ndarray) -> bool:
    """Whether every value is a whole number: how an output of class ids is told apart."""
    return bool(np.all(values == np.round(values)))


def _fidelity(out: np.ndarray, ref: np.ndarray, positions: int = 1, class_axis: int = 0) -> Fidelity:
    err = out - ref
    noise = float(np.sum(err**2))
    signal = float(np.sum(ref**2))
    if noise == 0.0:
        sqnr = math.inf
    elif signal == 0.0:
        sqnr = -math.inf
    else:
        sqnr = 10.0 * math.log10(signal / noise)
    return Fidelity(
        top1_agreement=float(
            np.mean(
                predicted_classes(out, like=ref, positions=positions, class_axis=class_axis)
                == predicted_classes(ref, positions=positions, class_axis=class_axis)
            )
        ),
        max_abs_err=float(np.abs(err).max()),
        mean_abs_err=float(np.abs(err).mean()),
        sqnr_db=sqnr,
    )
