"""Data sources that are folders: images with one sub-folder per class, and a Hugging Face
``datasets`` folder saved with ``save_to_disk``.

Both pick their samples before decoding any (``pick(count)`` gives the sorted indices), so
``max_samples`` of a large folder reads only the images it keeps.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nnsweep.core.errors import SpecError, clip, first_line
from nnsweep.models._bundle import is_tensor

__all__ = ["IMAGE_SUFFIXES", "dataset_splits", "hf_dataset", "image_folder", "stack_samples", "to_array"]

# torchvision's ImageFolder reads these (IMG_EXTENSIONS), compared lower-case
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")

Pick = Callable[[int], np.ndarray]
Transform = Callable[[Any], Any]
_INPUT_COLUMNS = ("inputs", "image")
_TARGET_COLUMNS = ("targets", "label", "labels")


def to_array(value: Any) -> Any:
    """A torch tensor's values as numpy (on the CPU, without its graph); anything else as it is."""
    if is_tensor(value):
        return value.detach().cpu().resolve_conj().resolve_neg().numpy()
    return value


def default_image(image: Any) -> np.ndarray:
    """An image as RGB float32 in [0, 1], channels first (C, H, W): what torchvision's
    ``ToTensor`` gives."""
    return (np.asarray(image.convert("RGB"), dtype=np.float32) / np.float32(255.0)).transpose(2, 0, 1)


def stack_samples(samples: Sequence[Any], names: Sequence[str], *, field: str, kind: str = "images") -> np.ndarray:
    """The samples stacked on a new first axis, each one shape.

    Raises:
        SpecError: a sample that is not an array, or two samples of different shapes
            (naming both).
    """
    arrays = []
    for sample, name in zip(samples, names, strict=True):
        try:
            arrays.append(np.asarray(to_array(sample)))
        except Exception as exc:  # a transform's result: a user mistake whatever it is
            raise SpecError(
                field, f"{name}: the transform gave {type(sample).__name__}, not an array ({exc})"
            ) from None
        if arrays[-1].shape != arrays[0].shape:
            raise SpecError(
                field,
                f"{kind} of different shapes: {names[0]} is {arrays[0].shape}, {name} is {arrays[-1].shape}; "
                + (
                    "give a transform that makes every image one shape (resize or crop)"
                    if kind == "images"
                    else "every sample must have one shape (pad them, or give a function source that does)"
                ),
            )
    return np.stack(arrays)


def image_folder(root: Path, *, field: str, transform: Transform | None, pick: Pick) -> tuple[Any, Any, Any]:
    """``(inputs, class ids, indices)`` of an image folder, read as torchvision's ``ImageFolder``
    reads it: classes are the sub-folders in sorted order, images are found in each (and its
    sub-folders) in sorted order.

    Raises:
        SpecError: no sub-folders, a class with no image, or an image that does not read.
    """
    classes = sorted(entry.name for entry in os.scandir(root) if entry.is_dir())
    if not classes:
        raise SpecError(field, f"{root} has no sub-folders; an image folder holds one sub-folder of images per class")
    files: list[Path] = []
    labels: list[int] = []
    empty = []
    for class_id, name in enumerate(classes):
        found = [
            Path(folder, f)
            for folder, _, names in sorted(os.walk(root / name, followlinks=True))
            for f in sorted(names)
            if Path(f).suffix.lower() in IMAGE_SUFFIXES
        ]
        empty += [] if found else [name]
        files += found
        labels += [class_id] * len(found)
    if empty:
        raise SpecError(
            field,
            f"{root}: class folder(s) {clip(', '.join(empty))} hold no image ({', '.join(IMAGE_SUFFIXES)}); "
            "every sub-folder is a class",
        )
    indices = pick(len(files))
    chosen = [files[i] for i in indices]
    names = [str(f.relative_to(root)) for f in chosen]
    samples = [
        _transformed(_read_image(f, name, field), transform, name, field) for f, name in zip(chosen, names, strict=True)
    ]
    return stack_samples(samples, names, field=field), np.asarray(labels, dtype=np.int64)[indices], indices


