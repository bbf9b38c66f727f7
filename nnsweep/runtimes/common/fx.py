"""torch.ao FX graph-mode quantization, as the torch runtime uses it: the quantized engine
for a block, the qconfig mapping per mode and granularity, prepare/calibrate (or fine-tune)
/convert, and stripping the quantize/dequantize at a model's boundary for the ``full``
interface. Split from :mod:`nnsweep.runtimes.torch.converter`, which turns the result into TorchScript."""

from __future__ import annotations

import contextlib
import copy
import functools
import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from nnsweep.core.artifact import IOSpec
from nnsweep.core.config import Calibration, Granularity, QuantConfig, QuantMode
from nnsweep.core.errors import ConversionError
from nnsweep.models import ModelBundle, takes_batches
from nnsweep.runtimes.common import float_fallback
from nnsweep.runtimes.common.fx_untraceable import traced_or_refused
from nnsweep.runtimes.common.quantize import calibration_samples, qat_finetune

__all__ = [
    "conv_transpose_probe_db",
    "convert_quietly",
    "explicit_conv_padding",
    "no_quantized_tensor_deprecation",
    "own_flow_sqnr_db",
    "qconfig_mapping",
    "quantize_fx",
    "quantized_engine",
    "refuse_hooks",
    "refuse_prelu",
    "refuse_wrong_conv_transpose",
    "strip_io_quantization",
    "wrong_conv_transposes",
]

# Engines whose kernels may overflow 16-bit intermediate sums with 8-bit activations on
# CPUs without VNNI: PyTorch's default qconfigs for them use 7-bit activations.
_REDUCE_RANGE_ENGINES = frozenset({"x86", "fbgemm"})


@contextlib.contextmanager
def quantized_engine(name: str) -> Iterator[None]:
    """Select quantized engine ``name`` for the block: prepacking of weights uses it."""
    previous = torch.backends.quantized.engine
    torch.backends.quantized.engine = name
    try:
        yield
    finally:
        torch.backends.quantized.engine = previous


def qconfig_mapping(engine: str, quant: QuantConfig) -> Any:
    """The engine's default QConfigMapping with our global QConfig.

    The engine's mapping is kept for what it says about special ops (fixed-range
    ops such as sigmoid, transposed convolutions); the global QConfig has symmetric
    int8 weights per tensor or per output channel and, for static PTQ, the
    activation observer of the calibration method, which the special ops that
    observe their output get too (:func:`_engine_mapping`). The activation range follows
    the engine's defaults (``reduce_range``), given as ``quant_min``/``quant_max``
    because observers deprecate ``reduce_range``.
    """
    from torch.ao.quantization import (
        FakeQuantize,
        QConfig,
        get_default_qat_qconfig_mapping,
        get_default_qconfig_mapping,
    )
    from torch.ao.quantization.observer import (
        HistogramObserver,
        MinMaxObserver,
        MovingAverageMinMaxObserver,
        MovingAveragePerChannelMinMaxObserver,
        PerChannelMinMaxObserver,
    )

    activation_range: dict[str, Any] = {
        "dtype": torch.quint8,
        "quant_min": 0,
        "quant_max": 127 if engine in _REDUCE_RANGE_ENGINES else 255,
    }
    per_channel = quant.granularity is Granularity.PER_CHANNEL
    weight_args: dict[str, Any] = {
        "dtype": torch.qint8,
        "qscheme": torch.per_channel_symmetric if per_channel else torch.per_tensor_symmetric,
    }
    if quant.mode is QuantMode.QAT_INT8:
        # As get_default_qat_qconfig(engine), with the weight granularity asked for
        # (the default is per channel for x86/fbgemm/onednn but per tensor for qnnpack).
        weight_observer = MovingAveragePerChannelMinMaxObserver if per_channel else MovingAverageMinMaxObserver
        qconfig = QConfig(
            activation=FakeQuantize.with_args(observer=MovingAverageMinMaxObserver, **activation_range),
            weight=FakeQuantize.with_args(observer=weight_observer, quant_min=-128, quant_max=127, **weight_args),
        )
        return _engine_mapping(get_default_qat_qconfig_mapping, engine, qconfig)
    activation = HistogramObserver if quant.calibration is Calibration.HISTOGRAM else MinMaxObserver
    weight = PerChannelMinMaxObserver if per_channel else MinMaxObserver
    qconfig = QConfig(
        activation=activation.with_args(**activation_range),
        weight=weight.with_args(**weight_args),
    )
    return _engine_mapping(get_default_qconfig_mapping, engine, qconfig)


