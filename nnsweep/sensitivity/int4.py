"""The int4_weight ranking: each linear layer's damage when it alone goes to 4-bit weights.

One ranking serves every runtime's ``int4_weight``: it quantizes with torchao's 8da4w in
eager PyTorch (:func:`~nnsweep.runtimes.common.int4.quantize_8da4w`), the arithmetic
ExecuTorch XNNPACK's 4-bit path runs. ONNX Runtime's ``MatMulNBits`` and LiteRT's blockwise
weights keep activations float, so for them it orders the layers by their weights' 4-bit
error plus the activations' int8 error: an approximation, said in the report's mode.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nnsweep.sensitivity.rank import Evaluator, Score
from nnsweep.sensitivity.scoring import Scoring

if TYPE_CHECKING:
    from nnsweep.models import ModelBundle, Split

__all__ = ["MODE", "int4_evaluator", "int4_layers"]

MODE = "int4_weight (torchao 8da4w, eager)"
"""The ranking's mode as its report names it."""


def int4_layers(bundle: ModelBundle, group_size: int) -> list[str]:
    """The linear layers ``int4_weight`` at ``group_size`` takes to 4 bits: the ranking's candidates.

    Raises:
        ConversionError: none (no ``nn.Linear``, or none the group size divides).
    """
    from nnsweep.runtimes.common.int4 import plan

    return list(plan(bundle.module, group_size).four_bit)


def int4_evaluator(bundle: ModelBundle, split: Split, group_size: int, scoring: Scoring) -> Evaluator:
    """Scores ``bundle`` on ``split`` with every candidate layer 4-bit but those kept float."""
    import copy

    import torch

    from nnsweep.models import takes_batches
    from nnsweep.runtimes.common.int4 import plan, quantize_8da4w

    layers = plan(bundle.module, group_size)
    inputs = torch.from_numpy(split.inputs)
    batched = takes_batches(bundle)

    def evaluate(keep: frozenset[str]) -> Score:
        model = quantize_8da4w(copy.deepcopy(bundle.module).eval(), layers.without(tuple(keep), "ranked float"))
        with torch.no_grad():
            outputs = scoring.outputs(model, inputs, batched).numpy()
        return scoring(outputs)

    return evaluate
