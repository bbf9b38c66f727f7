"""``nnsweep bench --explain``: each layer's output against fp32's, taken after the timed runs."""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nnsweep.bench.divergence import Divergence

__all__ = ["THRESHOLD_DB", "decibels", "divergence_lines"]

THRESHOLD_DB = 20.0
"""``--explain-threshold``'s default: :data:`nnsweep.bench.divergence.DEFAULT_THRESHOLD_DB`, kept
here so that building the parser imports no numpy."""


def decibels(text: str) -> float:
    """An argparse type: a finite SQNR threshold in dB, -100 to 200."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number") from None
    if not -100 <= value <= 200:  # NaN fails too
        raise argparse.ArgumentTypeError(f"{text[:40]} is out of range: give -100 to 200 dB, e.g. 30")
    return value


def _db(value: float) -> str:
    return "inf" if value == math.inf else f"{value:.1f}"


def divergence_lines(divergence: Divergence) -> list[str]:
    """A table of the layers in graph order, the first below the threshold and the worst marked."""
    if divergence.reason is not None:
        return [f"Divergence by layer: none ({divergence.reason})"]
    first, worst = divergence.first, divergence.worst
    lines = [
        f"Divergence by layer vs fp32 ({len(divergence.layers)} layers in graph order, {divergence.inputs} "
        f"evaluation inputs, threshold {divergence.threshold_db:g} dB; took {divergence.wall_s:.1f} s):",
        f"  {'layer':<40} {'SQNR dB':>8}",
    ]
    for layer in divergence.layers:
        marks = [m for m, hit in (("first below threshold", layer is first), ("worst", layer is worst)) if hit]
        unnamed = "" if layer.named else " (unnamed: by position)"
        mark = f"  <- {', '.join(marks)}" if marks else ""
        lines.append(f"  {(layer.name + unnamed)[:40]:<40} {_db(layer.sqnr_db):>8}{mark}")
    if first is None:
        lines.append(f"  No layer below {divergence.threshold_db:g} dB.")
    else:
        lines.append(
            f"  First below {divergence.threshold_db:g} dB: {first.name}; worst: {worst.name if worst else '-'} "
            f"({_db(worst.sqnr_db) if worst else '-'} dB)"
        )
    if divergence.suggested_float:
        names = ", ".join(divergence.suggested_float)
        lines.append(f"  To try in float (--config quant.float_layers): {names}")
    if divergence.note:
        lines.append(f"  ({divergence.note})")
    return lines
