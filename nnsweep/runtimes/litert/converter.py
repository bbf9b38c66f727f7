"""LiteRT: ``litert-torch`` converts the model to ``.tflite`` (no TensorFlow), PT2E for int8.

- ``fp32``: ``litert_torch.convert`` of the float module.
- ``dynamic_int8``: PT2E with ``is_dynamic=True``: int8 weights, float32 activations
  quantized by the kernels; float32 in and out, no calibration.
- ``fp16``, ``int4_weight``, ``a16w8``: the fp32 ``.tflite`` by :mod:`~nnsweep.runtimes.litert.edge_quantizer`.
- ``static_int8``: ``torch.export`` -> ``prepare_pt2e`` with litert-torch's ``PT2EQuantizer``
  (after the graph fixes :func:`restore_sources`, :func:`float_scalars` and the shared ones
  in :mod:`nnsweep.runtimes.common.pt2e`) -> calibration -> ``convert_ptq`` and
  :func:`dequantize_per_reader` -> ``litert_torch.convert``. Int8 models take and return
  int8 (interface ``full``); ``core`` adds float edges
  (:func:`nnsweep.runtimes.common.tflite.float_interface`).

The partition report comes from a LiteRT interpreter built with the config's order
(:func:`nnsweep.runtimes.litert.runner.placement`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import operator
import shutil
from importlib import metadata
from pathlib import Path

import torch
from torchao.quantization.pt2e import quantize_pt2e
from torchao.quantization.pt2e.observer import HistogramObserver, MinMaxObserver

from nnsweep.core.artifact import IOSpec
from nnsweep.core.config import Calibration, DeploymentConfig, Granularity, Interface, QuantConfig, QuantMode
from nnsweep.core.errors import ConversionError, first_line
from nnsweep.models import ModelBundle
from nnsweep.runtimes.common import float_fallback, int4, tflite
from nnsweep.runtimes.common.bags import unbagged_copy
from nnsweep.runtimes.common.converter import (
    ConversionResult,
    Converter,
    Stages,
    native_stderr_to_debug_log,
    printed_to_debug_log,
    quant_settings,
    toolchain_records_to_debug_log,
)
from nnsweep.runtimes.common.jax_lowering import jax_lowerings_made_once
from nnsweep.runtimes.common.pt2e import calibrated, fold_weight_computations, own_layer_for_each_batch_norm
from nnsweep.runtimes.common.ptq_convert import convert_ptq
from nnsweep.runtimes.common.quantize import calibration_samples
from nnsweep.runtimes.litert.edge_quantizer import quantize_a16w8, quantize_fp16, quantize_int4
from nnsweep.runtimes.litert.litert_import import LiteRTQuantConfig, litert_torch, pt2e_quantizer
from nnsweep.runtimes.litert.runner import interpreter, placement

__all__ = [
    "X64_NOTE",
    "LiteRTConverter",
    "dequantize_per_reader",
    "export_tflite",
    "float_scalars",
    "litert_quantizer",
    "prepare",
    "restore_sources",
]

_FILENAME = "model.tflite"
_NOTES = "notes.json"  # beside an ai-edge-quantizer model's stage: what its partition report adds
X64_NOTE = "downcasts 64-bit model I/O to 32-bit"
_log = logging.getLogger(__name__)
_OBSERVERS = {Calibration.MINMAX: MinMaxObserver, Calibration.HISTOGRAM: HistogramObserver}


def litert_quantizer(quant: QuantConfig, symmetric_activations: bool) -> pt2e_quantizer.PT2EQuantizer:
    """litert-torch's PT2E quantizer for ``quant``, leaving ``quant.float_layers`` in float."""
    config = pt2e_quantizer.get_symmetric_quantization_config(
        is_per_channel=quant.granularity is Granularity.PER_CHANNEL,
        is_dynamic=quant.mode is QuantMode.DYNAMIC_INT8,
    )
    if quant.mode is QuantMode.DYNAMIC_INT8:  # activations are quantized at run time: nothing to observe
        dynamic = float_fallback.pt2e_keep_float(pt2e_quantizer.PT2EQuantizer().set_global(config), quant.float_layers)
        if quant.granularity is Granularity.PER_CHANNEL:
            return dynamic  # type: ignore[no-any-return]
        return depthwise_weights_per_channel(dynamic)
    # litert-torch observes activations with a histogram; minmax swaps the observer only.
    observer = _OBSERVERS[quant.calibration or Calibration.MINMAX]
    activation: dict[str, object] = {"observer_or_fake_quant_ctr": observer}
    if symmetric_activations:
        activation["qscheme"] = torch.per_tensor_symmetric
    act_in = dataclasses.replace(config.input_activation, **activation)
    act_out = dataclasses.replace(config.output_activation, **activation)
    config = dataclasses.replace(config, input_activation=act_in, output_activation=act_out)
    quantizer = pt2e_quantizer.PT2EQuantizer().set_global(config)
    return float_fallback.pt2e_keep_float(quantizer, quant.float_layers)  # type: ignore[no-any-return]


