"""Where an artifact's numbers leave fp32's: each layer's output against the fp32 model's, as SQNR.

A runtime's explainer hook (:attr:`~nnsweep.core.runtimes.RuntimeInfo.explainer`) returns the
intermediate outputs it can expose, in graph order, each named by the module path it comes
from (``None`` when the runtime lost the name). :func:`compare` sets them against the fp32
model's leaf-module outputs on the same inputs (:func:`fp32_layer_outputs`) and
:class:`Divergence` names the first layer below a threshold and the worst one.

A runtime fuses a layer with the normalisation and activation after it (a convolution with
its BatchNorm and ReLU): its output under the layer's name is then the output of one of the
leaf modules that follow it in the fp32 model. :func:`compare` takes the layer's own module
and up to :data:`FUSED_AFTER` leaf modules after it (before the next layer the runtime
shows), of the same shape, and keeps the closest. A layer the runtime could not name is
matched by position: the k-th unnamed weighted output with the k-th weighted fp32 module.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nnsweep.core.metrics import SQNR

__all__ = [
    "DEFAULT_THRESHOLD_DB",
    "EXPLAIN_INPUTS",
    "FUSED_AFTER",
    "Divergence",
    "LayerSqnr",
    "Observed",
    "compare",
    "fp32_layer_outputs",
    "hooked_outputs",
    "sqnr_of",
]

DEFAULT_THRESHOLD_DB = 20.0
"""A layer whose SQNR against fp32 is below this (dB) has diverged: an error of a tenth of the
signal's RMS. The error adds up along the graph: the int8 layers of a small healthy CNN,
per-tensor, sit at 22-35 dB; a layer that loses its information drops to near 0 dB."""
EXPLAIN_INPUTS = 8
"""Evaluation inputs the layers are compared on."""
FUSED_AFTER = 3
"""Leaf modules after a layer that a runtime may have fused into it (norm, activation, ...)."""

Observed = tuple[str | None, np.ndarray]
"""One intermediate output of a runtime: its module path (``None``: not named) and its values,
one row per input."""


def sqnr_of(reference: np.ndarray, actual: np.ndarray) -> float:
    """``10 log10(|reference|^2 / |reference - actual|^2)`` over all values; ``inf`` when equal."""
    ref = np.asarray(reference, dtype=np.float64).ravel()
    got = np.asarray(actual, dtype=np.float64).ravel()
    noise = float(np.sum((ref - got) ** 2))
    signal = float(np.sum(ref**2))
    if noise == 0.0:
        return math.inf
    if signal == 0.0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)


@dataclass(frozen=True)
class LayerSqnr:
    """One layer's output against fp32's. ``named``: ``name`` is a module path; else the layer's
    index among the weighted layers (``#3``), matched by position."""

    name: str
    sqnr_db: float
    named: bool = True

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, SQNR: _finite(self.sqnr_db), "named": self.named}


@dataclass(frozen=True)
class Divergence:
    """The layers in graph order, or why there are none (``reason``); ``wall_s``: what it cost."""

    layers: tuple[LayerSqnr, ...] = ()
    threshold_db: float = DEFAULT_THRESHOLD_DB
    inputs: int = 0
    wall_s: float = 0.0
    reason: str | None = None
    note: str | None = None

    @property
    def first(self) -> LayerSqnr | None:
        """The first layer, in graph order, below :attr:`threshold_db` (``None``: none is)."""
        return next((layer for layer in self.layers if layer.sqnr_db < self.threshold_db), None)

    @property
    def worst(self) -> LayerSqnr | None:
        """The layer of the lowest SQNR (the first of equals)."""
        return min(self.layers, key=lambda layer: layer.sqnr_db) if self.layers else None

    @property
    def suggested_float(self) -> tuple[str, ...]:
        """The layers to try in float (``quant.float_layers``): the first below the threshold and
        the one before it in graph order, whose quantized output it reads (an int8 tensor
        between two layers is damaged whichever of them is float)."""
        first = self.first
        if first is None or not first.named:
            return ()
        at = self.layers.index(first)
        before = self.layers[at - 1] if at > 0 and self.layers[at - 1].named else None
        return (before.name, first.name) if before else (first.name,)

    def to_dict(self) -> dict[str, object]:
        """The ``divergence`` key of ``nnsweep bench --explain --json``."""
        if self.reason is not None:
            return {"layers": [], "first": None, "worst": None, "unavailable": self.reason}
        first, worst = self.first, self.worst
        return {
            "layers": [layer.to_dict() for layer in self.layers],
            "first": first.name if first else None,
            "worst": worst.name if worst else None,
            "suggested_float": list(self.suggested_float),
            "threshold_db": self.threshold_db,
            "inputs": self.inputs,
            "explain_s": self.wall_s,
            **({"note": self.note} if self.note else {}),
        }


