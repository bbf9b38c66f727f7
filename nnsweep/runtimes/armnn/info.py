"""Arm NN's registry entry: what it can do, and where each of its pieces lives."""

from __future__ import annotations

from nnsweep.core.quant import Calibration, Granularity, QuantMode
from nnsweep.core.runtimes import NO_GRANULARITY, RuntimeInfo
from nnsweep.runtimes.litert.info import TFLITE_PACKAGES, TFLITE_UNSUPPORTED

__all__ = ["ARMNN_BACKENDS", "INFO", "SYSTEM_PYTHON"]

# Arm NN's backends in its own preference order;
# CpuRef, the reference kernels, runs every layer Arm NN parses.
ARMNN_BACKENDS = ("GpuAcc", "CpuAcc", "CpuRef")
# Debian's python3-pyarmnn is built for the system Python, not the project's environment.
SYSTEM_PYTHON = "/usr/bin/python3"
_ARMNN_UNSUPPORTED = {
    **TFLITE_UNSUPPORTED,
    # Measured: litert-torch's dynamic-range .tflite parses, then Optimize refuses it.
    QuantMode.DYNAMIC_INT8: "Arm NN 20.08 has no hybrid layers: its backends refuse a FULLY_CONNECTED "
    "with float32 input and int8 weights ('input and weights types mismatched'), which dynamic int8 "
    "(LiteRT's dynamic range) is made of; use litert, onnxruntime, executorch or torch for dynamic int8",
    # Measured the same way on LiteRT's a16w8 .tflite (int16 activations, int8 weights).
    QuantMode.A16W8: "Arm NN 20.08's TFLite parser has no INT64 tensors ('Unsupported data type = INT64'), "
    "and a16w8's convolutions and FULLY_CONNECTED layers (int16 activations, int8 weights) take int64 biases; "
    "use litert for a16w8",
    QuantMode.INT4_WEIGHT: "Arm NN 20.08 has neither 4-bit weights nor hybrid layers; "
    "use executorch, onnxruntime or litert for int4_weight",
}

INFO = RuntimeInfo(
    name="armnn",
    profiler="nnsweep.runtimes.armnn.profile:profile",
    no_explainer="PyArmNN hands back only the network's outputs (its debug layers print intermediates to stdout)",
    mixed_precision=None,  # its converter keeps quant.float_layers in float
    probe="nnsweep.runtimes.armnn.probe:backends",
    backends=ARMNN_BACKENDS,
    fallback="CpuRef",
    # Arm NN 20.08's reference backend aborts the process (an assertion in
    # GetBiasTypeFromWeightsType) on per-channel int8 weights: per-tensor only.
    # fp16: its TFLite parser has no FLOAT16 tensors (benchmarks/results/coverage.md, "Arm NN 20.08
    # and fp16"), so the fp32 .tflite goes to its optimizer's ReduceFp32ToFp16 (the converter's note).
    modes={
        QuantMode.FP32: NO_GRANULARITY,
        QuantMode.FP16: NO_GRANULARITY,
        QuantMode.STATIC_INT8: frozenset({Granularity.PER_TENSOR}),
    },
    unsupported=_ARMNN_UNSUPPORTED,
    full_interface=frozenset({QuantMode.STATIC_INT8}),
    calibrations=frozenset({Calibration.MINMAX, Calibration.HISTOGRAM}),
    delegates=False,
    no_partitions="Arm NN assigns each layer to the first backend in the order that supports it "
    "and has no partition limits",
    converter="nnsweep.runtimes.armnn.converter:ArmNNConverter",
    runner="nnsweep.runtimes.armnn.runner:ArmNNRunner",
    packages=TFLITE_PACKAGES,
    artifact_suffix=".tflite",
    default_backends=("CpuAcc", "CpuRef"),
    python=SYSTEM_PYTHON,
    sensitivity="nnsweep.runtimes.armnn.sensitivity:evaluator",
    measure_peak_mb={"": 140},
)
