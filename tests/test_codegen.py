"""torch.fx's generated code is compiled once per source while nnsweep converts
(nnsweep.runtimes.common.codegen): the same code objects, the same artifact."""

from __future__ import annotations

import builtins
import types
from typing import Any

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower
from torch import nn
from torch.fx import graph_module

from nnsweep.runtimes.common import codegen
from nnsweep.runtimes.common.codegen import compiled, generated_code_compiled_once


class _Block(nn.Module):
    """A depthwise-separable block with a residual sum: a graph with a branch."""

    def __init__(self) -> None:
        super().__init__()
        self.depthwise = nn.Conv2d(3, 3, 3, padding=1, groups=3)
        self.pointwise = nn.Conv2d(3, 6, 1)
        self.head = nn.Linear(6, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.pointwise(nn.functional.relu6(self.depthwise(x) + x))
        return self.head(y.amax(dim=(2, 3)))


def _source() -> str:
    return torch.fx.symbolic_trace(_Block()).code


_CODE_FIELDS = ("co_code", "co_names", "co_varnames", "co_filename", "co_name", "co_qualname", "co_firstlineno")
_MORE_FIELDS = ("co_linetable", "co_exceptiontable", "co_flags", "co_argcount", "co_kwonlyargcount", "co_stacksize")


def _fields(code: types.CodeType) -> tuple[Any, ...]:
    """Everything a code object holds, the code objects among its constants compared so too
    (``marshal`` bytes also differ by how often each object was referenced)."""
    consts = tuple(_fields(c) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return (consts, *(getattr(code, name) for name in _CODE_FIELDS + _MORE_FIELDS))


def test_a_reused_compilation_is_what_compile_makes_under_the_new_name() -> None:
    src = _source()
    compiled(src, "<eval_with_key>.first")
    again = compiled(src, "<eval_with_key>.second")
    fresh = compile(src, "<eval_with_key>.second", "exec", dont_inherit=True)
    assert _fields(again) == _fields(fresh)
    functions = [c for c in again.co_consts if isinstance(c, types.CodeType)]
    assert functions and all(f.co_filename == "<eval_with_key>.second" for f in functions)


def test_within_the_block_a_source_is_compiled_once_and_each_module_runs_its_own_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    codegen._codes.clear()
    calls: list[str] = []
    real_compile = builtins.compile

    def counting(src: Any, filename: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(src, str) and "def forward" in src:
            calls.append(src)
        return real_compile(src, filename, *args, **kwargs)

    monkeypatch.setattr(builtins, "compile", counting)
    torch.manual_seed(0)
    first, second = _Block().eval(), _Block().eval()  # different weights, one source
    x = torch.randn(1, 3, 12, 12)
    with generated_code_compiled_once():
        traced = [torch.fx.symbolic_trace(m) for m in (first, second)]
        for module in traced:
            module.recompile()
    assert len(calls) == 1  # four compilations asked for, one made
    for module, model in zip(traced, (first, second), strict=True):
        torch.testing.assert_close(module(x), model(x))
    assert graph_module._exec_with_source is not codegen._exec_with_source  # torch's own again


def test_an_error_in_generated_code_shows_its_line(capsys: pytest.CaptureFixture[str]) -> None:
    class Failing(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.view(-1, 7)

    with generated_code_compiled_once():
        modules = [torch.fx.symbolic_trace(Failing()) for _ in range(2)]
    capsys.readouterr()
    with pytest.raises(RuntimeError):
        modules[1](torch.zeros(5))
    # torch prints the failing line of the generated code, found by the reused code's file name
    assert "view = x.view(-1, 7)" in capsys.readouterr().err


def _lowered() -> bytes:
    torch.manual_seed(0)
    program = torch.export.export(_Block().eval(), (torch.randn(1, 3, 12, 12),))
    edge = to_edge_transform_and_lower(
        program, partitioner=[XnnpackPartitioner()], compile_config=EdgeCompileConfig(_check_ir_validity=False)
    )
    return bytes(edge.to_executorch().buffer)


def test_a_lowering_within_the_block_gives_the_same_bytes() -> None:
    pte = _lowered()
    with generated_code_compiled_once():
        assert _lowered() == pte
        assert _lowered() == pte  # the second lowering reuses the first one's compilations


def test_the_sources_kept_stay_within_their_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codegen, "_codes", codegen.OrderedDict())
    monkeypatch.setattr(codegen, "_kept_chars", 0)
    sources = [f"def forward(self, x):\n    return x + {k}\n" for k in range(10)]
    monkeypatch.setattr(codegen, "_KEPT_CHARS", 3 * len(sources[0]))
    for k, src in enumerate(sources):
        compiled(src, f"<eval_with_key>.{k}")
    assert list(codegen._codes) == sources[-3:]  # the least recently used went first
    assert codegen._kept_chars == sum(map(len, sources[-3:]))
