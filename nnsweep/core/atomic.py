"""Atomic file writes: a reader sees the old file or the whole new one, never a torn one;
and whether a path the user gave can be made at all, checked before any work."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_path", "blocking_file"]


@contextlib.contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; on success it is renamed onto ``target``.

    Example:
        >>> import tempfile, pathlib
        >>> target = pathlib.Path(tempfile.mkdtemp()) / "out.txt"
        >>> with atomic_path(target) as tmp:
        ...     _ = tmp.write_text("done")
        >>> target.read_text()
        'done'
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def blocking_file(path: Path) -> Path | None:
    """The nearest of ``path`` and its folders that exists and is not a folder (so nothing
    can be made at ``path`` below it, nor ``path`` be a folder), or ``None``. A link to
    nothing counts as such a file."""
    for folder in (path, *path.parents):
        if folder.exists() or folder.is_symlink():
            return None if folder.is_dir() else folder
    return None