def _engine_mapping(default_mapping: Callable[[str], Any], engine: str, qconfig: Any) -> Any:
    """The engine's default mapping with ``qconfig`` as its global QConfig and its activation
    observer on every op that observes its own output.

    The engine's mapping gives a few ops (LayerNorm, transposed convolutions, PReLU) the
    engine's default activation observer: a histogram, whatever calibration was asked for,
    built with ``reduce_range``, which torch warns is deprecated (once per such op: a
    two-layer transformer printed eleven warnings). They keep their own weight observers
    (LayerNorm's float weight, per-tensor weights for transposed convolutions on x86) and
    take ``qconfig``'s activation observer, as every other op does. Fixed-range ops
    (sigmoid, tanh) and ops that reuse their input's range (reshape) keep theirs.

    ``get_default_qconfig("onednn")`` warns when the CPU building the mapping has no
    VNNI. That CPU is the conversion host, not the target, and the global QConfig that
    warning is about is replaced by ours; the accuracy on the target is measured there.
    """
    from torch.ao.quantization import QConfig
    from torch.ao.quantization.observer import HistogramObserver

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Default qconfig of oneDNN backend", category=UserWarning)
        mapping = default_mapping(engine)
    engines = mapping.global_qconfig.activation
    for key, entry in list(mapping.object_type_qconfigs.items()):
        if entry is not None and (entry.activation is engines or entry.activation is HistogramObserver):
            mapping.set_object_type(key, QConfig(activation=qconfig.activation, weight=entry.weight))
    # An embedding's table stays float: torch quantizes one only weight-only with float
    # qparams (QAT asserted "Embedding weights requires a qscheme of
    # per_channel_affine_float_qparams"); a token-id model is quantized after the lookup.
    for embedding in (torch.nn.Embedding, torch.nn.EmbeddingBag):
        mapping.set_object_type(embedding, None)
    return mapping.set_global(qconfig)


@contextlib.contextmanager
def no_quantized_tensor_deprecation() -> Iterator[None]:
    """Without torch's deprecation warning for quantized tensors in the block.

    Building each quantized module (``convert_fx``, ``quantize_dynamic``) warns that
    ``torch.quantize_per_tensor`` and the other quantized tensor functions will be removed
    (torch 2.14); a user of nnsweep can do nothing about it, and every sweep, bench and
    ranking through torch printed it.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"torch\.quantize_per_tensor, torch\.quantize_per_channel")
        yield


def convert_quietly(prepared: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``convert_fx(prepared)`` without torch's deprecation warning (:func:`no_quantized_tensor_deprecation`)."""
    from torch.ao.quantization.quantize_fx import convert_fx

    with no_quantized_tensor_deprecation():
        return convert_fx(prepared)


def quantize_fx(bundle: ModelBundle, quant: QuantConfig, engine: str) -> torch.fx.GraphModule:
    """Static PTQ or QAT with FX graph mode; call with ``engine`` selected.

    Raises:
        ConversionError: the model has a PReLU, forward hooks, or a transposed convolution
            the engine computes wrongly, to be quantized; or code torch.fx cannot trace
            (:func:`~nnsweep.runtimes.common.fx_untraceable.untraceable`).
    """
    refuse_prelu(bundle.module)
    refuse_hooks(bundle.module)
    refuse_wrong_conv_transpose(bundle.module, engine, quant.float_layers)
    model = copy.deepcopy(bundle.module).eval()
    bake_parametrizations(model)
    explicit_conv_padding(model)
    example = (bundle.example_input,)
    mapping = qconfig_mapping(engine, quant)
    if quant.mode is QuantMode.QAT_INT8:
        with traced_or_refused(quant.mode):
            prepared = float_fallback.fx_prepare(model.train(), mapping, quant.float_layers, example, qat=True)
        batch = 32 if takes_batches(bundle) else 1
        qat_finetune(prepared, bundle, quant, batch_size=batch)
        prepared.eval()
    else:
        with traced_or_refused(quant.mode):
            prepared = float_fallback.fx_prepare(model.eval(), mapping, quant.float_layers, example)
        with torch.no_grad():
            for x in calibration_samples(bundle, quant):
                prepared(x)
    converted = convert_quietly(prepared)
    _inline_scalar_qparams(converted)
    return converted


