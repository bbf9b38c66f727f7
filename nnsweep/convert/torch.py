"""PyTorch: eager fp32/fp16 and int8 with a quantized engine, saved as TorchScript.

TorchScript is what PyTorch Mobile and its NNAPI path deploy (the seeds'
workflow), so the artifact is a traced module. Static and QAT int8 use FX graph
mode quantization, which works on any symbolically traceable model without
hand-placed QuantStubs; the engine (``x86``, ``fbgemm``, ``qnnpack``, ``onednn``) is
the first of the backend order this build supports.
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from nnsweep.bench.runners.torch import pick_engine
from nnsweep.config import Calibration, DeploymentConfig, Granularity, Interface, QuantConfig, QuantMode
from nnsweep.convert._base import ConversionResult, Converter, IOSpec, PartitionReport, Placement
from nnsweep.convert.quantize import calibration_samples, qat_finetune
from nnsweep.errors import ConversionError
from nnsweep.models import ModelBundle

__all__ = ["TorchConverter"]


class _HalfPrecision(nn.Module):
    """The model in fp16 behind a float32 interface."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model.half()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x.half()).float()


@contextlib.contextmanager
def _engine(name: str) -> Iterator[None]:
    previous = torch.backends.quantized.engine
    torch.backends.quantized.engine = name
    try:
        yield
    finally:
        torch.backends.quantized.engine = previous


def _qconfig_mapping(engine: str, quant: QuantConfig) -> Any:
    """The engine's default mapping (it knows the fixed-range ops such as sigmoid), with our
    global QConfig: symmetric int8 weights per tensor or per channel, and activations
    observed as the calibration method says."""
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

    # x86 and fbgemm kernels can saturate 16-bit intermediate sums with the full 8-bit
    # activation range on CPUs without VNNI: their defaults use 7 bits (0..127).
    qmax = 127 if engine in ("x86", "fbgemm") else 255
    per_channel = quant.granularity is Granularity.PER_CHANNEL
    weight_args: dict[str, Any] = {
        "dtype": torch.qint8,
        "quant_min": -128,
        "quant_max": 127,
        "qscheme": torch.per_channel_symmetric if per_channel else torch.per_tensor_symmetric,
    }
    if quant.mode is QuantMode.QAT_INT8:
        weight_observer = MovingAveragePerChannelMinMaxObserver if per_channel else MovingAverageMinMaxObserver
        qconfig = QConfig(
            activation=FakeQuantize.with_args(
                observer=MovingAverageMinMaxObserver, dtype=torch.quint8, quant_min=0, quant_max=qmax
            ),
            weight=FakeQuantize.with_args(observer=weight_observer, **weight_args),
        )
        return get_default_qat_qconfig_mapping(engine).set_global(qconfig)
    observer = HistogramObserver if quant.calibration is Calibration.HISTOGRAM else MinMaxObserver
    weight = (PerChannelMinMaxObserver if per_channel else MinMaxObserver).with_args(**weight_args)
    qconfig = QConfig(activation=observer.with_args(dtype=torch.quint8, quant_min=0, quant_max=qmax), weight=weight)
    return get_default_qconfig_mapping(engine).set_global(qconfig)


def _static(bundle: ModelBundle, quant: QuantConfig, engine: str) -> nn.Module:
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx, prepare_qat_fx

    model = copy.deepcopy(bundle.module)
    example = (bundle.example_input,)
    mapping = _qconfig_mapping(engine, quant)
    if quant.mode is QuantMode.QAT_INT8:
        prepared = prepare_qat_fx(model.train(), mapping, example)
        qat_finetune(prepared, bundle, quant, batch_size=32)
        prepared.eval()
    else:
        prepared = prepare_fx(model.eval(), mapping, example)
        with torch.no_grad():
            for x in calibration_samples(bundle, quant):
                prepared(x)
    converted: nn.Module = convert_fx(prepared)
    return converted


