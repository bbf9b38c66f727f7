"""Explain an artifact's numeric divergence by layer, in a run of its own after the timed ones.

The runtime's explainer hook runs the artifact on a few evaluation inputs with its
intermediates exposed (:mod:`nnsweep.bench.divergence`); the fp32 model runs on the same
inputs with forward hooks. The machine's measurement lock is held meanwhile, so the extra
work disturbs no measurement of another process.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from nnsweep.bench._machine_lock import MachineLock
from nnsweep.bench.divergence import (
    DEFAULT_THRESHOLD_DB,
    EXPLAIN_INPUTS,
    Divergence,
    compare,
    fp32_layer_outputs,
)
from nnsweep.core import runtimes
from nnsweep.core.errors import BenchmarkError

__all__ = ["explain_divergence", "take_divergence"]


def explain_divergence(
    *,
    bundle: Any,
    config: Any,
    artifact: Path,
    io: Any,
    inputs: np.ndarray,
    threshold_db: float = DEFAULT_THRESHOLD_DB,
    count: int = EXPLAIN_INPUTS,
    lock: MachineLock | None = None,
) -> Divergence:
    """Each layer of ``artifact`` (built from ``bundle`` for ``config``) against fp32, on the
    first ``count`` of ``inputs``.

    Returns:
        The layers in graph order, or a :class:`Divergence` with the reason there are none
        (no explainer for the runtime, no layer it could name or match, its failure).
    """
    info = runtimes.get(config.runtime)
    if not info.explainer:
        return Divergence(reason=f"{config.runtime}: {info.no_explainer}", threshold_db=threshold_db)
    sample = np.ascontiguousarray(inputs[:count])
    lock = lock or MachineLock()
    with lock.hold(f"explain {config.runtime} {artifact.name}"):
        started = time.perf_counter()
        try:
            explainer = runtimes.load_object(info.explainer)
            observed, note = explainer(bundle, config, artifact, io, sample)
        except BenchmarkError as exc:
            return Divergence(reason=f"{config.runtime}: {exc}", threshold_db=threshold_db)
        order, reference, weighted = fp32_layer_outputs(bundle.module.eval(), sample)
        layers = compare(observed, order, reference, weighted)
        wall_s = time.perf_counter() - started
    if not layers:
        why = f"none of its {len(observed)} intermediates matched an fp32 module's output"
        return Divergence(reason=f"{config.runtime}: {why}", threshold_db=threshold_db)
    return Divergence(layers, threshold_db, len(sample), wall_s, note=note)


def take_divergence(bundle: Callable[[], Any], artifact: Any, snapshot: Any, threshold_db: float) -> Divergence:
    """Compare ``artifact``'s layers with the fp32 model ``bundle`` gives (loaded only when the
    runtime has an explainer) on a few evaluation inputs (the timed runs are over). A failure
    costs the divergence only: its reason comes back."""
    config = artifact.config
    if (npu := runtimes.npu_target(config)) is not None:
        return Divergence(reason=f"{npu}: estimated by Vela, not run here: no intermediate outputs")
    info = runtimes.get(config.runtime)
    if not info.explainer:
        return Divergence(reason=f"{config.runtime}: {info.no_explainer}", threshold_db=threshold_db)
    return explain_divergence(
        bundle=bundle(),
        config=config,
        artifact=artifact.path,
        io=artifact.io,
        inputs=snapshot.evaluation.inputs,
        threshold_db=threshold_db,
    )
