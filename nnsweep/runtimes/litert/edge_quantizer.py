"""LiteRT's modes that ai-edge-quantizer makes from the fp32 ``.tflite``: ``int4_weight``, ``fp16``, ``a16w8``.

``a16w8``: its ``static_wi8_ai16`` recipe (int8 channelwise weights, int16 activations from
min/max ranges of the calibration samples, :func:`_min_max_ranges`), the model's input and output left float32.
``fp16``: every weight cast to float16 (its ``FLOAT_CASTING`` weight-only recipe), with a
``DEQUANTIZE`` to float32 before each reader: half the size, float32 arithmetic.
``int4_weight``: each ``FULLY_CONNECTED`` gets symmetric int4 weights in blocks of ``group_size`` input
features, its activations quantized at run time by the kernel (the recipe family
``dynamic_wi4b<N>_afp32``, where ai-edge-quantizer offers blocks of 32, 64, 128 and 256).
The quantizer refuses a whole model when one weight's input features a block does not
divide, so such a layer is left float by name (the op's scope, its output tensors), as
:mod:`nnsweep.runtimes.common.int4` decides for every runtime.
"""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from nnsweep.core.errors import ConversionError, first_line
from nnsweep.runtimes.common.converter import printed_to_debug_log
from nnsweep.runtimes.common.int4 import Int4Plan
from nnsweep.runtimes.litert.names import module_path

__all__ = ["quantize_a16w8", "quantize_fp16", "quantize_int4"]

_log = logging.getLogger(__name__)


def quantize_int4(source: Path, target: Path, layers: Int4Plan, root: Any = None) -> tuple[str, ...]:
    """Write ``source`` (a float ``.tflite``) with 4-bit fully connected weights to
    ``target``; return what the partition report adds to ``layers.notes()``: the linear
    layers of the plan that did not become a 4-bit ``FULLY_CONNECTED`` (none, when each
    converted to one). The layers the plan leaves float (``quant.float_layers``) are found
    by their op scopes' module paths in ``root``, the exported module.

    Raises:
        ConversionError: the model has no ``FULLY_CONNECTED`` the group size divides, or
            ai-edge-quantizer fails.
    """
    from ai_edge_quantizer import algorithm_manager, qtyping, recipe_manager
    from ai_edge_quantizer.utils import tfl_flatbuffer_utils as flatbuffer

    fc = qtyping.TFLOperationName.FULLY_CONNECTED
    model = flatbuffer.read_model(str(source))
    codes = model.operatorCodes
    scopes: list[str] = []
    divided: list[str] = []
    left_float = {path for path, _ in layers.left_float}
    for subgraph in model.subgraphs:
        for op in subgraph.operators:
            if flatbuffer.TFL_OP_CODE_TO_NAME.get(codes[op.opcodeIndex].builtinCode) != fc.value:
                continue
            features = subgraph.tensors[op.inputs[1]].shape[-1]  # weights are (out, in)
            scope = flatbuffer.get_op_scope(op, subgraph.tensors)
            kept = root is not None and module_path(scope, root) in left_float
            (divided if features % layers.group_size == 0 and not kept else scopes).append(scope)
    if not divided:
        raise ConversionError(
            f"int4_weight: no FULLY_CONNECTED of the .tflite has input features the group size {layers.group_size} "
            "divides, so nothing would take 4-bit weights"
        )
    recipe = recipe_manager.RecipeManager()
    granularity = qtyping.QuantGranularity(f"BLOCKWISE_{layers.group_size}")
    recipe.add_dynamic_config(regex=".*", operation_name=fc, num_bits=4, granularity=granularity)
    for scope in scopes:  # the latest matching entry wins: these stay float
        recipe.add_quantization_config(
            regex=re.escape(scope), operation_name=fc, algorithm_key=algorithm_manager.AlgorithmName.NO_QUANTIZE
        )
    _quantize(source, target, recipe.get_quantization_recipe(), "int4_weight")
    missing = len(layers.four_bit) - len(divided)
    if missing <= 0:
        return ()
    return (
        f"int4_weight: {missing} of the {len(layers.four_bit)} linear layers planned 4-bit stay float on "
        "litert: they did not convert to a FULLY_CONNECTED",
    )


