"""An Ethos-U artifact's per-operator table: Vela's per-layer estimate, since no NPU runs here."""

from __future__ import annotations

import json
from typing import Any

from nnsweep.bench.profile import Profile, aggregate
from nnsweep.runtimes.ethosu.converter import VELA_LAYERS

__all__ = ["vela_profile"]


def vela_profile(artifact: Any, target: str) -> Profile:
    """Each NPU operator's estimated cycles at the NPU's clock (the clock of the whole-inference
    estimate), labelled an estimate; nothing is run."""
    clock_mhz = dict(artifact.estimates).get("npu_clock_mhz", 0.0)
    if VELA_LAYERS not in artifact.sidecars or clock_mhz <= 0:
        return Profile(reason=f"{target}: this artifact carries no per-layer estimate (convert it again)")
    layers = json.loads(artifact.sidecars[VELA_LAYERS][0].read_text())
    events = [(0, str(x["name"]), str(x["kind"]), target, float(x["cycles"]) / (clock_mhz * 1000)) for x in layers]
    source = f"Vela's per-layer estimate for {target} at {clock_mhz:.0f} MHz"
    return Profile(aggregate(events, 1), source=source)
