"""What ``nnsweep bench`` runs after the timed runs, each in a run of its own: ``--profile``
(per-operator times) and ``--explain`` (each layer against fp32), their options and output."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nnsweep.cli._bench_explain import THRESHOLD_DB, decibels

if TYPE_CHECKING:
    from nnsweep.bench.divergence import Divergence
    from nnsweep.bench.profile import Profile

__all__ = ["AfterRuns", "add_after_options", "after_runs"]


def add_after_options(parser: argparse.ArgumentParser) -> None:
    """``--profile``, ``--explain`` and ``--explain-threshold``."""
    parser.add_argument(
        "--profile",
        action="store_true",
        help="after the timed runs, profile a few runs per operator with the runtime's own profiler",
    )
    parser.add_argument(
        "--explain",
        action="store_true",
        help="after the timed runs, compare each layer's output with the fp32 model's on a few evaluation "
        "inputs (SQNR) and name the first layer below --explain-threshold and the worst",
    )
    parser.add_argument(
        "--explain-threshold",
        type=decibels,
        default=THRESHOLD_DB,
        metavar="DB",
        help=f"with --explain: a layer below this SQNR has diverged (default {THRESHOLD_DB:g} dB)",
    )


@dataclass(frozen=True)
class AfterRuns:
    """The profile and the divergence by layer, each ``None`` when not asked for."""

    profile: Profile | None = None
    divergence: Divergence | None = None

    def fields(self, p50_ms: float | None) -> dict[str, Any]:
        """What ``--json`` adds."""
        from nnsweep.cli._bench_profile import profile_fields

        fields = {} if self.profile is None else profile_fields(self.profile, p50_ms)
        return fields | ({} if self.divergence is None else {"divergence": self.divergence.to_dict()})

    def text(self, p50_ms: float | None) -> str:
        """What the summary adds, each part after a newline."""
        from nnsweep.cli._bench_explain import divergence_lines
        from nnsweep.cli._bench_profile import profile_lines

        extra = "" if self.profile is None else "\n" + "\n".join(profile_lines(self.profile, p50_ms))
        return extra + ("" if self.divergence is None else "\n" + "\n".join(divergence_lines(self.divergence)))


def after_runs(
    args: argparse.Namespace,
    artifact: Any,
    snapshot: Any,
    timeout_s: float,
    bundle: Callable[[], Any],
    status: Callable[[str], None],
) -> AfterRuns:
    """Profile and explain ``artifact`` as ``args`` ask; ``bundle`` gives the fp32 model (loaded
    only for ``--explain``), ``status`` says what runs."""
    profile = divergence = None
    if args.profile:  # profiling slows what it watches: never inside the timed runs
        from nnsweep.bench import take_profile

        status("profiling per operator ...")
        profile = take_profile(artifact, snapshot, timeout_s)
    if args.explain:  # the intermediates come from an instrumented copy, not the timed artifact
        from nnsweep.bench import take_divergence

        status("comparing each layer with fp32 ...")
        divergence = take_divergence(bundle, artifact, snapshot, args.explain_threshold)
    return AfterRuns(profile, divergence)
