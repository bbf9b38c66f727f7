"""torch's composite operators put into ``torch.ops`` once per set of registrations.

Each ``run_decompositions`` (and each ``CustomDecompTable`` made for one) asks torch for
the composite-implicit operators it may keep (``_collect_all_valid_cia_ops``), and torch
answers per operator namespace: for each namespace it first looks up every composite
operator the C++ dispatcher has, so that each exists in ``torch.ops``
(``_materialize_cpp_cia_ops``). A lookup makes an attribute the first time and finds it
after, so all but the first round find what is there (timings:
benchmarks/results/conversion.md).

Within :func:`cia_ops_looked_up_once`, the lookups are skipped when the dispatcher lists the
same registrations as when they last ran; an operator registered since (a library loaded,
a custom op defined) makes them run again. Outside a block, and when torch has no
``_materialize_cpp_cia_ops``, torch's own code runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from nnsweep.runtimes.common.stand_in import StandIn

__all__ = ["cia_ops_looked_up_once"]

_KEY = "CompositeImplicitAutograd"
_looked_up: frozenset[str] = frozenset()  # the registrations of the last lookups


def _materialize_when_new() -> None:
    """torch's ``_materialize_cpp_cia_ops``, skipped when no operator was registered since."""
    import torch

    global _looked_up
    registered = frozenset(torch._C._dispatch_get_registrations_for_dispatch_key(_KEY))
    if registered == _looked_up:
        return
    _STAND_IN.original()
    _looked_up = registered


def _export_utils() -> Any:
    from torch._export import utils

    return utils


_STAND_IN = StandIn(_export_utils, "_materialize_cpp_cia_ops", _materialize_when_new)


@contextlib.contextmanager
def cia_ops_looked_up_once() -> Iterator[None]:
    """Within the block, torch looks up its composite operators again only when new ones exist."""
    with _STAND_IN.block():
        yield
