"""A hand-made sweep to preview the report without running one.

Three devices with everything the report must show: the host (a measured fp32
baseline, a Pareto front, an infeasible int8 trial — QNNPACK on x86 —, a reused and a
failed trial, an interrupted one the report leaves out), a Raspberry Pi 5 (an
infeasible trial beside a faster feasible int8 one) and an NPU whose latencies are
compiler estimates without per-run samples. The numbers resemble the quickstart's.
The tests render it; a person editing the templates can too::

    python -m nnsweep.dashboards.sample /tmp/sample-report.html
"""

from __future__ import annotations

import random
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import nnsweep.core.metrics as metric
from nnsweep.core.config import DeploymentConfig, Granularity, PartitionLimits, QuantConfig, QuantMode
from nnsweep.core.metrics import (
    ACCURACY,
    ACCURACY_DROP,
    LATENCY_MEAN,
    LATENCY_P50,
    LATENCY_P90,
    SIZE,
    SPEEDUP,
    TOP1_AGREEMENT,
)
from nnsweep.core.results import TrialRecord, TrialStatus
from nnsweep.report.html import DeviceTrials, write_report
from nnsweep.spec import SweepSpec, parse_spec

__all__ = ["EXPERIMENT_ID", "sample_devices", "sample_links", "sample_spec"]

EXPERIMENT_ID = "1"
_XNN = ("xnnpack", "portable")


def sample_spec(tracking_uri: str = "sqlite:///mlflow.db") -> SweepSpec:
    """The sample sweep: devices ``host``, ``rpi5``, ``npu-sim``; accuracy vs latency p50; 1-point drop allowed."""
    return parse_spec(
        {
            "name": "sample",
            "model": "digits_gn",
            "devices": ["host", "rpi5", "npu-sim"],
            "objectives": {ACCURACY: "maximize", LATENCY_P50: "minimize"},
            "constraints": {"max_accuracy_drop": 0.01},
            "tracking": {"uri": tracking_uri, "experiment": "sample"},
        }
    )


def _parts(nodes: Mapping[str, int], sizes: list[int], backend: str, fallback: Mapping[str, int]) -> dict[str, Any]:
    return {
        "count": len(sizes),
        "sizes": sizes,
        "nodes_by_backend": dict(nodes),
        "fallback_ops": dict(fallback),
        "backends": list(nodes),
        "partitions": [{"backend": backend, "nodes": n} for n in sizes],
        "notes": [],
    }


def _record(
    device: str,
    number: int,
    config: DeploymentConfig,
    p50: float | None,
    accuracy: float | None,
    *,
    baseline: tuple[float, float] | None,
    status: TrialStatus = TrialStatus.OK,
    partitions: Mapping[str, Any] | None = None,
    estimated: bool = False,
    reused_from: int | None = None,
    reason: str | None = None,
    size_kib: float = 70.0,
    remeasured: tuple[float, float, float] | None = None,
) -> TrialRecord:
    if p50 is None or accuracy is None:
        return TrialRecord("sample", device, number, config, status, reason=reason, partitions=partitions or {})
    rng = random.Random(f"{device}-{number}")
    samples = () if estimated else tuple(sorted(p50 * rng.lognormvariate(0.0, 0.08) for _ in range(200)))
    metrics = {
        LATENCY_P50: p50,
        LATENCY_P90: p50 * 1.12,
        LATENCY_MEAN: p50 * 1.04,
        ACCURACY: accuracy,
        TOP1_AGREEMENT: min(1.0, accuracy + 0.02),
        SIZE: size_kib * 1024,
    }
    if remeasured is not None:  # (low, high, the sweep's own p50): the end of the sweep measured it again
        low, high, sweep = remeasured
        metrics.update(
            {
                metric.remeasured(LATENCY_P50): p50,
                metric.low(LATENCY_P50): low,
                metric.high(LATENCY_P50): high,
                metric.coverage(LATENCY_P50): 0.875,
                metric.swept(LATENCY_P50): sweep,
            }
        )
    feasible = None
    if baseline is not None:
        metrics[SPEEDUP] = baseline[0] / p50
        metrics[ACCURACY_DROP] = baseline[1] - accuracy
        feasible = metrics[ACCURACY_DROP] <= 0.01
    return TrialRecord(
        "sample",
        device,
        number,
        config,
        status,
        metrics=metrics,
        partitions=partitions or {},
        samples_ms=() if status is TrialStatus.REUSED else samples,
        feasible=feasible,
        reused_from=reused_from,
        estimated=estimated,
        tags={"latency_source": "vela estimate" if estimated else "local"},
    )


