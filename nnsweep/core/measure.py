"""How one artifact is timed: the spec's ``measure`` section, which ``nnsweep bench``'s
options and the timing harness share (defaults follow TFLite's ``benchmark_model``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from nnsweep.core.fields import check_settings, setting

__all__ = ["MAX_ITERS", "MAX_MEASURE_SECONDS", "MAX_REMEASURE", "MAX_WARMUP", "MeasureSettings"]

# Far beyond any sensible value, so a typo (1e26, .inf) is an error naming the bound
# instead of an overflow deep inside a run.
MAX_WARMUP = 100_000
MAX_ITERS = 1_000_000
MAX_MEASURE_SECONDS = 24 * 3600.0  # one measurement's timeout / minimum duration
MAX_REMEASURE = 20


@dataclass(frozen=True)
class MeasureSettings:
    """How to time one artifact; each field's help says what it does.

    ``until_stable``: after ``iters`` runs and ``min_duration_s``, keep timing until the
    p50's 95 % confidence interval is within ``ci_rel`` of the p50 (half-width), or until
    ``max_duration_s`` of timed runs have passed (``min_duration_s`` still wins if longer).
    ``remeasure`` is the sweep's, not one measurement's (:mod:`nnsweep.sweep.remeasure`).
    """

    warmup: int = setting(5, "warm-up runs", ge=0, le=MAX_WARMUP)
    iters: int = setting(200, "timed runs", ge=1, le=MAX_ITERS)
    min_duration_s: float = setting(
        0.0, "keep timing until at least this many seconds have passed", ge=0, le=MAX_MEASURE_SECONDS, unit="seconds"
    )
    timeout_s: float = setting(
        600.0, "give up on the measurement after this many seconds", gt=0, le=MAX_MEASURE_SECONDS, unit="seconds"
    )
    until_stable: bool = setting(
        False,
        "after the timed runs, keep timing until the p50's 95% confidence interval is within a fraction of it",
    )
    ci_rel: float = setting(
        0.01,
        "the interval's half-width, as a fraction of the p50, that counts as stable (0.01 = 1%)",
        gt=0,
        lt=1,
        unit="fraction",
    )
    max_duration_s: float = setting(
        10.0,
        "timing until stable: stop after this many seconds even if not stable",
        gt=0,
        le=MAX_MEASURE_SECONDS,
        unit="seconds",
    )
    remeasure: int = setting(
        3,
        "when the sweep ends, measure each Pareto candidate this many more times in fresh processes",
        ge=0,
        le=MAX_REMEASURE,
    )

    def __post_init__(self) -> None:
        check_settings(self)

    def to_dict(self) -> dict[str, object]:
        """The settings as JSON-able data (what a measuring process receives)."""
        return dataclasses.asdict(self)
