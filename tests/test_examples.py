"""The example specs in sweeps/, one per device kind, run as a user runs them (``nnsweep run``).

Each runs from a copy in its own working directory in tmp_path (its mlflow.db, .nnsweep/
and reports/ land there, never in the checkout); they share one artifact and model cache so digits trains once.
Where the device cannot exist here the example is only validated, and the reason is
written below: an ssh board, and the emulated Arm board (``make arm-sim`` needs root,
qemu and ~25 minutes to build; its own tests cover it). The quickstart runs with a budget
of three trials (``--trials``), as a user's first look would, and all_runtimes.yaml with
five (one default deployment per runtime). The phone is the fake ``adb``
in tests/fakes (as in tests/test_bridge.py); the Ray board is a second Ray node on this
machine (as in tests/test_cluster.py).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.network import free_port

from nnsweep.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
SWEEPS = ROOT / "sweeps"
FAKES = Path(__file__).parent / "fakes"

# Every device kind and its example (docs/reference/spec.md lists the same: tests/test_docs.py).
KINDS = {
    "host": "host.yaml",
    "Ray board": "ray_board.yaml",
    "adb bridge": "phone_adb.yaml",
    "ssh bridge": "board_ssh.yaml",
    "Ethos-U": "ethos_u.yaml",
    "emulated Arm board": "arm_sim.yaml",
}
# Examples that cannot run here, and why.
VALIDATE_ONLY = {
    "board_ssh.yaml": "no ssh board exists here; phone_adb.yaml runs the same bridge agent",
    "arm_sim.yaml": "make arm-sim needs root, qemu-user and ~25 minutes; the emulation tests run the board",
    "mixed_precision.yaml": "what it shows is the float_layers search, which needs its budget (20 trials over "
    "three runtimes, about 6 minutes); tests/test_cli.py runs its ranking and --float-layers on the same model, "
    "tests/test_space.py its space",
    "bert_int4.yaml": "what it shows is whether 4-bit weights reach a front, which needs its 12 trials over three "
    "runtimes (2-4 minutes); benchmarks/results/bert_int4_sweep.md has its runs, tests/test_quant_int4.py the modes",
    "tiny_llama.yaml": "its front needs 16 trials over two runtimes (about 10 minutes, ExecuTorch's decoder "
    "exports most of it); tests/test_sweep_decoder.py runs a decoder sweep end to end on ONNX Runtime, "
    "benchmarks/results/decoder_sweep.md has this example's runs",
}


def test_every_example_validates_and_every_device_kind_has_one() -> None:
    examples = sorted(p.name for p in SWEEPS.glob("*.yaml"))
    for name in examples:
        load_spec(SWEEPS / name)  # raises SpecError naming the field
    assert set(KINDS.values()) <= set(examples)
    ran = {"host.yaml", "ray_board.yaml", "phone_adb.yaml", "ethos_u.yaml", "quickstart.yaml", "all_runtimes.yaml"}
    ran |= {"detect.yaml", "segment.yaml"}  # user metrics on user data: tests/test_examples_tasks.py runs them
    assert set(examples) == ran | set(VALIDATE_ONLY), "a new example: run it below or say why it cannot run"


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory: pytest.TempPathFactory, models_dir: Path) -> Path:
    cache = tmp_path_factory.mktemp("examples-cache")
    (cache / "models").symlink_to(models_dir)
    return cache


def _run(
    example: str, cwd: Path, cache: Path, *extra: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    # A copy beside its working directory: a sweep keeps its state (.nnsweep/) beside its spec,
    # and the checkout's sweeps/ must stay as it is (and each test start afresh).
    shutil.copy(SWEEPS / example, cwd / example)
    cmd = [sys.executable, "-m", "nnsweep.cli", "--cache-dir", str(cache), "run", example, *extra]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=1200)
    print(f"\n{example}: {time.perf_counter() - t0:.0f} s wall (load {os.getloadavg()[0]:.1f})")
    assert proc.returncode == 0, proc.stderr[-4000:]
    spec = load_spec(SWEEPS / example)
    assert (cwd / "reports" / f"{spec.name}.html").is_file()
    assert (cwd / "mlflow.db").is_file()
    assert (cwd / ".nnsweep" / spec.name).is_dir()
    return proc


def _trials(stdout: str) -> list[tuple[int, int, int]]:
    """(measured, repeats, failed) per device, from the closing lines of ``nnsweep run``."""
    found = re.findall(r"Trials: (\d+) measured, (\d+) failed \(distinct configurations\); (\d+) repeats", stdout)
    return [(int(a), int(c), int(b)) for a, b, c in found]


@pytest.mark.integration
@pytest.mark.slow
def test_host_example(tmp_path: Path, shared_cache: Path) -> None:
    proc = _run("host.yaml", tmp_path, shared_cache, "--executor", "local")
    ((measured, _, failed),) = _trials(proc.stdout)
    assert measured >= 3 and failed == 0  # the budget: distinct configurations
    assert "Best on host:" in proc.stdout


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.ray
def test_quickstart_with_a_small_budget(tmp_path: Path, shared_cache: Path) -> None:
    """The README's main command as a user first tries it: the default executor (a local Ray
    cluster), the spec as it is, three trials instead of its 24."""
    home = tmp_path / "home"  # the local cluster's token goes under HOME: keep it in tmp_path
    home.mkdir()
    env = dict(os.environ, HOME=str(home))
    proc = _run("quickstart.yaml", tmp_path, shared_cache, "--trials", "3", env=env)
    ((measured, _, failed),) = _trials(proc.stdout)
    assert measured + failed == 3 and measured >= 1
    assert "Best on host:" in proc.stdout
    # Ray's announcement of the token nnsweep asked for, and MLflow creating its tables, are -v only
    assert "Token authentication is enabled" not in proc.stderr
    assert "initial MLflow database tables" not in proc.stderr


@pytest.mark.integration
@pytest.mark.slow
def test_all_runtimes_side_by_side(tmp_path: Path, shared_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The five runtimes in one sweep, with the budget their default deployments take: the
    fp32 baseline (PyTorch eager) and each other runtime's default, one trial each."""
    from nnsweep.sweep.studies import open_study, study_records

    proc = _run("all_runtimes.yaml", tmp_path, shared_cache, "--trials", "5", "--executor", "local")
    ((measured, _, failed),) = _trials(proc.stdout)
    assert measured == 5 and failed == 0
    monkeypatch.chdir(tmp_path)  # the sweep's state is beside its spec
    records = study_records(open_study(load_spec(tmp_path / "all_runtimes.yaml"), "host", create=False))
    measured_on = {r.config.runtime for r in records if r.status.value == "ok"}
    assert measured_on == {"executorch", "onnxruntime", "torch", "litert", "armnn"}


