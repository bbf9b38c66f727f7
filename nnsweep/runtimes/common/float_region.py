"""What stays float besides the layers kept float: the ops that lie between them.

The ops between two float layers often belong to no module (a residual add, ``F.relu``,
``torch.cat``); left to the quantizer, the tensor between the layers, where the int8 damage
sits, is still quantized and keeping the layers float recovers nothing.

The rule, one for every graph: an op lies between float ops when each input is a constant
or comes from a float op and each output goes only to float ops (the largest such set; the
model's inputs and outputs count as float). An op next to an int8 op, or with a weight of
its own, is left to the quantizer; the root module's parameters are constants.

- ONNX (:func:`onnx_float_region`): node names, for ``nodes_to_exclude``.
- PT2E and torch.fx (:func:`fx_float_region`): ops whose module stack is inside a layer
  kept float start the region.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Hashable, Iterable
from typing import Any, TypeVar

__all__ = [
    "SCOPE_SEPARATOR",
    "between",
    "fx_drop_float_observers",
    "fx_float_region",
    "fx_untraced_float_modules",
    "in_modules",
    "onnx_float_region",
    "onnx_node_scope",
    "onnx_nodes_in",
]

SCOPE_SEPARATOR = "/"  # ONNX node names: between the module path and the exporter's node name

N = TypeVar("N", bound=Hashable)


def in_modules(path: str, names: Iterable[str]) -> bool:
    """Whether module ``path`` is one of ``names`` or inside one of them.

    Example:
        >>> in_modules("blocks.2.pw1", ["blocks.2"]), in_modules("blocks.20", ["blocks.2"])
        (True, False)
    """
    return any(path == name or path.startswith(name + ".") for name in names)


def onnx_node_scope(name: str) -> str | None:
    """The module path of a node named by :func:`export_onnx_scoped` (``None``: not so named;
    ``""``: the root module's).

    Example:
        >>> onnx_node_scope("fc1/node_MatMul_6/MatMulAddFusion"), onnx_node_scope("node_Conv_3")
        ('fc1', None)
    """
    # the first separator: ONNX Runtime's fusions append to a name ("fc1/node_MatMul_6/MatMulAddFusion")
    scope, sep, _ = name.partition(SCOPE_SEPARATOR)
    return scope if sep else None


def onnx_nodes_in(model: Any, keep_float: Collection[str]) -> list[str]:
    """Names of the nodes of an ONNX model (from :func:`export_onnx_scoped`) inside ``keep_float``."""
    names = []
    for node in model.graph.node:
        scope = onnx_node_scope(node.name)
        if scope is not None and in_modules(scope, keep_float):
            names.append(node.name)
    return names


def between(
    inside: set[N],
    candidates: Iterable[N],
    producers: Callable[[N], Iterable[N | None]],
    consumers: Callable[[N], Iterable[N | None]],
    float_too: Collection[N] = (),
) -> set[N]:
    """The largest subset of ``candidates`` whose members meet float nodes only, and are
    joined to ``inside`` through one another.

    The model's own inputs and outputs count as float (they are float tensors); a chain
    of ops from an input to an output that touches no node of ``inside`` is not kept.

    Args:
        inside: the nodes kept float by name (a layer's own).
        candidates: the nodes that may lie between them (no weight of their own).
        producers: a node's non-constant inputs, by the node that makes each (None: a
            graph input).
        consumers: the nodes that read a node's outputs (None: a graph output).
        float_too: nodes that are float whatever is kept (an op the quantizer has no int8
            kernel for): a member may meet them, but is joined to ``inside`` only through
            other members.
    """
    region = set(candidates) - inside - set(float_too)
    changed = True
    while changed:
        changed = False
        floating: set[N | None] = {None, *inside, *float_too, *region}
        for node in list(region):
            if not all(p in floating for p in producers(node)) or not all(c in floating for c in consumers(node)):
                region.discard(node)
                changed = True
    joined: set[N] = set()
    frontier = list(inside)
    while frontier:  # the region's members that a path through the region joins to inside
        node = frontier.pop()
        for other in (*producers(node), *consumers(node)):
            if other in region and other not in joined:
                joined.add(other)  # type: ignore[arg-type]
                frontier.append(other)  # type: ignore[arg-type]
    return joined


def onnx_float_region(model: Any, keep_float: Collection[str]) -> list[str]:
    """The nodes to leave float for ``keep_float``: those inside it
    (:func:`onnx_nodes_in`), and every node between
    them (the module docstring), in the graph's order.

    ONNX decomposes an activation into several nodes of no module (GELU into Div, Erf,
    Add and two Muls; ONNX Runtime's pre-processing splits HardSwish into HardSigmoid and
    Mul). A node with a weight reads an initializer of two or more dimensions, unless it
    is an op of the root module (named ``/<node>``: the root's own parameters are
    constants, as in :func:`_weighted`) or an embedding's ``Gather`` (no layer to keep
    float by name, so with its neighbours float its table stays float too). Nodes
    without a name cannot be excluded by name: name them first
    (:func:`~nnsweep.runtimes.common.float_fallback.name_unnamed_nodes`).
    """
    names = set(onnx_nodes_in(model, keep_float))
    if not names:
        return []
    nodes = list(model.graph.node)
    constants = {t.name for t in model.graph.initializer}
    constants |= {o for n in nodes if n.op_type == "Constant" for o in n.output}
    weights = {t.name for t in model.graph.initializer if len(t.dims) >= 2}
    producer = {o: i for i, n in enumerate(nodes) for o in n.output}
    readers: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        for tensor in n.input:
            readers.setdefault(tensor, []).append(i)
    graph_outputs = {o.name for o in model.graph.output}

    def producers(i: int) -> Iterable[int | None]:
        return [producer.get(t) for t in nodes[i].input if t and t not in constants]

    def consumers(i: int) -> Iterable[int | None]:
        out: list[int | None] = []
        for o in nodes[i].output:  # a graph output may be read by other nodes too
            out.extend([*readers.get(o, []), None] if o in graph_outputs else readers.get(o, []))
        return out

    inside = {i for i, n in enumerate(nodes) if n.name in names}

    def layer(n: Any) -> bool:
        # a weight read inside a module; the root's ("/node_add") are constants, and an
        # embedding's lookup is no layer (rank.quantizable_layers), though ONNX Runtime
        # quantizes its table
        if n.op_type == "Gather" or n.name.startswith(SCOPE_SEPARATOR):
            return False
        return bool(weights.intersection(n.input))

    candidates = (i for i, n in enumerate(nodes) if n.op_type != "Constant" and n.name and not layer(n))
    region = between(inside, candidates, producers, consumers)
    return [n.name for i, n in enumerate(nodes) if i in inside or i in region]


def fx_float_region(graph_module: Any, keep_float: Collection[str]) -> set[str]:
    """The names of the ops of a traced graph to leave float for ``keep_float``: the ops
    traced inside those modules, and every op between them (the module docstring).

    Works on a PT2E graph (ops carry ``nn_module_stack``) and on a torch.fx symbolic
    trace (a layer is a ``call_module`` node). A weight is a ``get_attr`` of two or more
    dimensions; other ``get_attr`` nodes are constants.
    """
    return {n.name for n in _fx_floating(graph_module, keep_float, observers=frozenset())}


def _fx_floating(graph_module: Any, keep_float: Collection[str], observers: Collection[Any]) -> set[Any]:
    """The float ops of a traced graph for ``keep_float`` (:func:`fx_float_region`), seeing
    through ``observers`` (the observer nodes of an FX-prepared graph; none for PT2E)."""
    if not keep_float:
        return set()
    ops = [n for n in graph_module.graph.nodes if n.op in _OPS and n not in observers]
    inside = _inside(ops, keep_float)
    if not inside:
        return set()
    leaves = _fx_float_modules(graph_module, ops) - inside  # torch.fx's leaves; a PT2E graph has none

    def producers(node: Any) -> Iterable[Any]:
        found = [_source(a, observers) for a in node.all_input_nodes]
        return [None if a.op == "placeholder" else a for a in found if a.op != "get_attr"]

    def consumers(node: Any) -> Iterable[Any]:
        return [None if u.op == "output" else u for u in _readers(node, observers)]

    candidates = (n for n in ops if not _weighted(graph_module, n))
    return inside | leaves | between(inside, candidates, producers, consumers, float_too=leaves)


def _source(node: Any, observers: Collection[Any]) -> Any:
    """The op that makes the tensor ``node`` gives (``node`` itself unless an observer)."""
    while node in observers:
        node = node.args[0]
    return node


def _readers(node: Any, observers: Collection[Any]) -> list[Any]:
    """The ops that read ``node``'s tensor, through any observers between."""
    out: list[Any] = []
    for user in node.users:
        out.extend(_readers(user, observers) if user in observers else [user])
    return out


