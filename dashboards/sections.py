"""HTML fragments of the sweep report: the best-configuration card, the trials table,
the partition details and the plot placeholders. Every value is escaped here.

The page itself (``report.html``) and the per-device section (``device.html``) are
``string.Template`` files beside this module; ``report.js`` draws the plots and sorts
the tables in the browser.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from nnsweep.core.metrics import (
    ACCURACY,
    ACCURACY_DROP,
    LATENCY_P50,
    LATENCY_P90,
    PREFILL,
    SIZE,
    SPEEDUP,
    TOKENS_PER_S,
)
from nnsweep.core.results import TrialRecord, TrialStatus
from nnsweep.spec import Objective

from . import _format as f

if TYPE_CHECKING:
    from nnsweep.sensitivity.rank import LayerSensitivity, SensitivityReport
    from nnsweep.sweep.front import BestChoice, SharedChoice

__all__ = [
    "best_card",
    "label",
    "note",
    "partition_details",
    "plot_block",
    "run_url",
    "sensitivity_table",
    "shared_choice",
    "slug",
    "trials_table",
]

_ESTIMATE = ' <span class="badge estimate" title="a compiler estimate, not a measurement">estimate</span>'
# Emulated latencies are real runs of the aarch64 kernels, timed under qemu-user on another
# CPU: they say nothing about a real board (accuracy and fidelity measured there are real).
_EMULATED = (
    ' <span class="badge estimate emulated" title="timed under emulation (qemu-user on another CPU): '
    "not a real board's latency\">emulated</span>"
)


def _latency_badge(record: TrialRecord) -> str:
    return _ESTIMATE if record.estimated else _EMULATED if record.emulated else ""


_EXTRA_COLUMNS = (LATENCY_P50, LATENCY_P90, ACCURACY, SPEEDUP, ACCURACY_DROP, SIZE, PREFILL, TOKENS_PER_S)
# shown only where a trial has them: a decoder's trials have no accuracy, other models' no prefill
_WHERE_MEASURED = frozenset({ACCURACY, ACCURACY_DROP, PREFILL, TOKENS_PER_S})


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def label(text: str) -> str:
    """An escaped configuration label that may wrap after ``/`` and ``>`` rather than mid-word."""
    return esc(text).replace("/", "/<wbr>").replace("&gt;", "&gt;<wbr>")


def slug(text: str) -> str:
    """An HTML id from a device name (device names are ``[A-Za-z0-9_.-]``, but ids must not contain dots)."""
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-") or "x"


def run_url(ui_url: str, link: str | None) -> str | None:
    """The absolute URL of an MLflow run from the tracker's ``#/experiments/<id>/runs/<run>`` path."""
    if not link:
        return None
    return f"{ui_url.rstrip('/')}/{link.lstrip('/')}"


def _json_for_script(value: str) -> str:
    # Inside <script> the HTML parser ends the element at the first "</"; escaping "<", ">"
    # and "&" as JSON unicode escapes keeps any label text from ending or breaking it.
    return value.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def plot_block(plot_id: str, kind: str, figure_json: str, caption: str) -> str:
    """A plot's placeholder, its caption and its figure JSON (``report.js`` draws it).

    Args:
        plot_id: a unique HTML id.
        kind: ``scatter``, ``bar`` or ``box``: what the browser test expects drawn in it.
        figure_json: ``fig.to_json()``.
        caption: a sentence saying how to read the plot (plain text).
    """
    return (
        f'<figure class="plot-figure">'
        f'<div class="plot" id="{esc(plot_id)}" data-kind="{esc(kind)}"></div>'
        f'<script type="application/json" class="plot-data" data-target="{esc(plot_id)}">'
        f"{_json_for_script(figure_json)}</script>"
        f"<figcaption>{esc(caption)}</figcaption></figure>"
    )


def note(text: str) -> str:
    """A grey sentence where a plot would be, saying why there is none."""
    return f'<p class="note">{esc(text)}</p>'


