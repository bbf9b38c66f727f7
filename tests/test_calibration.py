"""PT2E calibration (nnsweep.convert.pt2e.calibrated): static modes calibrate 16 samples a
call through a dynamic-batch export, the same samples in the same order; a model whose
shapes specialise on batch 1 is calibrated one sample a call."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from nnsweep.convert.pt2e import calibrated
from nnsweep.core.quant import QuantConfig, QuantMode
from nnsweep.models import Dataset, ModelBundle, Split


class _Flat(nn.Module):
    def __init__(self, pinned: bool) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.pinned = pinned

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        return y.view(1, 4) if self.pinned else y  # view(1, 4): valid for batch 1 only


def _bundle(model: nn.Module) -> ModelBundle:
    rng = np.random.default_rng(0)
    split = Split(rng.standard_normal((40, 8)).astype(np.float32), np.zeros(40, np.int64))
    return ModelBundle("m", model, torch.zeros(1, 8), Dataset(split, split), digest="0" * 64)


class _Seen(nn.Module):
    """Stands for a backend's prepared graph: records each call's batch and every row it saw."""

    def __init__(self, graph: nn.Module) -> None:
        super().__init__()
        self.graph = graph
        self.batches: list[int] = []
        self.rows: list[np.ndarray] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.batches.append(x.shape[0])
        self.rows.extend(x.numpy())
        return self.graph(x)


@pytest.mark.parametrize("pinned", [False, True])
def test_static_calibration_sees_the_same_samples_batched_where_the_model_allows(pinned: bool) -> None:
    bundle = _bundle(_Flat(pinned).eval())
    quant = QuantConfig(QuantMode.STATIC_INT8, calibration_batches=2)  # 32 samples
    prepared = calibrated(bundle.module, bundle, quant, _Seen)
    assert isinstance(prepared, _Seen)
    wanted = QuantConfig.CALIBRATION_BATCH_SIZE * 2
    expected = [bundle.dataset.calibration.inputs[i % 40] for i in range(wanted)]
    np.testing.assert_array_equal(np.stack(prepared.rows[-wanted:]), np.stack(expected))
    if pinned:  # the batched call failed on view(1, 4): calibrated again, one sample a call
        assert prepared.batches == [1] * wanted
    else:
        assert prepared.batches == [QuantConfig.CALIBRATION_BATCH_SIZE] * 2


def test_dynamic_modes_observe_one_forward_pass() -> None:
    bundle = _bundle(_Flat(False).eval())
    prepared = calibrated(bundle.module, bundle, QuantConfig(QuantMode.DYNAMIC_INT8), _Seen)
    assert isinstance(prepared, _Seen) and prepared.batches == [1]
