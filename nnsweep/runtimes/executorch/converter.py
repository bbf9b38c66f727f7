"""ExecuTorch: ``torch.export`` -> PT2E quantization -> ordered delegate partitioners -> ``.pte``.

The backend preference order becomes the ordered partitioner list of
``to_edge_transform_and_lower``: the first partitioner claims the ops it
supports, the next sees what is left, and ``portable`` (ExecuTorch's own CPU
kernels) runs everything no delegate took. Each delegate's partitioner is
wrapped in :class:`~nnsweep.runtimes.common.partition.LimitedPartitioner` so the
TFLite-style partition limits apply.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from executorch.exir.backend.partitioner import Partitioner
from torch import nn

from nnsweep.core.artifact import IOSpec
from nnsweep.core.config import Calibration, DeploymentConfig, Granularity, Interface, QuantConfig, QuantMode
from nnsweep.core.errors import ConversionError
from nnsweep.core.runtimes import npu_target
from nnsweep.models import ModelBundle
from nnsweep.runtimes.common import float_fallback, int4
from nnsweep.runtimes.common.converter import ConversionResult, Converter, quant_settings
from nnsweep.runtimes.common.half import HalfPrecision
from nnsweep.runtimes.common.int4 import Int4Plan
from nnsweep.runtimes.common.partition import LimitedPartitioner, report_from_program
from nnsweep.runtimes.common.pt2e import export, exported_program, quantize, quantize_io
from nnsweep.runtimes.executorch.lowering import lower

__all__ = [
    "BACKEND_IDS",
    "ExecuTorchConverter",
    "float_conv1d_as_conv2d",
    "int4_weights",
    "quantize_pads_of_int8_inputs",
    "rebuilt_program",
    "scalar_overloads_for_integer_ops",
    "without_batch_norm_patterns_if_none_can_match",
    "xnnpack_quantizer",
]

# nnsweep backend name -> ExecuTorch runtime backend id (what the .pte asks the runtime for).
BACKEND_IDS = {"xnnpack": "XnnpackBackend"}


def _xnnpack_partitioner(quant: QuantConfig) -> Partitioner:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    return XnnpackPartitioner()


_PARTITIONERS: dict[str, Callable[[QuantConfig], Partitioner]] = {"xnnpack": _xnnpack_partitioner}


def xnnpack_quantizer(quant: QuantConfig) -> Any:
    """ExecuTorch's XNNPACK PT2E quantizer for ``quant``, leaving ``quant.float_layers`` in float."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e import MinMaxObserver

    config = get_symmetric_quantization_config(
        is_per_channel=quant.granularity is Granularity.PER_CHANNEL,
        is_qat=quant.mode is QuantMode.QAT_INT8,
        is_dynamic=quant.mode is QuantMode.DYNAMIC_INT8,
    )
    if quant.mode is QuantMode.STATIC_INT8 and quant.calibration is Calibration.MINMAX:
        # XNNPACK's default static activation observer is a histogram; min/max is the other method offered.
        spec = config.input_activation
        act = dataclasses.replace(spec, observer_or_fake_quant_ctr=MinMaxObserver.with_args(eps=2**-12))
        config = dataclasses.replace(config, input_activation=act, output_activation=act)
    quantizer = float_fallback.pt2e_keep_float(XNNPACKQuantizer().set_global(config), quant.float_layers)
    annotate = quantizer.annotate

    def annotate_then_pads(model: torch.fx.GraphModule) -> torch.fx.GraphModule:
        if quant.mode is QuantMode.STATIC_INT8:
            without_batch_norm_patterns_if_none_can_match(quantizer, model)
        annotate(model)
        quantize_pads_of_int8_inputs(model)
        return model

    quantizer.annotate = annotate_then_pads
    transform = quantizer.transform_for_annotation

    def integer_scalars_kept(model: torch.fx.GraphModule) -> torch.fx.GraphModule:
        scalar_overloads_for_integer_ops(model)
        return transform(model)

    quantizer.transform_for_annotation = integer_scalars_kept
    return quantizer


# XNNPACKQuantizer's conv-BatchNorm patterns (QAT's): a static config annotates them too.
_BATCH_NORM_PATTERNS = frozenset({"conv_bn_relu", "conv_bn", "conv_transpose_bn_relu", "conv_transpose_bn"})


