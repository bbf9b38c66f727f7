"""A built-in model trained on first use: its weights cached by the digest of the recipe
that trained them (code, data, hyper-parameters), so a second load costs milliseconds."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from nnsweep.core.atomic import atomic_path
from nnsweep.models._bundle import Dataset, ModelBundle, module_digest

__all__ = ["trained_bundle"]

log = logging.getLogger(__name__)


def trained_bundle(
    name: str, model: nn.Module, data: Dataset, recipe: str, cache_dir: Path | None, train: Callable[[], None]
) -> ModelBundle:
    """``model`` with the weights ``train()`` gives it, read from ``cache_dir`` when an
    earlier load kept them (``None``: train every time), as a :class:`ModelBundle`.

    Args:
        name: the model's name (its reference).
        recipe: the digest of everything training depends on: the cache key.
        train: trains ``model`` in place (called only on a cache miss).
    """
    path = cache_dir / f"{name}-{recipe}.pt" if cache_dir is not None else None
    state = _read_state(path) if path is not None else None
    if state is not None:
        model.load_state_dict(state)
        model.eval()
    else:
        train()
        if path is not None:
            with atomic_path(path) as tmp:
                torch.save(model.state_dict(), tmp)
    example = torch.from_numpy(data.evaluation.inputs[:1].copy())
    return ModelBundle(
        name=name,
        module=model,
        example_input=example,
        dataset=data,
        digest=module_digest(name, model, example, data.evaluation.digest(), data.calibration.digest()),
    )


def _read_state(path: Path) -> dict[str, torch.Tensor] | None:
    if not path.exists():
        return None
    try:
        state: dict[str, torch.Tensor] = torch.load(path, weights_only=True)
        return state
    except Exception as exc:  # a torn or foreign file: retrain and overwrite
        log.warning("ignoring unreadable cached weights %s: %s", path, exc)
        return None
