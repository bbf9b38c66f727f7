"""Per-layer int8 sensitivity: which layers to keep in float.

A layer is a module path of the user's model (``blocks.2.pw1``). ``quantize_one`` (this
layer int8, the other candidates float; the score is the accuracy lost) is the ranking
:func:`keep_float` uses: a tensor is quantized when either its producer or its consumer
is int8, so leaving one layer out (``float_one``, also measured) repairs nothing when the
damage sits between two layers. Accuracy ranks and the outputs' SQNR against fp32 breaks
ties (top-1 on 128 samples moves in steps of 0.8 points, so many layers tie).

The toolchain enters through an *evaluator*: layers kept float -> :class:`Score`.
Each runtime's evaluator lives in its folder (``RuntimeInfo.sensitivity``). Nothing heavy is imported
at module level.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from nnsweep.core.metrics import ACCURACY
from nnsweep.core.results import FLOAT_SQNR_DB

if TYPE_CHECKING:
    import numpy as np
    import torch

    from nnsweep.models import ModelBundle, Split

__all__ = [
    "INERT_SQNR_DB",
    "Evaluator",
    "LayerSensitivity",
    "Method",
    "Score",
    "SensitivityReport",
    "float_in_effect",
    "keep_float",
    "measure",
    "measured_float_in_effect",
    "quantizable_layers",
    "reference_outputs",
    "score_outputs",
    "scored_layout",
    "scored_output",
]

Method = Literal["float_one", "quantize_one"]
CALIBRATION_SAMPLES = 128  # nnsweep's default: 8 batches of 16
# At or above this SQNR (dB) against fp32, a layer quantized alone left the outputs as float
# computes them: float32's rounding alone gives about 140 dB, int8 weights or activations
# 60 dB at most. Such a layer is one the runtime's quantizer does not quantize (an LSTM under
# ONNX Runtime's static int8), or one whose output does not reach the model's.
INERT_SQNR_DB = FLOAT_SQNR_DB


@dataclass(frozen=True)
class Score:
    """One quantize-and-evaluate run: top-1 accuracy (0-1) and the SQNR (dB) of the scored
    output against the fp32 model's on the same inputs (``inf``: identical)."""

    accuracy: float
    sqnr_db: float


Evaluator = Callable[[frozenset[str]], Score]


@dataclass(frozen=True)
class LayerSensitivity:
    """One layer's two measurements (top-1 accuracy, 0-1; SQNR against fp32, dB).

    Attributes:
        layer: the module path.
        float_one: accuracy with only this layer float (all other candidates int8).
        quantize_one: accuracy with only this layer int8 (all other candidates float).
        float_one_sqnr, quantize_one_sqnr: the outputs' SQNR in the same two runs
            (``nan``: not measured).
    """

    layer: str
    float_one: float
    quantize_one: float
    float_one_sqnr: float = math.nan
    quantize_one_sqnr: float = math.nan

    @property
    def inert(self) -> bool:
        """Whether quantizing this layer alone changed the outputs no more than float32's
        rounding does (SQNR at least :data:`INERT_SQNR_DB`): keeping it float buys nothing."""
        return self.quantize_one_sqnr >= INERT_SQNR_DB


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
        mode: the int8 mode the layers were quantized in: ``static_int8``, or torch's
            ``dynamic_int8`` for a model torch.fx cannot trace.
        metric, goal: what the scores are (``accuracy``: top-1; else a user metric, ranked
            following its goal: a rise in a perplexity is a loss).
        split: the split scored (``calibration``; ``evaluation`` when a user metric's
            targets come only with the evaluation data).
    """

    whole_int8: float
    all_float: float
    layers: tuple[LayerSensitivity, ...]
    seconds: float
    evaluations: int
    whole_int8_sqnr: float = math.nan
    all_float_sqnr: float = math.nan
    mode: str = "static_int8"
    metric: str = ACCURACY
    goal: str = "maximize"
    split: str = "calibration"

    def score(self, entry: LayerSensitivity, method: Method) -> float:
        """The metric recovered (``float_one``) or lost (``quantize_one``) by ``entry``'s layer."""
        sign = 1.0 if self.goal == "maximize" else -1.0
        if method == "float_one":
            return sign * (entry.float_one - self.whole_int8)
        return sign * (self.all_float - entry.quantize_one)

    def distortion(self, entry: LayerSensitivity, method: Method) -> float:
        """The tie-breaker: how far below fp32 the outputs' SQNR is with ``entry``'s layer
        alone int8 (``quantize_one``), or how much keeping it alone float lifts it
        (``float_one``); larger is more sensitive, ``-inf`` when not measured."""
        sqnr = entry.quantize_one_sqnr if method == "quantize_one" else -entry.float_one_sqnr
        return -math.inf if math.isnan(sqnr) else -sqnr

    def ranked_entries(self, method: Method = "quantize_one") -> list[LayerSensitivity]:
        """The layers' entries, most sensitive first: by accuracy, ties by :meth:`distortion`,
        then the candidates' order."""
        return sorted(self.layers, key=lambda e: (-round(self.score(e, method), 9), -self.distortion(e, method)))

    def ranked(self, method: Method = "quantize_one") -> list[str]:
        """Layer paths in :meth:`ranked_entries`' order."""
        return [e.layer for e in self.ranked_entries(method)]

    def int8_left(self, kept_float: Sequence[str]) -> list[str]:
        """The layers outside ``kept_float`` whose int8 changes the outputs (not
        :attr:`LayerSensitivity.inert`). Empty: a static int8 artifact keeping ``kept_float``
        float is float in effect (the ranking quantizes statically: see :func:`float_in_effect`)."""
        kept = set(kept_float)
        return [e.layer for e in self.layers if e.layer not in kept and not e.inert]

    def all_tie(self, method: Method = "quantize_one") -> bool:
        """Whether two or more layers were measured and every one cost the same top-1: the
        calibration split does not tell them apart by accuracy (a model that int8 does not
        hurt there), so :meth:`ranked` orders them by output distortion alone."""
        return len({round(self.score(e, method), 9) for e in self.layers}) == 1 < len(self.layers)


