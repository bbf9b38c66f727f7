"""``nnsweep ui``: the MLflow UI for a sweep's tracking store."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from nnsweep.cli._args import _int_in
from nnsweep.cli._output import EXIT_OK, _usage_error, results
from nnsweep.cli._ports import check_port_free
from nnsweep.cli._spec_args import _SPEC_OPTIONS
from nnsweep.core.errors import SpecError


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``nnsweep ui SPEC``."""
    parser = subparsers.add_parser(
        "ui",
        help="start the MLflow UI on 127.0.0.1 for a sweep's tracking store",
        description="Start `mlflow ui` against the sweep's tracking URI (sqlite by default).",
    )
    parser.add_argument("spec", type=Path)
    parser.add_argument("--port", type=_int_in(1, 65535), default=5000)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, cache_dir: Path) -> int:
    import subprocess

    from nnsweep.spec import load_spec
    from nnsweep.sweep.preflight import check_tracking
    from nnsweep.tracking import absolute_sqlite_uri

    try:
        spec = load_spec(args.spec)
        check_tracking(spec.tracking.uri)
    except SpecError as exc:
        return _usage_error(exc, _SPEC_OPTIONS)
    if spec.tracking.uri.startswith(("http://", "https://")):
        # A tracking server is its own UI: there is nothing to start.
        results().write(f"{spec.name} is tracked by the MLflow server at {spec.tracking.uri}: open it in a browser\n")
        return EXIT_OK
    try:
        check_port_free(args.port)
    except SpecError as exc:
        return _usage_error(exc, {})
    cmd = [
        sys.executable, "-m", "mlflow", "ui",
        "--backend-store-uri", absolute_sqlite_uri(spec.tracking.uri),
        "--host", "127.0.0.1",
        "--port", str(args.port),
        "--workers", "1",
    ]  # fmt: skip
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    sys.stderr.write(f"MLflow UI for {spec.name}: http://127.0.0.1:{args.port}  (Ctrl-C to stop)\n")
    return subprocess.call(cmd, env=env)
