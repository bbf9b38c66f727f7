"""Edits of ``.tflite`` flatbuffers that the ``litert`` and ``armnn`` converters share.

LiteRT's own schema bindings (``ai_edge_litert.schema_py_generated``, object API)
read and write the model, so no TensorFlow is needed:

- :func:`add_fully_connected_bias`: Arm NN 20.08's TFLite parser rejects a
  ``FULLY_CONNECTED`` whose optional bias is absent (input index -1,
  "'operatorPtr->inputs[i]' must be non-negative"); give it an explicit zero bias.
- :func:`flatten_fully_connected`: Arm NN 20.08 ignores ``FULLY_CONNECTED``'s
  ``keep_num_dims`` and refuses a linear layer on a sequence; make it 2-D and reshape after.
- :func:`float_interface`: litert-torch's int8 models take and return int8 (the
  ``full`` interface); a ``QUANTIZE`` at the input and a ``DEQUANTIZE`` at each
  output make them take and return float32 (``core``), as TensorFlow's converter
  builds int8 models by default.
- :func:`symmetric_embedding_tables`: the converter's dynamic-range mode quantizes an
  embedding's table asymmetrically, which LiteRT's ``EMBEDDING_LOOKUP`` refuses at load
  ("zero_point == 0 was not true"); requantize it symmetrically.
- :func:`half_pixel_resizes`: ``RESIZE_BILINEAR`` ops with ``half_pixel_centers`` (PyTorch's
  ``align_corners=False``), which Arm NN 20.08 reads as without.
- :func:`int8_io`: the quantization of a ``full`` model's input and output.
- :func:`operators`: the operator names in execution order.
"""

from __future__ import annotations

import copy
from pathlib import Path

import flatbuffers
import numpy as np
from ai_edge_litert import schema_py_generated as schema

from nnsweep.core.artifact import IOSpec
from nnsweep.core.errors import ConversionError

__all__ = [
    "add_fully_connected_bias",
    "flatten_fully_connected",
    "float_interface",
    "half_pixel_resizes",
    "int8_io",
    "load",
    "operators",
    "save",
    "symmetric_embedding_tables",
]

_IDENTIFIER = b"TFL3"
_OP_NAMES = {value: name for name, value in vars(schema.BuiltinOperator).items() if not name.startswith("_")}
# What a model's input or output may be and need no QUANTIZE or DEQUANTIZE at the edge: float,
# or integers that are not quantized values (token ids in, the classes of an argmax out).
_PLAIN_TYPES = (schema.TensorType.FLOAT32, schema.TensorType.INT32, schema.TensorType.INT64)
_NUMPY_OF = {schema.TensorType.FLOAT32: np.float32, schema.TensorType.INT8: np.int8, schema.TensorType.UINT8: np.uint8}


def load(path: Path) -> schema.ModelT:
    """The model in ``path`` as mutable objects."""
    return schema.ModelT.InitFromPackedBuf(path.read_bytes(), 0)


def save(model: schema.ModelT, path: Path) -> None:
    builder = flatbuffers.Builder(0)
    builder.Finish(model.Pack(builder), file_identifier=_IDENTIFIER)
    path.write_bytes(bytes(builder.Output()))


def _code(model: schema.ModelT, op: schema.OperatorT) -> int:
    code = model.operatorCodes[op.opcodeIndex]
    # Codes above 127 live in builtinCode only; older files set deprecatedBuiltinCode only.
    return int(max(code.builtinCode, code.deprecatedBuiltinCode))


def operators(model: schema.ModelT) -> list[str]:
    """Operator names of the main subgraph in execution order (``CONV_2D``, ...)."""
    return [_OP_NAMES.get(_code(model, op), "CUSTOM") for op in model.subgraphs[0].operators]


def _opcode(model: schema.ModelT, builtin: int, version: int) -> int:
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


def _add_buffer(model: schema.ModelT, data: np.ndarray) -> int:
    buffer = schema.BufferT()
    buffer.data = np.frombuffer(np.ascontiguousarray(data).tobytes(), dtype=np.uint8)
    model.buffers.append(buffer)
    return len(model.buffers) - 1


def _constant(model: schema.ModelT, tensor: schema.TensorT, dtype: type) -> np.ndarray:
    """The values of a constant ``tensor`` (its buffer read as ``dtype``), in its shape."""
    raw = np.asarray(model.buffers[tensor.buffer].data, dtype=np.uint8).tobytes()
    return np.frombuffer(raw, dtype=dtype).reshape(tuple(int(d) for d in tensor.shape))


