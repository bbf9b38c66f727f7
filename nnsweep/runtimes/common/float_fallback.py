"""Keep chosen layers of a model in float while the rest is int8: one recipe per toolchain.

Layers are named by module path (``blocks.2.pw1``), selecting the module and all under it:

- ONNX Runtime: ``quantize_static(nodes_to_exclude=...)``. :func:`export_onnx_scoped`
  exports without graph optimisations (their BatchNorm fusion keeps the wrong scope), names
  every node ``<module path>/<node name>`` and folds constants.
- torch.ao FX: ``QConfigMapping.set_module_name(path, None)``, and the observers between
  float layers removed (:func:`fx_prepare`).
- PT2E (XNNPACKQuantizer, litert-torch's PT2EQuantizer): a filter on each node's
  ``nn_module_stack`` (:func:`pt2e_keep_float`).

Heavy imports (torch, onnx, onnxruntime) happen inside the functions.
"""

from __future__ import annotations

import ast
import logging
from collections.abc import Callable, Collection, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nnsweep.runtimes.common.bags import unbagged_copy
from nnsweep.runtimes.common.converter import toolchain_records_to_debug_log
from nnsweep.runtimes.common.float_region import (
    SCOPE_SEPARATOR,
    fx_drop_float_observers,
    fx_float_region,
    fx_untraced_float_modules,
    in_modules,
    onnx_float_region,
    onnx_nodes_in,
)
from nnsweep.runtimes.common.fx_values import drop_non_float_observers, fold_shape_arithmetic

if TYPE_CHECKING:
    import numpy as np
    import torch

__all__ = [
    "ORT_PER_TENSOR_NOTE",
    "SCOPE_SEPARATOR",
    "export_onnx_scoped",
    "fx_keep_float",
    "fx_prepare",
    "in_modules",
    "name_unnamed_nodes",
    "onnx_float_nodes",
    "onnx_nodes_in",
    "ort_pre_process",
    "ort_quantize_prepared",
    "ort_quantize_static",
    "pt2e_keep_float",
]

# What ONNX Runtime's quantizer logs, at warning level, for a weight it quantizes per tensor
# because it has no per-channel axis (a LayerNorm's scale): nnsweep logs it at debug.
ORT_PER_TENSOR_NOTE = "is out-of-range for weight"
_log = logging.getLogger(__name__)
_SCOPES_KEY = "pkg.torch.onnx.name_scopes"
_OPSET = 18


def _scope_of(node: Any) -> str:
    """The innermost module path of an exported ONNX node ('' for the root module)."""
    for prop in node.metadata_props:
        if prop.key == _SCOPES_KEY:
            scopes = ast.literal_eval(prop.value)  # ['', 'blocks', 'blocks.2', 'blocks.2.dw', 'conv2d_7']
            return str(scopes[-2]) if len(scopes) >= 2 else ""
    return ""


def export_onnx_scoped(module: torch.nn.Module, example: torch.Tensor, path: Path) -> None:
    """Export ``module`` to ONNX with every node named ``<module path>/<node name>``.

    Args:
        module: the float model in eval mode (not modified).
        example: a batch-1 input.
        path: the ``.onnx`` file to write (weights inside).
    """
    import onnx

    from nnsweep.runtimes.common.onnx_export import onnx_program

    program = onnx_program(
        unbagged_copy(module),  # as the converter's own export: torch.onnx writes a bag as a Loop
        example,
        opset_version=_OPSET,
        external_data=False,
        optimize=False,  # the optimiser's BatchNorm fusion keeps the BatchNorm's scope, not the conv's
        verbose=False,
    )
    assert program is not None  # None only when given a file name
    from onnxscript import ir, optimizer

    model = program.model_proto
    for node in model.graph.node:
        node.name = f"{_scope_of(node)}{SCOPE_SEPARATOR}{node.name}"
    # Constant folding only (no fusion rules): a bias-free convolution exports its zero
    # bias as Expand(CastLike(0, input)), which stops ONNX Runtime's Conv+BatchNorm fusion.
    graph = ir.from_proto(model)
    optimizer.fold_constants(graph)
    optimizer.remove_unused_nodes(graph)
    onnx.save(ir.to_proto(graph), str(path))


def name_unnamed_nodes(model: Any) -> int:
    """Give each node of ``model`` that has no name one (``<op type>_<index>``, no module
    path), in place; return how many. ONNX Runtime's quantizer excludes nodes by name, and
    its pre-processing leaves the nodes it makes (HardSwish's HardSigmoid and Mul) unnamed."""
    named = 0
    taken = {n.name for n in model.graph.node}
    for index, node in enumerate(model.graph.node):
        if not node.name:
            name = f"{node.op_type}_{index}"
            while name in taken:
                name += "_"
            node.name = name
            taken.add(name)
            named += 1
    return named


