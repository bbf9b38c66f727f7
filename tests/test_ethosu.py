"""Ethos-U through ExecuTorch's Arm backend and Vela: real compilation, estimates, TOSA accuracy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nnsweep.agents import MeasureRequest, VelaEstimateTransport
from nnsweep.artifacts import deploy
from nnsweep.bench import MeasureSettings, evaluate
from nnsweep.core.config import DeploymentConfig, QuantConfig
from nnsweep.core.errors import ConversionError, SpecError
from nnsweep.models import ModelSnapshot
from nnsweep.runtimes.ethosu.converter import read_vela_summary
from nnsweep.spec import parse_spec

pytestmark = pytest.mark.slow

CONFIG = DeploymentConfig("executorch", ("ethos-u55-128",), QuantConfig("static_int8"))


@pytest.fixture(scope="module")
def u55(digits, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from nnsweep.artifacts.cache import ArtifactCache

    cache = ArtifactCache(tmp_path_factory.mktemp("ethos-cache"))
    artifact, _ = deploy.convert(digits, CONFIG, cache)
    return artifact


def test_vela_compiles_the_whole_digits_model_and_its_estimates_are_recorded(u55) -> None:  # type: ignore[no-untyped-def]
    assert u55.partitions.count == 1 and u55.partitions.nodes_by_backend["ethos-u55-128"] > 40
    est = u55.estimates
    assert est["npu_operators"] > 0 and est["cpu_operators"] == 0
    assert 0 < est["inference_time_ms"] < 1 and est["cycles_total"] > 1000
    # Vela's own relation between cycles, clock and time (500 MHz for the U55 high-end system config)
    assert est["inference_time_ms"] == pytest.approx(est["cycles_total"] / (est["npu_clock_mhz"] * 1e3), rel=1e-3)
    assert est["sram_kib"] > 0 and est["flash_kib"] > 0
    assert set(u55.sidecars) == {"tosa", "tosa_io", "vela_layers"}  # vela_layers: bench --profile's table


def test_estimate_device_reports_estimated_latency_and_real_int8_accuracy(u55, digits) -> None:  # type: ignore[no-untyped-def]
    request = MeasureRequest.of(u55, digits.dataset.evaluation.inputs, MeasureSettings())
    reply = VelaEstimateTransport("ethos-u55-128").measure(request)
    assert reply.estimated and reply.timing.latency.p50 == u55.estimates["inference_time_ms"]
    assert "Vela estimate" in reply.source
    assert reply.outputs is not None
    reference = ModelSnapshot.of(digits).reference
    ev = evaluate(reply.outputs, reference, digits.dataset.evaluation.labels)
    fp32_accuracy = float(np.mean(reference.argmax(1) == digits.dataset.evaluation.labels))
    assert ev.accuracy >= fp32_accuracy - 0.01  # the TOSA reference model ran the integer graph


def test_a16w8_runs_int16_activations_on_the_npu_and_beats_int8s_fidelity(u55, digits, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The Arm quantizer's 16-bit activations, calibrated on the calibration split as int8's are
    (observed on the example input alone, its output range clipped digits' logits: 16.8 dB)."""
    from nnsweep.artifacts.cache import ArtifactCache

    config = DeploymentConfig("executorch", ("ethos-u55-128",), QuantConfig("a16w8"))
    artifact, _ = deploy.convert(digits, config, ArtifactCache(tmp_path))
    io_params = json.loads(artifact.sidecars["tosa_io"][0].read_text())
    assert (io_params["input_qmin"], io_params["input_qmax"]) == (-32767, 32767)
    assert artifact.estimates["inference_time_ms"] > 0 and artifact.estimates["cpu_operators"] == 0
    snapshot = ModelSnapshot.of(digits)
    fidelity = {}
    for a in (artifact, u55):
        request = MeasureRequest.of(a, digits.dataset.evaluation.inputs, MeasureSettings())
        outputs = VelaEstimateTransport("ethos-u55-128").measure(request).outputs
        fidelity[a.config.quant.mode.value] = evaluate(outputs, snapshot.reference, None).fidelity.sqnr_db
    assert fidelity["a16w8"] > fidelity["static_int8"] + 2, fidelity  # measured: 39.1 against 35.1 dB
    assert fidelity["a16w8"] > 35


