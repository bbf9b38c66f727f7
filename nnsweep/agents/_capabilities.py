"""What a device can do, as its agent reports it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Capabilities"]


@dataclass(frozen=True)
class Capabilities:
    """A device's hardware and the runtimes and backends that actually load there.

    Args:
        device: the device's name in sweeps.
        machine: the physical machine it is on; measurements on one machine never
            overlap with each other or with conversions there.
        arch: ``x86_64``, ``aarch64``, ...
        cpu: CPU model.
        cores: logical CPU cores.
        memory_mb: physical memory.
        runtimes: runtime -> the backends that load on this device (fallback included).
        versions: tool and library versions on the device.
        transport: how the agent reaches the device (``local``, ``adb``, ``ssh``).
        emulated: the device's userland runs under an emulator (qemu-user) on a CPU of
            another architecture: its timings are labelled, never taken for a real board's.
    """

    device: str
    machine: str
    arch: str
    cpu: str
    cores: int
    memory_mb: int
    runtimes: Mapping[str, tuple[str, ...]]
    versions: Mapping[str, str] = field(default_factory=dict)
    transport: str = "local"
    emulated: bool = False

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["runtimes"] = {k: list(v) for k, v in self.runtimes.items()}
        d["versions"] = dict(self.versions)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Capabilities:
        return cls(
            device=d["device"],
            machine=d["machine"],
            arch=d["arch"],
            cpu=d["cpu"],
            cores=int(d["cores"]),
            memory_mb=int(d["memory_mb"]),
            runtimes={k: tuple(v) for k, v in d["runtimes"].items()},
            versions=dict(d.get("versions", {})),
            transport=d.get("transport", "local"),
            emulated=bool(d.get("emulated", False)),
        )

    def summary(self) -> str:
        """One line for titles: ``x86_64, AMD EPYC, 2 cores``."""
        return f"{self.arch}, {self.cpu}, {self.cores} cores"

    def tags(self) -> dict[str, str]:
        """Flat strings for tracking tags and tables."""
        return {
            "arch": self.arch,
            "cpu": self.cpu,
            "cores": str(self.cores),
            "memory_mb": str(self.memory_mb),
            "machine": self.machine,
            "transport": self.transport,
            "emulated": str(self.emulated).lower(),
            "runtimes": "; ".join(f"{rt}: {','.join(b)}" for rt, b in self.runtimes.items()),
        }
