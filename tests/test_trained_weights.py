"""A built-in model's trained weights, kept in the cache: used while they are what training
wrote, trained again when they are torn, altered, unsummed or another model's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from nnsweep.models._bundle import Dataset, Split
from nnsweep.models._trained import trained_bundle

_DATA = Dataset(
    calibration=Split(np.ones((4, 3), np.float32)),
    evaluation=Split(np.ones((4, 3), np.float32), np.zeros(4, np.int64)),
)


class _Trainer:
    def __init__(self) -> None:
        self.runs = 0

    def bundle(self, cache: Path, model: nn.Linear | None = None) -> nn.Linear:
        model = model or nn.Linear(3, 2)

        def train() -> None:
            self.runs += 1
            with torch.no_grad():
                model.weight.fill_(0.5)
                model.bias.fill_(-1.0)

        trained_bundle("tiny", model, _DATA, "recipe", cache, train)
        return model


def _weights(cache: Path) -> Path:
    return cache / "tiny-recipe.pt"


def test_kept_weights_are_used_without_training(tmp_path: Path) -> None:
    trainer = _Trainer()
    trainer.bundle(tmp_path)
    module = trainer.bundle(tmp_path)
    assert trainer.runs == 1 and bool(torch.all(module.weight == 0.5))


@pytest.mark.parametrize("damage", ["altered", "torn", "unsummed", "another_model"])
def test_weights_that_are_not_what_training_wrote_are_trained_again(tmp_path: Path, damage: str) -> None:
    trainer = _Trainer()
    trainer.bundle(tmp_path)
    path = _weights(tmp_path)
    if damage == "altered":  # valid weights, not the trained ones: the model would deploy as another
        torch.save({"weight": torch.zeros(2, 3), "bias": torch.zeros(2)}, path)
    elif damage == "torn":
        path.write_bytes(path.read_bytes()[:40])
    elif damage == "unsummed":  # kept before weights carried their sha256
        path.with_name(path.name + ".sha256").unlink()
    else:  # another model's weights, with a matching sum: refused before any is copied
        other = nn.Linear(3, 5)
        trainer.bundle(tmp_path / "other", other)
        for p in (path, path.with_name(path.name + ".sha256")):
            p.write_bytes((tmp_path / "other" / p.name).read_bytes())
    module = trainer.bundle(tmp_path)
    assert trainer.runs == (3 if damage == "another_model" else 2)
    assert bool(torch.all(module.weight == 0.5)) and bool(torch.all(module.bias == -1.0))
    trainer.bundle(tmp_path)  # kept again, whole
    assert trainer.runs == (3 if damage == "another_model" else 2)
