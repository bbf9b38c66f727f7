"""Coordinator overhead and device utilization on a two-device Ray cluster.

Starts a Ray head (device ``host``, one conversion worker) and a second node on
this machine offering device ``board-sim`` (as ``nnsweep agent join`` does), runs
the same sweep twice — cold artifact cache, then warm — and prints:

* per-trial coordinator overhead: ask + dispatch + tell + MLflow logging, i.e. the
  coordinator's own time, excluding conversion and measurement (target: median <= 50 ms);
* device utilization: time each agent spent measuring / wall time from its first
  measurement to the end of the sweep (target: >= 90 % once the pipeline is full);
* the conversion cache hit rate.

The two devices share this machine's two cores, so board-sim is declared a separate
machine here (its own machine name and its own measurement lock file,
``NNSWEEP_MEASURE_LOCK``): measurements are *not* isolated in this benchmark and its
latencies mean nothing. It measures the coordinator, not the models. Each sweep also
prints where each device's time went (the trials' time breakdown) and the ratio of
the device's busy time to its timed runs, and how long each device's agent took to
start its runtimes' warm workers (once per sweep; nothing measures on its machine
meanwhile, so that time is not in the busy time).

Usage: .venv/bin/python benchmarks/sweep_overhead.py [--trials 16] [--min-duration 2]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nnsweep.agents._node import ensure_token, head_command, join_command, ray_env
from nnsweep.execution.ray_cluster import RayExecutor
from nnsweep.spec import parse_spec
from nnsweep.sweep.loop import Sweep
from nnsweep.tracking import BackgroundTracker, MlflowTracker


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _node(cmd: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start a Ray node in the foreground (``--block``) in its own process group, so
    stopping it touches no other Ray cluster on this machine."""
    ray = str(Path(sys.executable).parent / "ray")
    return subprocess.Popen(
        [ray, *cmd[1:]], env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def _stop(node: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(node.pid, signal.SIGTERM)
    try:
        node.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(node.pid, signal.SIGKILL)


def _wait_for(address: str, device: str, timeout: float = 120.0) -> None:
    import ray

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ray.init(address=address, log_to_driver=False)
            if f"device:{device}" in ray.cluster_resources():
                return
        except ConnectionError:
            pass
        finally:
            ray.shutdown()
        time.sleep(1)
    raise TimeoutError(f"device {device} did not join {address}")


def _spec(name: str, trials: int, min_duration: float) -> object:
    return parse_spec(
        {
            "name": name,
            "model": "digits",
            "devices": ["host", "board-sim"],
            "constraints": {"max_accuracy_drop": 0.01},
            "space": {
                "runtime": ["executorch", "onnxruntime", "torch"],
                "quant": ["fp32", "dynamic_int8", "static_int8"],
                "granularity": ["per_tensor", "per_channel"],
                "backends": {"executorch": ["xnnpack", "portable"], "torch": ["x86", "qnnpack"]},
                "threads": [1],
            },
            "budget": {"trials": trials},
            "measure": {"warmup": 5, "iters": 200, "min_duration_s": min_duration, "remeasure": 0},
        }
    )


def _report(label: str, sweep: Sweep, wall: float, results: list) -> None:  # type: ignore[type-arg]
    st = sweep.stats
    over = sorted(st.overhead_ms)
    print(f"\n== {label}: {len(over)} trials over 2 devices in {wall:.0f} s")
    if over:
        p90 = over[int(0.9 * (len(over) - 1))]
        median = statistics.median(over)
        print(f"coordinator overhead per trial (wall): median {median:.1f} ms, p90 {p90:.1f} ms, max {over[-1]:.1f} ms")
        cpu = sorted(st.overhead_cpu_ms)
        print(
            f"coordinator overhead per trial (its thread's CPU time): median {statistics.median(cpu):.1f} ms, "
            f"p90 {cpu[int(0.9 * (len(cpu) - 1))]:.1f} ms"
        )
    for device, busy in sorted(st.busy_s.items()):
        span = st.finished_at - st.first_measure_at[device]
        print(f"utilization {device}: {busy:.0f} s measuring / {span:.0f} s after its first = {busy / span:.0%}")
    if st.conversions:
        print(f"conversion cache hits: {st.cache_hits}/{st.conversions} = {st.cache_hits / st.conversions:.0%}")
    for r in results:  # the trials' own time breakdown (seconds summed over the device's trials)
        parts = ", ".join(f"{k} {v:.1f} s" for k, v in r.breakdown.items() if v >= 0.05)
        timed, busy = r.breakdown.get("timed runs", 0.0), st.busy_s.get(r.device, 0.0)
        ratio = f"; busy / timed runs = {busy / timed:.2f}" if timed else ""
        print(f"time breakdown {r.device}: {parts}{ratio}")
    for device, seconds in sorted(st.starting_s.items()):  # once per sweep, before its first measurement
        print(f"starting {device}'s runtimes (warm workers, before its first measurement): {seconds:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=16, help="per device")
    parser.add_argument("--min-duration", type=float, default=2.0, help="seconds each measurement times at least")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="nnsweep-overhead-"))
    os.chdir(work)
    port = _free_port()
    address = f"127.0.0.1:{port}"
    token = work / "auth_token"  # private (0600, in a 0700 folder): `ray start --head` never makes one
    ensure_token(token)
    env = ray_env(os.environ, token)
    os.environ.update({k: env[k] for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH")})  # this script is a client
    nodes = [_node(head_command(port, converters=1, block=True), env)]
    try:
        _wait_for(address, "host")
        join = join_command(address, "board-sim", machine="board-sim", dashboard_agent_port=_free_port(), block=True)
        # a machine of its own, down to the measurement lock: its measurements overlap the host's
        nodes.append(_node(join, {**env, "NNSWEEP_MEASURE_LOCK": str(work / "board-sim.lock")}))
        _wait_for(address, "board-sim")
        cache = work / "cache"
        for label in ("cold cache", "warm cache"):
            name = "overhead-" + label.split()[0]
            spec = _spec(name, args.trials, args.min_duration)
            executor = RayExecutor(address=address)
            tracker = BackgroundTracker(MlflowTracker("sqlite:///mlflow.db", name, name))  # as `nnsweep run`
            sweep = Sweep(spec, executor, tracker, cache)  # type: ignore[arg-type]
            started = time.monotonic()
            results = sweep.run()
            tracker.close()
            _report(label, sweep, time.monotonic() - started, results)
            executor.shutdown()
    finally:
        for node in reversed(nodes):
            _stop(node)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
