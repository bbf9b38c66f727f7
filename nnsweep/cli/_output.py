"""What every command's outcome looks like: its exit code and, on failure, one line on stderr."""

from __future__ import annotations

import sys

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
