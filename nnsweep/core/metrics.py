"""Every metric a trial records, defined once: its name, label, unit, goal and display scale.

A sweep's objectives and constraints name metrics from this table or a user metric of
the spec's ``metrics`` section (:class:`UserMetric`), whose row is made from its goal.
Derived keys (a metric's drop against the device's fp32 baseline, its re-measured value
and interval) are built by the functions here, never spelt out elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "ACCURACY",
    "ACCURACY_DROP",
    "BUILTIN",
    "DECODER_ALSO",
    "DECODE_PER_TOKEN",
    "FIRST_INFERENCE",
    "LATENCY_MEAN",
    "LATENCY_P50",
    "LATENCY_P90",
    "LATENCY_P99",
    "LOAD",
    "MAX_ABS_ERR",
    "MEAN_ABS_ERR",
    "PEAK_RSS",
    "PERPLEXITY",
    "PREFILL",
    "SIZE",
    "SPEEDUP",
    "SQNR",
    "TOKENS_PER_S",
    "TOP1_AGREEMENT",
    "Goal",
    "Metric",
    "UserMetric",
    "coverage",
    "drop",
    "high",
    "low",
    "remeasured",
    "row",
    "swept",
]

Goal = Literal["maximize", "minimize"]


@dataclass(frozen=True)
class Metric:
    """One metric: ``label`` and ``unit`` are what the report shows, after multiplying by ``scale``.

    ``objective``: whether a sweep may optimise it (quality and cost figures; not the
    bookkeeping ones such as a drop, which constraints build themselves).
    """

    name: str
    label: str
    unit: str
    goal: Goal
    description: str
    scale: float = 1.0
    objective: bool = True
    quality: bool = False  # decided by the deployment's outputs, not by its timing
    decoder: bool = False  # measured on decoder language models only (nnsweep.bench.decoding)

    def title(self, *, unit: bool = True) -> str:
        """An axis or column title: ``latency p50 (ms)``."""
        return f"{self.label} ({self.unit})" if unit and self.unit else self.label


ACCURACY = "accuracy"
TOP1_AGREEMENT = "top1_agreement"
SQNR = "sqnr_db"
MAX_ABS_ERR = "max_abs_err"
MEAN_ABS_ERR = "mean_abs_err"
LATENCY_MEAN = "latency_mean_ms"
LATENCY_P50 = "latency_p50_ms"
LATENCY_P90 = "latency_p90_ms"
LATENCY_P99 = "latency_p99_ms"
SIZE = "size_bytes"
PEAK_RSS = "peak_rss_mb"
LOAD = "load_ms"
FIRST_INFERENCE = "first_inference_ms"
SPEEDUP = "speedup_vs_fp32"
ACCURACY_DROP = "accuracy_drop"
PREFILL = "prefill_ms"
DECODE_PER_TOKEN = "decode_ms_per_token"
TOKENS_PER_S = "tokens_per_s"
PERPLEXITY = "perplexity"

_ROWS = (
    Metric(
        ACCURACY,
        "accuracy",
        "%",
        "maximize",
        "top-1 on the evaluation split (top-1 agreement with fp32 for models without labels)",
        100.0,
        quality=True,
    ),
    Metric(
        TOP1_AGREEMENT,
        "top-1 agreement with fp32",
        "%",
        "maximize",
        "top-1 agreement with the fp32 reference",
        100.0,
        quality=True,
    ),
    Metric(SQNR, "SQNR", "dB", "maximize", "signal-to-quantization-noise ratio vs the fp32 reference", quality=True),
    Metric(
        MAX_ABS_ERR,
        "max abs err",
        "",
        "minimize",
        "largest absolute difference from the fp32 outputs",
        objective=False,
        quality=True,
    ),
    Metric(
        MEAN_ABS_ERR,
        "mean abs err",
        "",
        "minimize",
        "mean absolute difference from the fp32 outputs",
        objective=False,
        quality=True,
    ),
    Metric(LATENCY_MEAN, "latency mean", "ms", "minimize", "mean latency"),
    Metric(LATENCY_P50, "latency p50", "ms", "minimize", "median latency"),
    Metric(LATENCY_P90, "latency p90", "ms", "minimize", "90th percentile latency"),
    Metric(LATENCY_P99, "latency p99", "ms", "minimize", "99th percentile latency"),
    Metric(SIZE, "size", "KiB", "minimize", "artifact size", 1 / 1024),
    Metric(PEAK_RSS, "peak memory", "MB", "minimize", "peak resident memory of the measuring process"),
    Metric(LOAD, "load time", "ms", "minimize", "time to load the artifact"),
    Metric(FIRST_INFERENCE, "first inference", "ms", "minimize", "time of the first inference"),
    Metric(
        SPEEDUP, "speed-up vs fp32", "", "maximize", "the device's fp32 baseline p50 over this p50", objective=False
    ),
    Metric(
        ACCURACY_DROP,
        "accuracy drop vs fp32",
        "%",
        "minimize",
        "the fp32 baseline's accuracy minus this one",
        100.0,
        objective=False,
    ),
    # a decoder language model's (nnsweep.bench.decoding): per token, not per call
    Metric(
        PREFILL, "prefill", "ms", "minimize", "p50 time of the prefill graph on the fixed-length prompt", decoder=True
    ),
    Metric(
        DECODE_PER_TOKEN,
        "decode per token",
        "ms",
        "minimize",
        "p50 time of one decode step (T=1) against the static KV cache, over greedy generations",
        decoder=True,
    ),
    Metric(
        TOKENS_PER_S, "decode throughput", "tokens/s", "maximize", "decode steps over their summed time", decoder=True
    ),
    Metric(
        PERPLEXITY,
        "perplexity",
        "",
        "minimize",
        "exp of the mean next-token loss on the seeded held-out text, from the deployed artifacts' logits",
        quality=True,
        decoder=True,
    ),
)

BUILTIN: dict[str, Metric] = {m.name: m for m in _ROWS}

# What a decoder language model's trial measures besides its own metrics (its latency is one
# decode step's, its size both graphs', its first inference the first prefill call).
DECODER_ALSO = (LATENCY_MEAN, LATENCY_P50, LATENCY_P90, LATENCY_P99, SIZE, PEAK_RSS, LOAD, FIRST_INFERENCE)


@dataclass(frozen=True)
class UserMetric:
    """A metric of the user's own task (the spec's ``metrics`` section).

    Args:
        name: what objectives and constraints call it.
        function: ``package.module:function`` or ``file.py:function`` (relative to the sweep
            file), or a callable (the Python API): ``function(outputs, targets) -> float``,
            ``outputs`` a list with one ``(N, *shape)`` array per model output.
        goal: whether larger (``maximize``) or smaller values are better.
    """

    name: str
    function: str | Callable[..., Any]
    goal: Goal

    def row(self) -> Metric:
        return Metric(self.name, self.name.replace("_", " "), "", self.goal, f"user metric {self.name}", quality=True)


def row(name: str, user: tuple[UserMetric, ...] = ()) -> Metric:
    """The table's row for ``name`` (a user metric's from its goal; an unknown name gets a plain row)."""
    for metric in user:
        if metric.name == name:
            return metric.row()
    if name in BUILTIN:
        return BUILTIN[name]
    base = name.removesuffix("_drop")
    if base != name and (base in BUILTIN or any(u.name == base for u in user)):
        source = row(base, user)
        return Metric(
            name,
            f"{source.label} drop vs fp32",
            source.unit,
            "minimize",
            f"fp32 {base} minus this one",
            source.scale,
            objective=False,
        )
    return Metric(name, name.replace("_", " "), "", "maximize", name, objective=False)


def drop(name: str) -> str:
    """The key of ``name``'s drop against the device's fp32 baseline (``accuracy_drop``)."""
    return f"{name}_drop"


def remeasured(name: str) -> str:
    """The key of ``name`` as the end-of-sweep re-measurement pooled it."""
    return f"{name}_remeasured"


def low(name: str) -> str:
    """The key of the low end of ``name``'s re-measured interval."""
    return f"{name}_lo"


def high(name: str) -> str:
    """The key of the high end of ``name``'s re-measured interval."""
    return f"{name}_hi"


def swept(name: str) -> str:
    """The key of ``name`` as the sweep measured it, kept beside the re-measured value that replaces it."""
    return f"{name}_sweep"


def coverage(name: str) -> str:
    """The key of the confidence level that ``name``'s re-measured interval covers."""
    return f"{name}_interval_coverage"
