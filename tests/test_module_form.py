"""What a model function may return as its module: ``torch.compile``'s wrappers are taken off,
a saved file given as the model is refused with what to write instead."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nnsweep.cli.main import main
from nnsweep.core.errors import SpecError
from nnsweep.models import check_reference, load_model

MODELS = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU())
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(self.backbone(x).mean((2, 3)))


def _net():
    torch.manual_seed(0)
    return Net().eval()


def plain():
    return _net(), torch.ones(1, 3, 12, 12)


def compiled():
    return torch.compile(_net()), torch.ones(1, 3, 12, 12)


def compiled_inside():
    net = _net()
    net.backbone = torch.compile(net.backbone)
    return torch.compile(net), torch.ones(1, 3, 12, 12)
"""


@pytest.fixture
def models(tmp_path: Path) -> Path:
    path = tmp_path / "models.py"
    path.write_text(MODELS)
    return path


@pytest.mark.parametrize("builder", ["compiled", "compiled_inside"])
def test_a_compiled_model_is_loaded_as_the_module_it_wraps(models: Path, builder: str) -> None:
    plain = load_model(f"{models}:plain")
    bundle = load_model(f"{models}:{builder}")
    assert type(bundle.module).__name__ == "Net"
    assert type(bundle.module.backbone).__name__ == "Sequential"
    assert [name for name, _ in bundle.module.named_modules()] == [name for name, _ in plain.module.named_modules()]
    # the same weights under the same names: the artifacts of the plain model's, not "_orig_mod.head"'s
    assert sorted(bundle.module.state_dict()) == sorted(plain.module.state_dict())


def test_torch_converts_a_compiled_model(models: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # before, torch's conversion traced the wrapper: "Detected that you are using FX to
    # torch.jit.trace a dynamo-optimized function", and its int8 modes found no forward
    args = ["--cache-dir", str(tmp_path / "cache"), "bench", "--model", f"{models}:compiled", "--runtime", "torch"]
    assert main([*args, "--quant", "fp32", "--iters", "3", "--warmup", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["fidelity"]["sqnr_db"] > 100


@pytest.mark.parametrize("name", ["model.pt", "weights.pth", "program.pt2", "MODEL.ONNX", "net.tflite"])
def test_a_saved_file_is_not_a_model_reference(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_bytes(b"\0")
    with pytest.raises(SpecError, match=r"is a saved file, not a model reference: nnsweep needs the Python nn\.Module"):
        check_reference(str(tmp_path / name))
