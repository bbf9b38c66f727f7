"""The replay machinery of the search benchmark (benchmarks/search_replay.py), on a tiny
synthetic table: no conversion, no measurement."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path
from types import ModuleType

import optuna
import pytest

from nnsweep.spec import parse_spec
from nnsweep.sweep.space import baseline_configs, device_space, suggest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _module(name: str) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


table_mod = _module("search_table")
replay = _module("search_replay")

SPEC = parse_spec(
    {
        "name": "tiny",
        "model": "digits",
        "constraints": {"max_accuracy_drop": 0.01},
        "space": {
            "runtime": ["onnxruntime", "torch"],
            "quant": ["fp32", "dynamic_int8", "static_int8"],
            "granularity": ["per_tensor", "per_channel"],
            "calibration": ["minmax"],
            "backends": {"torch": ["x86", "qnnpack"]},
            "threads": [1],
        },
    }
)
SPACE = device_space(SPEC, "host", {"onnxruntime": ("cpu",), "torch": ("x86", "qnnpack")}, cores=2)


def _table(shared: bool = True) -> object:
    """Synthetic outcomes; the baseline (torch fp32) is at accuracy 0.95. With ``shared``,
    the two granularities of onnxruntime dynamic int8 share one measurement (equal bytes)."""
    configs = table_mod.enumerate_configs(SPACE)
    rng = random.Random(7)
    outcomes = {}
    base = baseline_configs(SPACE)[0].digest()
    for c in configs:
        d = c.digest()
        values = (0.95, 1.0) if d == base else (round(rng.uniform(0.9, 0.96), 3), round(rng.uniform(0.1, 2.0), 3))
        key = d
        if shared and c.runtime == "onnxruntime" and c.quant.mode.value == "dynamic_int8":
            key, values = "ort-dynamic", (0.945, 0.3)
        outcomes[d] = replay.Outcome(values, key)
    return replay.Table(SPACE, {c.digest(): c for c in configs}, outcomes, 0.95, 0.01, name="tiny")


def test_enumeration_lists_every_configuration_suggest_can_return_once() -> None:
    configs = table_mod.enumerate_configs(SPACE)
    digests = [c.digest() for c in configs]
    assert len(digests) == len(set(digests))
    # onnxruntime: fp32 + dynamic x2 granularities + static x2; torch: fp32 + 2 orders x (dynamic x2 + static x2)
    assert len(configs) == 1 + 2 + 2 + 1 + 2 * 4
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(40):
        assert suggest(study.ask(), SPACE).digest() in set(digests)


def test_hypervolume_of_a_known_front() -> None:
    points = [(0.9, 1.0), (0.8, 0.5), (0.85, 1.5), (0.8, 0.5)]  # (0.85, 1.5) is dominated; a duplicate
    assert replay.pareto_front(points) == [(0.8, 0.5), (0.9, 1.0)]
    # (0.8-0.7)*(2-0.5) + (0.9-0.8)*(2-1.0)
    assert replay.hypervolume(points, (0.7, 2.0)) == pytest.approx(0.25)
    assert replay.hypervolume([(0.6, 0.5)], (0.7, 2.0)) == 0.0  # beyond the reference: nothing


def test_table_best_is_the_fastest_feasible() -> None:
    table = _table()
    feasible = [o.values for o in table.outcomes.values() if o.values[0] >= 0.94 - 1e-12]
    assert table.best == min(feasible, key=lambda p: (p[1], -p[0]))
    assert table.front_hv > 0


def test_random_without_replacement_finds_the_best_within_the_space() -> None:
    table = _table()
    for seed in range(10):
        run = replay.replay_random(table, seed)
        assert run.best_at <= table.measurements
        assert run.hv_at <= table.measurements
        keys = [table.outcomes[d].key for d in run.measured]
        assert len(keys) == len(set(keys))  # never paid twice for one measurement


def test_repeats_do_not_count() -> None:
    table = _table()
    ort = [c for c in table.configs.values() if c.runtime == "onnxruntime" and c.quant.mode.value == "dynamic_int8"]
    again = [ort[0]] * 4 + [ort[1]]  # the same digest four times, then its byte-identical twin
    run = replay.replay_study(table, optuna.samplers.RandomSampler(seed=0), enqueue=again, max_trials=2)
    assert run.counted == 2
    assert run.measured[0] == ort[0].digest()
    assert table.outcomes[run.measured[1]].key != "ort-dynamic"  # the second paid trial is something new
    assert run.repeats == run.proposals - 2 >= 4
    capped = replay.replay_study(
        table, optuna.samplers.RandomSampler(seed=0), enqueue=[ort[0]] * 4, repeat_cap=2, max_trials=2
    )
    assert capped.cap_hits == 1  # two repeats told free, the third counted
    assert capped.counted == 2 and capped.repeats == 2


def test_a_study_replay_reaches_both_targets() -> None:
    table = _table()
    run = replay.study_strategy(replay.nnsweep_today)(table, 0)
    assert run.best_at < float("inf") and run.hv_at < float("inf")
    assert run.counted == max(run.best_at, run.hv_at)  # it stops once both are reached


def test_make_sampler_is_a_sampler_and_replays() -> None:
    from nnsweep.sweep.sampler import make_sampler

    assert isinstance(make_sampler(0), optuna.samplers.BaseSampler)
    run = replay.study_strategy(make_sampler)(_table(), 1)
    assert run.best_at < float("inf")


def test_repeat_escape_samples_at_random_after_a_repeat() -> None:
    from nnsweep.sweep.sampler import repeat_escape

    sampler = repeat_escape(optuna.samplers.TPESampler(seed=0, n_startup_trials=0), seed=0)
    study = optuna.create_study(sampler=sampler)
    for _ in range(2):
        study.enqueue_trial({"x": 1})
    for _ in range(2):
        trial = study.ask()
        trial.suggest_categorical("x", [0, 1, 2])
        study.tell(trial, 1.0)
    assert sampler._escaping == {}
    trial = study.ask()  # the last finished trial repeated an earlier one
    assert sampler._escaping == {trial.number: {"x": 1}}
    trial.suggest_categorical("x", [0, 1, 2])
    study.tell(trial, 0.5)
    assert sampler._escaping == {}


def test_random_after_the_starts_measures_them_first() -> None:
    from nnsweep.sweep.space import mode_starts

    table = _table()
    starts = [*baseline_configs(SPACE), *mode_starts(SPACE)]
    run = replay.random_with_starts(table, 3)
    keys = [table.outcomes[c.digest()].key for c in starts]
    firsts = list(dict.fromkeys(keys))  # a start sharing another's measurement is free
    assert [table.outcomes[d].key for d in run.measured[: len(firsts)]] == firsts
    keys_paid = [table.outcomes[d].key for d in run.measured]
    assert len(keys_paid) == len(set(keys_paid))
    assert run.best_at <= table.measurements and run.hv_at <= table.measurements


def test_layers_from_recorded_rankings_rebuild_the_configurations() -> None:
    """A float_layers table's meta.rankings names the same layers the measurement named."""
    from nnsweep.core.config import Granularity

    layers_for = table_mod.layers_from({"torch|per_tensor": ["b", "a", "c"], "torch|per_channel": ["c", "b", "a"]})
    assert layers_for("torch", Granularity.PER_TENSOR, 2) == ("b", "a")
    assert layers_for("torch", None, 1) == ("b",)  # dynamic int8: the per-tensor ranking
    assert layers_for("torch", Granularity.PER_CHANNEL, 0) == ()
    spec = table_mod.finite_spec(
        table_mod.parse_spec(table_mod.OUTLIER_SPEC),
        ("fp32", "static_int8"),
        (1, 1),
        1,
        granularity=("per_tensor",),
        max_partitions=(0,),
        float_layers=(0, 2),
    )
    space = device_space(spec, "host", {"torch": ("x86", "qnnpack")}, 2, layers_for)
    configs = table_mod.enumerate_configs(space)
    assert sorted(c.quant.float_layers for c in configs) == [(), (), ("a", "b")]  # kept sorted