def _metric_cell(record: TrialRecord, metric: str, baseline: TrialRecord | None) -> str:
    if metric == SPEEDUP:
        value = f.speedup(record, baseline) if record.status.measured else None
    else:
        value = record.metrics.get(metric)
    cell = esc(f.fmt(value, metric))
    if value is not None and (f.is_latency(metric) or metric == SPEEDUP):
        cell += _latency_badge(record)
    if metric == LATENCY_P50 and (ranged := f.remeasured(record)) is not None:
        flag = " flag" if f.off_by_more_than_10_percent(record) else ""
        cell += f' <span class="interval{flag}" title="re-measured: interval of the median">{esc(ranged)}</span>'
    sort = "" if value is None else repr(float(value))
    return f'<td class="num" data-sort="{sort}">{cell}</td>'


def best_card(
    device: str,
    best: TrialRecord | None,
    baseline: TrialRecord | None,
    objectives: Sequence[Objective],
    *,
    link: str | None,
    choice: BestChoice | None = None,
) -> str:
    """The best configuration of a device as a card: what to deploy and what it measured.

    Args:
        device: the device's name.
        best: the chosen trial (``None``: the card says there is no feasible measured trial).
        baseline: the fp32 baseline, for the speed-up and the accuracy drop.
        objectives: the sweep's objectives (each is shown).
        link: absolute URL of the best trial's MLflow run.
        choice: how it was chosen (a tie on the first objective, and what broke it).
    """
    if best is None:
        return (
            f'<div class="card best-card" data-device="{esc(device)}"><h3>Best on {esc(device)}</h3>'
            "<p>No feasible measured trial yet: no configuration to recommend.</p></div>"
        )
    c, m = best.config, best.metrics
    est = _latency_badge(best)
    rows: list[tuple[str, str]] = [
        ("runtime", esc(c.runtime)),
        ("backend order", esc(f.backend_order(c))),
        ("quantization", esc(f.quantization(c))),
        ("partition limits", esc(f.partition_limits(c))),
        ("threads", esc(c.threads)),
        (
            "latency p50 / p90",
            esc(" / ".join(f.fmt(m.get(k), k) for k in (LATENCY_P50, LATENCY_P90))) + est,
        ),
    ]
    if ACCURACY in m:  # a decoder's quality is its perplexity (an objective, below)
        rows.append((f.metric_name(ACCURACY, unit=False), esc(f.fmt(m.get(ACCURACY), ACCURACY))))
    if (ranged := f.remeasured(best)) is not None:
        rows.append(("p50 re-measured", esc(ranged)))
    if choice is not None and choice.tied:
        tied = ", ".join(f"#{n}" for n in choice.tied)
        rows.append(
            ("tie", esc(f"tied on {choice.tied_on} with {tied} (intervals overlap); {choice.broken_by} broke the tie"))
        )
    up = f.speedup(best, baseline)
    rows.append(("speed-up vs fp32", esc("–" if up is None else f"{up:.2f}×") + (est if up is not None else "")))
    if ACCURACY_DROP in m:
        rows.append((f.metric_name(ACCURACY_DROP, unit=False), esc(f.fmt(m.get(ACCURACY_DROP), ACCURACY_DROP))))
    shown = {LATENCY_P50, LATENCY_P90, ACCURACY}
    for o in objectives:
        if o.metric not in shown:
            note = est if f.is_latency(o.metric) else ""
            rows.append((f.metric_name(o.metric), esc(f.fmt(m.get(o.metric), o.metric)) + note))
    if SIZE in m and all(o.metric != SIZE for o in objectives):
        rows.append(("artifact size", esc(f.fmt(m.get(SIZE), SIZE))))
    parts = best.partitions
    if parts:
        sizes = ", ".join(str(s) for s in parts.get("sizes", []))
        rows.append(("delegated partitions", esc(f"{parts.get('count', 0)}" + (f" (nodes {sizes})" if sizes else ""))))
    if baseline is not None:
        base = (
            f"#{baseline.number} {baseline.config.label()}, p50 "
            f"{f.fmt(baseline.metrics.get(LATENCY_P50), LATENCY_P50)}{f.latency_note(baseline)}"
        )
        rows.append(("fp32 baseline", esc(base)))
    if link:
        rows.append(("MLflow run", f'<a href="{esc(link)}" target="_blank" rel="noopener">trial #{best.number}</a>'))
    body = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows)
    return (
        f'<div class="card best-card" data-device="{esc(device)}">'
        f'<h3>Best on {esc(device)}: <span class="best-label">#{best.number} {label(c.label())}</span></h3>'
        f"<dl>{body}</dl></div>"
    )


