"""The sampler of every device's study.

It proposes after the starts (:func:`nnsweep.sweep.space.mode_starts`) and once the
coordinator's moves (:mod:`nnsweep.sweep.moves`) have nothing left; those find the best
configurations of the search benchmark, not the sampler, which did not beat random search
given the same starts there (benchmarks/results/search.md, replayed by
``benchmarks/search_replay.py``). Its settings are chosen for the repeats below.
"""

from __future__ import annotations

import functools
import random
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, get_args

from nnsweep.spec import Strategy

if TYPE_CHECKING:
    import optuna

__all__ = ["STRATEGIES", "make_sampler", "moves_on", "repeat_escape", "sampler_for"]

STRATEGIES: tuple[str, ...] = get_args(Strategy)


def make_sampler(seed: int) -> optuna.samplers.BaseSampler:
    """The sampler for one device's study: multivariate TPE with groups (8 random
    startup trials), and a random draw for the trial after a repeat (see
    :func:`repeat_escape`), which cuts the repeats that count past the coordinator's cap
    at equal hypervolume (benchmarks/results/search.md has the figures).

    Args:
        seed: the study's seed (sweeps are reproducible for a given seed).
    """
    import optuna

    with warnings.catch_warnings():
        # Multivariate TPE with groups, and the constant liar, are still labelled experimental in Optuna 5.
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        # constant_liar: the trials asked ahead (converting while earlier ones measure) count
        # as pending with a pessimistic value, so asking several at once spreads them out
        # instead of proposing the same point again.
        tpe = optuna.samplers.TPESampler(
            seed=seed, n_startup_trials=8, multivariate=True, group=True, constant_liar=True
        )
    return repeat_escape(tpe, seed)


def sampler_for(strategy: str, seed: int) -> optuna.samplers.BaseSampler:
    """The sampler ``search.strategy`` names: ``nnsweep`` (:func:`make_sampler`, with the
    coordinator's moves), ``random`` (Optuna's ``RandomSampler``) or ``optuna`` (Optuna's
    default sampler, TPE with its default settings). Only ``nnsweep`` gets the moves
    (:func:`moves_on`); the others exist to be compared with it as a user would run them.
    """
    import optuna

    if strategy == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if strategy == "optuna":
        return optuna.samplers.TPESampler(seed=seed)
    return make_sampler(seed)


def moves_on(strategy: str) -> bool:
    """Whether the coordinator's moves (repair, refine, ...) propose before the sampler."""
    return strategy == "nnsweep"


def repeat_escape(inner: optuna.samplers.BaseSampler, seed: int, keep: float = 0.0) -> optuna.samplers.BaseSampler:
    """``inner``, except that the trial after a repeat is a mutation of that repeat.

    A repeat is a finished trial whose parameters equal an earlier finished trial's.
    A model-based sampler that proposed a configuration already measured tends to
    propose it again (the repeat, told with its known values, reinforces its model),
    so the coordinator's re-ask would meet the same proposal. The next trial instead
    keeps each of the repeat's parameters with probability ``keep`` and draws the
    others at random (``keep=0``: a plain random draw): a neighbour of a configuration
    the model likes, not yet measured.
    """
    return _escape_class()(inner, seed, keep)


@functools.cache
def _escape_class() -> type[Any]:
    from optuna.samplers import BaseSampler, RandomSampler
    from optuna.trial import TrialState

    finished = (TrialState.COMPLETE, TrialState.FAIL)

    class RepeatEscape(BaseSampler):  # type: ignore[misc]
        def __init__(self, inner: BaseSampler, seed: int, keep: float) -> None:
            self._inner = inner
            self._random = RandomSampler(seed=seed)
            self._rng = random.Random(seed)
            self._keep = keep
            self._escaping: dict[int, dict[str, Any]] = {}  # trial number -> the repeat's params

        def _repeat(self, study: optuna.Study) -> dict[str, Any] | None:
            done = study.get_trials(deepcopy=False, states=finished)
            if len(done) < 2:
                return None
            last = max(done, key=lambda t: t.number)
            if any(t.params == last.params for t in done if t.number != last.number):
                return dict(last.params)
            return None

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
            if trial.number not in self._escaping:
                return self._inner.sample_independent(study, trial, name, distribution)
            previous = self._escaping[trial.number]
            if name in previous and self._rng.random() < self._keep:
                value = previous[name]
                if distribution._contains(distribution.to_internal_repr(value)):
                    return value
            return self._random.sample_independent(study, trial, name, distribution)

        def before_trial(self, study: optuna.Study, trial: Any) -> None:
            self._inner.before_trial(study, trial)
            self._random.before_trial(study, trial)
            repeat = self._repeat(study)
            if repeat is not None:
                self._escaping[trial.number] = repeat

        def after_trial(
            self, study: optuna.Study, trial: Any, state: TrialState, values: Sequence[float] | None
        ) -> None:
            self._inner.after_trial(study, trial, state, values)
            self._random.after_trial(study, trial, state, values)
            self._escaping.pop(trial.number, None)

        def reseed_rng(self) -> None:
            self._inner.reseed_rng()
            self._random.reseed_rng()

    return RepeatEscape
