"""Text tables of trials, for the terminal (``nnsweep run`` and ``nnsweep best``)."""

from __future__ import annotations

from collections.abc import Sequence

from nnsweep.core.metrics import ACCURACY, LATENCY_P90, SIZE, SPEEDUP, TOP1_AGREEMENT
from nnsweep.core.results import TrialRecord
from nnsweep.spec import Objective

__all__ = ["render_table"]


def _fmt(value: float | None, metric: str) -> str:
    if value is None:
        return "-"
    if metric in (ACCURACY, TOP1_AGREEMENT):
        return f"{value * 100:.2f}%"
    if metric.endswith("_ms"):
        return f"{value:.4f}" if value < 1 else f"{value:.2f}"
    if metric == SIZE:
        return f"{value / 1024:.0f}K"
    return f"{value:.3g}"


def render_table(records: Sequence[TrialRecord], objectives: Sequence[Objective], *, title: str = "") -> str:
    """A fixed-width table of ``records`` (trial, configuration, objectives, speedup, status)."""
    metrics = [o.metric for o in objectives]
    extra = [m for m in (LATENCY_P90, SIZE, "partition_count", SPEEDUP) if m not in metrics]
    headers = ["#", "configuration", *metrics, *extra, "status"]
    rows = []
    for r in records:
        status = r.status.value
        if r.status.value == "reused" and r.reused_from is not None:
            status = f"= #{r.reused_from}"
        if r.feasible is False:
            status += " (infeasible)"
        if r.estimated:
            status += " (estimate)"
        if r.emulated:
            status += " (emulated)"
        if r.float_in_effect:
            status += " (float in effect)"
        if r.reason and r.status.value == "failed":
            status += f": {r.reason[:60]}"
        rows.append([str(r.number), r.config.label(), *(_fmt(r.metrics.get(m), m) for m in (*metrics, *extra)), status])
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = [title] if title else []
    lines.append("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    lines.append("  ".join("-" * w for w in widths))
    lines.extend("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows)
    return "\n".join(lines)
