"""ONNX Runtime's per-node profile: a session with ``enable_profiling`` and its JSON trace.

Every node's kernel is one ``"Node"`` event per run (``<node>_kernel_time``, its ``op_name``
and the provider that ran it in ``args``, ``dur`` in microseconds); ``model_run`` events mark
the runs, so the warm-up runs' nodes are left out. Runs on boards: numpy and onnxruntime only.
"""

from __future__ import annotations

import bisect
import json
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from nnsweep.bench.profile import OpTime, aggregate
from nnsweep.core.errors import BenchmarkError

__all__ = ["node_events", "profile"]

_KERNEL = "_kernel_time"
_PROVIDER_SUFFIX = "ExecutionProvider"


def node_events(trace: Iterable[dict[str, Any]], skip_runs: int) -> Iterator[tuple[int, str, str, str, float]]:
    """``(run, node, op type, provider, ms)`` of each node kernel in ``trace``, its runs counted
    from 0 after the first ``skip_runs`` (warm-up) ones, which are left out."""
    events = list(trace)
    starts = sorted(float(e["ts"]) for e in events if e.get("cat") == "Session" and e.get("name") == "model_run")
    for e in events:
        name = str(e.get("name", ""))
        if e.get("cat") != "Node" or not name.endswith(_KERNEL):
            continue
        # the run a node belongs to: the last one that started before it
        run = bisect.bisect_right(starts, float(e.get("ts", 0))) - 1 - skip_runs
        if run < 0:
            continue
        args = e.get("args") or {}
        provider = str(args.get("provider", "")).removesuffix(_PROVIDER_SUFFIX).lower() or "cpu"
        yield run, name.removesuffix(_KERNEL), str(args.get("op_name", "?")), provider, float(e.get("dur", 0)) / 1e3


def profile(runner: Any, inputs: np.ndarray, runs: int, warmup: int) -> tuple[OpTime, ...]:
    """``runs`` profiled inferences of ``runner``'s artifact (cycling over ``inputs``) after ``warmup``,
    in a session like the runner's (same providers, threads and options) with profiling on."""
    import onnxruntime as ort

    from nnsweep.runtimes.onnxruntime.runner import _ORT_ERRORS, providers_for, session_options

    with tempfile.TemporaryDirectory(prefix="nnsweep-ort-profile-") as tmp:
        options = session_options(runner.threads)
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(tmp) / "ort")
        try:
            providers, _ = providers_for(runner.backends or ("cpu",))
            session = ort.InferenceSession(str(runner.path), options, providers=providers)
            name = session.get_inputs()[0].name
            feeds = [runner.prepare(inputs[i : i + 1]) for i in range(len(inputs))]
            for i in range(warmup + runs):
                session.run(None, {name: feeds[i % len(feeds)]})
            trace = json.loads(Path(session.end_profiling()).read_text())
        except (ValueError, *_ORT_ERRORS) as exc:  # type: ignore[misc]  # a tuple of classes, built at import
            raise BenchmarkError(
                f"ONNX Runtime cannot profile {runner.path.name}: {type(exc).__name__}: {exc}"
            ) from exc
    return aggregate(node_events(trace, warmup), runs)
