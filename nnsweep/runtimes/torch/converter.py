"""PyTorch: fp32, fp16 and int8 with a quantized engine, saved as TorchScript (``model.pt``).

TorchScript is what PyTorch Mobile and its NNAPI path load. By mode: ``fp32`` the frozen
eval model; ``fp16`` half weights and activations behind a float32 interface (slower than
fp32 on CPUs without native fp16); ``dynamic_int8`` ``quantize_dynamic`` on Linear layers;
``static_int8`` FX post-training quantization (any symbolically traceable model, no
QuantStubs); ``qat_int8`` ``prepare_qat_fx``, fine-tuning, ``convert_fx``.

The quantized engine is the first of the backend order this build supports
(:func:`~nnsweep.runtimes.torch.runner.pick_engine`, which the runner must also select).
Interface ``full`` strips the boundary quantize/dequantize, as NNAPI preparation does, and
records their parameters in the :class:`~nnsweep.convert.IOSpec`. The partition report counts
``aten::``/``quantized::`` nodes: one running an int8 kernel counts for the engine, others
for ``cpu``; ``fallback_ops`` lists float ops inside an int8 model, boundary conversions aside.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from nnsweep.core.artifact import IOSpec, PartitionReport, Placement
from nnsweep.core.config import DeploymentConfig, Granularity, Interface, QuantConfig, QuantMode
from nnsweep.core.errors import ConversionError
from nnsweep.core.through_memory import save_through_memory
from nnsweep.models import ModelBundle
from nnsweep.runtimes.common import float_fallback
from nnsweep.runtimes.common.converter import ConversionResult, Converter
from nnsweep.runtimes.common.fx import (
    no_quantized_tensor_deprecation,
    quantize_fx,
    quantized_engine,
    strip_io_quantization,
)
from nnsweep.runtimes.common.half import HalfPrecision
from nnsweep.runtimes.torch.runner import META_FILE, pick_engine

__all__ = ["TorchConverter", "quantize_dynamic_linears", "without_mha_fastpath"]

_log = logging.getLogger(__name__)
_ARTIFACT = "model.pt"
_QUANTIZE_OPS = frozenset({"aten::quantize_per_tensor", "aten::quantize_per_channel"})
_DEQUANTIZE_OPS = frozenset({"aten::dequantize"})
# quantized:: ops that take and return float tensors (int8 weights only).
_FLOAT_OUT_QUANTIZED_OPS = frozenset(
    {
        "quantized::linear_dynamic",
        "quantized::linear_relu_dynamic",
        "quantized::linear_dynamic_fp16",
        "quantized::linear_relu_dynamic_fp16",
    }
)


def _nodes(block: torch._C.Graph | torch._C.Block) -> Iterator[torch._C.Node]:
    """Every node of ``block``, nested blocks (if/loop bodies) included, in order."""
    for node in block.nodes():
        yield node
        for sub in node.blocks():
            yield from _nodes(sub)


def _report(
    module: torch.jit.ScriptModule,
    engine: str | None,
    quantized_input: bool,
    order: tuple[str, ...],
    notes: list[str],
) -> PartitionReport:
    """Where the operator nodes of ``module``'s (frozen, inlined) graph run; see the module docstring.

    Frozen graphs carry no dtypes, so which values are quantized is propagated from
    the input: ``quantize_per_*`` and ``quantized::`` ops make quantized tensors,
    ``dequantize`` and the dynamic ``quantized::`` ops float ones, and an ``aten::``
    op on a quantized tensor returns a quantized tensor.
    """
    graph = module.inlined_graph  # submodule calls inlined: every op counted once
    quantized: set[int] = set()
    if quantized_input:
        quantized.update(v.unique() for v in list(graph.inputs())[1:])  # input 0 is the module itself
    by_backend: Counter[str] = Counter()
    fallback: Counter[str] = Counter()
    for node in _nodes(graph):
        kind = node.kind()
        if not kind.startswith(("aten::", "quantized::")):
            continue
        on_quantized = any(v.unique() in quantized for v in node.inputs())
        if kind.startswith("quantized::"):
            makes_quantized = kind not in _FLOAT_OUT_QUANTIZED_OPS
            backend = engine or "cpu"
        elif kind in _QUANTIZE_OPS:
            makes_quantized, backend = True, "cpu"
        elif kind in _DEQUANTIZE_OPS:
            makes_quantized, backend = False, "cpu"
        elif on_quantized:
            makes_quantized, backend = True, engine or "cpu"
        else:
            makes_quantized, backend = False, "cpu"
            if engine is not None:
                fallback[kind] += 1
        by_backend[backend] += 1
        if makes_quantized:
            quantized.update(v.unique() for v in node.outputs())
    return PartitionReport(
        backends=order, nodes_by_backend=dict(by_backend), fallback_ops=dict(fallback), notes=tuple(notes)
    )


class _Forward(nn.Module):
    """A scripted shell around a traced model: bundled inputs need a scripted module to define methods on."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)


