"""Profile artifacts per operator in processes of their own, after (never inside) their timed runs.

``python -m nnsweep.bench._profiling REQUEST.json`` loads each artifact's runner as the
measuring process does (same interpreter, threads and backends) and hands it to the
runtime's profiler hook, which runs a few warm-up and profiled inferences on evaluation
inputs. Artifacts of one runtime and thread count share a process, so a sweep's profiles pay
the runtime's import once; a job that crashes or hangs it costs that job only, the rest go on
in a new process. The parent holds the machine's measurement lock meanwhile, so profiling
neither disturbs another measurement nor is disturbed by one.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
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

__all__ = [
    "PROFILED_RUNS",
    "WARMUP_RUNS",
    "ProfileJob",
    "profile_in_subprocess",
    "profile_jobs",
    "take_profile",
    "take_profiles",
]

PROFILED_RUNS = 20
"""Profiled inferences, cycling over the first evaluation inputs."""
WARMUP_RUNS = 3
"""Inferences before profiling starts (first-run allocations and packing stay out of it)."""
_INPUTS = 4  # distinct evaluation inputs the profiled runs cycle over


@dataclass(frozen=True)
class ProfileJob:
    """One artifact to profile, loaded as its measuring process loads it."""

    runtime: str
    artifact: Path
    io: IOSpec | None
    threads: int
    backends: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        io = self.io.to_dict() if self.io is not None else None
        return {"artifact": str(self.artifact), "io": io, "backends": list(self.backends)}


def profile_in_subprocess(
    *,
    runtime: str,
    artifact: Path,
    io: IOSpec | None,
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
    (profile,) = profile_jobs([ProfileJob(runtime, artifact, io, threads, backends)], inputs, timeout_s, runs, lock)
    if profile.reason is not None and runtimes.get(runtime).profiler:
        raise BenchmarkError(profile.reason)
    return profile


def profile_jobs(
    jobs: Sequence[ProfileJob],
    inputs: np.ndarray,
    timeout_s: float = MeasureSettings.timeout_s,
    runs: int = PROFILED_RUNS,
    lock: MachineLock | None = None,
) -> list[Profile]:
    """Each job's profile, in order: a job that fails (or whose runtime has no profiler) gets
    one with a ``reason``. Jobs of one runtime and thread count share a process; each job may
    take ``timeout_s``. The first job of a process carries its start in ``wall_s``."""
    profiles: dict[int, Profile] = {}
    groups: dict[tuple[str, int], list[int]] = {}
    for i, job in enumerate(jobs):
        groups.setdefault((job.runtime, job.threads), []).append(i)
    for (runtime, threads), indices in groups.items():
        info = runtimes.get(runtime)
        if not info.profiler:
            for i in indices:
                profiles[i] = Profile(reason=f"{runtime}: {info.no_profiler}")
            continue
        pending = list(indices)
        while pending:
            done, failure = _one_process(info, threads, [jobs[i] for i in pending], inputs, timeout_s, runs, lock)
            for i, profile in zip(pending, done, strict=False):
                profiles[i] = profile
            pending = pending[len(done) :]
            if pending:  # the process ended inside this job: it alone fails
                profiles[pending.pop(0)] = Profile(reason=f"{runtime}: {failure}")
    return [profiles[i] for i in range(len(jobs))]


def _one_process(
    info: runtimes.RuntimeInfo,
    threads: int,
    jobs: Sequence[ProfileJob],
    inputs: np.ndarray,
    timeout_s: float,
    runs: int,
    lock: MachineLock | None,
) -> tuple[list[Profile], str]:
    """The profiles one process finished, in order, and why it stopped early (if it did)."""
    with tempfile.TemporaryDirectory(prefix="nnsweep-profile-") as tmp:
        work = Path(tmp)
        np.save(work / "inputs.npy", np.ascontiguousarray(inputs[:_INPUTS]))
        request = {
            "runtime": info.name,
            "threads": threads,
            "jobs": [job.to_dict() for job in jobs],
            "inputs": str(work / "inputs.npy"),
            "runs": runs,
            "result": str(work / "result.json"),
        }
        (work / "request.json").write_text(json.dumps(request))
        failure = ""
        with (lock or MachineLock()).hold(f"profile {info.name} {len(jobs)} artifacts"):
            started = time.perf_counter()
            try:
                with python_command(info.python, "nnsweep.bench._profiling", str(work / "request.json")) as cmd:
                    proc = subprocess.run(
                        cmd[0], capture_output=True, text=True, timeout=timeout_s * len(jobs), check=False, env=cmd[1]
                    )
                if proc.returncode != 0:
                    tail = "\n".join(proc.stderr.strip().splitlines()[-6:])
                    failure = f"profiling process exited with {proc.returncode}: {tail}"
            except subprocess.TimeoutExpired:
                failure = f"profiling timed out after {timeout_s:.0f} s"
            wall_s = time.perf_counter() - started
        try:
            results = json.loads((work / "result.json").read_text())
        except (OSError, ValueError):
            results = []
    profiles = [_profile_of(r, info.name) for r in results]
    spent = sum(float(r.get("profile_s", 0.0)) for r in results)
    if profiles:  # the process's start and imports, on the first job it ran
        first = profiles[0]
        profiles[0] = dataclasses.replace(first, wall_s=first.wall_s + max(0.0, wall_s - spent))
    return profiles, failure or "profiling process ended early"


def _profile_of(result: dict[str, Any], runtime: str) -> Profile:
    if "error" in result:
        return Profile(reason=f"{runtime}: profiling failed: {result['error']}: {result['message']}")
    return Profile.from_dict(result)


def take_profile(artifact: Any, snapshot: Any, timeout_s: float) -> Profile:
    """Profile ``artifact`` on this machine in a process of its own, after its timed runs
    (:func:`take_profiles` of one)."""
    return take_profiles([artifact], snapshot, timeout_s)[0]


def take_profiles(artifacts: Sequence[Any], snapshot: Any, timeout_s: float) -> list[Profile]:
    """Profile ``artifacts`` on this machine after their timed runs: an NPU target's table is its
    compiler's estimate; the rest share a process per runtime and thread count (:func:`profile_jobs`).

    A profiler that fails costs that profile only: its reason comes back in place of the entries.
    """
    profiles: dict[int, Profile] = {}
    jobs: dict[int, ProfileJob] = {}
    for i, artifact in enumerate(artifacts):
        config = artifact.config
        if (npu := runtimes.npu_target(config)) is not None:
            profiles[i] = runtimes.load_object(runtimes.ETHOS_U_PROFILER)(artifact, npu)
        else:
            jobs[i] = ProfileJob(config.runtime, artifact.path, artifact.io, config.threads, config.backends)
    ran = profile_jobs(list(jobs.values()), snapshot.evaluation.inputs, timeout_s) if jobs else []
    profiles.update(zip(jobs, ran, strict=True))
    return [profiles[i] for i in range(len(artifacts))]


def _profile(
    job: dict[str, Any], runner_cls: Any, profiler: Any, threads: int, inputs: np.ndarray, runs: int
) -> dict[str, Any]:
    io = IOSpec.from_dict(job["io"]) if job["io"] is not None else None
    runner = runner_cls(Path(job["artifact"]), io, threads, tuple(job["backends"]))
    try:
        entries: tuple[OpTime, ...] = profiler(runner, inputs, runs, WARMUP_RUNS)
    finally:
        del runner
        gc.collect()  # one artifact's runtime state is gone before the next loads
    return {"profile": [e.to_dict() for e in entries], "profile_runs": runs}


def main(argv: list[str]) -> int:
    """Profile each job of the request in turn; the results file holds every finished job's
    result (a failure as data) after each, so a crash or a hang loses only the job it was in."""
    request = json.loads(Path(argv[1]).read_text())
    info = runtimes.get(request["runtime"])
    runner_cls = runtimes.load_object(info.runner)
    threads = int(request["threads"])
    runner_cls.set_threads(threads)
    profiler = runtimes.load_object(info.profiler)
    inputs = np.load(request["inputs"])
    result_path = Path(request["result"])
    results: list[dict[str, Any]] = []
    for job in request["jobs"]:
        started = time.perf_counter()
        try:
            result = _profile(job, runner_cls, profiler, threads, inputs, int(request["runs"]))
        except Exception as exc:  # the process boundary: the failure goes back to the parent as data
            result = {
                "error": type(exc).__name__,
                "message": str(exc) or repr(exc),
                "traceback": traceback.format_exc(),
            }
        result["profile_s"] = time.perf_counter() - started
        results.append(result)
        partial = result_path.with_suffix(".part")
        partial.write_text(json.dumps(results))
        os.replace(partial, result_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
