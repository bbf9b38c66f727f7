"""The torch.export and PT2E steps that every ExecuTorch backend shares (XNNPACK and the
Arm Ethos-U backend): export, quantize with a backend's quantizer, give a program a
quantized interface. Imported by :mod:`nnsweep.runtimes.executorch.converter` and
:mod:`nnsweep.runtimes.ethosu.converter`; it imports neither."""

from __future__ import annotations

import contextlib
import copy
import io
import itertools
import logging
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from nnsweep.core.artifact import IOSpec
from nnsweep.core.errors import ConversionError
from nnsweep.core.quant import QuantConfig, QuantMode
from nnsweep.core.through_memory import save_through_memory
from nnsweep.models import ModelBundle, takes_batches
from nnsweep.runtimes.common.bags import unbag_embeddings
from nnsweep.runtimes.common.converter import Stages, quant_settings, toolchain_records_to_debug_log
from nnsweep.runtimes.common.ptq_convert import convert_ptq
from nnsweep.runtimes.common.quantize import calibration_samples, qat_finetune

__all__ = [
    "calibrated",
    "export",
    "exported_program",
    "fold_weight_computations",
    "own_layer_for_each_batch_norm",
    "quantize",
    "quantize_io",
    "ready_for_calibration",
    "ready_for_prepare",
    "untie_shared_parameters",
]

log = logging.getLogger(__name__)

_PROGRAM = "program.pt2"
_META_FAILED = "failed while attempting to run meta for"


def export(model: nn.Module, example: torch.Tensor, dynamic_batch: bool) -> torch.export.ExportedProgram:
    """``torch.export`` of ``model`` (its ``nn.EmbeddingBag`` layers an embedding and a
    reduction first, in place: :func:`~nnsweep.runtimes.common.bags.unbag_embeddings`), with a dynamic
    batch dimension or for the example's batch. Its constants have standard strides already
    (the model's load gives them: :mod:`nnsweep.models._strides`)."""
    unbag_embeddings(model)
    if dynamic_batch:
        # Export specialises a size-1 dimension, so trace with two samples. A model whose
        # shapes specialise on batch 1 fails here, and the callers fall back to batch 1:
        # the error torch's fake tensors log (with a traceback) on the way is not the user's.
        batch = torch.export.Dim("batch", min=1, max=4096)
        pair = torch.cat([example, example])
        with toolchain_records_to_debug_log(log, _META_FAILED, source="torch._subclasses.fake_tensor"):
            return torch.export.export(model, (pair,), dynamic_shapes=({0: batch},), strict=False)
    return torch.export.export(model, (example,), strict=False)


def quantize(bundle: ModelBundle, quant: QuantConfig, quantizer: Any) -> nn.Module:
    """PT2E: prepare with ``quantizer`` (a backend's PT2E quantizer), calibrate (or
    fine-tune), convert.

    The exported module is taken without its guard function (``check_guards=False``):
    backend quantizers (the Arm one) cannot trace through that call_module. A layer called
    more than once gets a copy of its parameters per call, and a BatchNorm its own call of
    the layer before it (:func:`ready_for_prepare`); for post-training quantization, the
    computations on weights alone are folded first (:func:`ready_for_calibration`).
    """
    from torchao.quantization.pt2e import move_exported_model_to_eval, move_exported_model_to_train
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e, prepare_qat_pt2e

    model = copy.deepcopy(bundle.module).eval()
    if quant.mode is QuantMode.QAT_INT8:
        # A dynamic batch dimension lets QAT train on real batches; fall back to batch 1.
        try:
            if not takes_batches(bundle):
                raise ValueError("the model takes one sample a call")
            graph = export(model, bundle.example_input, dynamic_batch=True).module(check_guards=False)
            batch = 32
        except Exception:  # models whose shapes specialise on batch 1, or that mix the samples
            graph = export(model, bundle.example_input, dynamic_batch=False).module(check_guards=False)
            batch = 1
        prepared = prepare_qat_pt2e(ready_for_prepare(graph), quantizer)
        move_exported_model_to_train(prepared)
        qat_finetune(prepared, bundle, quant, batch_size=batch)
        move_exported_model_to_eval(prepared)
        observe_ranges_again(prepared, bundle, quant, batch)
        return convert_pt2e(prepared)  # type: ignore[no-any-return]  # QAT's BatchNorms: its fold is for them
    prepared = calibrated(model, bundle, quant, lambda graph: prepare_pt2e(ready_for_calibration(graph), quantizer))
    return convert_ptq(prepared)


