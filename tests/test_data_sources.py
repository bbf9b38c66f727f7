"""Evaluation and calibration data from where users keep it: each form loads into one dense
array of inputs with its targets untouched, a seeded subset is the same every time, and
every user mistake is one line on the data field."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from PIL import Image

from nnsweep.core.errors import SpecError
from nnsweep.core.task_data import DataSource
from nnsweep.models.data_sources import LoadedData, check_fits, load_data

FIELD = "data.evaluation"
_RNG = np.random.default_rng(0)
_X = _RNG.standard_normal((20, 3, 4, 4)).astype(np.float32)
_BOXES = [{"boxes": np.zeros((i % 3, 4), np.float32), "labels": list(range(i % 3)), "id": f"img{i}"} for i in range(20)]


def _load(tmp_path: Path, source: str, **options: object) -> LoadedData:
    return load_data(DataSource(source, **options), field=FIELD, base_dir=tmp_path)  # type: ignore[arg-type]


def _standard(arr: np.ndarray) -> bool:
    return arr.strides == np.empty_like(arr, order="C").strides and arr.flags.owndata


def _refused(tmp_path: Path, source: str, *said: str, **options: object) -> str:
    with pytest.raises(SpecError) as info:
        _load(tmp_path, source, **options)
    assert info.value.field == FIELD
    assert "\n" not in info.value.message
    for part in said:
        assert part in info.value.message, info.value.message
    return info.value.message


def _module(tmp_path: Path, body: str, name: str = "userdata.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def _images(root: Path, sizes: dict[str, list[tuple[int, int]]]) -> None:
    rng = np.random.default_rng(1)
    for label, shapes in sizes.items():
        (root / label).mkdir(parents=True)
        for i, (w, h) in enumerate(shapes):
            pixels = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / label / f"{i}.png")


# ---- function sources --------------------------------------------------------------------


def test_a_file_function_gives_inputs_and_targets_of_any_structure(tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", _X)
    _module(
        tmp_path,
        """
        from pathlib import Path
        import numpy as np
        import torch

        HERE = Path(__file__).parent

        def data():
            boxes = [{"boxes": np.zeros((i % 3, 4), np.float32), "labels": list(range(i % 3)), "id": f"img{i}"}
                     for i in range(20)]
            return torch.from_numpy(np.load(HERE / "x.npy")), boxes
        """,
    )
    loaded = _load(tmp_path, "userdata.py:data")
    np.testing.assert_array_equal(loaded.inputs, _X)
    assert loaded.inputs.dtype == np.float32 and _standard(loaded.inputs)
    assert len(loaded.targets) == 20
    for got, want in zip(loaded.targets, _BOXES, strict=True):
        assert got["id"] == want["id"] and got["labels"] == want["labels"]
        assert got["boxes"].shape == want["boxes"].shape


def test_targets_pass_through_untouched_without_a_subset(tmp_path: Path) -> None:
    _module(
        tmp_path,
        """
        import numpy as np
        TARGETS = ["a", "bb", "ccc"]
        def data():
            return np.ones((3, 2), np.float32), TARGETS
        """,
        "keep.py",
    )
    loaded = _load(tmp_path, "keep.py:data")
    import nnsweep_user_keep

    assert loaded.targets is nnsweep_user_keep.TARGETS


def test_a_module_function_and_inputs_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _module(
        tmp_path,
        "import numpy as np\ndef inputs():\n    return np.arange(12, dtype=np.int64).reshape(6, 2)\n",
        "mydata.py",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    loaded = _load(tmp_path / "elsewhere", "mydata:inputs")
    assert loaded.targets is None
    assert loaded.inputs.shape == (6, 2) and loaded.inputs.dtype == np.int64


def test_a_subset_is_seeded_sorted_and_subsets_targets_alike(tmp_path: Path) -> None:
    _module(
        tmp_path,
        """
        import numpy as np
        import torch
        def lists():
            return np.arange(100, dtype=np.float32)[:, None], [[i] * (i % 4) for i in range(100)]
        def tensors():
            return torch.arange(100.0)[:, None], torch.arange(100)
        def tuples():
            return np.arange(100, dtype=np.float32)[:, None], tuple(str(i) for i in range(100))
        """,
    )
    first = _load(tmp_path, "userdata.py:lists", max_samples=10, seed=3)
    again = _load(tmp_path, "userdata.py:lists", max_samples=10, seed=3)
    other = _load(tmp_path, "userdata.py:lists", max_samples=10, seed=4)
    kept = first.inputs[:, 0].astype(int)
    assert len(kept) == 10 and list(kept) == sorted(set(kept))
    np.testing.assert_array_equal(first.inputs, again.inputs)
    assert first.digest == again.digest != other.digest
    assert first.targets == [[i] * (i % 4) for i in kept]
    tensors = _load(tmp_path, "userdata.py:tensors", max_samples=10, seed=3)
    assert isinstance(tensors.targets, torch.Tensor) and tensors.targets.tolist() == list(kept)
    tuples = _load(tmp_path, "userdata.py:tuples", max_samples=10, seed=3)
    assert tuples.targets == tuple(str(i) for i in kept)
    whole = _load(tmp_path, "userdata.py:lists", max_samples=1000)
    assert len(whole.inputs) == 100


def test_the_digest_follows_the_data(tmp_path: Path) -> None:
    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    np.savez(tmp_path / "a.npz", inputs=x, targets=np.arange(6))
    base = _load(tmp_path, "a.npz").digest
    np.savez(tmp_path / "moved.npz", inputs=x, targets=np.arange(6))
    assert _load(tmp_path, "moved.npz").digest == base  # where the data lives is not what it is
    changed_input = x.copy()
    changed_input[2, 1] += 1
    np.savez(tmp_path / "b.npz", inputs=changed_input, targets=np.arange(6))
    np.savez(tmp_path / "c.npz", inputs=x, targets=np.arange(6)[::-1].copy())
    np.savez(tmp_path / "d.npz", inputs=x.astype(np.float64), targets=np.arange(6))
    np.savez(tmp_path / "e.npz", inputs=x)
    digests = {base} | {_load(tmp_path, f"{n}.npz").digest for n in "bcde"}
    assert len(digests) == 5
    assert _load(tmp_path, "a.npz", max_samples=5).digest not in digests


def test_nested_targets_digest_by_value(tmp_path: Path) -> None:
    _module(
        tmp_path,
        """
        import numpy as np
        def ordered():
            return np.zeros((2, 1), np.float32), [{"a": np.ones(2), "b": "x"}, {"a": np.zeros(0), "b": "y"}]
        def reordered():
            return np.zeros((2, 1), np.float32), [{"b": "x", "a": np.ones(2)}, {"b": "y", "a": np.zeros(0)}]
        def changed():
            return np.zeros((2, 1), np.float32), [{"a": np.ones(2), "b": "x"}, {"a": np.zeros(1), "b": "y"}]
        """,
    )
    digests = [_load(tmp_path, f"userdata.py:{n}").digest for n in ("ordered", "reordered", "changed")]
    assert digests[0] == digests[1] != digests[2]


def test_inputs_are_a_fresh_standard_strided_array(tmp_path: Path) -> None:
    _module(
        tmp_path,
        """
        import numpy as np
        import torch
        def strided():
            base = np.arange(2 * 1 * 5, dtype=np.float32).reshape(2, 1, 5)
            return np.lib.stride_tricks.as_strided(base, shape=(2, 1, 5), strides=(20, 0, 4))
        def transposed():
            return torch.arange(24.0).reshape(4, 6).t()
        """,
    )
    for name in ("strided", "transposed"):
        loaded = _load(tmp_path, f"userdata.py:{name}")
        assert _standard(loaded.inputs), (name, loaded.inputs.strides)
    np.testing.assert_array_equal(_load(tmp_path, "userdata.py:transposed").inputs, np.arange(24.0).reshape(4, 6).T)


# ---- files -------------------------------------------------------------------------------


def test_npz_by_default_keys_and_named_columns(tmp_path: Path) -> None:
    np.savez(tmp_path / "xy.npz", x=_X, y=np.arange(20))
    loaded = _load(tmp_path, "xy.npz")
    np.testing.assert_array_equal(loaded.inputs, _X)
    np.testing.assert_array_equal(loaded.targets, np.arange(20))
    np.savez(tmp_path / "named.npz", images=_X, classes=np.arange(20) % 3, inputs=np.zeros((20, 1)))
    named = _load(tmp_path, "named.npz", input_column="images", target_column="classes")
    np.testing.assert_array_equal(named.inputs, _X)
    np.testing.assert_array_equal(named.targets, np.arange(20) % 3)
    assert _load(tmp_path, "named.npz").targets is None


def test_npy_is_inputs_only_and_subsets(tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", _X)
    loaded = _load(tmp_path, "x.npy", max_samples=7, seed=1)
    assert loaded.targets is None and loaded.inputs.shape == (7, 3, 4, 4)
    assert type(loaded.inputs) is np.ndarray and _standard(loaded.inputs)
    rows = [int(np.flatnonzero((row == _X).all(axis=(1, 2, 3)))[0]) for row in loaded.inputs]
    assert rows == sorted(rows)


# ---- image folders -----------------------------------------------------------------------


def test_an_image_folder_gives_rgb_chw_and_sorted_class_ids(tmp_path: Path) -> None:
    _images(tmp_path / "imgs", {"dog": [(5, 4)] * 2, "cat": [(5, 4)] * 3})
    loaded = _load(tmp_path, "imgs")
    assert loaded.inputs.shape == (5, 3, 4, 5) and loaded.inputs.dtype == np.float32
    assert loaded.inputs.min() >= 0.0 and loaded.inputs.max() <= 1.0
    assert loaded.targets.dtype == np.int64 and loaded.targets.tolist() == [0, 0, 0, 1, 1]  # cat, then dog
    first = np.asarray(Image.open(tmp_path / "imgs" / "cat" / "0.png"), np.float32).transpose(2, 0, 1) / 255
    np.testing.assert_allclose(loaded.inputs[0], first)
    subset = _load(tmp_path, "imgs", max_samples=2, seed=5)
    assert subset.inputs.shape[0] == 2 and subset.digest == _load(tmp_path, "imgs", max_samples=2, seed=5).digest


def test_an_image_folder_with_a_transform_that_resizes(tmp_path: Path) -> None:
    _images(tmp_path / "imgs", {"a": [(5, 4), (8, 8)], "b": [(3, 3)]})
    _module(
        tmp_path,
        """
        import numpy as np
        def gray8(image):
            return np.asarray(image.convert("L").resize((8, 8)), dtype=np.uint8)[None]
        """,
        "tf.py",
    )
    loaded = _load(tmp_path, "imgs", transform="tf.py:gray8")
    assert loaded.inputs.shape == (3, 1, 8, 8) and loaded.inputs.dtype == np.uint8
    assert loaded.targets.tolist() == [0, 0, 1]


# ---- Hugging Face datasets folders -------------------------------------------------------


def test_a_datasets_folder_with_arrays_and_structured_targets(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    rows = {
        "inputs": [[float(i), 0.5] for i in range(6)],
        "targets": [{"boxes": [[float(i)] * 4] * (i % 3), "name": f"n{i}"} for i in range(6)],
    }
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "hf"))
    loaded = _load(tmp_path, "hf")
    np.testing.assert_array_equal(loaded.inputs, [[float(i), 0.5] for i in range(6)])
    assert _standard(loaded.inputs)
    assert [len(t["boxes"]) for t in loaded.targets] == [0, 1, 2, 0, 1, 2]
    assert loaded.targets[4] == {"boxes": [[4.0] * 4], "name": "n4"}
    subset = _load(tmp_path, "hf", max_samples=3, seed=2)
    kept = subset.inputs[:, 0].astype(int).tolist()
    assert len(kept) == 3 and kept == sorted(set(kept))
    assert [t["name"] for t in subset.targets] == [f"n{i}" for i in kept]
    assert subset.digest == _load(tmp_path, "hf", max_samples=3, seed=2).digest != loaded.digest


def test_a_datasets_folder_of_images_and_class_labels(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    rng = np.random.default_rng(2)
    images = [Image.fromarray(rng.integers(0, 256, (4, 6, 3), dtype=np.uint8)) for _ in range(5)]
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b"])})
    ds = datasets.Dataset.from_dict({"image": images, "label": [0, 1, 1, 0, 1]}, features=features)
    ds.save_to_disk(str(tmp_path / "hfimg"))
    loaded = _load(tmp_path, "hfimg")
    assert loaded.inputs.shape == (5, 3, 4, 6) and loaded.inputs.dtype == np.float32
    assert isinstance(loaded.targets, np.ndarray) and loaded.targets.tolist() == [0, 1, 1, 0, 1]
    np.testing.assert_allclose(loaded.inputs[2], np.asarray(images[2], np.float32).transpose(2, 0, 1) / 255)


def test_datasets_folder_mistakes(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    rows = {"features": [[1.0], [1.0, 2.0], [3.0]], "label": [0, 1, 0], "note": ["a", "b", "c"]}
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "ragged"))
    _refused(tmp_path, "ragged", "samples of different shapes", "sample 0 is (1,), sample 1 is (2,)", "pad them")
    _refused(
        tmp_path, "ragged", "target_column 'boxes' is not a column", "features, label, note", target_column="boxes"
    )
    _module(tmp_path, "def f(image):\n    return image\n", "tf.py")
    _refused(tmp_path, "ragged", "a transform applies to images", "'features'", transform="tf.py:f")
    _refused(tmp_path, "ragged", "inputs are <U1", input_column="note")
    datasets.Dataset.from_dict({"label": [0, 1]}).save_to_disk(str(tmp_path / "labels_only"))
    _refused(tmp_path, "labels_only", "only the target column 'label'", "input_column")
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "state.json").write_text("{}")
    _refused(tmp_path, "fake", "does not load as a datasets folder")


def test_a_datasets_dict_names_its_splits(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    split = datasets.Dataset.from_dict({"inputs": [[1.0], [2.0]]})
    datasets.DatasetDict({"train": split, "test": split}).save_to_disk(str(tmp_path / "dd"))
    _refused(tmp_path, "dd", "DatasetDict", "train", "test", "one split's folder")
    assert _load(tmp_path, "dd/test").inputs.tolist() == [[1.0], [2.0]]
    _refused(tmp_path, "dd/test", "input_column 'pixels' is not a column", "its columns: inputs", input_column="pixels")


# ---- mistakes ------------------------------------------------------------------------------


def test_missing_paths_and_unknown_formats(tmp_path: Path) -> None:
    _refused(tmp_path, "nowhere.npz", "'nowhere.npz' does not exist", ".npz or .npy", "image folder")
    (tmp_path / "data.csv").write_text("1,2\n")
    _refused(tmp_path, "data.csv", "unknown data format .csv", "module:function")
    _refused(tmp_path, "", "source is empty")
    _refused(tmp_path, "missing.py:data", "file 'missing.py' does not exist")


def test_functions_that_do_not_import_raise_or_return_the_wrong_thing(tmp_path: Path) -> None:
    _module(
        tmp_path,
        """
        import numpy as np
        import torch
        def raises():
            raise FileNotFoundError("no such file: /data/val\\nsecond line")
        def triple():
            return np.zeros((2, 1)), [0, 1], None
        def listed():
            return [[1.0], [2.0]]
        def strings():
            return np.array(["a", "b"])
        def scalar():
            return np.float32(3.0)
        def half():
            return torch.zeros(3, 2, dtype=torch.bfloat16)
        def empty():
            return np.zeros((0, 3), np.float32)
        def miscounted():
            return np.zeros((4, 2), np.float32), [1, 2, 3]
        def mapping():
            return np.zeros((2, 2), np.float32), {"boxes": [1, 2]}
        class Bag:
            def __len__(self):
                return 3
        def unindexable():
            return np.zeros((3, 2), np.float32), Bag()
        """,
    )
    _module(tmp_path, "import no_such_module_xyz\n", "broken.py")
    _refused(tmp_path, "broken.py:data", "broken.py does not import: ModuleNotFoundError")
    _refused(tmp_path, "userdata.py:nothing", "has no function 'nothing'")
    _refused(tmp_path, "no_such_pkg_xyz.sub:data", "no_such_pkg_xyz.sub does not import: ModuleNotFoundError")
    message = _refused(tmp_path, "userdata.py:raises", "userdata.py:raises() failed: FileNotFoundError: no such file")
    assert "second line" not in message
    _refused(tmp_path, "userdata.py:triple", "returned a tuple of 3", "(inputs, targets)")
    _refused(tmp_path, "userdata.py:listed", "gave inputs as list", "numpy array or torch tensor")
    _refused(tmp_path, "userdata.py:strings", "inputs are <U1", "give numbers")
    _refused(tmp_path, "userdata.py:scalar", "inputs are one number")
    _refused(tmp_path, "userdata.py:empty", "holds no samples")
    _refused(tmp_path, "userdata.py:half", "userdata.py:half(): inputs do not convert to numpy", "BFloat16")
    _refused(tmp_path, "userdata.py:miscounted", "userdata.py:miscounted() gave 3 targets for 4 inputs")
    _refused(tmp_path, "userdata.py:mapping", "gave targets as dict", "one target per sample")
    assert _load(tmp_path, "userdata.py:unindexable").targets is not None  # all kept: no indexing needed
    _refused(tmp_path, "userdata.py:unindexable", "max_samples needs targets that index", "Bag", max_samples=2)


def test_file_and_option_mistakes(tmp_path: Path) -> None:
    np.savez(tmp_path / "keys.npz", images=_X, classes=np.arange(20))
    _refused(tmp_path, "keys.npz", "has no array 'inputs' or 'x'", "images, classes", "input_column")
    _refused(tmp_path, "keys.npz", "target_column 'labels' is not an array", "images, classes",
             input_column="images", target_column="labels")  # fmt: skip
    np.savez(tmp_path / "objects.npz", inputs=_X[:2], targets=np.array([[1], [2, 3]], dtype=object))
    _refused(tmp_path, "objects.npz", "holds Python objects", "module:function")
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    _refused(tmp_path, "bad.npz", "bad.npz does not read")
    np.save(tmp_path / "x.npy", _X)
    _refused(tmp_path, "x.npy", "holds inputs only", target_column="y")
    _refused(tmp_path, "x.npy", "max_samples 0", max_samples=0)
    _refused(tmp_path, "x.npy", "seed -1", seed=-1)
    _refused(tmp_path, "x.npy", "transform applies to images", transform="tf.py:f")


def test_image_folder_mistakes(tmp_path: Path) -> None:
    _images(tmp_path / "mixed", {"a": [(4, 4)], "b": [(6, 4)]})
    _refused(
        tmp_path, "mixed", "images of different shapes", "a/0.png is (3, 4, 4)", "b/0.png is (3, 4, 6)", "transform"
    )
    _images(tmp_path / "hollow", {"a": [(4, 4)]})
    (tmp_path / "hollow" / "notes").mkdir()
    _refused(tmp_path, "hollow", "class folder(s) notes hold no image")
    (tmp_path / "flat").mkdir()
    Image.new("RGB", (2, 2)).save(tmp_path / "flat" / "0.png")
    _refused(tmp_path, "flat", "has no sub-folders", "one sub-folder of images per class")
    _images(tmp_path / "damaged", {"a": [(4, 4)]})
    (tmp_path / "damaged" / "a" / "1.png").write_bytes(b"not a png")
    _refused(tmp_path, "damaged", "a/1.png does not read as an image")
    _refused(tmp_path, "mixed/a/0.png", "unknown data format .png", "give the folder of images")
    _module(tmp_path, "def bad(image):\n    raise ValueError('too small')\n", "tf.py")
    _refused(tmp_path, "damaged", "the transform failed on a/0.png: ValueError: too small", transform="tf.py:bad")
    _refused(tmp_path, "mixed", "transform: tf.py has no function 'nope'", transform="tf.py:nope")
    _refused(tmp_path, "mixed", "transform: file 'none.py' does not exist", transform="none.py:f")


def test_check_fits_names_both_shapes_and_dtypes() -> None:
    data = LoadedData(np.zeros((32, 3, 64, 64), np.float32), None, "d")
    check_fits(data, np.zeros((1, 3, 64, 64), np.float32), field=FIELD)
    check_fits(data, torch.zeros(1, 3, 64, 64), field=FIELD)
    with pytest.raises(SpecError) as info:
        check_fits(data, np.zeros((1, 3, 32, 32), np.float32), field="data.calibration")
    assert info.value.field == "data.calibration"
    assert "inputs are (3, 64, 64) per sample (32 samples), the model's example input (1, 3, 32, 32)" in str(info.value)
    with pytest.raises(SpecError, match="inputs are float32, the model's example input uint8"):
        check_fits(data, torch.zeros(1, 3, 64, 64, dtype=torch.uint8), field=FIELD)
    ids = LoadedData(np.zeros((4, 7), np.int32), None, "d")
    check_fits(ids, torch.zeros(1, 7, dtype=torch.int64), field=FIELD)  # token ids of either width


# ---- property --------------------------------------------------------------------------------

_ARRAYS = hnp.arrays(
    dtype=st.sampled_from([np.float32, np.float64, np.int64, np.uint8, np.bool_]),
    shape=hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=4),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(inputs=_ARRAYS, max_samples=st.one_of(st.none(), st.integers(1, 6)), seed=st.integers(0, 2**32))
def test_arrays_round_trip_through_npz_and_functions(
    tmp_path: Path, inputs: np.ndarray, max_samples: int | None, seed: int
) -> None:
    n = len(inputs)
    targets = np.arange(n) * 3
    np.savez(tmp_path / "p.npz", inputs=inputs, targets=targets)
    _module(  # the same text every example: a rewritten file's stale bytecode cannot mislead
        tmp_path,
        f"""
        import numpy as np
        def data():
            with np.load({str(tmp_path / "p.npz")!r}) as f:
                x = f["inputs"]
            return np.asfortranarray(x), [[i] * (i % 3) for i in range(len(x))]
        """,
        "prop.py",
    )
    from_npz = _load(tmp_path, "p.npz", max_samples=max_samples, seed=seed)
    from_func = _load(tmp_path, "prop.py:data", max_samples=max_samples, seed=seed)
    kept = from_npz.targets // 3
    assert len(kept) == (n if max_samples is None else min(n, max_samples))
    assert list(kept) == sorted(set(kept.tolist()))
    for loaded in (from_npz, from_func):
        assert _standard(loaded.inputs), (loaded.inputs.shape, loaded.inputs.strides)
        assert loaded.inputs.dtype == inputs.dtype
        np.testing.assert_array_equal(loaded.inputs, inputs[kept])
    assert from_func.targets == [[int(i)] * (int(i) % 3) for i in kept]
    assert from_npz.digest == _load(tmp_path, "p.npz", max_samples=max_samples, seed=seed).digest
