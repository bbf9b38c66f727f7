from __future__ import annotations

import math

import numpy as np
import pytest

from nnsweep.bench import LatencyStats, MeasureSettings, evaluate
from nnsweep.errors import SpecError


def test_latency_stats_match_numpy() -> None:
    samples = [float(x) for x in range(1, 101)]  # 1..100 ms
    s = LatencyStats.from_samples(samples)
    assert s.mean == pytest.approx(50.5)
    assert s.p50 == pytest.approx(50.5)
    assert s.p90 == pytest.approx(90.1)
    assert s.p99 == pytest.approx(99.01)
    assert s.std == pytest.approx(np.std(samples, ddof=1))
    assert (s.min, s.max, s.count) == (1.0, 100.0, 100)
    assert set(s.to_dict()) == {"mean", "p50", "p90", "p99", "std", "min", "max"}


def test_single_sample_has_zero_spread_and_no_samples_is_an_error() -> None:
    assert LatencyStats.from_samples([2.0]).std == 0.0
    with pytest.raises(ValueError):
        LatencyStats.from_samples([])


@pytest.mark.parametrize("field", ["warmup", "iters"])
def test_measure_settings_reject_bad_counts(field: str) -> None:
    with pytest.raises(SpecError) as info:
        MeasureSettings(**{field: -1})
    assert info.value.field == field
    with pytest.raises(SpecError):
        MeasureSettings(iters=0)


def test_fidelity_of_identical_outputs() -> None:
    ref = np.array([[1.0, 2.0, 0.5], [3.0, -1.0, 0.0]])
    ev = evaluate(ref.copy(), ref, np.array([1, 0]))
    assert ev.accuracy == 1.0
    assert ev.fidelity.top1_agreement == 1.0
    assert ev.fidelity.max_abs_err == 0.0
    assert math.isinf(ev.fidelity.sqnr_db)
    assert ev.fidelity.to_dict()["sqnr_db"] is None  # JSON has no infinity


def test_fidelity_matches_hand_computed_sqnr_and_agreement() -> None:
    ref = np.array([[1.0, 0.0], [0.0, 1.0], [2.0, 1.0], [1.0, 3.0]])
    noise = np.array([[0.1, 0.0], [0.0, -0.1], [-1.5, 0.0], [0.0, 0.0]])
    ev = evaluate(ref + noise, ref, labels=None)
    assert ev.accuracy is None
    assert ev.fidelity.top1_agreement == 0.75  # row 3 flips from class 0 to class 1
    assert ev.fidelity.max_abs_err == pytest.approx(1.5)
    assert ev.fidelity.mean_abs_err == pytest.approx(1.7 / 8)
    signal, err = float((ref**2).sum()), float((noise**2).sum())
    assert ev.fidelity.sqnr_db == pytest.approx(10 * math.log10(signal / err))


def test_nan_outputs_and_shape_mismatch_are_errors() -> None:
    ref = np.ones((2, 3))
    with pytest.raises(ValueError, match="NaN"):
        evaluate(np.full((2, 3), np.nan), ref, None)
    with pytest.raises(ValueError, match="shape"):
        evaluate(np.ones((2, 4)), ref, None)
