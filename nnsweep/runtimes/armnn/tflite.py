"""Rewrites of a ``.tflite`` model into forms Arm NN 20.08's TFLite parser reads right.

Each answers a fault of that parser (Debian bookworm's Arm NN); the ``armnn`` converter
applies them to the LiteRT export:

- :func:`add_fully_connected_bias`: an explicit zero bias where it is absent (rejected).
- :func:`flatten_fully_connected`: 2-D then reshape (``keep_num_dims`` is ignored).
- :func:`split_transpose_conv_bias`: ``TRANSPOSE_CONV``'s bias and activation moved into
  an ``ADD`` (a fourth input is refused).
- :func:`split_grouped_convolutions`: a grouped ``CONV_2D`` as ``SPLIT``, one conv per group,
  ``CONCATENATION`` (computed as one group, silently).
- :func:`half_pixel_resizes`: counts ``RESIZE_BILINEAR`` with ``half_pixel_centers``, which
  the parser ignores.
"""

from __future__ import annotations

import copy

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from nnsweep.core.errors import ConversionError
from nnsweep.runtimes.common import tflite

__all__ = [
    "add_fully_connected_bias",
    "flatten_fully_connected",
    "half_pixel_resizes",
    "split_grouped_convolutions",
    "split_transpose_conv_bias",
]


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
            if tflite.builtin_code(model, op) != schema.BuiltinOperator.FULLY_CONNECTED:
                continue
            inputs = list(op.inputs)
            if len(inputs) >= 3 and inputs[2] >= 0:
                continue
            weights = subgraph.tensors[inputs[1]]
            units = int(weights.shape[0])
            bias = schema.TensorT()
            bias.shape = np.array([units], dtype=np.int32)
            bias.name = f"{tflite.tensor_name(weights)}/zero_bias"
            if weights.type == schema.TensorType.FLOAT32:
                bias.type = schema.TensorType.FLOAT32
                bias.buffer = tflite.add_buffer(model, np.zeros(units, np.float32))
            elif weights.type == schema.TensorType.INT8:
                in_scale, w_scale = tflite.quant_scales(subgraph.tensors[inputs[0]]), tflite.quant_scales(weights)
                if in_scale is None or w_scale is None:
                    raise ConversionError("a quantized FULLY_CONNECTED lacks input or weight scales")
                q = schema.QuantizationParametersT()
                q.scale = (in_scale[0] * w_scale).astype(np.float32)
                q.zeroPoint = np.zeros(len(q.scale), dtype=np.int64)
                q.quantizedDimension = 0
                bias.quantization = q
                bias.type = schema.TensorType.INT32
                bias.buffer = tflite.add_buffer(model, np.zeros(units, np.int32))
            else:
                raise ConversionError(f"cannot add a bias to a FULLY_CONNECTED with weight type {weights.type}")
            index = tflite.add_tensor(subgraph, bias)
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
            if tflite.builtin_code(model, op) != schema.BuiltinOperator.FULLY_CONNECTED or not getattr(
                options, "keepNumDims", False
            ):
                continue
            out = subgraph.tensors[op.outputs[0]]
            shape = np.asarray(out.shape, dtype=np.int32)
            options.keepNumDims = False
            if len(shape) <= 2:
                continue
            flat = copy.copy(out)  # the same type and quantization, 2-D
            flat.shape = np.array([int(np.prod(shape[:-1])), int(shape[-1])], dtype=np.int32)
            flat.shapeSignature = None
            flat.buffer = tflite.add_buffer(model, np.zeros(0, np.uint8))
            flat.name = f"{tflite.tensor_name(out)}/2d"
            flat_index = tflite.add_tensor(subgraph, flat)
            target = schema.TensorT()
            target.shape = np.array([len(shape)], dtype=np.int32)
            target.type = schema.TensorType.INT32
            target.buffer = tflite.add_buffer(model, shape)
            target.name = f"{tflite.tensor_name(out)}/shape"
            reshape = schema.OperatorT()
            reshape.opcodeIndex = tflite.opcode(model, schema.BuiltinOperator.RESHAPE, 1)
            reshape.inputs = np.array([flat_index, tflite.add_tensor(subgraph, target)], dtype=np.int32)
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
            if (
                tflite.builtin_code(model, op) != schema.BuiltinOperator.TRANSPOSE_CONV
                or len(inputs) < 4
                or inputs[3] < 0
            ):
                continue
            out = subgraph.tensors[op.outputs[0]]
            mid = copy.copy(out)  # the same type, shape and quantization, before the bias
            mid.buffer = tflite.add_buffer(model, np.zeros(0, np.uint8))
            mid.name = f"{tflite.tensor_name(out)}/without_bias"
            mid_index = tflite.add_tensor(subgraph, mid)
            add = schema.OperatorT()
            add.opcodeIndex = tflite.opcode(model, schema.BuiltinOperator.ADD, 1)
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
    scales = tflite.quant_scales(bias)
    if bias.type != schema.TensorType.INT32 or scales is None:
        raise ConversionError(f"cannot move a TRANSPOSE_CONV bias of type {bias.type} into an ADD")
    values = tflite.constant(model, bias, np.int32).astype(np.float64) * scales  # per channel or per tensor
    step = max(float(np.abs(values).max()), float(np.finfo(np.float32).tiny)) / 127.0
    addend = schema.TensorT()
    addend.shape = np.array([len(values)], dtype=np.int32)
    addend.type = schema.TensorType.INT8
    addend.name = f"{tflite.tensor_name(bias)}/int8"
    addend.buffer = tflite.add_buffer(model, np.clip(np.round(values / step), -127, 127).astype(np.int8))
    q = schema.QuantizationParametersT()
    q.scale, q.zeroPoint = np.array([step], dtype=np.float32), np.zeros(1, dtype=np.int64)
    addend.quantization = q
    return tflite.add_tensor(subgraph, addend)


