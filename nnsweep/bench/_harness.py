"""The timing harness: runs in the process that measures (see ``_child``)."""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass

import numpy as np

from nnsweep.bench._runner import Runner
from nnsweep.bench._stats import LatencyStats

__all__ = ["MeasureSettings", "Timing", "time_runner"]


@dataclass(frozen=True)
class MeasureSettings:
    """How to time one artifact (defaults follow TFLite's ``benchmark_model`` and the seeds).

    Args:
        warmup: untimed runs after the first inference.
        iters: timed runs.
        min_duration_s: keep timing until this long has passed, even past ``iters``.
        timeout_s: the whole measurement (load, runs, evaluation) must end within this.
    """

    warmup: int = 5
    iters: int = 200
    min_duration_s: float = 0.0
    timeout_s: float = 600.0

    def __post_init__(self) -> None:
        from nnsweep.errors import SpecError

        if not isinstance(self.warmup, int) or self.warmup < 0:
            raise SpecError("warmup", f"must be an integer >= 0, got {self.warmup!r}")
        if not isinstance(self.iters, int) or self.iters < 1:
            raise SpecError("iters", f"must be an integer >= 1, got {self.iters!r}")
        if self.min_duration_s < 0:
            raise SpecError("min_duration_s", f"must be >= 0, got {self.min_duration_s!r}")
        if self.timeout_s <= 0:
            raise SpecError("timeout_s", f"must be > 0, got {self.timeout_s!r}")


@dataclass(frozen=True)
class Timing:
    """What one measurement saw. Times in milliseconds, memory in MiB."""

    load_ms: float
    first_inference_ms: float
    latency: LatencyStats
    samples_ms: tuple[float, ...]
    peak_rss_mb: float
    rss_before_load_mb: float
    threads: int
    loadavg_1m: float | None  # None where the tool that measured cannot tell (bridge devices)

    def to_dict(self) -> dict[str, object]:
        return {
            "load_ms": self.load_ms,
            "first_inference_ms": self.first_inference_ms,
            "latency_ms": self.latency.to_dict(),
            "samples_ms": list(self.samples_ms),
            "peak_rss_mb": self.peak_rss_mb,
            "rss_before_load_mb": self.rss_before_load_mb,
            "threads": self.threads,
            "loadavg_1m": self.loadavg_1m,
        }

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> Timing:
        samples = tuple(float(s) for s in d["samples_ms"])  # type: ignore[attr-defined]
        return cls(
            load_ms=float(d["load_ms"]),  # type: ignore[arg-type]
            first_inference_ms=float(d["first_inference_ms"]),  # type: ignore[arg-type]
            latency=LatencyStats.from_samples(samples),
            samples_ms=samples,
            peak_rss_mb=float(d["peak_rss_mb"]),  # type: ignore[arg-type]
            rss_before_load_mb=float(d["rss_before_load_mb"]),  # type: ignore[arg-type]
            threads=int(d["threads"]),  # type: ignore[call-overload]
            loadavg_1m=None if d.get("loadavg_1m") is None else float(d["loadavg_1m"]),  # type: ignore[arg-type]
        )


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_rss_mb() -> float:
    # VmHWM is this address space's own high-water mark. ru_maxrss is not: Linux carries
    # it across exec, so a measuring process started by a 1 GB sweep would report 1 GB.
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux, bytes on macOS


def time_runner(runner: Runner, x: np.ndarray, settings: MeasureSettings) -> Timing:
    """Load ``runner``'s artifact and time it on input ``x`` (batch of 1, float).

    Per-run wall times are taken with ``time.perf_counter_ns`` around each
    :meth:`Runner.run` call, so they include the runtime's Python binding cost.
    """
    rss_before = _rss_mb()
    t0 = time.perf_counter_ns()
    runner.load()
    load_ms = (time.perf_counter_ns() - t0) / 1e6
    prepared = runner.prepare(x)
    t0 = time.perf_counter_ns()
    runner.run(prepared)
    first_ms = (time.perf_counter_ns() - t0) / 1e6
    for _ in range(settings.warmup):
        runner.run(prepared)
    samples: list[float] = []
    start = time.perf_counter_ns()
    min_ns = settings.min_duration_s * 1e9
    while len(samples) < settings.iters or (time.perf_counter_ns() - start) < min_ns:
        t0 = time.perf_counter_ns()
        runner.run(prepared)
        samples.append((time.perf_counter_ns() - t0) / 1e6)
    return Timing(
        load_ms=load_ms,
        first_inference_ms=first_ms,
        latency=LatencyStats.from_samples(samples),
        samples_ms=tuple(samples),
        peak_rss_mb=_peak_rss_mb(),
        rss_before_load_mb=rss_before,
        threads=runner.threads,
        loadavg_1m=os.getloadavg()[0],
    )


def run_all(runner: Runner, inputs: np.ndarray) -> np.ndarray:
    """Outputs of ``runner`` for each input (one at a time: deployed models take batch 1)."""
    outs = [runner.to_float(runner.run(runner.prepare(inputs[i : i + 1]))) for i in range(len(inputs))]
    return np.concatenate([o.reshape(1, -1) for o in outs], axis=0)
