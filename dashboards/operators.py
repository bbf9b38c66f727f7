"""The report's per-operator section of a device: where the time goes in the best
configuration against the fp32 baseline, by operator kind, and for each profiled
configuration slower than fp32, the operator kinds that make it slower."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from nnsweep.bench.profile import Profile, by_kind
from nnsweep.core.metrics import LATENCY_P50

from .sections import esc, label, slug

if TYPE_CHECKING:
    from nnsweep.core.results import TrialRecord

__all__ = ["operator_section", "slower_kinds"]

TOP_KINDS = 12  # operator kinds listed by name; the rest in one row
SLOWER_NAMED = 3  # kinds named for a configuration slower than fp32


def slower_kinds(profile: Profile, baseline: Profile) -> list[tuple[str, float]]:
    """The operator kinds whose ms per inference grew most over the baseline's, largest first
    (only those that grew)."""
    mine, theirs = by_kind(profile), by_kind(baseline)
    grown = [(kind, ms - theirs.get(kind, 0.0)) for kind, ms in mine.items()]
    return sorted((g for g in grown if g[1] > 0), key=lambda g: -g[1])


def operator_section(
    device: str,
    records: Sequence[TrialRecord],
    best: TrialRecord | None,
    baseline: TrialRecord | None,
    profiles: Mapping[int, Mapping[str, object]],
) -> str:
    """The device's operator section ("" when none of its trials was profiled)."""
    if not profiles:
        return ""
    read = {n: Profile.from_dict(dict(p)) if p.get("profile") else None for n, p in profiles.items()}
    reasons = {n: str(p.get("profile_unavailable")) for n, p in profiles.items() if not p.get("profile")}
    parts = [
        f'<div class="card operators" id="operators-{esc(slug(device))}">',
        f"<h3>Where the time goes, per operator: {esc(device)}</h3>",
        _source(read),
        "</p>",
    ]
    best_profile = read.get(best.number) if best else None
    base_profile = read.get(baseline.number) if baseline else None
    if best is not None and best_profile is not None:
        parts.append(_kind_table(best, best_profile, baseline, base_profile))
    parts.append(_slower(records, read, baseline, base_profile))
    for number, reason in sorted(reasons.items()):
        parts.append(f'<p class="note">#{number}: no profile ({esc(reason)})</p>')
    parts.append("</div>")
    return "".join(parts)


def _source(read: Mapping[int, Profile | None]) -> str:
    estimated = next((p.source for p in read.values() if p is not None and p.source), None)
    if estimated is not None:
        return f"<p>Estimated, not measured: {esc(estimated)} (no such NPU runs here)."
    if any(p is not None and p.emulated for p in read.values()):
        return (
            "<p>Emulated: the board's own kernels under qemu-user, profiled by its agent after the timed runs. "
            "The shares say where the time goes; the milliseconds are no real board's."
        )
    return (
        "<p>From the runtime's own profiler, in a run of its own after the timed ones (profiled times "
        "carry the profiler's own cost; their total is compared with the measured p50 below)."
    )


def _kind_table(best: TrialRecord, profile: Profile, baseline: TrialRecord | None, base_profile: Profile | None) -> str:
    mine = by_kind(profile)
    theirs = by_kind(base_profile) if base_profile is not None else {}
    kinds = sorted(set(mine) | set(theirs), key=lambda k: -max(mine.get(k, 0.0), theirs.get(k, 0.0)))
    shown, rest = kinds[:TOP_KINDS], kinds[TOP_KINDS:]

    def row(name: str, a: float, b: float | None) -> str:
        cells = f'<td class="num">{a:.4f}</td>'
        cells += (
            f'<td class="num">{b:.4f}</td><td class="num">{a - b:+.4f}</td>' if b is not None else "<td></td><td></td>"
        )
        return f"<tr><td><code>{esc(name)}</code></td>{cells}</tr>"

    has_base = base_profile is not None
    rows = [row(k, mine.get(k, 0.0), theirs.get(k, 0.0) if has_base else None) for k in shown]
    if rest:
        a = sum(mine.get(k, 0.0) for k in rest)
        b = sum(theirs.get(k, 0.0) for k in rest) if has_base else None
        rows.append(row(f"({len(rest)} more kinds)", a, b))
    rows.append(row("total profiled", profile.total_ms, base_profile.total_ms if base_profile else None))
    coverage = ""
    p50 = best.metrics.get(LATENCY_P50)
    if p50:
        coverage = f" The profile's total is {profile.total_ms / p50:.0%} of the best's measured p50 ({p50:.4g} ms)."
    base_head = f"fp32 #{baseline.number}" if baseline is not None and has_base else "fp32 (not profiled)"
    return (
        f"<p>Best #{best.number} ({label(best.config.label())}) against the fp32 baseline, ms per inference by "
        f"operator kind; quantize/dequantize and layout conversions are their own kinds.{esc(coverage)}</p>"
        f'<table><thead><tr><th scope="col">operator kind</th><th scope="col">best #{best.number}</th>'
        f'<th scope="col">{esc(base_head)}</th><th scope="col">difference</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _slower(
    records: Sequence[TrialRecord],
    read: Mapping[int, Profile | None],
    baseline: TrialRecord | None,
    base_profile: Profile | None,
) -> str:
    if baseline is None or base_profile is None or not baseline.metrics.get(LATENCY_P50):
        return ""
    base_p50 = baseline.metrics[LATENCY_P50]
    lines = []
    for r in records:
        profile = read.get(r.number)
        p50 = r.metrics.get(LATENCY_P50)
        if profile is None or r.number == baseline.number or not p50 or p50 <= base_p50:
            continue
        grown = slower_kinds(profile, base_profile)[:SLOWER_NAMED]
        why = ", ".join(f"<code>{esc(kind)}</code> +{ms:.4f} ms" for kind, ms in grown) or "no kind grew"
        lines.append(
            f"<li>#{r.number} {label(r.config.label())}: {p50:.4g} ms against fp32's {base_p50:.4g} ms; "
            f"grown most: {why}; quantize/dequantize and layout {profile.overhead_ms:.4f} ms</li>"
        )
    if not lines:
        return ""
    return "<p>Profiled configurations slower than fp32, and the operator kinds that make them slower:</p>" + (
        f"<ul>{''.join(lines)}</ul>"
    )
