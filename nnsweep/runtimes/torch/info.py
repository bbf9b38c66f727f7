"""torch's registry entry: what it can do, and where each of its pieces lives."""

from __future__ import annotations

from nnsweep.core.quant import Calibration, Granularity, QuantMode
from nnsweep.core.runtimes import INT8_GRANULARITIES, NO_GRANULARITY, RuntimeInfo

__all__ = ["INFO"]

INFO = RuntimeInfo(
    name="torch",
    mixed_precision=None,  # its converter keeps quant.float_layers in float
    probe="nnsweep.runtimes.torch.probe:backends",
    backends=("x86", "fbgemm", "qnnpack", "onednn", "nnapi"),
    fallback=None,
    modes={
        QuantMode.FP32: NO_GRANULARITY,
        QuantMode.FP16: NO_GRANULARITY,
        QuantMode.DYNAMIC_INT8: INT8_GRANULARITIES,
        QuantMode.STATIC_INT8: INT8_GRANULARITIES,
        QuantMode.QAT_INT8: INT8_GRANULARITIES,
    },
    unsupported={
        QuantMode.INT4_WEIGHT: "its TorchScript artifacts run the quantized engines' int8 kernels, which have no "
        "4-bit weights; use executorch, onnxruntime or litert for int4_weight",
        QuantMode.A16W8: "PyTorch's quantized engines (x86, fbgemm, qnnpack, onednn) have no 16-bit activation "
        "kernels: quantized::conv2d and quantized::linear take quint8 activations; use litert or onnxruntime "
        "for a16w8",
    },
    full_interface=frozenset({QuantMode.STATIC_INT8, QuantMode.QAT_INT8}),
    calibrations=frozenset({Calibration.MINMAX, Calibration.HISTOGRAM}),
    delegates=False,
    converter="nnsweep.runtimes.torch.converter:TorchConverter",
    runner="nnsweep.runtimes.torch.runner:TorchScriptRunner",
    packages=("torch",),
    engine_backends=True,
    artifact_suffix=".pt",
    default_backends=("x86", "qnnpack"),
    # PyTorch Mobile's NNAPI path: convert_model_to_nnapi takes
    # the whole model, fp32 or int8 with per-tensor weights only.
    whole_model={
        "nnapi": {
            QuantMode.FP32: NO_GRANULARITY,
            QuantMode.STATIC_INT8: frozenset({Granularity.PER_TENSOR}),
            QuantMode.QAT_INT8: frozenset({Granularity.PER_TENSOR}),
        }
    },
    sensitivity="nnsweep.runtimes.torch.sensitivity:evaluator",
    profiler="nnsweep.runtimes.torch.profile:profile",
    explainer="nnsweep.runtimes.torch.explain:explain",
    # its rankings score the quantizer's arithmetic, not the host's kernels (sensitivity/rank.py)
    sensitivity_settings={"scored": "quantizer_arithmetic"},
    measure_peak_mb={"": 720},
    device_tool="nnsweep.runtimes.torch.device_tool:TOOL",
)
