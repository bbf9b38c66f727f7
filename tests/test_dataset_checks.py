"""A user's Dataset is checked at load: a wrong one is one line naming the split, before any
conversion (each case here failed later, or not at all, before)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nnsweep.cli.main import main
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
        (  # before: "ValueError: could not convert string to float", exit 1
            Dataset(Split(_X[:20]), Split(_X[20:], np.array(["cat", "dog"] * 10))),
            "the Dataset's evaluation labels are strings; labels are class indices",
        ),
        (  # before: every QAT conversion failed, "can't convert np.ndarray of type numpy.str_"
            Dataset(Split(_X[:20]), Split(_X[20:], _LABELS), train=Split(_X, np.array(["a", "b"] * 20))),
            "the Dataset's train labels are strings",
        ),
        (  # before: every QAT conversion failed, "IndexError: Target 4 is out of bounds"
            Dataset(Split(_X[:20]), Split(_X[20:], _LABELS), train=Split(_X, np.arange(40) % 6)),
            "12 of the Dataset's train labels are outside the scored output's classes 0..3 (e.g. 4)",
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


def test_a_split_of_torch_tensors_is_taken_as_their_arrays() -> None:
    # before: "the Dataset's calibration inputs are torch.float32 but the example input is float32"
    dataset = Dataset(
        Split(torch.from_numpy(_X[:20])), Split(torch.from_numpy(_X[20:]).requires_grad_(), torch.from_numpy(_LABELS))
    )
    bundle = _load(dataset)
    evaluation = bundle.dataset.evaluation  # type: ignore[attr-defined]
    assert isinstance(evaluation.inputs, np.ndarray) and evaluation.inputs.dtype == np.float32
    assert isinstance(evaluation.labels, np.ndarray)
    np.testing.assert_array_equal(evaluation.labels, _LABELS)


def test_train_labels_may_skip_samples_with_the_ignore_index() -> None:
    _load(Dataset(Split(_X[:20]), Split(_X[20:], _LABELS), train=Split(_X, np.where(np.arange(40) % 5, 1, -100))))


QAT_MODELS = """
import numpy as np
import torch

from nnsweep.models import Dataset, Split

_X = np.random.RandomState(0).randn(64, 8).astype(np.float32)
_Y = np.arange(64) % 4


def _with_train(labels):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
    return net, torch.zeros(1, 8), Dataset(Split(_X[:16]), Split(_X[16:32], _Y[16:32]), train=Split(_X, labels))


def float_labels():
    return _with_train(_Y.astype(np.float32))


def int32_labels():
    return _with_train(_Y.astype(np.int32))


def column_labels():
    return _with_train(_Y.reshape(-1, 1))
"""


@pytest.mark.parametrize("builder", ["float_labels", "int32_labels", "column_labels"])
def test_qat_trains_on_whole_number_labels_in_any_dtype_or_a_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], builder: str
) -> None:
    # before: every QAT conversion failed: "expected target dtype to be Long or Byte, but got
    # Float" (or Int), and "0D or 1D target tensor expected, multi-target not supported"
    models = tmp_path / "qat_models.py"
    models.write_text(QAT_MODELS)
    args = ["--cache-dir", str(tmp_path / "cache"), "bench", "--model", f"{models}:{builder}", "--runtime", "torch"]
    assert main([*args, "--quant", "qat_int8", "--iters", "3", "--warmup", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] is not None
