"""Values torch's FX quantization takes for float activations and that are not.

``prepare_fx`` observes every op its mapping quantizes, whatever the op gives. Two kinds fail:

* **Arithmetic on input shapes** (``d // heads``, ``x.shape[1]``): the deployment's input
  shape is fixed, so :func:`fold_shape_arithmetic` evaluates the shape nodes on the example
  and writes their values into the graph. Only models computing with a shape are traced
  beforehand (tracing first inlines their own submodules).
* **Integer tensors** (``topk``/``argsort`` indices and shape ops on them):
  :func:`drop_non_float_observers` runs the prepared model once and removes each observer
  that saw a non-float tensor, so ``convert_fx`` leaves that value as it is.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import operator
from collections.abc import Iterator
from typing import Any

import torch
from torch import fx

__all__ = ["drop_non_float_observers", "fold_shape_arithmetic"]

log = logging.getLogger(__name__)

_SHAPE_METHODS = frozenset({"size", "dim", "numel"})
# What computes with a shape and a tensor together: the ops FX's prepare observes.
_ARITHMETIC = frozenset(
    {operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv, operator.pow}
    | {torch.add, torch.sub, torch.mul, torch.div, torch.pow}
)
_ARITHMETIC_METHODS = frozenset({"add", "sub", "mul", "div", "pow", "__add__", "__mul__", "__truediv__"})


def fold_shape_arithmetic(model: torch.nn.Module, example: tuple[Any, ...]) -> torch.nn.Module:
    """``model``, or a ``GraphModule`` of it in which every value computed from input shapes
    alone (for this batch and a batch of two) is a constant, when such a value meets a tensor.

    Values depending on the batch size stay in the graph, so the model still takes batches
    (QAT and the layer ranking use them); a model that cannot run a batch of two gets every
    shape value folded and its callers use one sample a call.

    Args:
        model: the module about to be prepared (not changed).
        example: the inputs the deployment is exported for.

    Returns:
        ``model`` itself when nothing needs folding or torch.fx cannot trace it; else the
        folded ``GraphModule`` (same submodule names, ``model``'s training mode).
    """
    try:
        traced = fx.symbolic_trace(copy.deepcopy(model))
    except Exception:  # torch.fx cannot trace it: prepare_fx traces it again and says why
        return model
    graph = traced.graph
    derived = _shape_nodes(graph)
    if not any(_meets_tensor(node, derived) for node in derived):
        return model
    values = _values(traced, derived, example)
    try:
        batched = _values(traced, derived, tuple(_two(x) for x in example))
    except Exception:  # the model takes one sample a call: every shape is the example's
        batched = values
    constants = {n: tuple(v) if isinstance(v, torch.Size) else v for n, v in values.items() if _same(v, batched.get(n))}

    def constant(node: fx.Node) -> Any:
        return constants.get(node, node)

    for user in graph.nodes:
        if user not in constants:
            user.args = fx.node.map_arg(user.args, constant)
            user.kwargs = fx.node.map_arg(user.kwargs, constant)
    for node in reversed(list(graph.nodes)):  # the shape nodes nothing reads any more
        if node in derived and not node.users:
            graph.erase_node(node)
    traced.recompile()
    log.debug("shape arithmetic folded into constants: %d nodes", len(constants))
    return traced


def _two(x: Any) -> Any:
    """``x`` as a batch of two samples (a tensor input twice along its first dimension)."""
    return torch.cat([x, x]) if isinstance(x, torch.Tensor) and x.dim() > 0 else x


def _same(a: Any, b: Any) -> bool:
    """Whether two shape values are equal (a number, a size or a tuple of them)."""
    return type(a) is type(b) and bool(a == b)


def _shape_nodes(graph: fx.Graph) -> set[fx.Node]:
    """The nodes whose value comes from input shapes only: a shape, a size, a dimension
    count, and Python arithmetic on those."""
    derived: set[fx.Node] = set()
    for node in graph.nodes:
        read = node.op == "call_method" and node.target in _SHAPE_METHODS
        read = read or (node.op == "call_function" and node.target is getattr and node.args[1:2] == ("shape",))
        computed = (
            node.op == "call_function"
            and bool(node.all_input_nodes)
            and all(n in derived for n in node.all_input_nodes)
            and getattr(node.target, "__module__", None) in ("_operator", "builtins", "math")
        )
        if read or computed:
            derived.add(node)
    return derived


def _meets_tensor(node: fx.Node, derived: set[fx.Node]) -> bool:
    """Whether ``node``'s value is an operand of arithmetic with something not from shapes."""
    for user in node.users:
        if user in derived:
            continue
        if (user.op == "call_function" and user.target in _ARITHMETIC) or (
            user.op == "call_method" and user.target in _ARITHMETIC_METHODS
        ):
            return True
    return False


def _values(traced: fx.GraphModule, derived: set[fx.Node], example: tuple[Any, ...]) -> dict[fx.Node, Any]:
    """Each of ``derived``'s values on ``example``."""
    values: dict[fx.Node, Any] = {}

    class Recorder(fx.Interpreter):
        def run_node(self, n: fx.Node) -> Any:
            value = super().run_node(n)
            if n in derived:
                values[n] = value
            return value

    with _evaluating(traced):
        Recorder(traced).run(*example)
    return values


def drop_non_float_observers(prepared: fx.GraphModule, example: tuple[Any, ...]) -> list[str]:
    """Remove, in place, the observers of an FX-prepared model (``prepare_fx`` or
    ``prepare_qat_fx``) that see anything but a float tensor on ``example``: integer
    indices, a Python number. Returns the names of the values they observed.

    An observer the example never reaches is kept."""
    from torch.ao.quantization.quantize import _is_activation_post_process

    graph = prepared.graph
    observers = {
        str(n.target): n
        for n in graph.nodes
        if n.op == "call_module" and _is_activation_post_process(prepared.get_submodule(str(n.target)))
    }
    originals = {name: prepared.get_submodule(name) for name in observers}
    seen = {name: _Kind() for name in observers}
    for name, kind in seen.items():
        setattr(prepared, name, kind)
    try:
        with _evaluating(prepared):
            prepared(*example)
    finally:
        for name, original in originals.items():
            setattr(prepared, name, original)
    dropped = []
    for name, node in observers.items():
        if seen[name].reached and not seen[name].float_tensor:
            dropped.append(node.args[0].name if isinstance(node.args[0], fx.Node) else name)
            node.replace_all_uses_with(node.args[0])
            graph.erase_node(node)
    if dropped:
        graph.lint()
        prepared.recompile()
        prepared.delete_all_unused_submodules()
        log.debug("observers of values that are not float tensors taken out: %s", ", ".join(dropped))
    return dropped


class _Kind(torch.nn.Module):
    """Stands in for an observer for one run: passes its input on and notes what it was."""

    def __init__(self) -> None:
        super().__init__()
        self.reached = False
        self.float_tensor = True

    def forward(self, value: Any) -> Any:
        self.reached = True
        self.float_tensor = self.float_tensor and isinstance(value, torch.Tensor) and value.is_floating_point()
        return value


@contextlib.contextmanager
def _evaluating(module: torch.nn.Module) -> Iterator[None]:
    """``module`` in eval mode and without gradients, its mode restored after: the values
    read do not depend on the mode, and a training-mode BatchNorm refuses a batch of one."""
    training = module.training
    module.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        module.train(training)
