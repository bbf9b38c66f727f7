"""Starting Ray nodes for nnsweep: the head (conversions, the host device) and boards.

These build the ``ray start`` command lines that ``nnsweep agent head``/``join`` run. A
joining node offers the resource ``device:<name>`` and no CPUs, so nothing but its
device's measurements is scheduled there. Every node and client uses Ray's token
authentication; the head generates the token 0600 in a 0700 folder (Ray's own would be
0644), token files others can read are refused (whoever holds it runs code on every
node), and a local cluster gets the same private token (:func:`local_token`). Python
versions match at the minor level, since a board's OS rarely has the head's patch
version (docs/explanation/security.md). A slow machine can fail to join when the raylet's
15 s agent timeout expires: :func:`start_failure` finds the raylet's reason in its log.
"""

from __future__ import annotations

import json
import os
import platform
import re
import secrets
import socket
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path

from nnsweep.core.errors import SpecError

__all__ = [
    "RAY_ENV",
    "check_token_file",
    "default_token_path",
    "ensure_token",
    "head_command",
    "join_command",
    "local_token",
    "ray_env",
    "ray_temp_dir",
    "start_failure",
]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")

# What every nnsweep Ray process (head, board, client) runs with.
RAY_ENV = {"RAY_AUTH_MODE": "token", "RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL": "minor"}


def _check_name(value: str, option: str) -> None:
    if not _NAME.fullmatch(value):
        raise SpecError(option, f"{value[:60]!r}: use letters, digits, '_', '-', '.' (at most 64 characters)")


def default_token_path(environ: Mapping[str, str], home: Path) -> Path:
    """Where Ray looks for the token: ``$RAY_AUTH_TOKEN_PATH``, else ``~/.ray/auth_token``."""
    given = environ.get("RAY_AUTH_TOKEN_PATH")
    return Path(given) if given else home / ".ray" / "auth_token"


def ensure_token(path: Path) -> bool:
    """Create the token file ``path`` (0600, in a 0700 folder) unless it exists.

    The token is written whole beside ``path`` and then linked into place, so two
    processes that start at once (two local sweeps) never read a half-written token,
    and the second keeps the first's.

    Returns:
        Whether a new token was written.

    Raises:
        OSError: the folder cannot be created or written.
    """
    if path.exists():
        return False
    created = not path.parent.exists()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if created or path.parent.name == ".ray":
        path.parent.chmod(0o700)  # mkdir's mode is masked by the umask; Ray's own folder holds only this
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # mode 0600 whatever the umask
    try:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False  # another process wrote it meanwhile: theirs is the token
    finally:
        os.unlink(tmp)
    return True


