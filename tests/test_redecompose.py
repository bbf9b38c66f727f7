"""ExecuTorch's last ``run_decompositions`` is skipped only when it has nothing to decompose
(nnsweep.runtimes.executorch.redecompose): a skip returns what torch's own call would make, a program
with a target left in the table or one the block did not make is decomposed, and the
lowered bytes are ExecuTorch's own."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
import torch
from torch import nn
from torch.export import ExportedProgram, default_decompositions

from nnsweep.runtimes.executorch import lowering, redecompose
from nnsweep.runtimes.executorch.redecompose import decompose_only_what_is_left, nothing_to_decompose

if TYPE_CHECKING:
    from conftest import XnnpackLowering


class _Block(nn.Module):
    """Ops XNNPACK keeps whole and takes (hardswish, a linear head, bilinear upsampling)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = nn.functional.hardswish(self.conv(x))
        y = nn.functional.interpolate(y, scale_factor=2.0, mode="bilinear", align_corners=False)
        return self.head(y.mean((2, 3)))  # type: ignore[no-any-return]


def _program() -> ExportedProgram:
    torch.manual_seed(0)
    return torch.export.export(_Block().eval(), (torch.randn(1, 3, 8, 8),))


def _graph(program: ExportedProgram) -> list[Any]:
    """Nodes by op, target, argument structure and value shape (names may be drawn anew)."""
    names = {node: i for i, node in enumerate(program.graph.nodes)}

    def arg(a: Any) -> Any:
        if isinstance(a, torch.fx.Node):
            return ("node", names[a])
        if isinstance(a, (list, tuple)):
            return tuple(arg(v) for v in a)
        return a

    def shape(node: torch.fx.Node) -> Any:
        val = node.meta.get("val")
        return (tuple(val.shape), val.dtype) if isinstance(val, torch.Tensor) else None

    return [(n.op, str(n.target), arg(n.args), arg(tuple(n.kwargs.items())), shape(n)) for n in program.graph.nodes]


@pytest.fixture
def skipped(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[list[Any], list[Any]]]]:
    """Each skip: the graph kept, and the graph torch's own call makes of a copy of the program."""
    redecompose._install()
    torchs_own = torch.export.ExportedProgram.run_decompositions.__wrapped__  # type: ignore[attr-defined]
    found: list[tuple[list[Any], list[Any]]] = []

    def watching(program: ExportedProgram, table: Any) -> bool:
        nothing = nothing_to_decompose(program, table)
        if nothing:
            found.append((_graph(program), _graph(torchs_own(copy.deepcopy(program), table))))
        return nothing

    monkeypatch.setattr(redecompose, "nothing_to_decompose", watching)
    yield found


def test_the_last_decomposition_is_skipped_and_makes_what_torch_would(
    skipped: list[Any], xnnpack: XnnpackLowering
) -> None:
    lowering.lower(_program(), [xnnpack.partitioner()], None)
    assert len(skipped) == 1, "XNNPACK takes every op it keeps whole here: the last call has nothing left"
    kept, traced = skipped[0]
    assert kept == traced


def test_the_lowered_bytes_are_executorch_s_own(xnnpack: XnnpackLowering) -> None:
    program = _program()
    assert xnnpack.nnsweep_s(program) == xnnpack.executorch_s(program)


def test_a_target_left_in_the_table_is_decomposed() -> None:
    with decompose_only_what_is_left():
        functional = _program().run_decompositions({})  # hardswish stays: the table is empty
        assert any("hardswish" in str(n.target) for n in functional.graph.nodes)
        decomposed = functional.run_decompositions(default_decompositions())
    assert decomposed is not functional
    assert not any("hardswish" in str(n.target) for n in decomposed.graph.nodes)


def test_a_program_the_block_did_not_make_is_traced() -> None:
    exported = _program()
    with decompose_only_what_is_left():
        made = exported.run_decompositions({})  # nothing in the table, but not made in the block
        again = made.run_decompositions({})  # made by the block's last call, nothing to do
    assert made is not exported and again is made
    assert made.verifier.dialect == "ATEN" and exported.verifier.dialect == "TRAINING"


def test_outside_the_block_every_call_traces() -> None:
    with decompose_only_what_is_left():
        made = _program().run_decompositions({})
    assert made.run_decompositions({}) is not made


def test_a_python_function_in_the_graph_needs_the_trace() -> None:
    made = _program().run_decompositions({})
    assert nothing_to_decompose(made, {})
    node = next(n for n in made.graph.nodes if n.op == "call_function")
    node.target = lambda *args, **kwargs: None
    assert not nothing_to_decompose(made, {})


def test_a_composite_op_torch_always_decomposes_needs_the_trace() -> None:
    # aten.conv2d is composite (it becomes aten.convolution) and torch preserves it when the
    # table leaves it out; aten.reshape is composite and aliasing, so torch decomposes it (to
    # a view) whatever the table says.
    made = _program().run_decompositions({})
    assert nothing_to_decompose(made, {})
    assert not nothing_to_decompose(made, {torch.ops.aten.conv2d.default: lambda *args: None})
    assert torch.ops.aten.conv2d.default in default_decompositions()  # the lazy table names composites
    node = next(n for n in made.graph.nodes if n.target == torch.ops.aten.conv2d.default)
    node.target = torch.ops.aten.reshape.default
    assert not nothing_to_decompose(made, {})