def observe_ranges_again(prepared: nn.Module, bundle: ModelBundle, quant: QuantConfig, batch: int) -> int:
    """After QAT's fine-tuning, observe the ranges of the moving-average fake-quantizers again
    over the calibration samples as static int8 does (the running min and max of what reaches
    each, float), not as their moving average did; return how many were observed again.

    A moving average (0.01 of each new batch) suits weights that change while they train;
    for activations after a short fine-tuning it holds on to the first batch it saw. Worse,
    where PT2E shares one fake-quantizer between several tensors (the inputs of a
    concatenation), each call moves the range 1 % towards its own, so the range stays the
    first tensor's (an SSD-style box decoder's ``cat([xy - wh / 2, xy + wh / 2])`` clipped
    its boxes after QAT). The fine-tuned weights and the per-channel weight
    ranges are kept.
    """
    from torchao.quantization.pt2e.fake_quantize import FakeQuantizeBase
    from torchao.quantization.pt2e.observer import MovingAverageMinMaxObserver

    ranges: dict[FakeQuantizeBase, tuple[torch.Tensor, torch.Tensor]] = {}

    def seen(module: FakeQuantizeBase, args: tuple[torch.Tensor, ...]) -> None:
        low, high = args[0].detach().min(), args[0].detach().max()
        if module in ranges:
            low, high = torch.minimum(low, ranges[module][0]), torch.maximum(high, ranges[module][1])
        ranges[module] = (low, high)

    quantizers = [
        m
        for m in prepared.modules()
        if isinstance(m, FakeQuantizeBase)
        and type(getattr(m, "activation_post_process", None)) is MovingAverageMinMaxObserver
    ]
    hooks = [m.register_forward_pre_hook(seen) for m in quantizers]
    for m in quantizers:  # float through them, as static calibration sees the model
        m.disable_observer()
        m.disable_fake_quant()
    try:
        samples = torch.cat(list(calibration_samples(bundle, quant)))
        step = len(samples) if batch != 1 else 1
        with torch.no_grad():
            for start in range(0, len(samples), step):
                prepared(samples[start : start + step])
    finally:
        for hook in hooks:
            hook.remove()
        for m in quantizers:
            m.enable_fake_quant()
    for m, (low, high) in ranges.items():
        observer = m.activation_post_process
        observer.min_val.copy_(low)
        observer.max_val.copy_(high)
        scale, zero_point = observer.calculate_qparams()
        m.scale.resize_(scale.shape).copy_(scale)
        m.zero_point.resize_(zero_point.shape).copy_(zero_point)
    return len(ranges)


def untie_shared_parameters(graph: nn.Module) -> torch.fx.GraphModule:
    """Give each op that reads a parameter or buffer some other op reads too its own copy
    (in place; returns ``graph``).

    A layer called twice (one ``Conv2d`` applied at two points of ``forward``) reads the
    same weight and bias from both calls. PT2E quantizes a bias with the scale of the
    call's input times the weight's, and the two calls' inputs have different scales, so
    one int32 bias cannot serve both: ExecuTorch 1.5.1's XNNPACK backend then fails to
    build the second convolution when the ``.pte`` loads (``xnn_status_invalid_parameter``,
    error 0x1), for whole-model static int8 as for mixed precision. A copy per call is what
    the int8 program needs anyway (each call's bias is its own int32 tensor); the float
    values are unchanged (QAT then fine-tunes each call's copy on its own).
    """
    assert isinstance(graph, torch.fx.GraphModule), "an exported program's module()"
    seen: set[str] = set()
    for node in list(graph.graph.nodes):
        if node.op != "get_attr":
            continue
        first = 0 if node.target in seen else 1  # another get_attr node of this target came first
        seen.add(node.target)
        owner_path, _, attr = node.target.rpartition(".")
        if not isinstance(getattr(graph.get_submodule(owner_path), attr), torch.Tensor):
            continue
        for index, user in enumerate(list(node.users)[first:]):
            user.replace_input_with(node, _read_of_a_copy(graph, node, f"call{index + 1}", user))
    graph.recompile()
    return graph


