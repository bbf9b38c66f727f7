"""litert-torch's JAX lowerings are made once per process while nnsweep converts
(nnsweep.runtimes.common.jax_lowering): the same .tflite bytes, the lowerings of a second
conversion taken from the first."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from nnsweep.runtimes.common import jax_lowering
from nnsweep.runtimes.common.jax_lowering import jax_lowerings_made_once, typed
from nnsweep.runtimes.litert.litert_import import litert_torch


class _Net(nn.Module):
    """A convolution, hardswish, a pooled linear head: ops litert-torch lowers through JAX."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, width, 3, padding=1)
        self.head = nn.Linear(width, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(nn.functional.hardswish(self.conv(x)).mean(dim=(2, 3)))


def _tflite(width: int = 8) -> bytes:
    torch.manual_seed(0)
    return bytes(litert_torch.convert(_Net(width).eval(), (torch.randn(1, 3, 16, 16),)).model_content())


@pytest.fixture
def serialised(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The texts litert-torch serialises to VHLO (its own function, counted), with nothing
    kept from an earlier test."""
    from litert_torch.backend.jax_bridge import _wrap

    monkeypatch.setattr(jax_lowering, "_texts", {})
    monkeypatch.setattr(jax_lowering, "_vhlo", {})
    monkeypatch.setattr(jax_lowering, "_kept_size", 0)
    calls: list[str] = []
    own: Callable[[str], bytes] = _wrap._stablehlo_to_vhlo

    def counted(text: str) -> bytes:
        calls.append(text)
        return own(text)

    monkeypatch.setattr(_wrap, "_stablehlo_to_vhlo", counted)
    return calls


def test_a_second_conversion_takes_its_lowerings_from_the_first_and_writes_the_same_bytes(
    serialised: list[str],
) -> None:
    alone = _tflite()
    serialised.clear()
    with jax_lowerings_made_once():
        first = _tflite()
        made = len(serialised)
        second = _tflite()
    assert alone == first == second
    assert made > 0 and len(serialised) == made  # the second serialised nothing new


def test_another_shape_is_lowered_again(serialised: list[str]) -> None:
    with jax_lowerings_made_once():
        _tflite(width=8)
        made = len(serialised)
        wider = _tflite(width=16)
    assert len(serialised) > made  # the conv and linear of 16 channels are new calls
    assert wider == _tflite(width=16)  # and the same bytes as litert-torch's own lowering


def test_outside_a_block_litert_torch_lowers_as_its_own() -> None:
    from litert_torch.backend.jax_bridge import _wrap

    with jax_lowerings_made_once():
        assert _wrap._lower_to_ir_text is jax_lowering._lower_to_ir_text
    assert _wrap._lower_to_ir_text is not jax_lowering._lower_to_ir_text
    assert _wrap._stablehlo_to_vhlo is not jax_lowering._stablehlo_to_vhlo


def test_equal_values_of_other_types_are_other_keys() -> None:
    assert len({typed((1,)), typed((1.0,)), typed((True,))}) == 3
    assert typed(((2, 3), "float32")) == typed(((2, 3), "float32"))
    assert typed(((2, 3), "float32")) != typed(((2, 3.0), "float32"))


def test_past_the_budget_what_was_kept_goes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jax_lowering, "_texts", {})
    monkeypatch.setattr(jax_lowering, "_vhlo", {})
    monkeypatch.setattr(jax_lowering, "_kept_size", 0)
    monkeypatch.setattr(jax_lowering, "_KEPT_SIZE", 10)
    jax_lowering._keep(jax_lowering._texts, "a", "12345", 5)
    jax_lowering._keep(jax_lowering._vhlo, "12345", b"123", 4)
    assert jax_lowering._kept_size == 9
    jax_lowering._keep(jax_lowering._texts, "b", "678", 3)  # 12 > 10: start again
    assert jax_lowering._texts == {"b": "678"} and jax_lowering._vhlo == {} and jax_lowering._kept_size == 3
