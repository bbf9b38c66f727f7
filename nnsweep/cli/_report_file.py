"""Where the HTML report goes and writing it (``run`` at the end of a sweep, ``report``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _report_path(spec: Any, given: Path | None) -> Path:
    return given if given is not None else Path("reports") / f"{spec.name}.html"


def _publish_report(
    spec: Any,
    given: Path | None,
    tracker: Any,
    *,
    devices: Any = None,
    ui_url: str | None = None,
    cache_dir: Path | None = None,
) -> Path:
    from nnsweep.report.html import DEFAULT_UI_URL, publish_report

    path = _report_path(spec, given)
    return publish_report(spec, path, tracker, devices=devices, ui_url=ui_url or DEFAULT_UI_URL, cache_dir=cache_dir)
