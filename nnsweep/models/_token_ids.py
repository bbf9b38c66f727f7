"""Models whose input is integer token ids (a text classifier's ``nn.Embedding``).

nnsweep deploys them as they are: the ids stay integers in every artifact (the
quantizers leave the embedding lookup in float or quantize its table, never the ids),
so calibration and evaluation need ids the model accepts. A model that comes without
data gets seeded ids drawn below its vocabulary; one whose vocabulary nnsweep cannot see
must bring a :class:`~nnsweep.models.Dataset`.

The vocabulary is that of the embeddings that look the ids up. A transformer has others,
which read what the model computes: positions (``arange``, GPT-2's 64), token types
(BERT's 2). Taken as the smallest of all, BERT's was 2: its seeded ids were 0 and 1, and a
tokenised dataset of real text was refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nnsweep.core.errors import SpecError
from nnsweep.models._bundle import Dataset, Split

__all__ = ["ID_DTYPES", "check_ids", "synthetic_ids", "vocabulary"]

# numpy dtypes of the integer inputs nnsweep deploys (torch.int32 and torch.int64)
ID_DTYPES = ("int32", "int64")


def vocabulary(ref: str, module: Any, example: Any) -> int:
    """The number of ids ``module`` accepts: the smallest ``num_embeddings`` of the
    ``nn.Embedding`` and ``nn.EmbeddingBag`` layers that look up the ids of ``example`` (a
    batch-1 input the model takes) as they are, whatever their shape; of every embedding
    when none does (the ids are changed before a lookup).

    Raises:
        SpecError: the model has no embedding, so the valid ids are unknown.
    """
    sizes = _embedding_sizes(module, example)
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


def check_ids(ref: str, module: Any, dataset: Dataset, example: Any) -> None:
    """Every id of ``dataset``'s splits is one the model accepts (``0 <= id <``
    :func:`vocabulary`), when it has embeddings: an id out of range fails in the model with
    "IndexError: index out of range in self", after the load.

    Raises:
        SpecError: naming the split, the id found and the range.
    """
    sizes = _embedding_sizes(module, example)
    if not sizes:
        return
    vocab = min(sizes)
    for name, split in dataset.named_splits().items():
        if not len(split):
            continue
        low, high = int(split.inputs.min()), int(split.inputs.max())
        if low < 0 or high >= vocab:
            bad = low if low < 0 else high
            raise SpecError(
                "model",
                f"{ref}(): the Dataset's {name} inputs hold the id {bad}; the model's embeddings take ids "
                f"0 to {vocab - 1}",
            )


def _embedding_sizes(module: Any, example: Any) -> list[int]:
    """``num_embeddings`` of each ``nn.Embedding`` and ``nn.EmbeddingBag`` of ``module`` that
    looks up ``example``'s ids (its input holds the same values, in any shape), or of every
    one when none does."""
    import torch

    layers = [m for m in module.modules() if isinstance(m, torch.nn.Embedding | torch.nn.EmbeddingBag)]
    ids = example.reshape(-1)
    reading: list[int] = []

    def looks_up(layer: Any, args: tuple[Any, ...]) -> None:
        seen = args[0] if args else None
        if isinstance(seen, torch.Tensor) and torch.equal(seen.reshape(-1).to(ids.dtype), ids):
            reading.append(layer.num_embeddings)

    hooks = [layer.register_forward_pre_hook(looks_up) for layer in layers]
    try:
        with torch.no_grad():
            module(example)
    finally:
        for hook in hooks:
            hook.remove()
    return reading or [layer.num_embeddings for layer in layers]