def check_token_file(
    path: Path, *, option: str, allow_readable: bool = False, override: str = "pass --allow-readable-token"
) -> None:
    """Refuse a token file that is missing, empty, not text, or readable by group or others.

    ``override`` ends the message about a readable file: what else the user may do.

    Raises:
        SpecError: naming ``option`` and what to do.
    """
    try:
        info = path.stat()
        data = path.read_bytes()
    except FileNotFoundError:
        raise SpecError(option, f"{str(path)!r} does not exist (copy the head's token there)") from None
    except OSError as exc:
        raise SpecError(option, f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise SpecError(option, f"{str(path)!r} is not a file")
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077 and not allow_readable:
        raise SpecError(
            option,
            f"{path} has mode {mode:04o}: others could read the token and run code on the cluster; "
            f"run `chmod 600 {path}` (or {override})",
        )
    try:
        token = data.decode("ascii").strip()
    except UnicodeDecodeError:
        raise SpecError(option, f"{str(path)!r} does not hold a token (not ASCII text)") from None
    if not token or any(ch.isspace() for ch in token):
        raise SpecError(option, f"{str(path)!r} does not hold a token (empty, or several words)")


def local_token(environ: Mapping[str, str], home: Path) -> Path | None:
    """Make sure a local ``ray.init()`` finds a private token; call it just before.

    Ray's local ``ray.init()`` with ``RAY_AUTH_MODE`` unset writes ``~/.ray/auth_token``
    itself with the umask's mode (0644), which ``nnsweep agent head`` then refuses; so the
    file Ray would read (``$RAY_AUTH_TOKEN_PATH``, else ``home/.ray/auth_token``) is created
    here first (:func:`ensure_token`). ``environ`` is only read. Returns the token file, or
    ``None`` when Ray reads none (``RAY_AUTH_MODE`` other than ``token``, or the token in
    ``RAY_AUTH_TOKEN``).

    Raises:
        SpecError: (field ``token``) the file cannot be written, is readable by group or
            others, or holds no token.
    """
    mode = environ.get("RAY_AUTH_MODE")
    if (mode is not None and mode.lower() != "token") or environ.get("RAY_AUTH_TOKEN"):
        return None
    path = default_token_path(environ, home)
    try:
        ensure_token(path)
    except OSError as exc:
        raise SpecError(
            "token",
            f"cannot write Ray's token file {path}: {exc.strerror or exc}; "
            "set RAY_AUTH_TOKEN_PATH to a file in a folder you can write (nnsweep creates it 0600)",
        ) from None
    check_token_file(
        path,
        option="token",
        override="set RAY_AUTH_TOKEN_PATH to another file, which nnsweep creates 0600",
    )
    return path


def ray_env(environ: Mapping[str, str], token_path: Path | None) -> dict[str, str]:
    """``environ`` plus what a Ray process of nnsweep needs: token mode, the token file, minor-version match."""
    env = dict(environ, **RAY_ENV)
    if token_path is not None:
        env["RAY_AUTH_TOKEN_PATH"] = str(token_path)
    return env


def _labels(device: str | None, machine: str) -> str:
    labels = {"nnsweep-machine": machine, "arch": platform.machine()}
    if device is not None:
        labels["nnsweep-device"] = device
    return ",".join(f"{k}={v}" for k, v in labels.items())


# Ports Ray takes on every node unless told otherwise. `ray start --head --port 12345` (a
# port in the workers' range), 8265 or 52365 failed with Ray's ValueError traceback ("is
# trying to use a port number ... that is used by other components"), so the component
# whose default a chosen port meets is moved off it.
_WORKER_RANGES = ((10002, 19999), (20000, 29999), (30000, 32767))  # Ray's own first; all below Linux's ephemeral ports
_DASHBOARD_PORT = 8265  # reserved on a head even with the dashboard off
_DASHBOARD_AGENT_PORT = 52365


def _clear_of_ray_defaults(chosen: set[int], *, head: bool, agent_port_given: bool) -> list[str]:
    """``ray start`` options moving Ray's default ports off the ``chosen`` ones."""
    options: list[str] = []
    low, high = next(r for r in _WORKER_RANGES if not any(r[0] <= p <= r[1] for p in chosen))
    if (low, high) != _WORKER_RANGES[0]:
        options += ["--min-worker-port", str(low), "--max-worker-port", str(high)]
    if head and _DASHBOARD_PORT in chosen:
        options += ["--dashboard-port", str(next(p for p in range(8266, 8270) if p not in chosen))]
    if not agent_port_given and _DASHBOARD_AGENT_PORT in chosen:
        options += ["--dashboard-agent-listen-port", str(_DASHBOARD_AGENT_PORT + 1)]
    return options


def head_command(
    port: int,
    converters: int,
    *,
    host_device: str | None = "host",
    block: bool = False,
    dashboard_agent_port: int | None = None,
) -> list[str]:
    """``ray start --head`` for the machine that converts (and, by default, is device ``host``).

    ``dashboard_agent_port`` moves Ray's fixed default port (52365), for a second
    head on one machine. A default port of Ray's that ``port`` meets (its workers'
    10002-19999, 8265, 52365) is moved off it.
    """
    if not 1 <= port <= 65535:
        raise SpecError("--port", f"must be a TCP port (1-65535), got {port}")
    if converters < 1:
        raise SpecError("--converters", f"must be >= 1, got {converters}")
    resources: dict[str, float] = {"nnsweep-converter": converters}
    if host_device is not None:
        _check_name(host_device, "--device")
        resources[f"device:{host_device}"] = 1
    cmd = [
        "ray", "start", "--head",
        "--port", str(port),
        "--resources", json.dumps(resources),
        "--labels", _labels(host_device, socket.gethostname()),
        "--include-dashboard", "false",
        "--disable-usage-stats",
    ]  # fmt: skip
    if dashboard_agent_port is not None:
        if dashboard_agent_port == port:
            raise SpecError("--dashboard-agent-port", f"must differ from --port ({port})")
        cmd += ["--dashboard-agent-listen-port", str(dashboard_agent_port)]
    chosen = {port} if dashboard_agent_port is None else {port, dashboard_agent_port}
    cmd += _clear_of_ray_defaults(chosen, head=True, agent_port_given=dashboard_agent_port is not None)
    return [*cmd, "--block"] if block else cmd


def join_command(
    address: str,
    device: str | None,
    *,
    machine: str | None = None,
    converters: int = 0,
    dashboard_agent_port: int | None = None,
    block: bool = False,
) -> list[str]:
    """``ray start --address`` for a board that measures as ``device``, or a machine that converts.

    Args:
        address: the head's ``HOST:PORT``.
        device: the device's name in sweeps (``None``: this node only converts).
        machine: the physical machine's name (default: the host name); give each
            simulated device on one machine its own only when its measurements may overlap.
        converters: conversions this node runs at once (a build server; each takes a CPU).
        dashboard_agent_port: needed when two nodes share one machine (each needs its own).
    """
    if device is None and converters < 1:
        raise SpecError("--device", "give the device this node measures as, or --converters N for a node that converts")
    if not 0 <= converters <= 1024:
        raise SpecError("--converters", f"must be between 0 and 1024, got {converters}")
    resources: dict[str, float] = {}
    if device is not None:
        _check_name(device, "--device")
        resources[f"device:{device}"] = 1
    if converters:
        resources["nnsweep-converter"] = converters
    check_address(address)
    cmd = [
        "ray", "start",
        "--address", address,
        "--num-cpus", str(converters),  # a board's agent takes no CPU; each conversion takes one
        "--resources", json.dumps(resources),
        "--labels", _labels(device, machine or socket.gethostname()),
        "--disable-usage-stats",
    ]  # fmt: skip
    if dashboard_agent_port is not None:
        cmd += ["--dashboard-agent-listen-port", str(dashboard_agent_port)]
        cmd += _clear_of_ray_defaults({dashboard_agent_port}, head=False, agent_port_given=True)
    return [*cmd, "--block"] if block else cmd


def check_address(address: str, option: str = "--address") -> tuple[str, int]:
    """A Ray head's ``HOST:PORT`` (an IPv6 host in brackets), as ``(host, port)``.

    Raises:
        SpecError: not of that form, or the port outside 1-65535.
    """
    host, _, port = address.rpartition(":")
    if not host or host.startswith("-") or not port.isdigit():
        raise SpecError(option, f"{address[:80]!r} is not HOST:PORT (e.g. 192.168.1.10:6379)")
    if not 1 <= int(port) <= 65535:
        raise SpecError(option, f"port {port[:10]} of {address[:80]!r} is out of range: give 1 to 65535")
    return host.removeprefix("[").removesuffix("]"), int(port)


# What an HTTP/2 client sends first: the connection preface and an empty SETTINGS frame.
# A gRPC server (a Ray head's GCS is one) answers with a SETTINGS frame of its own.
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_SETTINGS = 4


def check_head_answers(address: str, option: str = "--address", timeout_s: float = 5.0) -> None:
    """Refuse at once an address where no Ray head answers: Ray's own client waits for one
    without end (``nnsweep run`` and ``devices`` hung, ``agent join`` printed a timeout every
    30 s), printing the node's address in place of a loopback one. It waits as well at a
    port that accepts but is not a head's (the dashboard's 8265, a web server, ssh), so the
    port must answer the way a gRPC server does: a SETTINGS frame for the HTTP/2 preface.
    With ``RAY_USE_TLS`` set the head speaks TLS first, and only the connection is checked.

    Raises:
        SpecError: the address is malformed, its host unknown, its port refuses or does not
            answer within ``timeout_s``, or what answers is not a gRPC server.
    """
    host, port = check_address(address, option)
    try:
        conn = socket.create_connection((host, port), timeout=timeout_s)
    except OSError as exc:
        why = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise SpecError(
            option,
            f"nothing accepts connections at {address[:80]} ({why}): start the head there "
            "(nnsweep agent head), or check the address and that its port is open",
        ) from None
    with conn:
        if os.environ.get("RAY_USE_TLS", "0").strip().lower() in ("1", "true"):
            return
        try:
            conn.sendall(_HTTP2_PREFACE)
            reply = _read_up_to(conn, 9)
        except TimeoutError:
            reply, said = b"", f"it accepted the connection but said nothing in {timeout_s:g} s"
        except OSError as exc:
            reply, said = b"", f"it dropped the connection: {exc.strerror or exc}"
        else:
            said = f"it answered {reply[:16]!r}" if reply else "it closed the connection"
    if len(reply) < 9 or reply[3] != _SETTINGS:
        raise SpecError(
            option,
            f"{address[:80]} is not a Ray head ({said}): give the head's port (6379 unless "
            "`nnsweep agent head --port` said otherwise), not the dashboard's (8265) or another service's",
        )


def _read_up_to(conn: socket.socket, size: int) -> bytes:
    """The first ``size`` bytes ``conn`` sends, fewer if it closes first."""
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


# The raylet's line when an agent's port file did not appear in time, e.g.
# "Timed out waiting for file /tmp/ray/session_X/dashboard_agent_listen_port_<node id>".
_PORT_FILE_TIMEOUT = re.compile(r"Timed out waiting for file \S*?/([a-z_]+?)_port_[0-9a-f]+")
_AGENTS = {"runtime_env_agent": "runtime-env agent"}  # every other port file is the dashboard agent's


def ray_temp_dir(environ: Mapping[str, str]) -> Path:
    """Where ``ray start`` keeps its sessions here: ``$RAY_TMPDIR``, else ``$TMPDIR``, else /tmp; then ``ray``."""
    return Path(environ.get("RAY_TMPDIR") or environ.get("TMPDIR") or "/tmp") / "ray"


def start_failure(temp_dir: Path, since: float) -> str | None:
    """Why a ``ray start`` begun at ``since`` (``time.time()``) failed, in one line, if its raylet logged why.

    Reads the raylet logs under ``temp_dir``'s sessions written since then; ``None``
    when none says (the caller keeps Ray's own message).
    """
    logs = [*temp_dir.glob("session_*/logs/raylet*.err"), *temp_dir.glob("session_*/logs/raylet*.out")]
    for log in sorted(logs):
        try:
            if log.stat().st_mtime < since:
                continue
            text = log.read_text(errors="replace")
        except OSError:
            continue
        found = _PORT_FILE_TIMEOUT.search(text)
        if found:
            agent = _AGENTS.get(found.group(1), "dashboard agent")
            return (
                f"the raylet gave up waiting for Ray's {agent} to start (a fixed 15 s in Ray, "
                "ray-project/ray#65983): this machine started Ray's Python agents too slowly "
                "(a slow or busy CPU, slow storage, emulation). Run `ray stop` here and join again: "
                "a second start finds its files cached and is usually faster"
            )
    return None
