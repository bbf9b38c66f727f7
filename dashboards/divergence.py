"""The report's divergence section of a device: for the fastest trials a quality bound turned
away, each layer's output against fp32 (SQNR, graph order), the first layer below the
threshold, the worst, and the layers ``quant.float_layers`` would keep float."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from nnsweep.core.metrics import SQNR

from .sections import esc, label, slug

if TYPE_CHECKING:
    from nnsweep.core.results import TrialRecord

__all__ = ["divergence_section"]

SHOWN_LAYERS = 12  # layers listed per trial, from the first diverging one on


def divergence_section(
    device: str, records: Sequence[TrialRecord], divergences: Mapping[int, Mapping[str, object]]
) -> str:
    """The device's divergence section ("" when none of its trials was explained)."""
    if not divergences:
        return ""
    by_number = {r.number: r for r in records}
    parts = [
        f'<div class="card divergence" id="divergence-{esc(slug(device))}">',
        f"<h3>Where the numbers diverge: {esc(device)}</h3>",
        "<p>The fastest trials a quality bound turned away, each layer's output against fp32's on a few "
        "evaluation inputs (SQNR, in graph order), from this machine's run of the artifact the device measured.</p>",
    ]
    for number, d in sorted(divergences.items()):
        record = by_number.get(number)
        title = f"#{number} {label(record.config.label())}" if record is not None else f"#{number}"
        if d.get("unavailable"):
            parts.append(f'<p class="note">{title}: no layers ({esc(d["unavailable"])})</p>')
            continue
        parts.append(_trial(title, d))
    parts.append("</div>")
    return "".join(parts)


def _trial(title: str, d: Mapping[str, object]) -> str:
    raw_layers, raw_suggested = d.get("layers"), d.get("suggested_float")
    layers = [layer for layer in raw_layers if isinstance(layer, Mapping)] if isinstance(raw_layers, list) else []
    suggested = [str(s) for s in raw_suggested] if isinstance(raw_suggested, list) else []
    first, worst = d.get("first"), d.get("worst")
    threshold = float(str(d.get("threshold_db", 20.0)))
    lines = [f"<h4>{title}</h4><p>"]
    lines.append(
        f"First below {threshold:g} dB: <code>{esc(first)}</code>; " if first else f"No layer below {threshold:g} dB; "
    )
    lines.append(f"worst: <code>{esc(worst)}</code>." if worst else "")
    if suggested:
        names = ", ".join(f"<code>{esc(s)}</code>" for s in suggested)
        lines.append(f" Keeping {names} float (<code>quant.float_layers</code>) is what to try.")
    lines.append("</p>")
    start = next((i for i, layer in enumerate(layers) if layer.get("name") == first), 0)
    shown = layers[start : start + SHOWN_LAYERS]
    rows = "".join(
        f'<tr><td><code>{esc(layer.get("name"))}</code></td><td class="num">{_db(layer.get(SQNR))}</td></tr>'
        for layer in shown
    )
    before, after = start, len(layers) - start - len(shown)
    left = [
        f"{before} before it, all at or above {threshold:g} dB" if before else "",
        f"{after} after" if after else "",
    ]
    where = "divergence.json on the trial's run has all"
    note = (
        f'<p class="note">Not shown: {esc("; ".join(x for x in left if x))} ({esc(where)})</p>'
        if before or after
        else ""
    )
    head = "<table><thead><tr><th>layer</th><th>SQNR dB</th></tr></thead><tbody>"
    return "".join(lines) + head + rows + "</tbody></table>" + note


def _db(value: object) -> str:
    """A layer's SQNR; ``None`` is an identical output (JSON has no infinity)."""
    return "identical" if value is None else f"{float(str(value)):.1f}"
