"""ExecuTorch's lowering in two steps (nnsweep.convert.lowering): a partition-limit variant
starts from the edge program an earlier conversion in the process made, and its bytes are
those ExecuTorch's one call gives."""

from __future__ import annotations

import logging

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

from nnsweep.convert import lowering
from nnsweep.convert.executorch import _program
from nnsweep.convert.partition import LimitedPartitioner
from nnsweep.core.config import PartitionLimits, QuantConfig
from nnsweep.models import ModelBundle

DEFAULT = PartitionLimits()
ONE_PARTITION = PartitionLimits(max_delegated_partitions=1)  # digits_gn: drops 2-node partitions, not the linear's
TEN_NODES = PartitionLimits(min_nodes_per_partition=10)  # digits_gn: drops every partition, the linear's too


class _KeepsWhole(LimitedPartitioner):
    """The limits, with the backend's ops kept whole: what the reused edge program holds."""

    def ops_to_not_decompose(self, ep: torch.export.ExportedProgram) -> tuple[list[object], object]:
        return self.inner.ops_to_not_decompose(ep)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def program(digits_gn: ModelBundle) -> torch.export.ExportedProgram:
    return _program(digits_gn, QuantConfig())


def _in_one_call(program: torch.export.ExportedProgram, partitioner: LimitedPartitioner) -> bytes:
    edge = to_edge_transform_and_lower(
        program, partitioner=[partitioner], compile_config=EdgeCompileConfig(_check_ir_validity=False)
    )
    return bytes(edge.to_executorch().buffer)


def _lowered(program: torch.export.ExportedProgram, limits: PartitionLimits, key: object) -> bytes:
    return bytes(
        lowering.lower(program, [LimitedPartitioner(XnnpackPartitioner(), limits)], key).to_executorch().buffer
    )


def _dropped_in_one_call(program: torch.export.ExportedProgram, limits: PartitionLimits) -> list[int]:
    partitioner = LimitedPartitioner(XnnpackPartitioner(), limits)
    to_edge_transform_and_lower(
        program, partitioner=[partitioner], compile_config=EdgeCompileConfig(_check_ir_validity=False)
    )
    return partitioner.dropped


@pytest.mark.slow
def test_the_default_limits_give_the_bytes_of_one_call(program: torch.export.ExportedProgram) -> None:
    assert _lowered(program, DEFAULT, object()) == _in_one_call(
        program, LimitedPartitioner(XnnpackPartitioner(), DEFAULT)
    )


def test_a_variant_reuses_the_edge_program_and_lowers_as_one_call_would(
    program: torch.export.ExportedProgram, caplog: pytest.LogCaptureFixture
) -> None:
    key = object()
    first = _lowered(program, DEFAULT, key)
    with caplog.at_level(logging.DEBUG, logger=lowering.__name__):
        variant = _lowered(program, ONE_PARTITION, key)
    assert "edge program reused" in caplog.text and "lowering again" not in caplog.text
    assert variant == _in_one_call(program, _KeepsWhole(XnnpackPartitioner(), ONE_PARTITION))
    assert variant != first  # the limit took effect


def test_a_variant_dropping_an_op_kept_whole_is_lowered_with_every_op_decomposed(
    program: torch.export.ExportedProgram, caplog: pytest.LogCaptureFixture
) -> None:
    key = object()
    _lowered(program, DEFAULT, key)
    partitioner = LimitedPartitioner(XnnpackPartitioner(), TEN_NODES)
    with caplog.at_level(logging.DEBUG, logger=lowering.__name__):
        edge = lowering.lower(program, [partitioner], key)
    assert "lowering again with every op decomposed" in caplog.text
    targets = [str(n.target) for n in edge.exported_program().graph.nodes if n.op == "call_function"]
    assert not any("linear" in t for t in targets) and any("addmm" in t for t in targets)  # what portable runs
    assert bytes(edge.to_executorch().buffer) == _in_one_call(
        program, LimitedPartitioner(XnnpackPartitioner(), TEN_NODES)
    )
    # the report counts the lowering that was kept, not the one given up
    assert sorted(partitioner.dropped) == sorted(_dropped_in_one_call(program, TEN_NODES))


@pytest.mark.slow
def test_only_the_last_few_edge_programs_are_kept(
    program: torch.export.ExportedProgram, caplog: pytest.LogCaptureFixture
) -> None:
    keys = [object() for _ in range(lowering.EDGE_PROGRAMS_KEPT + 1)]
    for key in keys:
        _lowered(program, DEFAULT, key)
    with caplog.at_level(logging.DEBUG, logger=lowering.__name__):
        _lowered(program, DEFAULT, keys[-1])
        assert "edge program reused" in caplog.text
        caplog.clear()
        _lowered(program, DEFAULT, keys[0])  # the oldest was let go
        assert "edge program reused" not in caplog.text
