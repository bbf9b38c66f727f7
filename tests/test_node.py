"""Starting Ray nodes: command lines, the token file's permissions, a real head that refuses strangers,
and the private token of a local cluster."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fakes.network import free_port
from hypothesis import given, settings
from hypothesis import strategies as st

from nnsweep.agents._node import (
    RAY_ENV,
    check_address,
    check_head_answers,
    check_token_file,
    default_token_path,
    ensure_token,
    head_command,
    join_command,
    local_token,
    ray_env,
    ray_temp_dir,
    start_failure,
)
from nnsweep.core.errors import SpecError


def test_a_missing_token_is_generated_0600_in_a_0700_folder(tmp_path: Path) -> None:
    token = tmp_path / "home" / ".ray" / "auth_token"
    assert ensure_token(token) is True
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    assert stat.S_IMODE(token.parent.stat().st_mode) == 0o700
    text = token.read_text()
    assert len(text) == 64 and int(text, 16) >= 0  # 256 bits, hex, as Ray's own generator
    assert ensure_token(token) is False and token.read_text() == text  # never replaced
    assert os.listdir(token.parent) == ["auth_token"]  # the whole-then-linked write leaves nothing behind
    check_token_file(token, option="--token-file")


def test_a_token_others_can_read_is_refused_unless_allowed(tmp_path: Path) -> None:
    token = tmp_path / "auth_token"
    token.write_text("abc123\n")
    token.chmod(0o644)
    with pytest.raises(SpecError, match=r"mode 0644.*chmod 600"):
        check_token_file(token, option="--token-file")
    check_token_file(token, option="--token-file", allow_readable=True)
    token.chmod(0o600)
    check_token_file(token, option="--token-file")


@pytest.mark.parametrize("content", [b"", b"two words", b"\xff\xfe"])
def test_a_file_without_a_token_is_refused(tmp_path: Path, content: bytes) -> None:
    token = tmp_path / "auth_token"
    token.write_bytes(content)
    token.chmod(0o600)
    with pytest.raises(SpecError, match="does not hold a token"):
        check_token_file(token, option="--token-file")
    with pytest.raises(SpecError, match="does not exist"):
        check_token_file(tmp_path / "none", option="--token-file")


def test_token_path_and_environment() -> None:
    home = Path("/home/u")
    assert default_token_path({}, home) == home / ".ray" / "auth_token"
    assert default_token_path({"RAY_AUTH_TOKEN_PATH": "/etc/t"}, home) == Path("/etc/t")
    env = ray_env({"PATH": "/bin"}, Path("/t"))
    assert env["RAY_AUTH_MODE"] == "token" and env["RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL"] == "minor"
    assert env["RAY_AUTH_TOKEN_PATH"] == "/t" and env["PATH"] == "/bin"
    assert set(RAY_ENV) <= set(ray_env({}, None))


def test_a_local_cluster_gets_a_private_token_where_ray_looks(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    token = local_token({}, home)
    assert token == home / ".ray" / "auth_token"
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    assert stat.S_IMODE(token.parent.stat().st_mode) == 0o700
    assert local_token({"RAY_AUTH_MODE": "token"}, home) == token  # kept, not replaced
    given = tmp_path / "keys" / "ray_token"
    assert local_token({"RAY_AUTH_TOKEN_PATH": str(given)}, home) == given and given.exists()


def test_a_local_cluster_without_a_token_file_writes_none(tmp_path: Path) -> None:
    assert local_token({"RAY_AUTH_MODE": "disabled"}, tmp_path) is None  # the user turned it off
    assert local_token({"RAY_AUTH_TOKEN": "f" * 64}, tmp_path) is None  # Ray reads the value, no file
    assert not (tmp_path / ".ray").exists()


def test_a_local_cluster_refuses_a_token_others_can_read(tmp_path: Path) -> None:
    (tmp_path / ".ray").mkdir()
    token = tmp_path / ".ray" / "auth_token"
    token.write_text("f" * 64)
    token.chmod(0o644)  # as Ray 2.60's own ray.init() leaves it
    with pytest.raises(SpecError, match=r"mode 0644.*chmod 600.*RAY_AUTH_TOKEN_PATH") as caught:
        local_token({}, tmp_path)
    assert caught.value.field == "token" and "f" * 64 not in str(caught.value)
    (tmp_path / "file").write_text("")
    with pytest.raises(SpecError, match=r"cannot write Ray's token file.*RAY_AUTH_TOKEN_PATH"):
        local_token({"RAY_AUTH_TOKEN_PATH": str(tmp_path / "file" / "auth_token")}, tmp_path)


def test_command_lines_refuse_option_like_values() -> None:
    with pytest.raises(SpecError, match="--device"):
        head_command(6379, 1, host_device="host\n")
    with pytest.raises(SpecError, match="--address"):
        join_command("-oops:6379", "board")
    cmd = head_command(6379, 1, dashboard_agent_port=52000)
    assert cmd[cmd.index("--dashboard-agent-listen-port") + 1] == "52000"


def _ray_ports(cmd: list[str], *, head: bool) -> dict[str, set[int]]:
    """The ports ``cmd``'s ``ray start`` takes for its own components (Ray's defaults
    where the command does not move them), by component."""

    def given(option: str, default: int) -> int:
        return int(cmd[cmd.index(option) + 1]) if option in cmd else default

    ports = {
        "workers": set(range(given("--min-worker-port", 10002), given("--max-worker-port", 19999) + 1)),
        "dashboard agent": {given("--dashboard-agent-listen-port", 52365)},
    }
    if head:
        ports["dashboard"] = {given("--dashboard-port", 8265)}
    return ports


@settings(max_examples=400, deadline=None)
@given(
    port=st.one_of(st.integers(1, 65535), st.sampled_from([8265, 10002, 12345, 19999, 52365])),
    agent_port=st.one_of(st.none(), st.integers(1, 65535), st.sampled_from([8265, 15000, 20000, 52365])),
)
def test_no_port_a_user_gives_is_one_ray_takes_for_itself(port: int, agent_port: int | None) -> None:
    """`ray start --head --port 12345` (in Ray's workers' 10002-19999), 8265 or 52365, and a
    `--dashboard-agent-port` in the workers' range, failed with Ray's ValueError traceback
    ("... is trying to use a port number ... that is used by other components")."""
    if agent_port == port:
        with pytest.raises(SpecError, match="--dashboard-agent-port: must differ from --port"):
            head_command(port, 1, dashboard_agent_port=agent_port)
        return
    chosen = {port} if agent_port is None else {port, agent_port}
    for component, taken in _ray_ports(head_command(port, 1, dashboard_agent_port=agent_port), head=True).items():
        if component != "dashboard agent" or agent_port is None:
            assert not taken & chosen, (component, sorted(taken & chosen))
    if agent_port is not None:
        taken = _ray_ports(join_command("127.0.0.1:6379", "board", dashboard_agent_port=agent_port), head=False)
        assert agent_port not in taken["workers"]


@pytest.mark.parametrize(
    ("address", "said"),
    [
        ("nonsense", "is not HOST:PORT"),
        (":6379", "is not HOST:PORT"),
        ("head:", "is not HOST:PORT"),
        ("head:63x79", "is not HOST:PORT"),
        ("head:0", "out of range"),
        ("head:99999", "out of range"),
    ],
)
def test_a_malformed_head_address_is_refused_naming_the_option(address: str, said: str) -> None:
    with pytest.raises(SpecError, match=said) as caught:
        check_address(address)
    assert caught.value.field == "--address"
    assert check_address("10.0.0.1:6379") == ("10.0.0.1", 6379) and check_address("[::1]:6379") == ("::1", 6379)


def test_an_address_where_nothing_listens_is_refused_at_once_where_ray_would_wait(tmp_path: Path) -> None:
    """Ray's client waits for a head without end: `nnsweep devices --address` and `run
    --address` hung (over 60 s) on a port with no head, `agent join` printed a timeout
    every 30 s. Now each exits 2 with one line, in well under a second."""
    address = f"127.0.0.1:{free_port()}"  # closed again: nothing listens there
    with pytest.raises(SpecError, match=r"nothing accepts connections at .*Connection refused"):
        check_head_answers(address, option="address")
    env = {**os.environ, "HOME": str(tmp_path), "RAY_AUTH_TOKEN": "0" * 32}  # no token file to check
    for command in (["devices"], ["agent", "join", "--device", "rpi5"]):
        start = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "nnsweep", *command, "--address", address],
            capture_output=True, text=True, env=env, timeout=60,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().splitlines() == [
            f"nnsweep: error: --address: nothing accepts connections at {address} (Connection refused): "
            "start the head there (nnsweep agent head), or check the address and that its port is open"
        ]
        assert time.monotonic() - start < 30


def _answering(reply: bytes | None) -> tuple[str, threading.Thread]:
    """A port that accepts one connection, reads what the client sends first and answers
    ``reply`` (empty: closes the connection; ``None``: says nothing until the client gives
    up), as ``HOST:PORT``."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def serve() -> None:
        with server, server.accept()[0] as conn:
            conn.settimeout(10)
            conn.recv(64)
            if reply == b"":
                return  # closes at once
            if reply is not None:
                conn.sendall(reply)
            with contextlib.suppress(OSError):
                conn.recv(64)  # until the client closes

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return f"127.0.0.1:{server.getsockname()[1]}", thread


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (b"HTTP/1.1 400 Bad Request\r\n\r\n", r"is not a Ray head \(it answered b'HTTP/1.1 '\)"),  # the dashboard
        (b"SSH-2.0-OpenSSH_9.2\r\n", r"is not a Ray head \(it answered b'SSH-2.0-O'\)"),
        (b"", r"is not a Ray head \(it closed the connection\)"),
        (None, r"is not a Ray head \(it accepted the connection but said nothing in 0.5 s\)"),
    ],
)
def test_a_port_that_accepts_but_is_not_a_ray_head_is_refused(reply: bytes | None, said: str) -> None:
    """Ray's client waited without end at a port that accepts but is not a head's (`nnsweep
    devices --address HOST:8265`, the dashboard's port, hung past 60 s): a head's GCS is a
    gRPC server, which answers HTTP/2's preface with a SETTINGS frame; anything else is refused."""
    address, server = _answering(reply)
    with pytest.raises(SpecError, match=said) as caught:
        check_head_answers(address, timeout_s=0.5)
    assert caught.value.field == "--address" and "the dashboard's (8265)" in str(caught.value)
    server.join(timeout=15)
    settings = bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])  # an empty SETTINGS frame, as a gRPC server sends first
    address, server = _answering(settings)
    check_head_answers(address, timeout_s=0.5)
    server.join(timeout=15)


def test_a_machine_joins_to_convert_with_a_cpu_per_slot() -> None:
    board = join_command("10.0.0.1:6379", "rpi5")
    assert board[board.index("--num-cpus") + 1] == "0"
    assert json.loads(board[board.index("--resources") + 1]) == {"device:rpi5": 1}
    builder = join_command("10.0.0.1:6379", None, converters=4, machine="build1")
    assert builder[builder.index("--num-cpus") + 1] == "4"
    assert json.loads(builder[builder.index("--resources") + 1]) == {"nnsweep-converter": 4}
    assert "nnsweep-machine=build1" in builder[builder.index("--labels") + 1]
    with pytest.raises(SpecError, match="--device"):  # neither measures nor converts
        join_command("10.0.0.1:6379", None)


@pytest.fixture
def ray_tmp() -> Iterator[str]:
    """A private folder for Ray's session files and its "current cluster" pointer, removed
    afterwards; short, under /tmp: Unix socket names are limited."""
    path = tempfile.mkdtemp(prefix="nr", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _session_pids(sid: int) -> list[int]:
    """The live processes of session ``sid`` (zombies wait for a reaper and run nothing)."""
    out = subprocess.run(["ps", "-o", "pid=,stat=", "-s", str(sid)], capture_output=True, text=True, check=False).stdout
    return [int(line.split()[0]) for line in out.splitlines() if line.split() and "Z" not in line.split()[1]]


def _connect(address: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    probe = (
        "import ray\n"
        "try:\n"
        f"    ray.init(address={address!r}, logging_level='ERROR')\n"
        "    print('CONNECTED', ray.cluster_resources().get('device:host'))\n"
        "except Exception as exc:\n"
        "    print('REFUSED', type(exc).__name__)\n"
    )
    return subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=180)


@pytest.mark.ray
@pytest.mark.integration
@pytest.mark.slow
def test_agent_head_on_a_fresh_machine_uses_a_private_token_and_refuses_strangers(
    tmp_path: Path, ray_tmp: str, free_port_in_rays_worker_range: Callable[[], int]
) -> None:
    """`nnsweep agent head` with no ~/.ray: a 0600 token appears, a client without it is refused."""
    home, stranger = tmp_path / "home", tmp_path / "stranger"
    home.mkdir()
    stranger.mkdir()
    # Ray's session files and its "current cluster" pointer go to a private temp dir, so
    # nothing of another cluster on this machine is touched.
    base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    base["RAY_TMPDIR"] = ray_tmp
    port = free_port_in_rays_worker_range()  # where Ray's own `ray start --head --port` fails
    address = f"127.0.0.1:{port}"
    log = (tmp_path / "head.log").open("wb")
    cmd = [sys.executable, "-m", "nnsweep.cli", "agent", "head", "--port", str(port)]
    head = subprocess.Popen(
        [*cmd, "--dashboard-agent-port", str(free_port_in_rays_worker_range()), "--block"],
        env=dict(base, HOME=str(home)),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        token = home / ".ray" / "auth_token"
        owner = dict(base, HOME=str(home), **RAY_ENV)
        deadline = time.monotonic() + 180
        while True:
            assert head.poll() is None, (tmp_path / "head.log").read_text()[-2000:]
            if token.exists() and _connect(address, owner).stdout.startswith("CONNECTED 1.0"):
                break
            assert time.monotonic() < deadline, "the head did not start"
            time.sleep(2)
        check_head_answers(address)  # a real head's GCS answers as a gRPC server
        assert stat.S_IMODE(token.stat().st_mode) == 0o600
        assert stat.S_IMODE(token.parent.stat().st_mode) == 0o700
        assert f"token in {token}" in (tmp_path / "head.log").read_text()
        assert token.read_text() not in (tmp_path / "head.log").read_text()  # never printed

        no_token = _connect(address, dict(base, HOME=str(stranger)))
        assert no_token.stdout.startswith("REFUSED"), no_token.stdout + no_token.stderr[-1000:]
        wrong = _connect(address, dict(base, HOME=str(stranger), RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="0" * 64))
        assert wrong.stdout.startswith("REFUSED"), wrong.stdout + wrong.stderr[-1000:]
    finally:
        _stop_session(head)
        log.close()


def _stop_session(proc: subprocess.Popen[bytes]) -> None:
    """Stop exactly what a test started: the session ``proc`` leads (never `ray stop`, which ends
    every Ray process of the user on this machine)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while _session_pids(proc.pid) and time.monotonic() < deadline:
        time.sleep(1)
    for pid in _session_pids(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=30)
    time.sleep(1)
    assert not _session_pids(proc.pid)


def test_start_failure_reads_the_raylets_reason_from_this_starts_logs(tmp_path: Path) -> None:
    logs = tmp_path / "session_2026-11-23_22-37-09_161484_12181" / "logs"
    logs.mkdir(parents=True)
    line = (
        "[2026-11-23 22:37:28,645 C 12331 12331] (raylet) node_manager.cc:3588:  An unexpected system state "
        "has occurred. ... Check failed: statussetor3588.has_value() Timed out waiting for file "
        f"{tmp_path}/session_2026-11-23_22-37-09_161484_12181/dashboard_agent_listen_port_9b71af3ef2b209d7\n"
    )
    (logs / "raylet.1.err").write_text(line)
    (logs / "raylet.out").write_text("[...] (raylet) main.cc:283: Setting cluster ID to: b4367d9b\n")
    reason = start_failure(tmp_path, since=time.time() - 60)
    assert reason is not None and "Ray's dashboard agent" in reason and "ray stop" in reason
    assert start_failure(tmp_path, since=time.time() + 60) is None  # an earlier start's log says nothing now
    (logs / "raylet.1.err").write_text(line.replace("dashboard_agent_listen_port", "runtime_env_agent_port"))
    assert "Ray's runtime-env agent" in (start_failure(tmp_path, since=0) or "")
    (logs / "raylet.1.err").write_text("unrelated\n")
    assert start_failure(tmp_path, since=0) is None
    assert start_failure(tmp_path / "missing", since=0) is None
    assert ray_temp_dir({"RAY_TMPDIR": "/r", "TMPDIR": "/t"}) == Path("/r/ray")
    assert ray_temp_dir({"TMPDIR": "/t"}) == Path("/t/ray") and ray_temp_dir({}) == Path("/tmp/ray")


@pytest.mark.ray
@pytest.mark.integration
@pytest.mark.slow
def test_a_join_whose_agent_starts_too_slowly_says_why_in_one_line(tmp_path: Path, ray_tmp: str) -> None:
    """A board too slow to start Ray's dashboard agent in 15 s (ray-project/ray#65983), made here by a
    sitecustomize that delays that one process: `ray start` says only "timed out", nnsweep says why."""
    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text(
        "import sys, time\nif sys.argv and sys.argv[0].endswith('dashboard/agent.py'):\n    time.sleep(25)\n"
    )
    token = tmp_path / "auth_token"
    ensure_token(token)
    base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    base["RAY_TMPDIR"] = ray_tmp
    port = free_port()
    cli = [sys.executable, "-m", "nnsweep.cli", "agent"]
    head_log = (tmp_path / "head.log").open("wb")
    head_args = ["head", "--port", str(port), "--token-file", str(token), "--dashboard-agent-port", str(free_port())]
    head = subprocess.Popen(
        [*cli, *head_args, "--block"],
        env=base,
        stdout=head_log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    join: subprocess.Popen[bytes] | None = None
    try:
        owner = dict(base, RAY_AUTH_TOKEN_PATH=str(token), **RAY_ENV)
        deadline = time.monotonic() + 180
        while not _connect(f"127.0.0.1:{port}", owner).stdout.startswith("CONNECTED"):
            assert head.poll() is None and time.monotonic() < deadline, (tmp_path / "head.log").read_text()[-2000:]
            time.sleep(2)
        join_args = ["join", "--address", f"127.0.0.1:{port}", "--device", "slow-board", "--token-file", str(token)]
        join = subprocess.Popen(
            [*cli, *join_args, "--dashboard-agent-port", str(free_port())],
            env=dict(base, PYTHONPATH=str(slow)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        _, err = join.communicate(timeout=300)
        assert join.returncode != 0
        last = err.decode().strip().splitlines()[-1]
        assert last.startswith("nnsweep agent join: the raylet gave up waiting for Ray's dashboard agent"), last
    finally:
        if join is not None:
            _stop_session(join)
        _stop_session(head)
        head_log.close()


_LOCAL_CLUSTER = """
from nnsweep.execution.ray_cluster import RayExecutor
executor = RayExecutor(converters=1)
try:
    print("DEVICES", executor.cluster_devices(), flush=True)
finally:
    executor.shutdown()
"""


@pytest.mark.ray
@pytest.mark.integration
@pytest.mark.slow
def test_the_local_executors_cluster_leaves_a_token_agent_head_accepts(tmp_path: Path, ray_tmp: str) -> None:
    """A fresh HOME, the default Ray executor's own local cluster (`nnsweep run`'s): the token Ray
    uses is 0600 in a 0700 folder, and `nnsweep agent head`'s check accepts it afterwards.

    A process of its own: Ray's token loader caches the token once per process, and ray.init
    sets RAY_AUTH_MODE in its process's environment."""
    home = tmp_path / "home"
    home.mkdir()
    base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    base["RAY_TMPDIR"] = ray_tmp
    proc = subprocess.Popen(
        [sys.executable, "-c", _LOCAL_CLUSTER],
        env=dict(base, HOME=str(home)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        _stop_session(proc)
    assert proc.returncode == 0 and b"DEVICES ['host']" in out, (out + err)[-2000:]
    token = home / ".ray" / "auth_token"
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    assert stat.S_IMODE(token.parent.stat().st_mode) == 0o700
    assert token.read_bytes() not in out + err  # never printed or logged
    # What `nnsweep agent head` does before `ray start`: keep an existing token, refuse a readable one.
    assert ensure_token(default_token_path({}, home)) is False
    check_token_file(token, option="--token-file")
