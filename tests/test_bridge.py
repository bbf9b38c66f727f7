"""The bridge agent: real command lines and parsers, a fake `adb` standing in for the phone."""

from __future__ import annotations

import math
import shlex
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nnsweep.agents import AdbTransport, MeasureRequest
from nnsweep.bench import MeasureSettings
from nnsweep.convert import IOSpec
from nnsweep.core.errors import AgentLost, BenchmarkError
from nnsweep.runtimes.litert.device_tool import parse_benchmark_model
from nnsweep.runtimes.torch.device_tool import parse_speed_benchmark_torch

FAKE_ADB = Path(__file__).parent / "fakes" / "adb"

# The tools' outputs as they print them, verbatim.
SPEED_BENCHMARK_TORCH = """Starting benchmark.

Running warmup runs.

Main runs.

Main run finished. Microseconds per iter: 36012.7. Iters per second: 27.768
"""
BENCHMARK_MODEL = """STARTING!
The input model file size (MB): 4.27635
Initialized session in 3.84ms.
Running benchmark for at least 1 iterations and at least 0.5 seconds but terminate if exceeding 150 seconds.
count=1 curr=6036807
count 1 curr 6036807
Running benchmark for at least 50 iterations and at least 1 seconds but terminate if exceeding 150 seconds.
count 361 first 2795 curr 2704 min 2653 max 2849 avg 2693.12 std 21
Inference timings in us: Init: 3840, First inference: 6036807, Warmup (avg): 6.03681e+06, Inference (avg): 2693.12
Note: as the benchmark tool itself affects memory footprint, the following is only APPROXIMATE to the actual \
memory footprint of the model at runtime. Take the information at your discretion.
Peak memory footprint (MB): init 2.75391 overall 29.0273
"""


def test_speed_benchmark_torch_output_is_parsed() -> None:
    assert parse_speed_benchmark_torch(SPEED_BENCHMARK_TORCH).mean_us == 36012.7


def test_benchmark_model_output_is_parsed() -> None:
    run = parse_benchmark_model(BENCHMARK_MODEL)
    assert run.mean_us == 2693.12 and run.init_us == 3840 and run.first_us == 6036807
    assert run.warmup_mean_us == pytest.approx(6.03681e6)
    assert (run.count, run.min_us, run.max_us, run.std_us) == (361, 2653, 2849, 21)
    assert run.peak_memory_mb == pytest.approx(29.0273)


@pytest.mark.parametrize("parse", [parse_speed_benchmark_torch, parse_benchmark_model])
def test_a_failed_tool_run_is_a_benchmark_error(parse) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(BenchmarkError, match="printed no result"):
        parse("terminate called after throwing an instance of 'c10::Error'\n  what():  open file failed")


@pytest.fixture
def phone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake phone's storage; its adb log is phone/adb.log."""
    root = tmp_path / "phone"
    root.mkdir()
    monkeypatch.setenv("FAKE_ADB_ROOT", str(root))
    monkeypatch.setenv("FAKE_ADB_LOG", str(root / "adb.log"))
    monkeypatch.setenv("FAKE_ADB_SERIAL", "R58N123")
    return root


def _tool(tmp_path: Path) -> Path:
    binary = tmp_path / "speed_benchmark_torch"
    binary.write_bytes(b"\x7fELF (stands in for the aarch64 binary)")
    return binary


def _transport(tmp_path: Path, serial: str = "R58N123") -> AdbTransport:
    return AdbTransport(serial=serial, adb=str(FAKE_ADB), push_tools={"torch": _tool(tmp_path)}, repeats=4)


def _commands(phone: Path) -> list[list[str]]:
    return [shlex.split(line) for line in (phone / "adb.log").read_text().splitlines()]


def test_probe_reads_the_phone_and_pushes_the_tool(phone: Path, tmp_path: Path) -> None:
    caps = _transport(tmp_path).probe("pixel")
    assert (caps.arch, caps.cores, caps.memory_mb) == ("aarch64", 8, 7680)
    assert caps.cpu == "Qualcomm Technologies, Inc SM8250"
    assert caps.int8_flags == ("asimddp",)  # its Cortex-A77/A55 have the dot product, not i8mm
    assert caps.runtimes == {"torch": ("nnapi", "qnnpack")}
    assert caps.transport == "adb" and caps.machine == "adb:R58N123"
    assert (phone / "data/local/tmp/speed_benchmark_torch").exists()
    pushed = ["-s", "R58N123", "push", str(tmp_path / "speed_benchmark_torch"), "/data/local/tmp/speed_benchmark_torch"]
    assert pushed in _commands(phone)


