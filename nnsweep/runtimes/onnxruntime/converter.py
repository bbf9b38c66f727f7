"""ONNX Runtime: ``torch.onnx.export`` -> ``onnxruntime.quantization`` -> providers in preference order.

Which provider runs each node is read from a real session's profile (the profiler
records the provider of every node it runs), so the partition report shows the
placement ONNX Runtime chose on the converting machine, not a guess.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import numpy_helper
from onnx.external_data_helper import uses_external_data
from onnxruntime.quantization import (
    CalibrationDataReader,
    CalibrationMethod,
    QuantFormat,
    QuantType,
    create_calibrator,
    quantize_dynamic,
    quantize_static,
    save_tensors_data,
)
from onnxruntime.quantization.calibrate import TensorsData
from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

from nnsweep.core import runtimes
from nnsweep.core.artifact import IOSpec, PartitionReport, Placement
from nnsweep.core.config import Calibration, DeploymentConfig, Granularity, Interface, QuantConfig, QuantMode
from nnsweep.core.errors import ConversionError
from nnsweep.models import ModelBundle
from nnsweep.runtimes.common import float_fallback, int4
from nnsweep.runtimes.common.bags import unbagged_copy
from nnsweep.runtimes.common.converter import (
    ConversionResult,
    Converter,
    Stages,
    package_warnings_to_debug_log,
    printed_to_debug_log,
    quant_settings,
    toolchain_records_to_debug_log,
)
from nnsweep.runtimes.common.int4 import Int4Plan
from nnsweep.runtimes.common.onnx_export import onnx_program
from nnsweep.runtimes.common.quantize import calibration_samples
from nnsweep.runtimes.onnxruntime.int4 import quantize_int4
from nnsweep.runtimes.onnxruntime.runner import PROVIDERS, providers_for, session_options

_log = logging.getLogger(__name__)

__all__ = ["OnnxRuntimeConverter"]

# torch 2.14 exports opset 18 with dynamo=True and onnxruntime 1.32 runs it (checked on digits).
_OPSET = 18
_FILENAME = "model.onnx"
_INT4_NOTES = "int4_notes.json"  # beside an int4_weight model's stage: what its partition report adds
_BACKEND_OF = {provider: name for name, provider in PROVIDERS.items()}
# Calibrator and its settings per method. quantize_static does not pass num_bins on to
# the entropy calibrator, whose default of 128 bins over 128 quantized bins leaves its KL
# search one candidate, the min/max range: entropy would silently equal minmax (ORT 1.32).
# 512 bins search thresholds in steps of 1/256 of the largest value; ORT's search is pure
# Python and quadratic in the bins, and TensorRT's 2048 cost far more time for the same
# accuracy (benchmarks/results/onnxruntime_options.md).
_CALIBRATORS: dict[Calibration, tuple[CalibrationMethod, dict[str, object]]] = {
    Calibration.MINMAX: (CalibrationMethod.MinMax, {}),
    Calibration.ENTROPY: (CalibrationMethod.Entropy, {"num_bins": 512, "num_quantized_bins": 128}),
    Calibration.PERCENTILE: (CalibrationMethod.Percentile, {}),  # 99.999th percentile of |x|, 2048 bins
}
# ORT's default static op list minus InstanceNormalization: the QDQ quantizer cannot share
# its per-channel scale and bias ("shared mode is not supported for weight"), and GroupNorm
# exports as it, so it stays float between a DequantizeLinear and a QuantizeLinear.
_STATIC_OPS = sorted((set(QLinearOpsRegistry) | set(QDQRegistry)) - {"InstanceNormalization"})


def _export(bundle: ModelBundle, path: Path) -> None:
    """The float model as one self-contained ONNX file (batch 1, as the example input)."""
    # export must not touch the bundle's module; torch.onnx writes a bag as a Loop, which the
    # fp16 conversion cannot type
    model = unbagged_copy(bundle.module)
    with package_warnings_to_debug_log(_log, "onnxscript", "onnx_ir"):
        program = onnx_program(model, bundle.example_input, opset_version=_OPSET, external_data=False, verbose=False)
    if program is None:  # only when given a file name, which we do not
        raise ConversionError("torch.onnx.export returned no ONNXProgram")
    program.save(str(path), external_data=False)


def _check_self_contained(path: Path) -> None:
    model = onnx.load(str(path), load_external_data=False)
    external = [t.name for t in model.graph.initializer if uses_external_data(t)]
    if external:
        raise ConversionError(f"{path.name} keeps {len(external)} weights outside the file (first: {external[0]})")


def _input_name(path: Path) -> str:
    return onnx.load(str(path), load_external_data=False).graph.input[0].name


class _Reader(CalibrationDataReader):  # type: ignore[misc]
    """Feeds the calibration samples to ``quantize_static``, one batch-1 input at a time."""

    def __init__(self, name: str, samples: Iterator[torch.Tensor]) -> None:
        self._items = iter([{name: s.numpy()} for s in samples])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._items, None)


_TYPES = {"uint8": QuantType.QUInt8, "int8": QuantType.QInt8}
_FORMATS = {"qdq": QuantFormat.QDQ, "qoperator": QuantFormat.QOperator}


def _static_types(quant: QuantConfig) -> tuple[QuantFormat, QuantType, QuantType, bool]:
    """Format, activation and weight types and reduce_range: ``quant.options`` at their defaults
    unless the configuration says otherwise (RuntimeInfo.quant_options); ``a16w8`` is QDQ with
    int16 activations and int8 weights, full range (ORT's quantizer then writes com.microsoft
    Q/DQ below opset 21)."""
    if quant.mode is QuantMode.A16W8:
        return QuantFormat.QDQ, QuantType.QInt16, QuantType.QInt8, False
    knobs = runtimes.get("onnxruntime").option_values(quant)
    activation = _TYPES[str(knobs.get("activation_type", "uint8"))]
    return (
        _FORMATS[str(knobs.get("quant_format", "qdq"))],
        activation,
        _TYPES[str(knobs["weight_type"])],
        bool(knobs["reduce_range"]),
    )


def _quantize(source: Path, target: Path, bundle: ModelBundle, quant: QuantConfig) -> None:
    per_channel = quant.granularity is Granularity.PER_CHANNEL or quant.mode is QuantMode.A16W8
    quant_format, activation_type, weight_type, reduce_range = _static_types(quant)
    with tempfile.TemporaryDirectory() as tmp:
        # Shape inference and ORT's basic graph optimisations first, as ORT recommends:
        # the quantizer only quantizes tensors whose shapes it knows.
        prepared = Path(tmp) / "prepared.onnx"
        float_fallback.ort_pre_process(source, prepared)
        excluded = float_fallback.onnx_float_nodes(prepared, quant.float_layers)
        if quant.mode is QuantMode.DYNAMIC_INT8:
            # Weights int8 or uint8 (per channel or per tensor); activations quantized to
            # uint8 at run time (DynamicQuantizeLinear) -> ConvInteger / MatMulInteger:
            # always QOperator, always uint8 activations.
            quantize_dynamic(
                str(prepared), str(target), per_channel=per_channel, weight_type=weight_type,
                reduce_range=reduce_range, nodes_to_exclude=_dynamic_names(prepared, excluded),
            )  # fmt: skip
            return
        method, options = _CALIBRATORS[quant.calibration or Calibration.MINMAX]
        ranges = Path(tmp) / "ranges.json"
        with printed_to_debug_log(_log, "onnxruntime calibrator"):  # entropy and percentile print progress
            calibrator = create_calibrator(
                prepared,
                _STATIC_OPS,
                augmented_model_path=str(Path(tmp) / "augmented.onnx"),
                calibrate_method=method,
                extra_options=options,
            )
            try:
                calibrator.collect_data(_Reader(_input_name(prepared), calibration_samples(bundle, quant)))
                data = calibrator.compute_data()
            except ValueError as exc:
                if "is not finite" not in str(exc) or method is CalibrationMethod.MinMax:
                    raise
                raise ConversionError(
                    f"{quant.calibration.value if quant.calibration else method.name} calibration cannot make a "
                    "histogram of values that are not finite (an attention mask's -inf): calibrate with minmax, "
                    "which leaves those ops float"
                ) from exc
        unbounded = {name for name, td in data.items() if not np.all(np.isfinite(td.range_value))}
        excluded += _around(prepared, unbounded, excluded)
        bounded = {name: td for name, td in data.items() if name not in unbounded}
        save_tensors_data(TensorsData(data.calibration_method, bounded), ranges)
        # The defaults: QDQ, uint8 activations (asymmetric) and int8 weights, full range:
        # ORT's documented choice for x86 with VNNI (this machine has avx512_vnni), and its
        # Arm CPU kernels run it too. On x86 without VNNI ORT advises reduce_range=True
        # against int16 saturation, on Arm int8 activations: quant.options chooses, and the
        # sweep measures. ORT's quantizer refuses int8 activations with uint8 weights (the
        # runtime's refused_options keep that out of every configuration), and logs a
        # warning for QOperator with int8 activations and weights (slow on x64: 40 against
        # 18 us on digits here, the same accuracy).
        quantize_static(
            str(prepared),
            str(target),
            None,  # the ranges come from the calibration above
            quant_format=quant_format,
            per_channel=per_channel,
            reduce_range=reduce_range,
            activation_type=activation_type,
            weight_type=weight_type,
            calibrate_method=method,
            calibration_cache_path=ranges,
            op_types_to_quantize=_STATIC_OPS,
            nodes_to_exclude=excluded,
        )


def _around(prepared: Path, unbounded: set[str], excluded: list[str]) -> list[str]:
    """The nodes (not already in ``excluded``) that make or take a tensor of ``unbounded``,
    one whose calibrated range is not finite: they are left float, and the tensor unquantized.

    An attention mask filled with ``-inf`` (``masked_fill``, exported as ``Where``) gives
    such a range; quantized, its scale is infinite and its zero point NaN, and the
    softmax after it reads garbage (the PT2E quantizers leave ``where`` float).
    """
    if not unbounded:
        return []
    nodes = onnx.load(str(prepared), load_external_data=False).graph.node
    found = [n.name for n in nodes if n.name not in excluded and unbounded & {*n.input, *n.output}]
    _log.debug("left float around %d tensor(s) of unbounded range: %s", len(unbounded), ", ".join(found))
    return found


def _dynamic_names(prepared: Path, excluded: list[str]) -> list[str]:
    """``excluded`` as ``quantize_dynamic`` matches it: before excluding anything it replaces
    each Gemm by a MatMul named ``<gemm>_MatMul`` (and ``_Add``, ``_Transpose``), so a Gemm's
    own name excludes nothing (measured: a linear layer kept float was quantized anyway)."""
    if not excluded:
        return []
    model = onnx.load(str(prepared), load_external_data=False)
    gemms = {n.name for n in model.graph.node if n.op_type == "Gemm" and n.name in set(excluded)}
    return [*excluded, *(f"{name}{suffix}" for name in sorted(gemms) for suffix in _GEMM_PARTS)]


_GEMM_PARTS = ("_MatMul", "_Add", "_Transpose")  # onnxruntime.quantization.onnx_model.replace_gemm_with_matmul


def _to_fp16(source: Path, target: Path) -> None:
    # Imported here: onnxruntime.transformers is a large subpackage only fp16 needs.
    from onnxruntime.transformers.float16 import convert_float_to_float16

    # keep_io_types: the model still takes and returns float32 (Casts at its edges).
    model = convert_float_to_float16(onnx.load(str(source)), keep_io_types=True)
    onnx.save(model, str(target))


def _qparams(node: onnx.NodeProto, inits: dict[str, np.ndarray]) -> tuple[float, np.ndarray]:
    """The scalar scale and zero point of a Quantize/DequantizeLinear node."""
    scale = inits.get(node.input[1])
    # ONNX: a missing zero point means 0 of type uint8.
    zero_point = inits.get(node.input[2]) if len(node.input) > 2 and node.input[2] else np.zeros((), np.uint8)
    if scale is None or zero_point is None or scale.size != 1 or zero_point.size != 1:
        raise ConversionError(
            f"{node.op_type} {node.name!r} has no constant per-tensor scale/zero point: use interface core"
        )
    return float(scale.reshape(())), zero_point.reshape(())


def _strip_io_quantization(path: Path) -> IOSpec:
    """Make a statically quantized model take and return its quantized tensors (the ``full``
    interface).

    Removes the QuantizeLinear that reads the graph input and the DequantizeLinear that
    writes the graph output; the caller quantizes and dequantizes with their parameters.
    Both formats have them (QDQ around every quantized op, QOperator where the graph goes
    from float to its QLinear ops and back), and the model's ends take the type of their
    zero points: uint8 or int8, as ``quant.options.activation_type`` says.
    """
    model = onnx.load(str(path))
    graph = model.graph
    if len(graph.input) != 1 or len(graph.output) != 1:
        raise ConversionError("the full interface needs a model with one input and one output: use interface core")
    graph_in, graph_out = graph.input[0], graph.output[0]
    readers = [n for n in graph.node if graph_in.name in n.input]
    writers = [n for n in graph.node if graph_out.name in n.output]
    if len(readers) != 1 or readers[0].op_type != "QuantizeLinear":
        raise ConversionError("the model input does not go through one QuantizeLinear alone: use interface core")
    if len(writers) != 1 or writers[0].op_type != "DequantizeLinear":
        raise ConversionError("the model output does not come from a DequantizeLinear: use interface core")
    q, dq = readers[0], writers[0]
    inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    in_scale, in_zp = _qparams(q, inits)
    out_scale, out_zp = _qparams(dq, inits)

    quantized_in, quantized_out = q.output[0], dq.input[0]
    graph.node.remove(q)
    graph.node.remove(dq)
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name == quantized_in:
                node.input[i] = graph_in.name
            elif name == quantized_out:
                node.input[i] = graph_out.name
        for i, name in enumerate(node.output):
            if name == quantized_out:
                node.output[i] = graph_out.name
    graph_in.type.tensor_type.elem_type = onnx.helper.np_dtype_to_tensor_dtype(in_zp.dtype)
    graph_out.type.tensor_type.elem_type = onnx.helper.np_dtype_to_tensor_dtype(out_zp.dtype)
    stale = [v for v in graph.value_info if v.name in (quantized_in, quantized_out)]
    for value in stale:
        graph.value_info.remove(value)
    used = {name for node in graph.node for name in node.input}
    for init in [i for i in graph.initializer if i.name not in used]:
        graph.initializer.remove(init)  # the removed nodes' scales and zero points
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


def _placement(path: Path, spec: IOSpec, bundle: ModelBundle, order: tuple[str, ...]) -> PartitionReport:
    """Run the model once with profiling and read which provider ran each node.

    The nodes counted are those ONNX Runtime executes after its graph optimisations
    (fused operators, layout transposes and reorders included), on this machine.
    """
    providers, skipped = providers_for(order)
    options = session_options(1)
    with tempfile.TemporaryDirectory() as tmp:
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(tmp) / "profile")
        session = ort.InferenceSession(str(path), options, providers=providers)
        x = spec.prepare_input(bundle.example_input.numpy())
        session.run(None, {session.get_inputs()[0].name: x})
        events = json.loads(Path(session.end_profiling()).read_text())
    nodes: Counter[str] = Counter()
    ops: dict[str, Counter[str]] = {}
    sequence: list[str] = []
    for event in events:
        args = event.get("args", {})
        # One "<node>_kernel_time" event per node run; fence events carry no provider.
        if event.get("cat") != "Node" or "provider" not in args or not event["name"].endswith("_kernel_time"):
            continue
        backend = _BACKEND_OF.get(args["provider"], args["provider"])
        nodes[backend] += 1
        ops.setdefault(backend, Counter())[args.get("op_name", "?")] += 1
        sequence.append(backend)
    if not nodes:
        raise ConversionError("the ONNX Runtime profile recorded no nodes; cannot report their placement")

    notes = []
    for name in skipped:
        later = [b for b in order[order.index(name) + 1 :] if b not in skipped]
        notes.append(
            f"{name}: {PROVIDERS[name]} is not available on the machine that converted this model; "
            f"its nodes fall through to {later[0] if later else 'cpu'}"
        )
    # CPU nodes fell back when the order asked for another provider first.
    fallback = dict(ops.get("cpu", {})) if order and order[0] != "cpu" else {}
    # A non-CPU provider's runs of consecutive nodes in execution order: the groups it took.
    runs: list[Placement] = []
    previous = None
    for backend in sequence:
        if backend != "cpu":
            if backend == previous:
                runs[-1] = Placement(backend, runs[-1].nodes + 1)
            else:
                runs.append(Placement(backend, 1))
        previous = backend
    placements = sorted(runs, key=lambda p: -p.nodes)
    return PartitionReport(
        backends=order,
        nodes_by_backend=dict(nodes),
        partitions=tuple(placements),
        fallback_ops=fallback,
        notes=tuple(notes),
    )


@contextlib.contextmanager
def _model(stages: Stages, bundle: ModelBundle, quant: QuantConfig, layers: Int4Plan | None) -> Iterator[Path]:
    """The ``.onnx`` for ``quant`` before any interface change, from its stage: the export
    (``onnxruntime.export``, per model: every mode starts from it) for fp32, the converted
    model (``onnxruntime.model``, per quantization less the interface) for the others;
    ``int4_weight`` quantizes ``layers`` and writes what it adds to their notes beside it."""

    def export(directory: Path) -> None:
        _export(bundle, directory / _FILENAME)

    if quant.mode is QuantMode.FP32:
        with stages.stage("onnxruntime.export", {}, export) as exported:
            yield exported / _FILENAME
        return

    # Keeping layers float needs node names that carry module paths: the scoped export
    # (unfused, constants folded), a stage of its own.
    export_stage = "onnxruntime.export.scoped" if quant.float_layers else "onnxruntime.export"

    def scoped(directory: Path) -> None:
        float_fallback.export_onnx_scoped(bundle.module, bundle.example_input, directory / _FILENAME)

    def build(directory: Path) -> None:
        with stages.stage(export_stage, {}, scoped if quant.float_layers else export) as exported:
            if quant.mode is QuantMode.FP16:
                _to_fp16(exported / _FILENAME, directory / _FILENAME)
            elif layers is not None:
                int8 = runtimes.get("onnxruntime").option_values(quant)["int4_activations"] == "int8"
                notes = quantize_int4(exported / _FILENAME, directory / _FILENAME, layers, int8)
                (directory / _INT4_NOTES).write_text(json.dumps(list(notes)))
            else:
                with toolchain_records_to_debug_log(_log, float_fallback.ORT_PER_TENSOR_NOTE):
                    _quantize(exported / _FILENAME, directory / _FILENAME, bundle, quant)

    with stages.stage("onnxruntime.model", {"quant": quant_settings(quant)}, build) as converted:
        yield converted / _FILENAME


class OnnxRuntimeConverter(Converter):
    """Export to ONNX, quantize with ``onnxruntime.quantization``, report provider placement.

    Every mode starts from ``torch.onnx.export(dynamo=True)`` (opset 18, batch 1). ``fp16``
    converts weights and activations with float32 Casts at the edges; ``dynamic_int8`` uses
    ``quantize_dynamic``; ``static_int8`` QDQ, calibrated on the calibration split (minmax,
    entropy or percentile), and interface ``full`` drops the edge Quantize/DequantizeLinear
    (:class:`IOSpec` carries their scales); ``a16w8`` QDQ with int16 activations and int8 weights;
    ``int4_weight`` blocks of 4-bit linear weights
    (``MatMulNBits``, :mod:`~nnsweep.runtimes.onnxruntime.int4`). ``quant.options``
    (:data:`~nnsweep.runtimes.onnxruntime.options.ONNXRUNTIME_OPTIONS`) changes the defaults:
    ``quant_format``, ``activation_type``, ``weight_type``, ``reduce_range``, ``int4_activations``.

    The backend order becomes the session's providers; the partition report profiles one run
    with the providers this machine has. The export and converted model are stages
    (:func:`_model`) independent of the order, so another order only profiles again.
    """

    def convert(self, bundle: ModelBundle, config: DeploymentConfig, out_dir: Path) -> ConversionResult:
        """Write ``model.onnx`` for ``config`` into ``out_dir`` and describe it.

        Raises:
            ConversionError: the model cannot be deployed this way; the message says why.
        """
        quant = config.quant
        path = out_dir / _FILENAME
        # int4_weight: which linear layers go 4-bit, known (or refused) before anything converts
        layers = int4.plan(bundle.module, quant.group_size, quant.float_layers) if quant.group_size else None
        notes: tuple[str, ...] = layers.notes() if layers else ()
        with _model(self.stages, bundle, quant, layers) as source:
            shutil.copyfile(source, path)
            if layers is not None:
                notes += tuple(json.loads((source.parent / _INT4_NOTES).read_text()))
        _check_self_contained(path)
        spec = _strip_io_quantization(path) if quant.interface is Interface.FULL else IOSpec()
        report = _placement(path, spec, bundle, config.backends)
        return ConversionResult(filename=path.name, partitions=report, io=spec, model_notes=notes)