def _add_tensor(subgraph: schema.SubGraphT, tensor: schema.TensorT) -> int:
    subgraph.tensors.append(tensor)
    return len(subgraph.tensors) - 1


def _name(tensor: schema.TensorT) -> str:
    name = tensor.name
    return name.decode() if isinstance(name, bytes) else str(name or "tensor")


def _scales(tensor: schema.TensorT) -> np.ndarray | None:
    q = tensor.quantization
    if q is None or q.scale is None or len(q.scale) == 0:
        return None
    return np.asarray(q.scale, dtype=np.float64)


def add_fully_connected_bias(model: schema.ModelT) -> int:
    """Give every bias-less ``FULLY_CONNECTED`` an explicit zero bias; return how many.

    The bias is float32 for float weights, int32 with scale ``input_scale * weight_scale``
    (per tensor or per output channel, zero point 0) for int8 weights, as TFLite requires.

    Raises:
        ConversionError: a weight type this does not know how to bias.
    """
    fixed = 0
    for subgraph in model.subgraphs:
        for op in subgraph.operators:
            if _code(model, op) != schema.BuiltinOperator.FULLY_CONNECTED:
                continue
            inputs = list(op.inputs)
            if len(inputs) >= 3 and inputs[2] >= 0:
                continue
            weights = subgraph.tensors[inputs[1]]
            units = int(weights.shape[0])
            bias = schema.TensorT()
            bias.shape = np.array([units], dtype=np.int32)
            bias.name = f"{_name(weights)}/zero_bias"
            if weights.type == schema.TensorType.FLOAT32:
                bias.type = schema.TensorType.FLOAT32
                bias.buffer = _add_buffer(model, np.zeros(units, np.float32))
            elif weights.type == schema.TensorType.INT8:
                in_scale, w_scale = _scales(subgraph.tensors[inputs[0]]), _scales(weights)
                if in_scale is None or w_scale is None:
                    raise ConversionError("a quantized FULLY_CONNECTED lacks input or weight scales")
                q = schema.QuantizationParametersT()
                q.scale = (in_scale[0] * w_scale).astype(np.float32)
                q.zeroPoint = np.zeros(len(q.scale), dtype=np.int64)
                q.quantizedDimension = 0
                bias.quantization = q
                bias.type = schema.TensorType.INT32
                bias.buffer = _add_buffer(model, np.zeros(units, np.int32))
            else:
                raise ConversionError(f"cannot add a bias to a FULLY_CONNECTED with weight type {weights.type}")
            index = _add_tensor(subgraph, bias)
            op.inputs = np.array([*inputs[:2], index], dtype=np.int32)
            fixed += 1
    return fixed


def flatten_fully_connected(model: schema.ModelT) -> int:
    """Make every ``FULLY_CONNECTED`` that keeps its input's dimensions (``keep_num_dims``,
    a linear layer on a ``(1, T, D)`` sequence) return 2-D, followed by a ``RESHAPE`` back to
    its shape; return how many.

    Arm NN 20.08 ignores ``keep_num_dims``: it infers a 2-D output and refuses the model
    ("TensorShape set on OutputSlot[0] does not match the inferred shape. : [1,16,96] !=
    [16,96]"). The values are the same; only the shape is said by another op.
    """
    changed = 0
    for subgraph in model.subgraphs:
        operators = []
        for op in subgraph.operators:
            operators.append(op)
            options = op.builtinOptions
            if _code(model, op) != schema.BuiltinOperator.FULLY_CONNECTED or not getattr(options, "keepNumDims", False):
                continue
            out = subgraph.tensors[op.outputs[0]]
            shape = np.asarray(out.shape, dtype=np.int32)
            options.keepNumDims = False
            if len(shape) <= 2:
                continue
            flat = copy.copy(out)  # the same type and quantization, 2-D
            flat.shape = np.array([int(np.prod(shape[:-1])), int(shape[-1])], dtype=np.int32)
            flat.shapeSignature = None
            flat.buffer = _add_buffer(model, np.zeros(0, np.uint8))
            flat.name = f"{_name(out)}/2d"
            flat_index = _add_tensor(subgraph, flat)
            target = schema.TensorT()
            target.shape = np.array([len(shape)], dtype=np.int32)
            target.type = schema.TensorType.INT32
            target.buffer = _add_buffer(model, shape)
            target.name = f"{_name(out)}/shape"
            reshape = schema.OperatorT()
            reshape.opcodeIndex = _opcode(model, schema.BuiltinOperator.RESHAPE, 1)
            reshape.inputs = np.array([flat_index, _add_tensor(subgraph, target)], dtype=np.int32)
            reshape.outputs = np.array([op.outputs[0]], dtype=np.int32)
            reshape.builtinOptionsType = schema.BuiltinOptions.ReshapeOptions
            reshape.builtinOptions = schema.ReshapeOptionsT()
            reshape.builtinOptions.newShape = shape
            op.outputs = np.array([flat_index], dtype=np.int32)
            operators.append(reshape)
            changed += 1
        subgraph.operators = operators
    return changed


