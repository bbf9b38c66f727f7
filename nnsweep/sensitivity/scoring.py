"""What a ranking's quantize-and-evaluate run is scored by: top-1 (the built-in), or the
user's own metric (the spec's ``metrics``), so the layers kept float are the ones that
matter to the user's task.

A :class:`Scoring` picks the outputs it needs from a quantized model (the scored output
alone for top-1, every output for a user metric) and turns them into a :class:`Score`.
Each runtime's evaluator (``RuntimeInfo.sensitivity``) calls it; nothing heavy is
imported at module level.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from nnsweep.core.errors import MetricError
from nnsweep.sensitivity.rank import Score, score_outputs, scored_layout, scored_output

if TYPE_CHECKING:
    import numpy as np
    import torch

    from nnsweep.core.metrics import UserMetric
    from nnsweep.models import ModelBundle, Split

__all__ = ["MetricScoring", "RankingMetric", "Scoring", "Top1Scoring", "all_outputs"]


class Scoring(Protocol):
    """Scores one quantized model's outputs on the ranking's split."""

    def outputs(self, module: Callable[[torch.Tensor], object], x: torch.Tensor, batched: bool) -> torch.Tensor:
        """``module``'s outputs on ``x`` that this scoring reads, one row per sample."""
        ...

    def pick(self, outputs: Sequence[np.ndarray]) -> np.ndarray:
        """The row this scoring reads from one sample's outputs (a runtime's list, pytree order)."""
        ...

    def __call__(self, rows: np.ndarray) -> Score: ...


@dataclass(frozen=True)
class RankingMetric:
    """The user metric a ranking scores with, and its function imported."""

    metric: UserMetric
    function: Callable[..., Any]


def all_outputs(module: Callable[[torch.Tensor], object], x: torch.Tensor, batched: bool) -> torch.Tensor:
    """Every output of ``module`` on ``x``, flattened per sample and side by side (the layout
    of :func:`nnsweep.models.reference_outputs`)."""
    import torch

    from nnsweep.models import flatten_outputs

    chunks = [x] if batched else [x[i : i + 1] for i in range(len(x))]
    rows = []
    for chunk in chunks:
        leaves = flatten_outputs(module(chunk))
        rows.append(torch.cat([leaf.reshape(len(chunk), -1).float() for leaf in leaves], dim=1))
    return torch.cat(rows)


class Top1Scoring:
    """Top-1 of the scored output (labels, else agreement with fp32) and its SQNR against fp32."""

    def __init__(self, bundle: ModelBundle, split: Split, reference: np.ndarray) -> None:
        self.bundle = bundle
        self.split = split
        self.reference = reference  # the fp32 model's scored output on ``split``

    def outputs(self, module: Callable[[torch.Tensor], object], x: torch.Tensor, batched: bool) -> torch.Tensor:
        return scored_output(module, x, self.bundle, batched)

    def pick(self, outputs: Sequence[np.ndarray]) -> np.ndarray:
        return outputs[self.bundle.dataset.accuracy_output].reshape(1, -1)

    def __call__(self, rows: np.ndarray) -> Score:
        return score_outputs(rows, self.reference, self.split, *scored_layout(self.bundle))


class MetricScoring:
    """The user's metric on every output (with the split's targets), and every output's SQNR
    against fp32. :attr:`Score.accuracy` holds the metric's value as measured; a report
    ranks by it following the metric's goal. A metric that raises on a quantized model's
    outputs scores as the worst value there is: that layer is as sensitive as can be."""

    def __init__(self, metric: RankingMetric, targets: Any, shapes: tuple[tuple[int, ...], ...], reference: np.ndarray):
        from nnsweep.bench.task import Task

        self.metric = metric.metric
        self.task = Task((metric.metric,), (metric.function,), targets, shapes)
        self.reference = reference  # the fp32 model's outputs side by side on the split

    def outputs(self, module: Callable[[torch.Tensor], object], x: torch.Tensor, batched: bool) -> torch.Tensor:
        return all_outputs(module, x, batched)

    def pick(self, outputs: Sequence[np.ndarray]) -> np.ndarray:
        import numpy as np

        return np.concatenate([np.asarray(o, dtype=np.float32).reshape(1, -1) for o in outputs], axis=1)

    def __call__(self, rows: np.ndarray) -> Score:
        import numpy as np

        from nnsweep.bench import evaluate

        rows = np.asarray(rows, dtype=np.float64).reshape(len(self.reference), -1)
        try:
            value = self.task.score(rows)[self.metric.name]
        except MetricError:
            value = -math.inf if self.metric.goal == "maximize" else math.inf
        if not np.isfinite(rows).all():
            return Score(value, -math.inf)
        return Score(value, evaluate(rows, self.reference, None).fidelity.sqnr_db)
