"""The coordinator's own moves (nnsweep.sweep.moves): repair and refine."""

from __future__ import annotations

import dataclasses

from nnsweep.core.config import DeploymentConfig, Granularity, PartitionLimits, QuantConfig, QuantMode
from nnsweep.core.results import TrialRecord, TrialStatus
from nnsweep.spec import Objective, parse_spec
from nnsweep.sweep.lifecycle import Role
from nnsweep.sweep.moves import neighbours, next_move, repaired, resplit
from nnsweep.sweep.space import DeviceSpace, device_space, params_for

HOST = {"executorch": ("xnnpack", "portable"), "onnxruntime": ("cpu",), "torch": ("x86", "qnnpack")}
SPEC = parse_spec(
    {
        "name": "s",
        "model": "digits",
        "space": {
            "runtime": ["executorch", "onnxruntime"],
            "quant": ["fp32", "dynamic_int8", "static_int8"],
            "granularity": ["per_tensor", "per_channel"],
            "backends": {"executorch": ["xnnpack", "portable"]},
            "max_delegated_partitions": [0, 1],
            "min_nodes_per_partition": {"low": 1, "high": 2},
            "float_layers": [0, 1, 3],
        },
    }
)
OBJECTIVES = (Objective("accuracy", "maximize"), Objective("latency_p50_ms", "minimize"))
RANKING = ("blocks.2.pw1", "blocks.2.dw", "stem.0", "classifier")


def ranked(runtime: str, granularity: Granularity | None, k: int, group_size: int | None = None) -> tuple[str, ...]:
    return RANKING[:k]


SPACE: DeviceSpace = device_space(SPEC, "host", HOST, cores=1, layers_for=ranked)


def int8(k: int = 0, runtime: str = "executorch", **limits: int) -> DeploymentConfig:
    backends = ("xnnpack", "portable") if runtime == "executorch" else ("cpu",)
    quant = QuantConfig(QuantMode.STATIC_INT8, granularity=Granularity.PER_CHANNEL, float_layers=RANKING[:k])
    return DeploymentConfig(runtime, backends, quant, PartitionLimits(**limits), 1)


def record(number: int, config: DeploymentConfig, accuracy: float, latency: float) -> TrialRecord:
    metrics = {"accuracy": accuracy, "latency_p50_ms": latency}
    return TrialRecord("s", "host", number, config, TrialStatus.OK, metrics, feasible=accuracy >= 0.98)


def test_a_repair_keeps_the_next_count_of_the_ranking_float_and_nothing_else() -> None:
    fixed = repaired(int8(0, max_delegated_partitions=1), SPACE)
    assert fixed == int8(1, max_delegated_partitions=1)
    assert repaired(int8(1), SPACE) == int8(3)  # the space's next count, not K+1
    assert repaired(int8(3), SPACE) is None  # the highest count already
    fp32 = DeploymentConfig("executorch", ("xnnpack", "portable"), QuantConfig(QuantMode.FP32), PartitionLimits(), 1)
    assert repaired(fp32, SPACE) is None  # nothing to keep float


def test_no_repair_where_the_runtime_keeps_no_layers_float() -> None:
    no_float = dataclasses.replace(
        SPACE, choices={k: dataclasses.replace(v, float_layers=(0,)) for k, v in SPACE.choices.items()}
    )
    assert repaired(int8(0), no_float) is None


def test_no_repair_and_no_neighbour_with_float_layers_where_the_runtime_cannot_rank_the_model() -> None:
    """A runtime whose quantizer fails on the model (the host's ranking raises SpecError):
    no repair is queued, and the neighbours of the best are those without float layers."""
    from nnsweep.core.errors import SpecError

    def cannot(runtime: str, granularity: Granularity | None, k: int, group_size: int | None = None) -> tuple[str, ...]:
        if runtime == "executorch" and k:
            raise SpecError("executorch.float_layers", "its quantizer cannot rank the layers of this model")
        return RANKING[:k]

    space = dataclasses.replace(SPACE, layers_for=cannot)
    assert repaired(int8(0), space) is None
    assert repaired(int8(0, runtime="onnxruntime"), space) == int8(1, runtime="onnxruntime")
    near = neighbours(int8(0), space)
    assert near and all(not c.quant.float_layers for c in near if c.runtime == "executorch")
    broken = [record(0, int8(0), 0.5, 1.0)]
    move = next_move(broken, OBJECTIVES, space, lambda c: False)
    assert move is None or move[0].quant.float_layers == ()


