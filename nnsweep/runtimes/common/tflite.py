"""Reading, writing and editing ``.tflite`` flatbuffers, for the ``litert`` and ``armnn`` converters.

LiteRT's own schema bindings read and write the model, so no TensorFlow is needed. The
primitives (:func:`load`, :func:`save`, :func:`operators`, :func:`add_tensor`, ...) serve the
edits below and :mod:`nnsweep.runtimes.armnn.tflite`. LiteRT's edits:

- :func:`float_interface`: a ``QUANTIZE``/``DEQUANTIZE`` at the edges so an int8 model takes
  and returns float32 (``core``).
- :func:`symmetric_embedding_tables`: requantize embedding tables symmetrically, which
  LiteRT's ``EMBEDDING_LOOKUP`` requires.
- :func:`consistent_bias_scales`: requantize a bias whose scale is not input scale times
  weight scale, as the int8 kernels assume.
- :func:`int8_io`: the quantization of a ``full`` model's input and output.
"""

from __future__ import annotations

from pathlib import Path

import flatbuffers
import numpy as np
from ai_edge_litert import schema_py_generated as schema

from nnsweep.core.artifact import IOSpec
from nnsweep.core.errors import ConversionError

__all__ = [
    "NUMPY_OF",
    "add_buffer",
    "add_tensor",
    "builtin_code",
    "constant",
    "float_interface",
    "int8_io",
    "load",
    "opcode",
    "operators",
    "quant_scales",
    "save",
    "symmetric_embedding_tables",
    "tensor_name",
]

_IDENTIFIER = b"TFL3"
_OP_NAMES = {value: name for name, value in vars(schema.BuiltinOperator).items() if not name.startswith("_")}
# What a model's input or output may be and need no QUANTIZE or DEQUANTIZE at the edge: float,
# or integers that are not quantized values (token ids in, the classes of an argmax out);
# unquantized uint8 (pixels in) is plain too (:func:`_plain`).
_PLAIN_TYPES = (schema.TensorType.FLOAT32, schema.TensorType.INT32, schema.TensorType.INT64)
# The numpy type of each tensor type the edits read or write.
NUMPY_OF = {
    schema.TensorType.FLOAT32: np.float32,
    schema.TensorType.INT8: np.int8,
    schema.TensorType.UINT8: np.uint8,
    schema.TensorType.INT32: np.int32,
}


def load(path: Path) -> schema.ModelT:
    """The model in ``path`` as mutable objects."""
    return schema.ModelT.InitFromPackedBuf(path.read_bytes(), 0)


def save(model: schema.ModelT, path: Path) -> None:
    """Write ``model`` to ``path`` as a ``.tflite`` flatbuffer."""
    builder = flatbuffers.Builder(0)
    builder.Finish(model.Pack(builder), file_identifier=_IDENTIFIER)
    path.write_bytes(bytes(builder.Output()))


def builtin_code(model: schema.ModelT, op: schema.OperatorT) -> int:
    """The builtin operator code of ``op`` (a ``schema.BuiltinOperator`` value)."""
    code = model.operatorCodes[op.opcodeIndex]
    # Codes above 127 live in builtinCode only; older files set deprecatedBuiltinCode only.
    return int(max(code.builtinCode, code.deprecatedBuiltinCode))


def operators(model: schema.ModelT) -> list[str]:
    """Operator names of the main subgraph in execution order (``CONV_2D``, ...)."""
    return [_OP_NAMES.get(builtin_code(model, op), "CUSTOM") for op in model.subgraphs[0].operators]


def opcode(model: schema.ModelT, builtin: int, version: int) -> int:
    """The index of ``builtin``'s operator code in ``model`` (added if absent), at least ``version``."""
    for i, code in enumerate(model.operatorCodes):
        if max(code.builtinCode, code.deprecatedBuiltinCode) == builtin:
            code.version = max(code.version, version)
            return i
    code = schema.OperatorCodeT()
    code.builtinCode = builtin
    code.deprecatedBuiltinCode = min(builtin, 127)
    code.version = version
    model.operatorCodes.append(code)
    return len(model.operatorCodes) - 1


