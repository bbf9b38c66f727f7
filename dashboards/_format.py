"""Words and numbers shared by the figures and the HTML sections of the report.

Everything here is plain text (no HTML escaping, no plotly): the callers escape
for their medium. Metric names are the ones :mod:`nnsweep.core.results` records.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from nnsweep.core import metrics, runtimes
from nnsweep.core.config import DeploymentConfig, Interface
from nnsweep.core.metrics import ACCURACY, LATENCY_P50, LATENCY_P90, SPEEDUP
from nnsweep.core.results import TrialRecord, TrialStatus
from nnsweep.spec import Objective


def metric_name(metric: str, *, unit: bool = True) -> str:
    """An axis or column title: ``latency_p50_ms`` -> ``latency p50 (ms)``, ``accuracy`` -> ``accuracy (%)``.

    With ``unit=False`` the bare name, for text where the value carries its unit (``fmt``).
    """
    return metrics.row(metric).title(unit=unit)


def scale(metric: str) -> float:
    """Factor from the recorded unit to the shown one (fractions to %, bytes to KiB)."""
    return metrics.row(metric).scale


def shown(value: float | None, metric: str) -> float | None:
    """``value`` in the unit :func:`metric_name` announces (``None`` if missing or not finite)."""
    if value is None or not math.isfinite(value):
        return None
    return value * scale(metric)


def fmt(value: float | None, metric: str) -> str:
    """A value for a card, a hover or a table cell, with its unit."""
    if value is None:
        return "–"
    if metric == metrics.SQNR and math.isinf(value):
        return "∞ (identical)"
    v = shown(value, metric)
    if v is None:
        return "–"
    if metrics.row(metric).unit == "%":
        return f"{v:.2f} %"
    if metric == metrics.SPEEDUP:
        return f"{v:.2f}×"
    if metric == metrics.SIZE:
        return f"{v:,.1f} KiB"
    if metric.endswith("_ms"):
        return f"{v:.4f} ms" if abs(v) < 1 else f"{v:.2f} ms"
    return f"{v:.4g}"


def is_latency(metric: str) -> bool:
    """Latency metrics are the ones a compiler estimate replaces (label them)."""
    return metric.startswith("latency_")


def plot_axes(objectives: Sequence[Objective]) -> tuple[str, str]:
    """The trade-off plot's (x, y): the first cost objective (latency, size, memory) and the
    first quality objective (accuracy, SQNR, a user's metric, whichever its direction).

    Falls back to latency p50 and accuracy, so a sweep on one objective still gets the usual plot.
    """
    quality = [o.metric for o in objectives if _is_quality(o.metric)]
    cost = [o.metric for o in objectives if not _is_quality(o.metric)]
    return (cost or [metrics.LATENCY_P50])[0], (quality or [metrics.ACCURACY])[0]


def plot_title(objectives: Sequence[Objective]) -> str:
    """The trade-off plot's heading: ``map50 vs latency p50``."""
    x, y = plot_axes(objectives)
    first = metric_name(y, unit=False)
    return f"{first[:1].upper()}{first[1:]} vs {metric_name(x, unit=False)}"


def _is_quality(metric: str) -> bool:
    """Decided by the outputs: a built-in quality metric, or a user's (every user metric is one)."""
    return metric not in metrics.BUILTIN or metrics.BUILTIN[metric].quality


def backend_order(config: DeploymentConfig) -> str:
    """``xnnpack > portable``; ``(runtime default)`` when the runtime has no order."""
    return " > ".join(config.backends) or "(runtime default)"


def quantization(config: DeploymentConfig) -> str:
    """``static_int8 · per_channel · minmax, 8 batches · core interface``."""
    q = config.quant
    parts = [q.mode.value]
    if q.granularity is not None:
        parts.append(q.granularity.value)
    if q.calibration is not None:
        parts.append(f"{q.calibration.value} calibration, {q.calibration_batches} batches")
    if q.qat_epochs is not None:
        parts.append(f"QAT {q.qat_epochs} epochs")
    if q.interface is not None:
        parts.append("quantized in/out (full)" if q.interface is Interface.FULL else "float in/out (core)")
    return " · ".join(parts)


def partition_limits(config: DeploymentConfig) -> str:
    """The TFLite-style limits in words; ``n/a`` for runtimes that do not delegate partitions."""
    if not runtimes.get(config.runtime).delegates:
        return "n/a (not delegated)"
    p = config.partitions
    most = "any number of partitions" if p.max_delegated_partitions == 0 else f"at most {p.max_delegated_partitions}"
    if p.max_delegated_partitions == 1:
        most += " partition"
    elif p.max_delegated_partitions > 1:
        most += " partitions"
    nodes = p.min_nodes_per_partition
    return f"{most} · at least {nodes} node{'s' if nodes != 1 else ''} each"


def family(config: DeploymentConfig) -> str:
    """The configuration without threads and partition limits: one bar group of the speed-up chart."""
    q = config.quant
    quant = q.mode.value + (f"({q.granularity.value})" if q.granularity else "")
    return f"{config.runtime}/{'>'.join(config.backends) or '-'}/{quant}"


def fallback_backends(record: TrialRecord) -> set[str]:
    """The keys of ``nodes_by_backend`` that are the runtime's CPU fallback rather than a chosen backend.

    The runtime's declared fallback (ExecuTorch ``portable``, ONNX Runtime ``cpu``) when
    it has one; otherwise whatever ran outside the preference order (eager PyTorch's ``cpu``).
    """
    nodes = record.partitions.get("nodes_by_backend") or {}
    fallback = runtimes.get(record.config.runtime).fallback
    if fallback is not None:
        return {fallback} & set(nodes)
    return set(nodes) - set(record.config.backends)


def speedup(record: TrialRecord, baseline: TrialRecord | None) -> float | None:
    """p50 speed-up over the device's fp32 baseline (recorded, else computed from the baseline)."""
    value = record.metrics.get(SPEEDUP)
    if value is not None and math.isfinite(value):
        return float(value)
    if baseline is None:
        return None
    base, mine = baseline.metrics.get(LATENCY_P50), record.metrics.get(LATENCY_P50)
    if base and mine and math.isfinite(base) and math.isfinite(mine):
        return base / mine
    return None


def status(record: TrialRecord) -> str:
    """``ok``, ``reused #4``, ``failed: <reason>``, ``interrupted``."""
    if record.status is TrialStatus.REUSED and record.reused_from is not None:
        return f"reused #{record.reused_from}"
    if record.status is TrialStatus.FAILED:
        return f"failed: {record.reason or 'no reason recorded'}"
    return record.status.value


def latency_note(record: TrialRecord) -> str:
    """`` (estimate)`` for compiler-estimated latencies, `` (emulated)`` for latencies timed under
    emulation (an aarch64 board run by qemu-user on an x86 host), else empty: appended wherever a latency shows."""
    if record.estimated:
        return " (estimate)"
    return " (emulated)" if record.emulated else ""


def hover_lines(record: TrialRecord, objectives: Sequence[Objective], baseline: TrialRecord | None) -> list[str]:
    """What a point's hover says: the configuration and its measurements, one line each."""
    c = record.config
    lines = [
        f"#{record.number} {c.label()}",
        f"runtime: {c.runtime} · backends: {backend_order(c)} · threads: {c.threads}",
        f"quantization: {quantization(c)}",
        f"partition limits: {partition_limits(c)}",
    ]
    metrics = [o.metric for o in objectives]
    metrics += [m for m in (LATENCY_P50, LATENCY_P90, ACCURACY) if m not in metrics and m in record.metrics]
    for m in metrics:
        note = latency_note(record) if is_latency(m) else ""
        lines.append(f"{metric_name(m, unit=False)}: {fmt(record.metrics.get(m), m)}{note}")
    up = speedup(record, baseline)
    if up is not None:
        source = " (from an estimate)" if record.estimated else " (emulated)" if record.emulated else ""
        lines.append(f"speed-up vs fp32: {up:.2f}×{source}")
    parts = record.partitions
    if parts:
        sizes = ", ".join(str(s) for s in parts.get("sizes", []))
        lines.append(f"delegated partitions: {parts.get('count', 0)}" + (f" (nodes {sizes})" if sizes else ""))
    if record.feasible is False:
        lines.append("infeasible: breaks the sweep's constraints")
    return lines


def remeasured(record: TrialRecord) -> str | None:
    """A re-measured trial's decided p50 with its interval, and the sweep's figure when it
    is more than 10 % away (``None``: not re-measured)."""
    m = record.metrics
    low, high = m.get(metrics.low(LATENCY_P50)), m.get(metrics.high(LATENCY_P50))
    if low is None or high is None:
        return None
    coverage = m.get(metrics.coverage(LATENCY_P50))
    text = f"[{fmt(low, LATENCY_P50)}, {fmt(high, LATENCY_P50)}]"
    if coverage is not None:
        text += f" ({coverage:.0%})"
    sweep, decided = m.get(metrics.swept(LATENCY_P50)), m.get(LATENCY_P50)
    if sweep and decided and abs(sweep / decided - 1.0) > 0.10:
        text += f"; sweep read {fmt(sweep, LATENCY_P50)} ({sweep / decided - 1.0:+.0%})"
    return text


def off_by_more_than_10_percent(record: TrialRecord) -> bool:
    """Whether the sweep's own p50 was more than 10 % from the re-measured median."""
    sweep, decided = record.metrics.get(metrics.swept(LATENCY_P50)), record.metrics.get(LATENCY_P50)
    return bool(sweep and decided and abs(sweep / decided - 1.0) > 0.10)