def ready_for_prepare(graph: nn.Module) -> torch.fx.GraphModule:
    """``graph`` (in place) as ExecuTorch's PT2E prepare should get it: each BatchNorm's
    layer its own (:func:`own_layer_for_each_batch_norm`), each call's parameters its own
    (:func:`untie_shared_parameters`)."""
    own_layer_for_each_batch_norm(graph)
    return untie_shared_parameters(graph)


def fold_weight_computations(graph: nn.Module) -> int:
    """Replace each computation of ``graph`` that reads only the model's weights and
    buffers (no input) by the tensor it gives, in place; return how many ops went.

    Such a computation gives the same tensor on every call, but PT2E quantizes it as if it
    were the model's work. Swin V2 computes its position bias with a two-layer MLP on a
    constant table of coordinates: the MLP's weights were quantized and its input, a
    constant, was not, so XNNPACK refused the linear and ExecuTorch's portable ``addmm``
    ran it on every call, most of a ``torchvision:swin_v2_t`` run. Folded, the bias is a
    float constant, as in the fp32 model. Tensors
    made from nothing (``arange``, ``zeros``) are left to be made (torchao's
    ``constant_fold`` skips constructors), and so is what is computed from them.
    Quantization-aware training trains the weights, so its graph is not folded.
    """
    from torchao.quantization.pt2e.constant_fold import constant_fold

    assert isinstance(graph, torch.fx.GraphModule), "an exported program's module()"

    def ops() -> int:
        return sum(node.op == "call_function" for node in graph.graph.nodes)

    before = ops()
    kept = {node.target for node in graph.graph.nodes if node.op == "get_attr"}
    with torch.no_grad():  # values, not part of any graph (a value with a grad_fn cannot be copied)
        constant_fold(graph)
    # A folded value keeps the name and the records of the op it replaced (``mul_8``, its
    # ``source_fn_stack`` and ``torch_fn``): litert-torch's annotators took it for that op
    # and found no output (IndexError). Each is read again by a node of its own name.
    folded = [n for n in graph.graph.nodes if n.op == "get_attr" and n.target not in kept]
    for node in folded:
        _own_storage(graph, node.target)
        with graph.graph.inserting_before(node):
            read = graph.graph.get_attr(node.target)
        read.meta = {key: node.meta[key] for key in ("val", "tensor_meta", "nn_module_stack") if key in node.meta}
        node.replace_all_uses_with(read)
        graph.graph.erase_node(node)
    if folded:  # constant_fold recompiled the graph it left
        graph.recompile()
    return before - ops()


def _own_storage(graph: torch.fx.GraphModule, target: str) -> None:
    """Give the folded constant ``target`` of ``graph`` a storage of its own.

    ``constant_fold`` keeps a slice of a buffer as a view of it: an SSD-style head's
    ``anchors[:, :2]`` and ``anchors[:, 2:]`` became two constants on one storage, and
    litert-torch then took one for the other in some conversions and not in others
    (``benchmarks/probe_models.py:detector``, LiteRT static int8).
    """
    owner_path, _, name = target.rpartition(".")
    owner = graph.get_submodule(owner_path) if owner_path else graph
    value = getattr(owner, name)
    if isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter):
        setattr(owner, name, value.clone(memory_format=torch.contiguous_format))


def ready_for_calibration(graph: nn.Module) -> torch.fx.GraphModule:
    """:func:`ready_for_prepare` for post-training quantization: the computations on
    weights alone folded first (:func:`fold_weight_computations`)."""
    fold_weight_computations(graph)
    return ready_for_prepare(graph)


