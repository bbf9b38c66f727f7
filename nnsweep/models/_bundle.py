"""What a model source produces: the module, an example input, and its data."""

from __future__ import annotations

import hashlib
import inspect
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from nnsweep.models._strides import standard_array

if TYPE_CHECKING:
    import torch

__all__ = [
    "Dataset",
    "ModelBundle",
    "Split",
    "class_positions",
    "flatten_outputs",
    "is_tensor",
    "labelled_layout",
    "module_digest",
    "output_columns",
    "output_shapes",
    "output_sizes",
    "per_sample_shapes",
    "shape_positions",
    "unlabelled_layout",
]


@dataclass(frozen=True)
class Split:
    """Inputs (N, ...) float32 (uint8 pixels, or int32 or int64 token ids, for a model that takes them), and
    labels (N,) int64 where the data is labelled ((N, H, W) for a dense output's classes,
    one per position: :func:`class_positions`; (N, T) for a sequence tagger's
    ``(T, classes)``: :func:`labelled_layout`). ``targets``: what the user's data gave for
    each sample, of any structure, for the user's metrics (:mod:`nnsweep.bench.task`)."""

    inputs: np.ndarray
    labels: np.ndarray | None = None
    targets: Any = None

    def __post_init__(self) -> None:
        # torch tensors and nested lists are taken as the arrays they hold (a Split of tensors
        # was refused with "inputs are torch.float32 but the example input is float32"), each
        # with standard strides: numpy's x[:, None] has a stride of 0 that exporters refuse
        object.__setattr__(self, "inputs", _as_array(self.inputs))
        if self.labels is not None:
            object.__setattr__(self, "labels", _as_array(self.labels))
        if self.labels is not None and len(self.labels) != len(self.inputs):
            raise ValueError(f"{len(self.inputs)} inputs but {len(self.labels)} labels")

    def __len__(self) -> int:
        return len(self.inputs)

    def digest(self) -> str:
        h = hashlib.sha256()
        for array in (self.inputs, self.labels):
            if array is not None:
                h.update(str((array.dtype, array.shape)).encode())
                h.update(np.ascontiguousarray(array).tobytes())
        return h.hexdigest()


def is_tensor(value: Any) -> bool:
    """Whether ``value`` is a torch tensor, told without importing torch."""
    return type(value).__module__.split(".")[0] == "torch" and hasattr(value, "detach")


def _as_array(value: Any) -> np.ndarray:
    """``value`` as a numpy array with standard strides (:mod:`nnsweep.models._strides`): a
    torch tensor's values (on the CPU, without its graph), or ``np.asarray`` of anything else
    (a list)."""
    if is_tensor(value):
        value = value.detach().cpu().numpy()
    return standard_array(np.asarray(value))


@dataclass(frozen=True)
class Dataset:
    """The splits a deployment needs.

    Args:
        calibration: inputs for static quantization ranges (labels unused).
        evaluation: inputs for accuracy and fidelity; accuracy needs labels.
        train: labelled data for quantization-aware fine-tuning; without it QAT
            distills from the fp32 model's outputs on the calibration inputs.
        accuracy_output: for a model with several outputs (a tuple or dict), the one
            whose argmax is compared with the labels (in the order of
            :func:`flatten_outputs`; default the first).
    """

    calibration: Split
    evaluation: Split
    train: Split | None = None
    accuracy_output: int = 0

    @property
    def labelled(self) -> bool:
        return self.evaluation.labels is not None

    def named_splits(self) -> dict[str, Split]:
        """The splits it has, by name (``train`` only when given)."""
        named = {"calibration": self.calibration, "evaluation": self.evaluation}
        return named if self.train is None else {**named, "train": self.train}


@dataclass(frozen=True, eq=False)
class ModelBundle:
    """A float model ready to deploy.

    ``name`` is the user's reference, ``module`` the fp32 module in eval mode,
    ``example_input`` one input of batch size 1, ``dataset`` the calibration and evaluation
    data, ``digest`` the sha256 of architecture, weights and data (part of every cache key).
    Per output, in :func:`flatten_outputs` order (deployed outputs arrive concatenated so):
    ``outputs`` its size per sample, ``positions`` how many positions have a class of their
    own (1 for ``(classes,)``, ``H * W`` for ``(classes, H, W)``, ``T`` for ``(T, classes)``;
    :func:`class_positions`), ``class_axes`` the axis holding the classes (0, or 1 for a
    ``(T, classes)`` output whose labels or input say so; :func:`labelled_layout`). Empty
    tuples mean one output, one position, axis 0.
    """

    name: str
    module: torch.nn.Module
    example_input: torch.Tensor
    dataset: Dataset
    digest: str
    outputs: tuple[int, ...] = ()
    positions: tuple[int, ...] = ()
    class_axes: tuple[int, ...] = ()


