"""The emulated aarch64 board (``device_agents/arm_sim.sh``) and how emulation is detected and labelled.

The unit tests feed the detector the ``/proc/cpuinfo`` texts of a real x86 host and a
real Raspberry Pi 4. The integration test (marker ``emulation``, root only) builds or
reuses the board's root, joins it to a head on this machine and sweeps ``[host,
arm64-sim]`` with the digits model: a real aarch64 userland under qemu-user, nothing faked.
It also checks that the board emulates the CPU it names (``NNSWEEP_ARM_SIM_CPU``) in every
process: LiteRT's XNNPACK int8 kernels then agree with x86, where qemu's default CPU broke them.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fakes.network import free_port

from nnsweep.agents import Capabilities, DeviceAgent, MeasureReply, MeasureRequest, Transport
from nnsweep.agents._arm_cpu import core_name, cores_from_sysfs, describe_cores
from nnsweep.agents._capabilities import MEASURE_HEADROOM_MB, measure_peak_mb, runtimes_that_fit
from nnsweep.agents._emulation import cpuinfo_arch, detect, detect_from, qemu_cpu
from nnsweep.core import runtimes as registry

REPO = Path(__file__).resolve().parent.parent
ARM_SIM = REPO / "device_agents" / "arm_sim.sh"

# The first lines of /proc/cpuinfo on this kind of x86 host, and on a Raspberry Pi 4.
X86_CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC 7B13
flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht
"""
RPI4_CPUINFO = """processor\t: 0
BogoMIPS\t: 108.00
Features\t: fp asimd evtstrm crc32 cpuid
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x0
CPU part\t: 0xd08
CPU revision\t: 3
"""


# -- detection ---------------------------------------------------------------------------


def test_cpuinfo_arch_tells_x86_from_arm() -> None:
    assert cpuinfo_arch(X86_CPUINFO) == "x86_64"
    assert cpuinfo_arch(RPI4_CPUINFO) == "arm"
    assert cpuinfo_arch("") is None


def test_aarch64_userland_on_an_x86_cpu_is_emulated() -> None:
    found = detect_from("aarch64", X86_CPUINFO)
    assert found is not None
    assert (found.userland, found.host, found.host_cpu) == ("aarch64", "x86_64", "AMD EPYC 7B13")
    assert found.describe() == "aarch64 userland emulated by qemu-user on x86_64 (AMD EPYC 7B13)"


def test_a_real_arm_board_and_a_real_x86_host_are_native() -> None:
    assert detect_from("aarch64", RPI4_CPUINFO) is None
    assert detect_from("x86_64", X86_CPUINFO) is None


def test_qemu_parent_gives_emulation_away_when_cpuinfo_looks_arm() -> None:
    # A newer qemu-user fakes an Arm /proc/cpuinfo; the parent's executable is still the emulator.
    for exe in ("/usr/bin/qemu-aarch64-static", "/usr/libexec/qemu-binfmt/aarch64-binfmt-P"):
        found = detect_from("aarch64", RPI4_CPUINFO, parent_exe=exe)
        assert found is not None and found.host == "unknown"
    assert detect_from("aarch64", RPI4_CPUINFO, parent_exe="/usr/bin/bash") is None


def test_this_machine_is_detected_as_it_is() -> None:
    found = detect()
    if platform.machine() in ("x86_64", "AMD64"):
        assert found is None
    else:  # pragma: no cover - runs on the emulated board itself
        assert found is not None


# -- which core: MIDR_EL1, and the CPU model qemu runs ------------------------------------------


def test_core_names_come_from_midr() -> None:
    # the MIDRs of qemu 7.2's models of the board's three CPUs (NNSWEEP_ARM_SIM_CPU)
    assert core_name(0x410FD083) == "Cortex-A72 r0p3"
    assert core_name(0x414FD0B1) == "Cortex-A76 r4p1"
    assert core_name(0x414FD0C1) == "Neoverse-N1 r4p1"
    assert core_name(0x000F0000) == "Arm core (MIDR 0x000f0000)"  # qemu's max: implementer 0
    assert describe_cores([0x412FD050, 0x412FD050, 0x414FD0B0]) == "Cortex-A55 r2p0 + Cortex-A76 r4p0"


