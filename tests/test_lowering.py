"""ExecuTorch's lowering in two steps (nnsweep.runtimes.executorch.lowering): a partition-limit variant
starts from the edge program an earlier conversion in the process made, and its bytes are
those ExecuTorch's one call gives."""

from __future__ import annotations

import logging

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

from nnsweep.core.config import PartitionLimits, QuantConfig
from nnsweep.models import ModelBundle
from nnsweep.runtimes.common.partition import EVERY_OP, LimitedPartitioner
from nnsweep.runtimes.executorch import lowering
from nnsweep.runtimes.executorch.converter import _program

DEFAULT = PartitionLimits()
ONE_PARTITION = PartitionLimits(max_delegated_partitions=1)  # digits_gn: drops 2-node partitions, not the linear's
TEN_NODES = PartitionLimits(min_nodes_per_partition=10)  # digits_gn: drops every partition, the linear's too


def _keeping_whole(limits: PartitionLimits) -> LimitedPartitioner:
    """The limits, with the backend's ops kept whole: what the reused edge program holds."""
    partitioner = LimitedPartitioner(XnnpackPartitioner(), limits)
    partitioner.decompose = frozenset()
    return partitioner


@pytest.fixture(scope="module")
def program(digits_gn: ModelBundle) -> torch.export.ExportedProgram:
    return _program(digits_gn, QuantConfig(), None)


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
    assert variant == _in_one_call(program, _keeping_whole(ONE_PARTITION))
    assert variant != first  # the limit took effect


def test_a_variant_dropping_an_op_kept_whole_decomposes_that_op_and_lowers_as_one_call_would(
    program: torch.export.ExportedProgram, caplog: pytest.LogCaptureFixture
) -> None:
    key = object()
    _lowered(program, DEFAULT, key)
    partitioner = LimitedPartitioner(XnnpackPartitioner(), TEN_NODES)
    with caplog.at_level(logging.DEBUG, logger=lowering.__name__):
        edge = lowering.lower(program, [partitioner], key)
    assert "decomposing them" in caplog.text and "every op" not in caplog.text
    assert partitioner.decompose and partitioner.decompose != EVERY_OP  # the linear's call, by name
    targets = [str(n.target) for n in edge.exported_program().graph.nodes if n.op == "call_function"]
    assert not any("linear" in t for t in targets) and any("addmm" in t for t in targets)  # what portable runs
    one_call = LimitedPartitioner(XnnpackPartitioner(), TEN_NODES)
    one_call.decompose = partitioner.decompose
    assert bytes(edge.to_executorch().buffer) == _in_one_call(program, one_call)
    # the report counts the lowering that was kept, not the one given up
    assert sorted(partitioner.dropped) == sorted(_dropped_in_one_call(program, TEN_NODES))


def test_an_op_kept_whole_that_cannot_be_named_decomposes_every_op(
    program: torch.export.ExportedProgram, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lowering, "call_of", lambda node: None)  # as if torch.export had not recorded the call
    partitioner = LimitedPartitioner(XnnpackPartitioner(), TEN_NODES)
    with caplog.at_level(logging.DEBUG, logger=lowering.__name__):
        edge = lowering.lower(program, [partitioner], None)
    assert "lowering again with every op decomposed" in caplog.text and partitioner.decompose == EVERY_OP
    assert bytes(edge.to_executorch().buffer) == _in_one_call(
        program, LimitedPartitioner(XnnpackPartitioner(), TEN_NODES)
    )


class _Tokens(torch.nn.Module):
    """A convolution's feature map read as tokens (B, L, C) by a linear layer, as MobileViT
    and ViT stems do, then a cumulative sum XNNPACK does not take and a 2-D linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.mix = torch.nn.Linear(8, 8)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = torch.relu(self.conv(x)).flatten(2).transpose(1, 2)
        return self.head(self.mix(tokens).cumsum(1)[:, -1])  # type: ignore[no-any-return]


def test_a_dropped_head_is_decomposed_while_a_kept_3d_linear_stays_whole() -> None:
    # Decomposing every op turns the 3-D linear into bmm, which XNNPACK's ConvertToLinearPass
    # refuses ("t() expects a tensor with <= 2 dimensions"): the variant failed to convert.
    from executorch.runtime import Runtime

    torch.manual_seed(0)
    model, example = _Tokens().eval(), torch.randn(1, 3, 6, 6)
    partitioner = LimitedPartitioner(XnnpackPartitioner(), ONE_PARTITION)
    edge = lowering.lower(torch.export.export(model, (example,)), [partitioner], None)
    assert partitioner.dropped == [2]  # the head's linear and its weight's permute
    outside = [str(n.target) for n in edge.exported_program().graph.nodes if n.op == "call_function"]
    assert any("addmm" in t for t in outside) and not any("linear" in t for t in outside)
    # ExecuTorch's Method does not keep its Program (and the bytes it runs in) alive: hold both.
    program = Runtime.get().load_program(bytes(edge.to_executorch().buffer))
    method = program.load_method("forward")
    torch.testing.assert_close(method.execute([example])[0], model(example), rtol=1e-4, atol=1e-5)


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
