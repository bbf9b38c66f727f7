"""The timing harness: runs in the process that measures (see ``_child``)."""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nnsweep.bench._contention import CoreClock, contended, others_cores
from nnsweep.bench._runner import Runner
from nnsweep.bench._stats import LatencyStats, median_ci
from nnsweep.core.measure import MeasureSettings
from nnsweep.core.metrics import FIRST_INFERENCE, LOAD, PEAK_RSS

__all__ = ["MeasureSettings", "Timing", "time_runner"]


@dataclass(frozen=True)
class Timing:
    """What one measurement saw. Times in milliseconds, memory in MiB.

    Besides the artifact's figures: ``stop_reason`` (``iters``, ``min_duration``, ``stable``
    or ``cap``), ``lock_wait_ms`` (the machine's measurement lock), ``isolation`` (``fresh``
    process, ``fork`` of a warm worker, or a device's ``tool``), ``parent_rss_mb`` (the warm
    worker's memory the child shares), ``phases_ms`` (where the wall time went: ``lock_wait``,
    ``start``, ``import``, ``load``, ``first_inference``, ``warmup``, ``timed``, ``timed_cpu``,
    ``outputs``, ``total``), ``held_monotonic`` (when the lock was held, on
    ``CLOCK_MONOTONIC``, one clock for every process of a machine) and ``placement`` (where
    the runtime put the ops when it loaded the artifact, for runtimes whose placement depends
    on the machine such as Arm NN; ``None``: the converting machine's report stands) and
    ``figures`` (what a model kind measures beyond one call's latency, by metric name: a
    decoder's ``prefill_ms`` and ``tokens_per_s``, its latency being one decode step's).
    """

    load_ms: float
    first_inference_ms: float
    latency: LatencyStats
    samples_ms: tuple[float, ...]
    peak_rss_mb: float
    rss_before_load_mb: float
    threads: int
    loadavg_1m: float | None  # None where the tool that measured cannot tell (bridge devices)
    stop_reason: str = "iters"
    lock_wait_ms: float = 0.0
    isolation: str = "fresh"
    parent_rss_mb: float | None = None
    phases_ms: Mapping[str, float] = field(default_factory=dict)
    held_monotonic: tuple[float, float] | None = None
    placement: Mapping[str, Any] | None = None
    figures: Mapping[str, float] = field(default_factory=dict)

    @property
    def others_cores(self) -> float | None:
        """Cores' worth of other processes' work on the measuring cores during the timed
        runs (``None``: not known, see :mod:`nnsweep.bench._contention`)."""
        return others_cores(self.phases_ms)

    @property
    def contended(self) -> bool:
        """Whether that work went beyond the cores the runtime's threads left spare."""
        return contended(self.phases_ms)

    @property
    def p50_ci95_ms(self) -> tuple[float, float]:
        """The 95 % confidence interval of the p50 (:func:`~nnsweep.bench._stats.median_ci`)."""
        return median_ci(self.samples_ms)

    @property
    def p50_ci_rel(self) -> float:
        """That interval's half-width as a fraction of the p50."""
        low, high = self.p50_ci95_ms
        return (high - low) / 2.0 / self.latency.p50 if self.latency.p50 > 0 else float("inf")

    def to_dict(self) -> dict[str, object]:
        low, high = self.p50_ci95_ms
        return {
            LOAD: self.load_ms,
            FIRST_INFERENCE: self.first_inference_ms,
            "latency_ms": self.latency.to_dict(),
            "samples_ms": list(self.samples_ms),
            PEAK_RSS: self.peak_rss_mb,
            "rss_before_load_mb": self.rss_before_load_mb,
            "threads": self.threads,
            "loadavg_1m": self.loadavg_1m,
            "p50_ci95_ms": [low, high],
            "stop_reason": self.stop_reason,
            "lock_wait_ms": self.lock_wait_ms,
            "isolation": self.isolation,
            "parent_rss_mb": self.parent_rss_mb,
            "phases_ms": dict(self.phases_ms),
            "held_monotonic": None if self.held_monotonic is None else list(self.held_monotonic),
            "placement": None if self.placement is None else dict(self.placement),
            "figures": dict(self.figures),
        }

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> Timing:
        samples = tuple(float(s) for s in d["samples_ms"])  # type: ignore[attr-defined]
        return cls(
            load_ms=float(d[LOAD]),  # type: ignore[arg-type]
            first_inference_ms=float(d[FIRST_INFERENCE]),  # type: ignore[arg-type]
            latency=LatencyStats.from_samples(samples),
            samples_ms=samples,
            peak_rss_mb=float(d[PEAK_RSS]),  # type: ignore[arg-type]
            rss_before_load_mb=float(d["rss_before_load_mb"]),  # type: ignore[arg-type]
            threads=int(d["threads"]),  # type: ignore[call-overload]
            loadavg_1m=None if d.get("loadavg_1m") is None else float(d["loadavg_1m"]),  # type: ignore[arg-type]
            stop_reason=str(d.get("stop_reason", "iters")),
            lock_wait_ms=float(d.get("lock_wait_ms", 0.0)),  # type: ignore[arg-type]
            isolation=str(d.get("isolation", "fresh")),
            parent_rss_mb=None if d.get("parent_rss_mb") is None else float(d["parent_rss_mb"]),  # type: ignore[arg-type]
            phases_ms={str(k): float(v) for k, v in dict(d.get("phases_ms") or {}).items()},  # type: ignore[call-overload]
            held_monotonic=_pair(d.get("held_monotonic")),
            placement=None if d.get("placement") is None else dict(d["placement"]),  # type: ignore[call-overload]
            figures={str(k): float(v) for k, v in dict(d.get("figures") or {}).items()},  # type: ignore[call-overload]
        )