def own_layer_for_each_batch_norm(graph: nn.Module) -> int:
    """Give each BatchNorm that follows a convolution or linear layer whose output is read
    elsewhere too its own call of that layer, reading its own copy of the layer's weights
    (in place); return how many.

    PT2E's prepare folds a BatchNorm into the convolution before it (torchao's
    ``_fuse_conv_bn_``) without asking what else reads the convolution's output: the
    other readers then got the normalised values. A stem convolution feeding both a
    pre-activation block's BatchNorm and its shortcut (WideResNet, PreAct ResNet), or a
    ``cat`` beside it (``benchmarks/probe_models.py:stemnorm``), lost the model's accuracy
    on ExecuTorch and LiteRT static int8. The
    BatchNorm's own call is folded instead, and the other readers keep the layer's
    output; the float values are unchanged.
    """
    # the tests torchao's fold makes, so the BatchNorms separated are the ones it folds
    from torchao.quantization.pt2e.utils import _is_bn_node, _is_conv_or_conv_transpose_node

    assert isinstance(graph, torch.fx.GraphModule), "an exported program's module()"
    made = 0
    for norm in list(graph.graph.nodes):
        if norm.op != "call_function" or not _is_bn_node(norm):
            continue
        layer = norm.args[0]
        if not isinstance(layer, torch.fx.Node) or len(layer.users) < 2:
            continue
        if not (_is_conv_or_conv_transpose_node(layer) or layer.target == torch.ops.aten.linear.default):
            continue
        args = [_own_copy(graph, arg, layer) for arg in layer.args]
        with graph.graph.inserting_after(layer):
            twin = graph.graph.create_node("call_function", layer.target, tuple(args), dict(layer.kwargs))
        twin.meta = dict(layer.meta)
        norm.replace_input_with(layer, twin)
        made += 1
    if made:
        graph.recompile()
    return made


def _own_copy(
    graph: torch.fx.GraphModule, arg: torch.fx.node.Argument, before: torch.fx.Node
) -> torch.fx.node.Argument:
    """``arg`` itself, or for a weight the layer reads (a ``get_attr``), a read of a copy."""
    if not isinstance(arg, torch.fx.Node) or arg.op != "get_attr":
        return arg
    return _read_of_a_copy(graph, arg, "folded", before)


def _read_of_a_copy(
    graph: torch.fx.GraphModule, read: torch.fx.Node, suffix: str, before: torch.fx.Node
) -> torch.fx.Node:
    """A new ``get_attr`` (placed before ``before``) of a copy of the tensor ``read`` reads,
    registered on ``graph`` under a fresh name ending in ``suffix``; a parameter stays a
    parameter (QAT fine-tunes each copy on its own)."""
    owner_path, _, attr = str(read.target).rpartition(".")
    owner = graph.get_submodule(owner_path)
    value = getattr(owner, attr)
    name = f"{str(read.target).replace('.', '_')}_{suffix}"
    while hasattr(graph, name):
        name += "_"
    if attr in owner._parameters:
        graph.register_parameter(name, nn.Parameter(value.detach().clone(), value.requires_grad))
    else:
        graph.register_buffer(name, value.detach().clone())
    with graph.graph.inserting_before(before):
        copy_read = graph.graph.get_attr(name)
    copy_read.meta = dict(read.meta)
    return copy_read


def calibrated(
    model: nn.Module, bundle: ModelBundle, quant: QuantConfig, prepare: Callable[[nn.Module], nn.Module]
) -> nn.Module:
    """``model`` exported, prepared by ``prepare`` (a backend's PT2E ``prepare_pt2e``) and calibrated.

    Static modes (and a16w8) calibrate :data:`~nnsweep.core.quant.QuantConfig.CALIBRATION_BATCH_SIZE`
    samples a call, through an export with a dynamic batch dimension: the observers see
    the same samples, in the same order, in a sixteenth of the calls. Each call of a
    prepared graph runs every observer in Python, so one sample a call dominates a static
    int8 conversion (benchmarks/results/conversion.md).
    Min/max observers end the same either way; a histogram observer (XNNPACK's, for
    activations) merges its histogram per call, so its range can differ in the last bins.
    A model that does not take batches (:func:`~nnsweep.models._bundle.takes_batches`), or
    whose batched export or call fails, is calibrated one sample a call. Dynamic modes
    observe the weights only: one forward pass.
    """
    if quant.mode.observes_activations and takes_batches(bundle):
        try:
            with _attempt_to_debug_log():
                graph = export(model, bundle.example_input, dynamic_batch=True).module(check_guards=False)
                prepared = prepare(graph)
                _calibrate(prepared, calibration_samples(bundle, quant), QuantConfig.CALIBRATION_BATCH_SIZE)
            return prepared
        except Exception as exc:  # toolchain code: any failure of the batched path means "one at a time"
            log.debug("calibrating one sample a call: the batched export or call failed (%s)", exc)
    prepared = prepare(export(model, bundle.example_input, dynamic_batch=False).module(check_guards=False))
    samples = calibration_samples(bundle, quant) if quant.mode.observes_activations else iter([bundle.example_input])
    _calibrate(prepared, samples, 1)
    return prepared


