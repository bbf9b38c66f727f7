"""torch's file writers, made to fail as Python's do when the disk is full.

``torch.save``, ``torch.export.save`` and ``torch.jit.save`` write through torch's C++ zip
writer. When the disk fills under it, torch 2.14 fails inside that writer's destructor
(``unexpected pos ...`` at ``inline_container.cc``): ``torch.export.save`` and
``torch.jit.save`` then end the whole process (``std::terminate``, SIGABRT), and
``torch.save`` raises a ``RuntimeError`` that names no disk. A conversion worker killed so
was retried as a lost agent three times, and the sweep ended saying the agent was lost,
never that the disk was full (``tests/test_through_memory.py`` keeps the abort on record).

Serialized into memory first, the one write to disk is Python's, which raises
``OSError`` (``ENOSPC``) as every other write nnsweep makes does: a conversion reports a
storage error, which the sweep retries and then names.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

__all__ = ["save_through_memory"]


def save_through_memory(path: Path, save: Callable[[IO[bytes]], Any]) -> None:
    """Call ``save(buffer)`` on an in-memory buffer, then write its bytes to ``path``.

    Holds the serialized file in memory once (an artifact or a stage: megabytes).

    Raises:
        OSError: the file cannot be written (``ENOSPC`` for a full disk).

    Example:
        >>> import pathlib, tempfile
        >>> target = pathlib.Path(tempfile.mkdtemp()) / "out.bin"
        >>> save_through_memory(target, lambda f: f.write(b"weights"))
        >>> target.read_bytes()
        b'weights'
    """
    buffer = io.BytesIO()
    save(buffer)
    with open(path, "wb") as out:
        out.write(buffer.getbuffer())
