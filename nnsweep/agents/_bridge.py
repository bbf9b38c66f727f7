"""Bridge transports: drive a device that cannot run Ray (a phone over adb, a board over ssh).

The agent runs on a host; for each trial it pushes the artifact to the device, runs
the runtime's own benchmark tool there (``speed_benchmark_torch`` for TorchScript and
NNAPI models, ``benchmark_model`` for ``.tflite``), reads the tool's output, and
removes the artifact. Tool paths and device serials are configuration.

The tool reports a mean per run, not every run, so a measurement runs the tool
``repeats`` times (``iters / repeats`` runs each) and keeps each run's mean as a
sample: the sweep's p50 is then the median of those means, which the tag
``latency_source`` says. The device computes no outputs, so accuracy and fidelity
are evaluated on the host (see the coordinator).
"""

from __future__ import annotations

import shlex
import subprocess
import tempfile
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nnsweep.agents._capabilities import Capabilities
from nnsweep.agents._tools import ToolRun, tool_for
from nnsweep.agents._tools import tools as device_tools
from nnsweep.agents._transport import MeasureReply, MeasureRequest, Transport
from nnsweep.bench import LatencyStats, Timing
from nnsweep.core.errors import AgentLost, BenchmarkError, SpecError
from nnsweep.core.measure import MeasureSettings
from nnsweep.core.options import int8_flags
from nnsweep.spec import Bridge

__all__ = ["AdbTransport", "BridgeTransport", "SshTransport", "bridge_transport"]