def test_measure_pushes_runs_the_tools_command_and_cleans_up(phone: Path, tmp_path: Path) -> None:
    transport = _transport(tmp_path)
    request = MeasureRequest(
        runtime="torch",
        artifact_name="model.pt",
        artifact_bytes=b"torchscript bytes",
        io=IOSpec(),
        threads=2,
        backends=("qnnpack",),
        inputs=np.zeros((3, 1, 8, 8), np.float32),
        settings=MeasureSettings(warmup=5, iters=200),
    )
    reply = transport.measure(request)
    assert reply.outputs is None  # the tool only times: outputs come from a host run
    assert reply.timing.samples_ms == (18.0063,) * 4  # the fake prints 18006.3 us per iteration at 2 threads
    assert math.isclose(reply.timing.latency.p50, 18.0063)
    assert reply.source == "adb: mean of 50 runs x 4"
    runs = [c for c in _commands(phone) if c[2] == "shell" and c[3].startswith("/data/local/tmp/speed_benchmark_torch")]
    assert shlex.split(runs[0][3]) == [
        "/data/local/tmp/speed_benchmark_torch",
        "--pthreadpool_size=2",
        "--model=/data/local/tmp/nnsweep/model.pt",
        "--use_bundled_input=0",
        "--warmup=5",
        "--iter=50",
    ]
    assert "--warmup=0" in runs[1][3]  # the device is warm after the first run
    assert not (phone / "data/local/tmp/nnsweep/model.pt").exists()


def test_a_missing_phone_is_an_agent_loss_not_a_failed_trial(phone: Path, tmp_path: Path) -> None:
    with pytest.raises(AgentLost, match="unreachable"):
        _transport(tmp_path, serial="GONE").probe("pixel")


def test_a_runtime_without_a_tool_fails_the_trial(phone: Path, tmp_path: Path) -> None:
    request = MeasureRequest("executorch", "m.pte", b"x", IOSpec(), 1, (), np.zeros((1, 1)), MeasureSettings())
    with pytest.raises(BenchmarkError, match="no benchmark tool for executorch"):
        _transport(tmp_path).measure(request)


def _phone_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, models_dir: Path, **sweep: Any) -> tuple[Any, Any]:
    """A 2-trial sweep of digits on the fake phone (torch, fp32 and static int8), with the
    local executor: its results and its MLflow tracker."""
    from nnsweep.agents import bridge_transport
    from nnsweep.execution import LocalExecutor
    from nnsweep.spec import parse_spec
    from nnsweep.sweep.loop import Sweep
    from nnsweep.tracking import MlflowTracker

    monkeypatch.chdir(tmp_path)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "models").symlink_to(models_dir)
    (tmp_path / "speed_benchmark_torch").write_bytes(b"\x7fELF")
    spec = parse_spec(
        {
            "name": "phone",
            "model": "digits",
            "devices": ["pixel"],
            "space": {"runtime": ["torch"], "quant": ["fp32", "static_int8"], "threads": [1]},
            "budget": {"trials": 2},
            "bridges": {
                "pixel": {
                    "transport": "adb",
                    "serial": "R58N123",
                    "executable": str(FAKE_ADB),
                    "push_tools": {"torch": "speed_benchmark_torch"},
                    "repeats": 2,
                }
            },
        },
        source=tmp_path / "spec.yaml",
    )
    tracker = MlflowTracker("sqlite:///mlflow.db", "phone", "phone")
    executor = LocalExecutor({"pixel": bridge_transport(spec.bridges["pixel"])})
    return Sweep(spec, executor, tracker, tmp_path / "cache", **sweep).run(), tracker  # type: ignore[arg-type]