def bake_parametrizations(model: torch.nn.Module) -> int:
    """Replace, in place, each parametrized tensor of ``model`` (``weight_norm``,
    ``spectral_norm``, ``torch.nn.utils.parametrize``) by its value, a plain parameter;
    return how many. Call on a copy in eval mode.

    A parametrization is a training-time form of the weight: deployed, the weight is its
    value. torch.ao's QAT swaps each layer for its QAT class with ``from_float``, which
    takes the layer's own class only: a ``weight_norm`` convolution failed ("qat.Conv1d.from_float
    only works for Conv1d, got ParametrizedConv1d").
    """
    from torch.nn.utils import parametrize

    baked = 0
    for module in list(model.modules()):
        if not parametrize.is_parametrized(module):
            continue
        # Removing a parametrization edits the module's class, which a deep copy shares with
        # the model it was copied from: give the copy a class of its own first.
        cls = type(module)
        own = {k: v for k, v in vars(cls).items() if k not in ("__dict__", "__weakref__")}
        module.__class__ = type(cls.__name__, cls.__bases__, own)
        for name in list(module.parametrizations.keys()):  # type: ignore[union-attr,operator]
            parametrize.remove_parametrizations(module, name, leave_parametrized=True)
            baked += 1
    return baked


def explicit_conv_padding(model: torch.nn.Module) -> int:
    """Write, in place, each convolution's ``padding="valid"`` or symmetric ``"same"`` as the
    numbers it stands for (the same output); return how many. Call on a copy.

    torch.ao's quantized convolutions take the module's ``padding`` as it is, and a string
    reached the weight's prepacking: every static int8 and QAT conversion of a model with
    such a convolution failed ("quantized::conv2d_prepack() Expected a value of type
    'List[int]' for argument 'padding' but instead found type 'tuple'"; Hugging Face's
    EfficientNet). A ``"same"`` that pads one side more (an even kernel) is left as it is.
    """
    written = 0
    for module in model.modules():
        if not isinstance(module, torch.nn.modules.conv._ConvNd) or not isinstance(module.padding, str):
            continue
        if module.padding == "valid":
            module.padding = (0,) * len(module.kernel_size)
        else:
            total = [d * (k - 1) for d, k in zip(module.dilation, module.kernel_size, strict=True)]
            if any(t % 2 for t in total):
                continue
            module.padding = tuple(t // 2 for t in total)
        written += 1
    return written


def refuse_prelu(module: torch.nn.Module) -> None:
    """torch 2.14's int8 PReLU computes wrong values, on x86 and qnnpack alike, with torch's own
    default mapping too: a conv-PReLU-conv had 3.5 dB against fp32, the same model with the
    same slope as a LeakyReLU 28 dB. Its lowering turns a PReLU into the quantized one even
    when the mapping leaves it float, so it cannot be kept float either."""
    prelus = [name for name, sub in module.named_modules() if isinstance(sub, torch.nn.PReLU)]
    if prelus:
        version = torch.__version__.split("+")[0]
        raise ConversionError(
            f"torch {version}'s int8 PReLU computes wrong values (3.5 dB against fp32 where a LeakyReLU of the "
            f"same slope gives 28 dB): {', '.join(prelus[:3])}{' ...' if len(prelus) > 3 else ''}; deploy this "
            "model with another runtime, or torch in fp32, fp16 or dynamic int8"
        )


def refuse_hooks(module: torch.nn.Module) -> None:
    """torch.fx traces a module's ``forward`` and records a layer as one call: the forward
    hooks and pre-hooks registered on the model or its layers do not run in the traced
    graph, so torch's FX int8 deploys another model than the one measured in fp32 (a hook
    that halves a convolution's output: 11.8 dB and no top-1 agreement, where the runtimes
    that export the model, hooks included, had 46-48 dB). Dynamic int8 swaps layers with
    their hooks, and fp32 and fp16 run the module: those keep them."""
    hooked = [
        name or "the model" for name, sub in module.named_modules() if sub._forward_hooks or sub._forward_pre_hooks
    ]
    if hooked:
        raise ConversionError(
            f"torch's FX int8 quantizer drops forward hooks, which {', '.join(hooked[:3])}"
            f"{' ...' if len(hooked) > 3 else ''} {'has' if len(hooked) == 1 else 'have'}: deploy this model with "
            "another runtime (they export it, hooks included), or torch in fp32, fp16 or dynamic int8"
        )


# The engines whose int8 transposed convolutions compute wrong values (torch 2.14) on some x86
# CPUs for some layer shapes: on one without AVX-512 VNNI, every two-row 2-D kernel tried; on an
# AMD EPYC with it, x86 every layer whose input and output channels differ (1-D and 2-D, any
# kernel), and fbgemm every two-row 2-D kernel.
_FBGEMM_ENGINES = frozenset({"x86", "fbgemm"})
# Below this SQNR against fp32, a probe of the layer is computed wrongly (right: 30-45 dB; wrong: -17 to 7).
_PROBE_FLOOR_DB = 10.0
_TRANSPOSED = (torch.nn.ConvTranspose1d, torch.nn.ConvTranspose2d)


def wrong_conv_transposes(module: torch.nn.Module, engine: str, float_layers: Sequence[str] = ()) -> list[str]:
    """The layers :func:`refuse_wrong_conv_transpose` refuses: ``engine``'s int8 computes them
    wrongly on this machine (:func:`conv_transpose_probe_db` of each one's shape)."""
    if engine not in _FBGEMM_ENGINES:
        return []
    kept = set(float_layers)
    return [
        name
        for name, sub in module.named_modules()
        if type(sub) in _TRANSPOSED
        and name not in kept
        and conv_transpose_probe_db(engine, _shape(sub)) < _PROBE_FLOOR_DB
    ]


def _shape(layer: torch.nn.ConvTranspose1d | torch.nn.ConvTranspose2d) -> tuple[Any, ...]:
    """What of a transposed convolution the probe rebuilds: all that picks the kernel's code path."""
    return (
        layer.in_channels,
        layer.out_channels,
        tuple(layer.kernel_size),
        tuple(layer.stride),
        tuple(layer.padding) if isinstance(layer.padding, tuple) else layer.padding,
        tuple(layer.output_padding),
        layer.groups,
        tuple(layer.dilation),
        layer.bias is not None,
    )


@functools.cache
def conv_transpose_probe_db(engine: str, shape: tuple[Any, ...]) -> float:
    """The SQNR against fp32 of a ``ConvTranspose1d`` or ``ConvTranspose2d`` of ``shape``
    (:func:`_shape`; seeded weights, eight inputs of 16 steps or 8x8) through torch's own FX
    int8 flow with ``engine``'s default mapping, on this machine's kernels, once per shape and
    process (0.02 s; the first about 1.6 s with its imports, measured on a 2-core x86 machine).
    The fault is the CPU's code path for the shape: the same torch computes one layer wrongly
    on one x86 CPU and rightly on another."""
    in_channels, out_channels, kernel, stride, padding, output_padding, groups, dilation, bias = shape
    generator = torch.Generator().manual_seed(0)
    two_d = len(kernel) == 2
    layer_type = torch.nn.ConvTranspose2d if two_d else torch.nn.ConvTranspose1d
    layer = layer_type(
        in_channels,
        out_channels,
        kernel,
        stride,
        padding=padding,
        output_padding=output_padding,
        groups=groups,
        bias=bias,
        dilation=dilation,
    )
    probe = torch.nn.Sequential(layer).eval()
    with torch.no_grad():
        for parameter in probe.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.1)
    size = (8, 8) if two_d else (16,)
    return own_flow_sqnr_db(probe, torch.randn(8, in_channels, *size, generator=generator), engine)