# The methods augment_model_with_bundled_inputs defines for ``forward``; freezing keeps only what it is told to.
_BUNDLED_INPUT_METHODS = (
    "get_all_bundled_inputs",
    "get_num_bundled_inputs",
    "get_bundled_inputs_functions_and_info",
    "get_all_bundled_inputs_for_forward",
    "_generate_bundled_inputs_for_forward",
)


def _shell(traced: torch.jit.ScriptModule, example: torch.Tensor) -> nn.Module:
    """The scripted shell for ``traced``: its ``forward`` must declare the output's structure
    (one tensor, a tuple of n tensors, or a dict of tensors) for TorchScript."""
    from typing import Dict, Tuple  # noqa: UP035 (TorchScript reads these annotations)

    out = traced(example)
    if isinstance(out, torch.Tensor):
        return _Forward(traced)
    if isinstance(out, tuple) and all(isinstance(t, torch.Tensor) for t in out):
        returns: Any = Tuple[tuple([torch.Tensor] * len(out))]  # noqa: UP006
    elif isinstance(out, dict) and all(isinstance(k, str) and isinstance(t, torch.Tensor) for k, t in out.items()):
        returns = Dict[str, torch.Tensor]  # noqa: UP006
    else:
        raise ConversionError(f"TorchScript cannot return {type(out).__name__} outputs; return tensors")

    class _MultiForward(nn.Module):
        def __init__(self, model: nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, x: torch.Tensor) -> Any:
            return self.model(x)

    _MultiForward.forward.__annotations__["return"] = returns  # what this model's forward returns
    return _MultiForward(traced)


def _freeze_with_bundled_input(
    traced: torch.jit.ScriptModule, shape: tuple[int, ...], io: IOSpec, example: torch.Tensor | None = None
) -> Any:
    """The frozen deployable module, with a benchmark input bundled.

    Freezing inlines the submodules into one graph, makes weights constants and
    folds BatchNorm into convolutions, which runs faster; the
    scripted shell costs nothing once frozen.
    """
    shell = _Forward(traced) if example is None else _shell(traced, example)
    scripted = torch.jit.script(shell).eval()
    _bundle_input(scripted, shape, io, channels_last=False)
    methods = [name for name in _BUNDLED_INPUT_METHODS if hasattr(scripted, name)]
    return torch.jit.freeze(scripted, preserved_attrs=methods)


def _bundle_input(module: torch.jit.ScriptModule, shape: tuple[int, ...], io: IOSpec, channels_last: bool) -> None:
    """Attach a benchmark input, as needed by ``speed_benchmark_torch --use_bundled_input=0``.

    The bundled tensor is a one-element stub that the device inflates to random
    values of the input's shape (quantized with the input's parameters for the
    ``full`` interface): the artifact's size stays the model's own.
    """
    from torch.utils.bundled_inputs import InflatableArg, augment_model_with_bundled_inputs

    expr = "torch.randn_like({})"
    if channels_last:
        expr += ".contiguous(memory_format=torch.channels_last)"
    if io.input_scale is not None:
        expr = f"torch.quantize_per_tensor({expr}, {io.input_scale!r}, {io.input_zero_point or 0}, torch.quint8)"
    stub = torch.zeros(1).expand(*shape)
    augment_model_with_bundled_inputs(module, [(InflatableArg(value=stub, fmt=expr),)])


