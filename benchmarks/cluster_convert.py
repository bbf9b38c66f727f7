"""Conversions across the cluster: a cold-cache sweep with the head converting alone,
then with a second machine joined as a build server (``nnsweep agent join --converters 1``).

Both runs start a Ray head on this machine (device ``host``, one conversion slot); the
second also starts a node labelled as machine ``builder`` that offers one conversion
slot and no device, with its own cache (``$NNSWEEP_CACHE``), as a build server would.
Each run sweeps the same space into a fresh (cold) artifact cache and prints its wall
time, the conversions each machine started, and the cache entries the builder shipped.
The built-in model's weights are trained once up front and shared by both caches, so
the runs time conversions, not training.

Both nodes share this machine's cores: the builder converts while the host measures,
so the host's latencies in the second run are not isolated. This measures how the
coordinator spreads conversions, not the models. On real machines each build server
adds its own cores: the head's coordinator only sends it configurations and receives
artifacts (a few hundred KB each).

Usage: .venv/bin/python benchmarks/cluster_convert.py [--trials 10]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from sweep_overhead import _free_port, _node, _stop, _wait_for

from nnsweep.agents._node import ensure_token, head_command, join_command, ray_env
from nnsweep.execution.ray_cluster import RayExecutor
from nnsweep.spec import parse_spec
from nnsweep.sweep.loop import Sweep
from nnsweep.tracking import NullTracker


def _spec(name: str, trials: int) -> object:
    return parse_spec(
        {
            "name": name,
            "model": "digits",
            "devices": ["host"],
            "space": {
                "runtime": ["executorch", "onnxruntime", "torch"],
                "quant": ["fp32", "dynamic_int8", "static_int8"],
                "granularity": ["per_tensor", "per_channel"],
                "threads": [1],
            },
            "budget": {"trials": trials},
            "measure": {"warmup": 5, "iters": 100},
        }
    )


def _converters(address: str) -> float:
    import ray

    ray.init(address=address, log_to_driver=False)
    try:
        return float(ray.cluster_resources().get("nnsweep-converter", 0))
    finally:
        ray.shutdown()


def _run(work: Path, label: str, trials: int, builder: bool) -> None:
    port = _free_port()
    address = f"127.0.0.1:{port}"
    token = work / "auth_token"  # one for both clusters: a Ray client reads its token once per process
    ensure_token(token)
    env = ray_env(os.environ, token)
    os.environ.update({k: env[k] for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH")})  # this script is a client
    builder_cache = work / label / "builder-cache"
    cache = work / label / "cache"
    for root in (
        cache,
        builder_cache,
    ):  # the digits weights trained once, up front: conversions are timed, not training
        root.mkdir(parents=True)
        (root / "models").symlink_to(work / "models")
    # its own dashboard agent port: the previous run's head may still hold the default one
    head = head_command(port, converters=1, block=True, dashboard_agent_port=_free_port())
    nodes = [_node(head, env)]
    try:
        _wait_for(address, "host")
        if builder:
            join = join_command(address, None, machine="builder", converters=1, dashboard_agent_port=_free_port())
            nodes.append(_node([*join, "--block"], {**env, "NNSWEEP_CACHE": str(builder_cache)}))
            deadline = time.monotonic() + 120
            while _converters(address) < 2 and time.monotonic() < deadline:
                time.sleep(1)
        executor = RayExecutor(address=address)
        sweep = Sweep(_spec(label, trials), executor, NullTracker(), cache)  # type: ignore[arg-type]
        started = time.monotonic()
        try:
            sweep.run()
            slots = executor.converters
        finally:
            executor.shutdown()
        wall = time.monotonic() - started
    finally:
        for node in reversed(nodes):
            _stop(node)
    shipped = len(list((builder_cache / "artifacts").glob("*/*/meta.json"))) if builder else 0
    per_machine = ", ".join(f"{m}: {n}" for m, n in sorted(sweep.stats.converted_on.items()))
    print(f"\n== {label}: slots {slots}")
    print(f"   cold-cache sweep of {trials} trials: {wall:.0f} s wall; load average {_loadavg()}")
    print(f"   conversions started per machine: {per_machine}; cache hits {sweep.stats.cache_hits}")
    if builder:
        print(f"   entries the builder converted and shipped into the coordinator's cache: {shipped}")


def _loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="nnsweep-cluster-convert-"))
    os.chdir(work)
    from nnsweep.models import load_model

    load_model("digits", cache_dir=work / "models")  # trains and keeps the weights
    try:
        _run(work, "one-converter", args.trials, builder=False)
        _run(work, "head-and-builder", args.trials, builder=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
