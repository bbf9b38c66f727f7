"""ExecuTorch delegate partitioning with TFLite-style limits, and the partition report.

:class:`LimitedPartitioner` wraps a backend's partitioner and filters its result:
partitions smaller than ``min_nodes_per_partition`` are untagged, then only the
``max_delegated_partitions`` largest are kept (0 = no limit). Untagged nodes are
offered to the next partitioner in the preference order, and what no delegate
takes runs on ExecuTorch's portable CPU kernels.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from typing import Any, Final, Literal

from executorch.exir.backend.partitioner import Partitioner, PartitionResult
from torch.export import ExportedProgram
from torch.fx import Node

from nnsweep.core.artifact import PartitionReport, Placement
from nnsweep.core.config import PartitionLimits

__all__ = ["EVERY_OP", "Decompose", "LimitedPartitioner", "call_of", "report_from_program"]

_TAG = "delegation_tag"


def call_of(node: Node) -> Hashable:
    """The call in the user's traced forward that ``node`` comes from (``torch.export``
    records it as ``torch_fn``, e.g. ``("linear_2", "builtin_function_or_method.linear")``;
    it survives decomposition and lowering). ``None`` when not recorded."""
    return node.meta.get("torch_fn")


# LimitedPartitioner.decompose: every op the backend keeps whole is decomposed.
EVERY_OP: Final = "every op"
# Which ops a backend keeps whole are decomposed anyway: those of these calls, or EVERY_OP.
Decompose = frozenset[Hashable] | Literal["every op"]


class LimitedPartitioner(Partitioner):
    """Apply :class:`~nnsweep.core.config.PartitionLimits` to another partitioner's choice.

    Args:
        inner: the backend's own partitioner.
        limits: the limits to apply.

    Attributes:
        dropped: sizes of the partitions this wrapper gave back, per call.
        decompose: with limits in force, which of the ops the backend keeps whole (such
            as XNNPACK's ``aten.linear``) are decomposed before partitioning:
            :data:`EVERY_OP` (the default, as one ``to_edge_transform_and_lower`` call
            needs, since a dropped partition may hold one) or the ops of the calls named
            (:func:`call_of`; none at all for :mod:`nnsweep.runtimes.executorch.lowering`'s first lowering).
    """

    def __init__(self, inner: Partitioner, limits: PartitionLimits) -> None:
        # Some partitioners (the Arm backend's) never call Partitioner.__init__, so have no spec.
        super().__init__(getattr(inner, "_spec", {}))
        self.inner = inner
        self.limits = limits
        self.dropped: list[int] = []
        self.decompose: Decompose = EVERY_OP

    def ops_to_not_decompose(self, ep: ExportedProgram) -> Any:
        # A backend may keep ops such as aten.linear whole because it will take them;
        # if a limit then drops that partition, nothing could run the op (the portable
        # kernels need it decomposed). Decomposition happens before partitioning, so
        # nnsweep.runtimes.executorch.lowering first lowers with the backend's ops kept whole, then
        # names the ops a dropped partition held (``decompose``), then, if naming them
        # was not enough, decomposes every op (the backend takes the pieces).
        ops, check = self.inner.ops_to_not_decompose(ep)
        if self.limits.is_default or not self.decompose:
            return ops, check
        if self.decompose == EVERY_OP:
            return ([], None)
        calls = self.decompose

        def kept_whole(node: Node) -> bool:
            return (check is None or check(node)) and call_of(node) not in calls

        return ops, kept_whole

    def transform_for_pre_decomposition(self, exported_program: ExportedProgram) -> ExportedProgram:
        return self.inner.transform_for_pre_decomposition(exported_program)

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        result = self.inner.partition(exported_program)
        if self.limits.is_default:
            return result
        graph = result.tagged_exported_program.graph_module.graph
        sizes = Counter(
            node.meta[_TAG]
            for node in graph.nodes
            if node.op == "call_function" and node.meta.get(_TAG) in result.partition_tags
        )
        ranked = sorted(sizes, key=lambda tag: (-sizes[tag], tag))
        keep = [tag for tag in ranked if sizes[tag] >= self.limits.min_nodes_per_partition]
        if self.limits.max_delegated_partitions:
            keep = keep[: self.limits.max_delegated_partitions]
        drop = set(result.partition_tags) - set(keep)
        self.dropped.extend(sizes[tag] for tag in drop)
        for node in graph.nodes:
            if node.meta.get(_TAG) in drop:
                del node.meta[_TAG]
        return PartitionResult(
            tagged_exported_program=result.tagged_exported_program,
            partition_tags={tag: spec for tag, spec in result.partition_tags.items() if tag not in drop},
        )


def _op_name(target: Any) -> str:
    name = getattr(target, "__name__", None) or str(target)
    # Edge ops print as "aten.convolution.default"; keep the operator, drop the overload.
    parts = name.split(".")
    return ".".join(parts[:2]) if len(parts) >= 3 else name


_BOOKKEEPING = ("getitem", "executorch_call_delegate", "alloc", "sym_size")


def report_from_program(program: ExportedProgram, backends: tuple[str, ...], names: dict[str, str]) -> PartitionReport:
    """Describe where the ops of a lowered program run.

    Args:
        program: the edge program after ``to_edge_transform_and_lower``.
        backends: the preference order used.
        names: ExecuTorch backend id -> nnsweep backend name (``XnnpackBackend`` -> ``xnnpack``).
    """
    module = program.graph_module
    placements: list[Placement] = []
    nodes_by_backend: Counter[str] = Counter()
    fallback: Counter[str] = Counter()
    for node in module.graph.nodes:
        if node.op != "call_function":
            continue
        target = getattr(node.target, "__name__", str(node.target))
        if "executorch_call_delegate" in target:
            lowered = getattr(module, node.args[0].target)
            backend = names.get(lowered.backend_id, lowered.backend_id)
            inner = lowered.original_module.graph_module.graph
            count = sum(1 for n in inner.nodes if n.op == "call_function" and "getitem" not in str(n.target))
            placements.append(Placement(backend, count))
            nodes_by_backend[backend] += count
        elif not any(word in target for word in _BOOKKEEPING):
            fallback[_op_name(node.target)] += 1
    if fallback:
        nodes_by_backend["portable"] += sum(fallback.values())
    placements.sort(key=lambda p: -p.nodes)
    return PartitionReport(
        backends=backends,
        nodes_by_backend=dict(nodes_by_backend),
        partitions=tuple(placements),
        fallback_ops=dict(fallback),
    )
