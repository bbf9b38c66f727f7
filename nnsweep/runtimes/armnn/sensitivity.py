"""Arm NN's layer ranking: litert-torch's PT2E quantizer with symmetric activations, as its
converter makes the .tflite. Sits with the rankings; reached through the registry."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nnsweep.runtimes.litert.sensitivity import litert_evaluator
from nnsweep.sensitivity.rank import Evaluator

if TYPE_CHECKING:
    from nnsweep.models import ModelBundle, Split
    from nnsweep.sensitivity.scoring import Scoring

__all__ = ["evaluator"]


def evaluator(bundle: ModelBundle, split: Split, per_channel: bool, scoring: Scoring) -> Evaluator:
    """The registry's hook (:attr:`~nnsweep.core.runtimes.RuntimeInfo.sensitivity`)."""
    return litert_evaluator(bundle, split, per_channel, scoring, runtime="armnn", symmetric_activations=True)
