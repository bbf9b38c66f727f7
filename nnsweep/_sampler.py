"""The sampler of every device's study, chosen on the tabular search benchmark.

``benchmarks/search_replay.py`` replays strategies against tables that measured every
configuration of a finite space (``benchmarks/data/``); docs/search.md gives the
figures and why these settings won.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna

__all__ = ["make_sampler", "repeat_escape"]


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


def repeat_escape(inner: optuna.samplers.BaseSampler, seed: int) -> optuna.samplers.BaseSampler:
    """``inner``, except that the trial after a repeat is sampled at random.

    A repeat is a finished trial whose parameters equal an earlier finished trial's.
    A model-based sampler that proposed a configuration already measured tends to
    propose it again (the repeat, told with its known values, reinforces its model),
    so the coordinator's re-ask would meet the same proposal; a random draw escapes.
    """
    return _escape_class()(inner, seed)


@functools.cache
def _escape_class() -> type[Any]:
    from optuna.samplers import BaseSampler, RandomSampler
    from optuna.trial import TrialState

    finished = (TrialState.COMPLETE, TrialState.FAIL)

    class RepeatEscape(BaseSampler):  # type: ignore[misc]
        def __init__(self, inner: BaseSampler, seed: int) -> None:
            self._inner = inner
            self._random = RandomSampler(seed=seed)
            self._escaping: set[int] = set()

        def _after_repeat(self, study: optuna.Study) -> bool:
            done = study.get_trials(deepcopy=False, states=finished)
            if len(done) < 2:
                return False
            last = max(done, key=lambda t: t.number)
            return any(t.params == last.params for t in done if t.number != last.number)

        def infer_relative_search_space(self, study: optuna.Study, trial: Any) -> dict[str, Any]:
            if trial.number in self._escaping:
                return {}
            space: dict[str, Any] = self._inner.infer_relative_search_space(study, trial)
            return space

        def sample_relative(self, study: optuna.Study, trial: Any, search_space: dict[str, Any]) -> dict[str, Any]:
            if trial.number in self._escaping:
                return {}
            params: dict[str, Any] = self._inner.sample_relative(study, trial, search_space)
            return params

        def sample_independent(self, study: optuna.Study, trial: Any, name: str, distribution: Any) -> Any:
            sampler = self._random if trial.number in self._escaping else self._inner
            return sampler.sample_independent(study, trial, name, distribution)

        def before_trial(self, study: optuna.Study, trial: Any) -> None:
            self._inner.before_trial(study, trial)
            self._random.before_trial(study, trial)
            if self._after_repeat(study):
                self._escaping.add(trial.number)

        def after_trial(
            self, study: optuna.Study, trial: Any, state: TrialState, values: Sequence[float] | None
        ) -> None:
            self._inner.after_trial(study, trial, state, values)
            self._random.after_trial(study, trial, state, values)
            self._escaping.discard(trial.number)

        def reseed_rng(self) -> None:
            self._inner.reseed_rng()
            self._random.reseed_rng()

    return RepeatEscape