def split_transpose_conv_bias(model: schema.ModelT) -> int:
    """Move the bias (and fused activation) of every ``TRANSPOSE_CONV`` into an ``ADD`` after
    it; return how many.

    litert-torch writes a ``ConvTranspose2d``'s bias as the op's fourth input, which Arm NN
    20.08's parser refuses ("inputs.size() = 4 is not valid, not in {3}"); its options have no
    fused activation either, so a fused ReLU would be lost. The int8 op's output without the
    bias keeps the output's scale (activations are symmetric for Arm NN, so values below the
    range are ones the bias or the ReLU takes back), and the int32 bias becomes an int8 tensor
    of scale ``max|b| / 127``: half of that step at most is lost per channel.

    Raises:
        ConversionError: a bias type this does not know.
    """
    changed = 0
    for subgraph in model.subgraphs:
        operators = []
        for op in subgraph.operators:
            operators.append(op)
            inputs = [int(i) for i in op.inputs]
            if _code(model, op) != schema.BuiltinOperator.TRANSPOSE_CONV or len(inputs) < 4 or inputs[3] < 0:
                continue
            out = subgraph.tensors[op.outputs[0]]
            mid = copy.copy(out)  # the same type, shape and quantization, before the bias
            mid.buffer = _add_buffer(model, np.zeros(0, np.uint8))
            mid.name = f"{_name(out)}/without_bias"
            mid_index = _add_tensor(subgraph, mid)
            add = schema.OperatorT()
            add.opcodeIndex = _opcode(model, schema.BuiltinOperator.ADD, 1)
            add.inputs = np.array([mid_index, _addend(model, subgraph, inputs)], dtype=np.int32)
            add.outputs = np.array([op.outputs[0]], dtype=np.int32)
            add.builtinOptionsType = schema.BuiltinOptions.AddOptions
            add.builtinOptions = schema.AddOptionsT()
            options = op.builtinOptions
            activation = getattr(options, "fusedActivationFunction", schema.ActivationFunctionType.NONE)
            add.builtinOptions.fusedActivationFunction = activation
            if options is not None and hasattr(options, "fusedActivationFunction"):
                options.fusedActivationFunction = schema.ActivationFunctionType.NONE
            op.inputs = np.array(inputs[:3], dtype=np.int32)
            op.outputs = np.array([mid_index], dtype=np.int32)
            operators.append(add)
            changed += 1
        subgraph.operators = operators
    return changed


def _addend(model: schema.ModelT, subgraph: schema.SubGraphT, inputs: list[int]) -> int:
    """The ``TRANSPOSE_CONV``'s bias as a tensor an ``ADD`` takes: itself when float, else int8."""
    bias = subgraph.tensors[inputs[3]]
    if bias.type == schema.TensorType.FLOAT32:
        return inputs[3]
    scales = _scales(bias)
    if bias.type != schema.TensorType.INT32 or scales is None:
        raise ConversionError(f"cannot move a TRANSPOSE_CONV bias of type {bias.type} into an ADD")
    values = _constant(model, bias, np.int32).astype(np.float64) * scales  # per channel or per tensor
    step = max(float(np.abs(values).max()), float(np.finfo(np.float32).tiny)) / 127.0
    addend = schema.TensorT()
    addend.shape = np.array([len(values)], dtype=np.int32)
    addend.type = schema.TensorType.INT8
    addend.name = f"{_name(bias)}/int8"
    addend.buffer = _add_buffer(model, np.clip(np.round(values / step), -127, 127).astype(np.int8))
    q = schema.QuantizationParametersT()
    q.scale, q.zeroPoint = np.array([step], dtype=np.float32), np.zeros(1, dtype=np.int64)
    addend.quantization = q
    return _add_tensor(subgraph, addend)


