"""Device time the quality-first gate saves, on a sweep where most int8 candidates break the bound.

Runs one sweep of ``digits_outlier`` (activation outlier channels: whole-model int8 loses
most of its accuracy) twice on this machine, with ``search.quality_first`` on and off,
over a finite space the budget exhausts (so both runs try the same configurations and
their fronts can be compared), and prints for each: the device's busy seconds (its agent
measuring), the trials timed on the device, those told infeasible from the host's run
alone, the sweep's wall seconds, and the feasible front (configurations and accuracies).

The device is a board stand-in: it measures on this machine but is declared another
machine (``LocalTransport(machine="board-sim")``), as a board joined over Ray is; the gate
runs on the coordinator's machine, and a device that is the coordinator's machine itself
is never gated (its time is the host's).

Usage: .venv/bin/python benchmarks/quality_gate.py [--iters 200] [--out DIR]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from nnsweep.agents import LocalTransport
from nnsweep.core.results import TrialStatus
from nnsweep.execution import LocalExecutor
from nnsweep.spec import parse_spec
from nnsweep.sweep.front import pareto_front
from nnsweep.sweep.loop import Sweep
from nnsweep.tracking import NullTracker

SPACE = {
    "runtime": ["onnxruntime", "torch"],
    "quant": ["fp32", "dynamic_int8", "static_int8"],
    "granularity": ["per_tensor", "per_channel"],
    "calibration": ["minmax", "histogram", "percentile"],
    "threads": [1],
}


def run(quality_first: bool, iters: int, root: Path) -> dict[str, object]:
    spec = parse_spec(
        {
            "name": f"gate_{'on' if quality_first else 'off'}",
            "model": "digits_outlier",
            "devices": ["board"],
            "constraints": {"max_accuracy_drop": 0.01},
            "budget": {"trials": 40},
            "measure": {"warmup": 5, "iters": iters, "remeasure": 0},
            "search": {"quality_first": quality_first},
            "space": SPACE,
        },
        source=root / "sweep.yaml",
    )
    executor = LocalExecutor({"board": LocalTransport(machine="board-sim")})
    sweep = Sweep(spec, executor, NullTracker(), root / "cache")
    started = time.monotonic()
    (host,) = sweep.run()
    wall = time.monotonic() - started
    ok = [r for r in host.records if r.status is TrialStatus.OK]
    untimed = [r for r in ok if r.tags.get("quality_from") == "host"]
    front = pareto_front(ok, spec.objectives)
    return {
        "device_s": sweep.stats.busy_s.get("board", 0.0),
        "gate_s": sum(r.metrics.get("time_gating_s", 0.0) for r in ok),
        "timed": len(ok) - len(untimed),
        "untimed": len(untimed),
        "wall_s": wall,
        "front": sorted((r.config.label(), round(r.metrics["accuracy"], 4)) for r in front),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--out", type=Path, default=None, help="working folder (default: a temporary one)")
    args = parser.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="nnsweep-gate-"))
    root.mkdir(parents=True, exist_ok=True)
    (root / "cache").mkdir(exist_ok=True)
    results = {flag: run(flag, args.iters, root) for flag in (False, True)}
    print(
        "| quality_first | device busy s | timed on device | per timed trial s | infeasible from the host run "
        "| host gate s | wall s |"
    )
    print("|---|---|---|---|---|---|---|")
    for flag, r in results.items():
        per = r["device_s"] / max(r["timed"], 1)
        print(
            f"| {flag} | {r['device_s']:.2f} | {r['timed']} | {per:.2f} | {r['untimed']} | {r['gate_s']:.1f} "
            f"| {r['wall_s']:.1f} |"
        )
    same = results[False]["front"] == results[True]["front"]
    print(f"\nsame feasible front: {same}")
    for flag, r in results.items():
        print(f"front with quality_first={flag}: {r['front']}")


if __name__ == "__main__":
    main()
