"""The fp16 wrapper of the PyTorch-exporting converters (``nnsweep/runtimes/common/half.py``): which
casts inside the model give half, read from the exported graph."""

from __future__ import annotations

import copy
import math
import warnings
from pathlib import Path

import pytest
import torch

from nnsweep.runtimes.common.half import HalfPrecision


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


def test_a_float_upcast_is_left_as_the_model_wrote_it_until_it_meets_the_half_input() -> None:
    # The wrapper's cast in, the model's upcast (the variance in float32), its float32 scale
    # cast to half where it meets the half input, the model's cast to the weights' dtype (now
    # of a half tensor), the wrapper's cast out.
    dtypes = _cast_dtypes(_UpcastNorm(), torch.randn(2, 4))
    assert dtypes == [torch.float16, torch.float32, torch.float16, torch.float16, torch.float32]
    program = torch.export.export(HalfPrecision(_UpcastNorm()).eval(), (torch.randn(2, 4),), strict=False)
    variance = next(n for n in program.graph.nodes if n.target is torch.ops.aten.pow.Tensor_Scalar)
    assert variance.meta["val"].dtype is torch.float32


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


class _Positions(torch.nn.Module):
    """A sequence model that builds sinusoidal positions in float32 on purpose, adds them to
    its activations and attends under a float32 causal mask."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.dim = dim
        self.inp = torch.nn.Linear(8, dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.head = torch.nn.Linear(dim, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        steps = x.shape[1]
        position = torch.arange(steps, dtype=torch.float32).unsqueeze(1)
        frequency = torch.exp(torch.arange(0, self.dim, 2, dtype=torch.float32) * (-math.log(10000.0) / self.dim))
        h = self.inp(x) + torch.cat([torch.sin(position * frequency), torch.cos(position * frequency)], dim=1)
        mask = torch.full((steps, steps), float("-inf"), dtype=torch.float32).triu(1)
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        h = h + torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.head(h.mean(dim=1))


def test_float32_the_model_builds_on_purpose_meets_the_half_network_in_half() -> None:
    torch.manual_seed(0)
    model, x = _Positions().eval(), torch.randn(2, 12, 8)
    reference = model(x)
    half = HalfPrecision(copy.deepcopy(model)).eval()
    out = half(x)  # without the rule: "mat1 and mat2 must have the same dtype"
    assert out.dtype is torch.float32
    assert (out - reference).abs().max() < 1e-2 * reference.abs().max()
    program = torch.export.export(half, (x,), strict=False)
    nodes = list(program.graph.nodes)
    linears = [n for n in nodes if n.target is torch.ops.aten.linear.default]
    assert len(linears) == 3 and all(n.args[0].meta["val"].dtype is torch.float16 for n in linears)
    # The positions are computed in float32, as written, and cast once where they meet h.
    sines = [n for n in nodes if n.target is torch.ops.aten.sin.default]
    assert [n.meta["val"].dtype for n in sines] == [torch.float32]


class _Accumulates(torch.nn.Module):
    """Writes half activations into a float32 accumulator in place."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.seen: list[torch.dtype] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        total = torch.zeros(x.shape, dtype=torch.float32)
        total.add_(self.linear(x))
        total += self.linear(x)
        total[0] = self.linear(x)[0]
        self.seen.append(total.dtype)
        return total


def test_an_op_that_writes_into_a_float32_tensor_is_left_as_written() -> None:
    model = _Accumulates().eval()
    out = HalfPrecision(model).eval()(torch.randn(2, 4))
    assert model.seen == [torch.float32]
    assert out.dtype is torch.float32


class _Repeats(torch.nn.Module):
    """Makes its constant on one line three times in one run, as a layer called per block does."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(3):
            x = x * torch.tensor([0.5])
        return x


def test_a_warning_a_line_raises_on_every_call_is_shown_once_a_run_as_the_filters_say() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        torch.jit.trace(HalfPrecision(_Repeats()).eval(), torch.randn(2), check_trace=False)
    constants = [w for w in caught if "registered as constants" in str(w.message)]
    where = [(Path(w.filename).name, w.lineno) for w in constants]
    assert where == [(Path(__file__).name, _line("* torch.tensor([0.5])"))]


def _line(text: str) -> int:
    return next(n for n, line in enumerate(Path(__file__).read_text().splitlines(), 1) if text in line)


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["executorch", "torch"])
def test_a_model_with_float32_positions_deploys_in_fp16_and_runs(runtime: str, tmp_path: Path) -> None:
    # Before the third rule ExecuTorch wrote this artifact and failed only when it ran.
    from nnsweep.api import measure
    from nnsweep.bench import MeasureSettings

    torch.manual_seed(0)
    result = measure(
        _Positions().eval(),
        torch.randn(1, 12, 8),
        runtime=runtime,
        quant={"mode": "fp16"},
        settings=MeasureSettings(warmup=1, iters=5),
        cache_dir=tmp_path,
    )
    assert result.evaluation.fidelity.sqnr_db > 40.0
    assert result.evaluation.fidelity.top1_agreement >= 0.9


def test_class_ids_the_model_returns_stay_integers() -> None:
    class Classify(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 3)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            probabilities = self.linear(x).softmax(-1)
            return probabilities, probabilities.argmax(-1)

    probabilities, ids = HalfPrecision(Classify()).eval()(torch.randn(2, 4))
    assert probabilities.dtype is torch.float32 and ids.dtype is torch.int64
