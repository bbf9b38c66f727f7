"""torch's composite operators are looked up once per set of registrations while nnsweep
converts (nnsweep.runtimes.common.cia_ops): the same operators, the same decompositions."""

from __future__ import annotations

import uuid

import pytest
import torch
from torch import nn
from torch._export import utils

from nnsweep.runtimes.common import cia_ops
from nnsweep.runtimes.common.cia_ops import cia_ops_looked_up_once


@pytest.fixture
def lookups(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the rounds of torch's own lookups (installed before a block takes it over)."""
    counted: list[int] = []
    own = utils._materialize_cpp_cia_ops

    def counting() -> None:
        counted.append(1)
        own()

    monkeypatch.setattr(utils, "_materialize_cpp_cia_ops", counting)
    monkeypatch.setattr(cia_ops, "_looked_up", frozenset())
    return counted


def test_within_the_block_the_lookups_run_again_only_for_a_new_operator(lookups: list[int]) -> None:
    with cia_ops_looked_up_once():
        utils._materialize_cpp_cia_ops()
        utils._materialize_cpp_cia_ops()
        assert len(lookups) == 1
        namespace = f"nnsweep_cia_{uuid.uuid4().hex[:8]}"  # new in this process
        library = torch.library.Library(namespace, "DEF")
        library.define("double(Tensor x) -> Tensor")
        library.impl("double", lambda x: x * 2, "CompositeImplicitAutograd")
        utils._materialize_cpp_cia_ops()
        assert len(lookups) == 2
        assert hasattr(getattr(torch.ops, namespace), "double")
    utils._materialize_cpp_cia_ops()  # torch's own again: it looks up every time
    assert len(lookups) == 3


def test_the_operators_kept_are_the_same_within_the_block() -> None:
    outside = utils._collect_all_valid_cia_ops()
    with cia_ops_looked_up_once():
        assert utils._collect_all_valid_cia_ops() == outside
        assert utils._collect_all_valid_cia_ops() == outside


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = nn.functional.hardswish(self.conv(x))
        return nn.functional.gelu(self.head(y.mean(dim=(2, 3))))


def test_a_decomposition_within_the_block_makes_the_same_graph() -> None:
    torch.manual_seed(0)
    program = torch.export.export(_Block().eval(), (torch.randn(1, 3, 8, 8),))
    outside = program.run_decompositions().graph_module.code
    with cia_ops_looked_up_once():
        assert program.run_decompositions().graph_module.code == outside
        assert program.run_decompositions().graph_module.code == outside
