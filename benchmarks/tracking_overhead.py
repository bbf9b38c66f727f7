"""MLflow tracking overhead per trial, direct to a sqlite store (no BackgroundTracker).

Logs N trials the way the coordinator does (start_trial, then finish_trial with
metrics, tags, partition report and latency samples) into a temporary
``sqlite:///…/mlflow.db`` and prints median / p90 milliseconds for start, finish
and the two together, then the cost of resuming (``open_device`` on a store that
already holds those N trials). docs/explanation/architecture.md §5 records ~50 ms/run with
``log_batch``.

Usage: .venv/bin/python benchmarks/tracking_overhead.py [--trials 100]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path

from nnsweep.core.config import DeploymentConfig, QuantConfig
from nnsweep.core.results import TrialRecord, TrialStatus
from nnsweep.tracking import MlflowTracker


def _p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1]


def _record(number: int, config: DeploymentConfig) -> TrialRecord:
    samples = tuple(10.0 + (i % 7) * 0.1 for i in range(200))
    return TrialRecord(
        sweep="bench",
        device="host",
        number=number,
        config=config,
        status=TrialStatus.OK,
        metrics={
            "latency_mean_ms": 10.3,
            "latency_p50_ms": 10.3,
            "latency_p90_ms": 10.6,
            "latency_p99_ms": 10.6,
            "latency_std_ms": 0.2,
            "latency_min_ms": 10.0,
            "latency_max_ms": 10.6,
            "load_ms": 4.0,
            "first_inference_ms": 20.0,
            "peak_rss_mb": 300.0,
            "size_bytes": 1e6,
            "top1_agreement": 0.99,
            "max_abs_err": 0.01,
            "mean_abs_err": 0.001,
            "threads": 1.0,
            "partition_count": 3.0,
            "accuracy": 0.97,
            "sqnr_db": 35.0,
            "loadavg_1m": 0.5,
        },
        partitions={
            "count": 3,
            "sizes": [120, 7, 2],
            "nodes": {"xnnpack": 129, "portable": 4},
            "fallback": ["aten.foo"],
        },
        samples_ms=samples,
        feasible=True,
        tags={"artifact_sha256": "ab" * 32, "cache_hit": "false", "latency_source": "in-process"},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=100)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    config = DeploymentConfig("executorch", ("xnnpack",), QuantConfig("static_int8"))

    with tempfile.TemporaryDirectory(prefix="nnsweep-tracking-bench-") as tmp:
        uri = f"sqlite:///{Path(tmp) / 'mlflow.db'}"
        tracker = MlflowTracker(uri, "bench", "bench")
        t0 = time.perf_counter()
        tracker.open_device("host", {"arch": "x86_64", "cpu": "bench", "runtimes": "executorch"})
        first_open = time.perf_counter() - t0

        start_ms: list[float] = []
        finish_ms: list[float] = []
        for n in range(args.trials):
            t0 = time.perf_counter()
            tracker.start_trial("host", n, config)
            t1 = time.perf_counter()
            tracker.finish_trial(_record(n, config))
            t2 = time.perf_counter()
            start_ms.append((t1 - t0) * 1000)
            finish_ms.append((t2 - t1) * 1000)
        t0 = time.perf_counter()
        tracker.mark_front("host", range(0, args.trials, 10), 0)
        tracker.close_device("host")
        front = time.perf_counter() - t0

        resumed = MlflowTracker(uri, "bench", "bench")
        t0 = time.perf_counter()
        resumed.open_device("host", {})
        reopen = time.perf_counter() - t0

    total = [s + f for s, f in zip(start_ms, finish_ms, strict=True)]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"MLflow tracking overhead, {args.trials} trials, direct to sqlite (ms)")
    print(f"load average {load} on {os.cpu_count()} CPUs (figures scale with it)")
    print(f"{'':28}{'median':>8}{'p90':>8}{'max':>8}")
    for name, values in (("start_trial", start_ms), ("finish_trial", finish_ms), ("start + finish", total)):
        print(f"{name:28}{statistics.median(values):8.1f}{_p90(values):8.1f}{max(values):8.1f}")
    print(f"{'open_device (new store)':28}{first_open * 1000:8.0f}")
    print(f"{'open_device (resume)':28}{reopen * 1000:8.0f}   ({args.trials} trial runs found again)")
    print(f"{'mark_front + close_device':28}{front * 1000:8.0f}")


if __name__ == "__main__":
    main()