def test_cores_are_read_from_the_sys_tree_in_cpu_order(tmp_path: Path) -> None:
    for i, midr in ((0, "0x00000000412fd050"), (10, "0x00000000414fd0b0"), (2, "0x00000000412fd050")):
        reg = tmp_path / f"cpu{i}" / "regs" / "identification"
        reg.mkdir(parents=True)
        (reg / "midr_el1").write_text(midr + "\n")
    assert cores_from_sysfs(tmp_path) == [0x412FD050, 0x412FD050, 0x414FD0B0]
    assert cores_from_sysfs(tmp_path / "none") == []


def test_qemu_cpu_is_max_without_qemu_cpu_in_the_environment() -> None:
    assert qemu_cpu({"QEMU_CPU": "neoverse-n1"}) == "neoverse-n1"
    assert qemu_cpu({}) == "max (QEMU_CPU unset)"


def test_arm_sim_refuses_an_unknown_cpu_in_one_line(tmp_path: Path) -> None:
    env = dict(os.environ, NNSWEEP_ARM_SIM_DIR=str(tmp_path), NNSWEEP_ARM_SIM_CPU="cortex-a99")
    proc = subprocess.run(["bash", str(ARM_SIM), "status"], capture_output=True, text=True, env=env)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "cortex-a99" in proc.stderr and "cortex-a72" in proc.stderr


# -- memory: a board that cannot hold a runtime's measuring process does not offer it ----------


def test_runtimes_that_fit_drops_what_needs_more_memory_than_the_board_has() -> None:
    runtimes = {name: ("cpu",) for name in registry.names()}
    smallest = min(runtimes, key=measure_peak_mb)
    largest = max(runtimes, key=measure_peak_mb)
    board_mb = measure_peak_mb(smallest) + MEASURE_HEADROOM_MB
    kept, dropped = runtimes_that_fit(runtimes, board_mb)
    assert smallest in kept and largest in dropped
    assert dropped[largest] == measure_peak_mb(largest) + MEASURE_HEADROOM_MB
    assert set(kept) | set(dropped) == set(runtimes)
    assert runtimes_that_fit(runtimes, 0) == (runtimes, {})  # unknown memory: keep all
    assert runtimes_that_fit(runtimes, 1 << 20)[1] == {}


