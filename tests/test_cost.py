"""The cost model of cost-aware proposals (benchmarks/cost_model.py): predictions from a few
measured trials, a candidate predicted dominated, and a cached stage costing nothing."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest

from nnsweep.core.config import DeploymentConfig
from nnsweep.core.quant import Granularity, PartitionLimits, QuantConfig, QuantMode


def _cost_model():  # type: ignore[no-untyped-def]
    """benchmarks/cost_model.py, a benchmark's module (loaded as search_replay's tests load theirs)."""
    if "cost_model" not in sys.modules:
        path = Path(__file__).resolve().parent.parent / "benchmarks" / "cost_model.py"
        spec = importlib.util.spec_from_file_location("cost_model", path)
        assert spec is not None and spec.loader is not None
        sys.modules["cost_model"] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules["cost_model"]


CostConfig, CostModel, stage_of = _cost_model().CostConfig, _cost_model().CostModel, _cost_model().stage_of

FP32 = QuantConfig()
INT8 = QuantConfig(mode=QuantMode.DYNAMIC_INT8, granularity=Granularity.PER_TENSOR)


def _et(
    quant: QuantConfig = FP32, backends: tuple[str, ...] = ("xnnpack", "portable"), parts: int = 0
) -> DeploymentConfig:
    return DeploymentConfig(
        runtime="executorch", backends=backends, quant=quant, partitions=PartitionLimits(max_delegated_partitions=parts)
    )


def test_nothing_measured_predicts_nothing_and_skips_nothing() -> None:
    model = CostModel(CostConfig())
    assert model.predict(_et()) is None
    assert not model.dominated(_et())


def test_a_candidate_is_predicted_from_its_cell_shrunk_toward_the_coarser_ones() -> None:
    model = CostModel(CostConfig(prior_weight=1.0))
    model.measured(_et(), (0.95, 4.0), feasible=True)
    model.measured(_et(INT8), (0.94, 1.0), feasible=True)
    # the int8 program with another partition limit: its finest cell is new, the coarser
    # (runtime, order, mode) cell holds the int8 trial, so the prediction sits near 1 ms
    p = model.predict(_et(INT8, parts=1))
    assert p is not None
    assert 1.0 <= p.latency < 2.0
    assert p.accuracy == pytest.approx(0.94, abs=0.005)
    assert p.evidence == 1
    # a runtime never measured gets the shrunk mean of everything, with no evidence
    other = model.predict(DeploymentConfig(runtime="torch"))
    assert other is not None and other.evidence == 0


def test_a_candidate_predicted_dominated_is_skipped_and_never_ranked_first() -> None:
    model = CostModel(CostConfig(margin=0.25))
    model.measured(_et(), (0.95, 4.0), feasible=True)
    model.measured(_et(INT8), (0.95, 1.0), feasible=True)  # as accurate, four times faster
    portable = _et(backends=("portable",))
    model.measured(portable, (0.95, 30.0), feasible=True)
    slow = _et(INT8, backends=("portable",))  # int8 on the portable kernels: predicted slow
    model.measured(
        dataclasses.replace(slow, partitions=PartitionLimits(max_delegated_partitions=2)), (0.95, 25.0), feasible=True
    )
    assert model.dominated(slow)
    fast = _et(INT8, parts=1)  # the fastest point's sibling: shrinkage toward the runtime's
    assert not model.dominated(fast)  # mean predicts it a little slower, within the margin
    assert model.best([slow], reference=(0.9, 40.0)) is None  # nothing to gain from a dominated one
    assert model.gain(slow, (0.9, 40.0), None) == 0.0


def test_without_evidence_in_its_runtime_order_and_mode_nothing_is_skipped() -> None:
    model = CostModel(CostConfig(min_evidence=1))
    model.measured(_et(), (0.95, 0.5), feasible=True)
    model.measured(DeploymentConfig(runtime="torch"), (0.95, 100.0), feasible=True)
    # torch int8 was never measured: predicted from torch fp32 (slow), but not skipped on a guess
    assert not model.dominated(DeploymentConfig(runtime="torch", quant=INT8))


def test_a_cached_stage_costs_nothing_to_convert() -> None:
    model = CostModel(CostConfig())
    first, sibling, other = _et(INT8), _et(INT8, parts=1), _et(FP32)
    assert stage_of(first) == stage_of(sibling) != stage_of(other)
    model.converted(first, 10.0, measuring=2.0)  # built the int8 program
    model.converted(sibling, 1.0, measuring=2.0)  # lowered it again, the program cached
    assert model.seconds(sibling) == pytest.approx(1.0 + 2.0)  # its stage is built: lowering and measuring
    assert model.seconds(other) == pytest.approx(10.0 + 2.0)  # a new stage: built as the first one was
    model.built([stage_of(other)])  # found in the cache from an earlier sweep
    assert model.seconds(other) == pytest.approx(1.0 + 2.0)


def test_gain_per_second_prefers_the_cheaper_of_two_equal_gains() -> None:
    model = CostModel(CostConfig())
    model.measured(_et(), (0.95, 4.0), feasible=True)
    model.measured(_et(INT8), (0.95, 1.0), feasible=True)
    model.converted(_et(INT8), 10.0)
    model.converted(_et(INT8, parts=2), 1.0)
    per_channel = QuantConfig(mode=QuantMode.DYNAMIC_INT8, granularity=Granularity.PER_CHANNEL)
    cached, fresh = _et(INT8, parts=1), _et(per_channel)  # the same expected point; only one stage is built
    assert stage_of(fresh) != stage_of(cached)
    picked = model.best([fresh, cached], reference=(0.9, 5.0))
    assert picked == cached


@pytest.mark.parametrize("bad", [{"margin": -0.1}, {"prior_weight": 0.0}, {"pool": 0}, {"default_seconds": 0.0}])
def test_the_config_rejects_nonsense(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        CostConfig(**bad)  # type: ignore[arg-type]