def onnx_float_nodes(prepared: Path, keep_float: Collection[str]) -> list[str]:
    """The names of the nodes a pre-processed model (:func:`export_onnx_scoped`, then
    ``quant_pre_process``) leaves float for ``keep_float``:
    :func:`~nnsweep.runtimes.common.float_region.onnx_float_region`,
    after :func:`name_unnamed_nodes` (the file is written back when a node got a name).

    A layer with no node of its own is left out: the exporter folded what it computes from
    weights alone into a constant (Hugging Face Swin's ``relative_position_bias``, a table
    gathered by a constant index), as PT2E's converters fold it
    (:func:`~nnsweep.runtimes.common.pt2e.fold_weight_computations`) and the layer rankings mark it
    ``inert``; refusing it would fail the ranking of such a model.
    """
    if not keep_float:
        return []
    import onnx

    model = onnx.load(str(prepared))
    if name_unnamed_nodes(model):
        onnx.save(model, str(prepared))
    present = [name for name in keep_float if onnx_nodes_in(model, [name])]
    if len(present) < len(keep_float):
        folded = sorted(set(keep_float) - set(present))
        _log.debug("no ONNX node comes from %s (folded into constants): nothing of theirs to keep float", folded)
    return onnx_float_region(model, present) if present else []


# The suffix :func:`ort_pre_process` gives the initializers ONNX Runtime's pre-processing added.
_PREPARED_SUFFIX = "/prepared"


def ort_pre_process(source: Path, prepared: Path) -> None:
    """ONNX Runtime's ``quant_pre_process`` (shape inference and its basic graph
    optimisations, as its quantizer asks), with the initializers its fusions added renamed
    ``<name>/prepared``.

    ONNX Runtime names a fusion's new initializers (the shapes of MatMulAddFusion's
    reshapes around a 3-D MatMul made a Gemm: ``gemm_input_shape``) with a generator that
    avoids the graph's node names only. The pre-processed model keeps those names, and a
    session over its quantized model that makes the same fusion again (a float MatMul and
    Add that ``nodes_to_exclude`` left) generates the same name and does not start
    ("Attempt to replace the existing tensor", onnxruntime 1.32; a BERT encoder with its
    linear layers float). Names of initializers change nothing computed.
    """
    import onnx
    from onnxruntime.quantization import quant_pre_process

    # Symbolic shape inference is for dynamic (transformer) shapes; ours are all static.
    quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
    before = {i.name for i in onnx.load(str(source), load_external_data=False).graph.initializer}
    model = onnx.load(str(prepared))
    renamed = {i.name: i.name + _PREPARED_SUFFIX for i in model.graph.initializer if i.name not in before}
    if not renamed:
        return
    for initializer in model.graph.initializer:
        initializer.name = renamed.get(initializer.name, initializer.name)
    for graph in _graphs(model.graph):
        for node in graph.node:
            node.input[:] = [renamed.get(name, name) for name in node.input]
        for value in (*graph.input, *graph.output, *graph.value_info):  # an initializer listed as an input too
            value.name = renamed.get(value.name, value.name)
    onnx.save(model, str(prepared))


def _graphs(graph: Any) -> Iterator[Any]:
    """``graph`` and every subgraph of its nodes (an If's branches, a Loop's body), depth first."""
    yield graph
    for node in graph.node:
        for attribute in node.attribute:
            for sub in (*([attribute.g] if attribute.HasField("g") else []), *attribute.graphs):
                yield from _graphs(sub)


def ort_quantize_static(
    source: Path,
    target: Path,
    calibration: Iterable[np.ndarray],
    keep_float: Collection[str] = (),
    per_channel: bool = False,
) -> list[str]:
    """Static int8 QDQ quantization with ONNX Runtime, leaving ``keep_float`` in float.

    As the ONNX Runtime converter does: :func:`ort_pre_process`, then
    :func:`ort_quantize_prepared`. ``source`` comes from :func:`export_onnx_scoped`;
    ``calibration`` holds batch-1 inputs; ``keep_float`` names module paths; ``per_channel``
    quantizes weights per output channel (else per tensor).

    Returns:
        The excluded node names (empty when ``keep_float`` is).

    Raises:
        ConversionError: a name in ``keep_float`` selects no node of the pre-processed model.
    """
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        prepared = Path(tmp) / "prepared.onnx"
        ort_pre_process(source, prepared)
        return ort_quantize_prepared(prepared, target, calibration, keep_float, per_channel)


