"""torch's layer rankings: the evaluators that quantize through torch's own int8 flows.

:func:`torch_fx_evaluator` quantizes statically with torch.ao FX, as torch's converter
does; :func:`torch_dynamic_evaluator` with ``quantize_dynamic``. :class:`TorchEvaluator`
is the ranking's choice between them: FX, unless torch.fx cannot trace the model (then
torch's static and QAT int8 cannot convert it either, and its dynamic int8 ranks).
Nothing heavy is imported at module level.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING

from nnsweep.core.errors import first_line
from nnsweep.sensitivity.rank import CALIBRATION_SAMPLES, Evaluator, Score, reference_outputs
from nnsweep.sensitivity.scoring import Scoring, Top1Scoring

if TYPE_CHECKING:
    from nnsweep.models import ModelBundle, Split

__all__ = ["TorchEvaluator", "evaluator", "torch_dynamic_evaluator", "torch_fx_evaluator"]

log = logging.getLogger(__name__)


def evaluator(bundle: ModelBundle, split: Split, per_channel: bool, scoring: Scoring) -> TorchEvaluator:
    """The registry's hook (:attr:`~nnsweep.core.runtimes.RuntimeInfo.sensitivity`)."""
    return TorchEvaluator(bundle, split, per_channel, scoring)


class TorchEvaluator:
    """torch.ao FX's static int8, as torch's converter quantizes statically; for a model
    torch.fx cannot trace (a loop over a shape, a branch on a value), torch's static and
    QAT int8 cannot convert it either, and its dynamic int8 ranks the layers instead.

    Attributes:
        mode: the int8 mode of the evaluations so far.
    """

    def __init__(self, bundle: ModelBundle, split: Split, per_channel: bool, scoring: Scoring) -> None:
        self._evaluate = torch_fx_evaluator(bundle, split, per_channel, scoring=scoring)
        self._fallback = functools.partial(torch_dynamic_evaluator, bundle, split, per_channel, scoring=scoring)
        self.mode = "static_int8"

    def __call__(self, keep: frozenset[str]) -> Score:
        from nnsweep.core.config import QuantMode
        from nnsweep.runtimes.common.fx_untraceable import untraceable

        if self.mode == "static_int8":
            try:
                return self._evaluate(keep)
            except Exception as exc:  # the trace's failure is in the model's code: a TypeError as often
                if untraceable(exc, QuantMode.STATIC_INT8) is None:
                    raise
                log.warning(
                    "torch.fx cannot trace this model (%s): torch's layers are ranked through its dynamic "
                    "int8 (quantize_dynamic, the linear layers), the one int8 mode it converts the model in",
                    first_line(exc, 100),
                )
                self._evaluate = self._fallback()
                self.mode = "dynamic_int8"
        return self._evaluate(keep)