class BridgeTransport(Transport):
    """Push, run the runtime's benchmark tool, parse: what adb and ssh have in common.

    Args:
        tools: runtime -> path of its benchmark tool on the device.
        workdir: a writable directory on the device.
        push_tools: runtime -> a tool binary on this host to push to ``tools[runtime]`` first.
        repeats: tool invocations per measurement.
        timeout_s: per command.
    """

    def __init__(
        self,
        tools: Mapping[str, str],
        workdir: str,
        push_tools: Mapping[str, Path] | None = None,
        repeats: int = Bridge.repeats,
        timeout_s: float = MeasureSettings.timeout_s,
    ) -> None:
        known = device_tools()
        unknown = sorted(set(tools) - set(known))
        if unknown:
            raise ValueError(f"no benchmark tool is known for runtime(s) {unknown}; known: {sorted(known)}")
        self.tools = dict(tools)
        self.workdir = workdir
        self.push_tools = dict(push_tools or {})
        self.repeats = max(1, repeats)
        self.timeout_s = timeout_s
        self._pushed_tools = False

    @abstractmethod
    def command(self, args: Sequence[str]) -> list[str]:
        """The host command that runs ``args`` as a shell command on the device."""

    @abstractmethod
    def push_command(self, local: Path, remote: str) -> list[str]:
        """The host command that copies ``local`` to ``remote`` on the device."""

    def _run(self, argv: list[str], what: str) -> str:
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise BenchmarkError(f"{what} timed out after {self.timeout_s:.0f} s") from None
        except FileNotFoundError as exc:
            raise AgentLost(f"{argv[0]} is not installed on the agent's host: {exc}") from exc
        unreachable = ("no devices/emulators found", "device offline", "device unauthorized")
        if (
            proc.returncode == 255
            or any(text in proc.stderr for text in unreachable)
            or ("error: device" in proc.stderr and "not found" in proc.stderr)
        ):
            raise AgentLost(f"device unreachable during {what}: {proc.stderr.strip()[-300:]}")
        if proc.returncode != 0:
            raise BenchmarkError(f"{what} failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()[-500:]}")
        return proc.stdout

    def shell(self, *args: str) -> str:
        return self._run(self.command(args), f"`{' '.join(args)}`")

    def push(self, local: Path, remote: str) -> None:
        self._run(self.push_command(local, remote), f"push {local.name}")

    def probe(self, device: str) -> Capabilities:
        arch = self.shell("uname", "-m").strip()
        cores = int(self.shell("nproc").strip() or 1)
        meminfo = self.shell("cat", "/proc/meminfo")
        memory = next(
            (int(line.split()[1]) // 1024 for line in meminfo.splitlines() if line.startswith("MemTotal:")), 0
        )
        cpuinfo = self.shell("cat", "/proc/cpuinfo")
        cpu = _cpu_name(cpuinfo)
        self._install_tools()
        runtimes = {}
        for runtime, tool in self.tools.items():
            try:
                self.shell("ls", tool)
            except BenchmarkError:
                continue  # the tool is not on the device: that runtime is not available there
            runtimes[runtime] = self.backends(runtime)
        return Capabilities(
            device=device,
            machine=f"{self.name}:{self.target}",
            arch=arch,
            cpu=cpu,
            cores=cores,
            memory_mb=memory,
            runtimes=runtimes,
            versions={},
            transport=self.name,
            int8_flags=int8_flags(cpuinfo),
        )

    def backends(self, runtime: str) -> tuple[str, ...]:
        """The backends a device's tool can use for ``runtime`` (its :class:`DeviceTool`'s, for this transport)."""
        return tool_for(runtime).backends.get(self.name, ("cpu",))

    @property
    @abstractmethod
    def target(self) -> str:
        """The device's address (serial or host), for its machine name."""

    def _install_tools(self) -> None:
        if self._pushed_tools:
            return
        self.shell("mkdir", "-p", self.workdir)
        for runtime, local in self.push_tools.items():
            self.push(local, self.tools[runtime])
            self.shell("chmod", "755", self.tools[runtime])
        self._pushed_tools = True

    def measure(self, request: MeasureRequest) -> MeasureReply:
        if request.runtime not in self.tools:
            raise BenchmarkError(f"no benchmark tool for {request.runtime} is configured for this device")
        tool = tool_for(request.runtime)
        build, parse = tool.command, tool.parse
        self._install_tools()
        remote = f"{self.workdir}/{request.artifact_name}"
        with tempfile.TemporaryDirectory(prefix="nnsweep-push-") as tmp:
            local = Path(tmp) / request.artifact_name
            local.write_bytes(request.artifact_bytes)
            self.push(local, remote)
        try:
            s = request.settings
            per_run = max(1, s.iters // self.repeats)
            runs: list[ToolRun] = []
            for i in range(self.repeats):
                argv = build(self.tools[request.runtime], remote, request.threads, s.warmup if i == 0 else 0, per_run)
                runs.append(parse(self.shell(*argv)))
        finally:
            self.shell("rm", "-f", remote)
        samples = tuple(r.mean_us / 1000 for r in runs)
        first = runs[0]
        timing = Timing(
            load_ms=(first.init_us or 0.0) / 1000,
            first_inference_ms=(first.first_us or first.mean_us) / 1000,
            latency=LatencyStats.from_samples(samples),
            samples_ms=samples,
            peak_rss_mb=max((r.peak_memory_mb or 0.0) for r in runs),
            rss_before_load_mb=0.0,
            threads=request.threads,
            loadavg_1m=None,
        )
        return MeasureReply(timing=timing, outputs=None, source=f"{self.name}: mean of {per_run} runs x {self.repeats}")


class AdbTransport(BridgeTransport):
    """An Android device over ``adb``.

    Args:
        serial: the device's serial (``adb -s``); ``None`` for the only device attached.
        adb: the adb executable.
        tools: runtime -> tool path on the device (default: each device tool's
            :attr:`~nnsweep.agents.DeviceTool.android_path`, speed_benchmark_torch in /data/local/tmp).
    """

    name = "adb"

    def __init__(
        self,
        serial: str | None = None,
        adb: str = "adb",
        tools: Mapping[str, str] | None = None,
        workdir: str = "/data/local/tmp/nnsweep",
        **kwargs: Any,
    ) -> None:
        default = {runtime: tool.android_path for runtime, tool in device_tools().items() if tool.android_path}
        super().__init__(tools or default, workdir, **kwargs)
        _not_an_option(serial, "serial")
        self.serial = serial
        self.adb = adb

    @property
    def target(self) -> str:
        return self.serial or "default"

    def _base(self) -> list[str]:
        return [self.adb, *(["-s", self.serial] if self.serial else [])]

    def command(self, args: Sequence[str]) -> list[str]:
        return [*self._base(), "shell", shlex.join(args)]

    def push_command(self, local: Path, remote: str) -> list[str]:
        return [*self._base(), "push", str(local), remote]


class SshTransport(BridgeTransport):
    """A Linux board without Ray, over ``ssh``/``scp`` (key-based login).

    Every command gives up on a board that does not answer: within
    :attr:`connect_timeout_s` when connecting (the TCP connection and ssh's banner; a
    board that is off or behind a firewall that drops packets kept the sweep's probe
    waiting for the system's TCP timeout, minutes, per command), and within about a
    minute of silence from a board that vanishes mid-measurement (ssh's keep-alives),
    not at the command's own timeout. Either is the device unreachable (exit 255).

    Args:
        host: ``user@host`` as ssh takes it.
        tools: runtime -> tool path on the board.
    """

    name = "ssh"
    connect_timeout_s = 20

    def __init__(
        self,
        host: str,
        tools: Mapping[str, str],
        workdir: str = "/tmp/nnsweep",
        ssh: str = "ssh",
        scp: str = "scp",
        **kwargs: Any,
    ) -> None:
        super().__init__(tools, workdir, **kwargs)
        _not_an_option(host, "host")
        self.host = host
        self.ssh = ssh
        self.scp = scp

    @property
    def target(self) -> str:
        return self.host

    def _options(self) -> list[str]:
        """ssh's and scp's options: no prompt, and no endless wait for an absent board."""
        settings = {
            "BatchMode": "yes",
            "ConnectTimeout": str(self.connect_timeout_s),
            "ServerAliveInterval": "15",
            "ServerAliveCountMax": "4",
        }
        return [arg for key, value in settings.items() for arg in ("-o", f"{key}={value}")]

    def command(self, args: Sequence[str]) -> list[str]:
        # `--` ends ssh's options: the host (from a spec) can never be read as one.
        return [self.ssh, *self._options(), "--", self.host, shlex.join(args)]

    def push_command(self, local: Path, remote: str) -> list[str]:
        return [self.scp, "-q", *self._options(), "--", str(local), f"{_scp_host(self.host)}:{remote}"]


def _scp_host(host: str) -> str:
    """``host`` as scp reads it before ``:path``: an IPv6 address in brackets. scp split
    ``pi@fe80::1:/tmp/x`` at its first colon and connected to host ``fe80``; ssh itself
    takes the address without brackets."""
    user, at, name = host.rpartition("@")
    return f"{user}{at}[{name}]" if ":" in name and not name.startswith("[") else host


def _not_an_option(value: str | None, what: str) -> None:
    """Values from a spec reach adb/ssh as arguments; one starting with '-' would be an option
    there (``-oProxyCommand=...`` runs a local command). The spec refuses them; so do we."""
    if value is not None and value.startswith("-"):
        raise SpecError(what, f"{value[:60]!r} starts with '-': it would be read as an option")


def bridge_transport(bridge: Bridge) -> BridgeTransport:
    """The transport a spec's ``bridges:`` entry describes."""
    push_tools = {runtime: Path(local) for runtime, local in bridge.push_tools.items()}
    common: dict[str, Any] = {"repeats": bridge.repeats, "push_tools": push_tools}
    if bridge.workdir:
        common["workdir"] = bridge.workdir
    if bridge.transport == "adb":
        return AdbTransport(
            serial=bridge.target, adb=bridge.executable or "adb", tools=dict(bridge.tools) or None, **common
        )
    assert bridge.target is not None  # the spec requires a host for ssh
    return SshTransport(bridge.target, dict(bridge.tools), ssh=bridge.executable or "ssh", **common)


def _cpu_name(cpuinfo: str) -> str:
    for line in cpuinfo.splitlines():
        if line.lower().startswith(("model name", "hardware", "cpu part")):
            return line.split(":", 1)[1].strip()
    return "unknown"
