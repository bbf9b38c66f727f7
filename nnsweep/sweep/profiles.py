"""Per-operator profiles of the trials that matter, taken at a sweep's end.

Once a device's front is decided, its front trials, its best and its fp32 baseline (or every
measured trial, ``search.profile: all``) are profiled with their runtime's own profiler
(:func:`~nnsweep.bench.take_profiles`), after every timed run in processes of their own (one
per runtime and thread count), so profiling never perturbs a figure. Each profile is kept on the study (the
report's operator section) and attached to the trial's run as ``profile.json``.

A device that is the coordinator's own machine is profiled here, where it was measured; a
board's artifacts go to its agent, which profiles them on the board (an emulated board's
profile is labelled so: its shares are real runs of the board's kernels, its times no board's).
An Ethos-U device's table is Vela's estimate, read from the artifact.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import TYPE_CHECKING

from nnsweep.core.errors import NnsweepError
from nnsweep.core.results import TrialRecord, TrialStatus

if TYPE_CHECKING:
    import optuna

    from nnsweep.agents import MeasureRequest
    from nnsweep.bench.profile import Profile
    from nnsweep.sweep.host import HostSide
    from nnsweep.tracking import Tracker

__all__ = ["PROFILE_ARTIFACT", "attach_json", "profile_trials", "profiled"]

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
    on_device: Callable[[MeasureRequest], Future[Profile]] | None = None,
) -> dict[int, Profile]:
    """Profile ``trials``; keep each on ``study`` and log it on the trial's run.

    Without ``on_device`` the device is this machine and the artifacts are profiled here,
    one process per runtime and thread count. With it, each artifact is sent to the
    device's agent, which profiles it there (an emulated board's profile says so); an NPU
    target's table is its compiler's estimate, read here. A trial whose artifact this
    machine's cache no longer holds, whose runtime has no profiler, or whose agent failed
    gets a profile that says why (:attr:`Profile.reason`).
    """
    from nnsweep.bench import take_profiles
    from nnsweep.bench.profile import Profile
    from nnsweep.core import runtimes
    from nnsweep.sweep import studies

    profiles: dict[int, Profile] = {}
    started = time.perf_counter()
    here = {}
    for record in trials:
        artifact = host.cached(record.config)
        if artifact is None:
            profiles[record.number] = Profile(reason="its artifact is no longer in this machine's cache")
        elif on_device is None or runtimes.npu_target(record.config) is not None:
            here[record.number] = artifact
        else:
            profiles[record.number] = _on_device(on_device, host.measure_request(record.config), timeout_s)
    if here:
        profiles.update(zip(here, take_profiles(list(here.values()), host.snapshot, timeout_s), strict=True))
    profiles = {r.number: profiles[r.number] for r in trials}  # in the trials' order
    if not profiles:
        return profiles
    studies.store_profiles(study, {n: p.to_dict() for n, p in profiles.items()})
    attach_json(tracker, device, PROFILE_ARTIFACT, {n: p.to_dict() for n, p in profiles.items()})
    log.info("%s: profiled %d trials per operator in %.1f s", device, len(profiles), time.perf_counter() - started)
    return profiles


def _on_device(
    on_device: Callable[[MeasureRequest], Future[Profile]], request: MeasureRequest, timeout_s: float
) -> Profile:
    """The agent's profile of ``request``, or one that says why there is none (the agent was
    lost, or did not answer within ``timeout_s``)."""
    from nnsweep.bench.profile import Profile

    try:
        return on_device(request).result(timeout=timeout_s)
    except FutureTimeout:
        return Profile(reason=f"the device's agent gave no profile within {timeout_s:.0f} s")
    except NnsweepError as exc:
        return Profile(reason=f"the device's agent could not profile: {exc}")


def attach_json(tracker: Tracker, device: str, name: str, per_trial: Mapping[int, Mapping[str, object]]) -> None:
    """Attach each trial's ``per_trial`` entry to its run as the JSON file ``name``."""
    with tempfile.TemporaryDirectory(prefix="nnsweep-trial-files-") as tmp:
        for number, value in per_trial.items():
            path = Path(tmp) / f"{number}-{name}"
            path.write_text(json.dumps(value, indent=1))
            tracker.log_trial_artifact(device, number, name, path)