def test_a_named_space_is_rebuilt_from_its_meta() -> None:
    """A --space table's meta says all the replay needs: the inline spec (a model file named
    relative to benchmarks/, so no checkout's path), the narrowed grid and the rankings."""
    spec = table_mod.parse_spec(table_mod.HELDOUT_SPEC, source=table_mod.SPEC_SOURCE)
    assert spec.model == f"{BENCHMARKS / 'heldout_model.py'}:heldout_mixer"
    available = {"onnxruntime": ["cpu"], "executorch": ["xnnpack", "portable"], "torch": ["x86", "qnnpack"]}
    rankings = {
        f"{rt}|{g}": ["mixers.0.fc1", "mixers.0.fc2", "embed", "head"]
        for rt in available
        for g in ("per_tensor", "per_channel")
    }
    quant = table_mod.HELDOUT_SPEC["space"]["quant"]
    narrowed = table_mod.finite_spec(spec, tuple(quant), (1, 2), 1)
    tuples = {k: tuple(v) for k, v in available.items()}
    space = device_space(narrowed, "host", tuples, 2, table_mod.layers_from(rankings))
    meta = {
        "spec_inline": table_mod.HELDOUT_SPEC,
        "device": "host",
        "threads": 1,
        "quant": quant,
        "min_nodes": [1, 2],
        "calibration": ["minmax"],
        "available": available,
        "cores": 2,
        "rankings": rankings,
        **table_mod._space_meta(space),
    }
    expected = [c.digest() for c in table_mod.enumerate_configs(space)]
    assert [c.digest() for c in table_mod.enumerate_configs(table_mod.table_space(meta))] == expected
    assert any(
        c.quant.float_layers == ("embed", "mixers.0.fc1", "mixers.0.fc2") for c in table_mod.enumerate_configs(space)
    )


