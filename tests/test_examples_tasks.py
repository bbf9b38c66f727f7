"""The worked examples of user tasks in sweeps/examples: a detector scored by mAP@0.5
(detect.py) and a segmenter scored by mean IoU (segment.py).

Fast: their data functions are seeded (the same inputs and targets on every call), the
detector's targets are box lists of varying length, and each metric gives 1.0 on outputs
made from the targets themselves and less on perturbed ones. Slow: each model trains to
its quality bar, through its model function (as nnsweep loads it), and a second load
reads the kept weights instead of training again.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "sweeps" / "examples"


def _example(name: str) -> ModuleType:
    module_name = f"nnsweep_test_example_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def detect() -> ModuleType:
    return _example("detect")


@pytest.fixture(scope="module")
def segment() -> ModuleType:
    return _example("segment")


def _logits(probabilities: np.ndarray) -> np.ndarray:
    p = np.clip(probabilities, 1e-4, 1 - 1e-4)
    return np.log(p / (1 - p)).astype(np.float32)


def _detector_outputs(detect: ModuleType, targets: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
    """The raw outputs a perfect detector of ``targets`` would give."""
    heat, box, _ = detect.encode(targets)
    return [_logits(heat), box]


# --- data ---------------------------------------------------------------------------------


def test_detection_data_is_seeded_and_its_box_lists_vary_in_length(detect: ModuleType) -> None:
    inputs, targets = detect.evaluation_data()
    again_inputs, again_targets = detect.evaluation_data()
    assert inputs.dtype == np.float32 and inputs.shape == (detect.EVALUATION, 3, detect.SIZE, detect.SIZE)
    assert np.array_equal(inputs, again_inputs)
    assert len(targets) == len(inputs)
    for target, again in zip(targets, again_targets, strict=True):
        assert np.array_equal(target["boxes"], again["boxes"]) and np.array_equal(target["labels"], again["labels"])
        assert target["boxes"].shape == (len(target["labels"]), 4) and target["labels"].dtype == np.int64
        x1, y1, x2, y2 = target["boxes"].T
        assert (x1 < x2).all() and (y1 < y2).all() and x1.min() >= 0 and x2.max() <= detect.SIZE
    counts = {len(t["labels"]) for t in targets}
    assert counts == set(range(1, detect.MAX_OBJECTS + 1))
    assert set(np.concatenate([t["labels"] for t in targets]).tolist()) == set(range(len(detect.CLASSES)))
    calibration = detect.calibration_data()
    assert calibration.shape[1:] == inputs.shape[1:] and np.array_equal(calibration, detect.calibration_data())
    assert not np.array_equal(calibration[: len(inputs)], inputs[: len(calibration)])  # another seed


def test_segmentation_data_is_seeded_with_a_mask_per_image(segment: ModuleType) -> None:
    inputs, masks = segment.evaluation_data()
    again_inputs, again_masks = segment.evaluation_data()
    assert np.array_equal(inputs, again_inputs) and np.array_equal(masks, again_masks)
    assert inputs.dtype == np.float32 and inputs.shape == (segment.EVALUATION, 3, segment.SIZE, segment.SIZE)
    assert masks.dtype == np.int64 and masks.shape == (segment.EVALUATION, segment.SIZE, segment.SIZE)
    assert set(np.unique(masks).tolist()) == set(range(len(segment.CLASSES)))
    assert np.array_equal(segment.calibration_data(), segment.calibration_data())


# --- metrics ------------------------------------------------------------------------------


def test_map50_is_one_on_outputs_made_from_the_targets_and_lower_when_they_are_off(detect: ModuleType) -> None:
    _, targets = detect.evaluation_data()
    targets = targets[:60]
    assert detect.map50(_detector_outputs(detect, targets), targets) == pytest.approx(1.0)

    def moved(t: dict[str, np.ndarray], i: int) -> dict[str, np.ndarray]:
        if i % 2:
            return t
        width = t["boxes"][:, 2:3] - t["boxes"][:, 0:1]  # by most of its width: IoU below 0.5
        return {"boxes": t["boxes"] + np.hstack([0.6 * width, 0 * width] * 2), "labels": t["labels"]}

    shifted = detect.map50(_detector_outputs(detect, [moved(t, i) for i, t in enumerate(targets)]), targets)
    relabelled = [{"boxes": t["boxes"], "labels": (t["labels"] + (i % 3 == 0)) % 3} for i, t in enumerate(targets)]
    wrong_class = detect.map50(_detector_outputs(detect, relabelled), targets)
    assert 0.05 < shifted < 0.8 and 0.2 < wrong_class < 0.95


def test_decode_keeps_one_detection_per_object_above_the_noise(detect: ModuleType) -> None:
    _, targets = detect.evaluation_data()
    heat, box = _detector_outputs(detect, targets[:20])
    for h, b, target in zip(heat, box, targets[:20], strict=True):
        found = detect.decode(h, b)
        confident = found["scores"] > 0.5
        assert sorted(found["labels"][confident].tolist()) == sorted(target["labels"].tolist())
        order = np.lexsort((found["boxes"][confident][:, 0], found["labels"][confident]))
        expected = np.lexsort((target["boxes"][:, 0], target["labels"]))
        assert np.allclose(found["boxes"][confident][order], target["boxes"][expected], atol=1e-3)


def test_miou_is_one_on_the_masks_themselves_and_lower_when_they_are_off(segment: ModuleType) -> None:
    _, masks = segment.evaluation_data()
    classes = len(segment.CLASSES)
    one_hot = np.eye(classes, dtype=np.float32)[masks].transpose(0, 3, 1, 2)  # (N, classes, H, W) "logits"
    assert segment.miou([one_hot], masks) == pytest.approx(1.0)
    shifted = np.eye(classes, dtype=np.float32)[np.roll(masks, 2, axis=2)].transpose(0, 3, 1, 2)
    assert 0.3 < segment.miou([shifted], masks) < 0.9


# --- training -----------------------------------------------------------------------------


def _fp32_outputs(net: object, inputs: np.ndarray) -> list[np.ndarray]:
    import torch

    with torch.no_grad():
        out = net(torch.from_numpy(inputs))  # type: ignore[operator]
    return [o.numpy() for o in (out if isinstance(out, tuple) else (out,))]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "metric", "bar"), [("detect", "map50", 0.7), ("segment", "miou", 0.85)])
def test_the_model_function_trains_to_its_bar_once_and_loads_the_kept_weights_after(
    name: str, metric: str, bar: float, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from nnsweep.models import load_model

    example = _example(name)
    monkeypatch.setenv("NNSWEEP_CACHE", str(tmp_path))
    net, example_input = example.model()
    assert example_input.shape == (1, *example.evaluation_data()[0].shape[1:])
    inputs, targets = example.evaluation_data()
    score = getattr(example, metric)(_fp32_outputs(net, inputs[:200]), targets[:200])
    assert score > bar, f"{name}: fp32 {metric} {score:.3f}"

    def no_training(*_: object) -> None:
        raise AssertionError("trained again instead of loading the kept weights")

    monkeypatch.setattr(example, "train_model", no_training)
    again, _ = example.model()
    for (key, value), (_, kept) in zip(net.state_dict().items(), again.state_dict().items(), strict=True):
        assert torch.equal(value, kept), key
    # as a sweep loads it: by reference to the file, its outputs in the order the metric reads them
    bundle = load_model(f"{EXAMPLES / name}.py:model")
    assert len(bundle.outputs) == len(_fp32_outputs(net, inputs[:1]))


# --- the sweeps ---------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize(("spec", "metric"), [("detect.yaml", "map50"), ("segment.yaml", "miou")])
def test_the_example_sweep_runs_on_its_own_metric(spec: str, metric: str, tmp_path: Path) -> None:
    """``nnsweep run`` on a copy of the spec beside a copy of examples/ (its paths are
    relative to the spec), with a budget of four trials."""
    import shutil
    import subprocess

    shutil.copy(EXAMPLES.parent / spec, tmp_path / spec)
    shutil.copytree(EXAMPLES, tmp_path / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, NNSWEEP_CACHE=str(tmp_path / "cache"))  # the model functions keep their weights there too
    cmd = [sys.executable, "-m", "nnsweep.cli", "run", spec, "--trials", "4", "--executor", "local"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "Best on host:" in proc.stdout
    report = tmp_path / "reports" / f"{Path(spec).stem}.html"
    assert metric in report.read_text()
