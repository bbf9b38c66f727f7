"""What a device can do, as its agent reports it."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Capabilities", "converter_versions", "refuse_version_skew"]


@dataclass(frozen=True)
class Capabilities:
    """A device's hardware and the runtimes and backends that actually load there.

    Args:
        device, machine: its name in sweeps, and the physical machine (measurements on one
            machine never overlap each other or conversions there).
        arch, cpu, cores, memory_mb, versions: hardware and tool versions.
        runtimes: runtime -> the backends that load here (fallback included).
        transport: how the agent reaches it (``local``, ``adb``, ``ssh``).
        emulated: userland under qemu-user: timings labelled, never a real board's.
        left_out: runtimes whose measuring process would not fit ``memory_mb`` -> MB needed.
        refused: runtimes the host will not send artifacts to -> why
            (:func:`refuse_version_skew`). Neither is in ``runtimes``.
        int8_flags: CPU flags deciding how int8 runs (:func:`nnsweep.core.options.int8_flags`);
            ``None`` where unknown (emulated CPU, NPU, older probe).
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
    left_out: Mapping[str, int] = field(default_factory=dict)
    refused: Mapping[str, str] = field(default_factory=dict)
    int8_flags: tuple[str, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["runtimes"] = {k: list(v) for k, v in self.runtimes.items()}
        d["versions"] = dict(self.versions)
        d["left_out"] = dict(self.left_out)
        d["refused"] = dict(self.refused)
        d["int8_flags"] = None if self.int8_flags is None else list(self.int8_flags)
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
            left_out={k: int(v) for k, v in d.get("left_out", {}).items()},
            refused={k: str(v) for k, v in d.get("refused", {}).items()},
            int8_flags=None if d.get("int8_flags") is None else tuple(str(f) for f in d["int8_flags"]),
        )

    def summary(self) -> str:
        """One line for titles: ``x86_64, AMD EPYC, 2 cores`` (``aarch64 (emulated), ...`` under qemu)."""
        arch = f"{self.arch} (emulated)" if self.emulated else self.arch
        return f"{arch}, {self.cpu}, {self.cores} cores"

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
            "int8_flags": "unknown" if self.int8_flags is None else ",".join(self.int8_flags) or "none",
        }


# What a board keeps for itself besides a runtime's measuring process (the agent's own Ray
# worker, the OS); the processes' peaks are the registry's (RuntimeInfo.measure_peak_mb,
# measured on the emulated Cortex-A72 board: benchmarks/results/arm_sim.md).
MEASURE_HEADROOM_MB = 256


def measure_peak_mb(runtime: str, measured_as: str = "") -> int:
    """The peak memory (MB) of ``runtime``'s measuring process, by the runner ``measured_as``
    (:attr:`~nnsweep.core.runtimes.RuntimeInfo.measure_peak_mb`); 0 when not known."""
    from nnsweep.core import runtimes

    if runtime not in runtimes.names():
        return 0
    return runtimes.get(runtime).measure_peak_mb.get(measured_as, 0)


def runtimes_that_fit(
    runtimes: Mapping[str, tuple[str, ...]], memory_mb: int, measured_as: Mapping[str, str] | None = None
) -> tuple[dict[str, tuple[str, ...]], dict[str, int]]:
    """Split ``runtimes`` into those a device with ``memory_mb`` can measure and those it cannot.

    ``measured_as`` names the runner of a runtime that measures another way here (its key in
    :attr:`~nnsweep.core.runtimes.RuntimeInfo.measure_peak_mb`; ExecuTorch's torch-free one
    on a lite agent).

    Returns:
        ``(kept, dropped)``: ``dropped`` maps each runtime left out to the memory (MB) its
        measuring process needs. ``memory_mb <= 0`` (unknown) keeps everything.

    Example:
        >>> kept, dropped = runtimes_that_fit({"torch": ("x86",)}, memory_mb=64)
        >>> kept, dropped["torch"] > 64
        ({}, True)
    """
    kept: dict[str, tuple[str, ...]] = {}
    dropped: dict[str, int] = {}
    for runtime, backends in runtimes.items():
        need = measure_peak_mb(runtime, (measured_as or {}).get(runtime, "")) + MEASURE_HEADROOM_MB
        if memory_mb > 0 and need > memory_mb:
            dropped[runtime] = need
        else:
            kept[runtime] = backends
    return kept, dropped


def _same_release() -> dict[str, str]:
    """Each runtime whose artifacts only the same release reads, with the package whose version
    the device must share with the converting host (:attr:`RuntimeInfo.same_release`)."""
    from nnsweep.core import runtimes

    return {name: info.same_release for name in runtimes.names() if (info := runtimes.get(name)).same_release}


def converter_versions() -> dict[str, str]:
    """This machine's versions of the packages a device must share with it (those installed)."""
    from importlib import metadata

    found = {}
    for package in set(_same_release().values()):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return found


def refuse_version_skew(caps: Capabilities, host_versions: Mapping[str, str]) -> Capabilities:
    """``caps`` without the runtimes whose version differs from the host's converter.

    A lite agent's torch-free ExecuTorch reports the version of the libraries it links;
    a board installed from another checkout can hold another release than the host.

    Example:
        >>> caps = Capabilities("b", "b", "aarch64", "A72", 4, 1024, {"executorch": ("portable",)},
        ...                     versions={"executorch": "1.3.1"})
        >>> refuse_version_skew(caps, {"executorch": "1.5.1"}).refused["executorch"]
        'the host converts with executorch 1.5.1, the device runs 1.3.1'
    """
    refused = dict(caps.refused)
    for runtime, package in _same_release().items():
        host, device = host_versions.get(package), caps.versions.get(package)
        if runtime in caps.runtimes and host and device and host != device:
            refused[runtime] = f"the host converts with {package} {host}, the device runs {device}"
    if refused == dict(caps.refused):
        return caps
    runtimes = {k: v for k, v in caps.runtimes.items() if k not in refused}
    return dataclasses.replace(caps, runtimes=runtimes, refused=refused)
