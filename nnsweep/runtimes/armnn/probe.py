"""Arm NN's backends here, asked of PyArmNN in the interpreter it is built for."""

from __future__ import annotations

import json
import subprocess

__all__ = ["backends"]


def backends(versions: dict[str, str]) -> tuple[str, ...] | None:
    """The backends PyArmNN offers (``None``: no PyArmNN for the system Python)."""
    from nnsweep.bench import python_command
    from nnsweep.core import runtimes

    python = runtimes.get("armnn").python
    try:
        with python_command(python, "nnsweep.runtimes.armnn.runner", "backends") as (argv, env):
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