def float_in_effect(runtime: str, k: int) -> str:
    """What to say when :meth:`SensitivityReport.int8_left` is empty after keeping ``k`` float.

    It is about static int8, the mode a ranking quantizes with: a dynamic int8 quantizer
    may take layers the static one leaves (torch's dynamic int8 quantizes the linear layers
    inside an ``nn.TransformerEncoder``, which its static int8 runs float)."""
    return (
        f"with {k} layer{'s' if k != 1 else ''} float, no layer left int8 changes the outputs ({runtime}'s "
        "static int8 leaves the rest float): a static int8 artifact is float in effect"
    )


def measured_float_in_effect(runtime: str, mode: str, sqnr_db: float) -> str | None:
    """What to say when an int8 artifact's outputs, measured against fp32's on the evaluation
    inputs, differ from them by no more than float32's rounding (SQNR at least
    :data:`INERT_SQNR_DB`, or identical); ``None`` otherwise (``nan``: not measured).

    A measurement, so it holds for any mode and any count of float layers, the whole model
    included: an ``nn.LSTM`` alone under ONNX Runtime's static int8, which has no int8 LSTM.
    Callers leave out models whose outputs are constant (their fidelity tells nothing)."""
    if not sqnr_db >= INERT_SQNR_DB:
        return None
    if math.isinf(sqnr_db):
        measured = "identical to fp32's"
    else:
        measured = f"within float32's rounding of fp32's ({sqnr_db:.0f} dB SQNR; int8 gives 60 dB at most)"
    return (
        f"{runtime} {mode}: the outputs are {measured}: int8 changed nothing they show, the artifact is float in effect"
    )


