"""The sha256s a cache entry is checked against: of a file, read in blocks, and of JSON data."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

__all__ = ["file_sha256", "json_sha256"]


def file_sha256(path: Path) -> str:
    """The file's sha256, read 1 MB at a time (an artifact or an evaluation split can be large)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def json_sha256(data: object) -> str:
    """The sha256 of ``data`` as JSON with sorted keys (``NaN`` allowed: a ranking holds the
    values it did not measure as ``NaN``), the same before it is written and after it is read."""
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
