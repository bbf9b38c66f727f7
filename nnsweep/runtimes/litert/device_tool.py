"""LiteRT's device tool: TFLite's ``benchmark_model``, run by a bridge agent over adb or ssh.
It prints::

    Initialized session in 3.84ms.
    count 361 first 2795 curr 2704 min 2653 max 2849 avg 2693.12 std 21
    Inference timings in us: Init: 3840, First inference: 6036807, Warmup (avg): 6.03681e+06, Inference (avg): 2693.12
    Peak memory footprint (MB): init 2.75391 overall 29.0273
"""

from __future__ import annotations

import re

from nnsweep.agents._tools import NUMBER, DeviceTool, ToolRun, float_after, output_tail
from nnsweep.core.errors import BenchmarkError

__all__ = ["TOOL", "benchmark_model_command", "parse_benchmark_model"]


def parse_benchmark_model(text: str) -> ToolRun:
    """Read TFLite ``benchmark_model`` output.

    Raises:
        BenchmarkError: the output has no "Inference timings" line (the run failed).
    """
    mean = float_after(rf"Inference \(avg\): {NUMBER}", text)
    if mean is None:
        raise BenchmarkError(f"benchmark_model printed no result: {output_tail(text)}")
    # The last "count ... avg ... std" line is the main run (the first is the warm-up).
    stats = re.findall(
        rf"count (\d+) first {NUMBER} curr {NUMBER} min {NUMBER} max {NUMBER} avg {NUMBER} std {NUMBER}", text
    )
    count = min_us = max_us = std = None
    if stats:
        last = stats[-1]
        count, min_us, max_us, std = int(last[0]), float(last[3]), float(last[4]), float(last[6])
    return ToolRun(
        mean_us=mean,
        count=count,
        init_us=float_after(rf"Init: {NUMBER}", text),
        first_us=float_after(rf"First inference: {NUMBER}", text),
        warmup_mean_us=float_after(rf"Warmup \(avg\): {NUMBER}", text),
        std_us=std,
        min_us=min_us,
        max_us=max_us,
        peak_memory_mb=float_after(rf"Peak memory footprint \(MB\): init [-+.\deE]+ overall {NUMBER}", text),
    )


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


TOOL = DeviceTool(benchmark_model_command, parse_benchmark_model)