def test_neighbours_change_one_parameter_and_keep_the_runtime() -> None:
    start = int8(1)
    found = neighbours(start, SPACE)
    assert found and len({c.digest() for c in found}) == len(found)
    assert start.digest() not in {c.digest() for c in found}
    base = params_for(start, SPACE)
    for near in found:
        assert near.runtime == start.runtime
        changed = {k for k, v in params_for(near, SPACE).items() if base.get(k) != v}
        changed |= set(base) - set(params_for(near, SPACE))
        # one parameter, and those it brings in or drops (fp32 has no granularity or float layers)
        assert changed and (len(changed) == 1 or "executorch.quant" in changed or "executorch.backends" in changed)
    assert int8(3) in found and int8(0) in found  # the other float-layer counts
    assert int8(1, max_delegated_partitions=1) in found and int8(1, min_nodes_per_partition=2) in found


def test_an_infeasible_int8_trial_that_could_win_is_repaired_first() -> None:
    baseline = record(0, dataclasses.replace(int8(), quant=QuantConfig(QuantMode.FP32)), 0.99, 0.10)
    broken = record(1, int8(0), 0.77, 0.05)  # faster than the best feasible: worth repairing
    move = next_move([baseline, broken], OBJECTIVES, SPACE, lambda c: False)
    assert move == (int8(1), Role.REPAIR)


def test_a_trial_the_best_dominates_is_not_repaired_and_the_best_is_refined() -> None:
    best = record(0, int8(1), 0.99, 0.05)
    slow_and_broken = record(1, int8(0, runtime="onnxruntime"), 0.5, 0.20)  # a repair only slows it more
    tried = {best.config.digest(), slow_and_broken.config.digest()}
    move = next_move([best, slow_and_broken], OBJECTIVES, SPACE, lambda c: c.digest() in tried)
    assert move is not None and move[1] is Role.REFINE
    assert move[0] in neighbours(best.config, SPACE)


def test_no_move_once_every_repair_and_neighbour_is_tried() -> None:
    best = record(0, int8(1), 0.99, 0.05)
    assert next_move([best], OBJECTIVES, SPACE, lambda c: True) is None
    assert next_move([], OBJECTIVES, SPACE, lambda c: False) is None  # nothing measured: the sampler's turn


def test_a_repair_goes_at_once_to_the_float_count_an_earlier_repair_needed() -> None:
    baseline = record(0, dataclasses.replace(int8(), quant=QuantConfig(QuantMode.FP32)), 0.99, 0.10)
    repaired_before = record(1, int8(3), 0.99, 0.06)  # executorch met the constraint with 3 layers float
    broken = record(2, int8(0, runtime="onnxruntime"), 0.77, 0.04)  # faster than that: worth repairing
    move = next_move([baseline, repaired_before, broken], OBJECTIVES, SPACE, lambda c: False)
    assert move == (int8(3, runtime="onnxruntime"), Role.REPAIR)  # not the next count, 1
    assert repaired(int8(0), SPACE, at_least=2) == int8(3)  # the space's first count from there on
    assert repaired(int8(1), SPACE, at_least=1) == int8(3)  # never fewer than the configuration keeps


def test_neighbours_change_the_backend_order_or_the_mode_last() -> None:
    found = neighbours(int8(1), SPACE)
    coarse = [
        i for i, c in enumerate(found) if c.backends != int8(1).backends or c.quant.mode is not QuantMode.STATIC_INT8
    ]
    assert coarse and coarse == list(range(len(found) - len(coarse), len(found)))


