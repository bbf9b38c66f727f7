from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nnsweep.bench import LatencyStats, MeasureSettings, Runner, Timing, evaluate, time_runner
from nnsweep.bench._stats import median_ci
from nnsweep.cli.bench import quality_lines
from nnsweep.core.artifact import IOSpec
from nnsweep.core.errors import SpecError


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


def test_a_one_value_output_is_compared_by_its_class_not_an_argmax_that_is_always_0() -> None:
    # A binary classifier's logit: the class is whether it is above 0.
    logits = np.array([[2.0], [-1.5], [0.3], [-0.2]])
    flipped = np.array([[1.9], [-1.4], [-0.1], [-0.3]])  # row 3 crosses 0
    ev = evaluate(flipped, logits, labels=np.array([1, 0, 1, 0]))
    assert ev.fidelity.top1_agreement == 0.75
    assert ev.accuracy == 0.75
    # A model that ends in argmax: its output is the class index itself.
    classes = np.array([[3.0], [0.0], [2.0], [2.0]])
    assert evaluate(np.array([[3.0], [1.0], [2.0], [2.0]]), classes, labels=None).fidelity.top1_agreement == 0.75
    # read as the reference is: a deployed logit of exactly 1.0 is still a logit
    assert evaluate(np.array([[1.0], [-1.0], [1.0], [-1.0]]), logits, None).fidelity.top1_agreement == 1.0


def test_a_dense_output_is_compared_position_by_position_not_by_one_argmax_over_all() -> None:
    # A segmentation's (classes=3, H=2, W=2) per sample, flattened as runners give it.
    rng = np.random.default_rng(0)
    reference = rng.normal(size=(4, 3, 2, 2))
    deployed = reference.copy()
    deployed[0, :, 0, 0] = [0.0, 0.0, 0.0]
    deployed[0, 2, 0, 0] = 9.0  # one pixel of one sample takes class 2
    flat_out, flat_ref = deployed.reshape(4, -1), reference.reshape(4, -1)
    moved = float(reference[0, :, 0, 0].argmax() != 2)
    per_pixel = evaluate(flat_out, flat_ref, None, positions=(4,)).fidelity.top1_agreement
    assert per_pixel == 1.0 - moved / 16  # one of 16 pixels, not one of 4 samples
    labels = reference.argmax(axis=1)  # (N, H, W) labels, one per pixel
    assert evaluate(flat_ref, flat_ref, labels, positions=(4,)).accuracy == 1.0
    with pytest.raises(ValueError, match="labels have 1 classes per sample, the output 4"):
        evaluate(flat_ref, flat_ref, labels[:, 0, 0], positions=(4,))
    # One value per pixel (a binary mask's logit): its sign, pixel by pixel.
    mask = np.array([[0.5, -0.5, 0.2, -0.1]])
    assert evaluate(np.array([[0.4, -0.6, -0.1, -0.2]]), mask, None, positions=(4,)).fidelity.top1_agreement == 0.75


def test_a_taggers_steps_are_compared_step_by_step_along_its_last_axis() -> None:
    # A sequence tagger's (T=5, classes=3) per sample, flattened step by step as runners give it.
    rng = np.random.default_rng(1)
    reference = rng.normal(size=(4, 5, 3))
    deployed = reference.copy()
    deployed[0, 2] = [0.0, 0.0, 0.0]
    deployed[0, 2, reference[0, 2].argmin()] = 9.0  # one step of one sample takes another class
    flat_out, flat_ref = deployed.reshape(4, -1), reference.reshape(4, -1)
    agreement = evaluate(flat_out, flat_ref, None, positions=(5,), class_axes=(1,)).fidelity.top1_agreement
    assert agreement == 1.0 - 1 / 20  # one of 20 steps
    labels = reference.argmax(axis=2)  # (N, T) labels, one per step
    assert evaluate(flat_ref, flat_ref, labels, positions=(5,), class_axes=(1,)).accuracy == 1.0
    assert evaluate(flat_out, flat_ref, labels, positions=(5,), class_axes=(1,)).accuracy == 1.0 - 1 / 20
    # read along the first axis, the same values are other classes: the layout matters
    assert evaluate(flat_ref, flat_ref, labels, positions=(5,)).accuracy < 1.0
    # bench's summary says the figures are per step, not per sequence
    per_step = evaluate(flat_out, flat_ref, labels, positions=(5,), class_axes=(1,))
    assert per_step.positions == 5
    accuracy, fidelity = quality_lines(per_step)
    assert accuracy == "Accuracy (top-1 at each of 5 positions, 4 evaluation samples): 95.00 %"
    assert fidelity.startswith("Fidelity vs fp32: top-1 agreement 95.0 % (per position), ")
    accuracy, fidelity = quality_lines(evaluate(flat_ref[:, :3], flat_ref[:, :3], labels[:, 0]))
    assert accuracy.startswith("Accuracy (top-1, 4 evaluation samples): ") and "per position" not in fidelity
    with pytest.raises(ValueError, match="2 class positions and 1 class axes for 2 outputs"):
        evaluate(np.zeros((2, 4)), np.zeros((2, 4)), None, sizes=(2, 2), positions=(1, 1), class_axes=(0,))