def own_flow_sqnr_db(net: torch.nn.Module, x: torch.Tensor, engine: str) -> float:
    """The output SQNR against fp32, in dB, of ``net`` through torch's own FX int8 flow with
    ``engine``'s default mapping, calibrated and evaluated on ``x``: what this machine's
    kernels for ``engine`` make of it."""
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import prepare_fx

    previous = torch.backends.quantized.engine
    torch.backends.quantized.engine = engine
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's deprecations of its own FX flow
            prepared = prepare_fx(copy.deepcopy(net), get_default_qconfig_mapping(engine), (x[:1],))
            prepared(x)
            noise = (convert_quietly(prepared)(x) - net(x)).pow(2).mean()
            return float(10 * torch.log10(net(x).pow(2).mean() / noise))
    finally:
        torch.backends.quantized.engine = previous


def refuse_wrong_conv_transpose(module: torch.nn.Module, engine: str, float_layers: Sequence[str] = ()) -> None:
    """torch 2.14's x86 and fbgemm int8 transposed convolutions compute wrong values on some
    x86 CPUs for some layer shapes, with torch's own FX flow and default mapping too: -17 to
    7 dB against fp32 where qnnpack gives 36-45 dB. Which shapes depends on the CPU (on one, a
    U-Net's two-row ``ConvTranspose2d(c, c, 2, stride=2)`` on both engines; on another, the
    x86 engine's every layer whose input and output channels differ, 1-D or 2-D). So each
    ``ConvTranspose1d`` and ``ConvTranspose2d`` is probed on this machine
    (:func:`conv_transpose_probe_db`), and one it gets wrong is refused; left float
    (``float_layers``) it is fine."""
    wrong = wrong_conv_transposes(module, engine, float_layers)
    if wrong:
        version = torch.__version__.split("+")[0]
        what = "these layers' shapes" if len(wrong) > 1 else "this layer's shape"
        raise ConversionError(
            f"torch {version}'s {engine} int8 transposed convolution computes wrong values on this CPU for "
            f"{what} (probed: below {_PROBE_FLOOR_DB:.0f} dB "
            f"against fp32, where qnnpack gives 36-45 dB): {', '.join(wrong[:3])}"
            f"{' ...' if len(wrong) > 3 else ''}; keep them float (float_layers), put qnnpack first in torch's "
            "backends, or deploy with another runtime"
        )