@pytest.mark.slow  # a real probe: imports every runtime
def test_a_small_board_says_which_runtimes_it_left_out(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from nnsweep.agents import LocalTransport, _probe
    from nnsweep.cli import main

    monkeypatch.setattr(_probe, "_memory_mb", lambda: 512)  # a 512 MB board: ExecuTorch and torch do not fit
    caps = _probe.probe("small-board")
    assert "onnxruntime" in caps.runtimes and caps.left_out == {
        rt: measure_peak_mb(rt) + MEASURE_HEADROOM_MB for rt in ("executorch", "torch")
    }
    assert Capabilities.from_dict(json.loads(json.dumps(caps.to_dict()))) == caps
    monkeypatch.setattr(LocalTransport, "probe", lambda self, device: caps)
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert f"executorch: left out, its measuring process needs {caps.left_out['executorch']} MB" in out
    assert "onnxruntime: backends cpu" in out


def test_measured_peaks_are_filled_in() -> None:
    peaks = {name: dict(registry.get(name).measure_peak_mb) for name in registry.names()}
    assert all(peak.get("", 0) > 0 and all(mb > 0 for mb in peak.values()) for peak in peaks.values()), peaks


def test_a_lite_board_counts_executorchs_torch_free_runner() -> None:
    # what the probe passes when ExecuTorch's probe recorded its torch-free runner
    lite = measure_peak_mb("executorch", "executorch-runner")
    assert 0 < lite < measure_peak_mb("executorch")
    board_mb = lite + MEASURE_HEADROOM_MB
    only = {"executorch": ("xnnpack",)}
    assert runtimes_that_fit(only, board_mb, {"executorch": "executorch-runner"}) == (only, {})
    assert runtimes_that_fit(only, board_mb)[1] == {"executorch": measure_peak_mb("executorch") + MEASURE_HEADROOM_MB}


# -- the agent labels an emulated device's replies --------------------------------------------


@dataclass
class _Fixed(Transport):
    """Stands at the transport seam: fixed capabilities, a canned reply."""

    emulated: bool
    name = "fixed"

    def probe(self, device: str) -> Capabilities:
        return Capabilities(device, "m", "aarch64", "cpu", 2, 4096, {"onnxruntime": ("cpu",)}, emulated=self.emulated)

    def measure(self, request: MeasureRequest) -> MeasureReply:
        return MeasureReply(timing=None, outputs=None)  # type: ignore[arg-type]  (the agent passes it on)


@pytest.mark.parametrize("emulated", [True, False])
def test_agent_sets_emulated_on_each_reply_from_the_capabilities(emulated: bool) -> None:
    agent = DeviceAgent("arm64-sim", _Fixed(emulated))
    reply = agent.measure(object())  # type: ignore[arg-type]
    assert reply.emulated is emulated


def test_tables_label_emulated_latencies() -> None:
    from nnsweep.core.config import DeploymentConfig
    from nnsweep.core.results import TrialRecord, TrialStatus
    from nnsweep.dashboards import _format, sections
    from nnsweep.report.text import render_table
    from nnsweep.spec import parse_spec

    spec = parse_spec({"name": "t", "model": "digits", "devices": ["arm64-sim"]})
    metrics = {"accuracy": 0.97, "latency_p50_ms": 1.9, "latency_p90_ms": 2.1}
    rec = TrialRecord("t", "arm64-sim", 1, DeploymentConfig("onnxruntime"), TrialStatus.OK, metrics, emulated=True)
    native = TrialRecord("t", "host", 1, DeploymentConfig("onnxruntime"), TrialStatus.OK, metrics)
    assert "(emulated)" in render_table([rec], spec.objectives)
    assert _format.latency_note(rec) == " (emulated)"
    assert ">emulated</span>" in sections.best_card("arm64-sim", rec, None, spec.objectives, link=None)
    assert "(emulated)" not in render_table([native], spec.objectives)
    assert "emulated" not in sections.best_card("host", native, None, spec.objectives, link=None)


def test_mlflow_trial_runs_carry_an_emulated_tag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow.tracking import MlflowClient

    from nnsweep.core.config import DeploymentConfig
    from nnsweep.core.results import TrialRecord, TrialStatus
    from nnsweep.tracking import MlflowTracker, absolute_sqlite_uri

    monkeypatch.chdir(tmp_path)
    t = MlflowTracker("sqlite:///mlflow.db", "exp", "sw")
    cfg = DeploymentConfig("onnxruntime")
    for number, (device, emulated) in enumerate((("arm64-sim", True), ("host", False))):
        t.open_device(device, {"arch": "aarch64" if emulated else "x86_64", "emulated": str(emulated).lower()})
        t.start_trial(device, number, cfg)
        t.finish_trial(
            TrialRecord("sw", device, number, cfg, TrialStatus.OK, {"latency_p50_ms": 1.0}, emulated=emulated)
        )
    client = MlflowClient(absolute_sqlite_uri("sqlite:///mlflow.db"))
    exp = client.get_experiment_by_name("exp")
    runs = client.search_runs([exp.experiment_id])
    tags = {r.data.tags["nnsweep.device"]: r.data.tags["emulated"] for r in runs if "nnsweep.trial" in r.data.tags}
    assert tags == {"arm64-sim": "true", "host": "false"}


def test_arm_sim_script_parses_and_says_how_to_use_it(tmp_path: Path) -> None:
    assert subprocess.run(["bash", "-n", str(ARM_SIM)]).returncode == 0
    proc = subprocess.run(["bash", str(ARM_SIM)], capture_output=True, text=True)
    assert proc.returncode == 2 and "build|start" in proc.stderr
    env = dict(os.environ, NNSWEEP_ARM_SIM_DIR=str(tmp_path))
    status = subprocess.run(["bash", str(ARM_SIM), "status"], capture_output=True, text=True, env=env, check=True)
    assert "(not built)" in status.stdout and "running: nothing" in status.stdout


# -- the emulated board, end to end -------------------------------------------------------------


def _can_emulate() -> str | None:
    if os.environ.get("NNSWEEP_ARM_SIM_TESTS") != "1":
        return "`make test` sets NNSWEEP_ARM_SIM_TESTS=1 where it can build the board (root, x86_64); 0 leaves it out"
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return "the emulated board is built on an x86_64 Linux host"
    if os.geteuid() != 0:
        return "building and entering the board's root needs root"
    for tool in ("apt-get", "chroot", "mount"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    return None


# The cores the board can emulate (NNSWEEP_ARM_SIM_CPU) as the probe names them from MIDR.
CORE_NAMES = {"cortex-a72": "Cortex-A72 r0p3", "cortex-a76": "Cortex-A76 r4p1", "neoverse-n1": "Neoverse-N1 r4p1"}


@dataclass
class Board:
    address: str
    env: dict[str, str]
    profile: str  # the agent installed in the root: "full" (every runtime) or "lite" (no torch, ExecuTorch)
    cpu: str  # the qemu CPU model it emulates (NNSWEEP_ARM_SIM_CPU)
    root: Path  # its root directory on this host


def _qemu_cpu_of_board_processes(root: Path) -> dict[str, str]:
    """QEMU_CPU in the environment of each process whose root directory is the board's root,
    by its command line (as the host sees it: qemu's own, the aarch64 program's after it)."""
    found: dict[str, str] = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if os.readlink(proc / "root") != str(root):
                continue
            environ = (proc / "environ").read_bytes().split(b"\0")
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # gone meanwhile
        values = [e.removeprefix(b"QEMU_CPU=").decode() for e in environ if e.startswith(b"QEMU_CPU=")]
        found[f"{proc.name} {cmdline}"] = values[0] if values else "(unset)"
    return found


def _installed_profile(env: dict[str, str]) -> str:
    status = subprocess.run(["bash", str(ARM_SIM), "status"], env=env, capture_output=True, text=True, check=True)
    line = next(line for line in status.stdout.splitlines() if line.startswith("agent: "))
    fields = line.split()
    return fields[2] if len(fields) > 2 else "full"


def _ray_ready(address: str, device: str, env: dict[str, str], timeout: float) -> None:
    probe = f"import ray; ray.init(address='{address}'); print('device:{device}' in ray.cluster_resources())"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
        if out.stdout.strip().endswith("True"):
            return
        time.sleep(2)
    raise TimeoutError(f"{device} did not join {address}")


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory, ray_token: Path) -> Iterator[Board]:
    from nnsweep.agents._node import ensure_token, head_command

    reason = _can_emulate()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("arm-sim")
    # the session's token: this test process is a Ray client of the board's cluster, and a
    # client reads its token once (the other clusters of the session use the same one)
    token = ray_token
    ensure_token(token)
    port = free_port()
    address = f"127.0.0.1:{port}"
    env = dict(
        os.environ,
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN=token.read_text(),
        # Debian bookworm's Python is 3.11.2; Ray matches patch versions unless told otherwise.
        RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL="minor",
        NNSWEEP_TOKEN_FILE=str(token),
        NNSWEEP_ARM_SIM_DASHBOARD_AGENT_PORT=str(free_port()),
        NNSWEEP_ARM_SIM_AGENT=os.environ.get("NNSWEEP_ARM_SIM_AGENT", "lite"),
    )
    # Builds the root on a new machine (lite agent: benchmarks/results/arm_sim.md has the minutes), or
    # reinstalls the agent when the checkout changed; `make test` has built it already.
    subprocess.run(["bash", str(ARM_SIM), "build"], env=env, check=True, timeout=3600)
    log = open(tmp / "head.log", "ab")  # noqa: SIM115 (kept open for the head's lifetime)
    ray_bin = str(Path(sys.executable).parent / "ray")
    head = subprocess.Popen(
        [ray_bin, *head_command(port, converters=1, block=True)[1:]],
        env=env,
        start_new_session=True,
        stdout=log,
        stderr=log,
    )
    try:
        _ray_ready(address, "host", env, timeout=120)
        subprocess.run(["bash", str(ARM_SIM), "start", address], env=env, check=True, timeout=600)
        _ray_ready(address, "arm64-sim", env, timeout=300)
        root = Path(env.get("NNSWEEP_ARM_SIM_DIR", "/var/cache/nnsweep-arm-sim")) / "root"
        yield Board(address, env, _installed_profile(env), env.get("NNSWEEP_ARM_SIM_CPU", "cortex-a72"), root)
    finally:
        with contextlib.suppress(Exception):
            import ray

            ray.shutdown()
        stop = subprocess.run(["bash", str(ARM_SIM), "stop"], env=env, capture_output=True, text=True, timeout=300)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGKILL)
        head.wait(timeout=60)
        log.close()
        assert stop.returncode == 0, stop.stderr
        assert (
            "running: nothing"
            in subprocess.run(["bash", str(ARM_SIM), "status"], capture_output=True, text=True, check=True).stdout
        )


