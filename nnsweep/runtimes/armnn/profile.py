"""Arm NN's per-layer profile: its own ``IProfiler`` (PyArmNN), read from the JSON it writes.

With profiling enabled on the loaded network, each ``EnqueueWorkload`` adds one wall-clock
time to every event it runs: ``PrepareInputs``, ``PrepareOutputs`` and, inside ``Execute``,
one workload per layer (``RefConvolution2dWorkload_Execute_#13``: the backend's prefix
``Ref``/``Neon``/``Cl`` for CpuRef/CpuAcc/GpuAcc, the layer kind, a unique number) and the
copies between backends (``CopyMemGeneric``). Runs in the system Python, beside PyArmNN.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import numpy as np

from nnsweep.bench.profile import OpTime, aggregate
from nnsweep.core.errors import BenchmarkError

__all__ = ["profile", "workload_events"]

_PREFIXES = {"Ref": "CpuRef", "Neon": "CpuAcc", "Cl": "GpuAcc"}
_NAME = re.compile(r"^(?P<prefix>Ref|Neon|Cl)?(?P<kind>.+?)(Workload)?(_Execute)?_#\d+$")
_UNITS_MS = {"us": 1e-3, "ms": 1.0, "ns": 1e-6, "s": 1e3}


def _kind(name: str) -> tuple[str, str]:
    """``RefConvolution2dWorkload_Execute_#13`` -> ``("Convolution2d", "CpuRef")``."""
    match = _NAME.match(name)
    if match is None:
        return name, "armnn"
    prefix = match["prefix"]
    return match["kind"], _PREFIXES[prefix] if prefix else "armnn"


def _events(event: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for key, value in event.items():
        if isinstance(value, dict) and value.get("type") == "Event":
            yield key, value


def _times(name: str, event: dict[str, Any]) -> Iterator[tuple[int, str, str, str, float]]:
    wall = next((v for k, v in event.items() if k.startswith("Wall clock time_#") and isinstance(v, dict)), None)
    if wall is None:
        return
    scale = _UNITS_MS.get(str(wall.get("unit", "us")), 1e-3)
    kind, backend = _kind(name)
    for run, value in enumerate(wall.get("raw") or ()):
        yield run, name, kind, backend, float(value) * scale


def workload_events(tree: dict[str, Any]) -> Iterator[tuple[int, str, str, str, float]]:
    """``(run, event, kind, backend, ms)`` of every event an inference ran: the layers' workloads
    and copies inside ``Execute``, and the input and output preparation around it."""
    for key, inference in (tree.get("ArmNN") or {}).items():
        if not key.startswith("inference_measurements") or not isinstance(inference, dict):
            continue
        for name, event in _events(inference):
            if name.startswith("Execute_#"):
                for inner, sub in _events(event):
                    yield from _times(inner, sub)
            else:
                yield from _times(name, event)


def profile(runner: Any, inputs: np.ndarray, runs: int, warmup: int) -> tuple[OpTime, ...]:
    """``runs`` profiled inferences of ``runner``'s network (cycling over ``inputs``) after
    ``warmup`` unprofiled ones, from Arm NN's profiler of that network."""
    runner.load()
    prepared = [runner.prepare(inputs[i : i + 1]) for i in range(len(inputs))]
    for i in range(warmup):
        runner.run(prepared[i % len(prepared)])
    profiler = runner.profiler()
    profiler.EnableProfiling(True)
    for i in range(runs):
        runner.run(prepared[i % len(prepared)])
    try:
        tree = json.loads(profiler.as_json())
    except ValueError as exc:
        raise BenchmarkError(f"Arm NN's profiler wrote no readable JSON: {exc}") from exc
    events = list(workload_events(tree))
    if not events:
        raise BenchmarkError("Arm NN's profiler recorded no events for this network")
    return aggregate(events, max(run for run, *_ in events) + 1)