_OPS = ("call_function", "call_method", "call_module")


def _inside(ops: Iterable[Any], keep_float: Collection[str]) -> set[Any]:
    """The ops traced inside a layer kept float."""
    return {n for n in ops if any(in_modules(path, keep_float) for path in _module_paths(n))}


def _fx_float_modules(graph_module: Any, ops: Iterable[Any]) -> set[Any]:
    """The layers (``call_module`` ops with a weight) of an FX-prepared graph that torch.ao's
    static int8 leaves float: their module type is in no pattern of its native backend
    config with an int8 activation (:func:`_static_int8_module_types`).

    torch.fx does not trace into ``torch.nn``'s own modules: an ``nn.TransformerEncoder``
    or an ``nn.MultiheadAttention`` is one such op, with no int8 kernel (``nn.LSTM`` and
    ``nn.GRU`` have dynamic ones only). It is float whatever ``float_layers`` says, so the
    ops between it and a layer kept float lie between float ops: left to the quantizer,
    the mean between an encoder and its head stays quantized with every layer float.
    """
    layers = [n for n in ops if n.op == "call_module" and _weighted(graph_module, n)]
    if not layers:  # torch.ao's config is built only for a graph that has such ops
        return set()
    static = _static_int8_module_types()
    return {n for n in layers if type(graph_module.get_submodule(n.target)) not in static}


