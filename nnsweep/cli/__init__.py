"""The ``nnsweep`` command (:mod:`nnsweep.cli.main`); the console script is :func:`entry`."""

from nnsweep.cli.main import entry, main

__all__ = ["entry", "main"]
