"""Team mode with real parts: a PostgreSQL server and an ``mlflow server --serve-artifacts``
backed by it, both started and stopped here on 127.0.0.1, and two "laptops" — other
processes in other working directories that share nothing with the server but the spec's
URLs — sweeping different models into them at once (docs/how-to/team-mode.md is the recipe).

PostgreSQL refuses to run as root: as root, the database runs as the ``postgres`` user
(Debian's package creates it) in a directory of its own under the system's temp directory,
because pytest's base temp directory is private to root. Everything else is in tmp_path.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest
import yaml
from fakes.network import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

VENV_BIN = Path(sys.executable).parent


def _pg_bin() -> Path | None:
    """Debian keeps PostgreSQL's server programs off PATH, in /usr/lib/postgresql/<major>/bin."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


@dataclass
class Postgres:
    bin: Path
    data: Path
    port: int
    user: str | None  # run as this user (when we are root), else as ourselves
    started_s: float = 0.0

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *cmd: str) -> None:
        prefix = ["runuser", "-u", self.user, "--"] if self.user else []
        subprocess.run([*prefix, *cmd], check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        t0 = time.perf_counter()
        self._run(str(self.bin / "initdb"), "-D", str(self.data / "db"), "-A", "trust", "-U", "postgres", "--no-sync")
        self.serve()
        self.started_s = time.perf_counter() - t0

    def serve(self) -> None:
        """Start the server on the existing data directory (again, after :meth:`stop`)."""
        options = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1"
        log = str(self.data / "log")
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data / "db"), "-l", log, "-o", options, "-w", "start")

    def create_database(self, name: str) -> None:
        import psycopg

        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')

    def query(self, database: str, sql: str) -> list[tuple[object, ...]]:
        import psycopg

        with psycopg.connect(self.url(database)) as conn:
            return list(conn.execute(sql).fetchall())

    def stop(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data / "db"), "-m", "fast", "-w", "stop")


