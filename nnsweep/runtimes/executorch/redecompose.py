"""ExecuTorch's last ``run_decompositions`` skipped when nothing is left for it to decompose.

For a partitioner that keeps some ops whole, ExecuTorch makes the edge program with three
``run_decompositions``, each a full trace; when the partitioner takes every op it kept
whole, the last finds nothing to decompose and rebuilds the same graph (ExecuTorch skips
such a call itself on its other path).

Within :func:`decompose_only_what_is_left`, a ``run_decompositions`` of a program the
block's previous one made returns it as it is when no target in its graph or control-flow
subgraphs is in the table and every target is one the trace keeps (not a Python function
nor a composite operator torch always decomposes). The ``.pte`` bytes are the same
(``tests/test_redecompose.py``). Outside a block, and in other threads,
``run_decompositions`` is torch's own.
"""

from __future__ import annotations

import contextlib
import functools
import operator
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["decompose_only_what_is_left", "nothing_to_decompose"]

_last: ContextVar[_LastMade | None] = ContextVar("last_decomposed", default=None)  # this thread's block
_install_lock = threading.Lock()
_MARK = "_nnsweep_decomposes_only_what_is_left"
_BUILTINS = frozenset(getattr(operator, name) for name in dir(operator) if not name.startswith("_"))


@dataclass
class _LastMade:
    """The program the block's last ``run_decompositions`` made (held, so never another's id)."""

    program: Any = None


@contextlib.contextmanager
def decompose_only_what_is_left() -> Iterator[None]:
    """Within the block, this thread's ``run_decompositions`` of the program the block's last
    one made is skipped when nothing in its graph is in the table."""
    _install()
    token = _last.set(_LastMade())
    try:
        yield
    finally:
        _last.reset(token)


def nothing_to_decompose(program: Any, table: Any) -> bool:
    """Whether ``program.run_decompositions(table)`` would decompose nothing: no call target
    (in the graph or its control-flow subgraphs) is in the table, and each is one the trace
    keeps as it is (:func:`_kept_by_the_trace`)."""
    from executorch.exir.graph_module import contains_any_call_fn_target_op
    from torch._export.utils import _collect_all_valid_cia_ops

    preserved = _collect_all_valid_cia_ops()  # as torch's own run_decompositions asks (it caches aten's part)
    modules = [program.graph_module]
    while modules:
        module = modules.pop()
        for node in module.graph.nodes:
            if node.op == "get_attr" and hasattr(getattr(module, node.target, None), "graph"):
                modules.append(getattr(module, node.target))
            elif node.op == "call_function" and not _kept_by_the_trace(node.target, preserved):
                return False
    return not contains_any_call_fn_target_op(program.graph_module, table)


def _kept_by_the_trace(target: Any, preserved: set[Any]) -> bool:
    """A builtin operator, a higher-order one, or an operator the trace does not decompose
    unless the table names it: one without a ``CompositeImplicitAutograd`` kernel, or one of
    the ATen ones torch preserves when the table leaves them out. A Python function, or a
    composite operator torch decomposes whatever the table says, needs the trace."""
    if target in _BUILTINS or isinstance(target, torch._ops.HigherOrderOperator):
        return True
    op = target if isinstance(target, torch._ops.OpOverload) else getattr(target, "_op", None)  # edge ops wrap one
    if not isinstance(op, torch._ops.OpOverload):
        return False
    if not torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd"):
        return True
    return op in preserved


def _install() -> None:
    """Put the stand-in in front of ``ExportedProgram.run_decompositions`` (once per process)."""
    from torch.export import ExportedProgram

    with _install_lock:
        if not getattr(ExportedProgram.run_decompositions, _MARK, False):  # torch's is wrapped already
            ExportedProgram.run_decompositions = _stand_in(ExportedProgram.run_decompositions)  # type: ignore[method-assign]


def _stand_in(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)  # its __wrapped__ is torch's run_decompositions (itself a wrapper)
    def run_decompositions(self: Any, decomp_table: Any = None, decompose_custom_triton_ops: bool = False) -> Any:
        last = _last.get()
        if last is None:
            return original(self, decomp_table, decompose_custom_triton_ops)
        if self is last.program and not decompose_custom_triton_ops:
            from torch.export import default_decompositions

            table = default_decompositions() if decomp_table is None else decomp_table
            if nothing_to_decompose(self, table):
                return self
        last.program = original(self, decomp_table, decompose_custom_triton_ops)
        return last.program

    setattr(run_decompositions, _MARK, True)
    return run_decompositions
