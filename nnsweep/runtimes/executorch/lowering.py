"""ExecuTorch's lowering in its two steps, with the first kept for the next conversion.

``to_edge_transform_and_lower`` makes the edge program, then runs each partitioner's
``to_backend``. The edge program does not depend on the partition limits, so :func:`lower`
keeps the last few of this process and a partition-limit variant only partitions again.

The bytes are those of ``to_edge_transform_and_lower``. When a limit drops a partition
holding an op kept whole (``aten.linear`` has no portable kernel), that variant is lowered
again with those ops decomposed
(:attr:`~nnsweep.runtimes.common.partition.LimitedPartitioner.decompose`); only if that does
not settle is every op decomposed, which is not always lowerable.
"""

from __future__ import annotations

import contextlib
import logging
from collections import OrderedDict
from collections.abc import Hashable, Iterator, Sequence
from typing import Any

from executorch.exir import EdgeCompileConfig, EdgeProgramManager, to_edge_transform_and_lower
from executorch.exir.operator.util import _QUANT_PRIMITIVES
from executorch.exir.passes.replace_aten_with_edge_pass import aten_to_edge
from executorch.exir.program._program import (  # to_edge_transform_and_lower's own steps
    _can_skip_using_EDGE_DO_NOT_DECOMP,
    _gen_edge_manager_for_partitioners,
    _remove_invalid_ops_for_not_decompose,
)
from torch.export import ExportedProgram

from nnsweep.runtimes.common.partition import EVERY_OP, Decompose, LimitedPartitioner, call_of
from nnsweep.runtimes.executorch.redecompose import decompose_only_what_is_left
from nnsweep.runtimes.executorch.retrace import retrace_only_when_changed
from nnsweep.runtimes.executorch.xnnpack_patterns import only_where_they_can_match

__all__ = ["EDGE_PROGRAMS_KEPT", "forget", "lower"]

log = logging.getLogger(__name__)

# Edge programs kept per process: each holds the model's weights once more (mobilenet_v3_small
# static int8: ~5 MB serialized), and a sweep proposes one model's configurations in turn.
EDGE_PROGRAMS_KEPT = 2

_CONFIG = EdgeCompileConfig(_check_ir_validity=False)
_METHOD = "forward"
_kept: OrderedDict[Hashable, EdgeProgramManager] = OrderedDict()
# Lowerings with the dropped partitions' ops decomposed by name before every op is: a
# partition dropped in one lowering may hold other ops kept whole in the next.
_NAMED_RETRIES = 3


def lower(program: ExportedProgram, partitioners: Sequence[LimitedPartitioner], key: Hashable | None) -> Any:
    """``to_edge_transform_and_lower(program, partitioners)``, reusing the edge program of an
    earlier call with the same ``key`` in this process.

    Args:
        program: the exported (quantized) program; not changed.
        partitioners: the delegates in preference order, each with its limits.
        key: names ``program`` and the backends (not their limits); ``None`` keeps nothing.
    """
    if not partitioners:
        return to_edge_transform_and_lower(program, partitioner=[], compile_config=_CONFIG)
    edge = _edge_program(program, [p.inner for p in partitioners], key)
    _start_again(partitioners, frozenset())  # the backends' ops kept whole, as in the edge program
    lowered = _to_backend(edge, partitioners)
    left = _kept_whole_left(lowered.exported_program(), partitioners)
    named: frozenset[Hashable] = frozenset()
    for _ in range(_NAMED_RETRIES):
        if not left or None in left:  # None: a call torch.export did not record
            break
        named |= left
        log.debug("dropped partitions hold ops kept whole (%s): decomposing them", sorted(map(str, left)))
        _start_again(partitioners, named)
        edge = _edge_manager(program, list(partitioners))
        lowered = _to_backend(edge, partitioners)
        left = _kept_whole_left(lowered.exported_program(), partitioners)
    if not left:
        return lowered
    log.debug("lowering again with every op decomposed")
    _start_again(partitioners, EVERY_OP)
    return to_edge_transform_and_lower(program, partitioner=list(partitioners), compile_config=_CONFIG)


def forget() -> None:
    """Let go of the edge programs this process keeps (a benchmark's cold round starts here)."""
    _kept.clear()


def _edge_program(program: ExportedProgram, inner: list[Any], key: Hashable | None) -> EdgeProgramManager:
    if key is not None and key in _kept:
        _kept.move_to_end(key)
        log.debug("edge program reused")
        return _kept[key]
    # The backends' own partitioners: the ops they keep whole, whatever the limits.
    edge = _edge_manager(program, inner)
    if key is not None:
        _kept[key] = edge  # to_backend returns a new manager and leaves this one as it was
        while len(_kept) > EDGE_PROGRAMS_KEPT:
            _kept.popitem(last=False)
    return edge


def _edge_manager(program: ExportedProgram, partitioners: list[Any]) -> EdgeProgramManager:
    with decompose_only_what_is_left():
        return _gen_edge_manager_for_partitioners({_METHOD: partitioners}, {_METHOD: program}, _CONFIG, None)


def _start_again(partitioners: Sequence[LimitedPartitioner], decompose: Decompose) -> None:
    for partitioner in partitioners:
        partitioner.decompose = decompose
        partitioner.dropped.clear()  # the report of the lowering that counts


def _to_backend(edge: EdgeProgramManager, partitioners: Sequence[LimitedPartitioner]) -> EdgeProgramManager:
    lowered = edge
    with _quiet_xnnpack(), only_where_they_can_match(edge.exported_program().graph), retrace_only_when_changed():
        for partitioner in partitioners:
            lowered = lowered.to_backend({_METHOD: partitioner})
    return lowered


def _kept_whole_left(program: ExportedProgram, partitioners: Sequence[LimitedPartitioner]) -> frozenset[Hashable]:
    """The calls (:func:`~nnsweep.runtimes.common.partition.call_of`) of ops some backend kept whole
    that are still outside every delegate: what ExecuTorch's own check after lowering
    refuses, since the portable kernels cannot run them."""
    quant_primitives = {aten_to_edge(op) for op in _QUANT_PRIMITIVES}
    left: set[Hashable] = set()
    for partitioner in partitioners:
        ops, check = partitioner.ops_to_not_decompose(program)
        if not _can_skip_using_EDGE_DO_NOT_DECOMP(partitioner, program):
            ops = _remove_invalid_ops_for_not_decompose(ops)
        whole = {aten_to_edge(op) for op in ops} | set(ops)
        left.update(
            call_of(node)
            for node in program.graph.nodes
            if node.op == "call_function"
            and node.target in whole
            and node.target not in quant_primitives
            and (check is None or check(node))
        )
    return frozenset(left)


@contextlib.contextmanager
def _quiet_xnnpack() -> Iterator[None]:
    """XNNPACK's partitioner logs a deprecation warning when ``to_backend`` is not called from
    ``to_edge_transform_and_lower`` (it inspects the stack); these are that function's steps."""
    logger = logging.getLogger("executorch.backends.xnnpack.partition.xnnpack_partitioner")

    def not_the_deprecation(record: logging.LogRecord) -> bool:
        return "DEPRECATION WARNING" not in record.getMessage()

    logger.addFilter(not_the_deprecation)
    try:
        yield
    finally:
        logger.removeFilter(not_the_deprecation)
