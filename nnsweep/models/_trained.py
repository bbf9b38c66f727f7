"""A built-in model trained on first use: its weights cached by the digest of the recipe
that trained them (code, data, hyper-parameters), so a second load costs milliseconds."""

from __future__ import annotations

import hashlib
import io
import logging
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from nnsweep.core.atomic import atomic_path
from nnsweep.core.digests import file_sha256
from nnsweep.core.through_memory import save_through_memory
from nnsweep.models._bundle import Dataset, ModelBundle, Split, module_digest

__all__ = ["train_one_cycle", "trained_bundle"]

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
    if path is not None and _load_state(model, path):
        model.eval()
    else:
        train()
        if path is not None:
            _keep(model.state_dict(), path)
    example = torch.from_numpy(data.evaluation.inputs[:1].copy())
    return ModelBundle(
        name=name,
        module=model,
        example_input=example,
        dataset=data,
        digest=module_digest(name, model, example, data.evaluation.digest(), data.calibration.digest()),
    )


def _keep(state: dict[str, torch.Tensor], path: Path) -> None:
    """Write the trained weights to the cache, then the sha256 of the file beside it
    (``.sha256``); a disk that cannot take them costs the next load a training run, so it
    is a warning, not the end of this one."""
    try:
        with atomic_path(path) as tmp:
            save_through_memory(tmp, lambda f: torch.save(state, f))
        with atomic_path(_sum_path(path)) as tmp:
            tmp.write_text(file_sha256(path))
    except OSError as exc:
        log.warning("cannot keep the trained weights at %s (%s): the next load trains again", path, exc.strerror or exc)


def _load_state(model: nn.Module, path: Path) -> bool:
    """Load the kept weights into ``model``: ``False`` (train again) when none are kept, or
    the file is torn, altered since it was written (its sha256, a model that would score
    and deploy as another), written before weights carried one, or not this model's."""
    try:
        data = path.read_bytes()  # read once: the bytes checked are the bytes loaded, whoever rewrites the file
        if hashlib.sha256(data).hexdigest() != _sum_path(path).read_text().strip():
            log.warning("cached weights %s do not match their sha256: training again", path)
            return False
        state = torch.load(io.BytesIO(data), weights_only=True)
        own = model.state_dict()
        if {k: tuple(v.shape) for k, v in state.items()} != {k: tuple(v.shape) for k, v in own.items()}:
            log.warning("cached weights %s are not this model's: training again", path)
            return False  # checked first: a refused load_state_dict has copied some of them already
        model.load_state_dict(state)
        return True
    except FileNotFoundError:
        return False
    except Exception as exc:  # a torn or foreign file: retrain and overwrite
        log.warning("ignoring unreadable cached weights %s: %s", path, exc)
        return False


def _sum_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def train_one_cycle(
    model: nn.Module,
    data: Split,
    *,
    epochs: int,
    batch: int,
    lr: float,
    seed: int,
    progress: Callable[[str], None] | None = None,
    label: str = "",
) -> None:
    """Train a classifier in place: Adam with a one-cycle learning rate (stepped per
    batch), cross-entropy, batches shuffled by a generator seeded with ``seed``; then
    ``eval()``. ``progress`` hears ``training <label>: epoch E/N, loss L`` every 4 epochs.

    Raises:
        ValueError: ``data`` has no labels.
    """
    torch.manual_seed(seed)
    if data.labels is None:
        raise ValueError("the training split has no labels")
    x = torch.from_numpy(data.inputs)
    y = torch.from_numpy(data.labels)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    steps = epochs * ((len(x) + batch - 1) // batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for epoch in range(epochs):
        order = torch.randperm(len(x), generator=gen)
        for start in range(0, len(x), batch):
            rows = order[start : start + batch]
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x[rows]), y[rows])
            loss.backward()
            opt.step()
            sched.step()
        if progress is not None and (epoch + 1) % 4 == 0:
            progress(f"training {label}: epoch {epoch + 1}/{epochs}, loss {loss.item():.3f}")
    model.eval()
