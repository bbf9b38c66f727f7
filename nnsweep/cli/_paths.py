"""Whether a path the user gave can be written: checked before any work is done."""

from __future__ import annotations

from pathlib import Path

__all__ = ["blocking_file"]


def blocking_file(path: Path) -> Path | None:
    """The nearest of ``path`` and its folders that exists and is not a folder (so nothing
    can be made at ``path`` below it, nor ``path`` be a folder), or ``None``. A link to
    nothing counts as such a file."""
    for folder in (path, *path.parents):
        if folder.exists() or folder.is_symlink():
            return None if folder.is_dir() else folder
    return None
