"""Is this device's userland emulated? Detected, never declared.

An emulated board (``device_agents/arm_sim.sh``: Debian arm64 under qemu-user on x86_64)
runs the real aarch64 kernels, so its accuracy is real but every latency is the
emulator's. Either signature gives it away: ``/proc/cpuinfo`` describes an x86 CPU
(qemu-user passes the host's file through; a real Arm CPU shows ``CPU implementer`` and
``Features``), or the executable behind the parent process is the emulator (qemu-user
hides its own ``/proc/self/exe``, not its parent's), which still works where a newer qemu
fakes ``/proc/cpuinfo``. The functions take the texts they read as arguments, so tests
feed them real files of both kinds of machine.
"""

from __future__ import annotations

import os
import platform
import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Emulation", "cpuinfo_arch", "detect", "detect_from", "qemu_cpu"]

_ARM_USERLAND = {"aarch64", "arm64", "armv7l", "armv8l", "armv6l"}
_QEMU_EXE = re.compile(r"qemu-(\w+)|(\w+)-binfmt-P")


@dataclass(frozen=True)
class Emulation:
    """How this userland is emulated.

    Args:
        userland: the architecture the processes are built for (``uname -m``).
        host: the CPU architecture that really runs them (``x86_64``), or ``unknown``.
        host_cpu: the host CPU's model name, when ``/proc/cpuinfo`` shows it.
        evidence: which signature was seen, for logs and docs.
    """

    userland: str
    host: str
    host_cpu: str
    evidence: str

    def describe(self) -> str:
        """``aarch64 userland emulated by qemu-user on x86_64 (AMD EPYC ...)``."""
        cpu = f" ({self.host_cpu})" if self.host_cpu else ""
        return f"{self.userland} userland emulated by qemu-user on {self.host}{cpu}"


def cpuinfo_arch(cpuinfo: str) -> str | None:
    """The CPU architecture a ``/proc/cpuinfo`` text describes: ``x86_64``, ``arm`` or ``None``."""
    keys = {line.split(":", 1)[0].strip().lower() for line in cpuinfo.splitlines() if ":" in line}
    flags = " ".join(
        line.split(":", 1)[1] for line in cpuinfo.splitlines() if line.lower().startswith(("flags", "features"))
    ).split()
    if "vendor_id" in keys or "sse2" in flags:
        return "x86_64"
    if "cpu implementer" in keys or "asimd" in flags or "neon" in flags:
        return "arm"
    return None


def _model_name(cpuinfo: str) -> str:
    for line in cpuinfo.splitlines():
        if line.lower().startswith("model name") and ":" in line:
            return line.split(":", 1)[1].strip()
    return ""


def detect_from(userland: str, cpuinfo: str, parent_exe: str = "") -> Emulation | None:
    """The emulation these observations show, or ``None`` for a native userland.

    Args:
        userland: ``platform.machine()`` of this process.
        cpuinfo: the text of ``/proc/cpuinfo``.
        parent_exe: the target of ``/proc/<parent pid>/exe`` (``""`` if unreadable).
    """
    if userland not in _ARM_USERLAND:
        return None  # only Arm boards are emulated here; an x86 userland is taken as native
    host = cpuinfo_arch(cpuinfo)
    if host is not None and host != "arm":
        return Emulation(userland, host, _model_name(cpuinfo), f"/proc/cpuinfo describes an {host} CPU")
    match = _QEMU_EXE.search(os.path.basename(parent_exe))
    if match:
        return Emulation(userland, "unknown", "", f"the parent process runs under {os.path.basename(parent_exe)}")
    return None


def qemu_cpu(environ: Mapping[str, str]) -> str:
    """The CPU model qemu-user runs a process as, from the environment it started with.

    qemu-user reads ``QEMU_CPU`` at each exec; without it, it emulates its ``max`` CPU,
    which advertises features no real core of these boards has (docs/how-to/emulated-board.md), so
    ``max (QEMU_CPU unset)`` says an exec path dropped the variable.

    Example:
        >>> qemu_cpu({"QEMU_CPU": "cortex-a72"}), qemu_cpu({})
        ('cortex-a72', 'max (QEMU_CPU unset)')
    """
    return environ.get("QEMU_CPU") or "max (QEMU_CPU unset)"


def detect() -> Emulation | None:
    """This process's emulation, from ``platform.machine()``, ``/proc/cpuinfo`` and the parent's executable."""
    try:
        with open("/proc/cpuinfo") as f:
            cpuinfo = f.read()
    except OSError:
        cpuinfo = ""
    try:
        parent_exe = os.readlink(f"/proc/{os.getppid()}/exe")
    except OSError:
        parent_exe = ""
    return detect_from(platform.machine(), cpuinfo, parent_exe)