# The names convert_fx gives the output scale and zero point it registers on the root module.
_QPARAM = re.compile(r"_(scale|zero_point)_\d+$")


def _inline_scalar_qparams(model: torch.fx.GraphModule) -> None:
    """Pass the output scale/zero point of ``quantized::`` ops (``add``, ``mul``, ``cat`` ...) as numbers.

    ``convert_fx`` keeps them as one-element tensor attributes, which these ops
    take as float/int: tracing turns each into a constant while warning that a
    tensor was read as a Python value. They are constants, so inline them and keep
    the tracer's warnings for what they are meant to catch (data-dependent control
    flow in the model).
    """
    graph = model.graph
    for node in list(graph.nodes):
        if node.op != "get_attr" or not node.users or not _QPARAM.search(str(node.target)):
            continue  # a quantized LayerNorm's weight and bias are get_attr too, and stay tensors
        if not all(getattr(user.target, "_qualified_op_name", "").startswith("quantized::") for user in node.users):
            continue
        value = getattr(model, str(node.target))  # convert_fx registers its qparams on the root module
        if not isinstance(value, torch.Tensor) or value.numel() != 1:
            continue
        scalar = float(value.item()) if value.is_floating_point() else int(value.item())
        for user in list(node.users):
            user.args = tuple(scalar if arg is node else arg for arg in user.args)
            user.kwargs = {key: scalar if arg is node else arg for key, arg in user.kwargs.items()}
        graph.erase_node(node)
    model.recompile()


def strip_io_quantization(model: torch.fx.GraphModule, example: torch.Tensor) -> tuple[IOSpec, torch.Tensor]:
    """Make a converted FX model take and return quantized tensors (the ``full`` interface).

    Drops the ``quantize_per_tensor`` on the input and the ``dequantize`` before the
    output, as the NNAPI preparation script does by hand.

    Args:
        model: the converted model, changed in place.
        example: a float input; the output's parameters are read from the tensor
            the stripped model returns for it.

    Returns:
        The input's and output's parameters, and ``example`` quantized as the model now takes it.

    Raises:
        ConversionError: the input or output is not a single quantize/dequantize.
    """
    graph = model.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    output = next(n for n in graph.nodes if n.op == "output")
    result = output.args[0]
    quantize = (
        [u for u in placeholders[0].users if u.target is torch.quantize_per_tensor] if len(placeholders) == 1 else []
    )
    if (
        len(quantize) != 1
        or len(placeholders[0].users) != 1
        or not isinstance(result, torch.fx.Node)
        or result.target != "dequantize"
    ):
        raise ConversionError("the model's input/output are not a single quantize/dequantize: use interface core")
    q = quantize[0]
    scale, zero_point = (float(_constant(model, q.args[1])), int(_constant(model, q.args[2])))
    q.replace_all_uses_with(placeholders[0])
    graph.erase_node(q)
    output.args = (result.args[0],)
    graph.erase_node(result)
    graph.eliminate_dead_code()
    model.recompile()
    quantized_example = torch.quantize_per_tensor(example, scale, zero_point, torch.quint8)
    with torch.no_grad():
        out = model(quantized_example)
    if not (isinstance(out, torch.Tensor) and out.is_quantized and out.qscheme() == torch.per_tensor_affine):
        raise ConversionError("the model's output is not a per-tensor quantized tensor: use interface core")
    io = IOSpec(
        input_dtype="uint8",
        output_dtype="uint8",
        input_scale=scale,
        input_zero_point=zero_point,
        output_scale=float(out.q_scale()),
        output_zero_point=int(out.q_zero_point()),
    )
    return io, quantized_example


def _constant(model: torch.fx.GraphModule, arg: Any) -> Any:
    """A quantize node's scale/zero point: an attribute of the module or an inline constant."""
    if isinstance(arg, torch.fx.Node) and arg.op == "get_attr":
        value = getattr(model, str(arg.target))
        return value.item() if isinstance(value, torch.Tensor) else value
    return arg
