"""The one owner of the artifact key: what names the bytes a conversion produces.

An artifact's key is the full sha256 of

* the model's digest (architecture, weights, data; :class:`~nnsweep.models.ModelBundle`),
* the deployment configuration in canonical JSON (:meth:`DeploymentConfig.to_dict`) less
  the runtime's runtime-only knobs (:attr:`RuntimeInfo.runtime_only`, ``threads`` for
  every runtime): ``threads: [1, 2]`` converts once. Entries written while threads were
  in the key are simply never looked up again (their keys held them),
* the toolchain: Python, the machine, nnsweep's version and each package the runtime
  declares (:attr:`RuntimeInfo.packages`), read without importing them,
* a digest of nnsweep's converter sources, so an edited converter in a checkout
  rebuilds its artifacts instead of reusing what the old code made.

The cache (:mod:`nnsweep.artifacts.cache`) stores entries under this key; nothing else
builds one.
"""

from __future__ import annotations

import functools
import hashlib
import platform
from importlib import metadata
from pathlib import Path

from nnsweep.core import runtimes
from nnsweep.core.config import DeploymentConfig, canonical_json

__all__ = ["artifact_key", "cache_key", "conversion_fields", "toolchain_versions"]

_CONVERTERS = Path(__file__).resolve().parent.parent / "convert"


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


def artifact_key(model_digest: str, config: DeploymentConfig) -> tuple[str, dict[str, str]]:
    """The cache key of ``config``'s artifact, and the toolchain versions it includes."""
    toolchain = dict(_toolchain(config.runtime))
    return cache_key(model_digest, config, toolchain), toolchain


@functools.lru_cache(maxsize=32)
def _toolchain(runtime: str) -> tuple[tuple[str, str], ...]:
    versions = toolchain_versions(runtimes.get(runtime).packages)
    versions["converters"] = _converter_sources()
    return tuple(versions.items())


@functools.lru_cache(maxsize=1)
def _converter_sources() -> str:
    """A digest of nnsweep's converter code (``nnsweep/convert/*.py``)."""
    digest = hashlib.sha256()
    for source in sorted(_CONVERTERS.glob("*.py")):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    return digest.hexdigest()[:16]
