"""The PT2E runtimes' layer ranking: their quantizer (ExecuTorch's XNNPACK one, litert-torch's)
with the chosen layers left unannotated, calibrated and converted in torch, scored on the
calibration split. Each runtime's own ``sensitivity`` module gives its quantizer and how its
converter prepares a model. Nothing heavy is imported at module level."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from nnsweep.sensitivity.rank import CALIBRATION_SAMPLES, Evaluator, Score, scored_output
from nnsweep.sensitivity.scoring import Scoring

if TYPE_CHECKING:
    import torch

    from nnsweep.core.quant import QuantConfig
    from nnsweep.models import ModelBundle, Split

__all__ = ["pt2e_evaluator"]

log = logging.getLogger(__name__)


def pt2e_evaluator(
    bundle: ModelBundle,
    split: Split,
    per_channel: bool,
    scoring: Scoring,
    *,
    runtime: str,
    quantizer: Callable[[QuantConfig], object],
    prepare: Callable[[torch.nn.Module, object, torch.nn.Module], torch.nn.Module],
) -> Evaluator:
    """An evaluator that quantizes through a PT2E quantizer and runs the quantized
    (fake-quant) program in torch: the quantizer's decisions, not the delegate's kernels.

    Args:
        runtime: the runtime's name, for the debug log.
        quantizer: the runtime's quantizer for a static int8 :class:`QuantConfig`.
        prepare: ``(exported module, quantizer with the float layers, the user's model)``
            -> the module prepared for calibration, as the runtime's converter prepares it.
    """
    import copy

    import torch

    from nnsweep.core.quant import Calibration, Granularity, QuantConfig, QuantMode
    from nnsweep.models import takes_batches
    from nnsweep.runtimes.common import float_fallback
    from nnsweep.runtimes.common.converter import printed_to_debug_log
    from nnsweep.runtimes.common.pt2e import export
    from nnsweep.runtimes.common.ptq_convert import convert_ptq

    quant = QuantConfig(
        mode=QuantMode.STATIC_INT8,
        granularity=Granularity.PER_CHANNEL if per_channel else Granularity.PER_TENSOR,
        calibration=Calibration.MINMAX,
    )
    calibration = torch.from_numpy(bundle.dataset.calibration.inputs[:CALIBRATION_SAMPLES])
    inputs = torch.from_numpy(split.inputs)
    model = copy.deepcopy(bundle.module).eval()
    # One batch each to calibrate and score (digits_outlier 122 -> 33 s on executorch, 127
    # -> 9 s on litert), unless the model takes one sample a call or its shapes specialise
    # on batch 1; then one sample a call, on a batch-1 program.
    graph: torch.export.ExportedProgram | None = None
    if takes_batches(bundle):
        try:
            graph = export(model, bundle.example_input, dynamic_batch=True)
        except Exception:  # toolchain code: the batch-1 program below
            log.debug("the model does not export with a dynamic batch: ranking one sample a call")

    @functools.cache  # exported when first needed
    def one_sample_graph() -> torch.export.ExportedProgram:
        return export(model, bundle.example_input, dynamic_batch=False)

    def evaluate_on(program: torch.export.ExportedProgram, batched: bool, keep: frozenset[str]) -> Score:
        chosen = float_fallback.pt2e_keep_float(quantizer(quant), sorted(keep))
        module = copy.deepcopy(program).module(check_guards=False)
        with printed_to_debug_log(log, f"{runtime} quantizer"):  # litert-torch's annotators print
            prepared = prepare(module, chosen, model)
        with torch.no_grad():
            scored_output(prepared, calibration, bundle, batched)
            outputs = scoring.outputs(convert_ptq(prepared), inputs, batched).numpy()
        return scoring(outputs)

    def evaluate(keep: frozenset[str]) -> Score:
        nonlocal graph
        if graph is not None:
            try:
                return evaluate_on(graph, True, keep)
            except Exception as exc:  # toolchain code: the batch-1 program below
                # litert-torch's quantizer observes a dynamic batch's sizes as if they were
                # tensors (a Swin block's window partition): "'int' object has no attribute 'numel'"
                log.debug("the dynamic-batch program does not quantize (%s): ranking one sample a call", exc)
                graph = None
        return evaluate_on(one_sample_graph(), False, keep)

    return evaluate
