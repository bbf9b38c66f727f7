"""The fp16 wrapper of the PyTorch-exporting converters (``nnsweep/convert/half.py``): which
casts inside the model give half, read from the exported graph."""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import pytest
import torch

from nnsweep.convert.half import HalfPrecision


def _cast_dtypes(model: torch.nn.Module, example: torch.Tensor) -> list[torch.dtype]:
    """The target dtype of each cast in ``HalfPrecision(model)``'s exported graph, in order."""
    program = torch.export.export(HalfPrecision(model).eval(), (example,), strict=False)
    return [
        node.args[1] for node in program.graph.nodes if node.target is torch.ops.aten.to.dtype and len(node.args) > 1
    ]


class _Scale(torch.nn.Module):
    def __init__(self, cast: str) -> None:
        super().__init__()
        self.cast = cast
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.cast == "float":
            scaled = x.float()
        elif self.cast == "to":
            scaled = x.to(torch.float32)
        elif self.cast == "to_kwarg":
            scaled = x.to(dtype=torch.float)
        else:
            scaled = x.type(torch.float32)
        return self.linear(scaled / 255.0)


@pytest.mark.parametrize("cast", ["float", "to", "to_kwarg", "type"])
def test_an_integer_tensor_cast_to_float32_gives_half(cast: str) -> None:
    pixels = torch.randint(0, 256, (3, 4), dtype=torch.uint8)
    # The model's cast, then the wrapper's cast of the output back to float32.
    assert _cast_dtypes(_Scale(cast), pixels) == [torch.float16, torch.float32]
    out = HalfPrecision(_Scale(cast)).eval()(pixels)
    assert out.dtype is torch.float32


class _UpcastNorm(torch.nn.Module):
    """An RMS norm that computes its variance in float32, as some transformers do."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
        return self.linear((x * torch.rsqrt(variance + 1e-6)).to(self.linear.weight.dtype))


def test_a_float_upcast_is_left_as_the_model_wrote_it() -> None:
    # The wrapper's cast in, the model's upcast and its cast back, the wrapper's cast out.
    dtypes = _cast_dtypes(_UpcastNorm(), torch.randn(2, 4))
    assert dtypes == [torch.float16, torch.float32, torch.float16, torch.float32]


def test_the_rule_holds_only_inside_the_wrapper() -> None:
    ids = torch.arange(4)
    HalfPrecision(_Scale("float")).eval()(ids.to(torch.uint8))
    assert ids.float().dtype is torch.float32


class _Normalised(torch.nn.Module):
    """A camera model that makes its normalisation constants as it runs."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
        std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
        return self.conv((x.float() / 255 - mean) / std)


def test_a_float_constant_the_model_makes_is_half_and_the_default_dtype_comes_back() -> None:
    pixels = torch.randint(0, 256, (1, 3, 8, 8), dtype=torch.uint8)
    model = _Normalised().eval()
    half = HalfPrecision(copy.deepcopy(model)).eval()  # .half() is in place
    program = torch.export.export(half, (pixels,), strict=False)
    constants = [n.meta["val"].dtype for n in program.graph.nodes if n.op == "placeholder" and n.name.startswith("c_")]
    assert constants == [torch.float16, torch.float16]
    assert torch.get_default_dtype() is torch.float32
    reference = model(pixels)
    assert (half(pixels) - reference).abs().max() < 1e-2 * reference.abs().max()


def test_the_default_dtype_comes_back_when_the_model_fails() -> None:
    class Fails(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("the model's own error")

    with pytest.raises(ValueError, match="the model's own error"):
        HalfPrecision(Fails())(torch.zeros(2))
    assert torch.get_default_dtype() is torch.float32


def test_a_warning_of_the_trace_names_the_models_line_not_the_wrappers() -> None:
    pixels = torch.randint(0, 256, (1, 3, 8, 8), dtype=torch.uint8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.jit.trace(HalfPrecision(_Normalised()).eval(), pixels, check_trace=False)
    constants = [w for w in caught if "registered as constants" in str(w.message)]
    assert len(constants) == 2
    assert {Path(w.filename).name for w in constants} == {Path(__file__).name}