def module_digest(name: str, module: torch.nn.Module, example_input: torch.Tensor, *extra: Any) -> str:
    """sha256 over a module's code and structure, parameters and buffers, the input shape and ``extra``.

    The code is the source of each class in the module tree that is not PyTorch's own
    (PyTorch's are keyed by its version in the toolchain), and the structure the tree's
    ``repr`` (a layer's stride or padding, which no weight shows): a user who edits
    ``forward`` or a layer's arguments and keeps the weights gets new artifacts, not the
    old model's from the cache.
    """
    import torch

    h = hashlib.sha256()
    h.update(name.encode())
    for cls in sorted({type(m) for m in module.modules()}, key=lambda c: f"{c.__module__}.{c.__qualname__}"):
        h.update(_class_code(cls).encode())
    h.update(repr(module).encode())
    h.update(str(tuple(example_input.shape)).encode())
    for key, tensor in sorted(module.state_dict().items()):
        h.update(key.encode())
        h.update(str(tensor.dtype).encode())
        h.update(str(tuple(tensor.shape)).encode())
        h.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    for item in extra:
        h.update(repr(item).encode())
    return h.hexdigest()


def _class_code(cls: type) -> str:
    """A class's qualified name, and its source unless it is PyTorch's own (or has none to read)."""
    name = f"{cls.__module__}.{cls.__qualname__}"
    if cls.__module__.split(".")[0] == "torch":
        return name
    try:
        return name + "\n" + inspect.getsource(cls)
    except (OSError, TypeError):  # defined in a REPL or a C extension: the name is all there is
        return name


def flatten_outputs(result: Any) -> list[torch.Tensor]:
    """A model's outputs as a flat list of tensors: a tensor, or the leaves of a tuple/list/dict
    in the order ``torch.export`` and ``torch.onnx.export`` give them (pytree order).

    Raises:
        TypeError: a leaf is not a tensor.
    """
    import torch
    from torch.utils import _pytree

    leaves = _pytree.tree_leaves(result)
    bad = [type(leaf).__name__ for leaf in leaves if not isinstance(leaf, torch.Tensor)]
    if bad or not leaves:
        raise TypeError(f"outputs must be tensors (or a tuple/list/dict of tensors); got {bad[0] if bad else 'none'}")
    return list(leaves)


def takes_batches(bundle: ModelBundle) -> bool:
    """Whether ``bundle``'s model, given several samples at once, gives each sample the
    output it gives that sample alone (checked on the first :data:`BATCH_PROBE` calibration
    inputs, once per bundle). Deployed, a model sees one sample a call; nnsweep calls the
    fp32 model, the calibration and the ranking on batches only when this holds. It does
    not for a model whose shapes specialise on batch 1 (``torch.flatten(x)``,
    ``x.view(1, -1)``: a batch fails or gives the wrong number of rows) or whose forward
    mixes the samples (a branch on ``x.sum()``, statistics over the batch).
    """
    if bundle not in _TAKES_BATCHES:
        _TAKES_BATCHES[bundle] = _probe_batches(bundle)
    return _TAKES_BATCHES[bundle]


def output_columns(sizes: tuple[int, ...]) -> list[slice]:
    """Each output's columns in a row of outputs side by side (:func:`outputs_side_by_side`),
    given each output's per-sample size."""
    bounds = np.cumsum((0, *sizes))
    return [slice(int(bounds[i]), int(bounds[i + 1])) for i in range(len(sizes))]


def outputs_side_by_side(result: Any, samples: int) -> np.ndarray | None:
    """Every output of one call on ``samples`` samples, one row per sample, side by side (the
    layout a runner's ``to_float`` gives); ``None`` when an output has no leading dimension
    of ``samples``."""
    leaves = flatten_outputs(result)
    if any(leaf.dim() == 0 or leaf.shape[0] != samples for leaf in leaves):
        return None
    return np.concatenate([leaf.reshape(samples, -1).float().numpy() for leaf in leaves], axis=1)


BATCH_PROBE = 8
# Batched and single calls differ by float rounding (another kernel order); a branch taken
# for the batch instead of the sample differs by the outputs' scale.
_BATCH_TOLERANCE = 1e-3
_TAKES_BATCHES: weakref.WeakKeyDictionary[ModelBundle, bool] = weakref.WeakKeyDictionary()


def _probe_batches(bundle: ModelBundle) -> bool:
    import torch

    probe = torch.from_numpy(bundle.dataset.calibration.inputs[:BATCH_PROBE])
    if len(probe) < 2:
        return True
    with torch.no_grad():
        try:
            together = outputs_side_by_side(bundle.module(probe), len(probe))
        except Exception:  # the user's model: any failure of a batch means "one sample a call"
            return False
        if together is None:
            return False
        alone = [outputs_side_by_side(bundle.module(probe[i : i + 1]), 1) for i in range(len(probe))]
    rows = np.concatenate([row for row in alone if row is not None])
    scale = float(np.abs(rows).max()) or 1.0
    return bool(np.abs(together - rows).max() <= _BATCH_TOLERANCE * scale)


