"""LiteRT's layer ranking: litert-torch's PT2E quantizer, prepared as its converter prepares.
Sits with the rankings (it imports :mod:`nnsweep.sensitivity`); reached through the registry."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from nnsweep.sensitivity.pt2e import pt2e_evaluator
from nnsweep.sensitivity.rank import Evaluator

if TYPE_CHECKING:
    import torch

    from nnsweep.core.quant import QuantConfig
    from nnsweep.models import ModelBundle, Split
    from nnsweep.sensitivity.scoring import Scoring

__all__ = ["evaluator", "litert_evaluator"]


def evaluator(bundle: ModelBundle, split: Split, per_channel: bool, scoring: Scoring) -> Evaluator:
    """The registry's hook (:attr:`~nnsweep.core.runtimes.RuntimeInfo.sensitivity`)."""
    return litert_evaluator(bundle, split, per_channel, scoring, runtime="litert", symmetric_activations=False)


def litert_evaluator(
    bundle: ModelBundle,
    split: Split,
    per_channel: bool,
    scoring: Scoring,
    *,
    runtime: str,
    symmetric_activations: bool,
) -> Evaluator:
    """litert-torch's quantizer, as ``runtime``'s converter sets it (symmetric activations for Arm NN)."""
    quantizer = functools.partial(_quantizer, symmetric_activations=symmetric_activations)
    return pt2e_evaluator(bundle, split, per_channel, scoring, runtime=runtime, quantizer=quantizer, prepare=_prepare)


def _quantizer(quant: QuantConfig, *, symmetric_activations: bool) -> object:
    from nnsweep.runtimes.litert import converter

    return converter.litert_quantizer(quant, symmetric_activations=symmetric_activations)


def _prepare(module: torch.nn.Module, chosen: object, model: torch.nn.Module) -> torch.nn.Module:
    from nnsweep.runtimes.litert import converter

    return converter.prepare(module, chosen, model)
