"""A real two-node Ray cluster on this machine: a head (device ``host``) and a node
started as ``nnsweep agent join`` starts a board (device ``board-sim``)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import IO

import pytest
from fakes.network import free_port

from nnsweep.agents._node import ensure_token, head_command, join_command, ray_env

pytestmark = [pytest.mark.ray, pytest.mark.integration, pytest.mark.slow]


def _ray_bin() -> str:
    return str(Path(sys.executable).parent / "ray")


class Cluster:
    """Ray nodes in their own process groups: stopping them touches no other cluster."""

    def __init__(self, tmp: Path, token: Path) -> None:
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        # One token for every cluster of the test session, 0600: a Ray client reads its
        # token once per process, and this test process is a client of each cluster.
        self.token = token
        ensure_token(self.token)
        self.env = ray_env(os.environ, self.token)
        self.tmp = tmp
        self.nodes: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: list[IO[bytes]] = []

    def _start(self, name: str, cmd: list[str]) -> None:
        log = open(self.tmp / f"{name}.log", "ab")  # noqa: SIM115 (kept open for the node's lifetime)
        self.logs.append(log)
        self.nodes[name] = subprocess.Popen(
            [_ray_bin(), *cmd[1:]], env=self.env, start_new_session=True, stdout=log, stderr=log
        )

    def start_head(self) -> None:
        self._start("head", head_command(self.port, converters=1, block=True))
        self.wait_for("host")

    def join_board(self, name: str = "board", agent_port: int | None = None, boards: int = 1) -> None:
        """Join a node as device board-sim and wait until ``boards`` nodes offer it."""
        port = agent_port or free_port()
        self._start(name, join_command(self.address, "board-sim", dashboard_agent_port=port, block=True))
        self.wait_for("board-sim", count=boards)

    def kill(self, name: str) -> None:
        node = self.nodes.pop(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.pid, signal.SIGKILL)
        node.wait(timeout=30)

    def wait_for(self, device: str, timeout: float = 120, count: int = 1) -> None:
        probe = (
            f"import ray; ray.init(address='{self.address}'); "
            f"print(ray.cluster_resources().get('device:{device}', 0) >= {count})"
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = subprocess.run([sys.executable, "-c", probe], env=self.env, capture_output=True, text=True)
            if out.stdout.strip().endswith("True"):
                return
            time.sleep(1)
        raise TimeoutError(f"{device} did not join")

    def stop(self) -> None:
        for name in list(self.nodes):
            self.kill(name)
        for log in self.logs:
            log.close()


def _as_client(c: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """The test process is a Ray client of ``c`` too.

    Ray's core reads ``RAY_AUTH_MODE`` into its config when it is first imported and keeps
    the token it loads: in a pytest process where an earlier test imported Ray (as
    ``tests/test_ray_cluster.py`` does), the client would connect in that test's mode and be
    refused by this cluster. Ray's own tests reset both after changing the environment; so
    does this. (nnsweep's commands set the environment before they import Ray.)"""
    for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL"):
        if key in c.env:
            monkeypatch.setenv(key, c.env[key])
    if "ray._raylet" in sys.modules:
        from ray._private.authentication_test_utils import reset_auth_token_state

        reset_auth_token_state()


def _workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, models_dir: Path) -> None:
    """Work in ``tmp_path`` with a cache whose trained digits weights are the session's."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "models").symlink_to(models_dir)


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ray_token: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, ray_token)
    _as_client(c, monkeypatch)
    c.start_head()
    c.join_board()
    try:
        yield c
    finally:
        import ray

        ray.shutdown()
        c.stop()


def _spec(trials: int) -> object:
    from nnsweep.spec import parse_spec

    return parse_spec(
        {
            "name": "two",
            "model": "digits",
            "devices": ["host", "board-sim"],
            "space": {"runtime": ["executorch"], "quant": ["fp32", "static_int8"], "threads": [1]},
            "budget": {"trials": trials},
            "measure": {"warmup": 1, "iters": 20, "min_duration_s": 3.0, "remeasure": 0},
        }
    )


def test_devices_lists_both_nodes_with_capabilities(
    cluster: Cluster, free_port_in_rays_worker_range: Callable[[], int]
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "nnsweep.cli", "devices", "--address", cluster.address, "--json"],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    found = {c["device"]: c for c in json.loads(proc.stdout)}
    assert set(found) == {"host", "board-sim"}
    for caps in found.values():
        assert "xnnpack" in caps["runtimes"]["executorch"] and caps["cores"] >= 1

    # A second board joined under the same name (its agent's port in Ray's workers' range,
    # where `ray start` once failed): one device would be either board, so it is refused.
    cluster.join_board("twin", agent_port=free_port_in_rays_worker_range(), boards=2)
    twin = subprocess.run(
        [sys.executable, "-m", "nnsweep.cli", "devices", "--address", cluster.address],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert twin.returncode == 2, twin.stderr
    assert twin.stderr.startswith("nnsweep: error: devices: 'board-sim' is offered by 2 nodes of the cluster")
    assert len(twin.stderr.splitlines()) == 1


def test_losing_a_board_mid_sweep_requeues_and_it_resumes_on_rejoin(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, models_dir: Path
) -> None:
    from nnsweep.core.results import TrialStatus
    from nnsweep.execution.ray_cluster import RayExecutor
    from nnsweep.sweep.loop import Sweep, open_study
    from nnsweep.tracking import MlflowTracker

    _workdir(tmp_path, monkeypatch, models_dir)

    class KillsTheBoardOnce(RayExecutor):
        """Stands at the executor seam: the board's node dies during its second measurement."""

        calls = 0

        def measure(self, device: str, request: object) -> Future:  # type: ignore[type-arg, override]
            future = super().measure(device, request)  # type: ignore[arg-type]
            if device == "board-sim":
                KillsTheBoardOnce.calls += 1
                if KillsTheBoardOnce.calls == 2:
                    threading.Timer(1.5, self._kill_and_rejoin).start()
            return future

        def _kill_and_rejoin(self) -> None:
            cluster.kill("board")
            time.sleep(10)
            cluster.join_board()

    spec = _spec(trials=3)
    tracker = MlflowTracker("sqlite:///mlflow.db", "two", "two")
    executor = KillsTheBoardOnce(address=cluster.address)
    try:
        results = Sweep(spec, executor, tracker, tmp_path / "cache", lost_timeout_s=240).run()  # type: ignore[arg-type]
    finally:
        executor.shutdown()
    by_device = {r.device: r for r in results}
    # The space holds 2 configurations (fp32, static int8): each device measured both, the
    # board's lost one again after it rejoined; a lost trial is never a record in the study.
    for device in ("host", "board-sim"):
        measured = [r for r in by_device[device].records if r.status is TrialStatus.OK]
        assert sorted(r.config.quant.mode.value for r in measured) == ["fp32", "static_int8"], device
        assert all(r.status is not TrialStatus.INTERRUPTED for r in by_device[device].records)
    # one study and one MLflow parent run per device; no run left RUNNING; no duplicate trial runs
    for device in ("host", "board-sim"):
        assert open_study(spec, device, create=False).study_name == f"two/{device}"  # type: ignore[arg-type]
    runs = tracker.client.search_runs([tracker.experiment_id])
    assert sorted(r.info.run_name for r in runs if r.data.tags.get("nnsweep.kind") == "device") == ["board-sim", "host"]
    assert all(r.info.status != "RUNNING" for r in runs)
    trials = [r for r in runs if "nnsweep.trial" in r.data.tags]
    keys = [(r.data.tags["nnsweep.device"], r.data.tags["nnsweep.trial"]) for r in trials]
    assert len(keys) == len(set(keys))
    # the lost measurement is in MLflow as a KILLED run saying why, on the board only
    killed = [r for r in runs if r.info.status == "KILLED"]
    assert killed and all("agent lost" in r.data.tags.get("failure_reason", "") for r in killed)
    assert {r.data.tags["nnsweep.device"] for r in killed} == {"board-sim"}


