"""The ``nnsweep`` command: the top parser, logging, and what every outcome exits with.

Each subcommand is a module of this package, listed in :data:`COMMANDS`: its
``add_parser(subparsers)`` defines its options and its ``run(args, cache_dir)``
is its code. This package is the only one that reads environment variables and
configures logging. Heavy libraries are imported inside the commands' code, so
``nnsweep --help`` and argument errors stay instant.

Exit codes: 0 success · 1 the work failed (a conversion or benchmark) · 2 bad input.
Whatever goes wrong ends in one line on stderr; ``-v`` adds the traceback of an
unexpected error. Global options (``-v``, ``--cache-dir``) go before or after the
subcommand.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from nnsweep.cli import agent, bench, best, devices, report, run, sensitivity, ui
from nnsweep.cli._args import _global_options, _Parser, _SubParser
from nnsweep.cli._output import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, _one_line, _usage_error, results_apart
from nnsweep.cli.bench import _BENCH_OPTIONS
from nnsweep.core.errors import NnsweepError, SpecError

__all__ = ["COMMANDS", "entry", "main"]

log = logging.getLogger("nnsweep")

# Every subcommand and its module, in the order ``nnsweep --help`` lists them.
COMMANDS: dict[str, ModuleType] = {
    "bench": bench,
    "sensitivity": sensitivity,
    "run": run,
    "best": best,
    "report": report,
    "ui": ui,
    "devices": devices,
    "agent": agent,
}


def _build_parser() -> _Parser:
    parser = _Parser(
        prog="nnsweep",
        description="Find, for every target device, the best way to deploy a PyTorch model.",
    )
    _global_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_SubParser)
    sub.required = True
    for command in COMMANDS.values():
        command.add_parser(sub)
    return parser


def _setup_logging(verbosity: int) -> None:
    level = logging.WARNING if verbosity == 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    # torch warns about its own pytree registrations on every import of torchao; not ours to act on.
    logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)
    if verbosity == 0:
        # MLflow says at INFO that it creates a new database's tables: nothing to act on; and it logs
        # each failed database write with its traceback (dozens of lines, again at every retry), where
        # nnsweep's tracker says once, in one line, that tracking failed and what it keeps (-v shows both).
        logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``nnsweep`` command; returns the exit code.

    Every outcome is an exit code and, on failure, one line on stderr: 2 for bad
    input (naming the option or spec field), 1 for failed work and for any
    unexpected error (``nnsweep: error: <Type>: <first line>``; ``-v`` adds the
    traceback), 130 on Ctrl-C.
    """
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error argparse has already printed in one line
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    _setup_logging(args.verbose)
    # With an http(s) tracking store MLflow prints a "View run ... at" line to stdout whenever a
    # run ends: that would corrupt `--json` output and the progress display.
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    from nnsweep.artifacts.cache import default_cache_dir

    cache_dir = args.cache_dir or default_cache_dir()
    try:
        _check_cache_dir(cache_dir, given_by=args.cache_dir)
        with results_apart():
            code: int = args.handler(args, cache_dir)
    except SpecError as exc:
        return _usage_error(exc, _BENCH_OPTIONS)  # fields named as bench's options name them
    except NnsweepError as exc:
        sys.stderr.write(f"nnsweep: error: {_one_line(str(exc))}\n")
        _traceback_if_verbose(args.verbose)
        return EXIT_FAILED
    except KeyboardInterrupt:
        sys.stderr.write("nnsweep: interrupted\n")
        return EXIT_INTERRUPTED
    except Exception as exc:  # the top-level handler: one line, the traceback only with -v
        sys.stderr.write(f"nnsweep: error: {type(exc).__name__}: {_one_line(str(exc))}")
        sys.stderr.write("\n" if args.verbose else " (run again with -v for the traceback)\n")
        _traceback_if_verbose(args.verbose)
        return EXIT_FAILED
    return code


def _check_cache_dir(path: Path, given_by: Path | None) -> None:
    """Refuse a cache folder that is a file, or lies under one, naming where it came from."""
    from nnsweep.artifacts.cache import check_cache_dir

    if given_by is not None:
        check_cache_dir(path, "--cache-dir", "give a folder")
    elif os.environ.get("NNSWEEP_CACHE"):
        check_cache_dir(path, "NNSWEEP_CACHE", "set it to a folder, or unset it")
    else:
        check_cache_dir(path, "the cache", "give a folder with --cache-dir or NNSWEEP_CACHE")


def _traceback_if_verbose(verbose: int) -> None:
    if verbose:
        import traceback

        traceback.print_exc(file=sys.stderr)


def entry() -> None:
    """The console script: :func:`main`, and after an interrupt exit at once. Everything is
    recorded by then (the studies synchronously, the tracker flushed), so the interpreter's
    exit must not wait for a local conversion thread whose trial was requeued."""
    code = main()
    if code == EXIT_INTERRUPTED:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