def quantizable_layers(module: torch.nn.Module, example: torch.Tensor | None = None) -> list[str]:
    """Module paths of the layers of ``module`` that int8 quantizes, in definition order.

    A layer is a convolution, a linear layer, or a module that computes with a weight
    of its own (a parameter of two or more dimensions it holds directly, not through a
    child): ``nn.MultiheadAttention``'s input projection, a custom attention's
    ``F.linear``. Embeddings are not layers here: no int8 mode of nnsweep quantizes
    their lookups. Nor is a parametrization (``weight_norm``, ``spectral_norm``,
    ``torch.nn.utils.parametrize``): its module holds the weight's factors and computes
    the weight of the layer that owns it, which is the layer.

    With ``example`` (a batch-1 input), only the layers that one forward pass calls:
    a layer that is defined but never called, such as ``nn.MultiheadAttention``'s
    ``out_proj`` (the attention uses its weight directly), has no op of its own in any
    exported graph, so keeping it float would change nothing, and ONNX Runtime could
    not even name its nodes. Its parent, which is called, is a layer instead.
    """
    from torch import nn
    from torch.nn.utils.parametrize import ParametrizationList

    from nnsweep.runtimes.common.float_region import in_modules

    kinds = (nn.modules.conv._ConvNd, nn.Linear)
    lookups = (nn.Embedding, nn.EmbeddingBag)
    factors = tuple(name for name, sub in module.named_modules() if isinstance(sub, ParametrizationList))

    def weighted(sub: nn.Module) -> bool:
        return not isinstance(sub, lookups) and any(p.dim() >= 2 for p in sub.parameters(recurse=False))

    named = [
        (name, sub)
        for name, sub in module.named_modules()
        if name and not in_modules(name, factors) and (isinstance(sub, kinds) or weighted(sub))
    ]
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
    unmeasured = Score(math.nan, math.nan)
    whole_int8 = evaluate(frozenset())
    all_float = evaluate(everything) if "quantize_one" in methods else unmeasured
    runs = 1 + ("quantize_one" in methods)
    entries = []
    for layer in layers:
        one = evaluate(frozenset({layer})) if "float_one" in methods else unmeasured
        alone = evaluate(everything - {layer}) if "quantize_one" in methods else unmeasured
        runs += len(methods)
        entries.append(LayerSensitivity(layer, one.accuracy, alone.accuracy, one.sqnr_db, alone.sqnr_db))
    seconds = time.perf_counter() - start
    return SensitivityReport(
        whole_int8.accuracy, all_float.accuracy, tuple(entries), seconds, runs, whole_int8.sqnr_db, all_float.sqnr_db
    )


def keep_float(report: SensitivityReport, k: int, method: Method = "quantize_one") -> list[str]:
    """The ``k`` layers to keep in float: the most sensitive by ``method``."""
    return report.ranked(method)[:k]


def reference_outputs(bundle: ModelBundle, split: Split) -> np.ndarray:
    """The fp32 model's scored output on ``split`` (N x classes): the columns of that output in
    the snapshot's side-by-side layout (:func:`nnsweep.models.reference_outputs`)."""
    import numpy as np

    from nnsweep.models import reference_outputs as side_by_side

    everything = side_by_side(bundle, split.inputs)
    sizes = bundle.outputs or (everything.shape[1],)
    start = int(np.sum(sizes[: bundle.dataset.accuracy_output]))
    return everything[:, start : start + sizes[bundle.dataset.accuracy_output]]


def scored_layout(bundle: ModelBundle) -> tuple[int, int]:
    """The class positions and class axis of ``bundle``'s scored output
    (:attr:`ModelBundle.positions`, :attr:`ModelBundle.class_axes`)."""
    scored = bundle.dataset.accuracy_output
    return (
        bundle.positions[scored] if bundle.positions else 1,
        bundle.class_axes[scored] if bundle.class_axes else 0,
    )


def score_outputs(
    outputs: np.ndarray, reference: np.ndarray, split: Split, positions: int = 1, class_axis: int = 0
) -> Score:
    """Top-1 of ``outputs`` (the scored output, N x classes, at ``positions`` class positions
    per sample along ``class_axis``) on ``split`` and their SQNR against ``reference``."""
    import numpy as np

    from nnsweep.bench import evaluate, predicted_classes

    assert split.labels is not None
    out = np.asarray(outputs, dtype=np.float64).reshape(len(split), -1)
    classes = predicted_classes(out, like=reference, positions=positions, class_axis=class_axis)
    accuracy = float((classes == np.asarray(split.labels).reshape(classes.shape)).mean())
    if not np.isfinite(out).all():  # an int8 overflow to inf: as far from fp32 as it gets
        return Score(accuracy, -math.inf)
    return Score(accuracy, evaluate(out, reference, None).fidelity.sqnr_db)


def scored_output(
    module: Callable[[torch.Tensor], object], x: torch.Tensor, bundle: ModelBundle, batched: bool
) -> torch.Tensor:
    """``module``'s scored output (the dataset's ``accuracy_output``) on ``x``: in one call,
    or one sample a call when the model does not take batches."""
    import torch

    from nnsweep.models import flatten_outputs

    chunks = [x] if batched else [x[i : i + 1] for i in range(len(x))]
    return torch.cat([flatten_outputs(module(c))[bundle.dataset.accuracy_output] for c in chunks])
