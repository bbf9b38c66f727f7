"""Measuring deployed artifacts: the runner contract, the timing harness (run in a
process of its own per measurement, fresh or forked from a warm worker), the
machine-wide measurement lock, latency statistics, and accuracy/fidelity."""

from nnsweep.bench._evaluate import Evaluation, Fidelity, evaluate, predicted_classes
from nnsweep.bench._explaining import explain_divergence, take_divergence
from nnsweep.bench._foreign import python_command
from nnsweep.bench._harness import MeasureSettings, Timing, time_runner
from nnsweep.bench._isolated import measure_in_subprocess
from nnsweep.bench._machine_lock import LockWait, MachineLock
from nnsweep.bench._profiling import profile_in_subprocess, take_profile, take_profiles
from nnsweep.bench._runner import Runner
from nnsweep.bench._stats import LatencyStats, median_ci
from nnsweep.bench._warm import ForkHere, WarmWorker, WorkerUnavailable

__all__ = [
    "Evaluation",
    "Fidelity",
    "ForkHere",
    "LatencyStats",
    "LockWait",
    "MachineLock",
    "MeasureSettings",
    "Runner",
    "Timing",
    "WarmWorker",
    "WorkerUnavailable",
    "evaluate",
    "explain_divergence",
    "measure_in_subprocess",
    "median_ci",
    "predicted_classes",
    "profile_in_subprocess",
    "python_command",
    "take_divergence",
    "take_profile",
    "take_profiles",
    "time_runner",
]
