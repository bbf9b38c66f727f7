"""Models with several outputs (a tuple or dict, as detection and multi-head models have)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nnsweep.bench import evaluate
from nnsweep.core.errors import ConversionStorageError, SpecError

TWO_HEADS = '''
import numpy as np
import torch

from nnsweep.models import Dataset, Split


class TwoHeads(torch.nn.Module):
    """A classifier head and a box head on one body: a detector in miniature."""

    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten())
        self.classes = torch.nn.Linear(8 * 8 * 8, 10)
        self.boxes = torch.nn.Linear(8 * 8 * 8, 4)

    def forward(self, x):
        h = self.body(x)
        return self.classes(h), self.boxes(h)


class DictHeads(TwoHeads):
    def forward(self, x):
        h = self.body(x)
        return {"classes": self.classes(h), "boxes": self.boxes(h)}


def _data():
    rng = np.random.RandomState(0)
    cal = rng.standard_normal((32, 1, 8, 8)).astype(np.float32)
    ev = rng.standard_normal((16, 1, 8, 8)).astype(np.float32)
    return Dataset(calibration=Split(cal), evaluation=Split(ev, rng.randint(0, 10, 16).astype(np.int64)))


def build():
    torch.manual_seed(0)
    return TwoHeads().eval(), torch.randn(1, 1, 8, 8), _data()


def build_dict():
    torch.manual_seed(0)
    return DictHeads().eval(), torch.randn(1, 1, 8, 8), _data()


def broken():
    return torch.nn.Linear(3, 2), torch.randn(1, 5)
'''


def test_fidelity_is_the_worst_over_outputs_and_accuracy_comes_from_the_first() -> None:
    ref = np.array([[1.0, 0.0, 0.5, 0.5], [0.0, 1.0, 0.5, 0.5]])
    out = ref.copy()
    out[:, 2:] += 0.25  # only the second output (width 2) is off
    e = evaluate(out, ref, np.array([0, 0]), sizes=(2, 2))
    assert e.accuracy == 0.5  # labels against the first output's argmax
    assert len(e.per_output) == 2 and math.isinf(e.per_output[0].sqnr_db)
    assert e.fidelity.max_abs_err == 0.25 and e.fidelity.sqnr_db == e.per_output[1].sqnr_db
    assert evaluate(out, ref, np.array([1, 0]), sizes=(2, 2), accuracy_output=1).accuracy == 0.5
    with pytest.raises(ValueError, match="values per sample"):
        evaluate(out, ref, None, sizes=(2, 3))
    assert evaluate(ref, ref, None).per_output == ()  # one output: nothing extra


def test_tflite_outputs_are_put_in_flatten_order_by_their_numbers() -> None:
    from nnsweep.runtimes.common.outputs import flatten_order

    names = ["serving_default_output_10_output", "serving_default_output_2_output", "serving_default_output_0_output"]
    assert flatten_order(names) == [2, 1, 0]  # numbers, not text: 10 comes after 2
    assert flatten_order(["logits", "boxes"]) == [0, 1]  # no numbers: the model's order
    assert flatten_order(["output_1", "boxes"]) == [0, 1]  # numbers on some only: the model's order
    assert flatten_order(["StatefulPartitionedCall:0"]) == [0]


def test_a_model_that_fails_on_its_example_is_an_input_error_at_load(tmp_path: Path) -> None:
    from nnsweep.models import load_model

    (tmp_path / "heads.py").write_text(TWO_HEADS)
    with pytest.raises(SpecError, match=r"fails on its example input of shape \(1, 5\): RuntimeError"):
        load_model(f"{tmp_path}/heads.py:broken")
    bundle = load_model(f"{tmp_path}/heads.py:build_dict")
    assert bundle.outputs == (10, 4)


def test_a_disk_error_during_conversion_is_an_infrastructure_error_naming_the_path(tmp_path: Path) -> None:
    from nnsweep.artifacts import deploy
    from nnsweep.artifacts.cache import ArtifactCache
    from nnsweep.core.config import DeploymentConfig
    from nnsweep.models import load_model

    (tmp_path / "heads.py").write_text(TWO_HEADS)
    bundle = load_model(f"{tmp_path}/heads.py:build")
    root = tmp_path / "cache"
    root.mkdir()
    (root / "artifacts").write_text("a file where the cache needs a folder")
    with pytest.raises(ConversionStorageError, match=str(root)) as info:
        deploy.convert(bundle, DeploymentConfig.from_dict({"runtime": "onnxruntime"}), ArtifactCache(root))
    assert str(root) in str(info.value.path)


def _bench(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "nnsweep.cli", "--cache-dir", str(tmp_path / "cache"), "bench", *args]
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=900)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["executorch", "onnxruntime", "torch", "litert", "armnn"])
@pytest.mark.parametrize("build", ["build", "build_dict"])
def test_two_output_model_through_nnsweep_bench(tmp_path: Path, runtime: str, build: str) -> None:
    (tmp_path / "heads.py").write_text(TWO_HEADS)
    proc = _bench(
        tmp_path, "--model", f"heads.py:{build}", "--runtime", runtime, "--iters", "20", "--warmup", "1", "--json"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    parts = result["fidelity_per_output"]
    assert len(parts) == 2
    for part in parts:  # fp32 deployments: both heads match the eager model closely
        assert part["top1_agreement"] == 1.0 and part["max_abs_err"] < 1e-4
    assert result["fidelity"]["max_abs_err"] == max(p["max_abs_err"] for p in parts)
    assert result["accuracy"] is not None and 0.0 <= result["accuracy"] <= 1.0


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["litert", "armnn"])
def test_int8_tflite_with_two_outputs_dequantizes_each(tmp_path: Path, runtime: str) -> None:
    """The core interface adds a DEQUANTIZE per output, so both heads come back as float32."""
    (tmp_path / "heads.py").write_text(TWO_HEADS)
    args = ["--model", "heads.py:build", "--runtime", runtime, "--quant", "static_int8", "--granularity", "per_tensor"]
    proc = _bench(tmp_path, *args, "--iters", "20", "--warmup", "1", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    parts = json.loads(proc.stdout)["fidelity_per_output"]
    assert len(parts) == 2
    for part in parts:  # int8: close to the fp32 heads, not equal
        assert 0.0 < part["max_abs_err"] < 0.5 and part["sqnr_db"] > 15


@pytest.mark.integration
@pytest.mark.slow
def test_quantized_two_output_model_reports_each_head(tmp_path: Path) -> None:
    (tmp_path / "heads.py").write_text(TWO_HEADS)
    proc = _bench(
        tmp_path, "--model", "heads.py:build", "--runtime", "onnxruntime", "--quant", "static_int8", "--iters", "20"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "(worst of the outputs; class ids by their agreement only)" in proc.stdout
    assert "output 0:" in proc.stdout and "output 1:" in proc.stdout
    full = _bench(
        tmp_path,
        "--model",
        "heads.py:build",
        "--runtime",
        "onnxruntime",
        "--quant",
        "static_int8",
        "--interface",
        "full",
    )
    assert full.returncode == 1 and "single-output models" in full.stderr


@pytest.mark.parametrize("runtime", ["torch", "onnxruntime", "executorch"])
@pytest.mark.parametrize("scored", [0, 1])
def test_the_sensitivity_evaluators_score_the_accuracy_output(tmp_path: Path, runtime: str, scored: int) -> None:
    """Each runtime's quantize-and-evaluate scores the output the dataset names (the box
    head has 4 values: agreement on it is agreement among 4 classes), never the tuple."""
    import dataclasses

    from nnsweep.core.quant import Granularity
    from nnsweep.models import load_model
    from nnsweep.sensitivity.rank import quantizable_layers
    from nnsweep.sensitivity.ranking import evaluator

    (tmp_path / "heads.py").write_text(TWO_HEADS)
    bundle = load_model(f"{tmp_path}/heads.py:build")
    bundle = dataclasses.replace(bundle, dataset=dataclasses.replace(bundle.dataset, accuracy_output=scored))
    evaluate = evaluator(bundle, runtime, Granularity.PER_TENSOR)
    layers = frozenset(quantizable_layers(bundle.module, bundle.example_input))
    assert layers == {"body.0", "classes", "boxes"}
    whole_int8, all_float = evaluate(frozenset()), evaluate(layers)
    assert 0.0 <= whole_int8.accuracy <= 1.0
    assert all_float.accuracy >= 0.9  # the layers float: top-1 agreement with the fp32 model's own top-1
    assert all_float.sqnr_db > whole_int8.sqnr_db  # of the scored output against fp32's


def test_the_onnxruntime_evaluator_takes_its_folder_with_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The exported and quantized models of an ONNX Runtime ranking go when the evaluator
    goes: each `nnsweep sensitivity` left its folder in /tmp, a model's size each time."""
    import gc
    import tempfile

    from nnsweep.core.quant import Granularity
    from nnsweep.models import load_model
    from nnsweep.sensitivity.ranking import evaluator

    (tmp_path / "heads.py").write_text(TWO_HEADS)
    bundle = load_model(f"{tmp_path}/heads.py:build")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    evaluate = evaluator(bundle, "onnxruntime", Granularity.PER_TENSOR)
    evaluate(frozenset({"boxes"}))
    (folder,) = scratch.glob("nnsweep-sensitivity-*")
    assert {p.name for p in folder.iterdir()} == {"model.onnx", "prepared.onnx", "quantized.onnx"}
    del evaluate
    gc.collect()
    assert not folder.exists()


