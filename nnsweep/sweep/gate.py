"""Quality first, device time second: the quality-first gate.

Device time is the scarcest resource of a board farm, and a deployment whose quality
already breaks a bound will not be on any front, however fast it is. Where the
coordinator's machine runs the same runtime, a converted artifact runs there first for its
outputs alone; the quality metrics computed from them are judged against the quality
bounds, and a trial that breaks one is told infeasible without being timed on the device
(tagged ``quality_from: host``). Every trial that is timed is still decided by the
device's own outputs.

A drop bound needs the device's fp32 baseline, so a trial is gated only once that is
known (the judge then uses the very reference the gate used).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING

from nnsweep.core import runtimes
from nnsweep.core.metrics import row
from nnsweep.sweep.lifecycle import Role, Ticket
from nnsweep.sweep.outcomes import QUALITY_FROM, quality_violations

if TYPE_CHECKING:
    from nnsweep.core.results import TrialRecord
    from nnsweep.spec import SweepSpec
    from nnsweep.sweep.device_state import DeviceState

__all__ = ["QUALITY_FROM", "Gate", "breaks_a_bound", "gate_for", "quality_bounds", "with_host_quality"]

Gate = Callable[[Ticket, "DeviceState"], bool]


def quality_bounds(spec: SweepSpec) -> set[str]:
    """The bounded metrics that a deployment's outputs alone decide (no timing needed)."""
    return {name for name in spec.constraints.names() if row(name, spec.metrics).quality}


def gate_for(spec: SweepSpec) -> Gate | None:
    """Which READY trials run on the host first (``None``: none; the spec's
    ``search.quality_first`` is off, no bound is on a quality metric, or the model is a decoder)."""
    if not spec.search.quality_first or not quality_bounds(spec) or spec.decoder:
        return None  # a decoder's logits come with its measurement: there is no host run to gate on
    here = {name for name in spec.space.runtimes if _runs_here(name)}
    estimated = set(spec.npus)
    needs_baseline = bool(spec.constraints.max_drop)

    def wants(ticket: Ticket, device: DeviceState) -> bool:
        if ticket.gate is not None or ticket.role is Role.BASELINE:
            return False
        if ticket.device in estimated or ticket.config.runtime not in here:
            return False
        info = runtimes.get(ticket.config.runtime)
        if ticket.config.backends[:1] and ticket.config.backends[0] in info.whole_model:
            return False  # a backend only the device has: the host's numbers are another kernel's
        return not (needs_baseline and device.baseline is None)

    return wants


def breaks_a_bound(
    spec: SweepSpec, quality: Mapping[str, float], baseline: Mapping[str, float], eager: Mapping[str, float]
) -> bool:
    """Whether these host figures already break one of the sweep's quality bounds."""
    bounded = quality_bounds(spec)
    violations = quality_violations(dict(quality), baseline, spec.constraints, eager, spec.metrics, bounded)
    return any(v > 1e-12 for v in violations.values())


def with_host_quality(record: TrialRecord, quality: Mapping[str, float]) -> TrialRecord:
    """A timed trial that passed the gate: decided by the device's outputs (``quality_from:
    device``), with the host's figure beside each that differs (``host_<metric>``)."""
    differ = {f"host_{k}": v for k, v in quality.items() if k in record.metrics and record.metrics[k] != v}
    tags = {**record.tags, QUALITY_FROM: "device"}
    if differ:
        tags["host_device_quality"] = "differ"
    return dataclasses.replace(record, metrics={**record.metrics, **differ}, tags=tags)


def _runs_here(runtime: str) -> bool:
    """Whether this machine has what ``runtime``'s artifacts run with (its packages, its
    interpreter). A host run that fails all the same only lets the trial through."""
    try:
        info = runtimes.get(runtime)
    except KeyError:
        return False
    if info.python is not None and not Path(info.python).exists():
        return False
    try:
        for package in info.packages:
            version(package)
    except PackageNotFoundError:
        return False
    return True