def _plug_back_in(unplugged: Path, after_s: float, timeout_s: float = 600.0) -> None:
    """Remove the fake phone's ``unplugged`` mark ``after_s`` after it appears."""
    deadline = time.monotonic() + timeout_s
    while not unplugged.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(after_s)
    unplugged.unlink(missing_ok=True)


@pytest.mark.integration
@pytest.mark.slow
def test_adb_bridge_example_with_the_fake_phone(tmp_path: Path, shared_cache: Path) -> None:
    """As its header says to run it: on the default executor, Ray. There the bridge agent
    asked for a sliver of the conversion resource, which the conversion actors hold whole,
    so it never started and the sweep waited 600 s for its probe (this test ran with the
    local executor, which places no actors).

    The cable is pulled after the first benchmark run and put back 10 s later: the phone is
    back once its probe answers. A new agent alone used to count as back, so the sweep
    "resumed" every 2.5 s, lost it again at its first command, and never ended while the
    phone stayed away."""
    phone = tmp_path / "phone"
    tool = phone / "data" / "local" / "tmp" / "speed_benchmark_torch"  # the example's tools: path
    tool.parent.mkdir(parents=True)
    tool.write_bytes(b"\x7fELF (stands in for the aarch64 binary)")
    env = dict(
        os.environ,
        PATH=f"{FAKES}{os.pathsep}{os.environ['PATH']}",  # the example names no adb: PATH's is used
        FAKE_ADB_ROOT=str(phone),
        FAKE_ADB_LOG=str(tmp_path / "adb.log"),
        FAKE_ADB_SERIAL="R58N123",
        FAKE_ADB_UNPLUG_AFTER_RUNS="1",
    )
    replugged = threading.Thread(target=_plug_back_in, args=(phone / "unplugged", 10.0), daemon=True)
    replugged.start()
    proc = _run("phone_adb.yaml", tmp_path, shared_cache, env=env)
    replugged.join(timeout=1)
    ((measured, _, failed),) = _trials(proc.stdout)  # repeats of those, if the sampler made any, are free
    assert (measured, failed) == (2, 0)
    assert proc.stderr.count("pixel lost") == 1 and proc.stderr.count("pixel is back") == 1, proc.stderr[-3000:]
    assert "36.01" in proc.stdout  # the fake tool's latency, parsed from its real output format
    log = (tmp_path / "adb.log").read_text()
    assert "-s R58N123 shell" in log and "/data/local/tmp/speed_benchmark_torch" in log


