"""Content-addressed artifact cache.

An entry's key is :func:`nnsweep.artifacts.key.artifact_key` (the full sha256 of the
model digest, the canonical deployment config and the toolchain). Entries are built in
a temporary directory and renamed into place, so a reader sees a whole entry or none. Each entry records the sha256 of
its artifact file; an entry whose file does not match is removed and rebuilt.

Layout::

    ROOT/artifacts/ab/abcdef.../model.pte   the artifact
    ROOT/artifacts/ab/abcdef.../meta.json   config, partition report, io, checksum
    ROOT/stages/                            intermediate results conversions share (:mod:`nnsweep.artifacts.stages`)
    ROOT/models/                            trained weights of built-in models
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nnsweep.artifacts.stages import StageStore
from nnsweep.core.artifact import IOSpec, PartitionReport
from nnsweep.core.atomic import blocking_file
from nnsweep.core.config import DeploymentConfig
from nnsweep.core.digests import file_sha256
from nnsweep.core.errors import CacheCorrupted, SpecError
from nnsweep.runtimes.common.converter import ConversionResult

__all__ = ["Artifact", "ArtifactCache", "PackedArtifact", "check_cache_dir", "default_cache_dir"]

log = logging.getLogger(__name__)

_META = "meta.json"


def default_cache_dir() -> Path:
    """``$NNSWEEP_CACHE``, else ``$XDG_CACHE_HOME/nnsweep``, else ``~/.cache/nnsweep``."""
    if os.environ.get("NNSWEEP_CACHE"):
        return Path(os.environ["NNSWEEP_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "nnsweep"


def check_cache_dir(path: Path, option: str, remedy: str) -> None:
    """Refuse, before any work, a cache folder that is a file or lies under one: a sweep
    found out when its first conversion wrote (three failed conversions and their pauses,
    then an infrastructure error), ``bench`` after converting.

    Raises:
        SpecError: naming ``option``; the message ends with ``remedy``.
    """
    blocking = blocking_file(path)
    if blocking is not None:
        what = "is not a folder" if blocking == path else f"lies under {str(blocking)!r}, which is not a folder"
        raise SpecError(option, f"{str(path)!r} {what}: {remedy}")


@dataclass(frozen=True)
class Artifact:
    """A converted model in the cache.

    ``key`` is its cache key, ``path`` the artifact file (``size_bytes``, ``sha256``),
    ``config`` the deployment it was built for, ``partitions`` where its ops run, ``io`` its
    input/output representation, ``convert_s`` the conversion's seconds, ``toolchain`` the
    versions it was built with. ``sidecars`` maps names to ``(file, sha256)`` of extra files
    that travel with it; ``estimates`` are compiler estimates for the target and
    ``model_notes`` notes that hold wherever it runs (also among ``partitions.notes``; see
    ConversionResult).
    """

    key: str
    path: Path
    config: DeploymentConfig
    partitions: PartitionReport
    io: IOSpec
    size_bytes: int
    sha256: str
    convert_s: float
    toolchain: dict[str, str]
    sidecars: dict[str, tuple[Path, str]] = field(default_factory=dict)
    estimates: dict[str, float] = field(default_factory=dict)
    model_notes: tuple[str, ...] = ()

    def meta(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "file": self.path.name,
            "config": self.config.to_dict(),
            "partitions": self.partitions.to_dict(),
            "io": self.io.to_dict(),
            "size_bytes": self.size_bytes,
            "sha256": self.sha256,
            "convert_s": self.convert_s,
            "toolchain": self.toolchain,
            "sidecars": {name: [path.name, sha] for name, (path, sha) in self.sidecars.items()},
            "estimates": dict(self.estimates),
            "model_notes": list(self.model_notes),
        }

    @classmethod
    def from_meta(cls, directory: Path, meta: dict[str, Any]) -> Artifact:
        return cls(
            key=meta["key"],
            path=directory / meta["file"],
            config=DeploymentConfig.from_dict(meta["config"]),
            partitions=PartitionReport.from_dict(meta["partitions"]),
            io=IOSpec.from_dict(meta["io"]),
            size_bytes=int(meta["size_bytes"]),
            sha256=meta["sha256"],
            convert_s=float(meta["convert_s"]),
            toolchain=dict(meta["toolchain"]),
            sidecars={name: (directory / file, sha) for name, (file, sha) in meta.get("sidecars", {}).items()},
            estimates={k: float(v) for k, v in meta.get("estimates", {}).items()},
            model_notes=tuple(str(n) for n in meta.get("model_notes", ())),
        )


@dataclass(frozen=True)
class PackedArtifact:
    """A cache entry as bytes: how an artifact converted on another machine reaches this
    machine's cache (:meth:`ArtifactCache.pack`, :meth:`ArtifactCache.unpack`).

    Args:
        key: the entry's cache key (computed with the converting machine's toolchain).
        files: file name in the entry -> its bytes (the artifact, its sidecars, ``meta.json``).
    """

    key: str
    files: dict[str, bytes]


class ArtifactCache:
    """Content-addressed store of converted models under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @property
    def models_dir(self) -> Path:
        """Where built-in models keep their trained weights."""
        return self.root / "models"

    @property
    def stages(self) -> StageStore:
        """The intermediate results of conversions, kept beside the artifacts."""
        return StageStore(self.root)

    def _entry(self, key: str) -> Path:
        return self.root / "artifacts" / key[:2] / key

    def get(self, key: str) -> Artifact | None:
        """The entry for ``key`` if present and intact; a corrupted entry is removed."""
        entry = self._entry(key)
        if not entry.exists():
            return None
        try:
            artifact = self._verify(entry, key)
        except CacheCorrupted as exc:
            log.warning("cache entry %s is corrupted (%s); rebuilding it", key[:12], exc)
            shutil.rmtree(entry, ignore_errors=True)
            return None
        return artifact

    def _verify(self, entry: Path, key: str) -> Artifact:
        try:
            meta = json.loads((entry / _META).read_text())
            artifact = Artifact.from_meta(entry, meta)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CacheCorrupted(f"unreadable {_META}: {exc}") from exc
        if artifact.key != key:
            raise CacheCorrupted(f"{_META} names key {artifact.key[:12]}")
        if not artifact.path.is_file():
            raise CacheCorrupted(f"{artifact.path.name} is missing")
        if artifact.path.stat().st_size != artifact.size_bytes or file_sha256(artifact.path) != artifact.sha256:
            raise CacheCorrupted(f"{artifact.path.name} does not match its checksum")
        for path, sha in artifact.sidecars.values():
            if not path.is_file() or file_sha256(path) != sha:
                raise CacheCorrupted(f"{path.name} is missing or does not match its checksum")
        return artifact

    def get_or_build(
        self,
        key: str,
        config: DeploymentConfig,
        toolchain: dict[str, str],
        build: Callable[[Path], ConversionResult],
    ) -> tuple[Artifact, bool]:
        """Return the artifact for ``key``, building it with ``build(tmp_dir)`` on a miss.

        Returns:
            The artifact and whether it came from the cache.
        """
        found = self.get(key)
        if found is not None:
            return found, True
        staging_root = self.root / "staging"
        staging_root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=staging_root, prefix=key[:12] + "-"))
        try:
            started = time.perf_counter()
            result = build(staging)
            elapsed = time.perf_counter() - started
            path = staging / result.filename
            artifact = Artifact(
                key=key,
                path=path,
                config=config,
                partitions=dataclasses.replace(
                    result.partitions, notes=(*result.partitions.notes, *result.model_notes)
                ),
                io=result.io,
                size_bytes=path.stat().st_size,
                sha256=file_sha256(path),
                convert_s=elapsed,
                toolchain=toolchain,
                sidecars={name: (staging / f, file_sha256(staging / f)) for name, f in result.sidecars.items()},
                estimates=dict(result.estimates),
                model_notes=tuple(result.model_notes),
            )
            (staging / _META).write_text(json.dumps(artifact.meta(), indent=1, sort_keys=True))
            entry = self._entry(key)
            entry.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.rename(staging, entry)
            except OSError:
                # Another process built the same entry first; theirs is as good as ours.
                found = self.get(key)
                if found is None:
                    raise
                return found, True
            return Artifact.from_meta(entry, artifact.meta()), False
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def pack(self, artifact: Artifact) -> PackedArtifact:
        """``artifact``'s entry as bytes, to send to another machine."""
        paths = [artifact.path, *(path for path, _ in artifact.sidecars.values())]
        files = {path.name: path.read_bytes() for path in paths}
        files[_META] = json.dumps(artifact.meta(), indent=1, sort_keys=True).encode()
        return PackedArtifact(artifact.key, files)

    def unpack(self, packed: PackedArtifact) -> Artifact:
        """Put an entry another machine converted into this cache (or find it there already).

        Raises:
            CacheCorrupted: the files do not match the checksums their ``meta.json`` records.
        """
        found = self.get(packed.key)
        if found is not None:
            return found
        staging_root = self.root / "staging"
        staging_root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=staging_root, prefix=packed.key[:12] + "-"))
        try:
            for name, data in packed.files.items():
                if Path(name).name != name or name in ("", ".", ".."):
                    raise CacheCorrupted(f"a packed artifact names the file {name[:80]!r}")
                (staging / name).write_bytes(data)
            self._verify(staging, packed.key)  # whole and intact before anyone can see it
            entry = self._entry(packed.key)
            entry.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):  # another process put the same entry first
                os.rename(staging, entry)
            found = self.get(packed.key)
            if found is None:
                raise CacheCorrupted(f"entry {packed.key[:12]} vanished after it was unpacked")
            return found
        finally:
            shutil.rmtree(staging, ignore_errors=True)
