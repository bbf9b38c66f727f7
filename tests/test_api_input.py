"""The Python API's input as a notebook user writes it: a mode name for ``quant``, a typo in
a field, the path of a sweep YAML. Each is taken, or is one SpecError naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from nnsweep.api import measure, sweep
from nnsweep.core.config import DeploymentConfig
from nnsweep.core.errors import SpecError


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10)).eval()


def test_quant_may_be_a_mode_name() -> None:
    # before: "quant: must be a mapping, got 'static_int8'"
    config = DeploymentConfig(runtime="onnxruntime", quant="static_int8")  # type: ignore[arg-type]
    assert config == DeploymentConfig(runtime="onnxruntime", quant={"mode": "static_int8"})  # type: ignore[arg-type]
    with pytest.raises(SpecError, match=r"quant\.mode: unknown value 'int4'; allowed: fp32"):
        DeploymentConfig(runtime="onnxruntime", quant="int4")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="quant: must be a mode name or a mapping, got 3"):
        DeploymentConfig(runtime="onnxruntime", quant=3)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"runtime": "onnxruntime", "thredas": 2}, "thredas: unknown field; allowed: backends, partitions, quant"),
        ({}, "runtime: is required"),
    ],
)
def test_measure_names_a_field_it_does_not_know(tmp_path: Path, options: dict[str, object], said: str) -> None:
    # before: "TypeError: DeploymentConfig.__init__() got an unexpected keyword argument 'thredas'"
    with pytest.raises(SpecError, match=said):
        measure(_net(), torch.zeros(1, 1, 8, 8), cache_dir=tmp_path, **options)


def test_sweep_refuses_what_is_not_a_spec() -> None:
    # before: "AttributeError: 'int' object has no attribute 'get'"
    with pytest.raises(SpecError, match="give a SweepSpec, a mapping or the path of a sweep YAML, not int"):
        sweep(3, _net(), torch.zeros(1, 1, 8, 8))  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="does not exist"):
        sweep("no/such/sweep.yaml", _net(), torch.zeros(1, 1, 8, 8))


@pytest.mark.integration
def test_sweep_takes_the_path_of_a_sweep_yaml(tmp_path: Path) -> None:
    # before: "AttributeError: 'str' object has no attribute 'get'"; a YAML without a model
    # takes the live one, as a mapping does, and the sweep's state is kept beside the file
    spec = tmp_path / "specs" / "live.yaml"
    spec.parent.mkdir()
    spec.write_text("name: live_path\nspace: {runtime: [onnxruntime], quant: [fp32]}\nbudget: {trials: 1}\n")
    results = sweep(str(spec), _net(), torch.zeros(1, 1, 8, 8), tracking=False, cache_dir=tmp_path / "cache")
    assert [r.device for r in results] == ["host"]
    assert (spec.parent / ".nnsweep" / "live_path").is_dir()