def test_a_slower_trial_is_repaired_once_the_best_is_refined_if_a_repair_could_reach_the_front() -> None:
    baseline = record(0, dataclasses.replace(int8(), quant=QuantConfig(QuantMode.FP32)), 0.99, 0.10)
    best = record(1, int8(1), 0.985, 0.05)  # feasible, fastest, less accurate than fp32
    slower = record(2, int8(0, runtime="onnxruntime"), 0.50, 0.07)  # the best dominates it as it is
    beaten = record(3, int8(0, max_delegated_partitions=1), 0.50, 0.12)  # fp32 beats it
    records = [baseline, best, slower, beaten]
    # first the best's neighbours: a repair of ``slower`` cannot beat the best
    tried = {r.config.digest() for r in records}
    move = next_move(records, OBJECTIVES, SPACE, lambda c: c.digest() in tried)
    assert move is not None and move[1] is Role.REFINE
    # then ``slower``: with fp32's accuracy it would be a front point (more accurate than the best)
    tried |= {c.digest() for c in neighbours(best.config, SPACE)}
    move = next_move(records, OBJECTIVES, SPACE, lambda c: c.digest() in tried)
    assert move == (int8(1, runtime="onnxruntime"), Role.REPAIR)
    # never ``beaten``: even at fp32's accuracy, fp32 itself is faster
    tried.add(int8(1, runtime="onnxruntime").digest())
    tried |= {c.digest() for r in records for c in resplit(r.config, SPACE)}  # the front's other limits
    assert next_move(records, OBJECTIVES, SPACE, lambda c: c.digest() in tried) is None


def test_the_fronts_int8_points_ascend_one_float_count_most_accurate_first_once_nothing_else_is_left() -> None:
    baseline = record(0, dataclasses.replace(int8(), quant=QuantConfig(QuantMode.FP32)), 0.99, 0.10)
    best = record(1, int8(1), 0.982, 0.05)
    accurate = record(2, int8(1, runtime="onnxruntime"), 0.988, 0.06)  # on the front, above the best
    dominated = record(3, int8(1, max_delegated_partitions=1), 0.981, 0.07)  # off the front: no ascent
    records = [baseline, best, accurate, dominated]
    tried = {r.config.digest() for r in records} | {c.digest() for c in neighbours(best.config, SPACE)}
    move = next_move(records, OBJECTIVES, SPACE, lambda c: c.digest() in tried)
    assert move == (int8(3, runtime="onnxruntime"), Role.REFINE)  # the most accurate int8 point, one count up
    tried.add(int8(3, runtime="onnxruntime").digest())
    # the best's own ascent is one of its neighbours (tried); fp32 has no count; the dominated trial is off the front
    tried |= {c.digest() for r in records for c in resplit(r.config, SPACE)}
    assert next_move(records, OBJECTIVES, SPACE, lambda c: c.digest() in tried) is None


def test_once_the_front_has_ascended_its_points_are_tried_with_other_partition_limits_most_accurate_first() -> None:
    fp32 = dataclasses.replace(int8(), quant=QuantConfig(QuantMode.FP32))
    baseline = record(0, fp32, 0.99, 0.10)  # the front's most accurate point
    best = record(1, int8(1), 0.982, 0.05)
    accurate = record(2, int8(3), 0.988, 0.06)  # on the front, at the space's highest count: no ascent
    dominated = record(3, int8(1, max_delegated_partitions=1), 0.981, 0.07)  # off the front
    records = [baseline, best, accurate, dominated]
    tried = {r.config.digest() for r in records} | {c.digest() for c in neighbours(best.config, SPACE)}
    moves = []
    while (move := next_move(records, OBJECTIVES, SPACE, lambda c: c.digest() in tried)) is not None:
        moves.append(move)
        tried.add(move[0].digest())
    assert {role for _, role in moves} == {Role.REFINE}
    assert [c for c, _ in moves] == [*resplit(fp32, SPACE), *resplit(accurate.config, SPACE)]
    # every variant keeps the quantized model and the backend order: only the limits change
    variants = resplit(accurate.config, SPACE)
    assert {(c.runtime, c.backends, c.quant) for c in variants} == {
        (accurate.config.runtime, accurate.config.backends, accurate.config.quant)
    }
    assert {c.partitions for c in variants} == {PartitionLimits(1, 1), PartitionLimits(0, 2)}  # one limit at a time
    assert resplit(int8(1, runtime="onnxruntime"), SPACE) == []  # a runtime that delegates nothing