def add_buffer(model: schema.ModelT, data: np.ndarray) -> int:
    """Append a buffer holding ``data``'s bytes; return its index."""
    buffer = schema.BufferT()
    buffer.data = np.frombuffer(np.ascontiguousarray(data).tobytes(), dtype=np.uint8)
    model.buffers.append(buffer)
    return len(model.buffers) - 1


def constant(model: schema.ModelT, tensor: schema.TensorT, dtype: type) -> np.ndarray:
    """The values of a constant ``tensor`` (its buffer read as ``dtype``), in its shape."""
    raw = np.asarray(model.buffers[tensor.buffer].data, dtype=np.uint8).tobytes()
    return np.frombuffer(raw, dtype=dtype).reshape(tuple(int(d) for d in tensor.shape))


def add_tensor(subgraph: schema.SubGraphT, tensor: schema.TensorT) -> int:
    """Append ``tensor`` to ``subgraph``; return its index."""
    subgraph.tensors.append(tensor)
    return len(subgraph.tensors) - 1


def tensor_name(tensor: schema.TensorT) -> str:
    """``tensor``'s name as text."""
    name = tensor.name
    return name.decode() if isinstance(name, bytes) else str(name or "tensor")


def quant_scales(tensor: schema.TensorT) -> np.ndarray | None:
    """``tensor``'s quantization scales (one, or one per channel), or None when it is not quantized."""
    q = tensor.quantization
    if q is None or q.scale is None or len(q.scale) == 0:
        return None
    return np.asarray(q.scale, dtype=np.float64)


def symmetric_embedding_tables(model: schema.ModelT) -> int:
    """Requantize every int8 ``EMBEDDING_LOOKUP`` table with a non-zero zero point to
    symmetric int8 (zero point 0, scale ``max|w| / 127`` per tensor or per quantized
    dimension, as it was); return how many. The table is dequantized and rounded again,
    which costs at most half a new step per value."""
    subgraph = model.subgraphs[0]
    fixed = 0
    for op in subgraph.operators:
        if builtin_code(model, op) != schema.BuiltinOperator.EMBEDDING_LOOKUP or len(op.inputs) < 2:
            continue
        table = subgraph.tensors[int(op.inputs[1])]
        q, scales = table.quantization, quant_scales(table)
        if table.type != schema.TensorType.INT8 or scales is None or q.zeroPoint is None or not np.any(q.zeroPoint):
            continue
        buffer = model.buffers[table.buffer]
        values = constant(model, table, np.int8).astype(np.float64)
        axis = int(q.quantizedDimension or 0) if len(scales) > 1 else None
        shape = [-1 if d == axis else 1 for d in range(values.ndim)]
        zero = np.asarray(q.zeroPoint, dtype=np.float64)
        weights = (values - zero.reshape(shape)) * scales.reshape(shape)
        reduce = tuple(d for d in range(values.ndim) if d != axis)
        new_scales = np.maximum(np.abs(weights).max(axis=reduce), np.finfo(np.float32).tiny) / 127.0
        requantized = np.clip(np.round(weights / np.reshape(new_scales, shape)), -127, 127).astype(np.int8)
        buffer.data = np.frombuffer(requantized.tobytes(), dtype=np.uint8)
        q.scale = np.atleast_1d(new_scales).astype(np.float32)
        q.zeroPoint = np.zeros(len(q.scale), dtype=np.int64)
        fixed += 1
    return fixed


# op -> (input, weights, bias) positions of its operands
_BIASED = {
    schema.BuiltinOperator.CONV_2D: (0, 1, 2),
    schema.BuiltinOperator.CONV_3D: (0, 1, 2),
    schema.BuiltinOperator.DEPTHWISE_CONV_2D: (0, 1, 2),
    schema.BuiltinOperator.FULLY_CONNECTED: (0, 1, 2),
    schema.BuiltinOperator.TRANSPOSE_CONV: (2, 1, 3),
}


