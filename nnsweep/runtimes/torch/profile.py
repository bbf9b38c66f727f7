"""PyTorch's per-operator profile of a TorchScript artifact: ``torch.profiler`` on the CPU.

Operators nest (``aten::conv2d`` calls ``aten::convolution``, ...), so each is counted by its
self time only: the entries then add up to the profiled inferences instead of counting a
kernel once per caller. Quantized kernels run on the runner's quantized engine.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from nnsweep.bench.profile import OpTime, aggregate

__all__ = ["op_events", "profile"]


def op_events(run: int, averages: Iterable[Any], engine: str) -> Iterator[tuple[int, str, str, str, float]]:
    """``(run, op, op, backend, ms)`` from one run's ``key_averages()`` rows: self CPU time, a quantized
    op's backend the quantized ``engine``, any other's ``cpu``; rows with no time of their own are left out."""
    for row in averages:
        ms = float(row.self_cpu_time_total) / 1e3
        if ms <= 0:
            continue
        key = str(row.key)
        yield run, key, key, engine if key.startswith("quantized::") else "cpu", ms


def profile(runner: Any, inputs: np.ndarray, runs: int, warmup: int) -> tuple[OpTime, ...]:
    """``runs`` profiled inferences of ``runner``'s module (cycling over ``inputs``) after ``warmup``."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    runner.load()
    prepared = [runner.prepare(inputs[i : i + 1]) for i in range(len(inputs))]
    for i in range(warmup):
        runner.run(prepared[i % len(prepared)])
    events: list[tuple[int, str, str, str, float]] = []
    for i in range(runs):  # one profile per run: the median per operator needs each run's times
        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            runner.run(prepared[i % len(prepared)])
        events.extend(op_events(i, prof.key_averages(), torch.backends.quantized.engine))
    return aggregate(events, runs)
