"""A device agent's busy time per measurement, and the share of it that is timed runs.

The agent on this machine (``LocalTransport``, as a sweep's ``DeviceAgent`` calls it)
measures the digits model --count times with --min-duration seconds of timed runs,
once with a fresh process per measurement and once forked from a warm worker. Busy
time is the whole ``measure`` call (what ``DeviceAgent.busy_s`` adds up); the timed
share is the timed runs' time over it (goal: >= 80 % at 2 s per measurement), also
without the time spent waiting for the machine's measurement lock (another engineer's
measurement on this shared machine holds it meanwhile; the coordinator counts that wait
apart). The warm worker's start is paid on its first measurement, shown on its own line.

Usage: .venv/bin/python benchmarks/measure_busy.py [--count 4] [--min-duration 2] [--runtime onnxruntime]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def _loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=4)
    parser.add_argument("--min-duration", type=float, default=2.0)
    parser.add_argument("--runtime", action="append", help="onnxruntime, executorch, ... (default: both of these)")
    args = parser.parse_args()

    from nnsweep.agents import LocalTransport, MeasureRequest
    from nnsweep.artifacts import deploy
    from nnsweep.artifacts.cache import ArtifactCache
    from nnsweep.bench import MeasureSettings
    from nnsweep.core.config import DeploymentConfig
    from nnsweep.models import load_model

    settings = MeasureSettings(warmup=5, iters=200, min_duration_s=args.min_duration)
    with tempfile.TemporaryDirectory(prefix="measure-busy-") as tmp:
        cache = ArtifactCache(Path(tmp))
        bundle = load_model("digits", cache_dir=cache.models_dir)
        print(f"digits, {args.min_duration:g} s of timed runs per measurement; shared machine, load {_loadavg()}")
        print(
            f"{'runtime':<13}{'process':<16}{'busy s':>8}{'timed s':>9}{'timed/busy':>12}{'w/o lock wait':>15}"
            "  other phases (median ms)"
        )
        for runtime in args.runtime or ["onnxruntime", "executorch"]:
            config = DeploymentConfig.from_dict({"runtime": runtime, "quant": {"mode": "fp32"}, "threads": 1})
            artifact, _ = deploy.convert(bundle, config, cache)
            request = MeasureRequest(
                runtime=runtime,
                artifact_name=artifact.path.name,
                artifact_bytes=artifact.path.read_bytes(),
                io=artifact.io,
                threads=1,
                backends=artifact.config.backends,
                inputs=bundle.dataset.evaluation.inputs,
                settings=settings,
            )
            for warm in (False, True):
                transport = LocalTransport(warm=warm)
                rows = []
                try:
                    for _ in range(args.count + (1 if warm else 0)):
                        t0 = time.perf_counter()
                        timing = transport.measure(request).timing
                        rows.append((time.perf_counter() - t0, timing))
                finally:
                    transport.close()
                if warm:
                    busy, timing = rows.pop(0)
                    timed = timing.phases_ms["timed"] / 1e3
                    own = busy - timing.lock_wait_ms / 1e3
                    shares = f"{timed / busy:12.1%}{timed / own:15.1%}"
                    print(f"{runtime:<13}{'worker start':<16}{busy:8.2f}{timed:9.2f}{shares}")
                busy = statistics.median(b for b, _ in rows)
                own = statistics.median(b - t.lock_wait_ms / 1e3 for b, t in rows)
                timed = statistics.median(t.phases_ms["timed"] / 1e3 for _, t in rows)
                other = {
                    k: statistics.median(t.phases_ms.get(k, 0.0) for _, t in rows)
                    for k in ("lock_wait", "start", "import", "load", "warmup", "outputs")
                }
                shown = " ".join(f"{k} {v:.0f}" for k, v in other.items())
                name = "forked (warm)" if warm else "fresh"
                print(f"{runtime:<13}{name:<16}{busy:8.2f}{timed:9.2f}{timed / busy:12.1%}{timed / own:15.1%}  {shown}")
        print(f"load average after: {_loadavg()}")


if __name__ == "__main__":
    main()
