"""How much the coordinator's own work disturbs a host measurement, and what keeping
quiet buys.

A host measurement (``LocalTransport``, a fresh process, as a sweep's agent on this
machine runs it) is repeated while a thread of this process does what the coordinator
does between results: asks a multi-objective TPE study for a trial and tells it
(Optuna, real), and writes a trial record to MLflow on sqlite (``MlflowTracker``,
real). Two ways, alternated measurement by measurement so drift hits both alike:

* ``busy``: that work runs beside the timed runs (the coordinator before it kept quiet);
* ``quiet``: it waits while the machine measures (what ``Scheduler.quiet`` and
  ``BackgroundTracker.quiet`` now make the coordinator do).

Prints, for each way, the median over measurements of each measurement's p50 and the
spread of the p50s between measurements, and the coordinator work done meanwhile.

Usage: measure_interference.py [--count 8] [--model torchvision:mobilenet_v3_small] [--runtime onnxruntime]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path


def _loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


class _Coordinator:
    """Sampling, telling and tracking writes in a loop on one thread, as the coordinator's."""

    def __init__(self, work: Path) -> None:
        import optuna

        from nnsweep.core.config import DeploymentConfig
        from nnsweep.core.results import TrialRecord, TrialStatus
        from nnsweep.tracking import MlflowTracker

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        sampler = optuna.samplers.TPESampler(seed=0)
        self.study = optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)
        self.tracker = MlflowTracker(f"sqlite:///{work / 'mlflow.db'}", "interference", "interference")
        self.tracker.open_device("host", {"arch": "x86_64"})
        self.config = DeploymentConfig("onnxruntime")
        self.record = lambda n: TrialRecord(
            "interference", "host", n, self.config, TrialStatus.OK, metrics={"latency_p50_ms": 1.0, "accuracy": 0.9}
        )
        self.running = threading.Event()
        self.stop = threading.Event()
        self.done = 0
        self._thread = threading.Thread(target=self._work, daemon=True)
        self._thread.start()

    def _work(self) -> None:
        n = 0
        while not self.stop.is_set():
            if not self.running.wait(0.05):
                continue
            trial = self.study.ask()
            x = trial.suggest_float("x", 0, 1)
            y = trial.suggest_categorical("y", ["a", "b", "c"])
            self.study.tell(trial, [x, (x - 0.5) ** 2 + (y == "a")])
            self.tracker.start_trial("host", n, self.config)
            self.tracker.finish_trial(self.record(n))
            n += 1
            self.done += 1

    def close(self) -> None:
        self.stop.set()
        self._thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=8, help="measurements of each way")
    parser.add_argument("--model", default="torchvision:mobilenet_v3_small")
    parser.add_argument("--runtime", default="onnxruntime")
    args = parser.parse_args()

    from nnsweep.agents import LocalTransport, MeasureRequest
    from nnsweep.artifacts import deploy
    from nnsweep.artifacts.cache import ArtifactCache
    from nnsweep.bench import MeasureSettings
    from nnsweep.core.config import DeploymentConfig
    from nnsweep.models import load_model

    with tempfile.TemporaryDirectory(prefix="interference-") as tmp:
        cache = ArtifactCache(Path(tmp))
        bundle = load_model(args.model, cache_dir=cache.models_dir)
        config = DeploymentConfig.from_dict({"runtime": args.runtime, "quant": {"mode": "fp32"}, "threads": 1})
        artifact, _ = deploy.convert(bundle, config, cache)
        request = MeasureRequest(
            runtime=args.runtime,
            artifact_name=artifact.path.name,
            artifact_bytes=artifact.path.read_bytes(),
            io=artifact.io,
            threads=1,
            backends=artifact.config.backends,
            inputs=bundle.dataset.evaluation.inputs[:8],
            settings=MeasureSettings(warmup=5, iters=200),
        )
        coordinator = _Coordinator(Path(tmp))
        transport = LocalTransport(warm=False)
        p50: dict[str, list[float]] = {"busy": [], "quiet": []}
        work: dict[str, int] = {"busy": 0, "quiet": 0}
        print(f"{args.model} {args.runtime} fp32, 1 thread, 200 timed runs per measurement; load {_loadavg()}")
        try:
            for _ in range(args.count):
                for way in ("busy", "quiet"):
                    before = coordinator.done
                    if way == "busy":
                        coordinator.running.set()
                    timing = transport.measure(request).timing
                    coordinator.running.clear()
                    time.sleep(0.2)  # the quiet way does its waiting work now, between measurements
                    p50[way].append(timing.latency.p50)
                    work[way] += coordinator.done - before
        finally:
            transport.close()
            coordinator.close()
        for way, values in p50.items():
            mid = statistics.median(values)
            cv = statistics.stdev(values) / statistics.fmean(values)
            print(
                f"{way:<6} p50 median {mid:.4f} ms (min {min(values):.4f}, max {max(values):.4f}); "
                f"CV between measurements {cv:.2%}; coordinator steps beside the timed runs: {work[way]}"
            )
        ratio = statistics.median(p50["busy"]) / statistics.median(p50["quiet"])
        print(f"busy / quiet p50: {ratio:.3f}; load after {_loadavg()}")


if __name__ == "__main__":
    main()
