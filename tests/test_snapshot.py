"""A model's snapshot lets ``nnsweep bench`` measure a cached artifact without loading the
model (no torch), and the measurement forks from the light bench process itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from nnsweep.models import ModelSnapshot, SnapshotStore, Split, load_model

MODEL = """
import torch

SCALE = {scale}


def build():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3))
    with torch.no_grad():
        net[0].weight.mul_(SCALE)
    return net.eval(), torch.randn(1, 6)
"""


def _model(folder: Path, scale: float = 1.0) -> str:
    (folder / "net.py").write_text(MODEL.format(scale=scale))
    return f"{folder}/net.py:build"


def test_a_snapshot_is_found_until_a_file_the_load_read_changes(tmp_path: Path) -> None:
    ref = _model(tmp_path)
    store = SnapshotStore(tmp_path / "models")
    recipe = store.recipe(ref, None, None)
    assert recipe is not None and store.lookup(recipe) is None
    bundle, snap = store.load(ref, recipe, lambda: load_model(ref))
    kept = store.lookup(recipe)
    assert kept is not None and kept.digest == bundle.digest == snap.digest
    np.testing.assert_array_equal(kept.reference, snap.reference)
    np.testing.assert_array_equal(kept.evaluation.inputs, bundle.dataset.evaluation.inputs)
    assert kept.outputs == bundle.outputs and kept.name == ref

    meta = json.loads((tmp_path / "models" / "snapshots" / f"{recipe}.json").read_text())
    assert str((tmp_path / "net.py").resolve()) in meta["inputs"]  # the model file is an input
    assert not any("site-packages" in p or "/nnsweep/" in p for p in meta["inputs"])  # installed code is not

    _model(tmp_path, scale=2.0)  # an edited model: loaded again, never the stale reference
    os.utime(tmp_path / "net.py", ns=(1, 1))
    assert store.lookup(recipe) is None


SEGMENTATION = """
import torch


def build():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 5, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(5, 4, 1))
    return net.eval(), torch.randn(1, 3, 6, 8)