def split_grouped_convolutions(model: schema.ModelT) -> int:
    """Write every grouped ``CONV_2D`` (its filter has fewer input channels than its input,
    not depthwise) as a ``SPLIT`` of the input, one ``CONV_2D`` per group and a
    ``CONCATENATION``; return how many.

    Arm NN 20.08 reads such a filter as if the convolution had one group and computes wrong
    values without a word (measured on a ResNeXt-style ``groups=4`` convolution). Each
    group's convolution takes its slice of the filter, bias and per-channel
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
    if tflite.builtin_code(model, op) != schema.BuiltinOperator.CONV_2D:
        return 1
    channels = int(subgraph.tensors[op.inputs[0]].shape[-1])
    per_group = int(subgraph.tensors[op.inputs[1]].shape[-1])
    return channels // per_group if per_group and channels % per_group == 0 else 1


def _slice_tensor(model: schema.ModelT, subgraph: schema.SubGraphT, index: int, j: int, groups: int) -> int:
    """Group ``j`` of ``groups`` of a constant tensor along its first dimension (filter or bias)."""
    tensor = subgraph.tensors[index]
    dtype = tflite.NUMPY_OF.get(tensor.type)
    if dtype is None:
        raise ConversionError(f"cannot split a grouped CONV_2D with a tensor of type {tensor.type}")
    shape = tuple(int(d) for d in tensor.shape)
    values = tflite.constant(model, tensor, dtype)
    rows = shape[0] // groups
    part = copy.copy(tensor)
    part.shape = np.array([rows, *shape[1:]], dtype=np.int32)
    part.shapeSignature = None
    part.name = f"{tflite.tensor_name(tensor)}/group{j}"
    part.buffer = tflite.add_buffer(model, values[j * rows : (j + 1) * rows])
    q = tensor.quantization
    if q is not None and q.scale is not None and len(q.scale) == shape[0]:  # per output channel
        part.quantization = copy.copy(q)
        part.quantization.scale = np.asarray(q.scale)[j * rows : (j + 1) * rows]
        if q.zeroPoint is not None and len(q.zeroPoint) == shape[0]:
            part.quantization.zeroPoint = np.asarray(q.zeroPoint)[j * rows : (j + 1) * rows]
    return tflite.add_tensor(subgraph, part)


def _activation_slice(
    model: schema.ModelT, subgraph: schema.SubGraphT, index: int, j: int, groups: int, what: str
) -> int:
    """A new activation tensor like ``index``'s with a ``1/groups`` share of its channels."""
    tensor = subgraph.tensors[index]
    part = copy.copy(tensor)
    shape = [int(d) for d in tensor.shape]
    part.shape = np.array([*shape[:-1], shape[-1] // groups], dtype=np.int32)
    part.shapeSignature = None
    part.buffer = tflite.add_buffer(model, np.zeros(0, np.uint8))  # no data: computed
    part.name = f"{tflite.tensor_name(tensor)}/{what}{j}"
    return tflite.add_tensor(subgraph, part)


def _grouped_as_split(
    model: schema.ModelT, subgraph: schema.SubGraphT, op: schema.OperatorT, groups: int
) -> list[schema.OperatorT]:
    inputs = [int(i) for i in op.inputs]
    x, out = inputs[0], int(op.outputs[0])
    axis = schema.TensorT()
    axis.shape, axis.type, axis.name = (
        np.array([], dtype=np.int32),
        schema.TensorType.INT32,
        f"{tflite.tensor_name(subgraph.tensors[x])}/axis",
    )
    axis.buffer = tflite.add_buffer(model, np.array([3], dtype=np.int32))
    split = schema.OperatorT()
    split.opcodeIndex = tflite.opcode(model, schema.BuiltinOperator.SPLIT, 1)
    parts_in = [_activation_slice(model, subgraph, x, j, groups, "group_in") for j in range(groups)]
    split.inputs = np.array([tflite.add_tensor(subgraph, axis), x], dtype=np.int32)
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
    concat.opcodeIndex = tflite.opcode(model, schema.BuiltinOperator.CONCATENATION, 1)
    concat.inputs = np.array(parts_out, dtype=np.int32)
    concat.outputs = np.array([out], dtype=np.int32)
    concat.builtinOptionsType = schema.BuiltinOptions.ConcatenationOptions
    concat.builtinOptions = schema.ConcatenationOptionsT()
    concat.builtinOptions.axis = 3
    return [split, *convs, concat]


def half_pixel_resizes(model: schema.ModelT) -> int:
    """How many ``RESIZE_BILINEAR`` ops sample at half-pixel centers (PyTorch's bilinear
    ``interpolate``/``Upsample`` with ``align_corners=False``, its default)."""
    count = 0
    for op in model.subgraphs[0].operators:
        if tflite.builtin_code(model, op) != schema.BuiltinOperator.RESIZE_BILINEAR:
            continue
        options = op.builtinOptions
        count += bool(options is not None and getattr(options, "halfPixelCenters", False))
    return count