def without_batch_norm_patterns_if_none_can_match(quantizer: Any, graph: torch.fx.GraphModule) -> bool:
    """Leave out of ``quantizer``'s next annotation of ``graph`` (a static, post-training
    config) its conv-BatchNorm patterns when ``graph`` holds no BatchNorm; return whether it did.

    ExecuTorch 1.5.1's XNNPACK quantizer annotates QAT's conv-BatchNorm patterns for a
    static config too, and each call exports their pattern graphs anew. After post-training
    ``prepare_pt2e`` has folded each BatchNorm into its
    convolution, there is nothing for them to match: a pattern without its BatchNorm node
    matches no graph without one. What those annotators do before matching (dead code
    removed, the graph recompiled) is done here, so the graph is annotated node for node
    as before (``tests/test_convert_executorch.py`` compares the prepared graphs). An
    attribute of this quantizer instance is set; the class is untouched.
    """
    patterns = type(quantizer).SUPPORTED_PATTERNS
    if any(n.op == "call_function" and "batch_norm" in str(n.target) for n in graph.graph.nodes):
        quantizer.SUPPORTED_PATTERNS = patterns  # every pattern, as the class has them
        return False
    graph.graph.eliminate_dead_code()
    graph.recompile()
    quantizer.SUPPORTED_PATTERNS = [p for p in patterns if p.name not in _BATCH_NORM_PATTERNS]
    return True


_SCALAR_OVERLOADS = {
    torch.ops.aten.add.Tensor: torch.ops.aten.add.Scalar,
    torch.ops.aten.mul.Tensor: torch.ops.aten.mul.Scalar,
}


def scalar_overloads_for_integer_ops(graph: torch.fx.GraphModule) -> int:
    """Call each integer ``add`` or ``mul`` of a tensor and a Python number through the op's
    ``Scalar`` overload (the same result); return how many.

    ExecuTorch 1.5.1's XNNPACK quantizer, before it annotates, turns the number of every
    ``add.Tensor`` and ``mul.Tensor`` into a float32 tensor (``_convert_scalars_to_attrs``),
    integer ops too: an ``int64`` sum became float32. Hugging Face's GPT-2 and Llama number
    positions ``arange(n) + past_length``; the sum, now float, reached the position
    embedding, and every static int8 conversion failed in calibration ("Expected tensor for
    argument #1 'indices' to have one of the following scalar types: Long, Int"). The
    quantizer leaves the ``Scalar`` overloads alone, and nothing quantizes integer tensors.
    """
    changed = 0
    for node in graph.graph.nodes:
        scalar_op = _SCALAR_OVERLOADS.get(node.target) if node.op == "call_function" else None
        value = node.meta.get("val")
        if scalar_op is None or not isinstance(value, torch.Tensor) or value.dtype.is_floating_point:
            continue
        tensor, other = (*node.args, None)[:2]
        if isinstance(tensor, torch.fx.Node) and isinstance(other, (int, float, bool)):
            node.target = scalar_op
            changed += 1
    if changed:
        graph.recompile()
    return changed


def _zero_pad(node: torch.fx.Node) -> bool:
    """Whether ``node`` pads with zeros (``F.pad`` in constant mode, or ``constant_pad_nd``)."""
    if node.op != "call_function":
        return False
    if node.target is torch.ops.aten.pad.default:
        mode = node.kwargs.get("mode", node.args[2] if len(node.args) > 2 else "constant")
        value = node.kwargs.get("value", node.args[3] if len(node.args) > 3 else None)
        return bool(mode == "constant" and not value)
    if node.target is torch.ops.aten.constant_pad_nd.default:
        return not bool(node.kwargs.get("value", node.args[2] if len(node.args) > 2 else 0))
    return False


