"""ExecuTorch's closing re-trace skipped for a graph no pass has touched since the last one.

Most XNNPACK ``preprocess`` passes end in ``ExportPass.call``, which re-traces the whole
graph through fake tensors whether the pass changed anything or not.

Within :func:`retrace_only_when_changed`, a plain re-trace (an ``ExportPass`` overriding only
``call``) of a graph module that is, unchanged, the output of the block's last re-trace
returns it as it is. Unchanged means the same nodes, names, targets, arguments and metadata
(:func:`snapshot`: containers by contents, other values by identity). Only ``from_node``
history misses the skipped passes; the ``.pte`` bytes are the same (``tests/test_retrace.py``).
Passes that work in the trace (overriding ``call_operator``) always trace. Outside a block,
and in other threads, ``ExportPass.call`` is ExecuTorch's own.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

__all__ = ["is_plain_retrace", "retrace_only_when_changed", "snapshot"]

_last: ContextVar[_LastTrace | None] = ContextVar("last_trace", default=None)  # this thread's block
_install_lock = threading.Lock()
_plain: dict[type, bool] = {}  # is_plain_retrace's answers, per class
_ATOMS = (str, int, float, bool, type(None))


class _Same:
    """``value`` compared by identity, and kept alive with the snapshot that holds it."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.value is self.value

    def __hash__(self) -> int:
        return id(self.value)


@dataclass
class _LastTrace:
    """The snapshot of the module the block's last trace made (XNNPACK's passes trace one
    after another, each the module the one before made). It holds what it compares by
    identity, so no address is reused while it is kept."""

    snapshot: tuple[Any, ...] = ()


@contextlib.contextmanager
def retrace_only_when_changed() -> Iterator[None]:
    """Within the block, this thread's plain re-traces of an untouched re-trace are skipped."""
    _install()
    token = _last.set(_LastTrace())
    try:
        yield
    finally:
        _last.reset(token)


def snapshot(graph_module: Any) -> tuple[Any, ...]:
    """The module and what a re-trace of it depends on: each node (by identity) with its name,
    op, target, arguments and metadata, and the module attributes its ``get_attr`` nodes read."""
    parts: list[Any] = [_Same(graph_module), _Same(graph_module.graph)]
    for node in graph_module.graph.nodes:
        parts.append(
            (
                _Same(node),
                node.name,
                node.op,
                _value(node.target),
                _value(node.args),
                _value(node.kwargs),
                tuple((key, _value(value)) for key, value in node.meta.items()),
            )
        )
        if node.op == "get_attr":
            parts.append(_Same(getattr(graph_module, node.target, None)))
    return tuple(parts)


def is_plain_retrace(cls: type) -> bool:
    """Whether ``cls``'s ``ExportPass.call`` is ExecuTorch's plain re-trace: the class
    overrides nothing of ``ExportPass`` (hooks, tracer, interpreter) but ``call``."""
    from executorch.exir.pass_base import ExportPass

    if cls not in _plain:
        names = (name for name in dir(ExportPass) if not name.startswith("__") and name != "call")
        methods = (name for name in names if callable(getattr(ExportPass, name)))  # not ABC's _abc_impl
        _plain[cls] = all(getattr(cls, name, None) is getattr(ExportPass, name) for name in methods)
    return _plain[cls]


def _value(value: Any) -> Any:
    """A comparable stand-in: atoms as they are, containers by their contents (lists and
    dicts by identity too, so one changed in place differs), anything else by identity."""
    kind = type(value)
    if kind in _ATOMS:
        return value
    if kind is tuple:
        return value if all(type(v) in _ATOMS for v in value) else tuple(_value(v) for v in value)
    if kind is list:
        return (_Same(value), tuple(_value(v) for v in value))
    if kind is dict:
        return (_Same(value), tuple((k, _value(v)) for k, v in value.items()))
    return _Same(value)


def _install() -> None:
    """Put the stand-in in front of ``ExportPass.call`` (once per process)."""
    from executorch.exir.pass_base import ExportPass

    with _install_lock:
        if not hasattr(ExportPass.call, "__wrapped__"):
            ExportPass.call = _stand_in(ExportPass.call)  # type: ignore[method-assign]


def _stand_in(original: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    @functools.wraps(original)  # its __wrapped__ is ExecuTorch's call
    def call(self: Any, graph_module: Any) -> Any:
        last = _last.get()
        if last is None:
            return original(self, graph_module)
        if is_plain_retrace(type(self)) and last.snapshot == snapshot(graph_module):
            from torch.fx.passes.infra.pass_base import PassResult

            return PassResult(graph_module, False)
        result = original(self, graph_module)  # every pass's trace: a plain one may follow it
        last.snapshot = snapshot(result.graph_module)
        return result

    return call
