"""torch.fx's generated code compiled once per source while nnsweep converts.

Each time a pass changes a graph module, ``GraphModule.recompile`` writes the module's
Python source and hands it to ``compile`` (``torch.fx.graph_module._exec_with_source``).
Most passes hand it a source it compiled before: a pass that changed nothing, a re-trace
that made the same graph, a copy of a module (counts and timings:
benchmarks/results/conversion.md).

Within :func:`generated_code_compiled_once`, a source compiled before in this process
reuses that compilation: the code object is given the new call's file name (``compile``
makes the same code object for the same source, flags and file name, so the result is what
``compile`` returns, names included) and is executed with the module's own globals, as
before; torch's loader still keeps each name's source, so a traceback shows the line.
Outside a block, and when torch has no ``_exec_with_source``, torch's own code runs.
"""

from __future__ import annotations

import contextlib
import threading
import types
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

from nnsweep.runtimes.common.stand_in import StandIn

__all__ = ["compiled", "generated_code_compiled_once"]

# The sources kept, in characters: mobilenet_v3_small's whole program is 37-50 K characters
# of source (exported, decomposed), a model a hundred times its size some megabytes; 32 M
# keeps hundreds of small sources. The least recently used go first.
_KEPT_CHARS = 32 * 2**20
_lock = threading.Lock()
_codes: OrderedDict[str, types.CodeType] = OrderedDict()
_kept_chars = 0


def _exec_with_source(src: str, globals: dict[str, Any], co_fields: dict[str, Any] | None = None) -> None:
    """torch's ``_exec_with_source``, with the compilation of a known source reused."""
    from torch.fx.graph_module import _loader

    filename = _loader.cache(src, globals, co_fields)  # what torch names it (co_fields: where it was traced)
    exec(compiled(src, filename), globals)


def _graph_module() -> Any:
    from torch.fx import graph_module

    return graph_module


_STAND_IN = StandIn(_graph_module, "_exec_with_source", _exec_with_source)


@contextlib.contextmanager
def generated_code_compiled_once() -> Iterator[None]:
    """Within the block, torch.fx compiles each distinct generated source once per process."""
    with _STAND_IN.block():
        yield


def compiled(src: str, filename: str) -> types.CodeType:
    """``compile(src, filename, "exec", dont_inherit=True)``, the compilation of ``src`` made once."""
    with _lock:
        code = _codes.get(src)
        if code is not None:
            _codes.move_to_end(src)
    if code is not None:
        return _named(code, filename)
    code = compile(src, filename, "exec", dont_inherit=True)
    global _kept_chars
    with _lock:
        if src not in _codes:
            _codes[src] = code
            _kept_chars += len(src)
        while _kept_chars > _KEPT_CHARS and len(_codes) > 1:
            _kept_chars -= len(_codes.popitem(last=False)[0])
    return code


def _named(code: types.CodeType, filename: str) -> types.CodeType:
    """``code`` and the code objects it holds, with ``filename`` as their file name."""
    consts = tuple(_named(c, filename) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)
