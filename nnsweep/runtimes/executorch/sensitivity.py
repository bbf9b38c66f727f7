"""ExecuTorch's layer ranking: its XNNPACK PT2E quantizer, prepared as its converter prepares
(:func:`nnsweep.runtimes.common.pt2e.ready_for_calibration`). Sits with the rankings (it
imports :mod:`nnsweep.sensitivity`); reached through the registry."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nnsweep.sensitivity.pt2e import pt2e_evaluator
from nnsweep.sensitivity.rank import Evaluator

if TYPE_CHECKING:
    import torch

    from nnsweep.core.quant import QuantConfig
    from nnsweep.models import ModelBundle, Split
    from nnsweep.sensitivity.scoring import Scoring

__all__ = ["evaluator"]


def evaluator(bundle: ModelBundle, split: Split, per_channel: bool, scoring: Scoring) -> Evaluator:
    """The registry's hook (:attr:`~nnsweep.core.runtimes.RuntimeInfo.sensitivity`)."""
    return pt2e_evaluator(
        bundle, split, per_channel, scoring, runtime="executorch", quantizer=_quantizer, prepare=_prepare
    )


def _quantizer(quant: QuantConfig) -> object:
    from nnsweep.runtimes.executorch.converter import xnnpack_quantizer

    return xnnpack_quantizer(quant)


def _prepare(module: torch.nn.Module, chosen: object, model: torch.nn.Module) -> torch.nn.Module:
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    from nnsweep.runtimes.common.pt2e import ready_for_calibration

    ready_for_calibration(module)  # as its converter quantizes (nnsweep.runtimes.common.pt2e.quantize)
    return prepare_pt2e(module, chosen)
