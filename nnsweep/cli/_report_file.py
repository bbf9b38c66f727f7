"""Where the HTML report goes and writing it (``run`` at the end of a sweep, ``report``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nnsweep.core.atomic import blocking_file
from nnsweep.core.errors import InfrastructureError, SpecError


def _report_path(spec: Any, given: Path | None) -> Path:
    return given if given is not None else Path("reports") / f"{spec.name}.html"


def check_report_path(spec: Any, given: Path | None, option: str) -> None:
    """Refuse, before any work, a report path that cannot be a file: a folder (``--out ''``
    is the current one) or a path under a file. ``run`` found out after the whole sweep and
    ``report`` said "File exists" or named its temporary file, each with exit 1.

    Raises:
        SpecError: naming ``option`` (for the default path, the path it stands for).
    """
    path = _report_path(spec, given)
    named = option if given is not None else f"{option} (default {path})"
    if path.is_dir():
        raise SpecError(
            named, f"{str(given or path)!r} is a folder: give the HTML file's path, e.g. {path / (spec.name + '.html')}"
        )
    blocking = blocking_file(path.parent)
    if blocking is not None:
        hint = "" if given is not None else f": give another path with {option}"
        raise SpecError(named, f"{str(path)!r} lies under {str(blocking)!r}, which is not a folder{hint}")


def _publish_report(
    spec: Any,
    given: Path | None,
    tracker: Any,
    *,
    devices: Any = None,
    ui_url: str | None = None,
    cache_dir: Path | None = None,
) -> Path:
    """Write the report (and attach it to the tracking runs); return its path.

    Raises:
        ReportNotWritten: the file could not be written (a full disk, a read-only folder);
            the sweep's trials are untouched.
    """
    from nnsweep.report.html import DEFAULT_UI_URL, publish_report

    path = _report_path(spec, given)
    try:
        return publish_report(
            spec, path, tracker, devices=devices, ui_url=ui_url or DEFAULT_UI_URL, cache_dir=cache_dir
        )
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise ReportNotWritten(f"cannot write the report at {exc.filename or path}: {reason}") from exc


class ReportNotWritten(InfrastructureError):
    """The HTML report could not be written; the trials it shows are kept in the study."""
