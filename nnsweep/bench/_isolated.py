"""Measure an artifact in a child process (see ``_child``) and read back what it saw."""

from __future__ import annotations

import json
import signal
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from nnsweep import runtimes
from nnsweep.bench._foreign import python_command
from nnsweep.bench._harness import MeasureSettings, Timing
from nnsweep.convert._base import IOSpec
from nnsweep.errors import BenchmarkError

__all__ = ["measure_in_subprocess"]


def _tail(text: str, lines: int = 6) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def measure_in_subprocess(
    *,
    runtime: str,
    artifact: Path,
    io: IOSpec,
    threads: int,
    backends: tuple[str, ...],
    inputs: np.ndarray,
    settings: MeasureSettings,
) -> tuple[Timing, np.ndarray]:
    """Time ``artifact`` on ``inputs[0]`` and return its outputs on all ``inputs``.

    Raises:
        BenchmarkError: the artifact did not load or run, the process crashed,
            or it took longer than ``settings.timeout_s``.
    """
    with tempfile.TemporaryDirectory(prefix="nnsweep-bench-") as tmp:
        work = Path(tmp)
        np.save(work / "inputs.npy", np.ascontiguousarray(inputs, dtype=np.float32))
        request = {
            "runtime": runtime,
            "artifact": str(artifact),
            "io": io.to_dict(),
            "threads": threads,
            "backends": list(backends),
            "settings": {"warmup": settings.warmup, "iters": settings.iters, "min_duration_s": settings.min_duration_s},
            "inputs": str(work / "inputs.npy"),
            "outputs": str(work / "outputs.npy"),
            "result": str(work / "result.json"),
        }
        (work / "request.json").write_text(json.dumps(request))
        # A runtime outside this environment (PyArmNN) measures under its own interpreter.
        python = runtimes.get(runtime).python
        try:
            with python_command(python, "nnsweep.bench._child", str(work / "request.json")) as (argv, env):
                proc = subprocess.run(
                    argv, capture_output=True, text=True, timeout=settings.timeout_s, check=False, env=env
                )
        except subprocess.TimeoutExpired:
            raise BenchmarkError(f"benchmark timed out after {settings.timeout_s:.0f} s") from None
        except FileNotFoundError as exc:
            raise BenchmarkError(f"{runtime} needs the interpreter {python}, which is not installed here") from exc
        result_file = work / "result.json"
        if proc.returncode < 0:
            name = signal.Signals(-proc.returncode).name
            raise BenchmarkError(f"{runtime} runtime crashed ({name}): {_tail(proc.stderr)}")
        if not result_file.exists():
            raise BenchmarkError(f"benchmark process exited with {proc.returncode}: {_tail(proc.stderr)}")
        result = json.loads(result_file.read_text())
        if "error" in result:
            raise BenchmarkError(f"{result['error']}: {result['message']}")
        return Timing.from_dict(result["timing"]), np.load(work / "outputs.npy")