def consistent_bias_scales(model: schema.ModelT) -> list[str]:
    """Requantize every int32 bias whose scale is not its op's input scale times its
    weight scale (per output channel); return a note per bias requantized.

    TFLite's int8 kernels never read a bias's own scale: they add its integers as if
    they were in units of ``input_scale * weight_scale``. A bias written for another
    input scale is then added scaled by the ratio of the two. The bias keeps its values
    (dequantized and rounded again at the scale the kernels assume; at most half a step
    of ``input_scale * weight_scale`` each).
    """
    notes = []
    for subgraph in model.subgraphs:
        for number, op in enumerate(subgraph.operators):
            code = builtin_code(model, op)
            positions = _BIASED.get(code)
            inputs = list(op.inputs)
            if positions is None or len(inputs) <= positions[2] or inputs[positions[2]] < 0:
                continue
            data, weights, bias = (subgraph.tensors[inputs[i]] for i in positions)
            data_scale, weight_scales, bias_scales = quant_scales(data), quant_scales(weights), quant_scales(bias)
            if bias.type != schema.TensorType.INT32 or data_scale is None or weight_scales is None:
                continue
            if bias_scales is None or len(data_scale) != 1 or model.buffers[bias.buffer].data is None:
                continue  # a bias computed at run time, or an input quantized per channel
            wanted = data_scale[0] * weight_scales
            if np.allclose(bias_scales, wanted, rtol=1e-4, atol=0):
                continue
            values = constant(model, bias, np.int32).astype(np.float64) * bias_scales
            requantized = np.clip(np.round(values / wanted), np.iinfo(np.int32).min, np.iinfo(np.int32).max)
            model.buffers[bias.buffer].data = np.frombuffer(requantized.astype(np.int32).tobytes(), dtype=np.uint8)
            added = float(np.median(wanted / bias_scales))  # what the kernels add, per unit of bias
            bias.quantization.scale = np.atleast_1d(wanted).astype(np.float32)
            bias.quantization.zeroPoint = np.zeros(len(bias.quantization.scale), dtype=np.int64)
            notes.append(
                f"{_OP_NAMES[code]} #{number}: litert-torch wrote its bias for another input "
                f"scale than its input's, so the int8 kernels would have added {added:.3g}x the bias; requantized"
            )
    return notes


def _plain(tensor: schema.TensorT) -> bool:
    """Whether a model's input or output is values as they are, with no QUANTIZE or DEQUANTIZE
    to add: float, integers (:data:`_PLAIN_TYPES`), or uint8 without quantization parameters
    (a camera's pixels, which the model casts to float itself)."""
    return tensor.type in _PLAIN_TYPES or (tensor.type == schema.TensorType.UINT8 and quant_scales(tensor) is None)


def _io_tensor(subgraph: schema.SubGraphT, index: int, what: str) -> tuple[schema.TensorT, float, int]:
    tensor = subgraph.tensors[index]
    scales = quant_scales(tensor)
    q = tensor.quantization
    if tensor.type not in (schema.TensorType.INT8, schema.TensorType.UINT8) or scales is None or len(scales) != 1:
        raise ConversionError(f"the model's {what} is not a per-tensor quantized int8/uint8 tensor")
    zero_point = int(q.zeroPoint[0]) if q.zeroPoint is not None and len(q.zeroPoint) else 0
    return tensor, float(scales[0]), zero_point


def int8_io(model: schema.ModelT) -> IOSpec:
    """The ``full`` interface of a quantized model: its input and output quantization.

    Raises:
        ConversionError: the model does not have one quantized input and output.
    """
    subgraph = model.subgraphs[0]
    if len(subgraph.inputs) != 1 or len(subgraph.outputs) != 1:
        raise ConversionError("the full interface needs a model with one input and one output: use interface core")
    if _plain(subgraph.tensors[int(subgraph.inputs[0])]):
        raise ConversionError(
            "the model's input is not quantized (a float input, token ids or pixels it casts itself); the full "
            "interface takes a quantized one: use interface core"
        )
    t_in, s_in, z_in = _io_tensor(subgraph, int(subgraph.inputs[0]), "input")
    t_out, s_out, z_out = _io_tensor(subgraph, int(subgraph.outputs[0]), "output")
    return IOSpec(
        input_dtype=np.dtype(NUMPY_OF[t_in.type]).name,
        output_dtype=np.dtype(NUMPY_OF[t_out.type]).name,
        input_scale=s_in,
        input_zero_point=z_in,
        output_scale=s_out,
        output_zero_point=z_out,
    )