def _strip_io_quantization(model: torch.fx.GraphModule) -> IOSpec:
    """Make a converted FX model take and return quantized tensors (the ``full`` interface):
    drop the quantize_per_tensor on the input and the dequantize before the output,
    recording their parameters, as the NNAPI preparation script does by hand."""
    graph = model.graph
    placeholder = next(n for n in graph.nodes if n.op == "placeholder")
    quantize = [u for u in placeholder.users if u.target is torch.quantize_per_tensor]
    output = next(n for n in graph.nodes if n.op == "output")
    result = output.args[0]
    if len(quantize) != 1 or len(placeholder.users) != 1 or getattr(result, "target", None) != "dequantize":
        raise ConversionError("the model's input/output are not a single quantize/dequantize: use interface core")
    q = quantize[0]
    scale, zero_point = (_constant(model, arg) for arg in q.args[1:3])
    q.replace_all_uses_with(placeholder)
    graph.erase_node(q)
    quantized_out = result.args[0]
    output.args = (quantized_out,)
    graph.erase_node(result)
    graph.eliminate_dead_code()
    model.recompile()
    return IOSpec(input_dtype="uint8", output_dtype="uint8", input_scale=float(scale), input_zero_point=int(zero_point))


def _constant(model: torch.fx.GraphModule, arg: Any) -> Any:
    if isinstance(arg, torch.fx.Node) and arg.op == "get_attr":
        return getattr(model, str(arg.target))
    return arg


def _report(
    module: torch.jit.ScriptModule, engine: str | None, order: tuple[str, ...], notes: list[str]
) -> PartitionReport:
    ops: Counter[str] = Counter()
    for node in module.inlined_graph.nodes():  # submodule calls inlined: every op counted once
        kind = node.kind()
        if kind.startswith(("aten::", "quantized::")):
            ops[kind] += 1
    quantized = sum(n for k, n in ops.items() if k.startswith("quantized::"))
    float_ops = {k: n for k, n in ops.items() if k.startswith("aten::")}
    nodes = {engine: quantized} if engine is not None and quantized else {}
    if float_ops:
        nodes["cpu"] = sum(float_ops.values())
    # In a quantized model the float ops are the ones the engine did not take
    # (the quantize/dequantize at the interface are not fallbacks: they are the boundary).
    boundary = ("aten::quantize_per_tensor", "aten::dequantize")
    fallback = {k: n for k, n in float_ops.items() if k not in boundary} if engine is not None and quantized else {}
    return PartitionReport(backends=order, nodes_by_backend=nodes, fallback_ops=fallback, notes=tuple(notes))


class TorchConverter(Converter):
    """Eager PyTorch models (fp32, fp16, int8 with a quantized engine), traced to TorchScript."""

    def convert(self, bundle: ModelBundle, config: DeploymentConfig, out_dir: Path) -> ConversionResult:
        if config.backends[:1] == ("nnapi",):
            return _convert_nnapi(bundle, config, out_dir)
        quant = config.quant
        notes: list[str] = []
        engine, skipped = pick_engine(config.backends)
        notes.extend(f"{name}: not supported by this PyTorch build; fell through" for name in skipped)
        if quant.mode.is_int8 and engine is None:
            raise ConversionError(f"no quantized engine of {', '.join(config.backends)} is available here")
        io = IOSpec()
        model: nn.Module
        example = bundle.example_input
        if quant.mode is QuantMode.FP16:
            model = _HalfPrecision(copy.deepcopy(bundle.module)).eval()
        elif quant.mode is QuantMode.DYNAMIC_INT8:
            from torch.ao.quantization import default_dynamic_qconfig, per_channel_dynamic_qconfig, quantize_dynamic

            qconfig = (
                per_channel_dynamic_qconfig if quant.granularity is Granularity.PER_CHANNEL else default_dynamic_qconfig
            )
            assert engine is not None
            with _engine(engine):
                model = quantize_dynamic(copy.deepcopy(bundle.module).eval(), {nn.Linear: qconfig})
        elif quant.mode.is_static:
            assert engine is not None
            with _engine(engine):
                model = _static(bundle, quant, engine)
                if quant.interface is Interface.FULL:
                    io = _strip_io_quantization(model)  # type: ignore[arg-type]
                    scale, zero_point = io.input_scale or 1.0, io.input_zero_point or 0
                    example = torch.quantize_per_tensor(example, scale, zero_point, torch.quint8)
                    with torch.no_grad():
                        out = model(example)  # the output's parameters are those of the tensor it returns
                    io = IOSpec(
                        **{**io.to_dict(), "output_scale": out.q_scale(), "output_zero_point": out.q_zero_point()}
                    )
        else:
            model = copy.deepcopy(bundle.module).eval()
        with _engine(engine or torch.backends.quantized.engine), torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.jit is deprecated; TorchScript is still what Mobile/NNAPI load
            traced = torch.jit.trace(model, example, check_trace=False)
            traced = torch.jit.freeze(traced.eval())
        path = out_dir / "model.pt"
        traced.save(str(path))
        report = _report(traced, engine if quant.mode.is_int8 else None, config.backends, notes)
        return ConversionResult(filename=path.name, partitions=report, io=io)