def fx_untraced_float_modules(model: Any) -> list[str]:
    """The paths of the modules of ``model`` that torch.fx does not trace into and torch.ao's
    static int8 has no kernel for (an ``nn.TransformerEncoder``, an ``nn.MultiheadAttention``
    outside one; :func:`_fx_float_modules`), with every module inside them: torch runs them
    float whatever ``float_layers`` says.

    ``prepare_qat_fx`` still swaps the layers inside such a module for their QAT versions
    (an encoder's ``nn.Linear`` for ``qat.Linear``, with its weight's fake-quantizer), and
    ``convert_fx``, which converts the traced ops only, leaves them there: TorchScript then
    failed on the converted model ("Module 'FakeQuantize' has no attribute
    'activation_post_process'"). Left without a qconfig, they stay the float modules
    torch runs.
    """
    import torch

    tracer = torch.fx.Tracer()
    static = _static_int8_module_types()
    paths: list[str] = []
    for path, module in model.named_modules():  # a module before the modules inside it
        untraced = tracer.is_leaf_module(module, path) and type(module) not in static
        if path and (in_modules(path, paths) or (untraced and next(module.parameters(), None) is not None)):
            paths.append(path)
    return paths


@functools.cache
def _static_int8_module_types() -> frozenset[type]:
    """The module types in a pattern of torch.ao's native backend config (the one
    ``prepare_fx`` uses by default) that has a static int8 dtype config."""
    import torch
    import torch.ao.quantization.backend_config.utils  # the config builder needs it loaded
    from torch.ao.quantization.backend_config import get_native_backend_config

    found: set[type] = set()

    def collect(pattern: Any) -> None:
        if isinstance(pattern, tuple):
            for part in pattern:
                collect(part)
        elif isinstance(pattern, type):
            found.add(pattern)

    for config in get_native_backend_config().configs:
        if any(d.input_dtype == torch.quint8 and not d.is_dynamic for d in config.dtype_configs):
            collect(config.pattern if config.pattern is not None else config._pattern_complex_format)
    return frozenset(found)