@pytest.mark.integration
def test_sweep_trial_through_the_adb_bridge_is_logged_with_the_parsed_latency(
    phone: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, models_dir: Path
) -> None:
    from nnsweep.core.results import TrialStatus

    results, tracker = _phone_sweep(tmp_path, monkeypatch, models_dir)
    records = results[0].records
    assert [r.status for r in records] == [TrialStatus.OK, TrialStatus.OK]
    assert not results[0].lost
    assert all(r.metrics["latency_p50_ms"] == pytest.approx(36.0127) for r in records)  # parsed from the tool
    assert all(r.metrics["accuracy"] > 0.95 for r in records)  # outputs from a host run of the same artifact
    runs = tracker.client.search_runs([tracker.experiment_id], "tags.`nnsweep.kind` = 'trial'")
    assert len(runs) == 2
    for run in runs:
        assert run.data.metrics["latency_p50_ms"] == pytest.approx(36.0127)
        assert run.data.tags["latency_source"] == "adb: mean of 100 runs x 2"
        assert "host run of the same artifact" in run.data.tags["accuracy_source"]
    assert any(c[2] == "push" and c[3].endswith("model.pt") for c in _commands(phone))


@pytest.mark.integration
def test_a_phone_unplugged_for_good_ends_the_sweep_as_lost_not_finished(
    phone: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, models_dir: Path
) -> None:
    """The cable pulled after the first benchmark run and never put back: once the lost
    device's wait is over the sweep ends, its result says it was lost (`nnsweep run` exits 1
    saying so; it exited 0 as if the budget had been run) and its MLflow run is KILLED, as an
    interrupted one, to be resumed; what was measured before is kept."""
    from nnsweep.core.results import TrialStatus

    monkeypatch.setenv("FAKE_ADB_UNPLUG_AFTER_RUNS", "1")
    results, tracker = _phone_sweep(tmp_path, monkeypatch, models_dir, lost_timeout_s=3.0)
    assert (phone / "unplugged").exists()
    assert results[0].lost
    assert all(r.status is not TrialStatus.OK for r in results[0].records)  # its one run was of 2 (repeats: 2)
    (device_run,) = tracker.client.search_runs([tracker.experiment_id], "tags.`nnsweep.kind` = 'device'")
    assert device_run.info.status == "KILLED"


@pytest.mark.integration
def test_a_phone_plugged_back_in_is_measured_again_in_the_same_sweep(
    phone: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, models_dir: Path
) -> None:
    """The cable pulled after the first benchmark run and put back 3 s later: the sweep
    probes the phone again and runs the rest of its budget (with the local executor it
    stayed lost for the rest of the run and the sweep ended without it)."""
    from nnsweep.core.results import TrialStatus

    def plug_back_in() -> None:
        while not (phone / "unplugged").exists():
            time.sleep(0.1)
        time.sleep(3)
        (phone / "unplugged").unlink()

    monkeypatch.setenv("FAKE_ADB_UNPLUG_AFTER_RUNS", "1")
    replug = threading.Thread(target=plug_back_in, daemon=True)
    replug.start()
    results, _ = _phone_sweep(tmp_path, monkeypatch, models_dir, lost_timeout_s=60.0)
    assert not replug.is_alive() and not results[0].lost
    assert [r.status for r in results[0].records] == [TrialStatus.OK, TrialStatus.OK]


def test_spec_values_reach_ssh_and_adb_as_arguments_never_options(tmp_path: Path) -> None:
    from nnsweep.agents import SshTransport
    from nnsweep.core.errors import SpecError

    with pytest.raises(SpecError, match="option"):
        SshTransport("-oProxyCommand=touch pwned", {"torch": "/tmp/t"})
    with pytest.raises(SpecError, match="option"):
        AdbTransport(serial="-H evil")
    ssh = SshTransport("pi@board", {"torch": "/tmp/t"})
    cmd = ssh.command(["ls", "-l"])
    assert cmd[cmd.index("--") + 1] == "pi@board"
    push = ssh.push_command(tmp_path / "m.pt", "/tmp/m.pt")
    assert push[push.index("--") + 1 :] == [str(tmp_path / "m.pt"), "pi@board:/tmp/m.pt"]