_CONVOLUTIONS = (torch.ops.aten.conv1d.default, torch.ops.aten.conv2d.default, torch.ops.aten.convolution.default)


def depthwise_weights_per_channel(quantizer: pt2e_quantizer.PT2EQuantizer) -> pt2e_quantizer.PT2EQuantizer:
    """Make ``quantizer`` (dynamic int8, weights per tensor) quantize the weights of each
    depthwise convolution per output channel; everything else stays per tensor.

    LiteRT runs a depthwise convolution with float input and int8 weights (a dynamic-range
    "hybrid" ``DEPTHWISE_CONV_2D``) with one kernel, ``EvalHybridPerChannel``, which reads a
    scale per output channel: given a per-tensor weight's single scale, it read past it, and
    XNNPACK declines the op, so nothing else runs it: outputs come out NaN or garbage,
    differently from one process to the next (``benchmarks/heldout_se.py``; a one-channel
    stem convolution is written as a depthwise one). TensorFlow Lite's own converter
    quantizes these weights per channel in its
    dynamic-range mode; so does this. A convolution is depthwise where each group has one
    input channel (the weight's second dimension is 1), as litert-torch lowers it.
    """
    weight_spec = pt2e_quantizer.get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True).weight
    annotate = quantizer.annotate

    def annotated(model: torch.fx.GraphModule) -> torch.fx.GraphModule:
        annotate(model)
        for node in model.graph.nodes:
            annotation = node.meta.get("quantization_annotation")
            if node.op != "call_function" or node.target not in _CONVOLUTIONS or annotation is None:
                continue
            weight = node.args[1]
            if weight in annotation.input_qspec_map and _one_input_channel_per_group(model, weight):
                annotation.input_qspec_map[weight] = weight_spec
        return model

    quantizer.annotate = annotated  # type: ignore[method-assign]
    return quantizer


def _one_input_channel_per_group(model: torch.fx.GraphModule, weight: object) -> bool:
    """Whether a convolution's ``weight`` node holds a (out, 1, ...) weight: read from its
    traced value, or from the module attribute a ``get_attr`` names."""
    if not isinstance(weight, torch.fx.Node):
        return False
    value = weight.meta.get("val")
    if value is None and weight.op == "get_attr":
        value = operator.attrgetter(str(weight.target))(model)
    return isinstance(value, torch.Tensor) and value.dim() >= 2 and value.shape[1] == 1


def _convert(bundle: ModelBundle, quant: QuantConfig, symmetric_activations: bool) -> litert_torch.model.Model:
    # conversion must not touch the bundle's module; litert-torch has no lowering for embedding_bag
    module = unbagged_copy(bundle.module)
    args = (bundle.example_input,)
    if quant.mode is QuantMode.FP32:
        return litert_torch.convert(module, args)
    quantizer = litert_quantizer(quant, symmetric_activations)
    graph = calibrated(module, bundle, quant, lambda g: prepare(g, quantizer, module))
    graph = convert_ptq(graph, fold_quantize=False)
    dequantize_per_reader(graph)
    # An exported module says it is training (and refuses .eval()), though it was exported in
    # eval mode and its graph holds eval ops (dropout off, batch norm with running statistics).
    # litert-torch reads the flag and would warn on every static conversion that the model
    # is "converted in training mode": the flag, not the graph, is wrong.
    for sub in graph.modules():
        sub.training = False
    return litert_torch.convert(graph, args, quant_config=LiteRTQuantConfig(pt2e_quantizer=quantizer))


