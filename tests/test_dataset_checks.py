"""A user's Dataset is checked at load: a wrong one is one line naming the split, before any
conversion (each case here failed later, or not at all, before)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nnsweep.core.errors import SpecError
from nnsweep.models import Dataset, Split, load_model, register_live

_RNG = np.random.RandomState(0)
_X = _RNG.randn(40, 8).astype(np.float32)
_LABELS = _RNG.randint(0, 4, 20)


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()


def _load(dataset: Dataset) -> object:
    return load_model(register_live("checked", _net(), torch.from_numpy(_X[:1]), dataset))


def _with_nan(split: np.ndarray, row: int, value: float) -> np.ndarray:
    x = split.copy()
    x[row, 2] = value
    return x


@pytest.mark.parametrize(
    ("dataset", "said"),
    [
        (
            Dataset(Split(_with_nan(_X[:20], 3, np.nan)), Split(_X[20:], _LABELS)),
            "the Dataset's calibration inputs hold 1 NaN or infinite value(s)",
        ),
        (
            Dataset(Split(_X[:20]), Split(_with_nan(_X[20:], 5, np.inf), _LABELS)),
            "the Dataset's evaluation inputs hold 1 NaN or infinite value(s)",
        ),
        (Dataset(Split(_X[:0]), Split(_X[20:], _LABELS)), "the Dataset's calibration split is empty"),
        (
            Dataset(Split(_X[:20, :6]), Split(_X[20:, :6], _LABELS)),
            "the Dataset's calibration inputs are (6,) per sample but the example input is (8,)",
        ),
        (
            Dataset(Split(_X[:20]), Split(_X[20:], _LABELS + 0.5)),
            "the Dataset's evaluation labels are float64 and not all whole numbers",
        ),
    ],
)
def test_a_wrong_dataset_is_refused_naming_the_split(dataset: Dataset, said: str) -> None:
    with pytest.raises(SpecError) as raised:
        _load(dataset)
    assert said in str(raised.value)


@pytest.mark.parametrize(
    ("labels", "outside"),
    [(_LABELS, 0), (_LABELS.astype(np.float32), 0), (np.where(_LABELS == 0, 255, _LABELS), -1), (_LABELS - 1, -1)],
)
def test_labels_outside_the_classes_are_warned_of(
    caplog: pytest.LogCaptureFixture, labels: np.ndarray, outside: int
) -> None:
    with caplog.at_level("WARNING", logger="nnsweep.models"):
        bundle = _load(Dataset(Split(_X[:20]), Split(_X[20:], labels)))
    said = [r.getMessage() for r in caplog.records if "evaluation labels are outside" in r.getMessage()]
    expected = int(np.count_nonzero(_LABELS == 0))
    assert bool(said) == bool(outside), said
    assert not said or f"{expected} of the 20 evaluation labels are outside the scored output's classes 0..3" in said[0]
    assert bundle is not None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    calibration=st.integers(0, 5),
    evaluation=st.integers(0, 5),
    width=st.sampled_from([6, 8, 9]),
    poison=st.sampled_from([None, np.nan, np.inf, -np.inf]),
    labels=st.sampled_from(["int", "float", "half", "none"]),
)
def test_any_dataset_loads_or_is_one_spec_error(
    calibration: int, evaluation: int, width: int, poison: float | None, labels: str
) -> None:
    rng = np.random.RandomState(calibration * 10 + evaluation)
    cal = rng.randn(calibration, width).astype(np.float32)
    ev = rng.randn(evaluation, width).astype(np.float32)
    if poison is not None and evaluation:
        ev[0, 0] = poison
    ids = rng.randint(0, 4, evaluation)
    label = {"int": ids, "float": ids.astype(np.float32), "half": ids + 0.5, "none": None}[labels]
    try:
        bundle = _load(Dataset(Split(cal), Split(ev, label)))
    except SpecError:
        return
    assert calibration and evaluation and width == 8 and poison is None and labels != "half"
    assert bundle is not None
