"""A partition-limit variant against its first conversion, inside a sweep's conversion worker.

``nnsweep bench`` is one fresh process per configuration: each pays the import of
ExecuTorch's compiler and the lowering's first-call warm-up, whatever the stage cache
holds. A sweep converts in long-lived workers (:class:`~nnsweep.execution._converter.ConverterWorker`)
that pay those once. This script times what such a worker spends on

1. a warm-up conversion of another configuration (ExecuTorch fp32 here: the worker's first
   lowering, as any sweep has one);
2. the first static int8 conversion (export, quantization, calibration, lowering);
3. its partition-limit variants (``max_delegated_partitions``, ``min_nodes_per_partition``),
   which read the quantized program from the stage cache and start from the edge program
   the first conversion left in the worker (:mod:`nnsweep.runtimes.executorch.lowering`);

on a fresh cache in a temporary folder per round, the model loaded (a built-in model's
weights trained into that cache) before any timing, and prints each conversion's seconds and the
variants' ratio to the first. Run it a few times: the ratio moves with the machine's load.

Usage: .venv/bin/python benchmarks/stage_reuse.py [--model digits_gn] [--rounds 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

from nnsweep.artifacts.cache import ArtifactCache
from nnsweep.core.config import DeploymentConfig, Granularity, PartitionLimits, QuantConfig, QuantMode
from nnsweep.execution._base import ConvertRequest, ModelSource
from nnsweep.execution._converter import ConverterWorker
from nnsweep.runtimes.executorch import lowering


def _timed(worker: ConverterWorker, source: ModelSource, config: DeploymentConfig) -> tuple[float, bool]:
    start = time.perf_counter()
    _, hit = worker.convert(ConvertRequest(model=source, config=config))
    return time.perf_counter() - start, hit


def _limited(config: DeploymentConfig, limits: PartitionLimits) -> DeploymentConfig:
    return dataclasses.replace(config, partitions=limits)


def _round(model: str, root: Path) -> dict[str, float]:
    lowering.forget()  # the edge programs an earlier round left in this process: each round starts cold
    source = ModelSource(ref=model, cache_root=root)
    worker = ConverterWorker()
    worker.bundle(source, ArtifactCache(root))  # trains a built-in model's weights, untimed
    static = DeploymentConfig(
        runtime="executorch",
        quant=QuantConfig(mode=QuantMode.STATIC_INT8, granularity=Granularity.PER_CHANNEL),
    )
    steps = {
        "warm-up (fp32)": DeploymentConfig(runtime="executorch"),
        "first (static int8)": static,
        "max_delegated_partitions=1": _limited(static, PartitionLimits(max_delegated_partitions=1)),
        "min_nodes_per_partition=4": _limited(static, PartitionLimits(min_nodes_per_partition=4)),
    }
    figures = {}
    for name, config in steps.items():
        seconds, hit = _timed(worker, source, config)
        if hit:
            raise SystemExit(f"{name}: an artifact cache hit on a fresh cache; nothing was timed")
        figures[name] = seconds
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="digits_gn")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    rounds = []
    for n in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="nnsweep-stage-reuse-") as tmp:
            figures = _round(args.model, Path(tmp))
        first = figures["first (static int8)"]
        print(f"round {n + 1}: " + ", ".join(f"{k} {v:.2f} s" for k, v in figures.items()), flush=True)
        rounds.append({k: v / first for k, v in figures.items() if k.startswith(("max", "min"))})
    for name in rounds[0]:
        ratios = [r[name] for r in rounds]
        spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
        print(f"{name}: {statistics.median(ratios):.2f}x the first (median of {len(ratios)}; {spread})")


if __name__ == "__main__":
    main()