def test_nan_outputs_and_shape_mismatch_are_errors() -> None:
    ref = np.ones((2, 3))
    with pytest.raises(ValueError, match="NaN"):
        evaluate(np.full((2, 3), np.nan), ref, None)
    with pytest.raises(ValueError, match="shape"):
        evaluate(np.ones((2, 4)), ref, None)


def test_median_ci_brackets_the_median_and_narrows_with_more_samples() -> None:
    assert median_ci([float(x) for x in range(1, 101)]) == (41.0, 61.0)  # ranks 50 -+ 9.8
    rng = np.random.default_rng(1)
    small, large = rng.normal(10, 1, 100), rng.normal(10, 1, 10_000)
    lo_s, hi_s = median_ci(small)
    lo_l, hi_l = median_ci(large)
    assert lo_s <= float(np.median(small)) <= hi_s and lo_l <= float(np.median(large)) <= hi_l
    assert (hi_l - lo_l) < (hi_s - lo_s) / 5  # width shrinks as 1/sqrt(n)
    assert median_ci([3.0, 1.0, 2.0]) == (1.0, 3.0)  # too few: the whole range
    with pytest.raises(ValueError):
        median_ci([])


class _FakeRunner(Runner):
    """Costs nothing; ``run`` returns at once, or sleeps by a pattern (noisy)."""

    def __init__(self, pattern: tuple[float, ...] = ()) -> None:
        super().__init__(Path("fake"), IOSpec(), 1, ())
        self.pattern, self.calls = pattern, 0

    def load(self) -> None:
        pass

    def run(self, prepared: object) -> object:
        if self.pattern:
            time.sleep(self.pattern[self.calls % len(self.pattern)])
        self.calls += 1
        return prepared


X = np.zeros((1, 2), dtype=np.float32)


def test_fixed_length_timing_stops_at_iters_or_min_duration() -> None:
    t = time_runner(_FakeRunner(), X, MeasureSettings(warmup=0, iters=50))
    assert (t.latency.count, t.stop_reason) == (50, "iters")
    t = time_runner(_FakeRunner(), X, MeasureSettings(warmup=0, iters=5, min_duration_s=0.05))
    assert t.latency.count > 5 and t.stop_reason == "min_duration" and t.phases_ms["timed"] >= 50
    assert t.phases_ms["timed_cpu"] > 0  # this process's CPU time during the timed runs


def test_until_stable_stops_when_the_p50_interval_is_tight_or_at_the_cap() -> None:
    loose = MeasureSettings(warmup=0, iters=30, until_stable=True, ci_rel=0.9)
    t = time_runner(_FakeRunner((0.001,)), X, loose)
    assert t.stop_reason == "stable" and t.latency.count == 30 and t.p50_ci_rel <= 0.9
    # Half the runs take 0 ms and half 2 ms: the median never settles to 0.01 %.
    noisy = MeasureSettings(warmup=0, iters=10, until_stable=True, ci_rel=0.0001, max_duration_s=0.2)
    t = time_runner(_FakeRunner((0.0, 0.002)), X, noisy)
    assert t.stop_reason == "cap" and 190 <= t.phases_ms["timed"] < 2000


