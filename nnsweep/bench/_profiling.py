"""Profile an artifact per operator in a process of its own, after (never inside) its timed runs.

``python -m nnsweep.bench._profiling REQUEST.json`` loads the runtime's runner as the
measuring process does (same interpreter, threads and backends) and hands it to the
runtime's profiler hook, which runs a few warm-up and profiled inferences on evaluation
inputs. The parent holds the machine's measurement lock meanwhile, so profiling neither
disturbs another measurement nor is disturbed by one.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from nnsweep.bench._foreign import python_command
from nnsweep.bench._machine_lock import MachineLock
from nnsweep.bench.profile import OpTime, Profile
from nnsweep.core import runtimes
from nnsweep.core.artifact import IOSpec
from nnsweep.core.errors import BenchmarkError
from nnsweep.core.measure import MeasureSettings

__all__ = ["PROFILED_RUNS", "WARMUP_RUNS", "profile_in_subprocess", "take_profile"]

PROFILED_RUNS = 20
"""Profiled inferences, cycling over the first evaluation inputs."""
WARMUP_RUNS = 3
"""Inferences before profiling starts (first-run allocations and packing stay out of it)."""
_INPUTS = 4  # distinct evaluation inputs the profiled runs cycle over


def profile_in_subprocess(
    *,
    runtime: str,
    artifact: Path,
    io: IOSpec,
    threads: int,
    backends: tuple[str, ...],
    inputs: np.ndarray,
    timeout_s: float = MeasureSettings.timeout_s,
    runs: int = PROFILED_RUNS,
    lock: MachineLock | None = None,
) -> Profile:
    """Per-operator times of ``artifact`` on a few of ``inputs``, from ``runtime``'s profiler.

    Returns:
        The profile, or one with a ``reason`` when the runtime has no profiler here.

    Raises:
        BenchmarkError: the profiling process failed or took longer than ``timeout_s``.
    """
    info = runtimes.get(runtime)
    if not info.profiler:
        return Profile(reason=f"{runtime}: {info.no_profiler}")
    lock = lock or MachineLock()
    with tempfile.TemporaryDirectory(prefix="nnsweep-profile-") as tmp:
        work = Path(tmp)
        np.save(work / "inputs.npy", np.ascontiguousarray(inputs[:_INPUTS]))
        request = {
            "runtime": runtime,
            "artifact": str(artifact),
            "io": io.to_dict(),
            "threads": threads,
            "backends": list(backends),
            "inputs": str(work / "inputs.npy"),
            "runs": runs,
            "result": str(work / "result.json"),
        }
        (work / "request.json").write_text(json.dumps(request))
        with lock.hold(f"profile {runtime} {artifact.name}"):
            started = time.perf_counter()
            try:
                with python_command(info.python, "nnsweep.bench._profiling", str(work / "request.json")) as (
                    argv,
                    env,
                ):
                    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False, env=env)
            except subprocess.TimeoutExpired:
                raise BenchmarkError(f"profiling timed out after {timeout_s:.0f} s") from None
            wall_s = time.perf_counter() - started
        result_file = work / "result.json"
        if not result_file.exists():
            tail = "\n".join(proc.stderr.strip().splitlines()[-6:])
            raise BenchmarkError(f"profiling process exited with {proc.returncode}: {tail}")
        result = json.loads(result_file.read_text())
    if "error" in result:
        raise BenchmarkError(f"profiling failed: {result['error']}: {result['message']}")
    profile = Profile.from_dict(result)
    return Profile(profile.entries, profile.runs, wall_s)


def take_profile(artifact: Any, snapshot: Any, timeout_s: float) -> Profile:
    """Profile ``artifact`` on this machine in a process of its own, after its timed runs.

    A profiler that fails costs the profile only: its reason comes back in place of the entries.
    """
    config = artifact.config
    if (npu := runtimes.npu_target(config)) is not None:
        return runtimes.load_object(runtimes.ETHOS_U_PROFILER)(artifact, npu)  # type: ignore[no-any-return]
    try:
        return profile_in_subprocess(
            runtime=config.runtime,
            artifact=artifact.path,
            io=artifact.io,
            threads=config.threads,
            backends=config.backends,
            inputs=snapshot.evaluation.inputs,
            timeout_s=timeout_s,
        )
    except BenchmarkError as exc:
        return Profile(reason=f"{config.runtime}: {exc}")


def _profile(request: dict) -> dict:  # type: ignore[type-arg]
    info = runtimes.get(request["runtime"])
    runner_cls = runtimes.load_object(info.runner)
    threads = int(request["threads"])
    runner_cls.set_threads(threads)
    runner = runner_cls(Path(request["artifact"]), IOSpec.from_dict(request["io"]), threads, tuple(request["backends"]))
    inputs = np.load(request["inputs"])
    runs = int(request["runs"])
    entries: tuple[OpTime, ...] = runtimes.load_object(info.profiler)(runner, inputs, runs, WARMUP_RUNS)
    return {"profile": [e.to_dict() for e in entries], "profile_runs": runs}


def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[1]).read_text())
    try:
        result, code = _profile(request), 0
    except Exception as exc:  # the process boundary: the failure goes back to the parent as data
        result = {"error": type(exc).__name__, "message": str(exc) or repr(exc), "traceback": traceback.format_exc()}
        code = 1
    Path(request["result"]).write_text(json.dumps(result))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