def torch_fx_evaluator(
    bundle: ModelBundle,
    split: Split,
    per_channel: bool = False,
    engine: str = "x86",
    scoring: Scoring | None = None,
) -> Evaluator:
    """An evaluator that quantizes with torch.ao FX (nnsweep's qconfigs, minmax) and scores on
    ``split`` (``scoring``: as :func:`~nnsweep.runtimes.onnxruntime.sensitivity.onnxruntime_evaluator`'s).

    It scores FX's reference model (``convert_to_reference_fx``: each quantized op as
    dequantize, float op, quantize), the quantizer's arithmetic, not the host's int8 kernels:
    on an x86 CPU without VNNI the x86 and fbgemm kernels' uint8 x int8 sums saturate in
    int16 after an op with a fixed full 8-bit range (tanh, sigmoid), which a device with VNNI
    or another engine does not do. The exception is a layer whose int8 kernel torch computes
    wrongly (:func:`nnsweep.runtimes.common.fx.wrong_conv_transposes`): while one is
    int8, the kernels are scored, so the ranking shows its damage and puts it first.
    """
    import copy

    import torch
    from torch.ao.quantization.quantize_fx import convert_to_reference_fx

    from nnsweep.core.config import Calibration, Granularity, QuantConfig, QuantMode
    from nnsweep.models import takes_batches
    from nnsweep.runtimes.common import float_fallback
    from nnsweep.runtimes.common.fx import (
        convert_quietly,
        explicit_conv_padding,
        no_quantized_tensor_deprecation,
        refuse_hooks,
        refuse_prelu,
        wrong_conv_transposes,
    )
    from nnsweep.runtimes.common.fx import qconfig_mapping as _qconfig_mapping

    quant = QuantConfig(
        mode=QuantMode.STATIC_INT8,
        granularity=Granularity.PER_CHANNEL if per_channel else Granularity.PER_TENSOR,
        calibration=Calibration.MINMAX,
    )
    calibration = torch.from_numpy(bundle.dataset.calibration.inputs[:CALIBRATION_SAMPLES])
    inputs = torch.from_numpy(split.inputs)
    scored = scoring or Top1Scoring(bundle, split, reference_outputs(bundle, split))
    batched = takes_batches(bundle)  # else one sample a call
    refuse_prelu(bundle.module)  # as the converter does: a ranking through a wrong int8 PReLU would mislead
    refuse_hooks(bundle.module)  # and through a graph without the model's hooks

    def run(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        return scored.outputs(module, x, batched)

    def evaluate(keep: frozenset[str]) -> Score:
        previous = torch.backends.quantized.engine
        torch.backends.quantized.engine = engine
        try:
            model = copy.deepcopy(bundle.module).eval()
            explicit_conv_padding(model)
            mapping = _qconfig_mapping(engine, quant)
            prepared = float_fallback.fx_prepare(model, mapping, sorted(keep), (bundle.example_input,))
            kernels = bool(wrong_conv_transposes(bundle.module, engine, sorted(keep)))
            with torch.no_grad(), no_quantized_tensor_deprecation():  # the reference model quantizes as it runs
                run(prepared, calibration)  # one batch: min/max observers see the same extremes as one by one
                quantized = convert_quietly(prepared) if kernels else convert_to_reference_fx(prepared)
                outputs = run(quantized, inputs).numpy()
        finally:
            torch.backends.quantized.engine = previous
        return scored(outputs)

    return evaluate


def torch_dynamic_evaluator(
    bundle: ModelBundle,
    split: Split,
    per_channel: bool = False,
    engine: str = "x86",
    scoring: Scoring | None = None,
) -> Evaluator:
    """An evaluator that quantizes with torch's dynamic int8, as its converter does
    (``quantize_dynamic`` on the linear layers, in eager mode: nothing is traced), and
    scores on ``split`` (``scoring``: as :func:`torch_fx_evaluator`'s). The ranking of
    a model torch.fx cannot trace, which torch converts in dynamic int8 only. The kernels
    are the host's dynamic linear ones: int8 weights, activations quantized on each call
    from their own range, so no fixed range to saturate.
    """
    import torch

    from nnsweep.core.config import Granularity, QuantConfig, QuantMode
    from nnsweep.models import takes_batches
    from nnsweep.runtimes.common.fx import quantized_engine
    from nnsweep.runtimes.torch.converter import quantize_dynamic_linears, without_mha_fastpath

    granularity = Granularity.PER_CHANNEL if per_channel else Granularity.PER_TENSOR
    inputs = torch.from_numpy(split.inputs)
    scored = scoring or Top1Scoring(bundle, split, reference_outputs(bundle, split))
    batched = takes_batches(bundle)

    def evaluate(keep: frozenset[str]) -> Score:
        quant = QuantConfig(mode=QuantMode.DYNAMIC_INT8, granularity=granularity, float_layers=tuple(sorted(keep)))
        with quantized_engine(engine), torch.no_grad(), without_mha_fastpath(True):
            model = quantize_dynamic_linears(bundle, quant)
            outputs = scored.outputs(model, inputs, batched).numpy()
        return scored(outputs)

    return evaluate
