"""ExecuTorch's registry entry: what it can do, and where each of its pieces lives."""

from __future__ import annotations

from nnsweep.core.quant import Calibration, QuantMode
from nnsweep.core.runtimes import ETHOS_U_TARGETS, INT8_GRANULARITIES, NO_GRANULARITY, RuntimeInfo
from nnsweep.runtimes.ethosu.info import ETHOS_U_WHOLE_MODEL

__all__ = ["BINDING_MODULES", "INFO", "MEASURE_PEAK_MB"]

# What the runner's bindings import, in order, when it loads its first program; a warm
# worker imports them before it forks (where torch is absent, a lite board, the runner is
# the torch-free one, with nothing to preload).
BINDING_MODULES = ("torch", "executorch.kernels.quantized", "executorch.extension.pybindings._C")

# Peak resident memory (MB, VmHWM) of its measuring process on the emulated Cortex-A72
# board running digits (benchmarks/arm_sim.py; benchmarks/results/arm_sim.md): 917, torch imported;
# the torch-free runner of a lite agent (nnsweep.runtimes.executorch.etlite), which its
# probe records as ``versions["executorch-runner"]``, 83.
MEASURE_PEAK_MB = {"": 920, "executorch-runner": 90}

INFO = RuntimeInfo(
    name="executorch",
    mixed_precision=None,  # its converter keeps quant.float_layers in float
    probe="nnsweep.runtimes.executorch.probe:backends",
    backends=("xnnpack", *ETHOS_U_TARGETS, "portable"),
    fallback="portable",
    modes={
        QuantMode.FP32: NO_GRANULARITY,
        QuantMode.FP16: NO_GRANULARITY,
        QuantMode.DYNAMIC_INT8: INT8_GRANULARITIES,
        QuantMode.STATIC_INT8: INT8_GRANULARITIES,
        QuantMode.INT4_WEIGHT: NO_GRANULARITY,  # grouped: quant.group_size
        QuantMode.QAT_INT8: INT8_GRANULARITIES,
    },
    unsupported={
        QuantMode.A16W8: "ExecuTorch's XNNPACK quantizer has no 16-bit activation scheme (its configurations "
        "quantize activations to int8, the only activations XNNPACK's quantized operators take); use an Ethos-U "
        "target, litert or onnxruntime for a16w8",
    },
    full_interface=frozenset({QuantMode.STATIC_INT8, QuantMode.QAT_INT8}),
    calibrations=frozenset({Calibration.MINMAX, Calibration.HISTOGRAM}),
    delegates=True,
    converter="nnsweep.runtimes.executorch.converter:ExecuTorchConverter",
    decoder="nnsweep.runtimes.executorch.decoder:convert_decoder",
    decoder_modes=frozenset({QuantMode.FP32, QuantMode.DYNAMIC_INT8, QuantMode.INT4_WEIGHT}),
    runner="nnsweep.runtimes.executorch.runner:ExecuTorchRunner",
    packages=("executorch", "torch", "torchao", "ethos-u-vela", "tosa-tools"),
    artifact_suffix=".pte",
    default_backends=("xnnpack", "portable"),
    whole_model=ETHOS_U_WHOLE_MODEL,
    sensitivity="nnsweep.runtimes.executorch.sensitivity:evaluator",
    profiler="nnsweep.runtimes.executorch.profile:profile",
    explainer="nnsweep.runtimes.executorch.explain:explain",
    measure_peak_mb=MEASURE_PEAK_MB,
    preload=BINDING_MODULES,
    failure_detail="nnsweep.runtimes.executorch.failures:detail",
    # A .pte's flatbuffer schema and its delegates' payloads change between releases, and an
    # older runtime reports a newer program as an unreadable file (or runs it wrongly).
    same_release="executorch",
)
