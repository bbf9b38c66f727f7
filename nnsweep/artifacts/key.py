"""The one owner of the artifact key: what names the bytes a conversion produces.

An artifact's key is the sha256 of the model's digest (architecture, weights, data), the
deployment configuration in canonical JSON less the runtime-only knobs
(:attr:`RuntimeInfo.runtime_only`: ``threads``, so ``threads: [1, 2]`` converts once), the
toolchain (Python, the machine, nnsweep's version, the runtime's packages, read without
importing them) and a digest of nnsweep's converter sources (an edited converter rebuilds
its artifacts). A *stage* (an intermediate result several artifacts share) is keyed here
too (:func:`stage_key`): the model's digest, the stage's name, the settings that change
its bytes and the same toolchain. Nothing else builds a key.
"""

from __future__ import annotations

import functools
import hashlib
import platform
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path

from nnsweep.core import runtimes
from nnsweep.core.config import DeploymentConfig, canonical_json

__all__ = [
    "artifact_key",
    "cache_key",
    "conversion_digest",
    "conversion_fields",
    "runtime_toolchain",
    "stage_key",
    "toolchain_versions",
]

# Every runtime's code and what they share (nnsweep/runtimes/<name>/, runtimes/common/): a
# converter imports its runner's helpers too, so the whole folder is digested.
_RUNTIMES = Path(__file__).resolve().parent.parent / "runtimes"


def toolchain_versions(packages: tuple[str, ...]) -> dict[str, str]:
    """Installed versions of ``packages`` plus Python's and nnsweep's (read without importing them)."""
    versions = {"python": platform.python_version(), "machine": platform.machine()}
    for name in ("nnsweep", *packages):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions


def cache_key(model_digest: str, config: DeploymentConfig, toolchain: dict[str, str]) -> str:
    """Full sha256 hex digest identifying one conversion."""
    text = canonical_json({"model": model_digest, "config": conversion_fields(config), "toolchain": toolchain})
    return hashlib.sha256(text.encode()).hexdigest()


def conversion_fields(config: DeploymentConfig) -> dict[str, object]:
    """``config`` as it enters the key: its fields less the runtime's runtime-only knobs."""
    fields = config.to_dict()
    for knob in runtimes.get(config.runtime).runtime_only:
        if knob not in fields:
            raise KeyError(f"{config.runtime}: runtime-only knob {knob!r} is not a DeploymentConfig field")
        del fields[knob]
    return fields


def conversion_digest(config: DeploymentConfig) -> str:
    """What makes two configurations of one model one conversion: :func:`conversion_fields`
    hashed, without the model and the toolchain (equal within a sweep). A trial at 2 threads
    joins the conversion of the same configuration at 1 thread under way."""
    return hashlib.sha256(canonical_json(conversion_fields(config)).encode()).hexdigest()


def artifact_key(model_digest: str, config: DeploymentConfig) -> tuple[str, dict[str, str]]:
    """The cache key of ``config``'s artifact, and the toolchain versions it includes."""
    toolchain = runtime_toolchain(config.runtime)
    return cache_key(model_digest, config, toolchain), toolchain


def stage_key(model_digest: str, stage: str, settings: Mapping[str, object], toolchain: Mapping[str, str]) -> str:
    """Full sha256 hex digest identifying one stage: ``stage`` of the model ``model_digest``
    with ``settings`` (JSON-ready: what changes the stage's bytes), made by ``toolchain``."""
    text = canonical_json(
        {"model": model_digest, "stage": stage, "settings": dict(settings), "toolchain": dict(toolchain)}
    )
    return hashlib.sha256(text.encode()).hexdigest()


def runtime_toolchain(runtime: str) -> dict[str, str]:
    """What an entry of ``runtime`` is built with: its packages' versions and nnsweep's converter sources."""
    return dict(_toolchain(runtime))


@functools.lru_cache(maxsize=32)
def _toolchain(runtime: str) -> tuple[tuple[str, str], ...]:
    versions = toolchain_versions(runtimes.get(runtime).packages)
    versions["converters"] = _converter_sources()
    return tuple(versions.items())


@functools.lru_cache(maxsize=1)
def _converter_sources() -> str:
    """A digest of nnsweep's converter code (every ``.py`` under ``nnsweep/runtimes/``)."""
    digest = hashlib.sha256()
    for source in sorted(_RUNTIMES.rglob("*.py")):
        digest.update(source.relative_to(_RUNTIMES).as_posix().encode() + b"\0" + source.read_bytes())
    return digest.hexdigest()[:16]