def partition_details(record: TrialRecord) -> str:
    """The partition report of a trial in words: order, partitions, ops that fell back, notes."""
    parts = record.partitions
    if not parts:
        return '<p class="partition-details">No partition report was recorded for this trial.</p>'
    fallback = f.fallback_backends(record)
    nodes: Mapping[str, int] = parts.get("nodes_by_backend") or {}
    items = [
        f"<li><b>Backend order:</b> {esc(f.backend_order(record.config))}</li>",
        "<li><b>Nodes by backend:</b> "
        + esc(", ".join(f"{b}{' (fallback)' if b in fallback else ''} {n}" for b, n in nodes.items()))
        + "</li>",
    ]
    sizes = ", ".join(str(s) for s in parts.get("sizes", []))
    items.append(
        f"<li><b>Delegated partitions:</b> {esc(parts.get('count', 0))}" + (f" (nodes {esc(sizes)})" if sizes else "")
    )
    fell: Mapping[str, int] = parts.get("fallback_ops") or {}
    if fell:
        ops = ", ".join(f"{op} ×{n}" for op, n in sorted(fell.items(), key=lambda kv: (-kv[1], kv[0])))
        items.append(f'<li><b>Fell back to the runtime\'s CPU kernels:</b> <span class="ops">{esc(ops)}</span></li>')
    else:
        items.append("<li><b>Fell back:</b> nothing</li>")
    items.extend(f"<li><b>Note:</b> {esc(n)}</li>" for n in parts.get("notes", []))
    return f'<ul class="partition-details">{"".join(items)}</ul>'