def restore_sources(graph: torch.nn.Module) -> int:
    """Give each float ``cat`` of ``graph`` the ``source_fn_stack`` litert-torch's annotator
    matches; return how many.

    litert-torch finds ``cat`` by the function it was called as, which ``torch.export`` records
    only with ``strict=True``; nnsweep exports with ``strict=False``, so ``cat`` went
    unannotated and was lowered to an int8 ``CONCATENATION`` at its first input's scale,
    clipping the others. With the record its inputs and output share one observer. Left alone:
    a ``cat`` of non-float tensors, one taking a tensor twice (PT2E's prepare would recurse),
    and ``add``, kept float on purpose (int8 adds cost accuracy, benchmarks/results/coverage.md).
    """
    restored = 0
    for node in graph.graph.nodes:  # type: ignore[union-attr]
        if node.op != "call_function" or node.target != torch.ops.aten.cat.default or "source_fn_stack" in node.meta:
            continue
        if _float_and_distinct(node):
            node.meta["source_fn_stack"] = [(node.name, torch.cat)]
            restored += 1
    return restored


def _float_and_distinct(node: torch.fx.Node) -> bool:
    inputs: list[torch.fx.Node] = []  # every occurrence (all_input_nodes lists each node once)
    torch.fx.node.map_arg((node.args, node.kwargs), inputs.append)
    if len(set(inputs)) != len(inputs):
        return False
    values = [n.meta.get("val") for n in (node, *inputs)]
    return all(isinstance(v, torch.Tensor) and v.dtype.is_floating_point for v in values)


_SCALAR_OPS = (torch.ops.aten.add.Tensor, torch.ops.aten.mul.Tensor)


def float_scalars(graph: torch.nn.Module) -> int:
    """Write each whole-number scalar of a float ``add`` or ``mul`` as a float (the same
    product or sum); return how many.

    litert-torch 0.10's quantizer makes such scalars tensors before annotating
    (``_convert_scalars_to_attrs``) with ``torch.tensor(n)``: an ``int64`` tensor, which
    its ``mul`` annotator then observes, and ``convert_pt2e`` fails on ("Expecting input
    to have dtype torch.float32, but got dtype: torch.int64"). Swin V2 scales its
    position bias by ``16 * torch.sigmoid(...)``: ``torchvision:swin_v2_t`` failed every
    LiteRT and Arm NN int8 conversion so. ExecuTorch's quantizer writes ``float(n)``.
    """
    changed = 0
    for node in graph.graph.nodes:  # type: ignore[union-attr]
        if node.op != "call_function" or node.target not in _SCALAR_OPS:
            continue
        value = node.meta.get("val")
        if not (isinstance(value, torch.Tensor) and value.dtype.is_floating_point):
            continue
        whole = [i for i, arg in enumerate(node.args) if type(arg) is int]  # not bool
        if whole:
            node.args = tuple(float(arg) if i in whole else arg for i, arg in enumerate(node.args))
            changed += len(whole)
    if changed:
        graph.recompile()  # type: ignore[operator]
    return changed


# With constant scales: a dynamic int8 tensor's (``.tensor``, scales chosen at run time) is
# left shared, as DuplicateDQPass leaves it.
_DEQUANTIZE_OPS = (
    torch.ops.quantized_decomposed.dequantize_per_tensor.default,
    torch.ops.quantized_decomposed.dequantize_per_channel.default,
)


def dequantize_per_reader(graph: torch.nn.Module) -> int:
    """Give each reader of a shared ``dequantize`` of ``graph`` (after ``convert_pt2e``) its
    own copy, as torchao's ``DuplicateDQPass`` does for annotated readers; return how many
    copies were made. The values are the same.

    litert-torch's layout pass may put two readers of one ``dequantize`` in different layouts
    (a padded input in NCHW, a residual ``add`` in NHWC) and then overwrites the shared node's
    shape, which fails the conversion. Only 4-D activations get copies (the layout pass
    transposes nothing else; weight dequantizes are folded away); where none has two readers
    the graph is unchanged.
    """
    made = 0
    nodes: torch.fx.Graph = graph.graph  # type: ignore[assignment]
    for node in list(nodes.nodes):
        if node.op != "call_function" or node.target not in _DEQUANTIZE_OPS or not _four_d_activation(node):
            continue
        for reader in list(node.users)[1:]:
            with nodes.inserting_after(node):
                copy = nodes.node_copy(node)
            reader.replace_input_with(node, copy)
            made += 1
    if made:
        graph.recompile()  # type: ignore[operator]
    return made


