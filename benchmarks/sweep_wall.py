"""A real-model sweep's wall time against its physical floor.

Runs one fixed sweep as a user would (``nnsweep run``, a fresh process, a cold artifact
cache in a temporary folder): ``torchvision:mobilenet_v3_small`` on this machine, 24
trials over ExecuTorch, ONNX Runtime and LiteRT x fp32 / dynamic int8 / static int8 x
threads 1-2. Prints

* the wall time of the whole command and the peak memory of its process tree (sampled);
* the sweep's own time line (its ``Time:`` line: converting, waiting, measuring, ...);
* the floor: the conversion seconds the trials spent (a trial whose artifact was already
  in the cache spends about none) plus the seconds of the timed runs, read back from the
  sweep's Optuna study; and the ratio wall / floor;
* conversion seconds per distinct configuration (each conversion digest once: the floor's
  figure; and the time line's converting over the same count, which also counts an older
  nnsweep's conversions of one configuration at several thread counts), and beside each conversion the seconds its
  worker spent building the artifact (the artifact's own ``convert_s``): the sweep's
  seconds also hold the wait for a worker still loading the model and the converters
  when its first conversion arrives;
* the conversions' throughput: the seconds during which at least one worker was building
  (the union of the artifacts' building intervals) per distinct configuration. The
  summed seconds above count two conversions side by side twice; this counts the wall
  they took, which is what conversions in parallel shorten. One at a time, the two agree.

Compare two checkouts by running the same script with another command for nnsweep:

    .venv/bin/python benchmarks/sweep_wall.py
    .venv/bin/python benchmarks/sweep_wall.py --nnsweep "OTHER/.venv/bin/python -m nnsweep"

Usage: sweep_wall.py [--trials 24] [--model torchvision:mobilenet_v3_small] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import yaml

SPACE = {
    "runtime": ["executorch", "onnxruntime", "litert"],
    "quant": ["fp32", "dynamic_int8", "static_int8"],
    "threads": [1, 2],
}


def _spec(model: str, trials: int) -> dict[str, object]:
    return {
        "name": "sweep-wall",
        "model": model,
        "devices": ["host"],
        "objectives": {"accuracy": "maximize", "latency_p50_ms": "minimize"},
        "constraints": {"max_accuracy_drop": 0.01},
        "space": SPACE,
        "budget": {"trials": trials},
        "tracking": {"uri": "sqlite:///mlflow.db", "experiment": "sweep-wall"},
        "storage": "journal",
    }


class _PeakMemory:
    """The largest sum of RSS over a process and its descendants, sampled every 0.2 s."""

    def __init__(self, pid: int) -> None:
        self.peak_mb = 0.0
        self._pid = pid
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        try:
            root = psutil.Process(self._pid)
        except psutil.NoSuchProcess:
            return
        while not self._done.wait(0.2):
            total = 0
            try:
                for p in [root, *root.children(recursive=True)]:
                    try:
                        total += p.memory_info().rss
                    except (psutil.NoSuchProcess, psutil.AccessDenied):
                        continue
            except psutil.NoSuchProcess:
                return
            self.peak_mb = max(self.peak_mb, total / 2**20)

    def stop(self) -> float:
        self._done.set()
        self._thread.join()
        return self.peak_mb


def _floor(spec_path: Path) -> tuple[float, float, dict[str, tuple[float, str]], int]:
    """(conversion seconds spent, timed-run seconds, per conversion digest the seconds and the
    label of the trial that spent them, the distinct configurations measured).

    Trials that differ only in threads share one conversion: the one that joined it under
    way spent its wait, not conversion work, so each conversion counts once, at the longest
    time a trial spent in it."""
    from nnsweep.artifacts.key import conversion_digest
    from nnsweep.spec import load_spec
    from nnsweep.sweep.studies import open_study, study_records

    records = study_records(open_study(load_spec(spec_path), "host"))
    timed = sum(sum(r.samples_ms) for r in records) / 1000.0
    conversions: dict[str, tuple[float, str]] = {}  # conversion digest -> (seconds, who spent them)
    for r in records:
        seconds = float(r.metrics.get("time_converting_s", 0.0))
        digest = conversion_digest(r.config)
        if seconds > conversions.get(digest, (0.0, ""))[0]:
            conversions[digest] = (seconds, r.config.label())
    distinct = len({r.config.digest() for r in records if r.samples_ms})
    return sum(seconds for seconds, _ in conversions.values()), timed, conversions, distinct


def _metas(cache: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Each artifact's ``meta.json`` in the cache, read once: (its path, its fields)."""
    import json

    found = []
    for meta in (cache / "artifacts").glob("*/*/meta.json"):
        try:
            found.append((meta, json.loads(meta.read_text())))
        except (OSError, ValueError):
            continue
    return found


