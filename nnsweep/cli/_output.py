"""What every command's outcome looks like: its exit code and, on failure, one line on stderr."""

from __future__ import annotations

import sys
from typing import Any

from nnsweep.core.errors import SpecError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def _one_line(text: str, limit: int = 400) -> str:
    """The first line of ``text``, clipped: what an error on stderr shows."""
    lines = text.strip().splitlines()
    line = lines[0] if lines else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _usage_error(exc: SpecError, options: dict[str, str]) -> int:
    """A bad input, as one line on stderr naming what the user typed (``options``: field -> option)."""
    field = options.get(exc.field, exc.field)
    sys.stderr.write(f"nnsweep: error: {_one_line(f'{field}: {exc.message}', 600)}\n")
    return EXIT_USAGE


class Status:
    """What a long command is doing, on stderr: on a terminal one transient line (with
    a spinner and the elapsed time while ``ticking``), otherwise plain lines (CI logs)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self._shown: Any = None

    def line(self, text: str, *, ticking: bool = True, tty_only: bool = False) -> None:
        """Show ``text``. ``ticking`` updates the elapsed time from a thread of rich's:
        pass ``False`` before forking a measurement from this process (it must have no thread).
        ``tty_only``: a step not worth a log line (an error right after it stays one line)."""
        if not self.enabled or (tty_only and not self.tty):
            return
        if not self.tty:
            sys.stderr.write(text + "\n")
            sys.stderr.flush()
            return
        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.clear()
        columns = [SpinnerColumn(), TextColumn("{task.description}")] + ([TimeElapsedColumn()] if ticking else [])
        self._shown = Progress(*columns, console=Console(stderr=True), transient=True, auto_refresh=ticking)
        self._shown.add_task(text, total=None)
        self._shown.start()

    def clear(self) -> None:
        if self._shown is not None:
            self._shown.stop()
            self._shown = None
