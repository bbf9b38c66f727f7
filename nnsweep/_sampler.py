"""The sampler of every device's study, chosen on the tabular search benchmark.

``benchmarks/search_replay.py`` replays strategies against tables that measured every
configuration of a finite space (``benchmarks/data/``); docs/search.md gives the
figures and why these settings won.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import optuna

__all__ = ["make_sampler"]


def make_sampler(seed: int) -> optuna.samplers.BaseSampler:
    """The sampler for one device's study.

    Args:
        seed: the study's seed (sweeps are reproducible for a given seed).
    """
    import optuna

    with warnings.catch_warnings():
        # Multivariate TPE with groups is still labelled experimental in Optuna 5.
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=8, multivariate=True, group=True)
