"""A runtime from another package, registered through the ``nnsweep.runtimes`` entry point,
is probed, searched and measured like a built-in one, and keeps the layers its own ranking
(its sensitivity hook) finds most sensitive in float: the registry is the only list of runtimes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nnsweep.models.digits import DigitsNet

pytestmark = pytest.mark.integration

PLUGIN = '''
"""pt2: torch.export's ExportedProgram, saved with torch.export.save and run eagerly.

Its static int8 rounds each conv and linear weight to 255 levels (per tensor), except in
the layers ``quant.float_layers`` names; its ranking scores that rounding one layer at a time.
"""
from pathlib import Path

from nnsweep.bench import Runner
from nnsweep.core.config import Calibration, Granularity, QuantMode
from nnsweep.convert import ConversionResult, Converter, IOSpec, PartitionReport
from nnsweep.core.runtimes import RuntimeInfo


def rounded(module, keep_float):
    """A copy of ``module`` with the weights of its conv and linear layers on an int8 grid."""
    import copy

    import torch

    model = copy.deepcopy(module).eval()
    with torch.no_grad():
        for name, layer in model.named_modules():
            if name in keep_float or not isinstance(layer, (torch.nn.Conv2d, torch.nn.Linear)):
                continue
            scale = layer.weight.abs().max() / 127
            layer.weight.copy_(torch.round(layer.weight / scale) * scale)
    return model


def evaluator(bundle, split, per_channel, scoring):
    """The ranking's evaluator: the sweep's score (top-1 or its metric) and SQNR with the
    layers ``keep`` left unrounded."""
    import torch

    inputs = torch.from_numpy(split.inputs)

    def evaluate(keep):
        with torch.no_grad():
            outputs = scoring.outputs(rounded(bundle.module, keep), inputs, True).numpy()
        return scoring(outputs)

    return evaluate


class Pt2Converter(Converter):
    def convert(self, bundle, config, out_dir: Path) -> ConversionResult:
        import torch

        module = bundle.module
        if config.quant.mode is QuantMode.STATIC_INT8:
            module = rounded(module, set(config.quant.float_layers))
        program = torch.export.export(module, (bundle.example_input,))
        torch.export.save(program, str(out_dir / "model.pt2"))
        nodes = sum(1 for n in program.graph.nodes if n.op == "call_function")
        return ConversionResult("model.pt2", PartitionReport(config.backends, {"cpu": nodes}), IOSpec())


class Pt2Runner(Runner):
    def load(self) -> None:
        import torch

        self.module = torch.export.load(str(self.path)).module()

    def prepare(self, x):
        import torch

        return torch.from_numpy(self.io.prepare_input(x))

    def run(self, prepared):
        import torch

        with torch.no_grad():
            return self.module(prepared)

    def to_float(self, raw):
        return raw.numpy()


INFO = RuntimeInfo(
    name="pt2",
    backends=("cpu",),
    fallback="cpu",
    modes={QuantMode.FP32: frozenset(), QuantMode.STATIC_INT8: frozenset(Granularity)},
    unsupported={},
    full_interface=frozenset(),
    calibrations=frozenset({Calibration.MINMAX}),
    delegates=False,
    mixed_precision=None,  # its converter keeps quant.float_layers in float
    sensitivity="nnsweep_pt2:evaluator",
    converter="nnsweep_pt2:Pt2Converter",
    runner="nnsweep_pt2:Pt2Runner",
    packages=("torch",),
    artifact_suffix=".pt2",
    default_backends=("cpu",),
)
'''

PYPROJECT = """
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "nnsweep-pt2"
version = "0.1.0"

[project.entry-points."nnsweep.runtimes"]
pt2 = "nnsweep_pt2:INFO"

[tool.setuptools]
py-modules = ["nnsweep_pt2"]
"""


@pytest.fixture
def plugin_site(tmp_path: Path) -> Path:
    """The plug-in, installed by pip from its own pyproject.toml into a folder of its own."""
    src = tmp_path / "plugin"
    src.mkdir()
    (src / "pyproject.toml").write_text(PYPROJECT)
    (src / "nnsweep_pt2.py").write_text(textwrap.dedent(PLUGIN))
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(site),
            str(src),
        ],
        check=True,
        capture_output=True,
    )
    return site


def test_a_plugin_runtime_is_probed_searched_and_measured(tmp_path: Path, plugin_site: Path, models_dir: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "sweep.yaml").write_text(
        "name: plug\nmodel: digits\nspace: {runtime: [pt2], quant: [static_int8], float_layers: [1]}\n"
        "budget: {trials: 3}\n"
        "measure: {warmup: 1, iters: 20, remeasure: 0}\n"
    )
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "models").symlink_to(models_dir)
    env = dict(os.environ, PYTHONPATH=str(plugin_site), NNSWEEP_CACHE=str(cache))
    nnsweep = [sys.executable, "-m", "nnsweep.cli"]

    helped = subprocess.run([*nnsweep, "bench", "--help"], env=env, capture_output=True, text=True, check=True)
    assert "pt2" in helped.stdout  # the CLI's help lists what the registry holds
    devices = subprocess.run([*nnsweep, "devices", "--json"], env=env, capture_output=True, text=True, check=True)
    assert json.loads(devices.stdout)[0]["runtimes"]["pt2"] == ["cpu"]

    run = subprocess.run(
        [*nnsweep, "run", "sweep.yaml", "--executor", "local", "--no-tracking", "--json"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    (host,) = json.loads(run.stdout)
    measured = [t for t in host["trials"] if t["status"] == "ok"]
    assert {t["config"]["runtime"] for t in measured} == {"pt2"}
    # the fp32 baseline every device measures first, then its whole space: one configuration
    by_mode = {t["config"]["quant"]["mode"]: t for t in measured}
    assert sorted(by_mode) == ["fp32", "static_int8"] and len(measured) == 2
    mixed = by_mode["static_int8"]
    assert mixed["metrics"]["accuracy"] > 0.9 and mixed["metrics"]["latency_p50_ms"] > 0
    assert mixed["partitions"]["nodes_by_backend"]["cpu"] > 0
    # its own ranking chose the one layer kept float, and was kept in the cache
    (kept,) = mixed["config"]["quant"]["float_layers"]
    assert kept in dict(DigitsNet().named_modules())
    assert list((cache / "sensitivity").rglob("*.json"))
