"""Per-layer int8 sensitivity: which layers to keep in float (issue #20, prototype).

A layer is a module path of the user's model (``blocks.2.pw1``). Two measurements
per layer, both against a toolchain's real quantizer (docs/mixed-precision.md):

``float_one`` (leave one out)
    quantize every candidate layer except this one; the score is the accuracy
    *recovered* over whole-model int8.
``quantize_one`` (one at a time)
    keep every other candidate layer in float and quantize this one; the score is the
    accuracy *lost* against all candidates float.

The ranking that :func:`keep_float` uses is ``quantize_one``: int8 damage sits on
tensors, and a tensor is quantized when *either* the layer producing it or the one
consuming it is int8, so keeping one layer float repairs nothing when the damage is
on a tensor between two layers (``digits_outlier``), while quantizing one layer
alone exposes both ends. Both are measured so the claim can be checked per model.

The toolchain enters through an *evaluator*: a function from the set of layers kept
float to top-1 accuracy. :func:`onnxruntime_evaluator` and :func:`torch_fx_evaluator`
build them. Nothing heavy is imported at module level.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import torch

    from nnsweep.models import ModelBundle, Split

__all__ = [
    "Evaluator",
    "LayerSensitivity",
    "Method",
    "SensitivityReport",
    "keep_float",
    "measure",
    "onnxruntime_evaluator",
    "quantizable_layers",
    "torch_fx_evaluator",
]

Evaluator = Callable[[frozenset[str]], float]
Method = Literal["float_one", "quantize_one"]
CALIBRATION_SAMPLES = 128  # nnsweep's default: 8 batches of 16


@dataclass(frozen=True)
class LayerSensitivity:
    """One layer's two measurements (top-1 accuracy, 0-1).

    Attributes:
        layer: the module path.
        float_one: accuracy with only this layer float (all other candidates int8).
        quantize_one: accuracy with only this layer int8 (all other candidates float).
    """

    layer: str
    float_one: float
    quantize_one: float


@dataclass(frozen=True)
class SensitivityReport:
    """Per-layer sensitivities of one model on one toolchain.

    Attributes:
        whole_int8: accuracy with every candidate quantized.
        all_float: accuracy with every candidate float (ops outside the candidates,
            such as additions and activations, may still be int8).
        layers: one entry per candidate, in the candidates' order.
        seconds: wall time of the measurement.
        evaluations: how many quantize-and-evaluate runs it took.
    """

    whole_int8: float
    all_float: float
    layers: tuple[LayerSensitivity, ...]
    seconds: float
    evaluations: int

    def score(self, entry: LayerSensitivity, method: Method) -> float:
        """Accuracy recovered (``float_one``) or lost (``quantize_one``) by ``entry``'s layer."""
        if method == "float_one":
            return entry.float_one - self.whole_int8
        return self.all_float - entry.quantize_one

    def ranked(self, method: Method = "quantize_one") -> list[str]:
        """Layer paths, most sensitive first (ties keep the candidates' order)."""
        order = sorted(self.layers, key=lambda e: -self.score(e, method))
        return [e.layer for e in order]

    def all_tie(self, method: Method = "quantize_one") -> bool:
        """Whether two or more layers were measured and every one scored the same: top-1 on the
        calibration split does not tell them apart (a model that int8 does not hurt there), so
        :meth:`ranked` is the candidates' order and keeping K float keeps the first K defined."""
        return len({round(self.score(e, method), 9) for e in self.layers}) == 1 < len(self.layers)


def quantizable_layers(module: torch.nn.Module, example: torch.Tensor | None = None) -> list[str]:
    """Module paths of the layers of ``module`` that int8 quantizes, in definition order.

    A layer is a convolution, a linear layer, or a module that computes with a weight
    of its own (a parameter of two or more dimensions it holds directly, not through a
    child): ``nn.MultiheadAttention``'s input projection, a custom attention's
    ``F.linear``. Embeddings are not layers here: no int8 mode of nnsweep quantizes
    their lookups.

    With ``example`` (a batch-1 input), only the layers that one forward pass calls:
    a layer that is defined but never called, such as ``nn.MultiheadAttention``'s
    ``out_proj`` (the attention uses its weight directly), has no op of its own in any
    exported graph, so keeping it float would change nothing, and ONNX Runtime could
    not even name its nodes. Its parent, which is called, is a layer instead.
    """
    from torch import nn

    kinds = (nn.modules.conv._ConvNd, nn.Linear)
    lookups = (nn.Embedding, nn.EmbeddingBag)

    def weighted(sub: nn.Module) -> bool:
        return not isinstance(sub, lookups) and any(p.dim() >= 2 for p in sub.parameters(recurse=False))

    named = [(name, sub) for name, sub in module.named_modules() if name and (isinstance(sub, kinds) or weighted(sub))]
    if example is None:
        return [name for name, _ in named]
    import torch

    called: set[str] = set()
    hooks = [
        sub.register_forward_hook(lambda _m, _i, _o, name=name: called.add(name))  # type: ignore[misc]
        for name, sub in named
    ]
    training = module.training
    try:
        with torch.no_grad():
            module.eval()(example)  # eval: a BatchNorm in training mode would update its statistics
    finally:
        module.train(training)
        for hook in hooks:
            hook.remove()
    return [name for name, _ in named if name in called]


