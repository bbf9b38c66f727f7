"""The sweep's Optuna journal file, kept whole when a write to it fails.

A write that fails part way (a full disk) leaves a torn record at the end of Optuna's
``JournalFileBackend`` file; the next append joins it into a line that is not JSON,
which Optuna skips while last (a silently lost record) and refuses once followed
(``JSONDecodeError``: the sweep cannot resume). :class:`WholeRecords` takes a failed
append back to the file's size before it and raises
:class:`~nnsweep.core.errors.SweepStateNotWritten` naming the journal.
:func:`drop_torn_tail` removes what a killed process left, under the sweep's run lock (a
reader such as ``nnsweep report`` leaves the file alone). Damage anywhere else is
:class:`~nnsweep.core.errors.SweepStateDamaged` from :func:`open_journal`.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Generator
from pathlib import Path
from typing import Any

from optuna.storages.journal import JournalFileBackend

from nnsweep.core.errors import SweepStateDamaged, SweepStateNotWritten

__all__ = ["WholeRecords", "drop_torn_tail", "open_journal"]

log = logging.getLogger(__name__)


class WholeRecords(JournalFileBackend):
    """A journal file whose failed appends are taken back (see the module docstring).

    One process writes a sweep's journal (the run lock), and Optuna's ``JournalStorage``
    appends from one thread at a time, so the size read before an append is where that
    append starts.
    """

    def __init__(self, path: Path) -> None:
        super().__init__(str(path))
        self.path = path

    def read_logs(self, log_number_from: int) -> Generator[dict[str, Any], None, None]:
        """Optuna's reading, with a damaged line (not JSON, or without its newline, before
        others) as :class:`~nnsweep.core.errors.SweepStateDamaged` naming the file and the line."""
        read = 0
        try:
            for record in super().read_logs(log_number_from):
                read += 1
                yield record
        except ValueError as exc:  # json.JSONDecodeError, or Optuna's "Invalid log format."
            raise SweepStateDamaged(self.path, f"line {log_number_from + read + 1}", exc) from exc

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:  # the study's first record
            size = 0
        try:
            super().append_logs(logs)
        except OSError as exc:
            with contextlib.suppress(OSError):  # removing bytes needs no room
                os.truncate(self.path, size)
            raise SweepStateNotWritten(self.path, exc) from exc


def open_journal(path: Path) -> Any:
    """Optuna's ``JournalStorage`` on the journal at ``path`` (through :class:`WholeRecords`),
    its records replayed.

    Raises:
        SweepStateDamaged: a line is not a record, or a record is not one Optuna can apply
            (a key or value changed by hand or by a bad disk): named, where Optuna raised a
            bare ``JSONDecodeError``, ``KeyError``, ... or ``AssertionError`` ("Should not
            reach.", an operation code it does not know).
        OSError: the file could not be read (not damage).
    """
    import optuna

    try:
        return optuna.storages.JournalStorage(WholeRecords(path))
    except (SweepStateDamaged, OSError, MemoryError):
        raise
    except Exception as exc:  # replaying a file's records: what else fails there is the file's
        raise SweepStateDamaged(path, "a record Optuna cannot apply", f"{type(exc).__name__}: {exc}") from exc


def drop_torn_tail(path: Path) -> int:
    """Cut the journal at ``path`` after its last complete line; return the bytes dropped.

    Only for the process holding the sweep's run lock: another writer's append under way
    would look the same.
    """
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0
    if size == 0:
        return 0
    with open(path, "rb") as f:
        end = size
        while end > 0:  # read back from the end until a newline
            start = max(0, end - 65536)
            f.seek(start)
            chunk = f.read(end - start)
            newline = chunk.rfind(b"\n")
            if newline >= 0:
                end = start + newline + 1
                break
            end = start
    if end == size:
        return 0
    os.truncate(path, end)
    log.warning(
        "the sweep's journal %s ended in a record that was never completely written (%d bytes: a full disk "
        "or a kill while writing); dropped it, as Optuna would not read it",
        path,
        size - end,
    )
    return size - end
