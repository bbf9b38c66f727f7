"""ExecuTorch's lowering in its two steps, with the first kept for the next conversion.

``to_edge_transform_and_lower`` makes the edge program (two ``run_decompositions``, which
keep whole the ops the partitioners claim, such as XNNPACK's ``aten.linear``), then runs
each partitioner's ``to_backend`` and checks that no op kept whole was left undelegated.
The edge program depends on the program and on which ops the backends keep whole, not on
the partition limits: on mobilenet_v3_small it is about half of a lowering
(docs/conversion.md). :func:`lower` keeps the last few edge programs of this process, so
a partition-limit variant converted by the same process (a sweep's conversion worker)
only partitions and lowers again.

The bytes are those of ``to_edge_transform_and_lower`` with the backends' own ops kept
whole. When a limit drops a partition holding such an op (``aten.linear`` has no portable
kernel), that check fails; the variant is then lowered from an edge program in which
every op is decomposed (what :class:`~nnsweep.convert.partition.LimitedPartitioner`
asks for when limits are in force), so the portable kernels can run what was dropped.
"""

from __future__ import annotations

import contextlib
import logging
from collections import OrderedDict
from collections.abc import Hashable, Iterator, Sequence
from typing import Any

from executorch.exir import EdgeCompileConfig, EdgeProgramManager, to_edge_transform_and_lower
from executorch.exir.program._program import (  # to_edge_transform_and_lower's own steps
    _can_skip_using_EDGE_DO_NOT_DECOMP,
    _gen_edge_manager_for_partitioners,
    _remove_invalid_ops_for_not_decompose,
    _sanity_check_graph_for_non_decomp_ops,
)
from torch.export import ExportedProgram

from nnsweep.convert.partition import LimitedPartitioner

__all__ = ["EDGE_PROGRAMS_KEPT", "forget", "lower"]

log = logging.getLogger(__name__)

# Edge programs kept per process: each holds the model's weights once more (mobilenet_v3_small
# static int8: ~5 MB serialized), and a sweep proposes one model's configurations in turn.
EDGE_PROGRAMS_KEPT = 2

_CONFIG = EdgeCompileConfig(_check_ir_validity=False)
_METHOD = "forward"
_kept: OrderedDict[Hashable, EdgeProgramManager] = OrderedDict()


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
    lowered = edge
    with _quiet_xnnpack():
        for partitioner in partitioners:
            lowered = lowered.to_backend({_METHOD: partitioner})
    if _claimed_ops_left(lowered.exported_program(), partitioners):
        log.debug("a dropped partition holds an op kept whole: lowering again with every op decomposed")
        for partitioner in partitioners:
            partitioner.dropped.clear()  # the report of the lowering that counts
        return to_edge_transform_and_lower(program, partitioner=list(partitioners), compile_config=_CONFIG)
    return lowered


def forget() -> None:
    """Let go of the edge programs this process keeps (a benchmark's cold round starts here)."""
    _kept.clear()


def _edge_program(program: ExportedProgram, inner: list[Any], key: Hashable | None) -> EdgeProgramManager:
    if key is not None and key in _kept:
        _kept.move_to_end(key)
        log.debug("edge program reused")
        return _kept[key]
    # The backends' own partitioners: the ops they keep whole, whatever the limits.
    edge = _gen_edge_manager_for_partitioners({_METHOD: inner}, {_METHOD: program}, _CONFIG, None)
    if key is not None:
        _kept[key] = edge  # to_backend returns a new manager and leaves this one as it was
        while len(_kept) > EDGE_PROGRAMS_KEPT:
            _kept.popitem(last=False)
    return edge


def _claimed_ops_left(program: ExportedProgram, partitioners: Sequence[LimitedPartitioner]) -> bool:
    """Whether an op some backend kept whole is still outside every delegate (ExecuTorch's own check)."""
    for partitioner in partitioners:
        ops, check = partitioner.inner.ops_to_not_decompose(program)
        if not _can_skip_using_EDGE_DO_NOT_DECOMP(partitioner.inner, program):
            ops = _remove_invalid_ops_for_not_decompose(ops)
        try:
            _sanity_check_graph_for_non_decomp_ops(_METHOD, program, set(ops), check, generate_error=True)
        except RuntimeError:
            return True
    return False


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
