"""Count the package's docstrings longer than a limit (the style's target: none over 15 lines).

Usage: python benchmarks/docstring_lengths.py [--limit 15] [--root nnsweep] [--list]
Prints the count, and with --list each docstring's path, line, owner and length, longest first.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

__all__ = ["long_docstrings"]


def long_docstrings(root: Path, limit: int) -> list[tuple[int, str, int, str]]:
    """(lines, path, line number, owner) of every docstring over ``limit`` lines under ``root``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            doc = ast.get_docstring(node, clean=True)
            if doc is None:
                continue
            lines = len(doc.splitlines())
            if lines > limit:
                first = node.body[0]
                owner = getattr(node, "name", "<module>")
                found.append((lines, str(path.relative_to(ROOT)), first.lineno, owner))
    return sorted(found, reverse=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=15)
    parser.add_argument("--root", default="nnsweep")
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args()
    found = long_docstrings(ROOT / args.root, args.limit)
    if args.list:
        for lines, path, lineno, owner in found:
            sys.stdout.write(f"{lines:4d}  {path}:{lineno}  {owner}\n")
    sys.stdout.write(f"{len(found)} docstrings over {args.limit} lines under {args.root}/\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