def quantize_dynamic_linears(bundle: ModelBundle, quant: QuantConfig) -> nn.Module:
    """``quantize_dynamic`` on the Linear layers of a copy of the model, less those kept in
    float (``quant.float_layers``, by module path) and those PyTorch marks as not dynamically
    quantizable: ``nn.MultiheadAttention`` hands its ``out_proj.weight`` to
    ``F.multi_head_attention_forward`` as a tensor, and a dynamic quantized Linear's
    ``weight`` is a method ("linear(): argument 'weight' must be Tensor, not method")."""
    from torch.ao.quantization import default_dynamic_qconfig, per_channel_dynamic_qconfig, quantize_dynamic

    per_channel = quant.granularity is Granularity.PER_CHANNEL
    qconfig = per_channel_dynamic_qconfig if per_channel else default_dynamic_qconfig
    float_model = copy.deepcopy(bundle.module).eval()
    linears = {
        name: qconfig
        for name, module in float_model.named_modules()
        if isinstance(module, nn.Linear)
        and not isinstance(module, nn.modules.linear.NonDynamicallyQuantizableLinear)
        and not float_fallback.in_modules(name, quant.float_layers)
    }
    with no_quantized_tensor_deprecation():
        return quantize_dynamic(float_model, linears)


@contextlib.contextmanager
def without_mha_fastpath(needed: bool) -> Iterator[None]:
    """When ``needed`` (dynamic int8), trace the slow path of ``nn.TransformerEncoderLayer``
    and ``nn.MultiheadAttention``.

    Their inference fast path first reads ``.device`` of every projection's ``weight``; once
    ``quantize_dynamic`` has swapped ``linear1``/``linear2`` that is a method, and the
    forward fails with "'function' object has no attribute 'device'" (torch 2.14). The
    switch is process-global, so it is restored on exit (conversions run one at a time,
    ``nnsweep.artifacts.deploy``); the traced artifact does not read it.
    """
    enabled = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(enabled and not needed)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(enabled)


def _trace_notes(caught: list[warnings.WarningMessage]) -> list[str]:
    """The trace's warnings, shown again as they came; a branch on a tensor's value (the
    trace keeps the branch the example input took, whatever another input would take) is
    also a note of the partition report, beside the fidelity it explains.

    Warnings raised in PyTorch's own code go to the debug log: there the trace turns
    shape checks into conditions (``nn.MultiheadAttention`` asserts that key and value
    shapes agree), which hold for every input of the example's shape.
    """
    notes = []
    torch_code = Path(torch.__file__).parent
    for w in caught:
        if Path(w.filename).is_relative_to(torch_code):
            _log.debug("%s:%s: %s", w.filename, w.lineno, w.message)
            continue
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        if issubclass(w.category, torch.jit.TracerWarning) and "Python boolean" in str(w.message):
            notes.append(
                f"TorchScript kept one branch of a condition on tensor values ({Path(w.filename).name}:{w.lineno}): "
                "inputs that take the other branch get wrong outputs (see the fidelity)"
            )
    return notes


class TorchConverter(Converter):
    """Eager PyTorch models as TorchScript: fp32, fp16, and int8 on a quantized engine.

    A backend order led by ``nnapi`` hands the whole model to Android's NNAPI
    instead (PyTorch Mobile's path, measured over the adb bridge).
    """

    def convert(self, bundle: ModelBundle, config: DeploymentConfig, out_dir: Path) -> ConversionResult:
        """Write ``model.pt`` for ``config`` into ``out_dir``.

        Raises:
            ConversionError: no engine of the order is available here, or the
                ``full`` interface does not fit the model's graph.
        """
        if config.backends[:1] == ("nnapi",):
            return _convert_nnapi(bundle, config, out_dir)
        quant = config.quant
        engine, skipped = pick_engine(config.backends)
        notes = [f"{name}: not a quantized engine of this PyTorch build; fell through" for name in skipped]
        if quant.mode.is_int8 and engine is None:
            raise ConversionError(
                f"no quantized engine of {', '.join(config.backends)} is available here "
                f"(this PyTorch build has {', '.join(torch.backends.quantized.supported_engines)})"
            )
        io = IOSpec()
        example = bundle.example_input
        model: nn.Module
        with quantized_engine(engine or torch.backends.quantized.engine):
            if quant.mode is QuantMode.FP16:
                model = HalfPrecision(copy.deepcopy(bundle.module)).eval()
            elif quant.mode is QuantMode.DYNAMIC_INT8:
                model = quantize_dynamic_linears(bundle, quant)
            elif quant.mode.is_static and engine is not None:
                graph_module = quantize_fx(bundle, quant, engine)
                if quant.interface is Interface.FULL:
                    io, example = strip_io_quantization(graph_module, example)
                model = graph_module
            else:
                model = copy.deepcopy(bundle.module).eval()
            dynamic = quant.mode is QuantMode.DYNAMIC_INT8
            with torch.no_grad(), without_mha_fastpath(dynamic), warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("default")
                # torch.jit is deprecated in favour of ExecuTorch; TorchScript is still what Mobile/NNAPI load.
                warnings.filterwarnings("ignore", message=r"`torch\.jit\.\w+` is deprecated", category=FutureWarning)
                # strict=False: a model may return a dict of outputs (several heads)
                traced = torch.jit.trace(model, example, check_trace=False, strict=False)
                deployable = _freeze_with_bundled_input(traced, tuple(bundle.example_input.shape), io, example)
                meta = {"engine": engine if quant.mode.is_int8 else None, "mode": quant.mode.value}
                path = out_dir / _ARTIFACT
                extra = {META_FILE: json.dumps(meta)}
                save_through_memory(path, lambda f: torch.jit.save(deployable, f, _extra_files=extra))
            notes.extend(_trace_notes(caught))
        report = _report(
            deployable, meta["engine"], quantized_input=io.input_scale is not None, order=config.backends, notes=notes
        )
        return ConversionResult(filename=path.name, partitions=report, io=io)


