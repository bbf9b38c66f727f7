"""Evaluation and calibration data from where users keep it.

``data.evaluation`` and ``data.calibration`` each name a source: ``package.module:function``
or ``path/to/file.py:function`` (no arguments, returning ``inputs`` or ``(inputs, targets)``),
``data.npz`` (``inputs``/``x`` and optional ``targets``/``y``), ``data.npy`` (inputs only),
an image folder (one sub-folder per class, as ``ImageFolder``) or a Hugging Face dataset
saved with ``save_to_disk``.

Inputs become one dense numpy array; targets pass through as given, for the user's metric.
``max_samples`` keeps a seeded subset; the digest covers what was loaded, so changed data
changes a sweep's fingerprint while a moved file does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nnsweep.core.errors import SpecError, clip, excerpt, first_line
from nnsweep.core.task_data import DataSource
from nnsweep.models._bundle import is_tensor
from nnsweep.models._data_digest import data_digest
from nnsweep.models._data_folders import IMAGE_SUFFIXES, dataset_splits, hf_dataset, image_folder, to_array
from nnsweep.models._user_code import import_function, is_function_reference

__all__ = ["DataSource", "LoadedData", "check_fits", "load_data"]

ACCEPTED = (
    "module:function, file.py:function, a .npz or .npy file, an image folder (a sub-folder per class) "
    "or a Hugging Face datasets folder (save_to_disk)"
)
_NUMERIC_KINDS = "biuf"
_NPZ_INPUTS = ("inputs", "x")
_NPZ_TARGETS = ("targets", "y")


@dataclass(frozen=True, eq=False)
class LoadedData:
    """A split's samples.

    Args:
        inputs: ``(N, *sample_shape)``, a dense array of standard strides.
        targets: as the data gave them, the same samples; None when the source has none.
        digest: sha256 of the inputs, the targets and which samples were kept.
    """

    inputs: np.ndarray
    targets: Any | None
    digest: str


def load_data(spec: DataSource, *, field: str, base_dir: Path) -> LoadedData:
    """Load the samples ``spec`` names (files relative to ``base_dir``, the sweep file's folder).

    Raises:
        SpecError: on ``field``, naming what was wrong and what is accepted.
    """
    _check_options(spec, field)
    form, path = _form(spec.source, field, base_dir)
    what = f"{spec.source}()" if form == "function" else excerpt(spec.source)  # how messages name the source
    if form in ("images", "datasets"):
        inputs, targets, indices = _from_folder(form, path, spec, field, base_dir)
        inputs = _numeric(inputs, what, field)
    else:
        if spec.transform is not None:
            raise SpecError(field, f"transform applies to images; {excerpt(spec.source)} gives arrays")
        if form == "function":
            raw, targets = _call(spec, field, base_dir)
        else:
            assert path is not None
            raw, targets = _read_arrays(path, spec, field)
        inputs = _numeric(raw, what, field)
        targets = _check_targets(targets, len(inputs), what, field)
        indices = subset_indices(len(inputs), spec.max_samples, spec.seed)
        inputs = np.take(inputs, indices, axis=0)  # reads only the kept rows of a memory-mapped .npy
        targets = _subset(targets, indices, len(inputs) < len(raw), what, field)
    dense = np.empty(inputs.shape, inputs.dtype)  # a fresh array: standard strides on every axis
    dense[...] = inputs
    return LoadedData(dense, targets, data_digest(dense, targets, indices, field=field))


def check_fits(data: LoadedData, example_input: Any, *, field: str) -> None:
    """Check the samples fit the model's example input (batch 1): the same per-sample shape
    and the same kind of dtype (float, signed or unsigned integer, bool).

    Raises:
        SpecError: on ``field``, giving both shapes or both dtypes.
    """
    shape = tuple(int(d) for d in example_input.shape)
    inputs = data.inputs
    if tuple(inputs.shape[1:]) != shape[1:]:
        raise SpecError(
            field,
            f"inputs are {tuple(inputs.shape[1:])} per sample ({len(inputs)} samples), the model's example input "
            f"{shape}: give samples of its shape after the batch axis",
        )
    try:
        expected = np.dtype(str(example_input.dtype).removeprefix("torch."))
    except TypeError:  # a dtype numpy has no name for (bfloat16): the model's own check says so
        return
    if inputs.dtype.kind != expected.kind:
        raise SpecError(
            field,
            f"inputs are {inputs.dtype}, the model's example input {expected}: give {expected} inputs "
            "(or a transform that makes them)",
        )


def subset_indices(count: int, max_samples: int | None, seed: int) -> np.ndarray:
    """The sorted indices of the samples kept: a seeded choice without replacement when
    ``max_samples`` is below ``count``, all of them otherwise."""
    if max_samples is None or max_samples >= count:
        return np.arange(count)
    return np.sort(np.random.default_rng(seed).choice(count, size=max_samples, replace=False))


def _check_options(spec: DataSource, field: str) -> None:
    m = spec.max_samples
    if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
        raise SpecError(field, f"max_samples {m!r} is not a whole number of at least 1 (omit it to keep every sample)")
    if isinstance(spec.seed, bool) or not isinstance(spec.seed, int) or spec.seed < 0:
        raise SpecError(field, f"seed {spec.seed!r} is not a whole number of at least 0")
    for name in ("transform", "input_column", "target_column"):
        value = getattr(spec, name)
        if value is not None and (not isinstance(value, str) or not value):
            raise SpecError(field, f"{name} {clip(repr(value))} is not a name")


def _form(source: str, field: str, base_dir: Path) -> tuple[str, Path | None]:
    """Which form ``source`` has (``function``, ``npz``, ``npy``, ``images``, ``datasets``),
    and its path."""
    if not isinstance(source, str) or not source.strip():
        raise SpecError(field, f"source is empty; give {ACCEPTED}")
    path = Path(source).expanduser()
    path = path if path.is_absolute() else base_dir / path
    if not path.exists():
        if is_function_reference(source):
            return "function", None
        raise SpecError(field, f"{excerpt(source)} does not exist (looked for {path}); give {ACCEPTED}")
    if path.is_file():
        suffix = path.suffix.lower()
        if suffix in (".npz", ".npy"):
            return suffix[1:], path
        hint = " (give the folder of images)" if suffix in IMAGE_SUFFIXES else ""
        raise SpecError(
            field, f"{excerpt(source)}: unknown data format {suffix or 'without suffix'}{hint}; give {ACCEPTED}"
        )
    splits = dataset_splits(path)
    if splits is not None:
        raise SpecError(
            field,
            f"{excerpt(source)} holds a Hugging Face DatasetDict (splits: {clip(', '.join(splits) or 'none')}); "
            "give one split's folder, e.g. " + str(Path(source) / (splits[0] if splits else "test")),
        )
    if (path / "dataset_info.json").is_file() or (path / "state.json").is_file():
        return "datasets", path
    return "images", path


def _from_folder(form: str, path: Path | None, spec: DataSource, field: str, base_dir: Path) -> tuple[Any, Any, Any]:
    assert path is not None
    transform = None
    if spec.transform:
        try:
            transform = import_function(spec.transform, field=field, base_dir=base_dir)
        except SpecError as exc:
            raise SpecError(field, f"transform: {exc.message}") from None

    def pick(count: int) -> np.ndarray:
        return subset_indices(count, spec.max_samples, spec.seed)

    if form == "datasets":
        return hf_dataset(
            path,
            field=field,
            input_column=spec.input_column,
            target_column=spec.target_column,
            transform=transform,
            pick=pick,
        )
    if spec.input_column is not None or spec.target_column is not None:
        raise SpecError(field, f"{excerpt(spec.source)} is an image folder: its inputs and targets have no columns")
    return image_folder(path, field=field, transform=transform, pick=pick)


def _call(spec: DataSource, field: str, base_dir: Path) -> tuple[Any, Any]:
    if spec.input_column is not None or spec.target_column is not None:
        raise SpecError(field, "input_column and target_column apply to .npz files and datasets folders")
    func = import_function(spec.source, field=field, base_dir=base_dir)
    try:
        result = func()
    except Exception as exc:  # the user's function: any failure is their input error
        raise SpecError(field, f"{spec.source}() failed: {first_line(exc)}") from exc
    if isinstance(result, tuple):
        if len(result) != 2:
            raise SpecError(
                field, f"{spec.source}() returned a tuple of {len(result)}; return inputs or (inputs, targets)"
            )
        return result
    return result, None


def _read_arrays(path: Path, spec: DataSource, field: str) -> tuple[Any, Any]:
    """The inputs and targets of a ``.npz`` (by key) or ``.npy`` (inputs, memory-mapped)."""
    try:
        if path.suffix.lower() == ".npy":
            if spec.input_column is not None or spec.target_column is not None:
                raise SpecError(field, f"{path.name} holds inputs only; use a .npz to give targets or name arrays")
            return np.load(path, mmap_mode="r", allow_pickle=False), None
        with np.load(path, allow_pickle=False) as npz:
            keys = list(npz.files)

            def key(given: str | None, defaults: tuple[str, ...], option: str) -> str | None:
                if given is not None and given not in keys:
                    raise SpecError(
                        field, f"{option} {given!r} is not an array of {path.name}; it holds {_names(keys)}"
                    )
                return given or next((k for k in defaults if k in keys), None)

            inputs = key(spec.input_column, _NPZ_INPUTS, "input_column")
            targets = key(spec.target_column, _NPZ_TARGETS, "target_column")
            if inputs is None:
                raise SpecError(
                    field,
                    f"{path.name} has no array 'inputs' or 'x' (it holds {_names(keys)}); name it with input_column",
                )
            return npz[inputs], None if targets is None else npz[targets]
    except SpecError:
        raise
    except ValueError as exc:
        if "Object arrays" in str(exc):
            raise SpecError(
                field,
                f"{path.name} holds Python objects, which nnsweep does not unpickle; give targets of varying "
                "structure (box lists, strings) from a module:function source",
            ) from None
        raise SpecError(field, f"{path.name} does not read: {first_line(exc)}") from None
    except Exception as exc:  # a damaged or foreign file
        raise SpecError(field, f"{path.name} does not read: {first_line(exc)}") from None


def _names(keys: list[str]) -> str:
    return clip(", ".join(keys) or "nothing")


def _numeric(value: Any, what: str, field: str) -> np.ndarray:
    """``value`` as a numpy array of numbers with a sample axis and at least one sample."""
    try:
        array = to_array(value)
    except (TypeError, RuntimeError) as exc:  # a tensor numpy cannot hold (bfloat16)
        raise SpecError(field, f"{what}: inputs do not convert to numpy: {first_line(exc)}") from None
    if isinstance(array, np.generic):
        array = np.asarray(array)
    if not isinstance(array, np.ndarray):
        raise SpecError(field, f"{what} gave inputs as {type(value).__name__}; give a numpy array or torch tensor")
    if array.dtype.kind not in _NUMERIC_KINDS:
        raise SpecError(field, f"{what}: inputs are {array.dtype}; give numbers (float, integer or bool)")
    if array.ndim == 0:
        raise SpecError(field, f"{what}: inputs are one number; give an array with the samples first")
    if not len(array):
        raise SpecError(field, f"{what} holds no samples")
    return array


def _check_targets(targets: Any, count: int, what: str, field: str) -> Any:
    if targets is None:
        return None
    if isinstance(targets, str | bytes | dict) or not hasattr(targets, "__len__"):
        raise SpecError(
            field,
            f"{what} gave targets as {type(targets).__name__}; give one target per sample "
            "(a list, tuple, numpy array or tensor)",
        )
    if len(targets) != count:
        raise SpecError(field, f"{what} gave {len(targets)} targets for {count} inputs; give one per sample")
    return targets


def _subset(targets: Any, indices: np.ndarray, subset: bool, what: str, field: str) -> Any:
    """The targets of the kept samples: all of them, untouched, unless a subset was taken."""
    if targets is None or not subset:
        return targets
    if isinstance(targets, np.ndarray):
        return targets[indices]
    if is_tensor(targets):
        return targets[indices.tolist()]
    try:
        kept = [targets[int(i)] for i in indices]
    except Exception as exc:  # a sized object that does not index
        raise SpecError(
            field,
            f"{what}: max_samples needs targets that index ({type(targets).__name__}: {first_line(exc)}); "
            "give a list, tuple, numpy array or tensor",
        ) from None
    return tuple(kept) if isinstance(targets, tuple) else kept
