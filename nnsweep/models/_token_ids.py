"""Models whose input is integer token ids (a text classifier's ``nn.Embedding``).

nnsweep deploys them as they are: the ids stay integers in every artifact (the
quantizers leave the embedding lookup in float or quantize its table, never the ids),
so calibration and evaluation need ids the model accepts. A model that comes without
data gets seeded ids drawn below its smallest embedding's vocabulary; one whose
vocabulary nnsweep cannot see must bring a :class:`~nnsweep.models.Dataset`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nnsweep.core.errors import SpecError
from nnsweep.models._bundle import Dataset, Split

__all__ = ["ID_DTYPES", "synthetic_ids", "vocabulary"]

# numpy dtypes of the integer inputs nnsweep deploys (torch.int32 and torch.int64)
ID_DTYPES = ("int32", "int64")


def vocabulary(ref: str, module: Any) -> int:
    """The number of ids every embedding of ``module`` accepts: the smallest
    ``num_embeddings`` of its ``nn.Embedding`` and ``nn.EmbeddingBag`` layers.

    Raises:
        SpecError: the model has no embedding, so the valid ids are unknown.
    """
    import torch

    sizes = [m.num_embeddings for m in module.modules() if isinstance(m, torch.nn.Embedding | torch.nn.EmbeddingBag)]
    if not sizes:
        raise SpecError(
            "model",
            f"{ref}() takes integer inputs but has no nn.Embedding, so nnsweep cannot tell which values are "
            "valid; return (module, example_input, nnsweep.models.Dataset(...)) with real inputs",
        )
    return min(sizes)


def synthetic_ids(shape: tuple[int, ...], dtype: Any, vocab: int, calibration: int, evaluation: int) -> Dataset:
    """Seeded ids uniform in ``[0, vocab)`` (no labels: no accuracy)."""
    rng = np.random.RandomState(0)
    cal = rng.randint(0, vocab, size=(calibration, *shape[1:])).astype(dtype)
    ev = rng.randint(0, vocab, size=(evaluation, *shape[1:])).astype(dtype)
    return Dataset(calibration=Split(cal), evaluation=Split(ev))
