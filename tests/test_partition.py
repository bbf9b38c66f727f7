"""Partition limits on a real exported graph (ExecuTorch + XNNPACK partitioner)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from nnsweep.core.config import PartitionLimits  # noqa: E402


class _Split(nn.Module):
    """conv-relu blocks separated by GroupNorm, which XNNPACK does not take: 3 partitions."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 1), nn.ReLU())
        self.n1 = nn.GroupNorm(2, 8)
        self.b = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU())
        self.n2 = nn.GroupNorm(2, 8)
        self.c = nn.Sequential(nn.Conv2d(8, 8, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(self.n2(self.b(self.n1(self.a(x)))))


def _lower(limits: PartitionLimits):  # type: ignore[no-untyped-def]
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    from nnsweep.runtimes.common.partition import LimitedPartitioner, report_from_program

    torch.manual_seed(0)
    program = torch.export.export(_Split().eval(), (torch.randn(1, 3, 8, 8),))
    wrapper = LimitedPartitioner(XnnpackPartitioner(), limits)
    edge = to_edge_transform_and_lower(program, partitioner=[wrapper])
    report = report_from_program(edge.exported_program(), ("xnnpack", "portable"), {"XnnpackBackend": "xnnpack"})
    return report, wrapper


@pytest.fixture(scope="module")
def unlimited():  # type: ignore[no-untyped-def]
    return _lower(PartitionLimits())[0]


def test_unsupported_op_between_blocks_splits_the_graph(unlimited) -> None:  # type: ignore[no-untyped-def]
    assert unlimited.count == 3
    assert unlimited.sizes == sorted(unlimited.sizes, reverse=True)
    assert unlimited.fallback_ops == {"aten.native_group_norm": 2}
    assert unlimited.nodes_by_backend["portable"] == 2
    assert unlimited.nodes_by_backend["xnnpack"] == sum(unlimited.sizes)


def test_max_delegated_partitions_keeps_the_largest(unlimited) -> None:  # type: ignore[no-untyped-def]
    report, wrapper = _lower(PartitionLimits(max_delegated_partitions=1))
    assert report.count == 1
    assert report.sizes == [unlimited.sizes[0]]
    assert sorted(wrapper.dropped) == sorted(unlimited.sizes[1:])
    # what XNNPACK gave back now runs on the portable kernels
    assert report.nodes_by_backend["portable"] > unlimited.nodes_by_backend["portable"]
    assert "aten.convolution" in report.fallback_ops


def test_min_nodes_per_partition_drops_small_partitions(unlimited) -> None:  # type: ignore[no-untyped-def]
    threshold = unlimited.sizes[0]  # only partitions at least as big as the largest survive
    report, _ = _lower(PartitionLimits(min_nodes_per_partition=threshold))
    assert report.sizes == [s for s in unlimited.sizes if s >= threshold]
    assert report.placement_key() != unlimited.placement_key()


def test_min_nodes_above_every_partition_delegates_nothing(unlimited) -> None:  # type: ignore[no-untyped-def]
    report, _ = _lower(PartitionLimits(min_nodes_per_partition=unlimited.sizes[0] + 1))
    assert report.count == 0
    assert set(report.nodes_by_backend) == {"portable"}


def test_dropping_a_partition_that_holds_a_kept_whole_op_still_lowers(digits_gn, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """XNNPACK keeps aten.linear whole; a limit that drops the classifier's partition must
    leave a graph the portable kernels can run (found by a sweep: max 2, min 5 nodes)."""
    from nnsweep.artifacts import deploy
    from nnsweep.artifacts.cache import ArtifactCache
    from nnsweep.core.config import DeploymentConfig

    cache = ArtifactCache(tmp_path / "cache")
    config = DeploymentConfig("executorch", ("xnnpack",), partitions=PartitionLimits(2, 5))
    artifact, _ = deploy.convert(digits_gn, config, cache)
    assert artifact.partitions.count <= 2
    assert any(op.startswith("aten.") for op in artifact.partitions.fallback_ops)