def quantize_fp16(source: Path, target: Path) -> None:
    """Write ``source`` (a float ``.tflite``) with float16 weights to ``target``.

    Raises:
        ConversionError: ai-edge-quantizer fails.
    """
    from ai_edge_quantizer import algorithm_manager, qtyping, recipe_manager

    recipe = recipe_manager.RecipeManager()
    recipe.add_weight_only_config(
        regex=".*",
        operation_name=qtyping.TFLOperationName.ALL_SUPPORTED,
        num_bits=16,
        algorithm_key=algorithm_manager.AlgorithmName.FLOAT_CASTING,
    )
    _quantize(source, target, recipe.get_quantization_recipe(), "fp16")


def quantize_a16w8(source: Path, target: Path, samples: Iterable[np.ndarray]) -> None:
    """Write ``source`` (a float ``.tflite``) with int8 weights and int16 activations,
    calibrated on ``samples`` (model inputs, batch 1), to ``target``; the input and output
    keep their types (float32; token ids stay integers).

    Raises:
        ConversionError: ai-edge-quantizer fails.
    """
    from ai_edge_litert.interpreter import Interpreter
    from ai_edge_quantizer import algorithm_manager, qtyping, recipe_manager

    recipe = recipe_manager.RecipeManager()
    recipe.add_static_config(
        regex=".*", operation_name=qtyping.TFLOperationName.ALL_SUPPORTED, activation_num_bits=16, weight_num_bits=8
    )
    for end in (qtyping.TFLOperationName.INPUT, qtyping.TFLOperationName.OUTPUT):  # float32 ends: interface core
        recipe.add_quantization_config(
            regex=".*", operation_name=end, algorithm_key=algorithm_manager.AlgorithmName.NO_QUANTIZE
        )
    interpreter = Interpreter(model_path=str(source))
    signatures = interpreter.get_signature_list()
    if len(signatures) != 1 or len(next(iter(signatures.values()))["inputs"]) != 1:
        raise ConversionError("a16w8 calibrates a .tflite of one signature with one input")
    key, signature = next(iter(signatures.items()))
    name = signature["inputs"][0]
    # The calibration feeds the .tflite's own input type: litert-torch takes int64 token ids as int32.
    dtype = interpreter.get_signature_runner(key).get_input_details()[name]["dtype"]
    calibration = {key: [{name: x.astype(dtype, copy=False)} for x in samples]}
    _quantize(source, target, recipe.get_quantization_recipe(), "a16w8", calibration)


def _min_max_ranges(source: Path, recipe: object, calibration: object) -> object:
    """Each tensor's range over all of ``calibration``: its smallest min and largest max.

    ``Quantizer.calibrate`` keeps a moving average (0.95) of each sample's min and max
    instead, which clips the largest values: a 64-128-10 MLP's a16w8 output range was 0.52
    where its float outputs reach 0.73 on the same samples, 17.9 dB against fp32; with the
    min and max, 44.9 dB (ai-edge-quantizer's own ``min_max_update``).
    """
    from ai_edge_quantizer import calibrator, recipe_manager
    from ai_edge_quantizer.utils import qsv_utils

    manager = recipe_manager.RecipeManager()
    manager.load_quantization_recipe(recipe)
    run = calibrator.Calibrator(source.read_bytes(), qsv_update_func=qsv_utils.min_max_update)
    run.calibrate(calibration, manager)
    return run.get_model_qsvs()


def _quantize(source: Path, target: Path, recipe: object, mode: str, calibration: object = None) -> None:
    from ai_edge_quantizer import quantizer

    try:
        with printed_to_debug_log(_log, "ai-edge-quantizer"), warnings.catch_warnings():  # it prints progress
            # its calibrator keeps every intermediate tensor to read their ranges, and warns that it does
            warnings.filterwarnings("ignore", message=r"(?s).*experimental_preserve_all_tensors")
            run = quantizer.Quantizer(str(source))
            run.load_quantization_recipe(recipe)
            ranges = _min_max_ranges(source, recipe, calibration) if calibration is not None else None
            content = run.quantize(ranges).quantized_model
    except (ValueError, RuntimeError, KeyError) as exc:
        raise ConversionError(f"ai-edge-quantizer cannot quantize the model to {mode}: {first_line(exc)}") from exc
    if content is None:
        raise ConversionError(f"ai-edge-quantizer returned no model for {mode}")
    target.write_bytes(bytes(content))
