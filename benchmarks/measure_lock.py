"""Two measuring agents on this machine at once (as two sweeps, each with its own local
Ray, would run them): the intervals during which each one measured, and their overlap.

Each agent is a separate process with its own :class:`nnsweep.agents.LocalTransport`
(warm worker, machine-wide measurement lock) that measures the digits ONNX model
--count times for --min-duration seconds each. The script prints both agents'
intervals on one clock (CLOCK_MONOTONIC), the total time both measured at once, and
each agent's lock waits. With ``--private-locks`` every agent gets a lock of its own,
which is what two sweeps had before the machine-wide lock: their measurements overlap.

Usage: .venv/bin/python benchmarks/measure_lock.py [--count 6] [--min-duration 0.5] [--private-locks]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

AGENT = """
import json, sys, time
from pathlib import Path
import numpy as np
from nnsweep.agents import LocalTransport, MeasureRequest
from nnsweep.bench import MachineLock, MeasureSettings
from nnsweep.core.artifact import IOSpec
artifact, count, min_duration, lock, go = sys.argv[1:6]
count, min_duration, go = int(count), float(min_duration), float(go)
transport = LocalTransport(lock=MachineLock(Path(lock)) if lock else None)
request = MeasureRequest("onnxruntime", "model.onnx", Path(artifact).read_bytes(), IOSpec(), 1, ("cpu",),
                         np.zeros((16, 1, 8, 8), np.float32), MeasureSettings(iters=100, min_duration_s=min_duration))
transport.measure(request)  # starts the warm worker before the common start
time.sleep(max(go - time.monotonic(), 0))
out = []
for _ in range(count):
    t = transport.measure(request).timing
    out.append({"held": t.held_monotonic, "lock_wait_ms": t.lock_wait_ms, "p50_ms": t.latency.p50})
transport.close()
print(json.dumps(out))
"""


def _artifact(cache: Path) -> str:
    argv = [sys.executable, "-m", "nnsweep.cli", "--cache-dir", str(cache), "bench", "--model", "digits"]
    argv += ["--runtime", "onnxruntime", "--quant", "fp32", "--iters", "10", "--json"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=tempfile.gettempdir()).stdout
    return str(json.loads(out)["artifact"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=6)
    parser.add_argument("--min-duration", type=float, default=0.5)
    parser.add_argument("--private-locks", action="store_true", help="one lock per agent (as before)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="measure-lock-") as tmp:
        artifact = _artifact(Path(tmp) / "cache")
        print(f"load average: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}  (shared machine)")
        go = str(time.monotonic() + 20)  # both agents have started their workers by then
        procs = []
        for name in ("A", "B"):
            lock = str(Path(tmp) / f"{name}.lock") if args.private_locks else ""
            argv = [sys.executable, "-c", AGENT, artifact, str(args.count), str(args.min_duration), lock, go]
            procs.append((name, subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=tmp)))
        runs = {name: json.loads(proc.communicate()[0]) for name, proc in procs}
    t0 = min(r["held"][0] for rs in runs.values() for r in rs)
    events = sorted((r["held"][0] - t0, r["held"][1] - t0, name, r) for name, rs in runs.items() for r in rs)
    mode = "one lock per agent (before)" if args.private_locks else "the machine-wide lock"
    print(f"\nmeasurement intervals, s from the first start ({mode}):")
    for start, end, name, r in events:
        print(f"  {name}  {start:7.3f} - {end:7.3f}   waited {r['lock_wait_ms']:7.1f} ms   p50 {r['p50_ms']:.4f} ms")
    overlap = 0.0
    a = [(s, e) for s, e, n, _ in events if n == "A"]
    b = [(s, e) for s, e, n, _ in events if n == "B"]
    for s1, e1 in a:
        for s2, e2 in b:
            overlap += max(0.0, min(e1, e2) - max(s1, s2))
    busy = sum(e - s for s, e, _, _ in events)
    print(f"\ntime both measured at once: {overlap:.3f} s of {busy:.3f} s measured")
    for name, rs in runs.items():
        waits = sorted(r["lock_wait_ms"] for r in rs)
        print(f"agent {name}: lock waits median {waits[len(waits) // 2]:.0f} ms, total {sum(waits) / 1e3:.2f} s")
    print(f"load average after: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}  (shared machine)")
    if overlap > 0 and not args.private_locks:
        sys.exit("FAILED: two measurements overlapped under the machine-wide lock")


if __name__ == "__main__":
    main()
