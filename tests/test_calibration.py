"""PT2E calibration (nnsweep.runtimes.common.pt2e.calibrated): static modes calibrate 16 samples a
call through a dynamic-batch export, the same samples in the same order; a model whose
shapes specialise on batch 1 is calibrated one sample a call."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from nnsweep.core.quant import QuantConfig, QuantMode
from nnsweep.models import Dataset, ModelBundle, Split
from nnsweep.runtimes.common.pt2e import calibrated


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


class _NoisyWhenBatched(_Seen):
    """A prepared graph that fails on a batch the way a quantizer's passes did (a symbolic
    batch size left in a reshape), warning and printing first."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > 1:
            import sys
            import warnings

            warnings.warn("Raw SymInt value (16*s23) passed as argument to Graph.create_node", stacklevel=1)
            sys.stderr.write("Call using an FX-traced Module, line 7 of the traced Module's generated forward\n")
            raise NameError("name 's23' is not defined")
        return super().forward(x)


def test_what_the_batched_attempt_warns_or_prints_before_its_fallback_goes_to_the_debug_log(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # ExecuTorch's Arm quantizer on a token-id model printed a 23-line traceback and torch's
    # generated code, then calibrated one sample a call as it should.
    import warnings

    bundle = _bundle(_Flat(False).eval())
    quant = QuantConfig(QuantMode.STATIC_INT8, calibration_batches=1)
    with (
        caplog.at_level("DEBUG", logger="nnsweep.runtimes.common.pt2e"),
        warnings.catch_warnings(record=True) as caught,
    ):
        warnings.simplefilter("always")
        prepared = calibrated(bundle.module, bundle, quant, _NoisyWhenBatched)
    assert isinstance(prepared, _NoisyWhenBatched)
    assert prepared.batches == [1] * QuantConfig.CALIBRATION_BATCH_SIZE  # the fallback calibrated
    assert capsys.readouterr().err == "" and not caught
    said = [r.getMessage() for r in caplog.records]
    assert any("batched calibration: UserWarning: Raw SymInt value" in m for m in said), said
    assert any("batched calibration wrote to stderr: Call using an FX-traced Module" in m for m in said), said
    assert any("calibrating one sample a call" in m and "s23" in m for m in said), said