def sample_devices() -> list[DeviceTrials]:
    """The sample sweep's trials, per device (see the module docstring)."""
    fp32 = QuantConfig()
    s8_tensor = QuantConfig(mode=QuantMode.STATIC_INT8, granularity=Granularity.PER_TENSOR)
    s8_channel = QuantConfig(mode=QuantMode.STATIC_INT8, granularity=Granularity.PER_CHANNEL)
    dyn8 = QuantConfig(mode=QuantMode.DYNAMIC_INT8)
    eager = DeploymentConfig("torch", quant=fp32)
    xnn = DeploymentConfig("executorch", _XNN)
    xnn_parts = _parts(
        {"xnnpack": 17, "portable": 7}, [4, 2, 2, 2, 2, 2, 2, 1], "xnnpack", {"aten.native_group_norm": 7}
    )
    one_part = _parts(
        {"xnnpack": 14, "portable": 55},
        [14],
        "xnnpack",
        {"quantized_decomposed.dequantize_per_tensor": 21, "aten.convolution": 7, "aten.native_group_norm": 7},
    )
    ort = _parts({"cpu": 65}, [], "cpu", {})
    torch_parts = _parts({"cpu": 24}, [], "cpu", {})
    host_base = (0.2553, 0.9759)
    host = [
        _record(
            "host",
            0,
            eager,
            0.2553,
            0.9759,
            baseline=host_base,
            partitions=torch_parts,
            remeasured=(0.2501, 0.2630, 0.2590),
        ),
        _record(
            "host",
            1,
            xnn,
            0.0297,
            0.9759,
            baseline=host_base,
            partitions=xnn_parts,
            remeasured=(0.0290, 0.0322, 0.0341),
        ),
        _record(
            "host",
            2,
            DeploymentConfig("onnxruntime", ("cpu",)),
            0.0448,
            0.9759,
            baseline=host_base,
            partitions=ort,
            size_kib=134,
        ),
        _record(
            "host",
            3,
            DeploymentConfig("onnxruntime", ("cpu",), quant=s8_channel),
            0.0613,
            0.9741,
            baseline=host_base,
            partitions=ort,
            size_kib=105,
        ),
        # QNNPACK on x86 is numerically broken for conv + ReLU6 (docs/explanation/architecture.md §5):
        # the gate must catch it.
        _record(
            "host",
            4,
            DeploymentConfig("torch", ("qnnpack", "x86"), quant=s8_tensor),
            0.1322,
            0.1252,
            baseline=host_base,
            partitions=torch_parts,
            size_kib=33,
        ),
        _record(
            "host",
            5,
            DeploymentConfig("executorch", _XNN, quant=s8_tensor, partitions=PartitionLimits(1, 6), threads=2),
            0.6348,
            0.9778,
            baseline=host_base,
            partitions=one_part,
            size_kib=38,
        ),
        _record(
            "host",
            6,
            DeploymentConfig("onnxruntime", ("cpu",)),
            0.0448,
            0.9759,
            baseline=host_base,
            partitions=ort,
            status=TrialStatus.REUSED,
            reused_from=2,
        ),
        _record(
            "host",
            7,
            DeploymentConfig("executorch", ("portable",), quant=QuantConfig(mode=QuantMode.QAT_INT8)),
            None,
            None,
            baseline=host_base,
            status=TrialStatus.FAILED,
            reason="BenchmarkError: the benchmark process exceeded its 600 s timeout",
        ),
        _record(
            "host",
            8,
            xnn,
            None,
            None,
            baseline=host_base,
            status=TrialStatus.INTERRUPTED,
            reason="the sweep was interrupted",
        ),
    ]
    pi_base = (1.91, 0.9759)
    rpi5 = [
        _record("rpi5", 0, eager, 1.91, 0.9759, baseline=pi_base, partitions=torch_parts),
        _record("rpi5", 1, xnn, 0.212, 0.9759, baseline=pi_base, partitions=xnn_parts),
        _record(
            "rpi5",
            2,
            DeploymentConfig("executorch", _XNN, quant=s8_channel),
            0.151,
            0.9741,
            baseline=pi_base,
            partitions=one_part,
            size_kib=38,
        ),
        _record("rpi5", 3, DeploymentConfig("onnxruntime", ("cpu",)), 0.402, 0.9759, baseline=pi_base, partitions=ort),
        _record(
            "rpi5",
            4,
            DeploymentConfig("executorch", _XNN, quant=dyn8),
            0.118,
            0.9502,
            baseline=pi_base,
            partitions=xnn_parts,
            size_kib=40,
        ),
    ]
    npu = [
        _record(
            "npu-sim",
            0,
            DeploymentConfig("executorch", _XNN, quant=s8_tensor),
            3.61,
            0.9741,
            baseline=None,
            partitions=one_part,
            estimated=True,
            size_kib=36,
        ),
        _record(
            "npu-sim",
            1,
            DeploymentConfig("executorch", _XNN, quant=s8_channel, partitions=PartitionLimits(2, 1)),
            20.1,
            0.9759,
            baseline=None,
            partitions=one_part,
            estimated=True,
            size_kib=38,
        ),
    ]
    return [
        DeviceTrials("host", tuple(host), baseline=0, description="x86_64, AMD EPYC, 2 cores"),
        DeviceTrials("rpi5", tuple(rpi5), baseline=0, description="aarch64, Cortex-A76, 4 cores (Ray node)"),
        DeviceTrials("npu-sim", tuple(npu), baseline=None, description="Ethos-U55-128 (Vela estimates)"),
    ]


def sample_links(experiment_id: str = EXPERIMENT_ID) -> dict[str, dict[int, str]]:
    """Fake MLflow run paths for every sample trial, as :meth:`Tracker.trial_links` returns them."""
    return {
        d.device: {r.number: f"#/experiments/{experiment_id}/runs/{d.device}-{r.number:04d}" for r in d.records}
        for d in sample_devices()
    }


def main(argv: list[str] | None = None) -> int:
    """Write the sample report to the path given (default ``sample-report.html``)."""
    args = sys.argv[1:] if argv is None else argv
    write_report(sample_spec(), sample_devices(), Path(args[0] if args else "sample-report.html"), links=sample_links())
    return 0


if __name__ == "__main__":
    sys.exit(main())
