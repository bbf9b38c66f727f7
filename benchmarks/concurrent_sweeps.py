"""Two whole sweeps started at once on this machine, each with its own local Ray: do their
measurements ever overlap?

Runs ``nnsweep run`` twice in parallel (two specs, two state folders, one artifact
cache, tracking off), then reads every measured trial of both sweeps from their
studies: each record carries when its measurement held the machine's measurement
lock (``measure_held_from_s`` / ``measure_held_until_s``, CLOCK_MONOTONIC, one clock
for every process of the machine) and how long it waited for it
(``measure_lock_wait_ms``). Prints every interval on one time line, the time both
sweeps measured at once (the goal: 0), and the waits.

Each measurement is made long (``--min-duration`` seconds of timed runs) so that two
sweeps without a machine-wide lock would overlap most of the time.

Usage: .venv/bin/python benchmarks/concurrent_sweeps.py [--trials 6] [--min-duration 0.5]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SPEC = """
name: {name}
model: digits
devices: [host]
objectives: {{accuracy: maximize, latency_p50_ms: minimize}}
space:
  runtime: [onnxruntime, torch]
  quant: [fp32, dynamic_int8]
  threads: [1, 2]
budget: {{trials: {trials}}}
measure: {{warmup: 2, iters: 50, min_duration_s: {min_duration}}}
storage: journal
"""


def _intervals(spec_path: Path) -> list[tuple[float, float, float, int]]:
    """(from, until, lock wait ms, trial number) of every measured trial of the sweep."""
    from nnsweep.core.results import TrialStatus
    from nnsweep.spec import load_spec
    from nnsweep.sweep.studies import open_study, study_records

    spec = load_spec(spec_path)
    out = []
    for record in study_records(open_study(spec, "host", create=False)):
        m = record.metrics
        if record.status is not TrialStatus.OK or record.reused_from is not None:
            continue  # a repeat carries the values of the measurement it reuses: not a measurement
        if "measure_held_from_s" in m:
            out.append(
                (m["measure_held_from_s"], m["measure_held_until_s"], m.get("measure_lock_wait_ms", 0.0), record.number)
            )
    return sorted(out)


def _overlap(a: list[tuple[float, float, float, int]], b: list[tuple[float, float, float, int]]) -> float:
    return sum(max(0.0, min(x[1], y[1]) - max(x[0], y[0])) for x in a for y in b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=6, help="trials per sweep (the baseline and defaults count)")
    parser.add_argument("--min-duration", type=float, default=0.5, help="seconds of timed runs per measurement")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="concurrent-sweeps-") as tmp:
        root = Path(tmp)
        specs = []
        for name in ("sweep_a", "sweep_b"):
            path = root / f"{name}.yaml"
            path.write_text(SPEC.format(name=name, trials=args.trials, min_duration=args.min_duration))
            specs.append(path)
        cmd = [sys.executable, "-m", "nnsweep.cli", "--cache-dir", str(root / "cache"), "run", "--no-tracking"]
        print(f"load average before: {_loadavg()}")
        t0 = time.monotonic()
        procs = [
            subprocess.Popen(
                [*cmd, "--report", str(root / f"{p.stem}.html"), str(p)],
                cwd=root,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            for p in specs
        ]
        for spec, proc in zip(specs, procs, strict=True):
            _, err = proc.communicate(timeout=3600)
            if proc.returncode != 0:
                sys.exit(f"{spec.stem} exited with {proc.returncode}: {err[-2000:]}")
        wall = time.monotonic() - t0
        print(f"load average after:  {_loadavg()}  (both sweeps took {wall:.0f} s)")
        a, b = (_intervals(p) for p in specs)
    start = min(x[0] for x in a + b)
    print("\nmeasurement intervals (seconds from the first measurement; lock wait before each)")
    rows = sorted([("sweep_a", *x) for x in a] + [("sweep_b", *x) for x in b], key=lambda r: r[1])
    for name, frm, until, wait_ms, number in rows:
        span = f"{frm - start:8.3f} -> {until - start:8.3f}  ({until - frm:5.2f} s)"
        print(f"  {name}  trial {number:>2}  {span}  waited {wait_ms:7.0f} ms")
    measured = sum(x[1] - x[0] for x in a + b)
    waits = [x[2] for x in a + b]
    print(f"\nmeasurements: {len(a)} + {len(b)}, {measured:.1f} s measuring in all")
    print(f"time both sweeps measured at once: {_overlap(a, b):.3f} s")
    print(f"lock waits: {sum(w > 1 for w in waits)} of {len(waits)} measurements waited, longest {max(waits):.0f} ms")


def _loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


if __name__ == "__main__":
    main()