def test_a_model_with_two_inputs_is_refused_saying_what_to_do(tmp_path: Path) -> None:
    from nnsweep.models import load_model

    (tmp_path / "two.py").write_text(
        "import torch\n"
        "class Two(torch.nn.Module):\n"
        "    def forward(self, x, y):\n"
        "        return x + y\n"
        "def build():\n"
        "    return Two(), (torch.randn(1, 4), torch.randn(1, 4))\n"
    )
    with pytest.raises(SpecError, match=r"gave 2 example inputs: nnsweep deploys models with one input tensor"):
        load_model(f"{tmp_path}/two.py:build")


LABELLED_BY_A_HEAD = """

def build_labelled_by(scored):
    # Labels that the scored head gets right on every sample.
    torch.manual_seed(0)
    net, data = TwoHeads().eval(), _data()
    with torch.no_grad():
        head = net(torch.from_numpy(data.evaluation.inputs))[scored]
    evaluation = Split(data.evaluation.inputs, head.argmax(1).numpy())
    return net, torch.randn(1, 1, 8, 8), Dataset(data.calibration, evaluation, accuracy_output=scored)


def build_classes():
    return build_labelled_by(0)


def build_boxes():
    return build_labelled_by(1)
"""


@pytest.mark.parametrize("builder", ["build_classes", "build_boxes"])
def test_the_fp32_baseline_accuracy_reads_the_scored_output_alone(tmp_path: Path, builder: str) -> None:
    """The sweep's eager accuracy (the reference when no fp32 baseline is measured) is the
    scored output's top-1 against the labels; it took the argmax over both heads side by side."""
    from nnsweep.bench import MeasureSettings
    from nnsweep.execution import ModelSource
    from nnsweep.sweep.host import HostSide

    (tmp_path / "heads.py").write_text(TWO_HEADS + LABELLED_BY_A_HEAD)
    host = HostSide(ModelSource(f"{tmp_path}/heads.py:{builder}", tmp_path / "cache"), MeasureSettings())
    host.load()
    assert host.eager["accuracy"] == 1.0


