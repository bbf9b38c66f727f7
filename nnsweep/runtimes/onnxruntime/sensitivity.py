"""ONNX Runtime's layer ranking: its own static quantizer (QDQ, min/max), with the chosen
layers excluded (``nodes_to_exclude``), scored on the quantizer's arithmetic. Sits with the
rankings (it imports :mod:`nnsweep.sensitivity.rank`); reached through the registry."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nnsweep.sensitivity.rank import CALIBRATION_SAMPLES, Evaluator, Score, reference_outputs
from nnsweep.sensitivity.scoring import Scoring, Top1Scoring

if TYPE_CHECKING:
    from nnsweep.models import ModelBundle, Split

__all__ = ["evaluator", "onnxruntime_evaluator"]


def evaluator(bundle: ModelBundle, split: Split, per_channel: bool, scoring: Scoring) -> Evaluator:
    """The registry's hook (:attr:`~nnsweep.core.runtimes.RuntimeInfo.sensitivity`)."""
    return onnxruntime_evaluator(bundle, split, per_channel, scoring=scoring)


_UNFUSED_QDQ = "session.disable_quant_qdq"
"""ONNX Runtime's session option that keeps QuantizeLinear/DequantizeLinear pairs as they are."""


def onnxruntime_evaluator(
    bundle: ModelBundle, split: Split, per_channel: bool = False, scoring: Scoring | None = None
) -> Evaluator:
    """An evaluator that quantizes with ONNX Runtime (QDQ, minmax) and scores on ``split``.

    The model is exported once (:func:`~nnsweep.runtimes.common.float_fallback.export_onnx_scoped`);
    each call quantizes with the given layers excluded, on one thread. ``scoring``: what a run
    is scored by (default: top-1 on the labelled ``split``, :class:`Top1Scoring`). QDQ pairs stay unfused
    (``session.disable_quant_qdq``) so the ranking reflects the quantizer's decisions, not the
    host's int8 kernels (which saturate differently on x86 without VNNI).

    The exported and quantized models live in a temporary folder removed when the evaluator
    is collected, or at the latest when the interpreter exits.
    """
    import shutil
    import tempfile
    import weakref
    from pathlib import Path

    import numpy as np
    import onnxruntime as ort

    from nnsweep.runtimes.common import float_fallback

    workdir = Path(tempfile.mkdtemp(prefix="nnsweep-sensitivity-"))
    source = workdir / "model.onnx"
    float_fallback.export_onnx_scoped(bundle.module, bundle.example_input, source)
    prepared = workdir / "prepared.onnx"  # pre-processed once: the same model for every run
    float_fallback.ort_pre_process(source, prepared)
    calibration = bundle.dataset.calibration.inputs[:CALIBRATION_SAMPLES]
    scored = scoring or Top1Scoring(bundle, split, reference_outputs(bundle, split))

    def evaluate(keep: frozenset[str]) -> Score:
        target = workdir / "quantized.onnx"
        samples = (calibration[i : i + 1] for i in range(len(calibration)))
        float_fallback.ort_quantize_prepared(prepared, target, samples, sorted(keep), per_channel)
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.add_session_config_entry(_UNFUSED_QDQ, "1")  # the quantizer's arithmetic, not the host's kernels
        session = ort.InferenceSession(str(target), options, providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        # the outputs come in flatten_outputs' order
        outs = [scored.pick(session.run(None, {name: split.inputs[i : i + 1]})) for i in range(len(split))]
        return scored(np.concatenate(outs))

    weakref.finalize(evaluate, shutil.rmtree, workdir, ignore_errors=True)
    return evaluate
