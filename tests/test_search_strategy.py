"""search.strategy and search.seed: what they parse to, the sampler each picks, and which gets the moves."""

from __future__ import annotations

import pytest

from nnsweep.core.errors import SpecError
from nnsweep.spec import parse_spec
from nnsweep.sweep.sampler import STRATEGIES, moves_on, sampler_for


def test_default_is_nnsweep_with_seed_0() -> None:
    spec = parse_spec({"name": "s", "model": "digits"})
    assert (spec.search.strategy, spec.search.seed) == ("nnsweep", 0)


def test_strategy_and_seed_parse() -> None:
    spec = parse_spec({"name": "s", "model": "digits", "search": {"strategy": "random", "seed": 3}})
    assert (spec.search.strategy, spec.search.seed) == ("random", 3)


@pytest.mark.parametrize("search", [{"strategy": "tpe"}, {"seed": -1}, {"seed": "1"}])
def test_bad_values_name_the_key(search: dict[str, object]) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec({"name": "s", "model": "digits", "search": search})
    assert "search." in str(err.value)


def test_each_strategy_picks_its_sampler_and_only_nnsweep_moves() -> None:
    import optuna

    assert isinstance(sampler_for("random", 1), optuna.samplers.RandomSampler)
    assert type(sampler_for("optuna", 1)) is optuna.samplers.TPESampler
    assert type(sampler_for("nnsweep", 1)).__name__ == "RepeatEscape"
    assert [moves_on(s) for s in STRATEGIES] == [True, False, False]