"""


def test_a_dense_output_has_a_class_at_each_pixel_kept_with_the_snapshot(tmp_path: Path) -> None:
    import torch

    from nnsweep.models import class_positions

    assert class_positions((torch.zeros(1, 10), torch.zeros(1, 4, 6, 8), torch.zeros(1, 7, 12))) == (1, 48, 1)
    (tmp_path / "seg.py").write_text(SEGMENTATION)
    ref = f"{tmp_path}/seg.py:build"
    store = SnapshotStore(tmp_path / "models")
    recipe = store.recipe(ref, None, None)
    assert recipe is not None
    bundle, snap = store.load(ref, recipe, lambda: load_model(ref))
    kept = store.lookup(recipe)
    assert bundle.positions == snap.positions == (48,)
    assert kept is not None and kept.positions == (48,) and kept.outputs == (4 * 48,)


def test_a_torn_or_missing_snapshot_means_loading_the_model(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    snap = ModelSnapshot("m", "d" * 64, Split(np.zeros((2, 3), np.float32)), np.ones((2, 4), np.float32), (4,))
    store.save("r", snap, {})
    assert store.lookup("r") is not None and store.lookup("r").evaluation.labels is None  # type: ignore[union-attr]
    (tmp_path / "snapshots" / "r.npz").write_bytes(b"not a zip")
    assert store.lookup("r") is None
    store.save("r", snap, {str(tmp_path / "gone.py"): [1, 1]})
    assert store.lookup("r") is None  # an input that no longer exists


def test_a_snapshot_altered_since_it_was_kept_is_not_used(tmp_path: Path) -> None:
    """Labels changed in a valid archive made every accuracy 0.00 % (a cache hit scored the
    artifact against them); a digest changed in the metadata would name another model's
    artifacts. Either is a damaged entry: the model is loaded again."""
    store = SnapshotStore(tmp_path)
    labels = np.array([1, 2])
    snap = ModelSnapshot("m", "d" * 64, Split(np.zeros((2, 3), np.float32), labels), np.ones((2, 4), np.float32), (4,))
    folder = tmp_path / "snapshots"

    store.save("r", snap, {})
    with np.load(folder / "r.npz") as data:
        arrays = dict(data)
    arrays["labels"] = (arrays["labels"] + 1) % 4
    with open(folder / "r.npz", "wb") as f:
        np.savez(f, **arrays)
    assert store.lookup("r") is None

    store.save("r", snap, {})
    kept = store.lookup("r")
    assert kept is not None and kept.evaluation.labels is not None
    np.testing.assert_array_equal(kept.evaluation.labels, labels)
    meta = json.loads((folder / "r.json").read_text())
    meta["digest"] = "e" * 64
    (folder / "r.json").write_text(json.dumps(meta))
    assert store.lookup("r") is None

    store.save("r", snap, {})
    meta = json.loads((folder / "r.json").read_text())
    del meta["sha256"], meta["arrays_sha256"]  # kept by an nnsweep before snapshots carried them
    (folder / "r.json").write_text(json.dumps(meta))
    assert store.lookup("r") is None


def test_recipes_tell_models_apart(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    weights = tmp_path / "w.pt"
    weights.write_bytes(b"x")
    recipe = SnapshotStore.recipe
    assert recipe("live:notebook", None, None) is None  # lives in one process: never kept
    assert recipe(_model(tmp_path / "a"), None, None) != recipe(_model(tmp_path / "b"), None, None)
    assert recipe("digits", None, None) == recipe("digits", None, None)
    assert recipe("digits", None, None) != recipe("digits_gn", None, None)
    assert recipe("torchvision:resnet18", None, (1, 3, 64, 64)) != recipe("torchvision:resnet18", None, None)
    with_weights = recipe("torchvision:resnet18", weights, None)
    weights.write_bytes(b"xy")
    assert recipe("torchvision:resnet18", weights, None) != with_weights


FORK_HERE = textwrap.dedent(
    """
    import json, sys, threading
    from pathlib import Path
    import numpy as np
    from nnsweep.bench import MeasureSettings
    from nnsweep.bench._isolated import measure_in_subprocess
    from nnsweep.bench._machine_lock import MachineLock
    from nnsweep.bench._warm import ForkHere
    from nnsweep.core.artifact import IOSpec
    from nnsweep.core.errors import BenchmarkError

    artifact, lock = Path(sys.argv[1]), MachineLock(Path(sys.argv[2]))
    inputs = np.random.default_rng(0).random((8, 4), dtype=np.float32)
    out = {"fits": ForkHere.for_runtime("onnxruntime") is not None,
           "armnn": ForkHere.for_runtime("armnn") is not None}

    def measure(worker, **settings):
        return measure_in_subprocess(runtime="onnxruntime", artifact=artifact, io=IOSpec(), threads=1,
                                     backends=("cpu",), inputs=inputs, settings=MeasureSettings(**settings),
                                     worker=worker, lock=lock)

    fresh, fresh_out = measure(None, iters=20)
    forked, forked_out = measure(ForkHere.for_runtime("onnxruntime"), iters=20)
    out["isolation"] = [fresh.isolation, forked.isolation]
    out["same_outputs"] = bool(np.array_equal(fresh_out, forked_out))
    out["peaks"] = [fresh.peak_rss_mb, forked.peak_rss_mb]
    try:
        measure(ForkHere.for_runtime("onnxruntime"), iters=20, min_duration_s=60, timeout_s=2)
    except BenchmarkError as exc:
        out["timeout"] = str(exc)
    out["after_timeout"] = measure(ForkHere.for_runtime("onnxruntime"), iters=5)[0].isolation
    t = threading.Thread(target=threading.Event().wait, args=(5,), daemon=True)
    t.start()
    out["with_a_thread"] = ForkHere.for_runtime("onnxruntime") is not None
    print(json.dumps(out))
    """
)


def test_a_light_process_forks_its_measurement_itself(tmp_path: Path, tiny_onnx) -> None:  # type: ignore[no-untyped-def]
    artifact = tmp_path / "tiny.onnx"
    artifact.write_bytes(tiny_onnx(np.arange(12, dtype=np.float32).reshape(4, 3)))
    proc = subprocess.run(
        [sys.executable, "-c", FORK_HERE, str(artifact), str(tmp_path / "m.lock")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["fits"] and not out["armnn"]  # PyArmNN runs under another interpreter
    assert out["isolation"] == ["fresh", "fork"] and out["same_outputs"]
    assert out["peaks"][1] <= out["peaks"][0] + 5  # the child's peak is its own, not more than a fresh one's
    assert "timed out" in out["timeout"] and out["after_timeout"] == "fork"  # the child was killed, not us
    assert out["with_a_thread"] is False  # a thread could hold a lock at the fork: fresh process


def test_a_process_with_torch_does_not_fork_its_measurement() -> None:
    import torch  # noqa: F401  (this test process has it, as after a model load)

    from nnsweep.bench._warm import ForkHere

    assert ForkHere.for_runtime("onnxruntime") is None


def _bench(folder: Path, ref: str) -> dict:  # type: ignore[type-arg]
    cmd = [sys.executable, "-m", "nnsweep.cli", "--cache-dir", str(folder / "cache"), "bench", "--model", ref]
    cmd += ["--runtime", "onnxruntime", "--iters", "20", "--warmup", "1", "--json"]
    proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


@pytest.mark.integration
def test_bench_on_a_cache_hit_measures_without_loading_the_model(tmp_path: Path) -> None:
    ref = _model(tmp_path)
    first = _bench(tmp_path, ref)
    second = _bench(tmp_path, ref)
    assert (first["cache_hit"], second["cache_hit"]) == (False, True)
    assert first["isolation"] == "fresh"  # the model was loaded: torch is in the process
    assert second["isolation"] == "fork"  # forked from the bench process: torch was never imported
    assert second["fidelity"]["max_abs_err"] < 1e-5 and second["artifact"] == first["artifact"]
    _model(tmp_path, scale=3.0)  # edit the model: its digest changes, so does the artifact
    third = _bench(tmp_path, ref)
    assert third["cache_hit"] is False and third["artifact"] != first["artifact"]
    assert third["fidelity"]["max_abs_err"] < 1e-5  # against the edited model's own reference


def test_a_model_of_batch_one_gets_its_fp32_outputs_one_sample_a_call(batch_of_one) -> None:  # type: ignore[no-untyped-def]
    from nnsweep.models._snapshot import reference_outputs

    bundle = batch_of_one
    got = reference_outputs(bundle)
    inputs = torch.from_numpy(bundle.dataset.evaluation.inputs)
    with torch.no_grad():
        expected = np.concatenate([bundle.module(inputs[i : i + 1]).numpy() for i in range(len(inputs))])
    assert got.shape == (len(inputs), 3)
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_a_model_that_mixes_the_samples_of_a_batch_gets_each_samples_own_output(branch_on_the_sum) -> None:  # type: ignore[no-untyped-def]
    from nnsweep.models._bundle import takes_batches
    from nnsweep.models._snapshot import reference_outputs

    bundle = branch_on_the_sum
    inputs = torch.from_numpy(bundle.dataset.evaluation.inputs)
    assert len({bool(row.sum() > 0) for row in inputs}) == 2  # both branches among the inputs
    with torch.no_grad():
        alone = np.concatenate([bundle.module(inputs[i : i + 1]).numpy() for i in range(len(inputs))])
    assert not takes_batches(bundle)
    np.testing.assert_allclose(reference_outputs(bundle), alone, rtol=1e-6)


def test_batched_calls_are_kept_for_a_model_that_takes_batches(digits) -> None:  # type: ignore[no-untyped-def]
    from nnsweep.models._bundle import takes_batches

    assert takes_batches(digits)


def test_a_model_of_batch_one_fails_the_dynamic_batch_export_without_an_error_log(  # type: ignore[no-untyped-def]
    batch_of_one, caplog: pytest.LogCaptureFixture
) -> None:
    # The callers fall back to batch 1; torch's fake tensors log an error with a traceback first.
    from nnsweep.runtimes.common.pt2e import export

    with caplog.at_level("DEBUG"), pytest.raises(Exception):  # noqa: B017 - whatever torch raises
        export(batch_of_one.module, batch_of_one.example_input, dynamic_batch=True)
    assert not [r for r in caplog.records if r.levelno >= 40]
    assert any("failed while attempting to run meta" in r.getMessage() for r in caplog.records if r.levelno == 10)


def test_labels_of_a_dense_output_are_one_per_pixel(tmp_path: Path) -> None:
    # (N,) labels for a segmentation failed every trial's evaluation, not the load.
    import torch

    from nnsweep.core.errors import SpecError
    from nnsweep.models import Dataset, register_live

    torch.manual_seed(0)
    net = torch.nn.Conv2d(3, 4, 1).eval()
    x = np.random.default_rng(0).normal(size=(8, 3, 5, 6)).astype(np.float32)
    per_pixel = Dataset(calibration=Split(x), evaluation=Split(x, np.zeros((8, 5, 6), dtype=np.int64)))
    assert load_model(register_live("seg_ok", net, torch.randn(1, 3, 5, 6), per_pixel)).positions == (30,)
    per_sample = Dataset(calibration=Split(x), evaluation=Split(x, np.zeros(8, dtype=np.int64)))
    with pytest.raises(SpecError, match=r"labels have 1 classes per sample; .* one per position .* \(30\)"):
        load_model(register_live("seg_bad", net, torch.randn(1, 3, 5, 6), per_sample))


def _tagger() -> tuple[torch.nn.Module, np.ndarray]:
    """A sequence tagger: (N, T=6, 4) features to (N, T, classes=3) logits, as a
    batch-first recurrent or attention tagger gives them."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)).eval()
    return net, np.random.default_rng(0).normal(size=(16, 6, 4)).astype(np.float32)


