"""The spec's ``data`` section: where a sweep's evaluation and calibration data come from.

Plain settings (:func:`~nnsweep.core.fields.setting`), so the schema derives from them;
loading is :mod:`nnsweep.models.data_sources`, putting the data in place of the model's own
:func:`nnsweep.models.task_data.with_data`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nnsweep.core.fields import REQUIRED, setting

__all__ = ["MAX_SAMPLES", "DataSource", "TaskData"]

MAX_SAMPLES = 10_000_000


@dataclass(frozen=True)
class DataSource:
    """Where a split's data comes from (``data.evaluation``, ``data.calibration``); loading
    it checks it (:func:`~nnsweep.models.data_sources.load_data`, naming the split).

    ``source`` is ``module:function``, ``file.py:function`` (relative to the sweep file's
    folder), a ``.npz``/``.npy`` file, an image folder or a ``datasets`` folder.
    """

    source: str = setting(REQUIRED, "where the data is: a function, a .npz/.npy file or a folder", max_length=2000)
    max_samples: int | None = setting(None, "keep at most this many samples, a seeded subset", ge=1, le=MAX_SAMPLES)
    seed: int = setting(0, "the subset's seed", ge=0, le=2**32 - 1)
    transform: str | None = setting(
        None, "function mapping one PIL image to an array (default: RGB float32 CHW in [0, 1])", max_length=1000
    )
    input_column: str | None = setting(None, "the .npz array or datasets column of the inputs", max_length=200)
    target_column: str | None = setting(None, "the .npz array or datasets column of the targets", max_length=200)


@dataclass(frozen=True)
class TaskData:
    """A sweep's evaluation and calibration data (``None``: the model's own).

    ``base_dir``: what relative paths and ``file.py:function`` references are relative to
    (the sweep file's folder).
    """

    evaluation: DataSource | None = setting(None, "the data quality is measured on")
    calibration: DataSource | None = setting(None, "the data static int8 ranges are observed on")
    base_dir: Path = Path(".")