def quantize_pads_of_int8_inputs(graph: torch.fx.GraphModule) -> int:
    """Give each zero pad whose input is int8 and whose output nothing quantizes the
    quantization of its input (lossless: the same values, and zero, which every int8 range
    of PT2E's observers holds); return how many.

    ExecuTorch 1.5.1's XNNPACK backend takes such a pad as a float op, then (its
    ``InsertPadQDQPass``) makes its output int8 while its input stays the float a
    dequantize gives: the ``.pte`` converts but does not load ("Failed to create
    StaticConstantPad node ... xnn_status_invalid_parameter"). Swin's patch merging pads
    an int8 sum and slices it (``torchvision:swin_t`` at 96x96 failed so).
    """
    from torchao.quantization.pt2e.quantizer import QuantizationAnnotation, SharedQuantizationSpec
    from torchao.quantization.pt2e.quantizer.quantizer import Q_ANNOTATION_KEY

    given = 0
    for node in graph.graph.nodes:
        if not _zero_pad(node) or Q_ANNOTATION_KEY in node.meta:
            continue
        source = node.args[0]
        produced = source.meta.get(Q_ANNOTATION_KEY) if isinstance(source, torch.fx.Node) else None
        if produced is None or produced.output_qspec is None:
            continue
        read_as_int8 = any(
            node in getattr(user.meta.get(Q_ANNOTATION_KEY), "input_qspec_map", {}) for user in node.users
        )
        if read_as_int8:  # a reader quantizes the pad's output already
            continue
        shared = SharedQuantizationSpec(source)
        node.meta[Q_ANNOTATION_KEY] = QuantizationAnnotation(
            input_qspec_map={source: shared}, output_qspec=shared, _annotated=True
        )
        given += 1
    return given


class _Conv1dAs2d(nn.Module):
    """A ``Conv1d`` computed as a ``Conv2d`` with a (k, 1) kernel on the input with a trailing
    unit dimension: what XNNPACK runs for a ``Conv1d`` anyway, written before export."""

    def __init__(self, conv: nn.Conv1d) -> None:
        super().__init__()
        padding = conv.padding if isinstance(conv.padding, str) else (conv.padding[0], 0)
        self.conv = nn.Conv2d(
            conv.in_channels,
            conv.out_channels,
            (conv.kernel_size[0], 1),
            stride=(conv.stride[0], 1),
            padding=padding,
            dilation=(conv.dilation[0], 1),
            groups=conv.groups,
            bias=conv.bias is not None,
            padding_mode=conv.padding_mode,
        )
        with torch.no_grad():
            self.conv.weight.copy_(conv.weight.unsqueeze(-1))
            if conv.bias is not None and self.conv.bias is not None:
                self.conv.bias.copy_(conv.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x.unsqueeze(-1)).squeeze(-1)


def float_conv1d_as_conv2d(model: nn.Module, keep_float: tuple[str, ...]) -> int:
    """Replace, in place, each ``Conv1d`` kept in float (at or under a path of ``keep_float``)
    by the same convolution as a ``Conv2d`` (:class:`_Conv1dAs2d`, at the same module path);
    return how many.

    ExecuTorch 1.5.1's XNNPACK backend turns each ``Conv1d`` into a ``Conv2d`` while lowering,
    and where a float ``Conv1d`` meets int8 neighbours that pass takes it for quantized: the
    lowering fails ("Weight and Input should both be quantized") or the ``.pte`` does not
    load (error 0x1). Written as a ``Conv2d`` before export, the float layer lowers as any
    float convolution (benchmarks/results/mixed_precision.md).
    """
    paths = _float_conv1d_paths(model, keep_float)
    for path in paths:
        parent_path, _, name = path.rpartition(".")
        setattr(model.get_submodule(parent_path), name, _Conv1dAs2d(model.get_submodule(path)))  # type: ignore[arg-type]
    return len(paths)


def _float_conv1d_paths(model: nn.Module, keep_float: tuple[str, ...]) -> list[str]:
    """The module paths of the ``Conv1d`` layers of ``model`` at or under a path of ``keep_float``."""
    return [
        path
        for path, module in model.named_modules()
        if path and isinstance(module, nn.Conv1d) and float_fallback.in_modules(path, keep_float)
    ]


def rebuilt_program(bundle: ModelBundle, quant: QuantConfig) -> torch.export.ExportedProgram:
    """The exported program (quantized for int8 modes, its calibration included; 4-bit weights
    for int4_weight) the converter lowers for ``quant``, built again (``bench --explain``
    lowers it without a delegate)."""
    return _program(bundle, quant, _int4_layers(bundle, quant))


def _int4_layers(bundle: ModelBundle, quant: QuantConfig) -> Int4Plan | None:
    """int4_weight: which linear layers go 4-bit (``None`` for other modes)."""
    layers = int4.plan(bundle.module, quant.group_size, quant.float_layers) if quant.group_size else None
    if layers is not None:
        layers = layers.without(_read_by_attention(bundle.module), _READ_BY_ATTENTION)
    return layers