def split_grouped_convolutions(model: schema.ModelT) -> int:
    """Write every grouped ``CONV_2D`` (its filter has fewer input channels than its input,
    not depthwise) as a ``SPLIT`` of the input, one ``CONV_2D`` per group and a
    ``CONCATENATION``; return how many.

    Arm NN 20.08 reads such a filter as if the convolution had one group and computes wrong
    values without a word (a ResNeXt-style ``groups=4`` convolution: 32 dB against fp32 in
    fp32). Each group's convolution takes its slice of the filter, bias and per-channel
    scales; its output keeps the whole output's type and quantization, so the concatenation
    is exact.
    """
    changed = 0
    for subgraph in model.subgraphs:
        operators = []
        for op in subgraph.operators:
            groups = _groups(model, subgraph, op)
            if groups <= 1:
                operators.append(op)
                continue
            operators.extend(_grouped_as_split(model, subgraph, op, groups))
            changed += 1
        subgraph.operators = operators
    return changed


def _groups(model: schema.ModelT, subgraph: schema.SubGraphT, op: schema.OperatorT) -> int:
    if _code(model, op) != schema.BuiltinOperator.CONV_2D:
        return 1
    channels = int(subgraph.tensors[op.inputs[0]].shape[-1])
    per_group = int(subgraph.tensors[op.inputs[1]].shape[-1])
    return channels // per_group if per_group and channels % per_group == 0 else 1


def _slice_tensor(model: schema.ModelT, subgraph: schema.SubGraphT, index: int, j: int, groups: int) -> int:
    """Group ``j`` of ``groups`` of a constant tensor along its first dimension (filter or bias)."""
    tensor = subgraph.tensors[index]
    dtype = {**_NUMPY_OF, schema.TensorType.INT32: np.int32}.get(tensor.type)
    if dtype is None:
        raise ConversionError(f"cannot split a grouped CONV_2D with a tensor of type {tensor.type}")
    shape = tuple(int(d) for d in tensor.shape)
    values = _constant(model, tensor, dtype)
    rows = shape[0] // groups
    part = copy.copy(tensor)
    part.shape = np.array([rows, *shape[1:]], dtype=np.int32)
    part.shapeSignature = None
    part.name = f"{_name(tensor)}/group{j}"
    part.buffer = _add_buffer(model, values[j * rows : (j + 1) * rows])
    q = tensor.quantization
    if q is not None and q.scale is not None and len(q.scale) == shape[0]:  # per output channel
        part.quantization = copy.copy(q)
        part.quantization.scale = np.asarray(q.scale)[j * rows : (j + 1) * rows]
        if q.zeroPoint is not None and len(q.zeroPoint) == shape[0]:
            part.quantization.zeroPoint = np.asarray(q.zeroPoint)[j * rows : (j + 1) * rows]
    return _add_tensor(subgraph, part)