def _four_d_activation(dequantize: torch.fx.Node) -> bool:
    """Whether ``dequantize`` reads the quantization of a 4-D tensor the model computes
    (not of a weight, buffer or constant: a ``get_attr``)."""
    quantize = dequantize.args[0]
    source = quantize.args[0] if isinstance(quantize, torch.fx.Node) and quantize.args else None
    if not isinstance(source, torch.fx.Node) or source.op == "get_attr":
        return False
    value = source.meta.get("val")
    return isinstance(value, torch.Tensor) and value.dim() == 4


def prepare(graph: torch.nn.Module, quantizer: object, module: torch.nn.Module) -> torch.nn.Module:
    """``prepare_pt2e`` with litert-torch's quantizer, naming the GRU it fails on
    (``module`` is the model the graph was exported from).

    litert-torch 0.10's GRU annotator reads the GRU's second input and asserts two used
    outputs: a GRU called without its initial hidden state, or whose final hidden state
    is unused, failed with a bare ``IndexError: list index out of range`` (or an assertion).
    """
    fold_weight_computations(graph)
    restore_sources(graph)
    float_scalars(graph)
    own_layer_for_each_batch_norm(graph)
    try:
        return quantize_pt2e.prepare_pt2e(graph, quantizer)
    except (IndexError, AssertionError) as exc:
        frames = []
        tb = exc.__traceback__
        while tb is not None:
            frames.append(tb.tb_frame.f_code.co_name)
            tb = tb.tb_next
        if "_annotate_gru_io_only" not in frames:
            raise
        grus = ", ".join(name for name, sub in module.named_modules() if isinstance(sub, torch.nn.GRU))
        raise NotImplementedError(
            f"litert-torch's int8 quantizer needs a GRU called as out, h = gru(x, h0), both outputs used; "
            f"{grus} is not: call it so, or use another runtime"
        ) from exc


def export_tflite(
    bundle: ModelBundle,
    config: DeploymentConfig,
    path: Path,
    *,
    symmetric_activations: bool = False,
    stages: Stages | None = None,
) -> tuple[IOSpec, tuple[str, ...]]:
    """Write ``bundle``'s model as ``.tflite`` to ``path`` for ``config``'s quantization and
    interface; return its interface and the notes of what was mended in litert-torch's file
    (:func:`nnsweep.runtimes.common.tflite.consistent_bias_scales`).

    What litert-torch writes is a stage (``litert.tflite``, per quantization less the interface
    and per ``symmetric_activations``): the backend order and the partition limits do not
    change it, and the interface is applied to a copy.

    Args:
        symmetric_activations: int8 activations with zero point 0 (default: asymmetric,
            litert-torch's choice), for runtimes that pad quantized tensors with integer 0.
        stages: where the stage is kept (default: nowhere).

    Raises:
        ConversionError: litert-torch cannot convert the model; the message says why.
    """
    quant = config.quant
    if quant.mode not in (QuantMode.FP32, QuantMode.DYNAMIC_INT8, QuantMode.STATIC_INT8):
        raise ConversionError(f"the .tflite path does not do {quant.mode.value}")

    def build(directory: Path) -> None:
        try:
            # Token ids (int64 in torch) become int32 in the .tflite, and litert-torch warns;
            # the runner feeds the width the model takes.
            with (
                printed_to_debug_log(_log, "litert-torch"),
                toolchain_records_to_debug_log(_log, X64_NOTE),
                jax_lowerings_made_once(),  # another mode or model of this process lowered many of its ops
            ):
                # Not .export(path): litert-torch writes the file through LLVM's stream, which on a
                # full disk ends the process ("LLVM ERROR: IO failure on output stream", exit 1).
                # The bytes are the same file; Python's write raises OSError instead.
                content = _convert(bundle, quant, symmetric_activations).model_content()
            (directory / _FILENAME).write_bytes(content)
        except (RuntimeError, ValueError, TypeError, NotImplementedError) as exc:
            version = metadata.version("litert-torch")
            raise ConversionError(
                f"litert-torch {version} cannot convert the model for {quant.mode.value}: {first_line(exc)}"
            ) from exc

    # fp32 has no activation zero points: LiteRT's and Arm NN's float .tflite are the same file.
    settings = {"quant": quant_settings(quant), "symmetric_activations": symmetric_activations and quant.mode.is_static}
    with (stages or Stages()).stage("litert.tflite", settings, build) as directory:
        shutil.copyfile(directory / _FILENAME, path)
    if quant.mode is QuantMode.DYNAMIC_INT8:
        model = tflite.load(path)
        if tflite.symmetric_embedding_tables(model):
            tflite.save(model, path)
    if not quant.mode.is_static:  # fp32 and dynamic-range models take and return float32
        return IOSpec(), ()
    model = tflite.load(path)
    notes = tuple(tflite.consistent_bias_scales(model))
    if quant.interface is Interface.FULL:
        if notes:
            tflite.save(model, path)
        return tflite.int8_io(model), notes
    tflite.float_interface(model)
    tflite.save(model, path)
    return IOSpec(), notes


