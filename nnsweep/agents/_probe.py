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
import subprocess
import sys
from importlib import metadata

from nnsweep.agents._arm_cpu import cores_from_sysfs, describe_cores
from nnsweep.agents._capabilities import Capabilities, runtimes_that_fit
from nnsweep.agents._emulation import detect as detect_emulation
from nnsweep.agents._emulation import qemu_cpu

__all__ = [
    "armnn_backends",
    "executorch_backends",
    "litert_backends",
    "onnxruntime_backends",
    "probe",
    "torch_backends",
]


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


def executorch_backends(versions: dict[str, str]) -> tuple[str, ...] | None:
    from nnsweep.bench.runners.executorch import torch_free

    names = {"XnnpackBackend": "xnnpack"}
    if torch_free():
        from nnsweep.bench.runners import _etlite

        try:
            library = _etlite.find()
            registered = set(_etlite.backends(library.load()))
        except _etlite.EtLiteUnavailable:
            return None
        # The executorch wheel's own libraries, without its Python package.
        versions["executorch"] = library.version
        versions["executorch-runner"] = f"nnsweep etlite (torch-free; ExecuTorch {library.version} libraries)"
        return (*(name for rid, name in names.items() if rid in registered), "portable")
    from nnsweep.bench.runners.executorch import bindings

    try:
        registered = set(bindings()._get_registered_backend_names())
    except ImportError:
        return None
    return (*(name for rid, name in names.items() if rid in registered), "portable")


def onnxruntime_backends(versions: dict[str, str]) -> tuple[str, ...] | None:
    try:
        import onnxruntime

        from nnsweep.bench.runners.onnxruntime import PROVIDERS
    except ImportError:
        return None

    available = set(onnxruntime.get_available_providers())
    found = [name for name, provider in PROVIDERS.items() if provider in available and name != "cpu"]
    return (*found, "cpu")


def torch_backends(versions: dict[str, str]) -> tuple[str, ...] | None:
    try:
        import torch
    except ImportError:
        return None
    engines = set(torch.backends.quantized.supported_engines)
    return tuple(e for e in ("x86", "fbgemm", "qnnpack", "onednn") if e in engines)


def litert_backends(versions: dict[str, str]) -> tuple[str, ...] | None:
    try:
        from ai_edge_litert.interpreter import Interpreter  # noqa: F401
    except ImportError:
        return None
    # XNNPACK is LiteRT's default delegate, built into every ai-edge-litert wheel.
    return ("xnnpack", "cpu")


def armnn_backends(versions: dict[str, str]) -> tuple[str, ...] | None:
    """Arm NN's backends here, asked of PyArmNN in the interpreter it is built for."""
    from nnsweep.bench._foreign import python_command
    from nnsweep.core import runtimes

    python = runtimes.get("armnn").python
    try:
        with python_command(python, "nnsweep.bench.runners.armnn", "backends") as (argv, env):
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None  # no such interpreter here: no Arm NN
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return None  # PyArmNN is not installed for it
    found = json.loads(lines[-1])
    # The release (20.08) where the package manager knows it; the library's own version
    # (22.0.0 in 20.08, the soname's major) is no release number, and is kept apart.
    versions["armnn"] = str(found.get("release") or f"unknown release (library {found['version']})")
    versions["armnn-library"] = str(found["version"])
    return tuple(found["backends"]) or None


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
    measured_as = {"executorch": "executorch-torch-free"} if "executorch-runner" in versions else {}
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
