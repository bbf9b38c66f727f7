"""torch's composite operators put into ``torch.ops`` once per set of registrations.

Each ``run_decompositions`` (and each ``CustomDecompTable`` made for one) asks torch for
the composite-implicit operators it may keep (``_collect_all_valid_cia_ops``), and torch
answers per operator namespace: for each of the 41 namespaces of a conversion worker
(ExecuTorch, torchao and litert-torch loaded) it first looks up every composite operator
the C++ dispatcher has, 836 of them, so that each exists in ``torch.ops``
(``_materialize_cpp_cia_ops``). A lookup makes an attribute the first time and finds it
after, so all but the first round find what is there: 64 ms a call, about 2.7 s of
mobilenet_v3_small's six ExecuTorch and LiteRT conversions (docs/conversion.md).

Within :func:`cia_ops_looked_up_once`, the lookups are skipped when the dispatcher lists the
same registrations as when they last ran; an operator registered since (a library loaded,
a custom op defined) makes them run again. Outside a block, and when torch has no
``_materialize_cpp_cia_ops``, torch's own code runs.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["cia_ops_looked_up_once"]

_KEY = "CompositeImplicitAutograd"
_lock = threading.Lock()
_users = 0  # blocks in force, in any thread
_installed = False  # whether torch's function is this module's now
_torch_own: Any = None  # torch's _materialize_cpp_cia_ops, once seen (kept: a call may outlast a block)
_looked_up: frozenset[str] = frozenset()  # the registrations of the last lookups


@contextlib.contextmanager
def cia_ops_looked_up_once() -> Iterator[None]:
    """Within the block, torch looks up its composite operators again only when new ones exist."""
    from torch._export import utils

    global _users, _installed, _torch_own
    with _lock:
        if _users == 0 and hasattr(utils, "_materialize_cpp_cia_ops"):
            _torch_own = utils._materialize_cpp_cia_ops
            utils._materialize_cpp_cia_ops = _materialize_when_new
            _installed = True
        _users += 1
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            if _users == 0 and _installed:
                utils._materialize_cpp_cia_ops = _torch_own
                _installed = False


def _materialize_when_new() -> None:
    """torch's ``_materialize_cpp_cia_ops``, skipped when no operator was registered since."""
    import torch

    global _looked_up
    registered = frozenset(torch._C._dispatch_get_registrations_for_dispatch_key(_KEY))
    if registered == _looked_up:
        return
    _torch_own()
    _looked_up = registered