class _NnapiQuantizationWrapper(nn.Module):
    """Float in and out around a quantized NNAPI model: the seeds' "core" interface."""

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
    """PyTorch Mobile + NNAPI, as the seeds' preparation script does it: quantize with
    QNNPACK's semantics (NNAPI's int8 is per-tensor, full uint8 range), trace with a
    channels-last input marked ``nnapi_nhwc``, ``convert_model_to_nnapi``, wrap for
    the "core" interface, bundle an input, save for the lite interpreter. The model
    runs only on Android (libneuralnetworks.so): measure it over the adb bridge.
    """
    from torch.backends._nnapi.prepare import convert_model_to_nnapi
    from torch.utils.bundled_inputs import augment_model_with_bundled_inputs

    quant = config.quant
    io = IOSpec()
    example = bundle.example_input
    with _engine("qnnpack"), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit and the NNAPI converter are deprecated; Mobile still loads them
        if quant.mode.is_static:
            model = _static(bundle, quant, "qnnpack")
            io = _strip_io_quantization(model)  # type: ignore[arg-type]
            scale, zero_point = io.input_scale or 1.0, io.input_zero_point or 0
            core_input = torch.quantize_per_tensor(example, scale, zero_point, torch.quint8)
        else:
            model = copy.deepcopy(bundle.module).eval()
            core_input = example
        core_input = core_input.contiguous(memory_format=torch.channels_last)
        core_input.nnapi_nhwc = True  # type: ignore[attr-defined]
        traced = torch.jit.trace(model, core_input, check_trace=False)
        ops = _report(traced, None, config.backends, []).nodes_by_backend.get("cpu", 0)
        try:
            nnapi = convert_model_to_nnapi(traced, core_input)
        except Exception as exc:  # the converter's own message names the op it cannot take
            raise ConversionError(f"NNAPI conversion failed: {type(exc).__name__}: {exc}") from exc
        if quant.mode.is_static and quant.interface is not Interface.FULL:
            module = torch.jit.script(_NnapiQuantizationWrapper(scale, zero_point, nnapi))
            io, bundled = IOSpec(), example
        else:
            module, bundled = nnapi, core_input
            if quant.mode.is_static:
                out = model(torch.quantize_per_tensor(example, scale, zero_point, torch.quint8))
                io = IOSpec(
                    **{
                        **io.to_dict(),
                        "output_scale": out.q_scale(),
                        "output_zero_point": out.q_zero_point(),
                        "channels_last": True,
                    }
                )
        augment_model_with_bundled_inputs(module, [(bundled,)])  # speed_benchmark_torch --use_bundled_input=0
        path = out_dir / "model.ptl"
        module._save_for_lite_interpreter(str(path))
    report = PartitionReport(
        backends=config.backends,
        nodes_by_backend={"nnapi": ops},
        partitions=(Placement("nnapi", ops),),
        notes=("the whole model is handed to NNAPI; the device's NNAPI driver places its ops",),
    )
    return ConversionResult(filename=path.name, partitions=report, io=io)