def test_an_argmax_output_is_judged_by_its_agreement_not_an_sqnr_of_class_numbers() -> None:
    # probabilities (width 3) and their argmax (width 1); the deployment flips one id of four
    ref = np.array([[0.7, 0.2, 0.1, 0], [0.1, 0.8, 0.1, 1], [0.2, 0.2, 0.6, 2], [0.6, 0.3, 0.1, 0]])
    out = ref.copy()
    out[:, :3] += 0.001
    out[3, :3] = [0.3, 0.6, 0.1]
    out[3, 3] = 1
    e = evaluate(out, ref, None, sizes=(3, 1))
    ids = e.per_output[1]
    assert ids.top1_agreement == 0.75 and ids.sqnr_db < 10  # as computed, but not the model's SQNR
    assert e.fidelity.sqnr_db == e.per_output[0].sqnr_db
    assert e.fidelity.top1_agreement == 0.75
    # Only ids: their SQNR is the only one there is.
    only = evaluate(out[:, 3:], ref[:, 3:], None)
    assert only.fidelity.sqnr_db == ids.sqnr_db
    # A real-valued output of one value (a regression) still counts.
    score = np.array([[0.25], [1.5], [2.0], [3.75]])
    both = evaluate(np.hstack([out[:, :3], score + 1.5]), np.hstack([ref[:, :3], score]), None, sizes=(3, 1))
    assert both.fidelity.sqnr_db == both.per_output[1].sqnr_db
