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
    """The evaluation labels are whole numbers; warn when some are outside ``0 .. classes - 1``
    (``classes`` > 1: the scored output's classes per position).

    Labels outside the classes (an ignore index such as 255 or -100) count as wrong for fp32
    and every deployment alike, so the accuracy drop still compares them; the warning says
    the accuracy is lower than the model's.

    Raises:
        SpecError: a label is not a whole number.
    """
    labels = dataset.evaluation.labels
    if labels is None or not len(labels):
        return
    if labels.dtype.kind not in "iub":
        as_float = np.asarray(labels, dtype=np.float64)
        if not np.all(np.isfinite(as_float)) or not np.all(as_float == np.round(as_float)):
            raise SpecError(
                "model",
                f"{ref}(): the Dataset's evaluation labels are {labels.dtype} and not all whole numbers; labels "
                "are class indices: give them as integers (np.int64)",
            )
    values = np.asarray(labels, dtype=np.int64)
    beyond = values >= classes if classes > 1 else np.zeros_like(values, dtype=bool)  # 1: a logit, or class ids
    outside = int(np.count_nonzero((values < 0) | beyond))
    if outside:
        log.warning(
            "%s: %d of the %d evaluation labels are outside the scored output's classes 0..%d (an ignore index?): "
            "they count as wrong for fp32 and every deployment alike",
            ref,
            outside,
            values.size,
            max(classes - 1, 1),
        )
