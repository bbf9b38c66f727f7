"""torch's device tool: PyTorch Mobile's ``speed_benchmark_torch`` (TorchScript and NNAPI models),
run by a bridge agent over adb or ssh. It prints::

    Starting benchmark.
    Running warmup runs.
    Main runs.
    Main run finished. Microseconds per iter: 36012.7. Iters per second: 27.768
"""

from __future__ import annotations

from nnsweep.agents._tools import NUMBER, DeviceTool, ToolRun, float_after, output_tail
from nnsweep.core.errors import BenchmarkError

__all__ = ["TOOL", "parse_speed_benchmark_torch", "speed_benchmark_torch_command"]


def parse_speed_benchmark_torch(text: str) -> ToolRun:
    """Read ``speed_benchmark_torch`` output.

    Raises:
        BenchmarkError: the output has no "Main run finished" line (the run failed).
    """
    mean = float_after(rf"Main run finished\. Microseconds per iter: {NUMBER}", text)
    if mean is None:
        raise BenchmarkError(f"speed_benchmark_torch printed no result: {output_tail(text)}")
    return ToolRun(mean_us=mean)


def speed_benchmark_torch_command(tool: str, model: str, threads: int, warmup: int, iters: int) -> list[str]:
    """Its invocation: ``--pthreadpool_size --model --use_bundled_input=0 --warmup --iter``."""
    return [
        tool,
        f"--pthreadpool_size={threads}",
        f"--model={model}",
        "--use_bundled_input=0",
        f"--warmup={warmup}",
        f"--iter={iters}",
    ]


TOOL = DeviceTool(
    speed_benchmark_torch_command,
    parse_speed_benchmark_torch,
    # Android: NNAPI through PyTorch Mobile, QNNPACK on the CPU; a Linux board's PyTorch
    # Mobile build ships QNNPACK (and XNNPACK for float).
    backends={"adb": ("nnapi", "qnnpack"), "ssh": ("qnnpack",)},
    android_path="/data/local/tmp/speed_benchmark_torch",
)