@contextlib.contextmanager
def _attempt_to_debug_log() -> Iterator[None]:
    """The batched calibration is an attempt with a fallback: what the toolchain warns or
    writes to ``sys.stderr`` in it goes to the debug log. A quantizer's passes that build
    reshapes from the symbolic batch size warn ("Raw SymInt value"), and torch's FX module
    prints the generated code around the failing line before raising (ExecuTorch's Arm
    quantizer on a token-id model printed a 23-line traceback): neither happens at batch 1."""
    written = io.StringIO()
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stderr(written):
        warnings.simplefilter("always")
        try:
            yield
        finally:
            for w in caught:
                log.debug("batched calibration: %s: %s", w.category.__name__, w.message)
            if written.getvalue():
                log.debug("batched calibration wrote to stderr: %s", written.getvalue()[-2000:])


def _calibrate(prepared: nn.Module, samples: Iterator[torch.Tensor], batch: int) -> None:
    with torch.no_grad():
        while chunk := list(itertools.islice(samples, batch)):
            prepared(torch.cat(chunk))


def exported_program(
    stages: Stages, quant: QuantConfig, quantizer: str, make: Callable[[], torch.export.ExportedProgram]
) -> torch.export.ExportedProgram:
    """The exported (and quantized, for int8 modes) program for ``quant``: the
    stage every backend order and partition limit of the same model and quantization shares.

    Args:
        quantizer: names the PT2E quantizer ``make`` builds (its settings beyond ``quant``).
        make: builds the program on a miss.

    A program built by this call is lowered as it is in memory; one found built is read back
    from its ``.pt2``. The two lower to the same bytes (``tests/test_stages.py`` converts a
    configuration from a fresh stage and again from the stored one), and reading back a
    program just written costs time for nothing (benchmarks/results/conversion.md). The interface
    (``full``) is not part of the stage: the caller applies it to the program returned, which
    is the caller's own.
    """
    built: list[torch.export.ExportedProgram] = []

    def build(directory: Path) -> None:
        program = make()
        save_through_memory(directory / _PROGRAM, lambda f: torch.export.save(program, f))
        built.append(program)

    settings = {"quant": quant_settings(quant), "quantizer": quantizer}
    with stages.stage("executorch.program", settings, build) as directory:
        return built[0] if built else torch.export.load(directory / _PROGRAM)


def quantize_io(program: torch.export.ExportedProgram) -> IOSpec:
    """Make the program take and return int8 (the ``full`` interface)."""
    from executorch.exir.passes.quantize_io_pass import quantize_input, quantize_output

    try:
        in_scale, in_zp, _, _, in_dtype = quantize_input(program, 0)
        out_scale, out_zp, _, _, out_dtype = quantize_output(program, 0)
    except ValueError as exc:  # the first op taking the input, or the last giving the output, is float
        reason = str(exc).replace("{output_index}", "0")  # ExecuTorch 1.5.1's message lacks its f-string
        raise ConversionError(
            f"cannot give this model a quantized interface: {reason} (the ops at the model's ends must be int8: "
            "use the core interface, or no float layers there)"
        ) from exc
    return IOSpec(
        input_dtype=str(in_dtype).removeprefix("torch."),
        output_dtype=str(out_dtype).removeprefix("torch."),
        input_scale=float(in_scale),
        input_zero_point=int(in_zp),
        output_scale=float(out_scale),
        output_zero_point=int(out_zp),
    )