def test_a_taggers_labels_tell_its_class_axis_and_the_snapshot_keeps_it(tmp_path: Path) -> None:
    # (N, T) labels for a (T, classes) output were refused ("one per sample"); (N,) labels
    # were scored against one argmax over all of T x classes.
    from nnsweep.bench import evaluate
    from nnsweep.core.errors import SpecError
    from nnsweep.models import Dataset, register_live

    net, x = _tagger()
    with torch.no_grad():
        steps = net(torch.from_numpy(x)).argmax(dim=2).numpy()  # (16, 6): one label per step
    data = Dataset(calibration=Split(x), evaluation=Split(x, steps))
    bundle = load_model(register_live("tagger", net, torch.from_numpy(x[:1]), data))
    assert (bundle.positions, bundle.class_axes) == ((6,), (1,))
    snap = ModelSnapshot.of(bundle)
    assert snap.class_axes == (1,)
    result = evaluate(snap.reference, snap.reference, steps, positions=snap.positions, class_axes=snap.class_axes)
    assert result.accuracy == 1.0
    store = SnapshotStore(tmp_path)
    store.save("r" * 64, snap, {})
    kept = store.lookup("r" * 64)
    assert kept is not None and (kept.positions, kept.class_axes) == ((6,), (1,))
    # (C=3, L=6) labels along the last axis: PyTorch's (N, C, L) layout, classes first
    conv = torch.nn.Conv1d(4, 3, 1).eval()
    xc = np.ascontiguousarray(x.transpose(0, 2, 1))  # (16, 4, 6)
    per_step = Dataset(calibration=Split(xc), evaluation=Split(xc, steps))
    first = load_model(register_live("conv_tagger", conv, torch.from_numpy(xc[:1]), per_step))
    assert (first.positions, first.class_axes) == ((6,), ())
    # labels that fit neither axis: one line naming both
    wrong = Dataset(calibration=Split(x), evaluation=Split(x, np.zeros((16, 5), dtype=np.int64)))
    with pytest.raises(SpecError, match=r"labels have 5 classes per sample; .* either axis of its \(6, 3\) output"):
        load_model(register_live("tagger_bad", net, torch.from_numpy(x[:1]), wrong))
    # one label per sequence: one argmax over all of T x classes is no class
    per_sequence = Dataset(calibration=Split(x), evaluation=Split(x, steps[:, 0]))
    with pytest.raises(SpecError, match=r"labels have 1 classes per sample; .* \(6 or 3\)"):
        load_model(register_live("tagger_one", net, torch.from_numpy(x[:1]), per_sequence))