class MlflowServer:
    """``mlflow server`` on PostgreSQL, its artifacts behind its own proxy (``--serve-artifacts``)."""

    def __init__(self, backend: str, artifacts: Path, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.artifacts = artifacts
        self.log_path = log
        cmd = [str(VENV_BIN / "mlflow"), "server", "--backend-store-uri", backend, "--serve-artifacts"]
        cmd += ["--artifacts-destination", str(artifacts), "--host", "127.0.0.1", "--port", str(self.port)]
        cmd += ["--workers", "1"]
        self.cmd = cmd
        self.start()

    def start(self) -> None:
        """Start the server (again, after :meth:`stop`: same port, same database and artifacts)."""
        log = self.log_path
        # MLflow 3.17 starts a job runner beside the server unless told not to (seconds and memory for nothing here).
        env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
        t0 = time.perf_counter()
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                self.cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited:\n{log.read_text()[-3000:]}")
            if self.healthy():
                break
            time.sleep(0.3)
        else:
            self.stop()
            raise TimeoutError(f"mlflow server did not answer:\n{log.read_text()[-3000:]}")
        self.started_s = time.perf_counter() - t0

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as reply:
                return bool(reply.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Postgres]:
    pg_bin = _pg_bin()
    if pg_bin is None:
        pytest.skip("PostgreSQL's server programs are not installed (make system-deps installs Debian's postgresql)")
    user = None
    if os.geteuid() == 0:
        user = "postgres"
        try:
            uid = pwd.getpwnam(user).pw_uid
        except KeyError:
            pytest.skip("running as root and there is no 'postgres' user to run the database as")
        data = Path(tempfile.mkdtemp(prefix="nnsweep-pg-"))
        os.chown(data, uid, -1)
    else:
        data = tmp_path_factory.mktemp("pg")
    server = Postgres(pg_bin, data, free_port(), user)
    try:
        server.start()
        server.create_database("mlflow")
        server.create_database("optuna")
        # docs/how-to/team-mode.md's step 2: Optuna's tables, created once before anybody sweeps. Two first
        # sweeps creating them at once collide in PostgreSQL's catalog (UniqueViolation).
        subprocess.run(
            [str(VENV_BIN / "optuna"), "studies", "--storage", server.url("optuna")],
            check=True,
            capture_output=True,
            timeout=120,
        )
        yield server
    finally:
        server.stop()
        if user:
            shutil.rmtree(data, ignore_errors=True)


@pytest.fixture(scope="module")
def mlflow_server(postgres: Postgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    where = tmp_path_factory.mktemp("mlflow-server")
    server = MlflowServer(postgres.url("mlflow"), where / "artifacts", where / "server.log")
    try:
        yield server
    finally:
        server.stop()


def _laptop(root: Path, name: str, model: str, server: MlflowServer, postgres: Postgres) -> Path:
    """A working directory holding only the spec; its URLs are all it shares with the team."""
    home = root / name
    home.mkdir()
    spec = {
        "name": name,
        "model": model,
        "devices": ["host"],
        "space": {"runtime": ["onnxruntime"], "quant": ["fp32", "dynamic_int8"], "threads": [1]},
        "budget": {"trials": 2},
        "measure": {"warmup": 2, "iters": 20, "remeasure": 0},
        "tracking": {"uri": server.url, "experiment": name},
        "storage": postgres.url("optuna"),
    }
    (home / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return home


def _launch(home: Path, stderr: Path | None = None, **extra_env: str) -> subprocess.Popen[str]:
    """The sweep in ``home``; its stderr to the file ``stderr`` when given (a test that polls
    instead of reading would otherwise fill the pipe), else to a pipe like its stdout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "NNSWEEP_"))} | extra_env
    cmd = [sys.executable, "-m", "nnsweep.cli", "--cache-dir", str(home / "cache"), "run", "spec.yaml"]
    err = open(stderr, "w") if stderr else subprocess.PIPE  # noqa: SIM115 (the child holds it; closed below)
    # The local executor: what is under test here is where the sweep logs, not Ray.
    try:
        return subprocess.Popen(
            [*cmd, "--executor", "local"], cwd=home, env=env, stdout=subprocess.PIPE, stderr=err, text=True
        )
    finally:
        if stderr:
            err.close()  # type: ignore[union-attr]


def _reap(proc: subprocess.Popen[str]) -> None:
    """Kill the sweep if it still runs (stopped or not) and close its pipes."""
    if proc.poll() is None:
        proc.kill()
    proc.communicate()


def test_two_laptops_sweep_into_one_server_and_database_at_once(
    postgres: Postgres,
    mlflow_server: MlflowServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    import psutil
    from mlflow import MlflowClient

    monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # this process downloads the reports

    print(
        f"\nPostgreSQL: initdb + start {postgres.started_s:.1f} s; mlflow server up in {mlflow_server.started_s:.1f} s"
    )
    models = {"team-digits": "digits", "team-digits-gn": "digits_gn"}
    homes = {name: _laptop(tmp_path, name, model, mlflow_server, postgres) for name, model in models.items()}
    t0 = time.perf_counter()
    procs = {name: _launch(home) for name, home in homes.items()}  # at once
    for proc in procs.values():
        request.addfinalizer(partial(_reap, proc))  # a failed assertion below leaves no sweep behind
    outputs = {name: proc.communicate(timeout=1500) for name, proc in procs.items()}
    print(f"two concurrent sweeps: {time.perf_counter() - t0:.0f} s wall (load {os.getloadavg()[0]:.1f})")
    for name, proc in procs.items():
        assert proc.returncode == 0, f"{name}:\n{outputs[name][1][-4000:]}"

    client = MlflowClient(mlflow_server.url)
    for name, model in models.items():
        home = homes[name]
        experiment = client.get_experiment_by_name(name)
        assert experiment is not None
        assert experiment.artifact_location.startswith("mlflow-artifacts:")  # the server's proxy, not a path
        runs = client.search_runs([experiment.experiment_id])
        kinds = sorted(r.data.tags.get("nnsweep.kind", "") for r in runs)
        print(f"{name} ({model}): experiment {experiment.experiment_id}, {len(runs)} runs {kinds}")
        assert kinds == ["device", "trial", "trial"]
        assert {r.data.tags["nnsweep.sweep"] for r in runs} == {name}  # nothing of the other sweep
        assert all(r.info.status == "FINISHED" for r in runs)

        # The report: written on the laptop, stored through the proxy, fetched back byte for byte.
        (device_run,) = [r for r in runs if r.data.tags["nnsweep.kind"] == "device"]
        assert [a.path for a in client.list_artifacts(device_run.info.run_id)] == ["report.html"]
        fetched = Path(client.download_artifacts(device_run.info.run_id, "report.html", str(tmp_path)))
        local = home / "reports" / f"{name}.html"
        assert hashlib.sha256(fetched.read_bytes()).digest() == hashlib.sha256(local.read_bytes()).digest()
        assert name in fetched.read_text()
        stored = list(mlflow_server.artifacts.glob(f"*/{device_run.info.run_id}/artifacts/report.html"))
        print(f"  report.html fetched back through the proxy: {fetched.stat().st_size} bytes, {len(stored)} stored")
        assert len(stored) == 1
        # The laptop kept no tracking store or study of its own.
        left = sorted(p.name for p in home.iterdir())
        assert not {"mlflow.db", "mlruns", "mlartifacts"} & set(left), left
        assert not (home / ".nnsweep" / name / "optuna.journal").exists()

    studies = postgres.query(
        "optuna",
        "SELECT s.study_name, count(t.trial_id) FROM studies s LEFT JOIN trials t USING (study_id)"
        " WHERE t.state = 'COMPLETE' GROUP BY s.study_name ORDER BY 1",
    )
    print(f"studies in PostgreSQL (complete trials): {studies}")
    assert [s for s, _ in studies] == ["team-digits-gn/host", "team-digits/host"]
    assert all(int(str(n)) >= 2 for _, n in studies)

    # The MLflow UI is the same server: its page loads, and the experiments are listed there.
    with urllib.request.urlopen(f"{mlflow_server.url}/", timeout=10) as reply:
        assert reply.status == 200 and b"<html" in reply.read().lower()
    listed = {e.name for e in client.search_experiments()}
    assert set(models) <= listed
    server = psutil.Process(mlflow_server.proc.pid)
    rss = sum(p.memory_info().rss for p in [server, *server.children(recursive=True)]) / 2**20
    print(f"mlflow server resident memory (with its workers): {rss:.0f} MB")

    # A third laptop with only the spec reads the study from the database: the chosen configuration.
    third = tmp_path / "third"
    third.mkdir()
    shutil.copy(homes["team-digits"] / "spec.yaml", third / "spec.yaml")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "NNSWEEP_"))}
    best = subprocess.run(
        [sys.executable, "-m", "nnsweep.cli", "best", "spec.yaml", "--format", "json"],
        cwd=third,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert best.returncode == 0, best.stderr
    assert "onnxruntime" in best.stdout  # the only runtime in the space
    assert sorted(p.name for p in third.iterdir()) == ["spec.yaml"]  # nothing written there


def _complete_trials(postgres: Postgres, study: str) -> int:
    rows = postgres.query(
        "optuna",
        "SELECT count(*) FROM trials t JOIN studies s USING (study_id)"
        f" WHERE s.study_name = '{study}' AND t.state = 'COMPLETE'",
    )
    return int(str(rows[0][0]))


def test_a_sweep_outlives_restarts_of_the_mlflow_server_and_postgresql(
    postgres: Postgres, mlflow_server: MlflowServer, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Mid-sweep, once a trial is told, the MLflow server and PostgreSQL (the study's storage and
    the server's backend) are stopped together until the sweep's next storage call meets the outage,
    and 15 s more; PostgreSQL is started again, and the MLflow server once the tracker's next write
    has met it away. MLflow's client retries are off. The same run goes on: it exits 0, every
    trial it told is FINISHED on the server, and the study has no trial left RUNNING, one record
    per told trial."""
    from mlflow import MlflowClient

    outage_s = 15.0
    home = _laptop(tmp_path, "team-faults", "digits", mlflow_server, postgres)
    spec = yaml.safe_load((home / "spec.yaml").read_text())
    spec["space"] = {"runtime": ["onnxruntime"], "quant": ["fp32", "dynamic_int8", "static_int8"], "threads": [1, 2]}
    spec["budget"] = {"trials": 8}
    spec["measure"] = {"warmup": 2, "iters": 200, "remeasure": 0}
    (home / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    t0 = time.perf_counter()
    log = tmp_path / "sweep.err"
    # MLflow's client retries off: an outage longer than their backoff, met by nnsweep's own tracker.
    proc = _launch(home, log, MLFLOW_HTTP_REQUEST_MAX_RETRIES="0")
    request.addfinalizer(partial(_reap, proc))  # a failed assertion below leaves no sweep nor open pipe behind
    deadline = time.monotonic() + 600
    while _complete_trials(postgres, "team-faults/host") < 1:
        assert proc.poll() is None, log.read_text()[-4000:]
        assert time.monotonic() < deadline, "no trial told in 10 minutes"
        time.sleep(0.5)
    # The sweep is held while both servers stop (the MLflow server's graceful stop can take seconds):
    # a fast machine would otherwise finish every trial against a half-stopped pair and never meet it.
    proc.send_signal(signal.SIGSTOP)
    told_before = _complete_trials(postgres, "team-faults/host")
    down = time.perf_counter()
    mlflow_server.stop()
    postgres.stop()
    proc.send_signal(signal.SIGCONT)
    # The outage lasts until the sweep has met it (its next storage call waits), then outage_s more:
    # a fixed window could fall entirely while the sweep converts and touches neither server.
    met_by = time.monotonic() + 300
    while "the study's database does not answer" not in log.read_text():
        assert proc.poll() is None, "the sweep ended without meeting the outage:\n" + log.read_text()[-4000:]
        assert time.monotonic() < met_by, "the sweep made no storage call in 5 minutes of outage"
        time.sleep(0.5)
    time.sleep(outage_s)
    postgres.serve()
    # The study's storage is back; the tracker's next write (the trial just told) meets MLflow still away.
    while "kept, written when the server answers" not in log.read_text():
        assert proc.poll() is None, "the sweep ended with no tracking write kept:\n" + log.read_text()[-4000:]
        assert time.monotonic() < met_by + 300, "no tracking write in 5 minutes after PostgreSQL came back"
        time.sleep(0.5)
    mlflow_server.start()
    print(f"\nMLflow server and PostgreSQL down {time.perf_counter() - down:.1f} s, after {told_before} told trial(s)")
    proc.communicate(timeout=900)
    print(f"sweep: exit {proc.returncode} in {time.perf_counter() - t0:.0f} s")
    said = [line for line in log.read_text().splitlines() if " WARNING nnsweep." in line]
    print("\n".join(said))
    assert proc.returncode == 0, log.read_text()[-4000:]
    # The outage met the sweep on both sides: its study's storage waited, its tracker kept its writes.
    assert any("the study's database does not answer" in line for line in said)
    assert any("the study's database answers again" in line for line in said)
    assert any("kept, written when the server answers" in line for line in said)

    told = _complete_trials(postgres, "team-faults/host")
    running = postgres.query(
        "optuna",
        "SELECT count(*) FROM trials t JOIN studies s USING (study_id)"
        " WHERE s.study_name = 'team-faults/host' AND t.state = 'RUNNING'",
    )
    client = MlflowClient(mlflow_server.url)
    experiment = client.get_experiment_by_name("team-faults")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], "tags.`nnsweep.kind` = 'trial'")
    by_status: dict[str, int] = {}
    for r in runs:
        by_status[r.info.status] = by_status.get(r.info.status, 0) + 1
    numbers = sorted(int(r.data.tags["nnsweep.trial"]) for r in runs if r.info.status == "FINISHED")
    print(f"study: {told} COMPLETE, {running[0][0]} RUNNING; trial runs on the server by status: {by_status}")
    assert told > told_before  # the sweep went on after the outage
    assert int(str(running[0][0])) == 0
    assert by_status == {"FINISHED": told}, by_status
    assert len(set(numbers)) == len(numbers) == told