def _built_seconds(metas: list[tuple[Path, dict[str, Any]]]) -> dict[str, float]:
    """Seconds each artifact's conversion took inside its worker, by conversion digest
    (``convert_s`` in the artifact's ``meta.json``: the build, without the queue)."""
    from nnsweep.artifacts.cache import Artifact
    from nnsweep.artifacts.key import conversion_digest
    from nnsweep.core.errors import NnsweepError

    built: dict[str, float] = {}
    for meta, fields in metas:
        try:
            artifact = Artifact.from_meta(meta.parent, fields)
        except (ValueError, KeyError, TypeError, NnsweepError):  # an older nnsweep's entry: no figure
            continue
        built[conversion_digest(artifact.config)] = artifact.convert_s
    return built


def _building_wall(metas: list[tuple[Path, dict[str, Any]]]) -> tuple[float, float]:
    """(seconds during which at least one worker was building an artifact, the sum of the
    building seconds). Each artifact's building interval ends when its ``meta.json`` was
    written (the file's mtime) and lasts its ``convert_s``: read from the raw fields, so an
    older nnsweep's entries count too. Conversions run side by side make the first figure
    smaller than the second; one at a time, the two are equal."""
    intervals = []
    for meta, fields in metas:
        try:
            seconds = float(fields["convert_s"])
            end = meta.stat().st_mtime
        except (OSError, ValueError, KeyError, TypeError):
            continue
        intervals.append((end - seconds, end))
    covered, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            covered += end - max(start, reach)
            reach = end
    return covered, sum(end - start for start, end in intervals)


def time_line_seconds(time_line: str, part: str) -> float | None:
    """The seconds the sweep's ``Time:`` line gives ``part`` (``converting 121.7 s``), or None."""
    match = re.search(rf"\b{re.escape(part)} ([0-9.]+) s\b", time_line)
    return float(match.group(1)) if match else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=24)
    parser.add_argument("--model", default="torchvision:mobilenet_v3_small")
    parser.add_argument("--nnsweep", default=f"{sys.executable} -m nnsweep", help="the command that runs nnsweep")
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it (default: a temporary one)")
    args = parser.parse_args()

    work = args.keep or Path(tempfile.mkdtemp(prefix="nnsweep-wall-"))
    work.mkdir(parents=True, exist_ok=True)
    spec_path = work / "sweep.yaml"
    spec_path.write_text(yaml.safe_dump(_spec(args.model, args.trials)))
    env = {**os.environ, "NNSWEEP_CACHE": str(work / "cache")}
    command = [*shlex.split(args.nnsweep), "run", str(spec_path)]
    print(f"command: {' '.join(command)} (cache: {work / 'cache'}, cold)", flush=True)
    start = time.perf_counter()
    proc = subprocess.Popen(command, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    memory = _PeakMemory(proc.pid)
    output, _ = proc.communicate()
    wall = time.perf_counter() - start
    peak = memory.stop()
    (work / "output.txt").write_text(output)
    if proc.returncode != 0:
        print(output[-3000:])
        print(f"nnsweep run exited {proc.returncode}")
        return 1
    time_line = next((line for line in output.splitlines() if line.startswith("Time: ")), "Time: (not printed)")
    converting, timed, conversions, distinct = _floor(spec_path)
    metas = _metas(work / "cache")
    built = _built_seconds(metas)
    floor = converting + timed
    print(f"wall {wall:.1f} s; peak memory of the process tree {peak:.0f} MB")
    print(f"sweep's {time_line}")
    print(f"floor {floor:.1f} s = conversion seconds spent {converting:.1f} s + timed runs {timed:.2f} s")
    print(f"wall / floor {wall / floor:.2f}" if floor > 0 else "wall / floor: n/a")
    if conversions:
        print(
            f"conversion seconds per distinct configuration: {converting / distinct:.1f} s "
            f"({converting:.1f} s over the {distinct} configurations measured; {len(conversions)} conversions)"
        )
        line_converting = time_line_seconds(time_line, "converting")
        if line_converting is not None:  # counts every conversion, also of an nnsweep that converted threads apart
            print(
                f"  the time line's converting per distinct configuration: {line_converting / distinct:.1f} s "
                f"({line_converting:.1f} s over {distinct}; the line above counts each conversion digest once)"
            )
        in_workers = sum(built.get(digest, 0.0) for digest in conversions)
        print(
            f"  of which building in the workers {in_workers:.1f} s ({in_workers / distinct:.1f} s per distinct "
            f"configuration); the rest is time the sweep waited on a worker before it built (each "
            f"worker's first conversion waits for the worker's start-up)"
        )
        covered, summed = _building_wall(metas)
        print(
            f"  the workers' building as wall time (the union of their intervals): {covered:.1f} s, "
            f"{covered / distinct:.1f} s per distinct configuration (summed {summed:.1f} s; equal when "
            f"conversions run one at a time)"
        )
        print("  sweep's s  built s  configuration")
        for digest, (seconds, label) in sorted(conversions.items(), key=lambda kv: -kv[1][0]):
            print(f"  {seconds:7.1f}  {built.get(digest, float('nan')):7.1f}  {label}")
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
