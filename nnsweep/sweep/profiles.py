"""Per-operator profiles of the trials that matter, taken at a sweep's end.

Once a device's front is decided, its front trials, its best and its fp32 baseline (or every
measured trial, ``search.profile: all``) are profiled with their runtime's own profiler
(:func:`~nnsweep.bench.take_profiles`), after every timed run in processes of their own (one
per runtime and thread count), so profiling never perturbs a figure. Each profile is kept on the study (the
report's operator section) and attached to the trial's run as ``profile.json``.

Only a device that is the coordinator's own machine is profiled here: the artifact then runs
where it was measured (an Ethos-U device's table is Vela's estimate, read from the artifact).
A board's profile would have to be taken by its agent.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from nnsweep.core.results import TrialRecord, TrialStatus

if TYPE_CHECKING:
    import optuna

    from nnsweep.bench.profile import Profile
    from nnsweep.sweep.host import HostSide
    from nnsweep.tracking import Tracker

__all__ = ["PROFILE_ARTIFACT", "profile_trials", "profiled"]

log = logging.getLogger(__name__)

PROFILE_ARTIFACT = "profile.json"


def profiled(
    records: Sequence[TrialRecord], front: Sequence[TrialRecord], best: TrialRecord | None, baseline: int | None,
    every: bool,
) -> list[TrialRecord]:  # fmt: skip
    """The trials to profile: every measured one (``every``), else the front, the best and the
    fp32 baseline; by trial number, each once, never a reused one. An estimated (Ethos-U)
    trial's profile is its compiler's per-layer estimate, so nothing is run for it."""
    chosen = (
        {r.number for r in front} | ({best.number} if best else set()) | ({baseline} if baseline is not None else set())
    )
    return [
        r for r in records if r.status is TrialStatus.OK and r.reused_from is None and (every or r.number in chosen)
    ]


def profile_trials(
    device: str,
    trials: Sequence[TrialRecord],
    host: HostSide,
    study: optuna.Study,
    tracker: Tracker,
    timeout_s: float,
    *,
    unavailable: str | None = None,
) -> dict[int, Profile]:
    """Profile ``trials`` on this machine; keep each on ``study`` and log it on the trial's run.

    A trial whose artifact this machine's cache no longer holds, or whose runtime has no
    profiler, gets a profile that says why (:attr:`Profile.reason`); every trial does when
    the device cannot be profiled here (``unavailable``: why).
    """
    from nnsweep.bench import take_profiles
    from nnsweep.bench.profile import Profile
    from nnsweep.sweep import studies

    profiles: dict[int, Profile] = {}
    started = time.perf_counter()
    artifacts = {}
    for record in trials:
        artifact = host.cached(record.config) if unavailable is None else None
        if unavailable is not None:
            profiles[record.number] = Profile(reason=unavailable)
        elif artifact is None:
            profiles[record.number] = Profile(reason="its artifact is no longer in this machine's cache")
        else:
            artifacts[record.number] = artifact
    if artifacts:
        taken = take_profiles(list(artifacts.values()), host.snapshot, timeout_s)
        profiles.update(zip(artifacts, taken, strict=True))
    profiles = {r.number: profiles[r.number] for r in trials}  # in the trials' order
    if not profiles:
        return profiles
    studies.store_profiles(study, {n: p.to_dict() for n, p in profiles.items()})
    with tempfile.TemporaryDirectory(prefix="nnsweep-profile-") as tmp:
        for number, profile in profiles.items():
            path = Path(tmp) / f"{number}-{PROFILE_ARTIFACT}"
            path.write_text(json.dumps(profile.to_dict(), indent=1))
            tracker.log_trial_artifact(device, number, PROFILE_ARTIFACT, path)
    log.info("%s: profiled %d trials per operator in %.1f s", device, len(profiles), time.perf_counter() - started)
    return profiles