@pytest.mark.integration
@pytest.mark.slow
def test_ethos_u_example_estimates_on_the_host(tmp_path: Path, shared_cache: Path) -> None:
    proc = _run("ethos_u.yaml", tmp_path, shared_cache, "--executor", "local")
    ((measured, _, failed),) = _trials(proc.stdout)
    assert (measured, failed) == (2, 0)
    assert "ethos-u55-128" in proc.stdout and "estimate" in proc.stdout


@pytest.fixture
def two_nodes(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """A Ray head (device ``host``) and a second node on this machine standing in for the board ``rpi5``."""
    from nnsweep.agents._node import ensure_token, head_command, join_command, ray_env

    ray = str(Path(sys.executable).parent / "ray")
    port = free_port()
    address = f"127.0.0.1:{port}"
    token = tmp_path / "ray" / "auth_token"  # this cluster's own token (0600), not ~/.ray's
    ensure_token(token)
    env = ray_env(os.environ, token)
    nodes: list[subprocess.Popen[bytes]] = []

    def start(name: str, cmd: list[str], device: str) -> None:
        with open(tmp_path / f"{name}.log", "ab") as log:
            nodes.append(subprocess.Popen([ray, *cmd[1:]], env=env, start_new_session=True, stdout=log, stderr=log))
        probe = f"import ray; ray.init(address='{address}'); print('device:{device}' in ray.cluster_resources())"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
            if out.stdout.strip().endswith("True"):
                return
            time.sleep(1)
        raise TimeoutError(f"{device} did not join; see {tmp_path / name}.log")

    try:
        start("head", head_command(port, converters=1, block=True, dashboard_agent_port=free_port()), "host")
        start("board", join_command(address, "rpi5", dashboard_agent_port=free_port(), block=True), "rpi5")
        yield address, env
    finally:
        for node in nodes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.pid, signal.SIGKILL)
            node.wait(timeout=30)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.ray
def test_ray_board_example_on_two_nodes(tmp_path: Path, shared_cache: Path, two_nodes: tuple[str, dict]) -> None:  # type: ignore[type-arg]
    address, env = two_nodes
    proc = _run("ray_board.yaml", tmp_path, shared_cache, "--address", address, env=env)
    trials = _trials(proc.stdout)
    assert len(trials) == 2 and all(m == 2 and f == 0 for m, _, f in trials)
    assert "Best on host:" in proc.stdout and "Best on rpi5:" in proc.stdout
