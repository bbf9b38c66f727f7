"""Starting Ray nodes for nnsweep: the head (conversions, the host device) and boards.

These build the ``ray start`` command lines; ``nnsweep agent head`` and
``nnsweep agent join`` run them. A joining node offers the custom resource
``device:<name>`` (the coordinator places that device's agent there) and labels
``nnsweep-device``, ``nnsweep-machine`` and ``arch``. It offers no CPUs to Ray, so
no conversion or other task is ever scheduled on a board: its cores are for
measurements only.
"""

from __future__ import annotations

import json
import platform
import re
import socket

from nnsweep.errors import SpecError

__all__ = ["head_command", "join_command"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def _check_name(value: str, option: str) -> None:
    if not _NAME.match(value):
        raise SpecError(option, f"{value!r}: use letters, digits, '_', '-', '.' (at most 64 characters)")


def _labels(device: str | None, machine: str) -> str:
    labels = {"nnsweep-machine": machine, "arch": platform.machine()}
    if device is not None:
        labels["nnsweep-device"] = device
    return ",".join(f"{k}={v}" for k, v in labels.items())


def head_command(port: int, converters: int, *, host_device: str | None = "host", block: bool = False) -> list[str]:
    """``ray start --head`` for the machine that converts (and, by default, is device ``host``)."""
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
    return [*cmd, "--block"] if block else cmd


def join_command(
    address: str,
    device: str,
    *,
    machine: str | None = None,
    dashboard_agent_port: int | None = None,
    block: bool = False,
) -> list[str]:
    """``ray start --address`` for a board that measures as ``device``.

    Args:
        address: the head's ``HOST:PORT``.
        device: the device's name in sweeps.
        machine: the physical machine's name (default: the host name); give each
            simulated device on one machine its own only when its measurements may overlap.
        dashboard_agent_port: needed when two nodes share one machine (each needs its own).
    """
    _check_name(device, "--device")
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise SpecError("--address", f"{address!r} is not HOST:PORT")
    cmd = [
        "ray", "start",
        "--address", address,
        "--num-cpus", "0",
        "--resources", json.dumps({f"device:{device}": 1}),
        "--labels", _labels(device, machine or socket.gethostname()),
        "--disable-usage-stats",
    ]  # fmt: skip
    if dashboard_agent_port is not None:
        cmd += ["--dashboard-agent-listen-port", str(dashboard_agent_port)]
    return [*cmd, "--block"] if block else cmd
