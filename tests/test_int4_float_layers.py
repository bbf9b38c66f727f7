"""Per-layer formats for ``int4_weight``: the linear layers ``quant.float_layers`` names stay
float while the others go 4-bit, ranked by each linear layer's damage at 4 bits (torchao's
8da4w in eager PyTorch), so the sweep's float-layer count and repair work for 4-bit as for int8."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from nnsweep.artifacts import deploy
from nnsweep.artifacts.cache import ArtifactCache
from nnsweep.core.config import DeploymentConfig, QuantConfig, QuantMode
from nnsweep.core.quant import Granularity
from nnsweep.models import ModelBundle, load_model, register_live
from nnsweep.runtimes.common import int4
from nnsweep.sensitivity.int4 import MODE
from nnsweep.sensitivity.ranking import ranking
from nnsweep.spec import parse_spec
from nnsweep.sweep.space import device_space, suggest


class Tower(nn.Module):
    """Three linear layers; ``mid``'s weights are heavy-tailed (log-normal magnitudes), so each
    4-bit group's few large weights set a scale that rounds most of the rest to zero: the
    layer 4 bits hurt most."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(64, 256)
        self.mid = nn.Linear(256, 64)
        self.out = nn.Linear(64, 10)
        with torch.no_grad():
            spread = torch.exp(1.5 * torch.randn(self.mid.weight.shape))
            self.mid.weight.copy_(self.mid.weight.sign() * spread / spread.mean() * self.mid.weight.abs().mean())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.mid(torch.relu(self.inp(x))))).mean(dim=1)


@pytest.fixture(scope="module")
def tower() -> ModelBundle:
    torch.manual_seed(0)
    return load_model(register_live("int4_tower", Tower().eval(), torch.randn(1, 8, 64)))


def _int4(runtime: str, *float_layers: str) -> DeploymentConfig:
    return DeploymentConfig(runtime, quant=QuantConfig(QuantMode.INT4_WEIGHT, group_size=32, float_layers=float_layers))


def test_float_layers_belong_to_int4_weight_too_and_change_its_digest() -> None:
    assert _int4("executorch", "mid").quant.float_layers == ("mid",)
    assert _int4("executorch", "mid").digest() != _int4("executorch").digest()
    assert QuantConfig(QuantMode.FP16, float_layers=("mid",)).float_layers == ()


def test_the_plan_leaves_the_named_linear_layers_float_and_says_why() -> None:
    plan = int4.plan(Tower(), 32, ("mid", "nowhere"))
    assert plan.four_bit == ("inp", "out")
    assert "int4_weight: mid stays float: quant.float_layers keeps it float" in plan.notes()


def test_the_int4_ranking_puts_the_layer_4_bits_hurt_most_first(tower: ModelBundle, tmp_path: Path) -> None:
    report, hit = ranking(tower, "executorch", None, tmp_path, group_size=32)
    assert not hit and report.mode == MODE
    assert sorted(e.layer for e in report.layers) == ["inp", "mid", "out"]
    assert report.ranked()[0] == "mid"
    again, hit = ranking(tower, "onnxruntime", None, tmp_path, group_size=32)  # one ranking for every runtime
    assert hit and again.ranked() == report.ranked()
    int8, hit = ranking(tower, "onnxruntime", Granularity.PER_TENSOR, tmp_path)
    assert not hit and int8.mode != MODE  # the int8 ranking is its own entry


def test_the_sweep_asks_the_int4_ranking_for_an_int4_float_layer_count() -> None:
    import optuna

    spec = parse_spec(
        {
            "name": "s",
            "model": "digits",
            "space": {"runtime": ["onnxruntime"], "quant": ["int4_weight"], "float_layers": [1]},
        }
    )
    asked: list[tuple[object, ...]] = []

    def layers_for(
        runtime: str, granularity: Granularity | None, k: int, group_size: int | None = None
    ) -> tuple[str, ...]:
        asked.append((runtime, granularity, k, group_size))
        return ("mid",)[:k]

    space = device_space(spec, "host", {"onnxruntime": ("cpu",)}, 2, layers_for)
    study = optuna.create_study()
    study.enqueue_trial({"onnxruntime.quant": "int4_weight"})
    config = suggest(study.ask(), space)
    assert config.quant.mode is QuantMode.INT4_WEIGHT and config.quant.float_layers == ("mid",)
    assert asked == [("onnxruntime", None, 1, config.quant.group_size)]


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["executorch", "onnxruntime", "litert"])
def test_keeping_the_first_ranked_layer_float_brings_int4_closer_to_fp32(
    runtime: str, tower: ModelBundle, tmp_path: Path
) -> None:
    from nnsweep.bench import MeasureSettings
    from nnsweep.models import ModelSnapshot

    cache = ArtifactCache(tmp_path)
    snapshot, settings = ModelSnapshot.of(tower), MeasureSettings(warmup=1, iters=3)

    def sqnr(config: DeploymentConfig) -> float:
        artifact = deploy.convert(tower, config, cache)[0]
        result = deploy.measure(snapshot, artifact, settings, cache_hit=False)
        return float(result.evaluation.fidelity.sqnr_db)

    ranked = ranking(tower, runtime, None, tmp_path, group_size=32)[0].ranked()
    kept = deploy.convert(tower, _int4(runtime, ranked[0]), cache)[0]
    assert f"int4_weight: {ranked[0]} stays float: quant.float_layers keeps it float" in kept.partitions.notes
    first, last, none = sqnr(_int4(runtime, ranked[0])), sqnr(_int4(runtime, ranked[-1])), sqnr(_int4(runtime))
    assert first > none + 0.5 and first > last, (first, last, none)


def test_an_infeasible_int4_trial_is_repaired_with_one_more_linear_layer_float() -> None:
    from nnsweep.sweep.moves import repaired

    spec = parse_spec(
        {
            "name": "s",
            "model": "digits",
            "space": {"runtime": ["onnxruntime"], "quant": ["int4_weight"], "float_layers": [0, 1, 2]},
        }
    )
    asked: list[int | None] = []

    def layers_for(
        runtime: str, granularity: Granularity | None, k: int, group_size: int | None = None
    ) -> tuple[str, ...]:
        asked.append(group_size)
        return ("mid", "out", "inp")[:k]

    space = device_space(spec, "host", {"onnxruntime": ("cpu",)}, 2, layers_for)
    config = DeploymentConfig("onnxruntime", ("cpu",), QuantConfig(QuantMode.INT4_WEIGHT, group_size=128))
    fixed = repaired(config, space)
    assert fixed is not None and fixed.quant.float_layers == ("mid",) and fixed.quant.group_size == 128
    assert asked == [128]  # the int4 ranking at the trial's group size
