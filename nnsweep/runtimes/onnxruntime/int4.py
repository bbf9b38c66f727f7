"""ONNX Runtime's ``int4_weight``: ``MatMulNBitsQuantizer`` on the exported float model.

``MatMulNBits`` replaces only a ``MatMul`` whose second input is a constant: a linear layer
on a batch of vectors exports as ``Gemm``, which the quantizer passes over, so each Gemm
becomes a MatMul and an Add first (ONNX Runtime's own rewrite, the one ``quantize_dynamic``
does). A MatMul whose input features the group size does not divide is excluded and stays
float, as :mod:`nnsweep.runtimes.common.int4` decides for every runtime.
"""

from __future__ import annotations

import logging
from pathlib import Path

import onnx

from nnsweep.core.errors import ConversionError
from nnsweep.runtimes.common.converter import package_warnings_to_debug_log
from nnsweep.runtimes.common.float_region import onnx_nodes_in
from nnsweep.runtimes.common.int4 import Int4Plan

__all__ = ["quantize_int4"]

_log = logging.getLogger(__name__)


def quantize_int4(source: Path, target: Path, layers: Int4Plan, int8_activations: bool = False) -> tuple[str, ...]:
    """Write ``source`` with 4-bit weights (symmetric, blocks of ``layers.group_size``) to
    ``target``, multiplied with float32 activations or, with ``int8_activations``, with
    activations quantized to int8 at run time (``accuracy_level`` 4); return what the
    partition report adds to ``layers.notes()``: the linear layers of the plan that did not
    become a ``MatMulNBits`` (none, when each exported as a MatMul or Gemm on a constant weight).

    Raises:
        ConversionError: no MatMul of the model took 4-bit weights.
    """
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    from onnxruntime.quantization.onnx_model import ONNXModel

    model = ONNXModel(onnx.load(str(source)))
    model.replace_gemm_with_matmul()
    weights = {init.name: init for init in model.model.graph.initializer}
    excluded = []
    for node in model.model.graph.node:
        weight = weights.get(node.input[1]) if node.op_type == "MatMul" and len(node.input) > 1 else None
        if weight is not None and len(weight.dims) == 2 and weight.dims[0] % layers.group_size:
            excluded.append(node.name)  # in_features (K) not a multiple of the group: float, as planned
    # the layers the plan leaves float (quant.float_layers): their nodes, by the scoped export's names
    excluded += onnx_nodes_in(model.model, [path for path, _ in layers.left_float])
    quantizer = MatMulNBitsQuantizer(
        model.model,
        bits=4,
        block_size=layers.group_size,
        is_symmetric=True,
        accuracy_level=4 if int8_activations else None,
        nodes_to_exclude=excluded,
    )
    with package_warnings_to_debug_log(_log, "onnxruntime"):  # a line per node it passes over
        quantizer.process()
    quantized = ONNXModel(quantizer.model.model)
    quantized.remove_unused_constant()  # the float weights each MatMulNBits replaced
    quantized.save_model_to_file(str(target), use_external_data_format=False)
    four_bit = sum(node.op_type == "MatMulNBits" for node in quantized.model.graph.node)
    if not four_bit:
        raise ConversionError(
            "int4_weight: no MatMul of the exported model has a constant weight whose rows the group size "
            f"{layers.group_size} divides, so nothing took 4-bit weights"
        )
    missing = len(layers.four_bit) - four_bit
    if missing <= 0:
        return ()
    return (
        f"int4_weight: {missing} of the {len(layers.four_bit)} linear layers planned 4-bit stay float on "
        "onnxruntime: they did not export as a MatMul or Gemm on a constant weight",
    )