def _edge_quantized(bundle: ModelBundle, config: DeploymentConfig, path: Path, stages: Stages) -> tuple[str, ...]:
    """Write ``config``'s ``fp16``, ``int4_weight`` or ``a16w8`` model to ``path``: the fp32
    ``.tflite`` (its own stage) quantized by ai-edge-quantizer
    (:mod:`~nnsweep.runtimes.litert.edge_quantizer`, stage ``litert.edge_quantizer``); return
    the partition report's notes (int4_weight: which linear layers went 4-bit)."""
    quant = config.quant
    # int4_weight refuses a model without linear layers before converting anything
    layers = int4.plan(bundle.module, quant.group_size, quant.float_layers) if quant.group_size else None

    def build(directory: Path) -> None:
        fp32 = directory / "fp32.tflite"
        export_tflite(bundle, DeploymentConfig(config.runtime, config.backends), fp32, stages=stages)
        target = directory / _FILENAME
        notes: tuple[str, ...] = ()
        if layers is not None:
            notes = quantize_int4(fp32, target, layers, bundle.module)
        elif quant.mode is QuantMode.A16W8:
            quantize_a16w8(fp32, target, (x.numpy() for x in calibration_samples(bundle, quant)))
        else:
            quantize_fp16(fp32, target)
        fp32.unlink()
        (directory / _NOTES).write_text(json.dumps(list(notes)))

    with stages.stage("litert.edge_quantizer", {"quant": quant_settings(quant)}, build) as directory:
        shutil.copyfile(directory / _FILENAME, path)
        return (*(layers.notes() if layers else ()), *json.loads((directory / _NOTES).read_text()))


class LiteRTConverter(Converter):
    """``.tflite`` by litert-torch; the partition report from LiteRT's interpreter.

    The ``.tflite`` does not depend on the backend order: another order of the same model
    and quantization copies the stage (:func:`export_tflite`) and only places it again.
    """

    def convert(self, bundle: ModelBundle, config: DeploymentConfig, out_dir: Path) -> ConversionResult:
        """Write ``model.tflite`` for ``config`` into ``out_dir`` and describe it.

        Raises:
            ConversionError: the model cannot be deployed this way; the message says why.
        """
        path = out_dir / _FILENAME
        if config.quant.mode in (QuantMode.FP16, QuantMode.INT4_WEIGHT, QuantMode.A16W8):
            spec, notes = IOSpec(), _edge_quantized(bundle, config, path, self.stages)
        else:
            spec, notes = export_tflite(bundle, config, path, stages=self.stages)
        try:
            with native_stderr_to_debug_log(_log, "LiteRT's interpreter"):  # "Created ... XNNPACK delegate"
                report = placement(interpreter(path, config.backends, 1), config.backends)
        except (ValueError, RuntimeError) as exc:
            raise ConversionError(f"LiteRT cannot load the converted model: {exc}") from exc
        return ConversionResult(filename=path.name, partitions=report, io=spec, model_notes=notes)
