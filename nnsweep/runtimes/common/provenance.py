"""torch.fx's provenance records shared, not copied again, while nnsweep converts.

Each node a pass makes carries ``meta["from_node"]``: a list of ``NodeSource`` records, each
holding the records of the node it came from. ``NodeSource.__init__`` deep-copies that list
whenever a pass remakes a node, so every pass copies the whole history again and the work
grows with the square of the number of passes. ExecuTorch's lowering replays a graph through
some twenty passes (run_decompositions, the edge passes, XNNPACK's seventeen), and every
exporter built on ``torch.export`` replays it at least through its decompositions.

The records are not changed after they are made: torch caches each one's ``to_dict()`` on
first use and compares and hashes them by it, and nothing in torch, ExecuTorch, torchao or
litert-torch writes to a record (they append to a node's own list, which is still copied).
While :func:`shared_node_provenance` is in force a record's deep copy is the record itself,
as Python's own immutable values are: a list of them is still a new list, its records are
shared. The provenance is the same records with the same contents, and the artifacts
compared were the same bytes: a small model's in ``tests/test_provenance.py``,
mobilenet_v3_small's on ExecuTorch (three modes), LiteRT and ONNX Runtime
(docs/conversion.md). The same change, made inside ``NodeSource.__init__``, was
proposed to PyTorch (pytorch/pytorch#193051); PyTorch 2.14 still deep-copies. Where
``NodeSource`` defines its own ``__deepcopy__`` it is left as it is.
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
