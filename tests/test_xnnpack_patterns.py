"""XNNPACK's pattern graphs are built only for a program that could match them
(nnsweep.runtimes.executorch.xnnpack_patterns): the bytes stay ExecuTorch's own, with and without
the ops the patterns need."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest
import torch
from executorch.backends.xnnpack.partition.graphs import bilinear_2d
from torch import nn
from torch.fx import Graph

from nnsweep.runtimes.executorch.xnnpack_patterns import PATTERNS, Patterns, edge_op_names, only_where_they_can_match

if TYPE_CHECKING:
    from conftest import XnnpackLowering


class _Convs(nn.Module):
    """No upsampling, no attention: neither pattern can match."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Hardswish(), nn.Conv2d(8, 4, 1), nn.AdaptiveAvgPool2d(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x).flatten(1)


class _Attention(nn.Module):
    """Scaled dot-product attention with a 2-D mask: its edge program holds the SDPA
    pattern (XNNPACK 1.5.1's partitions then leave some of its ops out)."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 48)
        self.register_buffer("mask", torch.zeros(8, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=self.mask)


MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "convs": (_Convs, (1, 3, 12, 12)),
    "attention": (_Attention, (1, 2, 8, 16)),
}


def _original(provider: Patterns) -> Any:
    with only_where_they_can_match(Graph()):  # puts the stand-ins in front, if not yet
        pass
    return getattr(provider.module, provider.function).__wrapped__


def _program(name: str) -> torch.export.ExportedProgram:
    make, shape = MODELS[name]
    torch.manual_seed(0)
    return torch.export.export(make().eval(), (torch.randn(shape),))


@pytest.mark.parametrize("provider", PATTERNS, ids=lambda p: p.function)
def test_every_pattern_holds_the_ops_its_skip_is_decided_on(provider: Patterns) -> None:
    patterns = list(_original(provider)())
    assert patterns
    for pattern in patterns:
        assert provider.needed <= edge_op_names(pattern.graph)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_lowering_gives_executorch_s_own_bytes(name: str, xnnpack: XnnpackLowering) -> None:
    program = _program(name)
    assert xnnpack.nnsweep_s(program) == xnnpack.executorch_s(program)


def _lookups() -> list[int]:
    """How often each of ExecuTorch's (cached) pattern builders has been called."""
    builders = [bilinear_2d._get_bilinear_2d_graphs, _original(PATTERNS[1])]
    return [b.cache_info().hits + b.cache_info().misses for b in builders]


def test_a_program_without_the_needed_ops_asks_for_no_pattern(xnnpack: XnnpackLowering) -> None:
    program = _program("convs")
    before = _lookups()
    xnnpack.nnsweep_s(program)
    assert _lookups() == before


def test_a_program_with_attention_is_given_the_attention_patterns(xnnpack: XnnpackLowering) -> None:
    program = _program("attention")
    before = _lookups()
    xnnpack.nnsweep_s(program)
    after = _lookups()
    assert after[0] == before[0]  # no upsampling
    assert after[1] > before[1]
