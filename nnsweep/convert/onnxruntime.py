"""ONNX Runtime: ``torch.onnx.export`` -> ``onnxruntime.quantization`` -> providers in preference order.

Which provider runs each node is read from a real session's profile (the
profiler records the provider of every node it runs), so the partition report
shows the placement ONNX Runtime chose, not a guess.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import tempfile
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnxruntime.quantization import (
    CalibrationDataReader,
    CalibrationMethod,
    QuantFormat,
    QuantType,
    quant_pre_process,
    quantize_dynamic,
    quantize_static,
)
from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

from nnsweep.bench.runners.onnxruntime import PROVIDERS, providers_for, session_options
from nnsweep.config import Calibration, DeploymentConfig, Granularity, Interface, QuantConfig, QuantMode
from nnsweep.convert._base import ConversionResult, Converter, IOSpec, PartitionReport, Placement
from nnsweep.convert.quantize import calibration_samples
from nnsweep.errors import ConversionError
from nnsweep.models import ModelBundle

__all__ = ["OnnxRuntimeConverter"]

_OPSET = 18
_NAMES = {provider: name for name, provider in PROVIDERS.items()}


def _export(bundle: ModelBundle, path: Path) -> None:
    model = copy.deepcopy(bundle.module).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter narrates its own progress as warnings
        program = torch.onnx.export(
            model, (bundle.example_input,), dynamo=True, opset_version=_OPSET, external_data=False, verbose=False
        )
    if program is None:
        raise ConversionError("torch.onnx.export returned no program")
    program.save(str(path), external_data=False)


class _Reader(CalibrationDataReader):  # type: ignore[misc]
    """Calibration samples for ``quantize_static``."""

    def __init__(self, name: str, samples: Iterator[torch.Tensor]) -> None:
        self._items = iter([{name: s.numpy()} for s in samples])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._items, None)


def _quantize(source: Path, target: Path, bundle: ModelBundle, quant: QuantConfig) -> None:
    per_channel = quant.granularity is Granularity.PER_CHANNEL
    with tempfile.TemporaryDirectory() as tmp:
        prepared = Path(tmp) / "prepared.onnx"
        quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
        if quant.mode is QuantMode.DYNAMIC_INT8:
            quantize_dynamic(str(prepared), str(target), per_channel=per_channel, weight_type=QuantType.QInt8)
            return
        method = {
            Calibration.MINMAX: CalibrationMethod.MinMax,
            Calibration.ENTROPY: CalibrationMethod.Entropy,
            Calibration.PERCENTILE: CalibrationMethod.Percentile,
        }[quant.calibration or Calibration.MINMAX]
        name = ort.InferenceSession(str(prepared), providers=["CPUExecutionProvider"]).get_inputs()[0].name
        reader = _Reader(name, calibration_samples(bundle, quant))
        # ORT's default op list, minus InstanceNormalization: its per-channel scale and
        # bias hit "shared mode is not supported for weight" (GroupNorm exports as it),
        # so it stays float between dequantize/quantize.
        ops = sorted((set(QLinearOpsRegistry) | set(QDQRegistry)) - {"InstanceNormalization"})
        # QDQ with uint8 activations and int8 weights: the combination ORT's x86 and Arm
        # int8 kernels are fastest at (signed weights, unsigned activations: u8s8).
        # The entropy and percentile calibrators print their progress; keep stdout for our output.
        with contextlib.redirect_stdout(io.StringIO()):
            quantize_static(
                str(prepared),
                str(target),
                reader,
                quant_format=QuantFormat.QDQ,
                per_channel=per_channel,
                activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8,
                calibrate_method=method,
                op_types_to_quantize=ops,
            )


def _to_fp16(source: Path, target: Path) -> None:
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = convert_float_to_float16(onnx.load(str(source)), keep_io_types=True)
    onnx.save(model, str(target))


def _strip_io_quantization(path: Path) -> IOSpec:
    """Make a QDQ model take and return its quantized tensors (the ``full`` interface)."""
    from onnx import numpy_helper

    model = onnx.load(str(path))
    graph = model.graph
    inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    graph_in, graph_out = graph.input[0], graph.output[0]
    first_q = [n for n in graph.node if n.op_type == "QuantizeLinear" and n.input[0] == graph_in.name]
    last_dq = [n for n in graph.node if n.op_type == "DequantizeLinear" and n.output[0] == graph_out.name]
    if len(first_q) != 1 or len(last_dq) != 1:
        raise ConversionError("the model's input/output are not a single Quantize/DequantizeLinear: use interface core")
    q, dq = first_q[0], last_dq[0]
    in_scale, in_zp = float(inits[q.input[1]]), inits[q.input[2]]
    out_scale, out_zp = float(inits[dq.input[1]]), inits[dq.input[2]]
    for node in graph.node:  # consumers of the quantized input now read the graph input
        for i, name in enumerate(node.input):
            if name == q.output[0]:
                node.input[i] = graph_in.name
    quantized_out = dq.input[0]
    graph.node.remove(q)
    graph.node.remove(dq)
    for node in graph.node:
        for i, name in enumerate(node.output):
            if name == quantized_out:
                node.output[i] = graph_out.name
        for i, name in enumerate(node.input):
            if name == quantized_out:
                node.input[i] = graph_out.name
    elem = onnx.helper.np_dtype_to_tensor_dtype(in_zp.dtype)
    graph_in.type.tensor_type.elem_type = elem
    graph_out.type.tensor_type.elem_type = onnx.helper.np_dtype_to_tensor_dtype(out_zp.dtype)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return IOSpec(
        input_dtype=str(in_zp.dtype),
        output_dtype=str(out_zp.dtype),
        input_scale=in_scale,
        input_zero_point=int(in_zp),
        output_scale=out_scale,
        output_zero_point=int(out_zp),
    )


def _placement(path: Path, spec: IOSpec, bundle: ModelBundle, order: tuple[str, ...], threads: int) -> PartitionReport:
    """Run the model once with profiling and read which provider ran each node."""
    providers, skipped = providers_for(order)
    options = session_options(threads)
    with tempfile.TemporaryDirectory() as tmp:
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(tmp) / "profile")
        session = ort.InferenceSession(str(path), options, providers=providers)
        x = spec.prepare_input(bundle.example_input.numpy())
        session.run(None, {session.get_inputs()[0].name: x})
        events = json.loads(Path(session.end_profiling()).read_text())
    by_provider: Counter[str] = Counter()
    ops: dict[str, Counter[str]] = {}
    sequence: list[str] = []
    for event in events:
        args = event.get("args", {})
        if event.get("cat") != "Node" or "provider" not in args or not event["name"].endswith("_kernel_time"):
            continue
        backend = _NAMES.get(args["provider"], args["provider"])
        by_provider[backend] += 1
        ops.setdefault(backend, Counter())[args.get("op_name", "?")] += 1
        sequence.append(backend)
    notes = [f"{name}: provider not available on this machine; its nodes fall through" for name in skipped]
    # Nodes on the CPU provider fell back when the order asked for another provider first.
    fallback = dict(ops.get("cpu", {})) if order and order[0] != "cpu" else {}
    placements: list[list[Any]] = []  # runs of consecutive nodes on one non-CPU provider
    previous = None
    for backend in sequence:
        if backend != "cpu" and backend == previous:
            placements[-1][1] += 1
        elif backend != "cpu":
            placements.append([backend, 1])
        previous = backend
    return PartitionReport(
        backends=order,
        nodes_by_backend=dict(by_provider),
        partitions=tuple(sorted((Placement(b, n) for b, n in placements), key=lambda p: -p.nodes)),
        fallback_ops=fallback,
        notes=tuple(notes),
    )


class OnnxRuntimeConverter(Converter):
    """Export to ONNX, quantize with ``onnxruntime.quantization``, report provider placement."""

    def convert(self, bundle: ModelBundle, config: DeploymentConfig, out_dir: Path) -> ConversionResult:
        quant = config.quant
        path = out_dir / "model.onnx"
        with tempfile.TemporaryDirectory() as tmp:
            exported = Path(tmp) / "exported.onnx"
            _export(bundle, exported)
            if quant.mode is QuantMode.FP16:
                _to_fp16(exported, path)
            elif quant.mode.is_int8:
                _quantize(exported, path, bundle, quant)
            else:
                path.write_bytes(exported.read_bytes())
        spec = _strip_io_quantization(path) if quant.interface is Interface.FULL else IOSpec()
        report = _placement(path, spec, bundle, config.backends, config.threads)
        return ConversionResult(filename=path.name, partitions=report, io=spec)