def _pair(value: object) -> tuple[float, float] | None:
    if value is None:
        return None
    pair = list(value)  # type: ignore[call-overload]
    return float(pair[0]), float(pair[1])


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
    t1 = time.perf_counter_ns()
    prepared = runner.prepare(x)
    t2 = time.perf_counter_ns()
    runner.run(prepared)
    t3 = time.perf_counter_ns()
    for _ in range(settings.warmup):
        runner.run(prepared)
    samples: list[float] = []
    cores = CoreClock()
    busy_start = cores.busy_ms()
    cpu_start = time.process_time_ns()
    start = time.perf_counter_ns()
    reason = _time_runs(runner, prepared, settings, samples, start)
    end = time.perf_counter_ns()
    cpu_end = time.process_time_ns()
    busy_end = cores.busy_ms()
    contention = {}
    if busy_start is not None and busy_end is not None:
        # Others' CPU time on this process's cores during the timed runs, and what its
        # runtime's threads left spare there (nnsweep.bench._contention).
        contention = {
            "timed_others_cpu": busy_end - busy_start - (cpu_end - cpu_start) / 1e6,
            "timed_spare_cpu": max(len(cores.cpus) - runner.threads, 0) * (end - start) / 1e6,
            "timed_others_cpu_uncertainty": cores.uncertainty_ms,
        }
    return Timing(
        load_ms=(t1 - t0) / 1e6,
        first_inference_ms=(t3 - t2) / 1e6,
        latency=LatencyStats.from_samples(samples),
        samples_ms=tuple(samples),
        peak_rss_mb=_peak_rss_mb(),
        rss_before_load_mb=rss_before,
        threads=runner.threads,
        loadavg_1m=os.getloadavg()[0],
        stop_reason=reason,
        phases_ms={
            "load": (t1 - t0) / 1e6,
            "first_inference": (t3 - t2) / 1e6,
            "warmup": (start - t3) / 1e6,
            "timed": (end - start) / 1e6,
            # CPU time of this process during the timed runs: well below "timed" (with one
            # thread) means it was descheduled, i.e. something else ran on its core.
            "timed_cpu": (cpu_end - cpu_start) / 1e6,
            **contention,
        },
    )


def _time_runs(runner: Runner, prepared: object, settings: MeasureSettings, samples: list[float], start: int) -> str:
    """Append per-run times to ``samples`` until ``settings`` say stop; return why it stopped."""
    min_ns = settings.min_duration_s * 1e9
    cap_ns = max(settings.max_duration_s * 1e9, min_ns)
    check_at = settings.iters
    while True:
        t0 = time.perf_counter_ns()
        runner.run(prepared)
        now = time.perf_counter_ns()
        samples.append((now - t0) / 1e6)
        if len(samples) < settings.iters or now - start < min_ns:
            continue
        if not settings.until_stable:
            return "min_duration" if min_ns > 0 and len(samples) > settings.iters else "iters"
        if now - start >= cap_ns:
            return "cap"
        if len(samples) >= check_at:
            # Sorting is O(n log n): check at 10 % steps, so the checks cost O(n log n) overall.
            low, high = median_ci(samples)
            if (high - low) / 2.0 <= settings.ci_rel * float(np.median(samples)):
                return "stable"
            check_at = len(samples) + max(len(samples) // 10, 10)


def run_all(runner: Runner, inputs: np.ndarray) -> np.ndarray:
    """Outputs of ``runner`` for each input (one at a time: deployed models take batch 1)."""
    outs = [runner.to_float(runner.run(runner.prepare(inputs[i : i + 1]))) for i in range(len(inputs))]
    return np.concatenate([o.reshape(1, -1) for o in outs], axis=0)
