"""How stable a p50 is: within one process (its 95 % confidence interval) and between
processes (the coefficient of variation of the p50s), for a mobilenet-class model.

For each configuration (default: mobilenet_v3_small, random weights, 1 thread, as
ONNX Runtime fp32, ONNX Runtime static int8 per-channel and ExecuTorch XNNPACK fp32:
the kind of configurations a sweep's Pareto front holds), it measures --processes
times in a fresh process and --processes times in a child forked from a warm worker,
each until the p50's 95 % confidence interval is within --ci of the p50 or --cap
seconds of timed runs have passed, and prints every p50, the CV between processes,
the median within-process interval (half-width over p50), the median share of the
timed runs' wall time the measuring process was on a CPU (below 100 %: something
else ran on its core), why each measurement stopped, and the load average before
and after. Measurements hold the machine-wide measurement lock, so
no other nnsweep measurement runs meanwhile; other work on the machine does.

Usage: .venv/bin/python benchmarks/measure_stability.py [--processes 5] [--ci 0.01] [--cap 10]
                                                       [--model torchvision:mobilenet_v3_small] [--cache-dir DIR]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

CONFIGS = [
    {"runtime": "onnxruntime", "backends": ["cpu"], "quant": {"mode": "fp32"}},
    {
        "runtime": "onnxruntime",
        "backends": ["cpu"],
        "quant": {"mode": "static_int8", "granularity": "per_channel"},
    },
    {"runtime": "executorch", "backends": ["xnnpack", "portable"], "quant": {"mode": "fp32"}},
]


def _loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="torchvision:mobilenet_v3_small")
    parser.add_argument("--processes", type=int, default=5)
    parser.add_argument("--ci", type=float, default=0.01, help="target half-width of the p50's 95 %% CI")
    parser.add_argument("--cap", type=float, default=10.0, help="time cap on timed runs per measurement, s")
    parser.add_argument("--cache-dir", type=Path, help="artifact cache to reuse (default: a temporary one)")
    parser.add_argument("--runtime", action="append", help="only these runtimes")
    args = parser.parse_args()

    from nnsweep.artifacts import deploy
    from nnsweep.artifacts.cache import ArtifactCache
    from nnsweep.bench import MeasureSettings, WarmWorker, measure_in_subprocess
    from nnsweep.core.config import DeploymentConfig
    from nnsweep.models import load_model

    with tempfile.TemporaryDirectory(prefix="measure-stability-") as tmp:
        cache = ArtifactCache(args.cache_dir or Path(tmp))
        bundle = load_model(args.model, cache_dir=cache.models_dir)
        inputs = bundle.dataset.evaluation.inputs[:4]
        settings = MeasureSettings(warmup=10, iters=200, until_stable=True, ci_rel=args.ci, max_duration_s=args.cap)
        print(f"{args.model}, 1 thread; until the p50's 95 % CI is within {args.ci:.1%} or {args.cap:g} s")
        print("shared machine: other engineers' work runs on the same 2 cores\n")
        header = f"{'configuration':<44}{'mode':<6}{'p50 ms per process':<44}{'CV':>7}{'CI/p50':>8}{'cpu/wall':>9}"
        header += "  stops  loadavg"
        print(header)
        for data in CONFIGS:
            if args.runtime and data["runtime"] not in args.runtime:
                continue
            config = DeploymentConfig.from_dict({**data, "threads": 1})
            artifact, _ = deploy.convert(bundle, config, cache)
            worker = WarmWorker(config.runtime)
            try:
                for mode in ("fresh", "fork"):
                    before = _loadavg()
                    timings = [
                        measure_in_subprocess(
                            runtime=config.runtime,
                            artifact=artifact.path,
                            io=artifact.io,
                            threads=1,
                            backends=artifact.config.backends,
                            inputs=inputs,
                            settings=settings,
                            worker=worker if mode == "fork" else None,
                        )[0]
                        for _ in range(args.processes)
                    ]
                    p50s = [t.latency.p50 for t in timings]
                    cv = statistics.stdev(p50s) / statistics.mean(p50s) if len(p50s) > 1 else 0.0
                    ci = statistics.median(t.p50_ci_rel for t in timings)
                    stops = ",".join(sorted({t.stop_reason for t in timings}))
                    # CPU time over wall time of the timed runs: below 100 % (1 thread), the
                    # measuring process was descheduled: other work ran on its core.
                    cpu = statistics.median(t.phases_ms.get("timed_cpu", 0.0) / t.phases_ms["timed"] for t in timings)
                    shown = " ".join(f"{p:.3f}" for p in p50s)
                    print(
                        f"{config.label():<44}{mode:<6}{shown:<44}{cv:7.2%}{ci:8.2%}{cpu:9.1%}  {stops:<6} "
                        f"{before} -> {_loadavg()}"
                    )
            finally:
                worker.close()


if __name__ == "__main__":
    main()