def test_the_summary_says_whether_the_best_is_a_default_deployment() -> None:
    table = _table()
    described = replay.best_described(table)
    assert described and all(kind for _, kind in described)
    base = baseline_configs(SPACE)[0].digest()
    table.outcomes[base] = replay.Outcome((0.95, 0.01), base)  # the fp32 baseline made the fastest
    table.__post_init__()
    assert replay.best_described(table) == [(replay.best_described(table)[0][0], "a baseline")]
    assert "a baseline" in replay.summarise(table, [])


def test_a_configuration_within_3_percent_of_the_best_counts_as_near_it() -> None:
    table = _table()
    best = next(d for d, o in table.outcomes.items() if o.values == table.best)
    close = next(d for d, o in table.outcomes.items() if d != best and o.values is not None)
    # a feasible configuration 2 % slower than the best, measured first: near at trial 1, best later
    table.outcomes[close] = replay.Outcome((table.best[0], table.best[1] * 1.02), "close")
    run = replay.replay_random(table, 0, first=[table.configs[close], table.configs[best]])
    assert (run.near_at, run.best_at) == (1, 2)
    table.outcomes[close] = replay.Outcome((table.best[0], table.best[1] * 1.05), "close")  # 5 %: not near
    run = replay.replay_random(table, 0, first=[table.configs[close], table.configs[best]])
    assert (run.near_at, run.best_at) == (2, 2)


def test_a_stage_converted_before_costs_only_its_lowering() -> None:
    stage_of = _module("cost_model").stage_of

    base = _table()
    torch_int8 = [c for c in base.configs.values() if c.runtime == "torch" and c.quant.mode.value == "static_int8"]
    group = [c for c in torch_int8 if stage_of(c) == stage_of(torch_int8[0])]
    assert len(group) == 2  # the two backend orders share the quantized model
    first, sibling = group[0].digest(), group[1].digest()
    seconds = dict.fromkeys(base.configs, 1.0) | {first: 5.0}  # as built: the first paid the stage
    table = replay.Table(base.space, base.configs, base.outcomes, 0.95, 0.01, name="tiny", convert_s=seconds)
    built: set[str] = set()
    assert table.conversion_seconds(sibling, built) == pytest.approx(5.0)  # the stage, then its lowering
    assert table.conversion_seconds(first, built) == pytest.approx(1.0)  # the stage is built: lowering only


def test_only_the_cost_aware_replay_skips_or_picks() -> None:
    CostConfig = _module("cost_model").CostConfig

    table = _table()
    for seed in range(3):
        today = replay.nnsweep_strategy()(table, seed)
        assert today.skipped == [] and today.picked == 0
        assert replay.random_with_starts(table, seed).skipped == []
        # a margin nothing exceeds, no ranking: the cost-aware replay is today's, trial for trial
        inert = replay.nnsweep_strategy(cost=CostConfig(margin=1e9), pool=False)(table, seed)
        assert inert.measured == today.measured and inert.skipped == []
