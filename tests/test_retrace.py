"""ExecuTorch's plain re-trace is skipped only for a graph untouched since the last one
(nnsweep.runtimes.executorch.retrace): what a skip returns is what the trace would have made, a graph
changed in place is traced again, and the lowered bytes are ExecuTorch's own."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest
import torch
from executorch.backends.xnnpack import _passes as xnnpack_passes
from executorch.exir import to_edge
from executorch.exir.pass_base import ExportPass
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from torch import nn
from torch.fx import GraphModule

from nnsweep.runtimes.executorch import lowering
from nnsweep.runtimes.executorch.retrace import is_plain_retrace, retrace_only_when_changed

if TYPE_CHECKING:
    from conftest import XnnpackLowering


class _ConvBlock(nn.Module):
    """Conv, BatchNorm (XNNPACK fuses it), hardswish, PReLU, a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.BatchNorm2d(8)
        self.act = nn.PReLU(8)
        self.head = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.act(nn.functional.hardswish(self.norm(self.conv(x))))
        return self.head(y.mean(dim=(2, 3)))


class _Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 48)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return nn.functional.scaled_dot_product_attention(q, k, v)


class _Upsample(nn.Module):
    """Bilinear upsampling and a concatenation of four inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = nn.functional.interpolate(self.conv(x), scale_factor=2.0, mode="bilinear", align_corners=False)
        return torch.cat([y, y * 2, y + 1, torch.relu(y)], dim=1)


class _Sequence(nn.Module):
    """Conv1d (XNNPACK unsqueezes it to 2-D) and max pooling (its indices dropped). (A PReLU
    after the conv1d fails in ExecuTorch 1.5.1's own lowering, in ChannelsLastTaggedReshapePass.)"""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(4, 6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.max_pool1d(torch.relu(self.conv(x)), 2)


MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "conv_block": (_ConvBlock, (1, 3, 8, 8)),
    "attention": (_Attention, (1, 2, 8, 16)),
    "upsample": (_Upsample, (1, 3, 6, 6)),
    "sequence": (_Sequence, (1, 4, 16)),
}


def _program(name: str) -> torch.export.ExportedProgram:
    make, shape = MODELS[name]
    torch.manual_seed(0)
    return torch.export.export(make().eval(), (torch.randn(shape),))


