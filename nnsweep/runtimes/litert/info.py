"""LiteRT's registry entry: what it can do, and where each of its pieces lives."""

from __future__ import annotations

from nnsweep.core.quant import Calibration, QuantMode
from nnsweep.core.runtimes import INT8_GRANULARITIES, NO_GRANULARITY, RuntimeInfo

__all__ = ["INFO", "TFLITE_PACKAGES", "TFLITE_UNSUPPORTED"]

# litert-torch's PT2E int8 and Arm NN's TFLite parser, as measured with litert-torch 0.10
# and Arm NN 20.08 (Debian's; library version 22.0); see its converter and Arm NN's.
TFLITE_UNSUPPORTED = {
    QuantMode.QAT_INT8: "QAT is not wired into nnsweep's .tflite path yet; use executorch or torch",
}
TFLITE_PACKAGES = ("litert-torch", "ai-edge-litert", "torch", "torchao")

INFO = RuntimeInfo(
    name="litert",
    no_profiler="its Python Interpreter has no per-operator profiler (benchmark_model --enable_op_profiling has)",
    mixed_precision=None,  # its converter keeps quant.float_layers in float
    probe="nnsweep.runtimes.litert.probe:backends",
    # The XNNPACK delegate, then LiteRT's builtin CPU kernels for what it does not take.
    backends=("xnnpack", "cpu"),
    fallback="cpu",
    modes={
        QuantMode.FP32: NO_GRANULARITY,
        QuantMode.FP16: NO_GRANULARITY,  # float16 weights by ai-edge-quantizer
        QuantMode.DYNAMIC_INT8: INT8_GRANULARITIES,
        QuantMode.STATIC_INT8: INT8_GRANULARITIES,
        QuantMode.INT4_WEIGHT: NO_GRANULARITY,  # grouped: quant.group_size
        QuantMode.A16W8: NO_GRANULARITY,  # ai-edge-quantizer's weights are per channel
    },
    # Measured: a float layer's weights came out int8 with one other layer quantized,
    # every weight float with none (benchmarks/results/mixed_precision.md).
    float_layers_refused={
        QuantMode.DYNAMIC_INT8: "litert-torch 0.10's dynamic-range conversion makes every weight int8 "
        "once one layer is quantized, float layers too"
    },
    unsupported=TFLITE_UNSUPPORTED,
    full_interface=frozenset({QuantMode.STATIC_INT8}),
    calibrations=frozenset({Calibration.MINMAX, Calibration.HISTOGRAM}),
    delegates=False,
    no_partitions="LiteRT's XNNPACK delegate takes every op it supports and has no "
    "max_delegated_partitions/min_nodes_per_partition options (TFLite's GPU, NNAPI and Hexagon delegates do)",
    converter="nnsweep.runtimes.litert.converter:LiteRTConverter",
    runner="nnsweep.runtimes.litert.runner:LiteRTRunner",
    decoder="nnsweep.runtimes.litert.decoder:convert_decoder",
    decoder_modes=frozenset({QuantMode.FP32, QuantMode.INT4_WEIGHT}),
    packages=(*TFLITE_PACKAGES, "ai-edge-quantizer"),  # int4_weight's quantizer
    artifact_suffix=".tflite",
    default_backends=("xnnpack", "cpu"),
    sensitivity="nnsweep.runtimes.litert.sensitivity:evaluator",
    explainer="nnsweep.runtimes.litert.explain:explain",
    measure_peak_mb={"": 110},
    device_tool="nnsweep.runtimes.litert.device_tool:TOOL",
)
