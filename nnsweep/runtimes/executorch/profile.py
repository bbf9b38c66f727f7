"""ExecuTorch's per-operator profile: the Python bindings' ETDump, read with its devtools' deserializer.

A program loaded with ``enable_etdump`` records a run block per execution: a profile event per
kernel of the portable/optimized libraries (``native_call_<op>``), the delegate's own events
(XNNPACK names its operators, e.g. ``Convolution (NHWC, F32) IGEMM #1``) and a ``DELEGATE_CALL``
around them, whose time beyond its operators' is the delegate boundary's cost. Times are in
the runtime's ticks, nanoseconds on these hosts.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from nnsweep.bench.profile import OpTime, aggregate
from nnsweep.core.errors import BenchmarkError

__all__ = ["etdump_events", "profile"]

_SKIPPED = frozenset({"Method::execute", "Method::init", "Program::load_method"})
_ORDINAL = re.compile(r"\s*#\d+$")  # XNNPACK numbers each operator of a kind


def _kind(name: str) -> str:
    """``native_call_quantized_decomposed.quantize_per_tensor.out`` -> ``quantized_decomposed::quantize_per_tensor``."""
    op = name.removeprefix("native_call_")
    if op == name:
        return name
    namespace, _, rest = op.partition(".")
    return f"{namespace}::{rest.split('.')[0]}" if rest else op


def etdump_events(runs: Iterable[Any], skip_runs: int, delegate: str) -> Iterator[tuple[int, str, str, str, float]]:
    """``(run, name, kind, backend, ms)`` of each ETDump run block's profile events, its executions
    counted from 0 after the first ``skip_runs``; ``delegate`` names the backend of delegate events."""
    executed = -1 - skip_runs
    for block in runs:
        events = [e.profile_event for e in block.events or () if e.profile_event is not None]
        if not any(p.name == "Method::execute" for p in events):
            continue  # the program's load
        executed += 1
        if executed < 0:
            continue
        inside = 0.0  # the delegate's operators since the last DELEGATE_CALL closed
        for p in events:
            ms = (p.end_time - p.start_time) / 1e6
            if p.name in _SKIPPED:
                continue
            if p.name is None and p.delegate_debug_id_str:
                inside += ms
                name = p.delegate_debug_id_str
                yield executed, name, _ORDINAL.sub("", name), delegate, ms
            elif p.name == "DELEGATE_CALL":
                yield executed, "DELEGATE_CALL", "delegate call (beyond its operators)", delegate, max(ms - inside, 0.0)
                inside = 0.0
            elif p.name is not None:
                yield executed, p.name.removeprefix("native_call_"), _kind(p.name), "portable", ms


def profile(runner: Any, inputs: np.ndarray, runs: int, warmup: int) -> tuple[OpTime, ...]:
    """``runs`` profiled executions of ``runner``'s program (cycling over ``inputs``) after ``warmup``."""
    from nnsweep.runtimes.executorch.runner import bindings, torch_free

    if torch_free():
        raise BenchmarkError("ExecuTorch's ETDump needs its Python bindings, which need torch: not installed here")
    from executorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc

    delegate = next((b for b in runner.backends if b != "portable"), "delegate")
    try:
        module = bindings()._load_for_executorch(str(runner.path), enable_etdump=True)
        prepared = [runner.prepare(inputs[i : i + 1]) for i in range(len(inputs))]
        for i in range(warmup + runs):
            module.forward([prepared[i % len(prepared)]])
        with tempfile.TemporaryDirectory(prefix="nnsweep-etdump-") as tmp:
            path = Path(tmp) / "profile.etdp"
            module.write_etdump_result_to_file(str(path))
            dump = deserialize_from_etdump_flatcc(path.read_bytes())
    except RuntimeError as exc:
        raise BenchmarkError(f"ExecuTorch cannot profile {runner.path.name}: {exc}") from exc
    return aggregate(etdump_events(dump.run_data, warmup, delegate), runs)
