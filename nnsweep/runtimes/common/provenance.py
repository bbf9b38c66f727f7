"""torch.fx's provenance records shared, not copied again, while nnsweep converts.

Each node a pass makes carries ``meta["from_node"]``, a list of ``NodeSource`` records
that ``NodeSource.__init__`` deep-copies, so the work grows with the square of the number
of passes an exporter or lowering replays a graph through.

The records are never changed after they are made (torch caches and compares them by
``to_dict()``; nothing writes to one). While :func:`shared_node_provenance` is in force a
record's deep copy is the record itself; lists are still new. The artifacts are the same
bytes (``tests/test_provenance.py``). A ``NodeSource`` with its own ``__deepcopy__`` is left
as it is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from nnsweep.runtimes.common.stand_in import StandIn

__all__ = ["shared_node_provenance"]


def _node_source() -> type:
    from torch.fx.traceback import NodeSource

    return NodeSource


def _itself(record: Any, memo: dict[int, Any]) -> Any:
    return record


_STAND_IN = StandIn(_node_source, "__deepcopy__", _itself, adds=True)


@contextlib.contextmanager
def shared_node_provenance() -> Iterator[None]:
    """Within the block, ``copy.deepcopy`` of a ``torch.fx.traceback.NodeSource`` returns it."""
    with _STAND_IN.block():
        yield
