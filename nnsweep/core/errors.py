"""The exception tree of nnsweep: each class says who must act.

::

    NnsweepError
    ├── SpecError(ValueError)           the user: bad input; abort before writing anything, exit 2
    ├── TrialError(RuntimeError)        this trial fails with its reason; the sweep goes on
    │   ├── ConversionError             the converter could not produce an artifact
    │   ├── BenchmarkError              the artifact did not load or run on the device
    │   └── MetricError                 a user metric failed on this deployment's outputs
    └── InfrastructureError(RuntimeError)   retry elsewhere; never recorded as a measurement
        ├── AgentLost                   a device agent or its node went away
        ├── CacheCorrupted              a cache entry failed its checksum (rebuilt, not trusted)
        └── ConversionStorageError      the disk failed a conversion (full, read-only): retried later
"""

from __future__ import annotations

import os
import re

__all__ = [
    "AgentLost",
    "BenchmarkError",
    "CacheCorrupted",
    "ConversionError",
    "ConversionStorageError",
    "InfrastructureError",
    "MetricError",
    "NnsweepError",
    "SpecError",
    "SweepStateDamaged",
    "SweepStateNotWritten",
    "TrialError",
    "clip",
    "excerpt",
    "first_line",
]


class NnsweepError(Exception):
    """Base class of every error nnsweep raises on purpose."""


class SpecError(NnsweepError, ValueError):
    """The user's input is invalid.

    Args:
        field: the option or field path that is wrong, as the user wrote it
            (``--runtime``, ``space.quant[2]``).
        message: what was wrong and what is allowed.
    """

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class TrialError(NnsweepError, RuntimeError):
    """One trial failed; the sweep records the reason and continues."""


class ConversionError(TrialError):
    """A converter could not turn the model into an artifact for this configuration."""


class BenchmarkError(TrialError):
    """An artifact failed to load, run, or produce usable outputs."""


class MetricError(TrialError):
    """A user metric raised, or gave no finite number, on one deployment's outputs."""


class InfrastructureError(NnsweepError, RuntimeError):
    """Something around the trial failed; the trial is retried, never recorded."""


class AgentLost(InfrastructureError):
    """A device agent (or the node it lived on) is gone."""


class CacheCorrupted(InfrastructureError):
    """A cache entry does not match its recorded checksum."""


class ConversionStorageError(InfrastructureError):
    """Writing a conversion's files failed (a full disk, a read-only or vanished folder).

    Not the configuration's fault: the trial is retried later, never recorded as failed.

    Args:
        message: what failed, naming the path.
        path: the file or folder that could not be written.
    """

    def __init__(self, message: str, path: object = None) -> None:
        super().__init__(message)
        self.path = path


class SweepStateNotWritten(NnsweepError, OSError):
    """A sweep's state (``.nnsweep/NAME/``: its run lock, its study journal) could not be
    written (a full disk, a read-only folder). An ``OSError`` still (errno, strerror, the
    path), so code that handles a failed write handles it; the message says what is kept
    and what to do.

    Args:
        path: the file or folder.
        cause: the write's own error.
    """

    def __init__(self, path: object, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause), str(path))

    def __str__(self) -> str:
        return (
            f"cannot write the sweep's state at {self.filename}: {self.strerror}; what it recorded "
            "before is kept: make room and run the sweep again"
        )


class SweepStateDamaged(NnsweepError, ValueError):
    """A sweep's state (``.nnsweep/NAME/``) holds something no run wrote whole: a study
    journal line that is not a record, before others (a torn tail is mended, not this).

    Args:
        path: the file.
        where: which part of it (``line 3``).
        cause: what reading it said.
    """

    def __init__(self, path: object, where: str, cause: object) -> None:
        self.path = path
        super().__init__(
            f"the sweep's study at {path} is damaged ({where}: {cause}): restore it from a copy, "
            f"or move {os.path.dirname(str(path))} aside to start the sweep again from nothing"
        )


MAX_EXCERPT = 60  # characters of an offending value quoted in a message


def excerpt(value: object, limit: int = MAX_EXCERPT) -> str:
    """A short ``repr`` of ``value`` for an error message (at most ``limit`` characters).

    Bounded in time as well as length: nested containers are cut at a few items and
    levels before anything is rendered, so an alias bomb costs nothing to quote.
    """
    import reprlib

    r = reprlib.Repr()
    r.maxlevel, r.maxlist, r.maxtuple, r.maxdict, r.maxset = 2, 4, 4, 3, 4
    r.maxstring, r.maxother, r.maxlong = limit, limit, limit
    text = r.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def clip(text: object, limit: int = MAX_EXCERPT) -> str:
    """``str(text)`` clipped to ``limit`` characters: a mapping key as part of a field path, or any text."""
    shown = str(text)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def first_line(exc: BaseException, limit: int = 300) -> str:
    """``Type: first non-blank line of the message`` of ``exc``, clipped to ``limit`` characters:
    a toolchain's exception as one line of a conversion's reason (its traceback stays on the
    exception for ``-v``).

    Terminal colour codes are dropped. A message that ends in an exception summary (as
    ``torch.onnx`` writes one: its first line says only which step failed, then "Next
    steps:") gives its first sentence and the summary's innermost cause instead, the part a
    user can act on: ``ConversionError: Failed to convert ... (AssertionError: only 4D
    query, key, and value are supported)``.
    """
    text = _ANSI_CODE.sub("", str(exc))
    lines = [part.strip() for part in text.splitlines() if part.strip()]
    line = lines[0] if lines else ""
    cause = _summarized_cause(lines)
    if cause:
        line = f"{line.split('. ')[0].rstrip('.')} ({cause})"
    return clip(f"{type(exc).__name__}: {line}", limit)


_ANSI_CODE = re.compile(r"\x1b\[[0-9;]*m")
_SUMMARY_HEADING = "## exception summary"
_SUMMARY_LINE = re.compile(r"<class '(?:[\w.]+\.)?(\w+)'>: (.+)")


def _summarized_cause(lines: list[str]) -> str:
    """The first ``<class 'pkg.Type'>: message`` line after an "Exception summary" heading, as
    ``Type: message``; empty when the message has no such summary."""
    try:
        start = [line.lower() for line in lines].index(_SUMMARY_HEADING)
    except ValueError:
        return ""
    for line in lines[start + 1 :]:
        found = _SUMMARY_LINE.match(line)
        if found:
            return f"{found.group(1)}: {found.group(2)}"
    return ""