def int4_weights(model: nn.Module, layers: Int4Plan) -> nn.Module:
    """Quantize, in place, the linear layers of ``layers`` to torchao's 8da4w; XNNPACK takes each
    as one blockwise-quantized fully connected node (torchao 0.18 has no ``...Int4WeightConfig``)."""
    return int4.quantize_8da4w(model, layers)


_READ_BY_ATTENTION = (
    "nn.MultiheadAttention reads this projection's weight itself (F.multi_head_attention_forward "
    "transposes it), which torchao's 4-bit weight tensor does not support"
)


def _read_by_attention(model: nn.Module) -> tuple[str, ...]:
    """The module paths of the linear layers of ``model`` that an ``nn.MultiheadAttention``
    reads the weight of instead of calling (its ``out_proj``)."""
    return tuple(
        f"{path}.{name}" if path else name
        for path, module in model.named_modules()
        if isinstance(module, nn.MultiheadAttention)
        for name, child in module.named_children()
        if isinstance(child, nn.Linear)
    )


def _program(bundle: ModelBundle, quant: QuantConfig, layers: Int4Plan | None) -> torch.export.ExportedProgram:
    model: nn.Module
    if layers is not None:
        model = int4_weights(copy.deepcopy(bundle.module).eval(), layers)
    elif quant.mode is QuantMode.FP16:
        model = HalfPrecision(copy.deepcopy(bundle.module)).eval()
    elif quant.mode.is_int8:
        if _float_conv1d_paths(bundle.module, quant.float_layers):  # a copy only where one is rewritten
            source = copy.deepcopy(bundle.module).eval()
            float_conv1d_as_conv2d(source, quant.float_layers)
            bundle = dataclasses.replace(bundle, module=source)
        model = quantize(bundle, quant, xnnpack_quantizer(quant))
    else:
        model = copy.deepcopy(bundle.module).eval()
    return export(model, bundle.example_input, dynamic_batch=False)


class ExecuTorchConverter(Converter):
    """Lower a model to an ExecuTorch ``.pte`` with the configured delegates.

    The exported program (quantized for int8 modes) is a stage (:func:`exported_program`):
    another backend order or partition limit of the same model and quantization lowers it
    again without exporting, quantizing and calibrating again.
    """

    def convert(self, bundle: ModelBundle, config: DeploymentConfig, out_dir: Path) -> ConversionResult:
        if npu_target(config) is not None:
            from nnsweep.runtimes.ethosu.converter import convert_ethos_u

            return convert_ethos_u(bundle, config, out_dir, self.stages)
        quant = config.quant
        # int4_weight: which linear layers go 4-bit, known (or refused) before anything converts
        layers = _int4_layers(bundle, quant)
        if layers is not None and "xnnpack" not in config.backends:
            raise ConversionError(
                "int4_weight runs on XNNPACK's blockwise 4-bit kernels and ExecuTorch's portable kernels have "
                "none: put xnnpack in the backend order"
            )
        notes = layers.notes() if layers else ()
        program = exported_program(self.stages, quant, "xnnpack", lambda: _program(bundle, quant, layers))
        io = quantize_io(program) if quant.interface is Interface.FULL else IOSpec()

        partitioners: list[LimitedPartitioner] = []
        for name in config.backends:
            if name == "portable":
                break
            partitioners.append(LimitedPartitioner(_PARTITIONERS[name](quant), config.partitions))
        # The same program and backends give the same edge program, whatever the limits.
        settings = json.dumps(quant_settings(quant), sort_keys=True)
        edge = lower(program, partitioners, key=(bundle.digest, settings, quant.interface, config.backends))
        names = {backend_id: name for name, backend_id in BACKEND_IDS.items()}
        report = report_from_program(edge.exported_program(), config.backends, names)
        if quant.mode.is_int8:
            # Registers the out-variants of quantize/dequantize that run outside a delegate.
            import executorch.kernels.quantized  # noqa: F401
        executorch_program = edge.to_executorch()
        path = out_dir / "model.pte"
        path.write_bytes(executorch_program.buffer)
        return ConversionResult(filename=path.name, partitions=report, io=io, model_notes=notes)