def test_ops_left_on_the_cpu_make_the_estimate_incomplete_so_the_conversion_fails(digits, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """QAT keeps BatchNorm unfolded, and the Arm backend leaves it to the CPU: Vela's
    estimate would then cover only part of the model (found by a sweep, where it
    made QAT look 7x faster than static int8)."""
    from nnsweep.artifacts.cache import ArtifactCache

    config = DeploymentConfig("executorch", ("ethos-u55-128",), QuantConfig("qat_int8"))
    with pytest.raises(ConversionError, match="Vela estimates NPU partitions only"):
        deploy.convert(digits, config, ArtifactCache(tmp_path))


def test_what_the_tosa_graph_cannot_evaluate_fails_the_conversion_saying_so(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """ExecuTorch's Ethos-U delegate does not run on the host, so only the TOSA graph gives
    the outputs. A model of two outputs converted, then failed evaluation with "error 0x20";
    a token-id model's lookup stays on the CPU."""
    import torch

    from nnsweep.artifacts.cache import ArtifactCache
    from nnsweep.models import load_model, register_live

    class TwoHeads(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3)
            self.classes, self.box = torch.nn.Linear(8, 5), torch.nn.Linear(8, 4)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            h = torch.relu(self.conv(x)).mean((2, 3))
            return self.classes(h), self.box(h)

    class Tokens(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed, self.fc = torch.nn.Embedding(20, 8), torch.nn.Linear(8, 3)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.fc(self.embed(ids).mean(1))

    torch.manual_seed(0)
    heads = load_model(register_live("two_heads", TwoHeads().eval(), torch.randn(1, 3, 8, 8)))
    with pytest.raises(ConversionError, match="an NPU graph of several outputs"):
        deploy.convert(heads, CONFIG, ArtifactCache(tmp_path))
    tokens = load_model(register_live("tokens", Tokens().eval(), torch.zeros(1, 5, dtype=torch.int64)))
    with pytest.raises(ConversionError, match="takes token ids"):
        deploy.convert(tokens, CONFIG, ArtifactCache(tmp_path))


def test_an_npu_runs_integer_graphs_only() -> None:
    with pytest.raises(SpecError, match="allowed: static_int8, qat_int8, a16w8"):
        DeploymentConfig("executorch", ("ethos-u85-256",), QuantConfig("fp32"))


def test_summary_parsing_reads_every_csv(tmp_path) -> None:  # type: ignore[no-untyped-def]
    header = (
        "inference_time,cycles_total,cycles_npu,sram_memory_used,on_chip_flash_memory_used,"
        "off_chip_flash_memory_used,nn_macs,core_clock\n"
    )
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "out_summary_X.csv").write_text(header + "4e-05,20000,10000,4.5,0,17.0,125440,500000000.0\n")
    est = read_vela_summary(tmp_path, "CPU operators = 0 (0.0%)\nNPU operators = 9 (100.0%)\n")
    assert est["inference_time_ms"] == pytest.approx(0.04) and est["cycles_total"] == 20000
    assert (est["npu_operators"], est["cpu_operators"], est["npu_clock_mhz"]) == (9, 0, 500)
    with pytest.raises(ConversionError, match="no summary"):
        read_vela_summary(tmp_path / "a" / "nothing", "")


def test_spec_npus_are_validated() -> None:
    base = {"name": "n", "model": "digits", "devices": ["host", "u55"]}
    spec = parse_spec({**base, "npus": {"u55": {"target": "ethos-u55-128"}}})
    assert spec.npus == {"u55": "ethos-u55-128"}
    with pytest.raises(SpecError, match=r"npus\.u55\.target"):
        parse_spec({**base, "npus": {"u55": {"target": "ethos-u99"}}})
    with pytest.raises(SpecError, match="not in devices"):
        parse_spec({**base, "npus": {"u65": {"target": "ethos-u65-256"}}})
    assert json.dumps(sorted(spec.npus))


@pytest.mark.integration
def test_bench_estimates_an_ethos_u_deployment_and_says_it_is_an_estimate(tmp_path: Path, models_dir: Path) -> None:
    # bench refused an NPU ("a sweep estimates it"): one configuration needed a spec with npus:.
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "models").symlink_to(models_dir)
    bench = [sys.executable, "-m", "nnsweep.cli", "--cache-dir", str(cache), "bench", "--model", "digits"]
    bench += ["--quant", "static_int8", "--backends", "ethos-u55-128"]
    proc = subprocess.run([*bench, "--json", "--profile"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["estimated"] is True and result["latency_source"].startswith("Vela estimate for ethos-u55-128")
    # --profile: Vela's per-layer estimate, labelled so, whose cycles add up to its whole-inference estimate
    assert result["profile_estimated"] is True and result["profile_source"].startswith("Vela's per-layer estimate")
    assert {e["backend"] for e in result["profile"]} == {"ethos-u55-128"} and len(result["profile"]) > 1
    assert sum(e["ms"] for e in result["profile"]) == pytest.approx(result["latency_ms"]["p50"], rel=0.1)
    assert result["latency_ms"]["p50"] == result["estimates"]["inference_time_ms"] > 0
    assert result["estimates"]["npu_operators"] > 0 and result["estimates"]["cpu_operators"] == 0
    assert result["accuracy"] > 0.9  # the integer TOSA graph's outputs, run on this machine
    again = subprocess.run(bench, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "cache hit" in again.stdout
    assert "Estimated inference time" in again.stdout and "not a measurement" in again.stdout
    assert "Profile per operator" not in again.stdout  # only when asked
    assert "TOSA reference model" in again.stdout
    assert "Inference timings" not in again.stdout and "Peak memory footprint" not in again.stdout