class _NnapiQuantizationWrapper(nn.Module):
    """Float in and out around a quantized NNAPI model: the "core" interface."""

    def __init__(self, scale: float, zero_point: int, core: nn.Module) -> None:
        super().__init__()
        self.scale = scale
        self.zero_point = zero_point
        self.core = core

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = torch.quantize_per_tensor(
            x.contiguous(memory_format=torch.channels_last), self.scale, self.zero_point, torch.quint8
        )
        return self.core(q).dequantize()


def _convert_nnapi(bundle: ModelBundle, config: DeploymentConfig, out_dir: Path) -> ConversionResult:
    """PyTorch Mobile + NNAPI, as PyTorch's NNAPI preparation recipe does it.

    Quantize with QNNPACK's semantics (NNAPI's int8 is per-tensor, full uint8
    range), trace with a channels-last input marked ``nnapi_nhwc``,
    ``convert_model_to_nnapi``, wrap for the "core" interface, bundle an input
    (channels-last, as the NNAPI model takes it), save for the lite interpreter.
    The model runs only on Android (libneuralnetworks.so): measure it over the
    adb bridge.
    """
    from torch.backends._nnapi.prepare import convert_model_to_nnapi

    quant = config.quant
    io = IOSpec()
    example = bundle.example_input
    with quantized_engine("qnnpack"), torch.no_grad(), warnings.catch_warnings():
        # torch.jit and the Lite Interpreter are deprecated in favour of ExecuTorch; PyTorch Mobile still loads them.
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.\w+` is deprecated", category=FutureWarning)
        warnings.filterwarnings("ignore", message="Lite Interpreter is deprecated")
        model: nn.Module
        if quant.mode.is_static:
            graph_module = quantize_fx(bundle, quant, "qnnpack")
            io, core_input = strip_io_quantization(graph_module, example)
            scale, zero_point = io.input_scale or 1.0, io.input_zero_point or 0
            model = graph_module
        else:
            model = copy.deepcopy(bundle.module).eval()
            core_input = example
        core_input = core_input.contiguous(memory_format=torch.channels_last)
        core_input.nnapi_nhwc = True  # type: ignore[attr-defined]
        traced = torch.jit.trace(model, core_input, check_trace=False)
        ops = sum(_report(traced, None, False, config.backends, []).nodes_by_backend.values())
        try:
            nnapi = convert_model_to_nnapi(traced, core_input)
        except Exception as exc:  # the converter's own message names the op it cannot take
            raise ConversionError(f"NNAPI conversion failed: {type(exc).__name__}: {exc}") from exc
        if quant.mode.is_static and quant.interface is not Interface.FULL:
            module = torch.jit.script(_NnapiQuantizationWrapper(scale, zero_point, nnapi))
            io, bundled_io = IOSpec(), IOSpec()
        else:
            module = nnapi
            if quant.mode.is_static:
                io = IOSpec(**{**io.to_dict(), "channels_last": True})
            bundled_io = IOSpec(**{**io.to_dict(), "channels_last": True})
        _bundle_input(module, tuple(example.shape), bundled_io, channels_last=bundled_io.channels_last)
        path = out_dir / "model.ptl"
        module._save_for_lite_interpreter(str(path))
    report = PartitionReport(
        backends=config.backends,
        nodes_by_backend={"nnapi": ops},
        partitions=(Placement("nnapi", ops),),
        notes=("the whole model is handed to NNAPI; the device's NNAPI driver places its ops",),
    )
    return ConversionResult(filename=path.name, partitions=report, io=io)
