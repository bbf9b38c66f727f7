"""ONNX Runtime's own quantizer options (``quant.options.*``) and the combination its
quantizer refuses, as its registry entry declares them."""

from __future__ import annotations

from nnsweep.core.options import RefusedOptions
from nnsweep.core.quant import QuantMode, QuantOption

__all__ = ["ONNXRUNTIME_OPTIONS", "ONNXRUNTIME_REFUSED"]

# onnxruntime.quantization's own knobs (1.32). quantize_static takes all four; quantize_dynamic
# writes QOperator (ConvInteger, MatMulInteger) with uint8 activations quantized at run time
# (DynamicQuantizeLinear), so only the weights' type and reduce_range are choices there.
# Every combination below converts and runs on digits (benchmarks/results/onnxruntime_options.md has the figures).
_INT8_MODES = frozenset({QuantMode.DYNAMIC_INT8, QuantMode.STATIC_INT8})
ONNXRUNTIME_OPTIONS = (
    QuantOption(
        "quant_format",
        ("qdq", "qoperator"),
        frozenset({QuantMode.STATIC_INT8}),
        "qdq: QuantizeLinear/DequantizeLinear pairs around float ops, which ORT fuses into int8 kernels; "
        "qoperator: the quantized operators themselves (QLinearConv, QGemm)",
    ),
    QuantOption(
        "activation_type",
        ("uint8", "int8"),
        frozenset({QuantMode.STATIC_INT8}),
        "activations asymmetric uint8 or int8 (dynamic int8 quantizes them to uint8 at run time)",
    ),
    QuantOption("weight_type", ("int8", "uint8"), _INT8_MODES, "weights int8 or uint8"),
    QuantOption(
        "reduce_range",
        (False, True),
        _INT8_MODES,
        "weights quantized to 7 bits, against int16 overflow in the u8s8 kernels of x86 CPUs without VNNI",
    ),
    QuantOption(
        "int4_activations",
        ("float", "int8"),
        frozenset({QuantMode.INT4_WEIGHT}),
        "what MatMulNBits multiplies the 4-bit weights with: float32 activations (its default), or "
        "activations quantized to int8 at run time (accuracy_level 4, as ExecuTorch's 8da4w)",
    ),
)
ONNXRUNTIME_REFUSED = (
    RefusedOptions(
        (("activation_type", "int8"), ("weight_type", "uint8")),
        "ONNX Runtime's quantizer refuses int8 activations with uint8 weights "
        "(check_static_quant_arguments); take uint8 activations or int8 weights",
    ),
)
