"""Latency statistics from per-run samples."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["LatencyStats"]


@dataclass(frozen=True)
class LatencyStats:
    """Summary of per-run latencies, all in milliseconds."""

    mean: float
    p50: float
    p90: float
    p99: float
    std: float
    min: float
    max: float
    count: int

    @classmethod
    def from_samples(cls, samples_ms: Sequence[float]) -> LatencyStats:
        """Summarise ``samples_ms``; percentiles interpolate linearly (numpy's default).

        Raises:
            ValueError: no samples.
        """
        if len(samples_ms) == 0:
            raise ValueError("no latency samples")
        a = np.asarray(samples_ms, dtype=np.float64)
        p50, p90, p99 = np.percentile(a, [50, 90, 99])
        return cls(
            mean=float(a.mean()),
            p50=float(p50),
            p90=float(p90),
            p99=float(p99),
            std=float(a.std(ddof=1)) if len(a) > 1 else 0.0,
            min=float(a.min()),
            max=float(a.max()),
            count=len(a),
        )

    def to_dict(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in ("mean", "p50", "p90", "p99", "std", "min", "max")}
