"""``nnsweep bench --profile``: the per-operator profile, taken after the timed runs, as text and JSON."""

from __future__ import annotations

from typing import Any

from nnsweep.bench.profile import Profile, is_overhead

__all__ = ["TOP", "profile_fields", "profile_lines"]

TOP = 12
"""Operators the summary lists by name; the rest are one line."""


def profile_fields(profile: Profile, p50_ms: float | None) -> dict[str, Any]:
    """What ``--profile --json`` adds: the entries, their total and the share of the p50 they cover."""
    fields = profile.to_dict()
    if profile.reason is None:
        fields["profile_coverage"] = profile.total_ms / p50_ms if p50_ms else None
    return fields


def profile_lines(profile: Profile, p50_ms: float | None, top: int = TOP) -> list[str]:
    """The slowest operators, the rest in one line, the q/dq overhead and what the profile covers."""
    if profile.reason is not None:
        return [f"Profile: none ({profile.reason})"]
    total = profile.total_ms
    how = (
        f"an estimate, not a measurement: {profile.source}"
        if profile.source
        else f"{profile.runs} profiled runs after the timed ones; profiling took {profile.wall_s:.1f} s"
    )
    lines = [
        f"Profile per operator ({how}):",
        f"  {'operator':<40} {'kind':<24} {'backend':<13} {'ms/inf':>9} {'share':>7}",
    ]
    for e in profile.entries[:top]:
        lines.append(f"  {e.name[:40]:<40} {e.kind[:24]:<24} {e.backend[:13]:<13} {e.ms:9.4f} {e.share * 100:6.1f} %")
    rest = profile.entries[top:]
    if rest:
        ms = sum(e.ms for e in rest)
        lines.append(f"  {f'({len(rest)} more operators)':<79} {ms:9.4f} {_pct(ms, total)}")
    overhead = [e for e in profile.entries if is_overhead(e.kind)]
    kinds = ", ".join(sorted({e.kind for e in overhead})) or "none"
    label = f"quantize/dequantize overhead ({len(overhead)} ops: {kinds})"
    lines.append(f"  {label[:79]:<79} {profile.overhead_ms:9.4f} {_pct(profile.overhead_ms, total)}")
    if p50_ms:
        whole = "the estimated inference time" if profile.source else "the measured p50"
        lines.append(
            f"  Profile total {total:.4f} ms per inference: {total / p50_ms * 100:.0f} % of {whole} {p50_ms:.4f} ms"
        )
    return lines


def _pct(part: float, whole: float) -> str:
    return f"{part / whole * 100:6.1f} %" if whole > 0 else "    n/a"
