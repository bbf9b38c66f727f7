"""ONNX Runtime's registry entry: what it can do, and where each of its pieces lives."""

from __future__ import annotations

from nnsweep.core.quant import Calibration, QuantMode
from nnsweep.core.runtimes import INT8_GRANULARITIES, NO_GRANULARITY, RuntimeInfo
from nnsweep.runtimes.onnxruntime.options import ONNXRUNTIME_OPTIONS, ONNXRUNTIME_REFUSED

__all__ = ["INFO"]

INFO = RuntimeInfo(
    name="onnxruntime",
    mixed_precision=None,  # its converter keeps quant.float_layers in float
    probe="nnsweep.runtimes.onnxruntime.probe:backends",
    backends=("cpu", "xnnpack", "acl", "armnn", "nnapi", "openvino", "cuda"),
    fallback="cpu",
    modes={
        QuantMode.FP32: NO_GRANULARITY,
        QuantMode.FP16: NO_GRANULARITY,
        QuantMode.DYNAMIC_INT8: INT8_GRANULARITIES,
        QuantMode.STATIC_INT8: INT8_GRANULARITIES,
        QuantMode.INT4_WEIGHT: NO_GRANULARITY,  # grouped: quant.group_size
        QuantMode.A16W8: NO_GRANULARITY,  # int16 activations, int8 weights per channel (QDQ)
    },
    unsupported={
        QuantMode.QAT_INT8: "ONNX Runtime quantizes an exported graph and has no training loop; "
        "use executorch or torch for QAT",
    },
    full_interface=frozenset({QuantMode.STATIC_INT8}),
    calibrations=frozenset({Calibration.MINMAX, Calibration.ENTROPY, Calibration.PERCENTILE}),
    delegates=False,
    converter="nnsweep.runtimes.onnxruntime.converter:OnnxRuntimeConverter",
    decoder="nnsweep.runtimes.onnxruntime.decoder:convert_decoder",
    decoder_modes=frozenset({QuantMode.FP32, QuantMode.DYNAMIC_INT8, QuantMode.INT4_WEIGHT}),
    runner="nnsweep.runtimes.onnxruntime.runner:OnnxRuntimeRunner",
    packages=("onnxruntime", "onnx", "onnxscript", "torch"),
    artifact_suffix=".onnx",
    default_backends=("cpu",),
    quant_options=ONNXRUNTIME_OPTIONS,
    refused_options=ONNXRUNTIME_REFUSED,
    sensitivity="nnsweep.runtimes.onnxruntime.sensitivity:evaluator",
    profiler="nnsweep.runtimes.onnxruntime.profile:profile",
    explainer="nnsweep.runtimes.onnxruntime.explain:explain",
    # its rankings score the quantizer's arithmetic, not the host's kernels (sensitivity/rank.py)
    sensitivity_settings={"scored": "quantizer_arithmetic"},
    measure_peak_mb={"": 170},
)
