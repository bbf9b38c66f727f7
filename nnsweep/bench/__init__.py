"""Measuring deployed artifacts: the runner contract, the timing harness (run in a
fresh process per measurement), latency statistics, and accuracy/fidelity."""

from nnsweep.bench._evaluate import Evaluation, Fidelity, evaluate
from nnsweep.bench._harness import MeasureSettings, Timing, time_runner
from nnsweep.bench._isolated import measure_in_subprocess
from nnsweep.bench._runner import Runner
from nnsweep.bench._stats import LatencyStats

__all__ = [
    "Evaluation",
    "Fidelity",
    "LatencyStats",
    "MeasureSettings",
    "Runner",
    "Timing",
    "evaluate",
    "measure_in_subprocess",
    "time_runner",
]