def output_sizes(result: Any, batch: int = 1) -> tuple[int, ...]:
    """Per-sample sizes of each output in ``result`` (from a forward pass on ``batch`` samples)."""
    sizes = []
    for tensor in flatten_outputs(result):
        if tensor.dim() == 0 or tensor.shape[0] != batch:
            raise TypeError(f"an output of shape {tuple(tensor.shape)} has no batch dimension of {batch}")
        sizes.append(int(tensor[0].numel()))
    return tuple(sizes)


def class_positions(result: Any, batch: int = 1) -> tuple[int, ...]:
    """For each output in ``result``, how many positions each have a class of their own.

    An output of three or more dimensions per sample is read as PyTorch lays out images:
    ``(classes, H, W)`` (or ``(classes, D, H, W)``), a class per pixel, as a segmentation
    model gives: ``H * W`` positions, whose top-1 is the argmax over the first dimension at
    each. Any other output is one position (``(classes,)``). A ``(T, C)`` or ``(C, L)``
    output is one position too (flattened) unless labels or the input's shape tell its
    class axis (:func:`labelled_layout`, :func:`unlabelled_layout`), which a model's load does.
    """
    return tuple(shape_positions(shape) for shape in output_shapes(result, batch))


def output_shapes(result: Any, batch: int = 1) -> tuple[tuple[int, ...], ...]:
    """Each output's per-sample shape (the batch dimension dropped; ``()`` if it has none)."""
    return tuple(
        tuple(tensor.shape[1:]) if tensor.dim() and tensor.shape[0] == batch else ()
        for tensor in flatten_outputs(result)
    )


def per_sample_shapes(bundle: ModelBundle) -> tuple[tuple[int, ...], ...]:
    """Each of the model's outputs' per-sample shape, from one call on the example input."""
    import torch

    with torch.no_grad():
        return output_shapes(bundle.module(bundle.example_input))


def shape_positions(per_sample: tuple[int, ...]) -> int:
    """The class positions of an output of ``per_sample`` shape, without labels (:func:`class_positions`)."""
    return int(np.prod(per_sample[1:])) if len(per_sample) >= 3 else 1


def unlabelled_layout(per_sample: tuple[int, ...], input_shape: tuple[int, ...]) -> tuple[int, int]:
    """Where the classes of an output of ``per_sample`` shape are, without labels, from the
    per-sample shape of the model's input (:func:`labelled_layout` for the result).

    A 2-D output whose first axis alone has the input's first axis's length runs along the
    input's steps: a batch-first tagger's or language model's ``(T, classes)`` from ``(T,
    features)`` or ``(T,)`` token ids, classes last. One whose last axis alone has the input's
    last axis's length is a 1-D convolution's ``(classes, L)`` from ``(features, L)``, classes
    first. Any other output, or one that fits both, has the layout
    :func:`shape_positions` gives it (a 2-D one is then one flattened argmax).
    """
    if len(per_sample) == 2 and min(per_sample) > 1 and input_shape:
        first, last = per_sample
        along_first = first == input_shape[0] and last != input_shape[-1]
        along_last = last == input_shape[-1] and first != input_shape[0]
        if along_first:
            return first, 1
        if along_last:
            return last, 0
    return shape_positions(per_sample), 0


def labelled_layout(per_sample: tuple[int, ...], labels: int) -> tuple[int, int] | None:
    """Where the classes of an output of ``per_sample`` shape are, given ``labels`` per sample.

    Returns:
        ``(positions, class axis)``: the positions each have a class, and the axis of the
        per-sample shape that holds the classes (0: first, as PyTorch lays out
        ``(classes, H, W)`` and ``(classes, L)``; 1: last, a ``(T, classes)`` sequence
        tagger's). A 2-D output is told by its labels: ``T`` labels for ``(T, C)`` give one
        class per step along the last axis, ``L`` for ``(C, L)`` one per position along the
        first (first when both fit: a square output is read as PyTorch's losses read it).
        One label per sample fits a 2-D output only if one of its axes is 1 (``(1, C)``):
        one argmax over ``T x C`` values is no class.
        ``None``: that many labels fit no position of this output.
    """
    if len(per_sample) == 2 and (labels > 1 or min(per_sample) > 1):
        first, last = per_sample
        if labels == last:
            return last, 0
        if labels == first:
            return first, 1
        return None
    positions = shape_positions(per_sample)
    return (positions, 0) if labels == positions else None