def _weighted(graph_module: Any, node: Any) -> bool:
    """Whether a traced op has a weight of its own (a parameter of two or more dimensions,
    read inside a module): a layer, left to the quantizer unless kept float by name.

    The root module's own parameters (learned positions added to the input, a class token)
    are constants here: the root is no layer ``float_layers`` can name, so an op of the
    root that reads one is kept float whenever its neighbours are; left to the quantizer,
    ``h = self.inp(x) + self.pos`` in front of an encoder stays quantized with every layer float.
    """
    if node.op == "call_module":
        return any(p.ndim >= 2 for p in graph_module.get_submodule(node.target).parameters())
    if not any(_module_paths(node)):  # an op of the root module
        return False
    return any(a.op == "get_attr" and _ndim(graph_module, a.target) >= 2 for a in node.all_input_nodes)


def _module_paths(node: Any) -> list[str]:
    """The module paths a traced op belongs to: its ``nn_module_stack`` (PT2E), or the
    module a ``call_module`` node calls (torch.fx)."""
    if node.op == "call_module":
        return [str(node.target)]
    stack = node.meta.get("nn_module_stack") or {}
    return [path for path, _ in stack.values()]


def _ndim(graph_module: Any, target: str) -> int:
    value: Any = graph_module
    for part in target.split("."):
        value = getattr(value, part, None)
    return int(getattr(value, "ndim", 0))


def fx_drop_float_observers(prepared: Any, keep_float: Collection[str]) -> int:
    """Remove, in place, the observers of a torch.ao FX-prepared model (``prepare_fx`` or
    ``prepare_qat_fx``) that would quantize a tensor read by float ops only; return how many.

    ``QConfigMapping.set_module_name(path, None)`` leaves a layer float, but the ops of no
    module around it (a residual add, ``F.relu``, ``torch.cat``, ``x.mean()``) keep the
    global qconfig, and FX gives their per-call qconfig for functions only, never for
    methods. So the float region (the module docstring) is found on the prepared graph,
    observers seen through, and an observer on a tensor that a float op, the graph's input
    or a constant (the root's learned positions) makes and float ops (or the graph's
    output) alone read is taken out:
    ``convert_fx`` then leaves those ops and the tensors between them float. An int8 op's output observer stays, whoever
    reads it: ``convert_fx`` swaps the op for its quantized version only with it.
    """
    if not keep_float:
        return 0
    from torch.ao.quantization.quantize import _is_activation_post_process

    graph = prepared.graph
    observers = {
        n
        for n in graph.nodes
        if n.op == "call_module" and _is_activation_post_process(prepared.get_submodule(n.target))
    }

    floating = _fx_floating(prepared, keep_float, observers)
    dropped = 0
    for observer in list(observers):
        made_by = _source(observer, observers)  # an int8 op's output observer stays: FX quantizes the op by it
        read_float = all(r.op == "output" or r in floating for r in _readers(observer, observers))
        if (made_by.op in ("placeholder", "get_attr") or made_by in floating) and read_float:
            observer.replace_all_uses_with(observer.args[0])
            graph.erase_node(observer)
            dropped += 1
    if dropped:
        graph.lint()
        prepared.recompile()
        prepared.delete_all_unused_submodules()
    return dropped
