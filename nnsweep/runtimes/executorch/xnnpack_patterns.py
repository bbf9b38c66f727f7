"""XNNPACK's pattern graphs, built only for a program that holds what they need.

Two of the passes XNNPACK's ``preprocess`` runs on every delegated partition look for
subgraphs by matching pattern graphs: ``ConvertToUpsampleBilinear2d`` (bilinear upsampling)
and ``ConvertToSDPAPass`` (scaled dot-product attention). The patterns are edge programs
ExecuTorch makes on first use, with ``torch.export`` and ``to_edge`` (six of them: 2.6 s
and 1.3 s here, on every process's first XNNPACK lowering), though a pattern can only match
a graph that holds each of its ops. :func:`only_where_they_can_match` gives the passes no
patterns while it lowers a program that lacks an op every one of them holds
(:data:`PATTERNS`); the passes then run as they do after matching nothing.

``tests/test_xnnpack_patterns.py`` builds ExecuTorch's patterns and checks that each holds
the ops :data:`PATTERNS` names for it, so a new ExecuTorch whose patterns change fails there.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from executorch.backends.xnnpack.partition.graphs import bilinear_2d, sdpa
from torch.fx import Graph

__all__ = ["PATTERNS", "Patterns", "edge_op_names", "only_where_they_can_match"]


@dataclass(frozen=True)
class Patterns:
    """One of ExecuTorch's pattern providers: ``module.function()`` returns the patterns
    (``empty()`` when none), and every pattern holds the edge ops ``needed``."""

    module: Any
    function: str
    empty: Callable[[], Any]
    needed: frozenset[str]


PATTERNS = (
    Patterns(bilinear_2d, "get_graphs_dict", dict, frozenset({"aten.upsample_bilinear2d.vec"})),
    Patterns(sdpa, "get_graphs", list, frozenset({"aten.bmm.default", "aten._softmax.default"})),
)

# The providers whose patterns cannot match the program lowered now (this thread's).
_unmatchable: ContextVar[frozenset[Patterns]] = ContextVar("unmatchable", default=frozenset())
_installed: set[Patterns] = set()
_install_lock = threading.Lock()  # two threads' first lowerings put one stand-in in front, not two


def edge_op_names(graph: Graph) -> frozenset[str]:
    """The names (``aten.bmm.default``) of the ops ``graph`` calls."""
    return frozenset(str(getattr(n.target, "__name__", n.target)) for n in graph.nodes if n.op == "call_function")


@contextlib.contextmanager
def only_where_they_can_match(graph: Graph) -> Iterator[None]:
    """While XNNPACK lowers partitions of ``graph``, its passes are given no patterns that
    need an op ``graph`` does not call (a partition holds a subset of its ops)."""
    ops = edge_op_names(graph)
    _install()
    token = _unmatchable.set(frozenset(p for p in PATTERNS if not p.needed <= ops))
    try:
        yield
    finally:
        _unmatchable.reset(token)


def _install() -> None:
    """Put a stand-in in front of each provider (once per process): ExecuTorch's own
    patterns, or none while :func:`only_where_they_can_match` says they cannot match."""
    with _install_lock:
        for provider in PATTERNS:
            if provider not in _installed:
                original = getattr(provider.module, provider.function)
                setattr(provider.module, provider.function, _stand_in(provider, original))
                _installed.add(provider)


def _stand_in(provider: Patterns, original: Callable[[], Any]) -> Callable[[], Any]:
    @functools.wraps(original)  # its __wrapped__ is ExecuTorch's provider
    def patterns() -> Any:
        return provider.empty() if provider in _unmatchable.get() else original()

    return patterns
