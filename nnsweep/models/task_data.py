"""The spec's ``data`` section: evaluation and calibration data from where the user keeps
them, put in place of the model's own (:func:`with_data`)."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import numpy as np

from nnsweep.core.task_data import DataSource, TaskData
from nnsweep.models._bundle import ModelBundle, Split
from nnsweep.models.data_sources import LoadedData, check_fits, load_data

__all__ = ["with_data"]


def with_data(bundle: ModelBundle, data: TaskData) -> ModelBundle:
    """``bundle`` with the user's data in place of its own, its digest covering them.

    Targets that are one class id per sample become the evaluation labels too, so
    ``accuracy`` keeps its meaning; any other targets reach only the user's metrics.

    Raises:
        SpecError: on ``data.evaluation`` / ``data.calibration``: the data does not load or
            does not fit the model's example input.
    """
    if data.evaluation is None and data.calibration is None:
        return bundle
    example = bundle.example_input.detach().cpu().numpy()
    h = hashlib.sha256(bundle.digest.encode())
    dataset = bundle.dataset
    if data.calibration is not None:
        calibration = _loaded(data.calibration, "data.calibration", data.base_dir, example)
        h.update(b"calibration" + calibration.digest.encode())
        # its targets only for a user metric's ranking: top-1 rankings stay agreement with fp32
        dataset = dataclasses.replace(dataset, calibration=Split(calibration.inputs, None, calibration.targets))
    if data.evaluation is not None:
        evaluation = _loaded(data.evaluation, "data.evaluation", data.base_dir, example)
        h.update(b"evaluation" + evaluation.digest.encode())
        labels = _class_ids(evaluation)
        split = Split(evaluation.inputs, labels if _labels_fit(bundle, labels) else None, evaluation.targets)
        dataset = dataclasses.replace(dataset, evaluation=split, accuracy_output=dataset.accuracy_output)
    return dataclasses.replace(bundle, dataset=dataset, digest=h.hexdigest())


def _loaded(source: DataSource, field: str, base_dir: Path, example: np.ndarray) -> LoadedData:
    loaded = load_data(source, field=field, base_dir=base_dir)
    check_fits(loaded, example, field=field)
    return loaded


def _class_ids(data: LoadedData) -> np.ndarray | None:
    targets = data.targets
    if isinstance(targets, np.ndarray) and targets.ndim == 1 and targets.dtype.kind in "iu":
        return targets.astype(np.int64)
    return None


def _labels_fit(bundle: ModelBundle, labels: np.ndarray | None) -> bool:
    """One class id per sample fits a model whose scored output is one classification."""
    if labels is None:
        return False
    scored = bundle.dataset.accuracy_output
    positions = bundle.positions[scored] if bundle.positions else 1
    return positions == 1
