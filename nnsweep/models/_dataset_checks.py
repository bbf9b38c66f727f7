"""The checks a user's :class:`~nnsweep.models.Dataset` passes before anything is converted.

Each split's inputs are what every artifact takes: the example input's dtype and per-sample
shape, none of them NaN or infinite, at least one sample. Before these checks, calibration
inputs of another shape failed at load with a bare "mat1 and mat2 shapes cannot be
multiplied" (exit 1), an empty calibration split failed every static int8 conversion with
"integer modulo by zero", a NaN among the calibration inputs was calibrated on without a
word, and an infinity among the evaluation inputs left the SQNR undefined for every
deployment. Labels are class indices: labels that are not whole numbers gave every
deployment and fp32 an accuracy of 0 %.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from nnsweep.core.errors import SpecError
from nnsweep.models._bundle import Dataset

__all__ = ["check_inputs", "check_labels"]

log = logging.getLogger(__name__)


def check_inputs(ref: str, dataset: Dataset, want: np.dtype[Any], sample_shape: tuple[int, ...]) -> None:
    """Every split's inputs have the example input's dtype ``want`` and per-sample shape, are
    finite, and the calibration and evaluation splits are not empty.

    Raises:
        SpecError: naming the split and what is wrong with it.
    """
    for name, split in dataset.named_splits().items():
        inputs = split.inputs
        if inputs.dtype != want:
            raise SpecError(
                "model",
                f"{ref}(): the Dataset's {name} inputs are {inputs.dtype} but the example input is {want}; "
                f"give them as {want} (array.astype(np.{want}))",
            )
        if name in ("calibration", "evaluation") and len(inputs) == 0:
            raise SpecError("model", f"{ref}(): the Dataset's {name} split is empty; give it at least one sample")
        if tuple(inputs.shape[1:]) != sample_shape:
            raise SpecError(
                "model",
                f"{ref}(): the Dataset's {name} inputs are {tuple(inputs.shape[1:])} per sample but the example "
                f"input is {sample_shape} (its shape without the batch dimension); give them as (N, "
                f"{', '.join(map(str, sample_shape))})",
            )
        if inputs.dtype.kind == "f":
            bad = int(np.count_nonzero(~np.isfinite(inputs)))
            if bad:
                raise SpecError(
                    "model",
                    f"{ref}(): the Dataset's {name} inputs hold {bad} NaN or infinite value(s); calibration ranges "
                    "and fidelity need finite inputs",
                )


def check_labels(ref: str, dataset: Dataset, classes: int) -> None:
    """The evaluation and train labels are whole numbers; warn when evaluation labels are
    outside ``0 .. classes - 1`` (``classes`` > 1: the scored output's classes per position),
    and refuse train labels there.

    Labels outside the classes (an ignore index such as 255 or -100) count as wrong for fp32
    and every deployment alike, so the accuracy drop still compares them; the warning says
    the accuracy is lower than the model's. Quantization-aware training's loss cannot use a
    train label outside the classes ("Target 4 is out of bounds" failed every QAT conversion)
    but -100, the index ``cross_entropy`` skips.

    Raises:
        SpecError: a label is not a whole number (strings, fractions), or a train label is
            outside the classes.
    """
    for name, split in dataset.named_splits().items():
        if name == "calibration" or split.labels is None or not len(split.labels):
            continue
        values = _class_indices(ref, name, split.labels)
        beyond = values >= classes if classes > 1 else np.zeros_like(values, dtype=bool)  # 1: a logit, or class ids
        outside = (values < 0) | beyond
        if name == "train":
            outside &= values != _IGNORED
            if np.any(outside):
                raise SpecError(
                    "model",
                    f"{ref}(): {int(np.count_nonzero(outside))} of the Dataset's train labels are outside the scored "
                    f"output's classes 0..{classes - 1} (e.g. {int(values[outside][0])}); quantization-aware "
                    f"training's loss takes class indices, or {_IGNORED} for a sample it skips",
                )
        elif np.any(outside):
            log.warning(
                "%s: %d of the %d evaluation labels are outside the scored output's classes 0..%d (an ignore "
                "index?): they count as wrong for fp32 and every deployment alike",
                ref,
                int(np.count_nonzero(outside)),
                values.size,
                max(classes - 1, 1),
            )


_IGNORED = -100  # torch.nn.functional.cross_entropy's ignore_index


def _class_indices(ref: str, name: str, labels: np.ndarray) -> np.ndarray:
    """``labels`` as int64 class indices.

    Raises:
        SpecError: they are not numbers, or not whole ones.
    """
    if labels.dtype.kind not in "iubf":
        kind = {"U": "strings", "S": "bytes", "O": "Python objects"}.get(labels.dtype.kind, str(labels.dtype))
        raise SpecError(
            "model",
            f"{ref}(): the Dataset's {name} labels are {kind}; labels are class indices: give them as "
            "integers (np.int64), the index of each class name in the output's order",
        )
    if labels.dtype.kind == "f":
        as_float = np.asarray(labels, dtype=np.float64)
        if not np.all(np.isfinite(as_float)) or not np.all(as_float == np.round(as_float)):
            raise SpecError(
                "model",
                f"{ref}(): the Dataset's {name} labels are {labels.dtype} and not all whole numbers; labels "
                "are class indices: give them as integers (np.int64)",
            )
    return np.asarray(labels, dtype=np.int64)
