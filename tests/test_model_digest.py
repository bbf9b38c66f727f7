"""A model's digest (the key of its artifacts) follows its code and structure, not only its weights."""

from __future__ import annotations

import textwrap
from pathlib import Path

from nnsweep.models import load_model

MODEL = """
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3, stride={stride}, padding=1)

    def forward(self, x):
        return {body}


def build():
    torch.manual_seed(0)
    return Net().eval(), torch.randn(1, 1, 8, 8)
"""


def _digest(tmp_path: Path, name: str, stride: int = 1, body: str = "self.conv(x).relu()") -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(MODEL.format(stride=stride, body=body)))
    return load_model(f"{path}:build").digest


def test_the_same_model_has_the_same_digest(tmp_path: Path) -> None:
    assert _digest(tmp_path, "a") == _digest(tmp_path, "a")


def test_an_edited_forward_with_the_same_weights_changes_the_digest(tmp_path: Path) -> None:
    before = _digest(tmp_path, "a")
    assert _digest(tmp_path, "a", body="self.conv(x).sigmoid()") != before


def test_a_layer_argument_no_weight_shows_changes_the_digest(tmp_path: Path) -> None:
    assert _digest(tmp_path, "a", stride=2) != _digest(tmp_path, "a", stride=1)


def test_a_model_file_imports_the_modules_beside_it(tmp_path: Path) -> None:
    folder = tmp_path / "models_beside"
    folder.mkdir()
    (folder / "nnsweep_test_blocks.py").write_text(
        "import torch\n\n\nclass Block(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.conv = torch.nn.Conv2d(1, 4, 3)\n\n"
        "    def forward(self, x):\n        return self.conv(x).relu()\n"
    )
    (folder / "net.py").write_text(
        "import torch\nfrom nnsweep_test_blocks import Block\n\n\n"
        "def build():\n    torch.manual_seed(0)\n    return Block().eval(), torch.randn(1, 1, 8, 8)\n"
    )
    bundle = load_model(f"{folder / 'net.py'}:build")
    assert type(bundle.module).__name__ == "Block"
