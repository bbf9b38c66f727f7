"""The runtimes' own benchmark tools: how to call them, and how to read what they print.

A bridge agent runs these on the device (over adb or ssh), because the device cannot
run nnsweep itself. The parsers read the tools' real output formats:

``speed_benchmark_torch`` (PyTorch Mobile, TorchScript and NNAPI models)::

    Starting benchmark.
    Running warmup runs.
    Main runs.
    Main run finished. Microseconds per iter: 36012.7. Iters per second: 27.768

``benchmark_model`` (TensorFlow Lite / LiteRT)::

    Initialized session in 3.84ms.
    count 361 first 2795 curr 2704 min 2653 max 2849 avg 2693.12 std 21
    Inference timings in us: Init: 3840, First inference: 6036807, Warmup (avg): 6.03681e+06, Inference (avg): 2693.12
    Peak memory footprint (MB): init 2.75391 overall 29.0273
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nnsweep.core.errors import BenchmarkError

__all__ = [
    "TOOLS",
    "ToolRun",
    "benchmark_model_command",
    "parse_benchmark_model",
    "parse_speed_benchmark_torch",
    "speed_benchmark_torch_command",
]

_NUMBER = r"([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"


@dataclass(frozen=True)
class ToolRun:
    """One run of a benchmark tool, in microseconds and MB, as the tool reported it.

    Fields a tool does not print are ``None``.
    """

    mean_us: float
    count: int | None = None
    init_us: float | None = None
    first_us: float | None = None
    warmup_mean_us: float | None = None
    std_us: float | None = None
    min_us: float | None = None
    max_us: float | None = None
    peak_memory_mb: float | None = None


def _float(pattern: str, text: str) -> float | None:
    match = re.search(pattern, text)
    return float(match.group(1)) if match else None


def parse_speed_benchmark_torch(text: str) -> ToolRun:
    """Read ``speed_benchmark_torch`` output.

    Raises:
        BenchmarkError: the output has no "Main run finished" line (the run failed).
    """
    mean = _float(rf"Main run finished\. Microseconds per iter: {_NUMBER}", text)
    if mean is None:
        raise BenchmarkError(f"speed_benchmark_torch printed no result: {_tail(text)}")
    return ToolRun(mean_us=mean)


def parse_benchmark_model(text: str) -> ToolRun:
    """Read TFLite ``benchmark_model`` output.

    Raises:
        BenchmarkError: the output has no "Inference timings" line (the run failed).
    """
    mean = _float(rf"Inference \(avg\): {_NUMBER}", text)
    if mean is None:
        raise BenchmarkError(f"benchmark_model printed no result: {_tail(text)}")
    # The last "count ... avg ... std" line is the main run (the first is the warm-up).
    stats = re.findall(
        rf"count (\d+) first {_NUMBER} curr {_NUMBER} min {_NUMBER} max {_NUMBER} avg {_NUMBER} std {_NUMBER}", text
    )
    count = min_us = max_us = std = None
    if stats:
        last = stats[-1]
        count, min_us, max_us, std = int(last[0]), float(last[3]), float(last[4]), float(last[6])
    return ToolRun(
        mean_us=mean,
        count=count,
        init_us=_float(rf"Init: {_NUMBER}", text),
        first_us=_float(rf"First inference: {_NUMBER}", text),
        warmup_mean_us=_float(rf"Warmup \(avg\): {_NUMBER}", text),
        std_us=std,
        min_us=min_us,
        max_us=max_us,
        peak_memory_mb=_float(rf"Peak memory footprint \(MB\): init [-+.\deE]+ overall {_NUMBER}", text),
    )


def _tail(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-3:]) or "(no output)"


def speed_benchmark_torch_command(tool: str, model: str, threads: int, warmup: int, iters: int) -> list[str]:
    """The seeds' invocation: ``--pthreadpool_size --model --use_bundled_input=0 --warmup --iter``."""
    return [
        tool,
        f"--pthreadpool_size={threads}",
        f"--model={model}",
        "--use_bundled_input=0",
        f"--warmup={warmup}",
        f"--iter={iters}",
    ]


def benchmark_model_command(tool: str, model: str, threads: int, warmup: int, iters: int) -> list[str]:
    """TFLite's ``benchmark_model`` with a fixed number of runs."""
    return [
        tool,
        f"--graph={model}",
        f"--num_threads={threads}",
        f"--warmup_runs={warmup}",
        f"--num_runs={iters}",
        "--min_secs=0",
    ]


# runtime -> (command builder, parser): which tool measures which artifacts.
TOOLS = {
    "torch": (speed_benchmark_torch_command, parse_speed_benchmark_torch),
    "litert": (benchmark_model_command, parse_benchmark_model),
}