def test_without_labels_the_inputs_steps_tell_a_sequence_outputs_class_axis() -> None:
    # Agreement with fp32 was one argmax over all of T x classes: a language model's
    # largest logit anywhere in the sequence, not each token's.
    from nnsweep.models import register_live, unlabelled_layout

    net, x = _tagger()
    tagger = load_model(register_live("tagger_free", net, torch.from_numpy(x[:1])))
    assert (tagger.positions, tagger.class_axes) == ((6,), (1,))
    conv = torch.nn.Conv1d(4, 3, 1).eval()
    assert load_model(register_live("conv_free", conv, torch.randn(1, 4, 6))).positions == (6,)
    lm = torch.nn.Sequential(torch.nn.Embedding(50, 8), torch.nn.Linear(8, 50)).eval()
    ids = load_model(register_live("lm_free", lm, torch.randint(0, 50, (1, 7))))
    assert (ids.positions, ids.class_axes) == ((7,), (1,))
    assert unlabelled_layout((6, 4), (6, 4)) == (1, 0)  # fits both ways: one flattened argmax, as before
    assert unlabelled_layout((3, 5), (6, 4)) == (1, 0)  # fits neither
    assert unlabelled_layout((1, 10), (10,)) == (1, 0)
    assert unlabelled_layout((10,), (10,)) == (1, 0)
    assert unlabelled_layout((4, 6, 8), (3, 6, 8)) == (48, 0)


