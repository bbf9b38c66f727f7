"""Where the numbers diverge, for the trials a quality bound turned away, taken at a sweep's end.

A trial that broke a bound is what a user would deploy if its accuracy were repaired: for
the fastest of them (:data:`EXPLAINED` per device), each layer's output is compared with
fp32's on a few evaluation inputs (:func:`~nnsweep.bench.take_divergence`, the runtime's own
way of exposing intermediates), naming the first layer below the threshold, the worst, and
the layers ``quant.float_layers`` would keep float. It runs on this machine, on the artifact
the device measured, after every timed run. Each is kept on the study (the report's
section) and attached to the trial's run as ``divergence.json``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from nnsweep.core.metrics import LATENCY_P50
from nnsweep.core.quant import QuantMode
from nnsweep.core.results import TrialRecord, TrialStatus
from nnsweep.sweep.profiles import attach_json

if TYPE_CHECKING:
    import optuna

    from nnsweep.sweep.host import HostSide
    from nnsweep.tracking import Tracker

__all__ = ["DIVERGENCE_ARTIFACT", "EXPLAINED", "explain_trials", "explained"]

log = logging.getLogger(__name__)

DIVERGENCE_ARTIFACT = "divergence.json"
EXPLAINED = 3
"""Trials explained per device: the fastest that broke a quality bound."""


def explained(records: Sequence[TrialRecord], limit: int = EXPLAINED) -> list[TrialRecord]:
    """The measured quantized trials that broke a quality bound, fastest first, at most ``limit``;
    never a reused one (its original is the one measured) nor an estimated one (nothing ran)."""
    turned_away = [
        r
        for r in records
        if r.status is TrialStatus.OK
        and r.feasible is False
        and r.reused_from is None
        and not r.estimated
        and r.config.quant.mode is not QuantMode.FP32
    ]
    return sorted(turned_away, key=lambda r: (r.metrics.get(LATENCY_P50, math.inf), r.number))[:limit]


def explain_trials(
    device: str, trials: Sequence[TrialRecord], host: HostSide, study: optuna.Study, tracker: Tracker
) -> dict[int, dict[str, Any]]:
    """Explain ``trials``' divergence from fp32 on this machine; keep each on ``study`` and log it
    on the trial's run. A trial that cannot be explained gets the reason instead."""
    from nnsweep.bench import take_divergence
    from nnsweep.bench.divergence import DEFAULT_THRESHOLD_DB, Divergence
    from nnsweep.sweep import studies
    from nnsweep.sweep.host import host_twin

    divergences: dict[int, dict[str, Any]] = {}
    started = time.perf_counter()
    for record in trials:
        artifact = host.cached(record.config)
        if artifact is None:
            found = Divergence(reason="its artifact is no longer in this machine's cache")
        elif host_twin(record.config) is not None:
            found = Divergence(reason=f"{record.config.backends[0]} runs only on the device: no intermediates here")
        else:
            try:
                found = take_divergence(lambda: host.bundle, artifact, host.snapshot, DEFAULT_THRESHOLD_DB)
            except Exception as exc:  # an explainer's own failure costs this explanation only, not the sweep's end
                found = Divergence(reason=f"{record.config.runtime}: {type(exc).__name__}: {exc}")
        divergences[record.number] = found.to_dict()
    if not divergences:
        return divergences
    studies.store_divergences(study, divergences)
    attach_json(tracker, device, DIVERGENCE_ARTIFACT, divergences)
    log.info("%s: explained %d trials by layer in %.1f s", device, len(divergences), time.perf_counter() - started)
    return divergences