@pytest.mark.emulation
@pytest.mark.integration
@pytest.mark.ray
@pytest.mark.slow
def test_devices_lists_the_host_and_the_emulated_board(board: Board) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "nnsweep.cli", "devices", "--address", board.address, "--json"],
        env=board.env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr
    found = {c["device"]: c for c in json.loads(proc.stdout)}
    host, arm = found["host"], found["arm64-sim"]
    assert (host["arch"], host["emulated"]) == ("x86_64", False)
    assert (arm["arch"], arm["emulated"]) == ("aarch64", True)
    # the core the board emulates, by the MIDR of its /sys tree, and the model qemu runs the probe as
    assert arm["cpu"] == f"{CORE_NAMES[board.cpu]} (qemu {board.cpu})"
    assert arm["versions"]["python"].startswith("3.11.")
    rts = arm["runtimes"]
    assert "cpu" in rts["onnxruntime"] and "xnnpack" in rts["litert"]
    # Arm NN's Neon kernels (CpuAcc) load on (emulated) Arm; x86 has CpuRef only
    assert rts["armnn"][:2] == ["CpuAcc", "CpuRef"]
    assert "CpuAcc" not in host["runtimes"].get("armnn", [])
    # the board offers what its agent installed: ExecuTorch on both (the lite agent's runs
    # torch-free, on the executorch wheel's own libraries of the host's release), torch on full
    assert rts["executorch"] == ["xnnpack", "portable"]
    assert arm["versions"]["executorch"] == host["versions"]["executorch"]
    if board.profile == "full":
        assert "torch" in rts
    else:
        assert "torch" not in rts and "executorch-runner" in arm["versions"]