def test_labelled_layouts_of_outputs_of_every_rank() -> None:
    from nnsweep.models import labelled_layout

    assert labelled_layout((10,), 1) == (1, 0)  # a classifier
    assert labelled_layout((1, 10), 1) == (1, 0)  # one that keeps a dimension of one
    assert labelled_layout((12, 4), 12) == (12, 1)  # a tagger: (T, classes)
    assert labelled_layout((4, 12), 12) == (12, 0)  # a 1-D convolution: (classes, L)
    assert labelled_layout((5, 5), 5) == (5, 0)  # square: PyTorch's (C, L)
    assert labelled_layout((12, 4), 1) is None
    assert labelled_layout((12, 4), 48) is None
    assert labelled_layout((4, 6, 8), 48) == (48, 0)  # a segmentation
    assert labelled_layout((4, 6, 8), 1) is None
    assert labelled_layout((10,), 10) is None


TWO_HEADS_ONE_ZERO = """
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(6, 8)
        self.classes = torch.nn.Linear(8, 3)
        self.box = torch.nn.Linear(8, 4)
        torch.nn.init.zeros_(self.box.weight)
        torch.nn.init.zeros_(self.box.bias)

    def forward(self, x):
        h = torch.relu(self.body(x))
        return self.classes(h), self.box(h)


def build():
    torch.manual_seed(0)
    return Net().eval(), torch.randn(1, 6)
"""


def test_an_output_the_same_for_every_input_is_named_in_a_warning(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "net.py").write_text(TWO_HEADS_ONE_ZERO)
    snap = ModelSnapshot.of(load_model(f"{tmp_path}/net.py:build"))
    assert snap.constant_outputs() == (1,)  # the box head is all zero; the classes vary
    with caplog.at_level("WARNING", logger="nnsweep.models._snapshot"):
        snap.warn_if_constant()
    (record,) = caplog.records
    assert "output(s) 1 is the same for each of the 16 evaluation inputs (all zero)" in record.getMessage()

    varying = ModelSnapshot.of(load_model(_model(tmp_path)))
    assert varying.constant_outputs() == ()
    caplog.clear()
    varying.warn_if_constant()
    assert not caplog.records


def test_bench_warns_that_a_constant_model_agrees_with_any_deployment(tmp_path: Path) -> None:
    model = _model(tmp_path, scale=0.0)  # first layer's weights zero: each input gets the logits of the biases
    cmd = [sys.executable, "-m", "nnsweep", "bench", "--model", model, "--runtime", "onnxruntime"]
    cmd += ["--iters", "3", "--warmup", "1", "--cache-dir", str(tmp_path / "cache")]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "the model's output is the same for each of the 16 evaluation inputs:" in proc.stderr


def test_a_random_weight_vit_gets_a_head_that_tells_its_inputs_apart() -> None:
    from torchvision.models import VisionTransformer

    from nnsweep.models._load import _randomise_zero_layers

    torch.manual_seed(0)
    vit = VisionTransformer(image_size=32, patch_size=8, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32).eval()
    x = torch.randn(4, 3, 32, 32)
    assert not vit(x).any()  # torchvision starts the head at zero
    _randomise_zero_layers(vit)
    first = vit(x)
    assert (first.std(dim=0) > 0).all()
    again = VisionTransformer(image_size=32, patch_size=8, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32)
    again.load_state_dict({k: v for k, v in vit.state_dict().items() if not k.startswith("heads")}, strict=False)
    _randomise_zero_layers(again)
    assert torch.equal(again.heads.head.weight, vit.heads.head.weight)  # seeded: the same in every process


def test_a_torchvision_googlenet_loads_without_torchvisions_future_init_warning() -> None:
    # torchvision's FutureWarning on each build of GoogLeNet (and Inception v3) was two
    # lines on every bench and sweep of it.
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bundle = load_model("torchvision:googlenet", input_shape=(1, 3, 64, 64))
    assert bundle.outputs == (1000,)
    assert [str(w.message) for w in caught if "weight initialization" in str(w.message)] == []