def ort_quantize_prepared(
    prepared: Path,
    target: Path,
    calibration: Iterable[np.ndarray],
    keep_float: Collection[str] = (),
    per_channel: bool = False,
) -> list[str]:
    """:func:`ort_quantize_static` of a model :func:`ort_pre_process` has already written
    (what a ranking, which quantizes one model many times, pre-processes once): uint8
    activations (minmax) and int8 weights in QDQ format. Arguments, result and errors as
    :func:`ort_quantize_static`'s."""
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class _Reader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self, name: str) -> None:
            self._items = iter([{name: x} for x in calibration])

        def get_next(self) -> dict[str, Any] | None:
            return next(self._items, None)

    excluded = onnx_float_nodes(prepared, keep_float)
    input_name = onnx.load(str(prepared), load_external_data=False).graph.input[0].name
    with toolchain_records_to_debug_log(_log, ORT_PER_TENSOR_NOTE):
        quantize_static(
            str(prepared),
            str(target),
            _Reader(input_name),
            quant_format=QuantFormat.QDQ,
            per_channel=per_channel,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            calibrate_method=CalibrationMethod.MinMax,
            nodes_to_exclude=excluded,
        )
    return excluded


def fx_keep_float(mapping: Any, keep_float: Iterable[str]) -> Any:
    """A torch.ao ``QConfigMapping`` that leaves ``keep_float`` (and their submodules) in float.

    A module's qconfig covers the ops FX fuses into it (a convolution's BatchNorm and
    ReLU), so naming the convolution is enough.
    """
    for name in keep_float:
        mapping.set_module_name(name, None)
    return mapping


def fx_prepare(
    model: Any, mapping: Any, keep_float: Collection[str], example: tuple[Any, ...], *, qat: bool = False
) -> Any:
    """torch.ao FX ``prepare_fx`` (``prepare_qat_fx`` with ``qat``) of ``model`` under the
    engine's ``mapping``, with ``keep_float`` and the ops between them left float:
    :func:`fx_keep_float` on the mapping, then
    :func:`~nnsweep.runtimes.common.float_region.fx_drop_float_observers` on the prepared model.
    Arithmetic on input shapes is made constant first, and observers of values that are
    not float tensors are taken out (:mod:`nnsweep.runtimes.common.fx_values`)."""
    from torch.ao.quantization.quantize_fx import prepare_fx, prepare_qat_fx

    prepare = prepare_qat_fx if qat else prepare_fx
    mapping = fx_keep_float(mapping, keep_float)
    if qat:  # what torch runs float anyway keeps its float layers (not QAT's swapped ones)
        fx_keep_float(mapping, fx_untraced_float_modules(model))
    prepared = prepare(fold_shape_arithmetic(model, example), mapping, example)
    drop_non_float_observers(prepared, example)
    fx_drop_float_observers(prepared, keep_float)
    return prepared


def _float_filter(keep_float: Collection[str]) -> Callable[[Any], bool]:
    """Accepts the nodes to quantize: not those of ``keep_float``, nor those between them
    (:func:`~nnsweep.runtimes.common.float_region.fx_float_region`, computed once per graph)."""
    regions: dict[int, tuple[Any, set[str]]] = {}  # id(graph) -> (graph, its region)

    def quantize(node: Any) -> bool:
        graph = node.graph
        if id(graph) not in regions:
            regions[id(graph)] = (graph, fx_float_region(graph.owning_module, keep_float))
        return node.name not in regions[id(graph)][1]

    return quantize


def pt2e_keep_float(quantizer: Any, keep_float: Collection[str]) -> Any:
    """Make a static PT2E quantizer leave the ops of ``keep_float``, and the ops between
    them (:func:`~nnsweep.runtimes.common.float_region.fx_float_region`), unannotated (float).

    Both quantizers refuse ``set_module_name(path, None)``, so: ExecuTorch's
    ``XNNPACKQuantizer`` gets ``set_filter_function``; litert-torch's ``PT2EQuantizer`` has no
    filter hook and its module-name filter misreads torch's ``nn_module_stack`` keys, so its
    global static annotation runs with our filter (its module-type and module-name configs
    are then ignored). Not every annotator asks the filter (``cat``), so annotations left on
    float ops are removed afterwards: this instance's ``annotate`` is replaced.

    Raises:
        TypeError: the quantizer offers neither hook.
    """
    keep = list(keep_float)
    if not keep:
        return quantizer
    accept = _float_filter(keep)
    inner: Callable[[Any], Any]
    if hasattr(quantizer, "set_filter_function"):
        quantizer.set_filter_function(accept)
        inner = quantizer.annotate
    elif hasattr(quantizer, "_annotate_all_static_patterns"):
        from litert_torch.quantize.pt2e_quantizer_utils import propagate_annotation

        def inner(model: Any) -> Any:
            quantizer._annotate_all_static_patterns(model, quantizer.global_config, accept)
            propagate_annotation(model)
            return model

    else:
        raise TypeError(f"{type(quantizer).__name__} offers no way to leave modules in float")

    def annotate(model: Any) -> Any:
        inner(model)
        floating = [n for n in model.graph.nodes if not accept(n)]
        for node in floating:
            node.meta.pop("quantization_annotation", None)
        return model

    quantizer.annotate = annotate
    return quantizer