def _sweep_here(board: Board, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, models_dir: Path) -> None:
    """Make this test process a client of the board's cluster, sweeping in ``tmp_path`` with
    the session's trained models."""
    for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL"):
        monkeypatch.setenv(key, board.env[key])
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "models").symlink_to(models_dir)


@pytest.mark.emulation
@pytest.mark.integration
@pytest.mark.ray
@pytest.mark.slow
def test_sweep_over_host_and_the_emulated_board(
    board: Board, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, models_dir: Path
) -> None:
    from nnsweep.core.results import TrialStatus
    from nnsweep.execution.ray_cluster import RayExecutor
    from nnsweep.spec import parse_spec
    from nnsweep.sweep.loop import Sweep, open_study
    from nnsweep.tracking import MlflowTracker

    _sweep_here(board, tmp_path, monkeypatch, models_dir)
    spec = parse_spec(
        {
            "name": "armsim",
            "model": "digits",
            "devices": ["host", "arm64-sim"],
            "space": {
                "runtime": ["onnxruntime", "armnn"],
                "quant": ["fp32", "static_int8"],
                "granularity": ["per_tensor"],
                "backends": {"armnn": ["CpuAcc", "CpuRef"]},
                "threads": [1],
            },
            "budget": {"trials": 3},
            # no fresh-process re-measurement at the end: tests/test_examples.py runs it over a Ray node,
            # and under qemu it would cost each device minutes of python start-ups
            "measure": {"warmup": 2, "iters": 30, "timeout_s": 900, "remeasure": 0},
        }
    )
    tracker = MlflowTracker("sqlite:///mlflow.db", "armsim", "armsim")
    executor = RayExecutor(address=board.address)
    try:
        results = Sweep(spec, executor, tracker, tmp_path / "cache").run()
    finally:
        executor.shutdown()
    by_device = {r.device: r for r in results}
    assert by_device["arm64-sim"].capabilities.emulated and by_device["arm64-sim"].capabilities.arch == "aarch64"
    for device, emulated in (("host", False), ("arm64-sim", True)):
        records = [r for r in by_device[device].records if r.status is not TrialStatus.INTERRUPTED]
        measured = [r for r in records if r.status is TrialStatus.OK]
        # the budget counts distinct measured configurations; repeats are told to the study for free
        assert len(measured) == 3, [(r.number, r.status, r.reason) for r in records]
        assert all(r.emulated is emulated for r in measured)
        # accuracy on the board is real: the aarch64 kernels' own outputs, evaluated
        assert all(r.metrics["accuracy"] > 0.9 for r in measured if r.config.quant.mode.value == "fp32")
        assert open_study(spec, device, create=False).study_name == f"armsim/{device}"
    # Arm NN's order for real: the board's own report puts digits' layers on CpuAcc (Neon);
    # the x86 host, with CpuRef only, puts them all there
    placed = {
        r.device: r.partitions["nodes_by_backend"]
        for d in by_device.values()
        for r in d.records
        if r.status is TrialStatus.OK and r.config.runtime == "armnn" and r.config.backends[:1] != ("CpuRef",)
    }
    assert placed["arm64-sim"].get("CpuAcc", 0) > 0 and not placed["arm64-sim"].get("CpuRef"), placed
    host_armnn = [r for r in by_device["host"].records if r.status is TrialStatus.OK and r.config.runtime == "armnn"]
    assert all(set(r.partitions["nodes_by_backend"]) == {"CpuRef"} for r in host_armnn)
    # the board's front is profiled by its agent on the board, labelled emulated; the host's here
    board_profiles = by_device["arm64-sim"].profiles
    taken = [p for p in board_profiles.values() if p.get("profile")]
    assert taken and all(p.get("profile_emulated") is True for p in taken), board_profiles
    assert not any(p.get("profile_emulated") for p in by_device["host"].profiles.values())
    runs = tracker.client.search_runs([tracker.experiment_id])
    assert sorted(r.info.run_name for r in runs if r.data.tags.get("nnsweep.kind") == "device") == [
        "arm64-sim",
        "host",
    ]
    trials = [r for r in runs if "nnsweep.trial" in r.data.tags]
    tags = {(r.data.tags["nnsweep.device"], r.data.tags.get("status"), r.data.tags.get("emulated")) for r in trials}
    assert ("arm64-sim", "ok", "true") in tags and ("host", "ok", "false") in tags
    assert not any(d == "host" and e == "true" for d, _, e in tags)


