"""ONNX Runtime's intermediates for ``nnsweep bench --explain``: a copy of the model with more outputs.

Each layer's last node's output becomes a graph output of a copy of the artifact, run in a
session like the runner's (same providers, threads, optimisations). In a QDQ model that
output goes through a QuantizeLinear/DequantizeLinear pair: the pair's float output is
taken, the value as the next layer receives it. Nodes are named by module path as the
float-layer exclusion names them (a scoped export's ``<module path>/<node>``,
:func:`~nnsweep.runtimes.common.float_region.onnx_node_scope`), else by the module path of
the weight they read (``blocks.2.pw1.weight``); a node with neither is left out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from nnsweep.bench.divergence import Observed
from nnsweep.core.errors import BenchmarkError
from nnsweep.runtimes.common.float_region import onnx_node_scope

__all__ = ["explain", "layer_outputs"]

_QDQ = frozenset({"QuantizeLinear", "DequantizeLinear"})
# what ONNX Runtime's quantizer appends to the weight it quantizes
_WEIGHT_SUFFIXES = ("_quantized", "_DequantizeLinear_Output", "_scale", "_zero_point")
_NOTE = "a copy of the model with each layer's output (after its QDQ pair) added as a graph output"


def _weight_path(name: str) -> str | None:
    """``blocks.2.pw1.weight_quantized`` -> ``blocks.2.pw1`` (``None``: not a weight's name)."""
    for suffix in _WEIGHT_SUFFIXES:
        name = name.removesuffix(suffix)
    path, dot, leaf = name.rpartition(".")
    return path if dot and leaf == "weight" else None


def _layer_of(node: Any, producers: dict[str, Any], initializers: set[str]) -> str | None:
    """The module path ``node`` belongs to (see the module docstring)."""
    if node.op_type in _QDQ:
        return None
    scope = onnx_node_scope(node.name)
    if scope is not None:
        return scope or None  # the root module's own ops name no layer
    for name in node.input:
        source = producers.get(name)
        if source is not None and source.op_type == "DequantizeLinear":
            name = source.input[0]
        if name in initializers and (path := _weight_path(name)) is not None:
            return path
    return None


def layer_outputs(model: Any) -> list[tuple[str, str]]:
    """``(module path, tensor)`` per layer of ``model`` in graph order: its last node's first
    output, or the float output of the QuantizeLinear/DequantizeLinear pair after it."""
    graph = model.graph
    initializers = {i.name for i in graph.initializer}
    producers = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    last: dict[str, str] = {}
    for node in graph.node:
        if (layer := _layer_of(node, producers, initializers)) is not None and node.output:
            last.pop(layer, None)  # re-inserted: the order is that of each layer's last node
            last[layer] = _after_qdq(node.output[0], consumers)
    return list(last.items())


def _after_qdq(tensor: str, consumers: dict[str, list[Any]]) -> str:
    """``tensor``, or the output of the DequantizeLinear of the QuantizeLinear that takes it."""
    for q in consumers.get(tensor, []):
        if q.op_type == "QuantizeLinear":
            for dq in consumers.get(q.output[0], []):
                if dq.op_type == "DequantizeLinear":
                    return str(dq.output[0])
    return tensor


def explain(bundle: Any, config: Any, artifact: Path, io: Any, inputs: np.ndarray) -> tuple[list[Observed], str]:
    """Each layer's output on ``inputs`` (see the module docstring); ``bundle`` is not needed."""
    import onnx
    import onnxruntime as ort

    from nnsweep.runtimes.onnxruntime.runner import _ORT_ERRORS, providers_for, session_options

    model = onnx.load(str(artifact))
    layers = layer_outputs(model)
    if not layers:
        raise BenchmarkError(f"no node of {artifact.name} names a module (no module path, no weight name)")
    present = {o.name for o in model.graph.output}
    model.graph.output.extend(onnx.ValueInfoProto(name=t) for _, t in layers if t not in present)
    try:
        providers, _ = providers_for(config.backends or ("cpu",))
        session = ort.InferenceSession(model.SerializeToString(), session_options(config.threads), providers=providers)
        name = session.get_inputs()[0].name
        wanted = [t for _, t in layers]
        rows = [session.run(wanted, {name: io.prepare_input(inputs[i : i + 1])}) for i in range(len(inputs))]
    except (ValueError, *_ORT_ERRORS) as exc:  # type: ignore[misc]  # a tuple of classes, built at import
        raise BenchmarkError(f"ONNX Runtime cannot run {artifact.name} with its intermediates: {exc}") from exc
    observed: list[Observed] = []
    for k, (layer, _) in enumerate(layers):
        values = np.concatenate([np.asarray(row[k]) for row in rows])
        if np.issubdtype(values.dtype, np.floating):  # a QOperator model's uint8 tensors are left out
            observed.append((layer, values.astype(np.float32)))
    return observed, _NOTE