def _read_image(path: Path, name: str, field: str) -> Any:
    from PIL import Image

    try:
        with Image.open(path) as image:
            image.load()
            return image
    except Exception as exc:  # a damaged or foreign file among the images
        raise SpecError(field, f"{name} does not read as an image: {first_line(exc)}") from None


def _transformed(image: Any, transform: Transform | None, name: str, field: str) -> Any:
    if transform is None:
        return default_image(image)
    try:
        return transform(image)
    except Exception as exc:  # the user's transform
        raise SpecError(field, f"the transform failed on {name}: {first_line(exc)}") from None


def dataset_splits(folder: Path) -> list[str] | None:
    """The split names of a ``DatasetDict`` saved with ``save_to_disk``, None for another folder."""
    index = folder / "dataset_dict.json"
    if not index.is_file():
        return None
    try:
        return [str(s) for s in json.loads(index.read_text()).get("splits", [])]
    except (OSError, ValueError, AttributeError):
        return []


def hf_dataset(
    folder: Path,
    *,
    field: str,
    input_column: str | None,
    target_column: str | None,
    transform: Transform | None,
    pick: Pick,
) -> tuple[Any, Any, Any]:
    """``(inputs, targets, indices)`` of a ``datasets`` folder: inputs from an image column
    (each image through ``transform``) or an array column, targets as the column holds them
    (a numpy array for a number or class label per sample, else a list).

    Raises:
        SpecError: ``datasets`` is not installed, the folder does not load, or a column
            named does not exist (naming the columns).
    """
    try:
        import datasets
    except ImportError:
        raise SpecError(field, f"{folder} is a Hugging Face datasets folder: pip install datasets") from None
    try:
        ds = datasets.load_from_disk(str(folder))
    except Exception as exc:  # a damaged or foreign folder
        raise SpecError(field, f"{folder} does not load as a datasets folder: {first_line(exc)}") from None
    if not isinstance(ds, datasets.Dataset):
        raise SpecError(field, f"{folder} holds splits {', '.join(ds)}; give one split's folder")
    columns = list(ds.column_names)
    targets = _column(target_column, _TARGET_COLUMNS, columns, "target_column", folder, field)
    others = [c for c in columns if c != targets]
    inputs = _column(input_column, _INPUT_COLUMNS, columns, "input_column", folder, field) or next(iter(others), None)
    if inputs is None:
        raise SpecError(field, f"{folder} has only the target column {targets!r}; name the inputs with input_column")
    if not len(ds):
        raise SpecError(field, f"{folder} holds no samples")
    indices = pick(len(ds))
    chosen = ds.select(indices) if len(indices) < len(ds) else ds
    names = [f"sample {i}" for i in indices]
    if isinstance(ds.features[inputs], datasets.Image):
        samples = [
            _transformed(image, transform, name, field) for image, name in zip(chosen[inputs], names, strict=True)
        ]
        values = stack_samples(samples, names, field=field)
    elif transform is not None:
        raise SpecError(field, f"a transform applies to images; column {inputs!r} of {folder} holds arrays")
    else:
        values = _numpy_column(chosen, inputs)
        if values.dtype.hasobject:  # rows of different lengths: name two of them
            values = stack_samples(list(values), names, field=field, kind="samples")
    if targets is None:
        return values, None, indices
    feature = ds.features[targets]
    if isinstance(feature, datasets.ClassLabel | datasets.Value) and feature.dtype not in ("string", "large_string"):
        return values, _numpy_column(chosen, targets), indices
    return values, list(chosen[targets]), indices


def _numpy_column(ds: Any, column: str) -> np.ndarray:
    """One column as one numpy array, read in one batch (an object array when rows differ in shape)."""
    return np.asarray(ds.with_format("numpy", columns=[column])[:][column])


def _column(
    given: str | None, defaults: tuple[str, ...], columns: list[str], option: str, folder: Path, field: str
) -> str | None:
    if given is not None:
        if given not in columns:
            raise SpecError(
                field, f"{option} {given!r} is not a column of {folder}; its columns: {clip(', '.join(columns))}"
            )
        return given
    return next((c for c in defaults if c in columns), None)
