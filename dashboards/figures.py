"""Plotly figure builders for the sweep report.

Each builder takes trial records (and what the caller already decided: the Pareto
front, the best trial, the fp32 baseline) and returns a ``plotly.graph_objects.Figure``;
none of them reads a study or a tracking store, and none decides which trials are
Pareto-optimal (that is :func:`nnsweep.sweep.front.pareto_front`). Importing this module
imports plotly, so :mod:`nnsweep.report.html` imports it only when it writes a report.

Compiler-estimated latencies (``TrialRecord.estimated``) are drawn hollow or hatched
and say "estimate" in their hover; failed trials are never drawn (the table lists them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from nnsweep.core import metrics
from nnsweep.core.metrics import ACCURACY, LATENCY_P50
from nnsweep.core.results import TrialRecord, TrialStatus
from nnsweep.spec import Objective

from . import _format as f

__all__ = ["latency_distributions", "partition_map", "speedup_chart", "tradeoff"]

# Okabe–Ito: distinguishable with the common colour-vision deficiencies.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
FEASIBLE, INFEASIBLE, FRONT, BASELINE, BEST = "#0072B2", "#9a9a9a", "#D55E00", "#000000", "#009E73"
FALLBACK = "#bbbbbb"
_FONT = {"family": "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif", "size": 12}


def _layout(fig: go.Figure, *, height: int, **extra: object) -> go.Figure:
    settings: dict[str, object] = {
        "template": "plotly_white",
        "height": height,
        "font": _FONT,
        "margin": {"l": 10, "r": 10, "t": 40, "b": 10},
        "hoverlabel": {"align": "left"},
        "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.02, "xanchor": "left", "x": 0},
    }
    fig.update_layout(**{**settings, **extra})
    return fig


def _log_scale(values: Sequence[float]) -> bool:
    """A log axis when the values span more than a decade (fast and slow configurations both readable)."""
    positive = [v for v in values if v > 0]
    return bool(positive) and max(positive) / min(positive) > 10


def _axis(title: str, values: Sequence[float]) -> dict[str, object]:
    """An axis; logarithmic with 1-2-5 ticks written out in full when ``values`` span more than a decade.

    plotly's own log ticks label the minor steps with a bare digit ("3" for 0.03), which reads wrong.
    """
    if not _log_scale(values):
        return {"title": {"text": title}, "type": "linear"}
    positive = [v for v in values if v > 0]
    low, high = math.floor(math.log10(min(positive))), math.ceil(math.log10(max(positive)))
    ticks = [m * 10.0**e for e in range(low, high + 1) for m in (1, 2, 5)]
    ticks = [t for t in ticks if min(positive) / 1.5 <= t <= max(positive) * 1.5]
    return {
        "title": {"text": title},
        "type": "log",
        "tickvals": ticks,
        "ticktext": [f"{t:g}" for t in ticks],
    }


def _point(record: TrialRecord, metric: str) -> float | None:
    return f.shown(record.metrics.get(metric), metric)


def tradeoff(
    records: Sequence[TrialRecord],
    objectives: Sequence[Objective],
    *,
    pareto: Sequence[TrialRecord],
    best: TrialRecord | None,
    baseline: TrialRecord | None,
    links: Mapping[int, str] | None = None,
) -> go.Figure:
    """The accuracy-vs-latency scatter of one device (the first objectives to maximise and minimise).

    Feasible and infeasible trials are separate traces (filled circles, grey crosses);
    estimated latencies are hollow. The Pareto front is drawn as the staircase it is
    for two objectives, the fp32 baseline as a black star and the best configuration
    as a green ring. Reused trials are not drawn twice: the trial they reuse names them.

    Args:
        records: all the device's trials (failed ones are skipped).
        objectives: the sweep's objectives (choose the axes, see :func:`plot_axes`).
        pareto: the device's feasible Pareto front, as :func:`nnsweep.sweep.front.pareto_front` returns it.
        best: the chosen trial, if any.
        baseline: the fp32 baseline trial, if it was measured.
        links: trial number -> absolute URL of its MLflow run (a click on a point opens it).
    """
    links = links or {}
    x_m, y_m = f.plot_axes(objectives)
    reused: dict[int, list[int]] = {}
    for r in records:
        if r.status is TrialStatus.REUSED and r.reused_from is not None:
            reused.setdefault(r.reused_from, []).append(r.number)
    drawn = [
        r for r in records if r.status is TrialStatus.OK and _point(r, x_m) is not None and _point(r, y_m) is not None
    ]

    def hover(r: TrialRecord) -> str:
        lines = f.hover_lines(r, objectives, baseline)
        if r.number in reused:
            lines.append("also measured as: " + ", ".join(f"#{n}" for n in reused[r.number]) + " (reused)")
        if r.number in links:
            lines.append("click: open the MLflow run")
        return "<br>".join(lines)

    fig = go.Figure()
    groups = (
        ("feasible", FEASIBLE, "circle", lambda r: r.feasible is not False and not r.estimated),
        ("feasible, latency estimated", FEASIBLE, "circle-open", lambda r: r.feasible is not False and r.estimated),
        ("infeasible", INFEASIBLE, "x", lambda r: r.feasible is False and not r.estimated),
        ("infeasible, latency estimated", INFEASIBLE, "x-open", lambda r: r.feasible is False and r.estimated),
    )
    for name, color, symbol, keep in groups:
        members = [r for r in drawn if keep(r)]
        if not members:
            continue
        fig.add_trace(
            go.Scatter(
                x=[_point(r, x_m) for r in members],
                y=[_point(r, y_m) for r in members],
                mode="markers",
                name=f"{name} ({len(members)})",
                marker={"color": color, "symbol": symbol, "size": 9, "line": {"width": 1.5, "color": color}},
                text=[hover(r) for r in members],
                customdata=[links.get(r.number, "") for r in members],
                hovertemplate="%{text}<extra></extra>",
            )
        )
    front = [r for r in pareto if _point(r, x_m) is not None and _point(r, y_m) is not None]
    if front:
        front = sorted(front, key=lambda r: _point(r, x_m) or 0.0)
        # With exactly these two objectives the front is a staircase in this plane; with more
        # objectives it is only a projection, so a plain line makes no dominance claim.
        staircase = {o.metric for o in objectives} == {x_m, y_m} and len(objectives) == 2
        fig.add_trace(
            go.Scatter(
                x=[_point(r, x_m) for r in front],
                y=[_point(r, y_m) for r in front],
                mode="lines",
                name=f"Pareto front ({len(front)})" if staircase else f"Pareto front, all objectives ({len(front)})",
                line={"color": FRONT, "width": 2, "shape": "hv" if staircase else "linear", "dash": "solid"},
                hoverinfo="skip",
            )
        )
        ranged = [r for r in front if metrics.low(x_m) in r.metrics and metrics.high(x_m) in r.metrics]
        if ranged:  # the re-measured front: each point's interval for the median of its pooled p50s
            fig.add_trace(
                go.Scatter(
                    x=[_point(r, x_m) for r in ranged],
                    y=[_point(r, y_m) for r in ranged],
                    mode="markers",
                    marker={"size": 1, "color": FRONT},
                    error_x={
                        "type": "data",
                        "symmetric": False,
                        "array": [r.metrics[metrics.high(x_m)] - r.metrics[x_m] for r in ranged],
                        "arrayminus": [r.metrics[x_m] - r.metrics[metrics.low(x_m)] for r in ranged],
                        "color": FRONT,
                    },
                    name="re-measured interval of the median",
                    hoverinfo="skip",
                )
            )
    for record, label, color, symbol, size in (
        (baseline, "fp32 baseline", BASELINE, "star", 16),
        (best, "best", BEST, "circle-open", 22),
    ):
        if record is None or _point(record, x_m) is None or _point(record, y_m) is None:
            continue
        fig.add_trace(
            go.Scatter(
                x=[_point(record, x_m)],
                y=[_point(record, y_m)],
                mode="markers+text",
                name=f"{label}: #{record.number} {record.config.label()}",
                text=[label],
                textposition="top center",
                textfont={"color": color},
                marker={"color": color, "symbol": symbol, "size": size, "line": {"width": 3, "color": color}},
                customdata=[links.get(record.number, "")],
                hovertext=[hover(record)],
                hovertemplate="%{hovertext}<extra></extra>",
            )
        )
    xs = [v for r in drawn if (v := _point(r, x_m)) is not None]
    estimated = any(r.estimated for r in drawn)
    x_title = f.metric_name(x_m) + (" — hollow: compiler estimate" if estimated and f.is_latency(x_m) else "")
    if f.is_latency(x_m) and any(r.emulated for r in drawn):
        x_title += " — emulated (qemu-user): not a real board's latency"
    if not drawn:
        fig.add_annotation(text="no measured trial yet", showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    yaxis: dict[str, object] = {"title": {"text": f.metric_name(y_m)}}
    focus = _focus_range(drawn, y_m)
    if focus is not None:
        low, high, outside = focus
        yaxis["range"] = [low, high]
        fig.add_annotation(
            text=f"{outside} infeasible trial{'s' if outside > 1 else ''} outside this range "
            "(double-click the plot to show all)",
            showarrow=False,
            xref="paper",
            yref="paper",
            x=1.0,
            y=0.0,
            xanchor="right",
            yanchor="bottom",
            font={"size": 11, "color": INFEASIBLE},
        )
    return _layout(fig, height=480, xaxis=_axis(x_title, xs), yaxis=yaxis)


def _focus_range(drawn: Sequence[TrialRecord], metric: str) -> tuple[float, float, int] | None:
    """A y range around the feasible trials when infeasible ones lie far outside it, else ``None``.

    A broken int8 engine (QNNPACK on x86 scores ~10 % on digits) would squash the
    interesting 1 % around the baseline into one line; plotly's double-click still shows all.
    """
    ok = [v for r in drawn if r.feasible is not False and (v := _point(r, metric)) is not None]
    if not ok:
        return None
    low, high = min(ok), max(ok)
    pad = max((high - low) * 0.15, abs(high) * 0.002, 1e-9)
    low, high = low - pad, high + pad
    outside = [
        v for r in drawn if r.feasible is False and (v := _point(r, metric)) is not None and not low <= v <= high
    ]
    if not outside:
        return None
    # Only worth it when the outliers would stretch the axis a lot.
    stretched = max(high, *outside) - min(low, *outside)
    if stretched < 3 * (high - low):
        return None
    return low, high, len(outside)


def speedup_chart(devices: Sequence[tuple[str, Sequence[TrialRecord], TrialRecord | None]]) -> go.Figure:
    """Speed-up over each device's fp32 baseline, device × configuration (grouped bars).

    A configuration here is a family: runtime, backend order and quantization (threads and
    partition limits folded in); each bar is the family's fastest feasible measured trial
    on that device (hatched ``/`` if the family had only infeasible trials, dotted if the
    latency is a compiler estimate). The line at 1× is the fp32 baseline.

    Args:
        devices: (device name, its trials, its fp32 baseline) in report order.
    """
    chosen: dict[str, dict[str, tuple[TrialRecord, float]]] = {}
    for device, records, baseline in devices:
        per: dict[str, tuple[TrialRecord, float]] = {}
        for r in records:
            up = f.speedup(r, baseline) if r.status is TrialStatus.OK else None
            if up is None:
                continue
            key = f.family(r.config)
            old = per.get(key)
            # A feasible trial beats any infeasible one; among equals, the faster wins.
            rank = (r.feasible is not False, up)
            if old is None or rank > (old[0].feasible is not False, old[1]):
                per[key] = (r, up)
        chosen[device] = per
    best_of = {fam: max(per[fam][1] for per in chosen.values() if fam in per) for per in chosen.values() for fam in per}
    families = sorted(best_of, key=lambda fam: (-best_of[fam], fam))
    fig = go.Figure()
    for i, (device, per) in enumerate(chosen.items()):
        if not per:
            continue  # no fp32 baseline measured there: no speed-up to draw (the caption says so)
        picks = [per.get(fam) for fam in families]
        fig.add_trace(
            go.Bar(
                y=families,
                # Bars grow from the baseline (1×): right is faster than fp32, left is slower.
                x=[p[1] - 1.0 if p else None for p in picks],
                base=1.0,
                orientation="h",
                name=device,
                marker={
                    "color": PALETTE[i % len(PALETTE)],
                    "pattern": {
                        "shape": [
                            "" if p is None else "/" if p[0].feasible is False else "." if p[0].estimated else ""
                            for p in picks
                        ]
                    },
                },
                text=[f"{p[1]:.2f}×" if p else "" for p in picks],
                textposition="outside",
                cliponaxis=False,
                hovertext=[_speedup_hover(device, p) for p in picks],
                hovertemplate="%{hovertext}<extra></extra>",
            )
        )
    values = [up for per in chosen.values() for _, up in per.values()]
    if not values:
        fig.add_annotation(text="no measured trial yet", showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    xaxis = _axis("speed-up of latency p50 over the device's fp32 baseline (×)", [*values, 1.0])
    fig.add_vline(x=1.0, line={"color": BASELINE, "dash": "dash", "width": 1})
    # Annotations on a log axis take log10 of the position (shapes do not).
    fig.add_annotation(
        x=0.0 if xaxis["type"] == "log" else 1.0,
        y=1.0,
        yref="paper",
        text="fp32 baseline = 1×",
        showarrow=False,
        xanchor="left",
        yanchor="bottom",
        font={"size": 11},
    )
    bars = max(1, len(families)) * max(1, sum(1 for per in chosen.values() if per))
    return _layout(
        fig,
        height=max(220, 90 + 22 * bars + 12 * len(families)),
        barmode="group",
        xaxis=xaxis,
        yaxis={
            "title": {"text": "configuration"},
            "autorange": "reversed",
            "automargin": True,
            # Long names break after the backend order, so a narrow page (MLflow's artifact viewer) keeps its bars.
            "tickmode": "array",
            "tickvals": families,
            "ticktext": [fam.replace("/", "/<br>", 2).replace("/<br>", "/", 1) for fam in families],
        },
        margin={"l": 10, "r": 60, "t": 40, "b": 10},  # room for the "16.19×" labels outside the bars
    )


def _speedup_hover(device: str, pick: tuple[TrialRecord, float] | None) -> str:
    if pick is None:
        return ""
    r, up = pick
    lines = [
        f"{device}: {up:.2f}× vs fp32" + (" (from an estimate)" if r.estimated else f.latency_note(r)),
        f"#{r.number} {r.config.label()}",
        "latency p50: " + f.fmt(r.metrics.get(LATENCY_P50), LATENCY_P50) + f.latency_note(r),
        "accuracy: " + f.fmt(r.metrics.get(ACCURACY), ACCURACY),
    ]
    if r.feasible is False:
        lines.append("infeasible (no feasible trial of this configuration)")
    return "<br>".join(lines)


def partition_map(record: TrialRecord) -> go.Figure:
    """Where the ops of one deployment ran: nodes per backend, the delegated partitions, the ops that fell back.

    Three rows on one node-count axis: *nodes by backend* (the runtime's fallback
    in grey), *delegated partitions* (one segment per partition, largest first, as
    the partition report lists them) and *fell back* (one segment per operator).

    Args:
        record: a trial with a partition report (``TrialRecord.partitions``).
    """
    parts = record.partitions
    nodes: Mapping[str, int] = parts.get("nodes_by_backend") or {}
    fallback = f.fallback_backends(record)
    order = [b for b in record.config.backends if b in nodes and b not in fallback]
    order += sorted(b for b in nodes if b not in order and b not in fallback)
    order += sorted(fallback)
    colors = {b: PALETTE[i % len(PALETTE)] for i, b in enumerate(x for x in order if x not in fallback)}
    colors.update({b: FALLBACK for b in fallback})
    rows: list[tuple[str, list[tuple[int, str, str, str]]]] = []  # row -> (width, color, label, hover)
    rows.append(
        (
            "nodes by backend",
            [
                (
                    int(nodes[b]),
                    colors[b],
                    f"{b}{' (fallback)' if b in fallback else ''}: {nodes[b]}",
                    f"{b}{' — the runtime fallback' if b in fallback else ''}: {nodes[b]} nodes",
                )
                for b in order
            ],
        )
    )
    placed = list(parts.get("partitions") or [])
    if placed:
        rows.append(
            (
                "delegated partitions",
                [
                    (
                        int(p["nodes"]),
                        colors.get(p["backend"], PALETTE[0]),
                        str(p["nodes"]),
                        f"{p['backend']} partition {i} of {len(placed)}: {p['nodes']} nodes",
                    )
                    for i, p in enumerate(placed, 1)
                ],
            )
        )
    fell: Mapping[str, int] = parts.get("fallback_ops") or {}
    if fell:
        ops = sorted(fell.items(), key=lambda kv: (-kv[1], kv[0]))
        shades = ("#d9d9d9", "#bdbdbd", "#a6a6a6", "#c7c7c7", "#e5e5e5")
        rows.append(
            (
                "fell back",
                [
                    (int(n), shades[i % len(shades)], f"{op.split('.')[-1].split('::')[-1]} ×{n}", f"{op}: {n} ops")
                    for i, (op, n) in enumerate(ops)
                ],
            )
        )
    fig = go.Figure()
    for name, segments in rows:
        offsets = [sum(w for w, *_ in segments[:i]) for i in range(len(segments))]
        fig.add_trace(
            go.Bar(
                y=[name] * len(segments),
                x=[w for w, *_ in segments],
                base=offsets,
                orientation="h",
                marker={"color": [c for _, c, _, _ in segments], "line": {"color": "white", "width": 1}},
                text=[t for _, _, t, _ in segments],
                textposition="inside",
                insidetextanchor="middle",
                hovertext=[h for *_, h in segments],
                hovertemplate="%{hovertext}<extra></extra>",
                showlegend=False,
            )
        )
    if not nodes:
        fig.add_annotation(text="no partition report", showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    return _layout(
        fig,
        height=90 + 45 * max(1, len(rows)),
        barmode="overlay",
        xaxis={"title": {"text": "operator nodes"}},
        yaxis={"autorange": "reversed", "automargin": True},
    )


def latency_distributions(
    records: Sequence[TrialRecord], *, best: TrialRecord | None, baseline: TrialRecord | None
) -> go.Figure:
    """Per-run latency samples of the given trials (the Pareto front and the baseline), one box each.

    Args:
        records: the trials to show, top to bottom.
        best: marked ``best`` in its label.
        baseline: marked ``fp32 baseline`` in its label.
    """
    fig = go.Figure()
    shown: list[float] = []
    for i, r in enumerate(records):
        if not r.samples_ms:
            continue
        tag = " · best" if best is not None and r.number == best.number else ""
        if baseline is not None and r.number == baseline.number:
            tag += " · fp32 baseline"
        name = f"#{r.number} {r.config.label()}{tag}{f.latency_note(r)}"
        color = BEST if tag.startswith(" · best") else BASELINE if "baseline" in tag else PALETTE[i % len(PALETTE)]
        shown.extend(r.samples_ms)
        fig.add_trace(
            go.Box(
                x=list(r.samples_ms),
                name=name,
                orientation="h",
                boxpoints="outliers",
                marker={"color": color, "size": 3},
                line={"width": 1.5},
                hoveron="boxes",
            )
        )
    if not shown:
        fig.add_annotation(
            text="no per-run samples recorded", showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5
        )
    return _layout(
        fig,
        height=110 + 46 * max(1, len(fig.data)),
        showlegend=False,
        xaxis=_axis("latency per run (ms)", shown),
        yaxis={"autorange": "reversed", "automargin": True},
    )