def test_timing_round_trips_and_reads_older_dicts() -> None:
    t = time_runner(_FakeRunner(), X, MeasureSettings(warmup=0, iters=10))
    d = t.to_dict()
    back = Timing.from_dict(d)
    assert back.stop_reason == t.stop_reason and dict(back.phases_ms) == dict(t.phases_ms)
    assert d["p50_ci95_ms"] == list(t.p50_ci95_ms)
    old = {k: d[k] for k in ("load_ms", "first_inference_ms", "samples_ms", "peak_rss_mb", "rss_before_load_mb")}
    old.update(threads=1, loadavg_1m=None)
    legacy = Timing.from_dict(old)
    assert (legacy.lock_wait_ms, legacy.isolation, legacy.phases_ms) == (0.0, "fresh", {})


@pytest.mark.parametrize(("field", "value"), [("ci_rel", 0.0), ("ci_rel", 1.5), ("max_duration_s", 0.0)])
def test_measure_settings_reject_bad_stability_settings(field: str, value: float) -> None:
    with pytest.raises(SpecError) as info:
        MeasureSettings(**{field: value})  # type: ignore[arg-type]
    assert info.value.field == field


def test_executorchs_log_gives_the_first_and_last_failure_and_skips_start_up_noise() -> None:
    from nnsweep.runtimes.executorch.native_log import executorch_failure

    log = (
        "[cpuinfo_utils.cpp:87] Failed to open midr file /sys/devices/soc0/image_version\n"
        "[method.cpp:1493] arg 9 with type id 1\n"
        "[XNNCompiler.cpp:2305] XNN Runtime creation failed with code: xnn_status_unsupported_parameter\n"
        "[XNNPACKBackend.cpp:143] XNNCompiler::compileModel failed: 0x1\n"
        "[method.cpp:128] Init failed for backend XnnpackBackend: 0x1\n"
        "Traceback (most recent call last):\n"
    )
    assert executorch_failure(log) == (
        "XNN Runtime creation failed with code: xnn_status_unsupported_parameter"
        " | Init failed for backend XnnpackBackend: 0x1"
    )
    assert executorch_failure("[method.cpp:1] loaded\nplain text failed\n") == ""
    assert len(executorch_failure("[a.cpp:1] failed " + "x" * 1000, limit=100)) == 100
    # A delegate this build lacks: logged without "failed", then the load fails with 0x20.
    assert executorch_failure("[method.cpp:85] Backend EthosUBackend is not registered.\n") == (
        "Backend EthosUBackend is not registered."
    )


@pytest.mark.parametrize(
    ("message", "name"),
    [
        ("Failed to load method forward, error: 0x:20", "NotFound"),
        ("method->execute() failed with error 0x12", "InvalidArgument"),
        ("Failed to load method forward, error: 0x:1", "Internal"),
        ("method->execute() failed with error 0x7f", ""),
        ("no code here", ""),
    ],
)
def test_an_executorch_error_code_is_named(message: str, name: str) -> None:
    from nnsweep.runtimes.executorch.native_log import error_name

    assert error_name(message) == name


_DIMS = st.integers(min_value=1, max_value=6)


@settings(max_examples=300, deadline=None)
@given(
    shape=st.lists(_DIMS, min_size=1, max_size=4).map(tuple),
    inputs=st.lists(_DIMS, min_size=1, max_size=3).map(tuple),
    labels=st.integers(min_value=1, max_value=40),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_every_layout_reads_each_position_s_class_from_its_own_values(
    shape: tuple[int, ...], inputs: tuple[int, ...], labels: int, seed: int
) -> None:
    # Whatever layout the labels or the input give an output, each position's class is the
    # argmax of that position's values along the class axis, and labels fit it exactly.
    from nnsweep.bench import predicted_classes
    from nnsweep.models import labelled_layout, unlabelled_layout

    values = np.random.default_rng(seed).normal(size=(3, *shape))
    flat = values.reshape(3, -1)
    layouts = [unlabelled_layout(shape, inputs)]
    told = labelled_layout(shape, labels)
    if told is not None:
        assert told[0] == labels  # labels fit the layout they tell
        layouts.append(told)
    for positions, axis in layouts:
        assert axis in (0, 1) and flat.shape[1] % positions == 0
        classes = predicted_classes(flat, positions=positions, class_axis=axis).reshape(3, -1)
        assert classes.shape == (3, positions)
        if positions == 1 or flat.shape[1] == positions:
            continue  # one argmax over everything, or one value per position (its sign)
        grid = flat.reshape(3, positions, -1) if axis == 1 else flat.reshape(3, -1, positions).transpose(0, 2, 1)
        assert (classes == grid.argmax(axis=2)).all()
