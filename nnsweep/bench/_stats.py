"""Latency statistics from per-run samples, and the confidence interval of their median."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["LatencyStats", "median_ci"]

# Two-sided 95 % quantile of the standard normal distribution.
_Z95 = 1.959963984540054


def median_ci(samples_ms: Sequence[float], z: float = _Z95) -> tuple[float, float]:
    """A distribution-free confidence interval of the median (95 % by default).

    The order statistics of ranks ``n/2 -+ z*sqrt(n)/2`` bound it (the normal approximation
    of the binomial count of samples below the median). It assumes independent samples,
    which consecutive inference times are not quite: hence the spread between processes is
    reported too. Returns ``(low, high)``; with fewer than 6 samples, the whole range.
    Raises ``ValueError`` on no samples.

    Example:
        >>> median_ci([float(x) for x in range(1, 101)])
        (41.0, 61.0)
    """
    n = len(samples_ms)
    if n == 0:
        raise ValueError("no latency samples")
    a = np.sort(np.asarray(samples_ms, dtype=np.float64))
    if n < 6:
        return float(a[0]), float(a[-1])
    half = z * math.sqrt(n) / 2.0
    low = max(math.floor(n / 2.0 - half), 0)
    high = min(math.ceil(n / 2.0 + half), n - 1)
    return float(a[low]), float(a[high])


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
