"""The stage store: intermediate results of conversions, kept in the artifact cache.

A conversion's slow part is often shared with other configurations of the same model
(ExecuTorch's quantized program does not depend on backend order or partition limits).
A converter asks its :class:`~nnsweep.runtimes.common.converter.Stages` for a stage by name and settings;
each is kept under ``ROOT/stages/<stage>/ab/<key>/``, keyed by
:func:`nnsweep.artifacts.key.stage_key`, with ``meta.json`` holding the key, settings,
toolchain and each file's sha256. Entries are built in a temporary directory on the same
filesystem and renamed into place, so a reader sees a whole entry or none; a builder that
loses the rename uses the winner's. An entry whose files fail their checksums is removed
with a warning and rebuilt.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from nnsweep.artifacts.key import runtime_toolchain, stage_key
from nnsweep.core.config import canonical_json
from nnsweep.core.digests import file_sha256
from nnsweep.core.errors import CacheCorrupted
from nnsweep.runtimes.common.converter import Stages

__all__ = ["CachedStages", "StageStore"]

log = logging.getLogger(__name__)

_META = "meta.json"
_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")


class StageStore:
    """Stages under ``root/stages``, shared by every process that uses the same cache root."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def entry(self, stage: str, key: str) -> Path:
        """Where the entry of ``stage`` with ``key`` lives (whether or not it exists)."""
        if not _NAME.fullmatch(stage):
            raise ValueError(f"a stage name is lower-case letters, digits and ._-, got {stage!r}")
        return self.root / "stages" / stage / key[:2] / key

    def for_model(self, model_digest: str, runtime: str) -> CachedStages:
        """The store as one conversion's :class:`~nnsweep.runtimes.common.converter.Stages`: stages of the model
        ``model_digest`` made with ``runtime``'s toolchain."""
        return CachedStages(self, model_digest, runtime_toolchain(runtime))

    def get(self, stage: str, key: str) -> Path | None:
        """The entry's directory if present and intact; a damaged entry is removed (with a warning)."""
        entry = self.entry(stage, key)
        if not entry.exists():
            return None
        try:
            _verify(entry, key)
        except CacheCorrupted as exc:
            log.warning("stage %s entry %s is corrupted (%s); rebuilding it", stage, key[:12], exc)
            shutil.rmtree(entry, ignore_errors=True)
            return None
        return entry

    def get_or_build(
        self, stage: str, key: str, build: Callable[[Path], None], meta: Mapping[str, object] | None = None
    ) -> tuple[Path, bool]:
        """The entry of ``stage`` with ``key``, built by ``build(empty_dir)`` on a miss.

        Args:
            meta: JSON-ready facts recorded beside the checksums (settings, toolchain).

        Returns:
            The entry's directory and whether it was already there (or another process's).
        """
        found = self.get(stage, key)
        if found is not None:
            return found, True
        staging_root = self.root / "staging"
        staging_root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=staging_root, prefix=f"stage-{key[:12]}-"))
        try:
            build(staging)
            files = {
                str(p.relative_to(staging)): [p.stat().st_size, file_sha256(p)]
                for p in sorted(staging.rglob("*"))
                if p.is_file()
            }
            record = {"key": key, "stage": stage, "files": files, **dict(meta or {})}
            (staging / _META).write_text(canonical_json(record))
            entry = self.entry(stage, key)
            entry.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.rename(staging, entry)
            except OSError:
                # Another process built the same stage first; theirs is as good as ours.
                found = self.get(stage, key)
                if found is None:
                    raise
                return found, True
            return entry, False
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def _verify(entry: Path, key: str) -> None:
    try:
        meta = json.loads((entry / _META).read_text())
        files = {str(name): (int(size), str(sha)) for name, (size, sha) in meta["files"].items()}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CacheCorrupted(f"unreadable {_META}: {exc}") from exc
    if meta.get("key") != key:
        raise CacheCorrupted(f"{_META} names another key")
    present = {str(p.relative_to(entry)) for p in entry.rglob("*") if p.is_file()} - {_META}
    if present != set(files):
        raise CacheCorrupted(f"files {sorted(present ^ set(files))[:3]} are missing or unexpected")
    for name, (size, sha) in files.items():
        path = entry / name
        if path.stat().st_size != size or file_sha256(path) != sha:
            raise CacheCorrupted(f"{name} does not match its checksum")


class CachedStages(Stages):
    """One model's stages made with one runtime's toolchain, kept in a :class:`StageStore`."""

    def __init__(self, store: StageStore, model_digest: str, toolchain: Mapping[str, str]) -> None:
        self.store = store
        self.model_digest = model_digest
        self.toolchain = dict(toolchain)
        self.hits: list[str] = []  # the stages this conversion found built, in order (for logs and tests)

    @contextlib.contextmanager
    def stage(self, name: str, settings: Mapping[str, object], build: Callable[[Path], None]) -> Iterator[Path]:
        key = stage_key(self.model_digest, name, settings, self.toolchain)
        meta = {"model": self.model_digest, "settings": dict(settings), "toolchain": self.toolchain}
        entry, hit = self.store.get_or_build(name, key, build, meta)
        if hit:
            self.hits.append(name)
        log.debug("stage %s %s: %s", name, key[:12], "reused" if hit else "built")
        yield entry