def _structure(graph_module: GraphModule) -> list[Any]:
    """A graph as the next pass sees it: nodes by name, metadata but the provenance
    (``from_node`` names the pass that made a node), fake values by shape, dtype and stride."""

    def value(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return ("tensor", tuple(v.shape), v.dtype, tuple(v.stride()))
        if isinstance(v, torch.fx.Node):
            return ("node", v.name)
        if isinstance(v, (list, tuple)):
            return [value(x) for x in v]
        if isinstance(v, dict):
            return {k: value(x) for k, x in v.items()}
        return v

    def meta(node: torch.fx.Node) -> dict[str, Any]:
        return {k: value(v) for k, v in node.meta.items() if k != "from_node"}

    return [(n.name, n.op, n.target, value(n.args), value(n.kwargs), meta(n)) for n in graph_module.graph.nodes]


@contextlib.contextmanager
def _watching_skips() -> Iterator[list[tuple[list[Any], list[Any]]]]:
    """Each skip of the block's stand-in, as it was then, with what ExecuTorch's own trace
    makes of the graph (later passes change the graph in place)."""
    with retrace_only_when_changed():
        pass  # installs the stand-in
    stand_in = ExportPass.call
    seen: list[tuple[list[Any], list[Any]]] = []

    @functools.wraps(stand_in)
    def watching(self: ExportPass, graph_module: GraphModule) -> Any:
        result = stand_in(self, graph_module)
        if result.graph_module is graph_module and not result.modified:
            traced = stand_in.__wrapped__(self, graph_module).graph_module  # type: ignore[attr-defined]
            seen.append((_structure(graph_module), _structure(traced)))
        return result

    ExportPass.call = watching  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        ExportPass.call = stand_in  # type: ignore[method-assign]


@pytest.fixture
def skips() -> Iterator[list[tuple[list[Any], list[Any]]]]:
    with _watching_skips() as seen:
        yield seen


@pytest.mark.parametrize("name", sorted(MODELS))
def test_each_skip_returns_what_the_trace_would_make(
    name: str, skips: list[tuple[list[Any], list[Any]]], xnnpack: XnnpackLowering
) -> None:
    lowering.lower(_program(name), [xnnpack.partitioner()], None)
    assert skips, "no re-trace was skipped"
    for kept, traced in skips:
        assert kept == traced


@pytest.mark.parametrize("name", sorted(MODELS))
def test_lowering_gives_executorch_s_own_bytes(name: str, xnnpack: XnnpackLowering) -> None:
    program = _program(name)
    assert xnnpack.nnsweep_s(program) == xnnpack.executorch_s(program)


_LAYERS: dict[str, Callable[[int], nn.Module]] = {
    "conv3x3": lambda c: nn.Conv2d(c, c, 3, padding=1),
    "depthwise": lambda c: nn.Conv2d(c, c, 3, padding=1, groups=c),
    "pointwise": lambda c: nn.Conv2d(c, c, 1),
    "batch_norm": nn.BatchNorm2d,
    "relu": lambda c: nn.ReLU(),
    "hardswish": lambda c: nn.Hardswish(),
    "prelu": nn.PReLU,
    "sigmoid": lambda c: nn.Sigmoid(),
    "max_pool": lambda c: nn.MaxPool2d(3, stride=1, padding=1),
    "avg_pool": lambda c: nn.AvgPool2d(3, stride=1, padding=1),
    "upsample": lambda c: nn.Upsample(scale_factor=2.0, mode="bilinear"),
    "concat": lambda c: _Concat(c),
}


class _Concat(nn.Module):
    """The input beside a 1x1 conv of it, back to ``c`` channels."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.branch = nn.Conv2d(c, c, 1)
        self.merge = nn.Conv2d(2 * c, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.merge(torch.cat([x, self.branch(x)], dim=1))


class _Drawn(nn.Module):
    def __init__(self, layers: list[str]) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 1)
        self.body = nn.Sequential(*(_LAYERS[name](4) for name in layers))
        self.head = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.stem(x)).mean(dim=(2, 3)))


def _static_int8(model: nn.Module, example: torch.Tensor) -> torch.export.ExportedProgram:
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    prepared = prepare_pt2e(torch.export.export(model, (example,)).module(), quantizer)
    prepared(example)
    return torch.export.export(convert_pt2e(prepared), (example,))


# ExecuTorch 1.5.1's DecomposeBatchNorm reads the .grad of a non-leaf tensor (a warning, an error here)
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf:UserWarning")
@settings(
    max_examples=8,
    deadline=None,
    derandomize=True,  # the same models on every run: CI does not draw a new one
    phases=(Phase.explicit, Phase.generate),  # a failing lowering is seconds: no shrinking
    suppress_health_check=[HealthCheck.too_slow],
)
@given(layers=st.lists(st.sampled_from(sorted(_LAYERS)), min_size=1, max_size=5), quantized=st.booleans())
def test_drawn_models_skip_only_what_the_trace_would_remake(
    layers: list[str], quantized: bool, xnnpack: XnnpackLowering
) -> None:
    """Models nobody wrote by hand: each skip is what the trace would make, and the outcome
    is ExecuTorch's own, in float and in static int8: the same bytes, or the same error
    where ExecuTorch's own lowering fails."""
    torch.manual_seed(0)
    model, example = _Drawn(layers).eval(), torch.randn(1, 3, 6, 6)
    program = _static_int8(model, example) if quantized else torch.export.export(model, (example,))
    try:
        own: bytes | Exception = xnnpack.executorch_s(program)
    except Exception as exc:  # an ExecuTorch fault on this model, without nnsweep's block
        own = exc
    with _watching_skips() as seen:
        if isinstance(own, Exception):
            with pytest.raises(type(own)):
                xnnpack.nnsweep_s(program)
            return
        ours = xnnpack.nnsweep_s(program)
    assert seen, "no re-trace was skipped"
    for kept, traced in seen:
        assert kept == traced
    assert ours == own


def _edge_module() -> GraphModule:
    return to_edge(_program("conv_block")).exported_program().graph_module


class _Counting(ExportPass):
    """A plain re-trace (it overrides ``call`` only) that counts the traces it makes."""

    def __init__(self, change: Callable[[GraphModule], None] = lambda gm: None) -> None:
        super().__init__()
        self.change = change

    def call(self, graph_module: GraphModule) -> Any:
        self.change(graph_module)
        return super().call(graph_module)


def _traces(pass_: ExportPass, graph_module: GraphModule) -> tuple[bool, GraphModule]:
    result = pass_(graph_module)
    return result.graph_module is not graph_module, result.graph_module


def test_an_untouched_trace_is_not_traced_again() -> None:
    with retrace_only_when_changed():
        traced, first = _traces(_Counting(), _edge_module())
        assert traced  # not made in this block
        assert _traces(_Counting(), first) == (False, first)
        assert _traces(ExportPass(), first) == (False, first)


def _add_meta(gm: GraphModule) -> None:
    next(n for n in gm.graph.nodes if n.op == "call_function").meta["tag"] = True


def _change_meta_in_place(gm: GraphModule) -> None:
    node = next(n for n in gm.graph.nodes if "nn_module_stack" in n.meta)
    node.meta["nn_module_stack"]["extra"] = ("extra", "Extra")


def _rename(gm: GraphModule) -> None:
    next(n for n in gm.graph.nodes if n.op == "call_function").name = "renamed"


def _add_node(gm: GraphModule) -> None:
    node = next(n for n in gm.graph.nodes if n.op == "call_function")
    with gm.graph.inserting_after(node):
        clone = gm.graph.call_function(torch.ops.aten.clone.default, (node,))
    node.replace_all_uses_with(clone, delete_user_cb=lambda user: user is not clone)
    clone.meta["val"] = node.meta["val"]


@pytest.mark.parametrize("change", [_add_meta, _change_meta_in_place, _rename, _add_node])
def test_a_graph_changed_in_place_is_traced_again(change: Callable[[GraphModule], None]) -> None:
    with retrace_only_when_changed():
        _, first = _traces(ExportPass(), _edge_module())
        traced, _ = _traces(_Counting(change), first)
        assert traced


def test_a_pass_that_works_in_the_trace_always_traces() -> None:
    const_prop = xnnpack_passes.ConstPropPass
    assert not is_plain_retrace(const_prop)
    with retrace_only_when_changed():
        _, first = _traces(ExportPass(), _edge_module())
        traced, _ = _traces(const_prop(), first)
        assert traced


def test_outside_the_block_every_call_traces() -> None:
    with retrace_only_when_changed():
        _, first = _traces(ExportPass(), _edge_module())
    assert _traces(ExportPass(), first)[0]


@pytest.mark.parametrize(
    ("cls", "plain"),
    [
        (ExportPass, True),
        (_Counting, True),
        (xnnpack_passes.ConvertToLinearPass, True),
        (xnnpack_passes.FuseBatchNormPass, True),
        (xnnpack_passes.DimOrderOpsRevertPass, False),
        (xnnpack_passes.ConstPropPass, False),
    ],
)
def test_plain_retrace_is_a_class_that_overrides_call_alone(cls: type, plain: bool) -> None:
    assert is_plain_retrace(cls) is plain