def trials_table(
    device: str,
    records: Sequence[TrialRecord],
    objectives: Sequence[Objective],
    *,
    pareto: Sequence[TrialRecord],
    best: TrialRecord | None,
    baseline: TrialRecord | None,
    links: Mapping[int, str],
) -> str:
    """Every trial of a device, sortable by a click on a column header (``report.js``).

    Args:
        device: the device's name.
        records: its trials, failed and reused ones included.
        objectives: the sweep's objectives (first columns after the status).
        pareto: the feasible Pareto front (marked in the *role* column).
        best: the chosen trial.
        baseline: the fp32 baseline (speed-up for trials that did not record one).
        links: trial number -> absolute URL of its MLflow run.
    """
    metrics = [o.metric for o in objectives]
    metrics += [m for m in _EXTRA_COLUMNS if m not in metrics]
    metrics = [m for m in metrics if m not in _WHERE_MEASURED or any(m in r.metrics for r in records)]
    front = {r.number for r in pareto}
    head = ["#", "configuration", "status", "feasible", *(f.metric_name(m) for m in metrics)]
    head += ["partitions", "fell back (ops)", "role", "MLflow"]
    numeric = {0, *range(4, 4 + len(metrics)), 4 + len(metrics), 5 + len(metrics)}
    ths = "".join(
        f'<th scope="col" data-type="{"number" if i in numeric else "text"}">'
        f'<button type="button">{esc(h)}</button></th>'
        for i, h in enumerate(head)
    )
    rows = []
    for r in sorted(records, key=lambda r: r.number):
        roles = []
        if baseline is not None and r.number == baseline.number:
            roles.append("fp32 baseline")
        if r.number in front:
            roles.append("Pareto")
        if best is not None and r.number == best.number:
            roles.append("best")
        classes = [f"status-{r.status.value}"]
        if r.feasible is False:
            classes.append("infeasible")
        classes += [role.split()[-1].lower() for role in roles]
        feasible = {True: "yes", False: "no", None: "–"}[r.feasible]
        parts = r.partitions
        count = parts.get("count") if parts else None
        fell = sum((parts.get("fallback_ops") or {}).values()) if parts else None
        status = esc(f.status(r))
        if r.status is TrialStatus.FAILED:
            status = f'<span class="reason">{status}</span>'
        url = links.get(r.number)
        cells = [
            f'<td class="num" data-sort="{r.number}">{r.number}</td>',
            f"<td><code>{label(r.config.label())}</code></td>",
            f'<td data-sort="{esc(r.status.value)}">{status}</td>',
            f"<td>{feasible}</td>",
            *(_metric_cell(r, m, baseline) for m in metrics),
            f'<td class="num" data-sort="{"" if count is None else count}">{"–" if count is None else count}</td>',
            f'<td class="num" data-sort="{"" if fell is None else fell}">{"–" if fell is None else fell}</td>',
            f"<td>{esc(', '.join(roles))}</td>",
            f'<td><a href="{esc(url)}" target="_blank" rel="noopener">run</a></td>' if url else "<td>–</td>",
        ]
        rows.append(f'<tr class="{" ".join(classes)}" data-trial="{r.number}">{"".join(cells)}</tr>')
    return (
        f'<div class="table-wrap"><table class="trials sortable" data-device="{esc(device)}">'
        f"<thead><tr>{ths}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def shared_choice(choice: SharedChoice | None, devices: Sequence[str]) -> str:
    """The one configuration to ship to every device (``nnsweep best --across-devices``):
    its label and worst-case cost, then per device its trial, the device's own best and
    what choosing the shared one costs there."""
    if len(devices) < 2:
        return note("One device: its best configuration is the one to ship.")
    if choice is None:
        return note(
            "No configuration was measured and feasible on every device, so none can be shipped to all of them "
            "as it is: sweep the devices over a common space, or ship each device its own best."
        )
    metric = f.metric_name(choice.metric)
    rows = []
    for c in choice.costs:
        same = c.record.config.digest() == c.own_best.config.digest()
        own = "the same" if same else f"<code>{label(c.own_best.config.label())}</code> (#{c.own_best.number})"
        rows.append(
            f"<tr><td>{esc(c.device)}</td>"
            f'<td class="num">#{c.record.number}: {esc(f.fmt(c.record.metrics.get(choice.metric), choice.metric))}'
            f"{_latency_badge(c.record)}</td>"
            f"<td>{own}</td>"
            f'<td class="num">{esc(f.fmt(c.own_best.metrics.get(choice.metric), choice.metric))}'
            f"{_latency_badge(c.own_best)}</td>"
            f'<td class="num">{c.slowdown:.2f}x</td></tr>'
        )
    return (
        f'<p>Ship <code class="shared-label">{label(choice.config.label())}</code> to every device: it is feasible '
        f"on all of them and its worst {esc(f.metric_name(choice.metric, unit=False))} against a device's own best "
        f"is {choice.worst_slowdown:.2f}x (<code>nnsweep best SPEC --across-devices</code>).</p>"
        '<div class="table-wrap"><table class="trials shared">'
        f"<thead><tr><th>device</th><th>this configuration: {esc(metric)}</th><th>the device's own best</th>"
        f"<th>its {esc(metric)}</th><th>cost of sharing</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def sensitivity_table(runtime: str, granularity: str, report: SensitivityReport) -> str:
    """One runtime's per-layer sensitivity (``nnsweep sensitivity``): the layers a
    ``float_layers`` count keeps float, in order, with what quantizing each alone costs."""
    top1 = report.metric == ACCURACY

    def lost(e: LayerSensitivity) -> str:
        value = report.score(e, "quantize_one")
        return f"{value * 100:+.2f}" if top1 else f"{value:+.4g}"

    rows = "".join(
        f'<tr><td class="num">{i}</td><td><code>{esc(e.layer)}</code></td>'
        f'<td class="num">{lost(e)}</td>'
        f'<td class="num">{e.quantize_one_sqnr:.1f}</td></tr>'
        for i, e in enumerate(report.ranked_entries(), 1)
    )
    if top1:
        scored = f"Top-1 on the {report.split} split: every layer int8 {report.whole_int8:.2%}, the candidate layers "
        scored += f"float {report.all_float:.2%}."
        column = "points lost when quantized alone"
    else:
        scored = f"{esc(report.metric)} on the {report.split} split: every layer int8 {report.whole_int8:.4g}, "
        scored += f"the candidate layers float {report.all_float:.4g}."
        column = f"{esc(report.metric)} lost when quantized alone"
    return (
        f'<div class="card sensitivity" data-runtime="{esc(runtime)}">'
        f"<h3>Layer sensitivity: {esc(runtime)}, {esc(report.mode.replace('_', ' '))} {esc(granularity)}</h3>"
        f"<p>{scored} A configuration with float_layers K keeps the first K float.</p>"
        '<table><thead><tr><th scope="col">K</th><th scope="col">layer</th>'
        f'<th scope="col">{column}</th>'
        '<th scope="col">output SQNR then, dB (breaks ties)</th></tr></thead>'
        f"<tbody>{rows}</tbody></table></div>"
    )