@pytest.mark.emulation
@pytest.mark.integration
@pytest.mark.ray
@pytest.mark.slow
def test_litert_xnnpack_int8_on_the_board_agrees_with_the_host(  # type: ignore[no-untyped-def]
    board: Board, digits, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under qemu's default ``max`` CPU, XNNPACK's int8 kernels gave 10 % top-1 agreement with
    x86 (docs/how-to/emulated-board.md); with a named CPU in every process of the board they agree. The
    measurement goes the way a sweep's does: the board's agent (a Ray worker) forks a
    measuring process, so QEMU_CPU has to survive ``ray start`` and both forks."""
    from nnsweep.artifacts import deploy
    from nnsweep.artifacts.cache import ArtifactCache
    from nnsweep.bench import MeasureSettings, evaluate
    from nnsweep.core.config import DeploymentConfig
    from nnsweep.execution.ray_cluster import RayExecutor

    for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL"):
        monkeypatch.setenv(key, board.env[key])
    config = DeploymentConfig.from_dict(
        {"runtime": "litert", "backends": ["xnnpack"], "quant": {"mode": "static_int8", "granularity": "per_channel"}}
    )
    artifact, _ = deploy.convert(digits, config, ArtifactCache(tmp_path / "cache"))
    inputs = digits.dataset.evaluation.inputs  # fixed: the evaluation split
    settings = MeasureSettings(warmup=1, iters=3)
    _, host = deploy.run_artifact(artifact, inputs, settings)
    request = MeasureRequest(
        runtime="litert",
        artifact_name=artifact.path.name,
        artifact_bytes=artifact.path.read_bytes(),
        io=artifact.io,
        threads=1,
        backends=artifact.config.backends,
        inputs=inputs,
        settings=settings,
    )
    executor = RayExecutor(address=board.address)
    try:
        executor.probe(["arm64-sim"])
        reply = executor.measure("arm64-sim", request).result(timeout=900)
        qemu_cpus = _qemu_cpu_of_board_processes(board.root)  # the agent's worker among them
    finally:
        executor.shutdown()
    assert set(qemu_cpus.values()) == {board.cpu}, qemu_cpus
    # the raylet and the agent's Ray worker among them (the measuring process has exited;
    # its outputs below show which CPU it ran on)
    assert any("/raylet " in cmd for cmd in qemu_cpus) and any("default_worker.py" in cmd for cmd in qemu_cpus)
    assert reply.outputs is not None and reply.emulated
    fidelity = evaluate(reply.outputs, host, None).fidelity
    sqnr = "inf (bit-exact)" if fidelity.max_abs_err == 0 else f"{fidelity.sqnr_db:.1f} dB"
    with capsys.disabled():
        sys.stdout.write(
            f"\n  {config.label()} on {len(inputs)} inputs, board ({board.cpu}) vs host: "
            f"top-1 agreement {fidelity.top1_agreement:.4f}, SQNR {sqnr}\n"
        )
    assert fidelity.top1_agreement >= 0.99, fidelity


@pytest.mark.emulation
@pytest.mark.integration
@pytest.mark.ray
@pytest.mark.slow
def test_executorch_on_the_board_agrees_with_the_host(
    board: Board, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, models_dir: Path
) -> None:
    """The same .pte files (fp32 XNNPACK, static int8 XNNPACK, portable only) measured on the
    host and on the board (the lite agent: ExecuTorch without PyTorch) give the same top-1
    on the same fixed evaluation inputs, in a measuring process far smaller than torch's."""
    from nnsweep.core.results import TrialStatus
    from nnsweep.execution.ray_cluster import RayExecutor
    from nnsweep.spec import parse_spec
    from nnsweep.sweep.loop import Sweep
    from nnsweep.tracking import MlflowTracker

    _sweep_here(board, tmp_path, monkeypatch, models_dir)
    spec = parse_spec(
        {
            "name": "armsim-et",
            "model": "digits",
            "devices": ["host", "arm64-sim"],
            "space": {
                "runtime": ["executorch"],
                "quant": ["fp32", "static_int8"],
                "backends": {"executorch": ["xnnpack", "portable"]},
                "threads": [1],
            },
            "budget": {"trials": 3},
            "measure": {"warmup": 2, "iters": 20, "timeout_s": 900, "remeasure": 0},
        }
    )
    executor = RayExecutor(address=board.address)
    try:
        results = Sweep(
            spec, executor, MlflowTracker("sqlite:///mlflow.db", "armsim-et", "armsim-et"), tmp_path / "cache"
        ).run()
    finally:
        executor.shutdown()
    measured = {
        (r.device, r.config.quant.mode.value, r.config.backends): r
        for d in results
        for r in d.records
        if r.status is TrialStatus.OK
    }
    board_keys = [k for k in measured if k[0] == "arm64-sim"]
    assert board_keys, [(r.device, r.status, r.reason) for d in results for r in d.records]
    for key in board_keys:
        on_board, on_host = measured[key], measured.get(("host", *key[1:]))
        assert on_board.emulated
        if on_host is not None:  # the same artifact: the same predictions on the same inputs
            assert on_board.metrics["accuracy"] == pytest.approx(on_host.metrics["accuracy"], abs=2 / 540)
            assert on_board.metrics["top1_agreement"] == pytest.approx(on_host.metrics["top1_agreement"], abs=2 / 540)
        assert on_board.metrics["top1_agreement"] > 0.98
        if board.profile == "lite":  # torch-free: no torch in the measuring process
            assert on_board.metrics["peak_rss_mb"] < 300, on_board.metrics["peak_rss_mb"]
