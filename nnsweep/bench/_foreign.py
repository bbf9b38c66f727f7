"""Run one of nnsweep's modules under another Python interpreter.

Some runtimes live outside the project's environment: PyArmNN is Debian's
``python3-pyarmnn``, built for the system Python and its numpy. Such a runtime
declares its interpreter (:attr:`nnsweep.core.runtimes.RuntimeInfo.python`), and its
measuring process (and its probes) run there. That interpreter sees the
``nnsweep`` package alone — never the environment's site-packages, whose numpy
would not match the system's compiled extensions — through a directory that
holds only a link to the package.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["python_command"]


@contextlib.contextmanager
def python_command(python: str | None, module: str, *args: str) -> Iterator[tuple[list[str], dict[str, str] | None]]:
    """``(argv, env)`` that run ``python -m module args...`` with nnsweep importable.

    Args:
        python: the interpreter; ``None`` for the one running nnsweep (``env`` is then ``None``).
        module: a module of nnsweep to run.

    Example:
        >>> with python_command(None, "nnsweep.agents._probe", "host") as (argv, env):
        ...     argv[1:]
        ['-m', 'nnsweep.agents._probe', 'host']
    """
    # The paths, not where they lead: a venv's python links to the very interpreter it was made
    # from, yet it cannot see that interpreter's dist-packages (where PyArmNN is).
    if python is None or os.path.abspath(python) == os.path.abspath(sys.executable):
        yield [sys.executable, "-m", module, *args], None
        return
    package = Path(__file__).resolve().parent.parent  # .../nnsweep
    with tempfile.TemporaryDirectory(prefix="nnsweep-path-") as tmp:
        (Path(tmp) / "nnsweep").symlink_to(package, target_is_directory=True)
        # A copy of this process's environment minus Python's own search settings.
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        env["PYTHONPATH"] = tmp
        # -s: no user site-packages; the system's dist-packages stay (that is where the runtime is).
        yield [python, "-s", "-m", module, *args], env