def _activation_slice(
    model: schema.ModelT, subgraph: schema.SubGraphT, index: int, j: int, groups: int, what: str
) -> int:
    """A new activation tensor like ``index``'s with a ``1/groups`` share of its channels."""
    tensor = subgraph.tensors[index]
    part = copy.copy(tensor)
    shape = [int(d) for d in tensor.shape]
    part.shape = np.array([*shape[:-1], shape[-1] // groups], dtype=np.int32)
    part.shapeSignature = None
    part.buffer = _add_buffer(model, np.zeros(0, np.uint8))  # no data: computed
    part.name = f"{_name(tensor)}/{what}{j}"
    return _add_tensor(subgraph, part)


def _grouped_as_split(
    model: schema.ModelT, subgraph: schema.SubGraphT, op: schema.OperatorT, groups: int
) -> list[schema.OperatorT]:
    inputs = [int(i) for i in op.inputs]
    x, out = inputs[0], int(op.outputs[0])
    axis = schema.TensorT()
    axis.shape, axis.type, axis.name = (
        np.array([], dtype=np.int32),
        schema.TensorType.INT32,
        f"{_name(subgraph.tensors[x])}/axis",
    )
    axis.buffer = _add_buffer(model, np.array([3], dtype=np.int32))
    split = schema.OperatorT()
    split.opcodeIndex = _opcode(model, schema.BuiltinOperator.SPLIT, 1)
    parts_in = [_activation_slice(model, subgraph, x, j, groups, "group_in") for j in range(groups)]
    split.inputs = np.array([_add_tensor(subgraph, axis), x], dtype=np.int32)
    split.outputs = np.array(parts_in, dtype=np.int32)
    split.builtinOptionsType = schema.BuiltinOptions.SplitOptions
    split.builtinOptions = schema.SplitOptionsT()
    split.builtinOptions.numSplits = groups
    convs, parts_out = [], []
    for j in range(groups):
        conv = copy.copy(op)
        conv.builtinOptions = copy.copy(op.builtinOptions)
        bias = [_slice_tensor(model, subgraph, inputs[2], j, groups)] if len(inputs) > 2 and inputs[2] >= 0 else []
        conv.inputs = np.array(
            [parts_in[j], _slice_tensor(model, subgraph, inputs[1], j, groups), *bias], dtype=np.int32
        )
        parts_out.append(_activation_slice(model, subgraph, out, j, groups, "group_out"))
        conv.outputs = np.array([parts_out[j]], dtype=np.int32)
        convs.append(conv)
    concat = schema.OperatorT()
    concat.opcodeIndex = _opcode(model, schema.BuiltinOperator.CONCATENATION, 1)
    concat.inputs = np.array(parts_out, dtype=np.int32)
    concat.outputs = np.array([out], dtype=np.int32)
    concat.builtinOptionsType = schema.BuiltinOptions.ConcatenationOptions
    concat.builtinOptions = schema.ConcatenationOptionsT()
    concat.builtinOptions.axis = 3
    return [split, *convs, concat]


def symmetric_embedding_tables(model: schema.ModelT) -> int:
    """Requantize every int8 ``EMBEDDING_LOOKUP`` table with a non-zero zero point to
    symmetric int8 (zero point 0, scale ``max|w| / 127`` per tensor or per quantized
    dimension, as it was); return how many. The table is dequantized and rounded again,
    which costs at most half a new step per value."""
    subgraph = model.subgraphs[0]
    fixed = 0
    for op in subgraph.operators:
        if _code(model, op) != schema.BuiltinOperator.EMBEDDING_LOOKUP or len(op.inputs) < 2:
            continue
        table = subgraph.tensors[int(op.inputs[1])]
        q, scales = table.quantization, _scales(table)
        if table.type != schema.TensorType.INT8 or scales is None or q.zeroPoint is None or not np.any(q.zeroPoint):
            continue
        buffer = model.buffers[table.buffer]
        values = _constant(model, table, np.int8).astype(np.float64)
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


def half_pixel_resizes(model: schema.ModelT) -> int:
    """How many ``RESIZE_BILINEAR`` ops sample at half-pixel centers (PyTorch's bilinear
    ``interpolate``/``Upsample`` with ``align_corners=False``, its default)."""
    count = 0
    for op in model.subgraphs[0].operators:
        if _code(model, op) != schema.BuiltinOperator.RESIZE_BILINEAR:
            continue
        options = op.builtinOptions
        count += bool(options is not None and getattr(options, "halfPixelCenters", False))
    return count


def _io_tensor(subgraph: schema.SubGraphT, index: int, what: str) -> tuple[schema.TensorT, float, int]:
    tensor = subgraph.tensors[index]
    scales = _scales(tensor)
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
    t_in, s_in, z_in = _io_tensor(subgraph, int(subgraph.inputs[0]), "input")
    t_out, s_out, z_out = _io_tensor(subgraph, int(subgraph.outputs[0]), "output")
    return IOSpec(
        input_dtype=np.dtype(_NUMPY_OF[t_in.type]).name,
        output_dtype=np.dtype(_NUMPY_OF[t_out.type]).name,
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
    quantized.name = f"{_name(quantized)}/{suffix}"
    return _add_tensor(subgraph, twin)


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
    q_outs = [int(t) for t in subgraph.outputs if subgraph.tensors[int(t)].type not in _PLAIN_TYPES]
    # A float input (its first layer kept in float) or token ids (an embedding's lookup)
    plain_input = subgraph.tensors[q_in].type in _PLAIN_TYPES
    if not plain_input:
        _io_tensor(subgraph, q_in, "input")
    for q_out in q_outs:
        _io_tensor(subgraph, q_out, "output")
    f_in = q_in if plain_input else _float_twin(subgraph, q_in, "quantized")
    # Version 2 of QUANTIZE and DEQUANTIZE is the one for int8 (version 1: uint8).
    quantize = schema.OperatorT()
    quantize.opcodeIndex = _opcode(model, schema.BuiltinOperator.QUANTIZE, 2)
    quantize.inputs = np.array([f_in], dtype=np.int32)
    quantize.outputs = np.array([q_in], dtype=np.int32)
    twins: dict[int, int] = {}
    dequantizes: list[schema.OperatorT] = []
    for q_out in q_outs:
        twins[q_out] = _float_twin(subgraph, q_out, "quantized")
        dequantize = schema.OperatorT()
        dequantize.opcodeIndex = _opcode(model, schema.BuiltinOperator.DEQUANTIZE, 2)
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
