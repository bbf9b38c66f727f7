"""Probe this machine: ``python -m nnsweep.agents._probe DEVICE [MACHINE]`` prints capabilities as JSON.

Runs in its own process so the agent that asks stays free of torch and the
runtimes (each import costs hundreds of MB), and so a runtime that fails to
load is simply absent rather than fatal.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
from importlib import metadata

from nnsweep.agents._arm_cpu import cores_from_sysfs, describe_cores
from nnsweep.agents._capabilities import Capabilities, runtimes_that_fit
from nnsweep.agents._emulation import detect as detect_emulation
from nnsweep.agents._emulation import qemu_cpu

__all__ = ["probe"]


def _cpu_model(emulated: bool) -> str:
    """The CPU's model: an Arm board's cores by their MIDR (its ``/proc/cpuinfo`` names none,
    and under qemu-user it is the x86 host's), with the model qemu runs when emulated."""
    midrs = cores_from_sysfs() if platform.machine() in ("aarch64", "arm64") else []
    if midrs:
        cores = describe_cores(midrs)
        return f"{cores} (qemu {qemu_cpu(os.environ)})" if emulated else cores
    return _cpuinfo_model()


def _cpuinfo_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "processor\t: arm")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _int8_flags(emulated: bool) -> tuple[str, ...] | None:
    """This CPU's int8 flags; unknown under qemu-user, where ``/proc/cpuinfo`` is the host's."""
    from nnsweep.core.options import int8_flags

    if emulated:
        return None
    try:
        with open("/proc/cpuinfo") as f:
            return int8_flags(f.read())
    except OSError:
        return None


def _memory_mb() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 0


def probe(device: str, machine: str | None = None) -> Capabilities:
    """Capabilities of this machine as device ``device``."""
    from nnsweep.core import runtimes

    found: dict[str, tuple[str, ...]] = {}
    versions: dict[str, str] = {}
    packages = {"nnsweep", "ray"}
    for name in runtimes.names():  # the registry is the one list of runtimes, plug-ins included
        info = runtimes.get(name)
        backends = runtimes.probe(info, versions)
        if backends:
            found[name] = backends
            packages.update(info.packages)
    for package in sorted(packages):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    versions["python"] = platform.python_version()
    memory_mb = _memory_mb()
    # A runtime whose measuring process would not fit in this board's memory is not offered.
    measured_as = {name: key for name in found for key in runtimes.get(name).measure_peak_mb if key and key in versions}
    found, left_out = runtimes_that_fit(found, memory_mb, measured_as)
    emulated = detect_emulation() is not None
    return Capabilities(
        device=device,
        machine=machine or socket.gethostname(),
        arch=platform.machine(),
        cpu=_cpu_model(emulated),
        cores=os.cpu_count() or 1,
        memory_mb=memory_mb,
        runtimes=found,
        versions=versions,
        emulated=emulated,
        left_out=left_out,
        int8_flags=_int8_flags(emulated),
    )


if __name__ == "__main__":
    args = sys.argv[1:]
    caps = probe(args[0], args[1] if len(args) > 1 else None)
    sys.stdout.write(json.dumps(caps.to_dict()) + "\n")