def _float_twin(subgraph: schema.SubGraphT, index: int, suffix: str) -> int:
    """A float32 tensor shaped like tensor ``index``; the quantized one is renamed."""
    quantized = subgraph.tensors[index]
    twin = schema.TensorT()
    twin.shape = np.array(quantized.shape, dtype=np.int32)
    if quantized.shapeSignature is not None:
        twin.shapeSignature = np.array(quantized.shapeSignature, dtype=np.int32)
    twin.type = schema.TensorType.FLOAT32
    twin.buffer = 0  # buffer 0 is the empty buffer of every tensor without data
    twin.name = quantized.name  # the float tensor keeps the name callers bind to
    quantized.name = f"{tensor_name(quantized)}/{suffix}"
    return add_tensor(subgraph, twin)


def float_interface(model: schema.ModelT) -> None:
    """Make a ``full`` int8 model take and return float32 (the ``core`` interface).

    One ``QUANTIZE`` goes before the input and one ``DEQUANTIZE`` after each output, so a
    model with several outputs (detection heads) returns each of them as float32.

    Raises:
        ConversionError: the model does not have one quantized input and quantized outputs.
    """
    subgraph = model.subgraphs[0]
    if len(subgraph.inputs) != 1:
        raise ConversionError(f"the model has {len(subgraph.inputs)} inputs; nnsweep deploys models with one")
    q_in = int(subgraph.inputs[0])
    # An end already float (a first or last layer kept in float, quant.float_layers) or integer (an
    # argmax's classes) stays as it is.
    q_outs = [int(t) for t in subgraph.outputs if not _plain(subgraph.tensors[int(t)])]
    # A float input (its first layer kept in float), token ids (an embedding's lookup) or pixels
    plain_input = _plain(subgraph.tensors[q_in])
    if not plain_input:
        _io_tensor(subgraph, q_in, "input")
    for q_out in q_outs:
        _io_tensor(subgraph, q_out, "output")
    f_in = q_in if plain_input else _float_twin(subgraph, q_in, "quantized")
    # Version 2 of QUANTIZE and DEQUANTIZE is the one for int8 (version 1: uint8).
    quantize = schema.OperatorT()
    quantize.opcodeIndex = opcode(model, schema.BuiltinOperator.QUANTIZE, 2)
    quantize.inputs = np.array([f_in], dtype=np.int32)
    quantize.outputs = np.array([q_in], dtype=np.int32)
    twins: dict[int, int] = {}
    dequantizes: list[schema.OperatorT] = []
    for q_out in q_outs:
        twins[q_out] = _float_twin(subgraph, q_out, "quantized")
        dequantize = schema.OperatorT()
        dequantize.opcodeIndex = opcode(model, schema.BuiltinOperator.DEQUANTIZE, 2)
        dequantize.inputs = np.array([q_out], dtype=np.int32)
        dequantize.outputs = np.array([twins[q_out]], dtype=np.int32)
        dequantizes.append(dequantize)
    subgraph.operators = [*([] if plain_input else [quantize]), *subgraph.operators, *dequantizes]
    subgraph.inputs = np.array([f_in], dtype=np.int32)
    subgraph.outputs = np.array([twins.get(int(q), int(q)) for q in subgraph.outputs], dtype=np.int32)
    for signature in model.signatureDefs or ():
        for binding in signature.inputs or ():
            if binding.tensorIndex == q_in:
                binding.tensorIndex = f_in
        for binding in signature.outputs or ():
            binding.tensorIndex = twins.get(binding.tensorIndex, binding.tensorIndex)