def measure(
    layers: Sequence[str], evaluate: Evaluator, methods: Collection[Method] = ("float_one", "quantize_one")
) -> SensitivityReport:
    """Measure each layer of ``layers`` with ``evaluate``.

    Args:
        layers: candidate module paths.
        evaluate: accuracy of the model with the given layers kept float.
        methods: which measurements to take (a method not taken reports ``nan``).
    """
    start = time.perf_counter()
    everything = frozenset(layers)
    whole_int8 = evaluate(frozenset())
    all_float = evaluate(everything) if "quantize_one" in methods else float("nan")
    runs = 1 + ("quantize_one" in methods)
    entries = []
    for layer in layers:
        one = evaluate(frozenset({layer})) if "float_one" in methods else float("nan")
        alone = evaluate(everything - {layer}) if "quantize_one" in methods else float("nan")
        runs += len(methods)
        entries.append(LayerSensitivity(layer, one, alone))
    return SensitivityReport(whole_int8, all_float, tuple(entries), time.perf_counter() - start, runs)


def keep_float(report: SensitivityReport, k: int, method: Method = "quantize_one") -> list[str]:
    """The ``k`` layers to keep in float: the most sensitive by ``method``."""
    return report.ranked(method)[:k]


def _accuracy(outputs: Sequence[int], split: Split) -> float:
    import numpy as np

    assert split.labels is not None
    return float((np.asarray(outputs) == split.labels).mean())


def onnxruntime_evaluator(bundle: ModelBundle, split: Split, per_channel: bool = False) -> Evaluator:
    """An evaluator that quantizes with ONNX Runtime (QDQ, minmax) and scores on ``split``.

    The model is exported once (:func:`nnsweep.convert.float_fallback.export_onnx_scoped`);
    each call quantizes it with the given layers excluded and runs one thread.
    """
    import tempfile
    from pathlib import Path

    import onnxruntime as ort

    from nnsweep.convert import float_fallback

    workdir = Path(tempfile.mkdtemp(prefix="nnsweep-sensitivity-"))
    source = workdir / "model.onnx"
    float_fallback.export_onnx_scoped(bundle.module, bundle.example_input, source)
    calibration = bundle.dataset.calibration.inputs[:CALIBRATION_SAMPLES]

    def evaluate(keep: frozenset[str]) -> float:
        target = workdir / "quantized.onnx"
        samples = (calibration[i : i + 1] for i in range(len(calibration)))
        float_fallback.ort_quantize_static(source, target, samples, sorted(keep), per_channel)
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(str(target), options, providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        scored = bundle.dataset.accuracy_output  # the outputs come in flatten_outputs' order
        preds = [int(session.run(None, {name: split.inputs[i : i + 1]})[scored].argmax()) for i in range(len(split))]
        return _accuracy(preds, split)

    return evaluate


def torch_fx_evaluator(bundle: ModelBundle, split: Split, per_channel: bool = False, engine: str = "x86") -> Evaluator:
    """An evaluator that quantizes with torch.ao FX (nnsweep's qconfigs, minmax) and scores on ``split``."""
    import copy

    import torch

    from nnsweep.convert import float_fallback
    from nnsweep.convert.fx import convert_quietly
    from nnsweep.convert.fx import qconfig_mapping as _qconfig_mapping
    from nnsweep.core.config import Calibration, Granularity, QuantConfig, QuantMode
    from nnsweep.models._bundle import flatten_outputs

    quant = QuantConfig(
        mode=QuantMode.STATIC_INT8,
        granularity=Granularity.PER_CHANNEL if per_channel else Granularity.PER_TENSOR,
        calibration=Calibration.MINMAX,
    )
    calibration = torch.from_numpy(bundle.dataset.calibration.inputs[:CALIBRATION_SAMPLES])
    inputs = torch.from_numpy(split.inputs)

    def evaluate(keep: frozenset[str]) -> float:
        previous = torch.backends.quantized.engine
        torch.backends.quantized.engine = engine
        try:
            model = copy.deepcopy(bundle.module).eval()
            mapping = _qconfig_mapping(engine, quant)
            prepared = float_fallback.fx_prepare(model, mapping, sorted(keep), (bundle.example_input,))
            with torch.no_grad():
                prepared(calibration)  # one batch: min/max observers see the same extremes as one by one
                model = convert_quietly(prepared)
                preds = flatten_outputs(model(inputs))[bundle.dataset.accuracy_output].argmax(1).tolist()
        finally:
            torch.backends.quantized.engine = previous
        return _accuracy(preds, split)

    return evaluate