@pytest.mark.parametrize(
    ("host", "refused"),
    [
        ("pi@rpi4.local:2222", True),  # ssh: "Could not resolve hostname rpi4.local:2222"
        ("rpi4:22", True),
        ("ssh://pi@rpi4.local:2222", True),  # scp would get ssh://pi@rpi4.local:2222:/tmp/nnsweep/...
        ("ssh://pi@rpi4.local", True),
        ("pi@rpi4.local", False),
        ("rpi4", False),
        ("pi@192.168.1.20", False),
        ("pi@fe80::1", False),  # an IPv6 address, not a port
        ("pi@[fe80::1]", True),  # ssh looked up "[fe80::1]"
    ],
)
def test_an_ssh_host_with_a_port_is_refused_pointing_to_ssh_config(host: str, refused: bool) -> None:
    from nnsweep.core.errors import SpecError
    from nnsweep.spec import parse_spec

    raw = {
        "name": "b",
        "model": "digits",
        "devices": ["rpi4"],
        "space": {"runtime": ["litert"]},
        "bridges": {"rpi4": {"transport": "ssh", "host": host, "tools": {"litert": "/home/pi/benchmark_model"}}},
    }
    if not refused:
        assert parse_spec(raw).bridges["rpi4"].target == host
        return
    with pytest.raises(SpecError) as error:
        parse_spec(raw)
    assert str(error.value).startswith(f"bridges.rpi4.host: {host!r}")
    assert "~/.ssh/config" in str(error.value) or "without brackets" in str(error.value)


@pytest.mark.skipif(__import__("shutil").which("scp") is None, reason="needs the OpenSSH client")
def test_real_scp_reaches_an_ipv6_board_at_its_address(tmp_path: Path) -> None:
    """scp split `pi@fe80::1:/tmp/m.pt` at its first colon and connected to host `fe80`.
    The host scp resolves is what a ProxyCommand sees as %h; nothing is connected to."""
    import subprocess

    from nnsweep.agents import SshTransport

    (tmp_path / "m.pt").write_bytes(b"model")
    push = SshTransport("pi@fe80::1", {"torch": "/tmp/t"}).push_command(tmp_path / "m.pt", "/tmp/m.pt")
    shows_host = "-oProxyCommand=sh -c 'echo HOST=%h >&2; exit 1'"
    cmd = [*push[: push.index("--")], shows_host, *push[push.index("--") :]]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert "HOST=fe80::1\n" in proc.stderr, proc.stderr


@pytest.mark.skipif(__import__("shutil").which("ssh") is None, reason="needs the OpenSSH client")
def test_real_ssh_takes_an_option_like_host_after_the_separator_as_a_host(tmp_path: Path) -> None:
    """What `--` buys: even past the checks, ssh reads `-oProxyCommand=...` as a host name."""
    import subprocess

    from nnsweep.agents import SshTransport

    marker = tmp_path / "pwned"
    ssh = SshTransport("pi@board", {"torch": "/tmp/t"}, timeout_s=20)
    argv = ssh.command(["true"])
    argv[argv.index("--") + 1] = f"-oProxyCommand=touch {marker}"
    subprocess.run(argv, capture_output=True, timeout=20, check=False)
    assert not marker.exists()


@pytest.mark.skipif(__import__("shutil").which("ssh") is None, reason="needs the OpenSSH client")
def test_a_board_that_accepts_but_never_answers_is_unreachable_within_the_connect_timeout(tmp_path: Path) -> None:
    """A board that is off, or a firewall that drops packets, kept each ssh command waiting for
    the system's TCP timeout (the probe of `board_ssh.yaml` at an address that drops packets:
    minutes before its first command failed). Here the real ssh client meets a port that
    accepts and says nothing, ssh's banner exchange, which its ConnectTimeout covers too."""
    import socket
    import threading
    import time

    from nnsweep.agents import SshTransport
    from nnsweep.core.errors import AgentLost

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    held: list[socket.socket] = []
    threading.Thread(target=lambda: held.append(server.accept()[0]), daemon=True).start()
    ssh = tmp_path / "ssh"  # the real client, at the silent port
    ssh.write_text(f'#!/bin/sh\nexec ssh -F /dev/null -p {port} "$@"\n')
    ssh.chmod(0o755)
    board = SshTransport("pi@127.0.0.1", {"litert": "/tmp/benchmark_model"}, ssh=str(ssh), timeout_s=600)
    board.connect_timeout_s = 2
    start = time.monotonic()
    with pytest.raises(AgentLost, match=r"device unreachable during `uname -m`: .*timed out during banner exchange"):
        board.probe("rpi4")
    assert time.monotonic() - start < 30
    server.close()
    for conn in held:
        conn.close()
