"""torch.fx's provenance records are shared, not deep-copied, while nnsweep converts
(nnsweep.runtimes.common.provenance): the same records, the same artifact."""

from __future__ import annotations

import copy
import threading
from typing import Any

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower
from torch import nn
from torch.fx.traceback import NodeSource, NodeSourceAction

from nnsweep.runtimes.common.provenance import shared_node_provenance


def _records() -> list[NodeSource]:
    graph = torch.fx.Graph()
    node = graph.placeholder("x")
    first = NodeSource(node, "first", NodeSourceAction.CREATE)
    node.meta["from_node"] = [first]
    return [NodeSource(node, "second", NodeSourceAction.CREATE)]


def test_within_the_block_a_deep_copy_shares_the_records_and_after_it_copies_them() -> None:
    records = _records()
    with shared_node_provenance():
        shared = copy.deepcopy(records)
    copied = copy.deepcopy(records)
    assert shared is not records and shared[0] is records[0]
    assert copied[0] is not records[0] and copied[0].from_node[0] is not records[0].from_node[0]
    assert copied[0].to_dict() == shared[0].to_dict() == records[0].to_dict()


def test_a_record_made_within_the_block_holds_the_same_history() -> None:
    graph = torch.fx.Graph()
    node = graph.placeholder("x")
    node.meta["from_node"] = _records()
    made_before = NodeSource(node, "third", NodeSourceAction.REPLACE)
    with shared_node_provenance():
        made_within = NodeSource(node, "third", NodeSourceAction.REPLACE)
    assert made_within.to_dict() == made_before.to_dict()
    assert made_within.from_node is not node.meta["from_node"]  # the node's own list is still copied
    node.meta["from_node"].append(NodeSource(None, "later", NodeSourceAction.CREATE))
    assert len(made_within.from_node) == 1


def test_nested_and_concurrent_blocks_keep_sharing_until_the_last_ends() -> None:
    records = _records()
    entered, release = threading.Event(), threading.Event()

    def other() -> None:
        with shared_node_provenance():
            entered.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    thread.start()
    entered.wait(10)
    with shared_node_provenance():
        with shared_node_provenance():
            pass
        assert copy.deepcopy(records)[0] is records[0]
    assert copy.deepcopy(records)[0] is records[0]  # the other thread's block is still in force
    release.set()
    thread.join(10)
    assert copy.deepcopy(records)[0] is not records[0]
    assert "__deepcopy__" not in vars(NodeSource)


def test_a_deepcopy_of_torch_s_own_is_left_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    def its_own(record: NodeSource, memo: dict[int, Any]) -> str:
        return "torch's own"

    monkeypatch.setattr(NodeSource, "__deepcopy__", its_own, raising=False)
    with shared_node_provenance():
        assert copy.deepcopy(_records()[0]) == "torch's own"
    assert vars(NodeSource)["__deepcopy__"] is its_own


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.norm = nn.BatchNorm2d(8)
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = nn.functional.hardswish(self.norm(self.conv(x)))
        return self.head(y.mean(dim=(2, 3))).softmax(-1)


def _lowered() -> tuple[bytes, list[list[dict[str, Any]]]]:
    torch.manual_seed(0)
    program = torch.export.export(_Block().eval(), (torch.randn(1, 3, 12, 12),))
    edge = to_edge_transform_and_lower(
        program, partitioner=[XnnpackPartitioner()], compile_config=EdgeCompileConfig(_check_ir_validity=False)
    )
    graph = edge.exported_program().graph
    graphs: dict[int, int] = {}  # a graph's id(), as the order it first appears in: ids differ per run
    provenance = [
        [_numbered(record.to_dict(), graphs) for record in node.meta.get("from_node", [])] for node in graph.nodes
    ]
    return bytes(edge.to_executorch().buffer), provenance


def _numbered(record: dict[str, Any], graphs: dict[int, int]) -> dict[str, Any]:
    return {
        **record,
        "graph_id": graphs.setdefault(record["graph_id"], len(graphs)),
        "from_node": [_numbered(earlier, graphs) for earlier in record["from_node"]],
    }


def test_a_lowering_within_the_block_gives_the_same_bytes_and_provenance() -> None:
    pte, provenance = _lowered()
    with shared_node_provenance():
        shared = _lowered()
    assert shared == (pte, provenance)
    assert any(provenance)  # the comparison covers records, not only empty lists
