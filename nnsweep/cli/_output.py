"""What every command's outcome looks like: its exit code, its result on stdout (and
nothing else there), and on failure one line on stderr."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from nnsweep.core.errors import SpecError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


_RESULTS: list[TextIO] = []  # the stream of the command running now (see results_apart)


def results() -> TextIO:
    """Where a command writes its result: standard output, kept apart from what libraries print."""
    return _RESULTS[-1] if _RESULTS else sys.stdout


@contextlib.contextmanager
def results_apart() -> Iterator[None]:
    """While a command works, everything else written to stdout goes to stderr.

    Standard output holds the command's result alone (``--json`` is read by programs), but
    the toolchains print there: litert-torch's quantizer prints a line per ReLU it cannot
    fuse, ONNX Runtime's calibrators print progress. So ``sys.stdout`` points at stderr,
    and when it is the process's file descriptor 1, that descriptor does too (native code
    and child processes write there); :func:`results` is the original stdout.
    """
    original = sys.stdout
    try:
        is_fd1 = original.fileno() == 1
    except (AttributeError, OSError, ValueError):  # a stream without a descriptor (e.g. under pytest's capsys)
        is_fd1 = False
    saved = None
    stream: TextIO = original
    if is_fd1:
        original.flush()
        saved = os.dup(1)
        os.dup2(2, 1)
        stream = open(saved, "w", encoding=original.encoding, errors=original.errors, closefd=False)  # noqa: SIM115
    _RESULTS.append(stream)
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stdout = original
        _RESULTS.pop()
        stream.flush()
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)


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
