"""Resolve a model reference to a :class:`ModelBundle`.

References:
    ``digits``, ``digits_gn``      built-in, trained on scikit-learn's bundled data
    ``digits_outlier``             built-in, the same data; int8 hurts it (activation outliers)
    ``torchvision:mobilenet_v2``   a torchvision classifier (random weights unless ``weights`` is given)
    ``package.module:function``    a user function
    ``path/to/file.py:function``   a user function in a file
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from nnsweep.core.errors import SpecError
from nnsweep.models._bundle import (
    Dataset,
    ModelBundle,
    Split,
    flatten_outputs,
    labelled_layout,
    module_digest,
    output_shapes,
    output_sizes,
    shape_positions,
    unlabelled_layout,
)
from nnsweep.models._dataset_checks import check_inputs, check_labels
from nnsweep.models._module_form import (
    check_parameters,
    deployable_module,
    forward_failure,
    plain_outputs,
    settled_weights,
    with_plain_outputs,
)
from nnsweep.models._pixels import PIXEL_DTYPE, synthetic_pixels
from nnsweep.models._shape import MAX_INPUT_ELEMENTS, check_input_shape
from nnsweep.models._strides import standard_tensor
from nnsweep.models._token_ids import ID_DTYPES, check_ids, synthetic_ids, vocabulary
from nnsweep.models._user_code import import_function

if TYPE_CHECKING:
    from nnsweep.core.task_data import TaskData

__all__ = ["BUILTIN", "DECODERS", "check_forward", "check_reference", "load_model", "register_live"]

# nnsweep.models.digits.VARIANTS and digits_outlier.NAME; kept here so checking stays light
BUILTIN = ("digits", "digits_gn", "digits_outlier")
# the built-in decoder language models (nnsweep.models.decoder): measured per token, not per call
DECODERS = ("tiny_llama",)

# files users save models in (weights, whole pickled modules, exported or converted programs)
_SAVED_SUFFIXES = (".pt", ".pth", ".pt2", ".bin", ".safetensors", ".ckpt", ".onnx", ".tflite", ".pte")
log = logging.getLogger(__name__)

_SYNTHETIC_CALIBRATION = 32
_SYNTHETIC_EVALUATION = 16
_BN_RECALIBRATION_BATCHES = 8


def check_reference(ref: str) -> str:
    """Validate the form of a model reference without importing anything heavy.

    Returns the kind: ``builtin``, ``decoder``, ``torchvision``, ``live``, ``file`` or ``module``.

    Raises:
        SpecError: the reference has no recognisable form, or a file it names is missing.
    """
    if not isinstance(ref, str) or not ref.strip():
        raise SpecError("model", "is empty; give digits, torchvision:NAME, package.module:function or file.py:function")
    if ref in BUILTIN:
        return "builtin"
    if ref in DECODERS:
        return "decoder"
    head, sep, func = ref.rpartition(":")
    if not sep and ref.lower().endswith(_SAVED_SUFFIXES):
        raise SpecError(
            "model",
            f"{ref!r} is a saved file, not a model reference: nnsweep needs the Python nn.Module; write a "
            "file.py:function that builds the module (loading the saved weights into it) and returns it",
        )
    if not sep or not head or not func:
        raise SpecError(
            "model",
            f"unknown model {ref!r}; use one of {', '.join(BUILTIN)}, torchvision:NAME, "
            "package.module:function or path/to/file.py:function",
        )
    if head == "torchvision":
        return "torchvision"
    if head == "live":
        if func not in _LIVE:
            raise SpecError("model", f"no live model {func!r} in this process (nnsweep.api registers them)")
        return "live"
    if head.endswith(".py"):
        if not Path(head).is_file():
            raise SpecError("model", f"file {head!r} does not exist")
        return "file"
    return "module"


_LIVE: dict[str, tuple[Any, ...]] = {}  # "live:NAME" -> what a model function would return


def register_live(name: str, module: Any, example_input: Any, dataset: Dataset | None = None) -> str:
    """Make a model that lives in this process (a notebook's) loadable as ``live:NAME``.

    Only this process can load it: sweep it with the local executor (a Ray worker is
    another process). Registering a name again replaces the model.

    Returns:
        The reference to use in a spec: ``live:NAME``.
    """
    if not isinstance(name, str) or not name.replace("_", "").replace("-", "").isalnum():
        raise SpecError("model", f"{str(name)[:60]!r} is not a model name (letters, digits, '_', '-')")
    _LIVE[name] = (module, example_input) if dataset is None else (module, example_input, dataset)
    return f"live:{name}"


def load_model(
    ref: str,
    *,
    cache_dir: Path | None = None,
    weights: Path | None = None,
    input_shape: tuple[int, ...] | None = None,
    progress: Callable[[str], None] | None = None,
    data: TaskData | None = None,
) -> ModelBundle:
    """Load the model ``ref`` names, with its example input and data.

    Args:
        ref: a model reference (see the module docstring).
        cache_dir: where built-in models keep trained weights.
        weights: a state dict on disk for torchvision models.
        input_shape: the input shape (batch 1) when the model does not say.
        progress: called with lines of text during long steps (training).
        data: the user's evaluation and calibration data, in place of the model's own.

    Raises:
        SpecError: the reference does not resolve, or what it returns is not a model.
    """
    bundle = _load(ref, cache_dir, weights, input_shape, progress)
    if data is None:
        return bundle
    from nnsweep.models.task_data import with_data

    return with_data(bundle, data)


def _load(
    ref: str,
    cache_dir: Path | None,
    weights: Path | None,
    input_shape: tuple[int, ...] | None,
    progress: Callable[[str], None] | None,
) -> ModelBundle:
    kind = check_reference(ref)
    if kind == "decoder":
        raise SpecError(
            "model",
            f"{ref} is a decoder language model: nnsweep bench measures it per token "
            "(docs/how-to/language-models.md); a sweep takes models of one input",
        )
    if ref == "digits_outlier":
        from nnsweep.models.digits_outlier import load_digits_outlier

        return load_digits_outlier(cache_dir=cache_dir, progress=progress)
    if kind == "builtin":
        from nnsweep.models.digits import load_digits

        return load_digits(ref, cache_dir=cache_dir, progress=progress)
    if kind == "torchvision":
        return _torchvision(ref.partition(":")[2], weights, input_shape)
    if kind == "live":
        return _bundle_from(ref, _LIVE[ref.partition(":")[2]], input_shape)
    return _user(ref, input_shape)


def _torchvision(name: str, weights: Path | None, input_shape: tuple[int, ...] | None) -> ModelBundle:
    import torch
    import torchvision

    available = torchvision.models.list_models(module=torchvision.models)
    if name not in available:
        raise SpecError("model", f"torchvision has no classification model {name!r}; e.g. mobilenet_v2, resnet18")
    torch.manual_seed(0)
    with warnings.catch_warnings():  # GoogLeNet and Inception v3 announce a future default init on each build
        warnings.filterwarnings("ignore", "The default weight initialization", FutureWarning)
        module = torchvision.models.get_model(name, weights=None)
    shape = check_input_shape(tuple(input_shape or (1, 3, 224, 224)), "input_shape")
    ref = f"torchvision:{name}"
    example, data = _synthetic_data(ref, module, shape)
    # before the BatchNorm recalibration runs the model: an input too small for it is one line
    # (Inception v3 at 64x64: "Output size is too small", exit 1, before)
    sizes, shapes, _ = check_forward(ref, module.eval(), example)  # a classifier's tensor
    if weights is not None:
        if not weights.is_file():
            raise SpecError("weights", f"file {str(weights)!r} does not exist")
        try:
            module.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
        except Exception as exc:  # a state dict of another model or a foreign file
            raise SpecError("weights", f"cannot load {weights} into {name}: {exc}") from exc
    else:
        _randomise_zero_layers(module)
        _recalibrate_batchnorm(module, data.calibration.inputs)
    module.eval()
    positions = tuple(shape_positions(shape) for shape in shapes)
    digest = module_digest(ref, module, example, data.evaluation.digest())
    return ModelBundle(ref, module, example, data, digest, sizes, positions)


def check_forward(ref: str, module: Any, example: Any) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...], bool]:
    """Run the model once on its example input (batch 1): a wrong shape or output fails here,
    clearly and before any conversion, instead of after one.

    Returns:
        The per-sample size of each output (:attr:`ModelBundle.outputs`), its per-sample
        shape, and whether the outputs come in a structure every exporter takes
        (:func:`~nnsweep.models._module_form.plain_outputs`).

    Raises:
        SpecError: the forward pass fails, or returns something other than tensors.
    """
    import torch

    try:
        with torch.no_grad():
            result = module(example)
    except Exception as exc:  # the user's model: any failure on its own example is an input error
        raise forward_failure(ref, example, exc) from None
    try:
        sizes, shapes = output_sizes(result), output_shapes(result)
    except TypeError as exc:
        raise SpecError("model", f"{ref}: {exc}") from None
    _warn_if_random(ref, module, example, result)
    return sizes, shapes, plain_outputs(result)


def _warn_if_random(ref: str, module: Any, example: Any, first: Any) -> None:
    """Warn when a second call on the example input gives other outputs: a dropout called
    with ``training=True`` or noise added in ``forward``. Each deployment is compared with
    one fp32 run, so its fidelity and accuracy then measure that randomness too."""
    import torch

    with torch.no_grad():
        second = flatten_outputs(module(example))
    firsts = flatten_outputs(first)

    def difference(a: Any, b: Any) -> float:
        if a.shape != b.shape:
            return float("inf")
        if not a.numel():
            return 0.0
        floating = a.is_floating_point()
        if torch.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True) if floating else torch.equal(a, b):
            return 0.0
        return float((a.double() - b.double()).abs().max())

    differences = [difference(a, b) for a, b in zip(firsts, second, strict=False)]
    differences = [d for d in differences if d] + ([float("inf")] if len(second) != len(firsts) else [])
    if differences:
        log.warning(
            "%s: two calls on the same example input gave different outputs (largest difference %.3g): is there a "
            "dropout called with training=True, or random noise, in forward? Every deployment is compared with one "
            "fp32 run, so its fidelity and accuracy include that randomness",
            ref,
            max(differences),
        )


def _synthetic_data(
    ref: str, module: Any, shape: tuple[int, ...], dtype: str = "float32", example: Any = None
) -> tuple[Any, Dataset]:
    """Seeded inputs for models that come without data (no labels: no accuracy), and the
    example input among them: Gaussian floats, pixels over 0-255, or ids below the model's
    vocabulary (``example``: the ids the model was given), by the input's ``dtype``."""
    import numpy as np
    import torch

    if dtype in ID_DTYPES:
        vocab = vocabulary(ref, module, example)
        data = synthetic_ids(shape, np.dtype(dtype), vocab, _SYNTHETIC_CALIBRATION, _SYNTHETIC_EVALUATION)
    elif dtype == PIXEL_DTYPE:
        data = synthetic_pixels(shape, _SYNTHETIC_CALIBRATION, _SYNTHETIC_EVALUATION)
    else:
        rng = np.random.RandomState(0)
        cal = rng.standard_normal((_SYNTHETIC_CALIBRATION, *shape[1:])).astype(np.float32)
        ev = rng.standard_normal((_SYNTHETIC_EVALUATION, *shape[1:])).astype(np.float32)
        data = Dataset(calibration=Split(cal), evaluation=Split(ev))
    return torch.from_numpy(data.evaluation.inputs[:1].copy()), data


def _input_dtype(ref: str, example: Any) -> str:
    """The example input's dtype, if nnsweep deploys models that take it: float32, uint8
    pixels (:mod:`nnsweep.models._pixels`) or int32/int64 token ids.

    Raises:
        SpecError: another dtype, saying which ones nnsweep takes.
    """
    import torch

    dtype = str(example.dtype).removeprefix("torch.")
    if dtype in ID_DTYPES or dtype == PIXEL_DTYPE or example.dtype == torch.float32:
        return dtype
    if not example.is_floating_point():
        raise SpecError(
            "model",
            f"{ref}(): the example input is {dtype}; nnsweep deploys models that take float32 "
            "(images, audio, features), uint8 pixels or int32/int64 token ids",
        )
    raise SpecError(  # float64 met float32 calibration data with a traceback
        "model",
        f"{ref}(): the example input is {dtype}; nnsweep deploys float32 "
        "models (its fp32 baseline) and makes float16 and int8 itself: give the model and its input as float32 "
        "(model.float(), example.float())",
    )


def _class_layout(
    ref: str, dataset: Dataset, shapes: tuple[tuple[int, ...], ...], input_shape: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Each output's class positions and class axes (:attr:`ModelBundle.positions`,
    :attr:`ModelBundle.class_axes`), from its per-sample shape and the input's
    (:func:`unlabelled_layout`) and, for the scored output, its evaluation labels
    (:func:`labelled_layout`): one per sample for a classifier, one per pixel for a
    segmentation, one per step for a tagger.

    Raises:
        SpecError: the labels fit no layout of the scored output.
    """
    layouts = [unlabelled_layout(shape, input_shape) for shape in shapes]
    positions = [p for p, _ in layouts]
    axes = [a for _, a in layouts]
    labels = dataset.evaluation.labels
    if labels is not None and len(labels):
        scored, shape = dataset.accuracy_output, shapes[dataset.accuracy_output]
        per_sample = int(np.prod(labels.shape[1:]))
        layout = labelled_layout(shape, per_sample)
        if layout is None:
            if len(shape) == 2:
                kind = f"one per position along either axis of its {shape} output ({shape[0]} or {shape[1]})"
            elif positions[scored] == 1:
                kind = "one per sample"
            else:
                kind = f"one per position of its (classes, H, W) output ({positions[scored]})"
            raise SpecError(
                "model",
                f"{ref}(): the Dataset's evaluation labels have {per_sample} classes per sample; the scored output "
                f"takes {kind}",
            )
        positions[scored], axes[scored] = layout
    return tuple(positions), tuple(axes) if any(axes) else ()


def _randomise_zero_layers(module: Any) -> None:
    """Give random weights to the linear layers torchvision initialises to zero.

    A ViT's classifier head starts at zero: with random weights every input gives the
    same all-zero logits, and every deployment would agree with fp32 exactly. Seeded,
    so the model (and its digest) is the same in every process.
    """
    import torch

    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, torch.nn.Linear) and not m.weight.any():
                m.weight.normal_(0.0, m.in_features**-0.5, generator=generator)


def _recalibrate_batchnorm(module: Any, inputs: Any) -> None:
    """Re-estimate BatchNorm statistics on ``inputs``.

    Randomly initialised torchvision nets have vanishing activations (logits near
    1e-9) with their default running statistics, which makes every quantization
    look equally good or bad; recomputed statistics give activations of unit scale.
    """
    import torch

    norms = [m for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # cumulative average over the batches below
    module.train()
    with torch.no_grad():
        x = torch.from_numpy(inputs)
        per = max(1, len(x) // _BN_RECALIBRATION_BATCHES)
        for start in range(0, len(x), per):
            module(x[start : start + per])
    module.eval()


def _user(ref: str, input_shape: tuple[int, ...] | None) -> ModelBundle:
    func = import_function(ref, field="model")
    try:
        result = func()
    except Exception as exc:
        raise SpecError("model", f"{ref}() failed: {type(exc).__name__}: {exc}") from exc
    return _bundle_from(ref, result, input_shape)


def _bundle_from(ref: str, result: Any, input_shape: tuple[int, ...] | None) -> ModelBundle:
    """A bundle from what a model function returned: a module, ``(module, example_input)``
    or ``(module, example_input, Dataset)``."""
    dataset: Dataset | None = None
    if isinstance(result, tuple):
        if not 2 <= len(result) <= 3:
            raise SpecError(
                "model", f"{ref}() must return a module, (module, example_input) or (module, example_input, Dataset)"
            )
        net, example = result[0], result[1]
        dataset = result[2] if len(result) == 3 else None
        if dataset is not None and not isinstance(dataset, Dataset):
            raise SpecError("model", f"{ref}() returned {type(dataset).__name__} as data; use nnsweep.models.Dataset")
    else:
        net, example = result, None
    net = deployable_module(ref, net)
    example = _example_input(ref, example, input_shape)
    net = settled_weights(ref, net, example)
    dtype = _input_dtype(ref, example)
    check_parameters(ref, net)
    token_ids = dtype in ID_DTYPES
    if example.numel() > MAX_INPUT_ELEMENTS:
        raise SpecError("model", f"{ref}(): the example input has more than {MAX_INPUT_ELEMENTS:,} elements")
    sizes, shapes, plain = check_forward(ref, net, example)
    if not plain:
        net = with_plain_outputs(net)
    given = dataset is not None
    if dataset is None:
        example, dataset = _synthetic_data(ref, net, tuple(example.shape), dtype, example)
    check_inputs(ref, dataset, np.dtype(dtype), tuple(example.shape[1:]))
    if token_ids and given:  # seeded ids are drawn below the vocabulary already
        check_ids(ref, net, dataset, example)
    if not 0 <= dataset.accuracy_output < len(sizes):
        raise SpecError("model", f"{ref}(): Dataset.accuracy_output {dataset.accuracy_output} names no output")
    positions, axes = _class_layout(ref, dataset, shapes, tuple(example.shape[1:]))
    scored = dataset.accuracy_output
    check_labels(ref, dataset, sizes[scored] // max(positions[scored], 1))
    digest = module_digest(ref, net, example, dataset.evaluation.digest(), dataset.calibration.digest())
    return ModelBundle(ref, net, example, dataset, digest, sizes, positions, axes)


def _example_input(ref: str, example: Any, input_shape: tuple[int, ...] | None) -> Any:
    """The example input a model function returned (or one of ``input_shape``), checked: one
    tensor with batch size 1, with standard strides (:mod:`nnsweep.models._strides`)."""
    import torch

    if example is None:
        if input_shape is None:
            raise SpecError(
                "input_shape", f"{ref}() returned no example input; give the input shape (e.g. 1,3,224,224)"
            )
        example = torch.zeros(check_input_shape(tuple(input_shape), "input_shape"))
    if isinstance(example, tuple | list) and len(example) == 1 and isinstance(example[0], torch.Tensor):
        raise SpecError(
            "model", f"{ref}() gave its example input in a {type(example).__name__} of one: give the tensor itself"
        )
    if isinstance(example, tuple | list) and all(isinstance(x, torch.Tensor) for x in example):
        raise SpecError(
            "model",
            f"{ref}() gave {len(example)} example inputs: nnsweep deploys models with one input tensor; "
            "wrap the model in a module that takes one tensor (e.g. the inputs concatenated) and splits it",
        )
    if not isinstance(example, torch.Tensor) or example.dim() == 0 or example.shape[0] != 1:
        raise SpecError("model", f"{ref}(): the example input must be a tensor with batch size 1")
    return standard_tensor(example)
