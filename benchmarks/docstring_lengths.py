"""Count the package's docstrings longer than a limit (the style's target: none over 15 lines).

Usage: .venv/bin/python benchmarks/docstring_lengths.py [--limit 15] [--root nnsweep] [--list]
Prints the count, and with --list each docstring's path, line, owner and length, longest first.
The counting is the layout test's (``tests/test_layout.py``), which keeps the package at 0.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_layout import long_docstrings  # noqa: E402  (the test owns the rule)

__all__ = ["main"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=15)
    parser.add_argument("--root", default="nnsweep")
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args()
    found = sorted(
        (lines, str(path.relative_to(ROOT)), line, owner)
        for path in sorted((ROOT / args.root).rglob("*.py"))
        for lines, line, owner in long_docstrings(path.read_text(encoding="utf-8"), args.limit)
    )
    if args.list:
        for lines, path, lineno, owner in reversed(found):
            sys.stdout.write(f"{lines:4d}  {path}:{lineno}  {owner}\n")
    sys.stdout.write(f"{len(found)} docstrings over {args.limit} lines under {args.root}/\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