def _finite(value: float) -> float | None:
    """JSON has no infinity: an identical layer's SQNR is written ``null``."""
    return value if math.isfinite(value) else None


def hooked_outputs(
    module: Any, inputs: np.ndarray, to_input: Any = None, *, containers: bool = False
) -> list[Observed]:
    """Each innermost module's output on ``inputs`` (run one at a time, as the runtimes are),
    dequantized, in the order they return; ``to_input`` turns a batch-1 float tensor into what
    ``module`` takes.

    Forward hooks on every module; one whose submodules returned a tensor is a container and
    left out (a quantized Linear's packed parameters are a module that never runs). A module
    called twice in a run keeps its last output; one whose output is not a tensor is left out.
    ``containers``: keep the containers too (after the modules inside them).
    """
    import torch

    order: list[str] = []
    rows: dict[str, list[np.ndarray]] = {}

    def hook(name: str) -> Any:
        def record(_module: Any, _args: Any, output: Any) -> None:
            if not isinstance(output, torch.Tensor):
                return
            value = output.dequantize() if output.is_quantized else output
            if not value.is_floating_point():
                return
            if name not in order:
                order.append(name)
            rows.setdefault(name, []).append(value.detach().float().numpy().copy())

        return record

    handles = [sub.register_forward_hook(hook(name)) for name, sub in module.named_modules() if name]
    try:
        with torch.no_grad():
            for i in range(len(inputs)):
                before = {name: len(values) for name, values in rows.items()}
                x = torch.from_numpy(np.ascontiguousarray(inputs[i : i + 1]))
                module(to_input(x) if to_input else x)
                for name, values in rows.items():  # a module called twice in one run: its last output
                    del values[before.get(name, 0) : -1]
    finally:
        for handle in handles:
            handle.remove()
    kept = order if containers else [n for n in order if not any(o.startswith(n + ".") for o in order)]
    return [(name, np.concatenate(rows[name])) for name in kept if len(rows[name]) == len(inputs)]


def fp32_layer_outputs(module: Any, inputs: np.ndarray) -> tuple[list[str], dict[str, np.ndarray], set[str]]:
    """The fp32 model's innermost modules in the order they return, every module's output on
    ``inputs`` (:func:`hooked_outputs`, containers too) and the innermost ones with a weight."""
    import torch

    outputs = {name: values for name, values in hooked_outputs(module, inputs, containers=True) if name is not None}
    order = [n for n in outputs if not any(o.startswith(n + ".") for o in outputs)]
    weighted = {name for name, sub in module.named_modules() if isinstance(getattr(sub, "weight", None), torch.Tensor)}
    return order, outputs, weighted & set(order)


def compare(
    observed: Sequence[Observed],
    order: Sequence[str],
    reference: dict[str, np.ndarray],
    weighted: set[str] | frozenset[str] = frozenset(),
) -> tuple[LayerSqnr, ...]:
    """Each observed layer's SQNR against its fp32 counterpart (see the module docstring).

    Args:
        observed: the runtime's intermediates in graph order (a name seen twice: its last).
        order: the fp32 leaf modules in the order they returned.
        reference: every module's output (:func:`fp32_layer_outputs`), containers too.
        weighted: those of them with weights, for unnamed layers matched by position.

    Returns:
        One entry per observed layer that has an fp32 counterpart of its shape, in graph order.
    """
    named = {name for name, _ in observed if name is not None}
    position = {name: i for i, name in enumerate(order)}
    weighted_order = [name for name in order if name in weighted]
    unnamed = 0
    entries: list[LayerSqnr] = []
    for name, values in observed:
        if name is None:
            if unnamed < len(weighted_order):
                ref = reference[weighted_order[unnamed]]
                if ref.shape == values.shape:
                    entries.append(LayerSqnr(f"#{unnamed}", sqnr_of(ref, values), named=False))
            unnamed += 1
            continue
        candidates = _candidates(name, order, position, named)
        scores = [
            sqnr_of(reference[c], values) for c in candidates if c in reference and reference[c].shape == values.shape
        ]
        if scores:
            entries.append(LayerSqnr(name, max(scores)))
    last = {entry.name: i for i, entry in enumerate(entries)}
    return tuple(entry for i, entry in enumerate(entries) if last[entry.name] == i)


def _candidates(name: str, order: Sequence[str], position: dict[str, int], named: set[str]) -> list[str]:
    """``name``'s own module and the leaf modules a runtime may have fused into it: up to
    :data:`FUSED_AFTER` after it, before the next one the runtime names. A container (the
    runtime names the ops of its own forward by it, a residual add): its own output."""
    if name not in position:
        return [name]
    start = position[name]
    candidates = [name]
    for leaf in order[start + 1 : start + 1 + FUSED_AFTER]:
        if leaf in named:
            break
        candidates.append(leaf)
    return candidates