def test_a_machine_that_joins_with_converters_takes_conversions_and_ships_them_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, models_dir: Path, ray_token: Path
) -> None:
    """A build server joins with --converters 1 (and no device): conversions go to both
    machines, and what the builder converted lands in the coordinator's own cache."""
    from nnsweep.artifacts.cache import ArtifactCache
    from nnsweep.core.results import TrialStatus
    from nnsweep.execution.ray_cluster import RayExecutor
    from nnsweep.spec import parse_spec
    from nnsweep.sweep.loop import Sweep
    from nnsweep.tracking import NullTracker

    c = Cluster(tmp_path, ray_token)
    _as_client(c, monkeypatch)
    builder_cache = tmp_path / "builder-cache"  # the build server's own cache ($NNSWEEP_CACHE there)
    builder_cache.mkdir()
    (builder_cache / "models").symlink_to(models_dir)  # trained digits weights: no training in the test
    _workdir(tmp_path, monkeypatch, models_dir)
    spec = parse_spec(
        {
            "name": "built",
            "model": "digits",
            "devices": ["host"],
            "space": {"runtime": ["onnxruntime"], "quant": ["fp32", "dynamic_int8", "static_int8"], "threads": [1]},
            "budget": {"trials": 4},
            "measure": {"warmup": 1, "iters": 20, "remeasure": 0},
        }
    )
    try:
        c.start_head()
        c.env = {**c.env, "NNSWEEP_CACHE": str(builder_cache)}
        c._start("builder", join_command(c.address, None, machine="builder", converters=1, block=True))
        c.env = ray_env(os.environ, c.token)
        deadline = time.monotonic() + 120
        probe = f"import ray; ray.init(address='{c.address}'); print(ray.cluster_resources().get('nnsweep-converter'))"
        while time.monotonic() < deadline:
            out = subprocess.run([sys.executable, "-c", probe], env=c.env, capture_output=True, text=True)
            if out.stdout.strip().endswith("2.0"):
                break
            time.sleep(1)
        executor = RayExecutor(address=c.address)
        sweep = Sweep(spec, executor, NullTracker(), tmp_path / "cache")  # type: ignore[arg-type]
        try:
            results = sweep.run()
            slots = executor.converters
        finally:
            executor.shutdown()
    finally:
        import ray

        ray.shutdown()
        c.stop()
    assert slots == {socket.gethostname(): 1, "builder": 1}
    assert sweep.stats.converted_on.get("builder", 0) >= 1  # the build server took work
    measured = [r for r in results[0].records if r.status is TrialStatus.OK and r.reused_from is None]
    assert len(measured) >= 3
    here = ArtifactCache(tmp_path / "cache")
    shipped = list((builder_cache / "artifacts").glob("*/*/meta.json"))
    assert shipped, "the builder converted into its own cache"
    for meta in shipped:  # and each of its entries is in the coordinator's cache, whole
        assert here.get(meta.parent.name) is not None
