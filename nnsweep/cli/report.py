"""``nnsweep report``: write a sweep's HTML report and attach it to its MLflow runs."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from nnsweep.cli import _report_file
from nnsweep.cli._args import _http_url
from nnsweep.cli._output import EXIT_OK, EXIT_USAGE, _usage_error, results
from nnsweep.cli._spec_args import _SPEC_OPTIONS, _load_checked_spec
from nnsweep.core.errors import SpecError


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``nnsweep report SPEC``."""
    parser = subparsers.add_parser(
        "report",
        help="write the sweep's HTML report and attach it to each device's MLflow run",
        description="Write one self-contained HTML file (plotly inlined, opens offline): per device the "
        "accuracy-vs-latency trade-off with the Pareto front, the best configuration, its partition map, "
        "latency distributions and every trial linked to MLflow; the speed-up chart across devices.",
    )
    parser.add_argument("spec", type=Path)
    parser.add_argument("--out", type=Path, help="the HTML file (default: reports/<sweep name>.html)")
    parser.add_argument("--no-tracking", action="store_true", help="do not read or attach to MLflow")
    parser.add_argument(
        "--ui-url",
        type=_http_url,
        default=None,
        help="the http(s) MLflow UI the run links point into (default http://127.0.0.1:5000)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, cache_dir: Path) -> int:
    from nnsweep.report.html import load_device

    try:
        spec = _load_checked_spec(args.spec, tracking=not args.no_tracking)
        _report_file.check_report_path(spec, args.out, "--out")
    except SpecError as exc:
        return _usage_error(exc, _SPEC_OPTIONS)
    devices = [load_device(spec, name) for name in spec.devices]
    if not any(d.records for d in devices):  # as `best` of a sweep that never ran: the user's next step, exit 2
        sys.stderr.write(
            f"nnsweep report: {spec.name} has no trials yet: run `nnsweep run {shlex.quote(str(args.spec))}` first\n"
        )
        return EXIT_USAGE
    from nnsweep.tracking import MlflowTracker, NullTracker

    tracking = spec.tracking
    tracker = NullTracker() if args.no_tracking else MlflowTracker(tracking.uri, spec.experiment, spec.name)
    path = _report_file._publish_report(
        spec, args.out, tracker, devices=devices, ui_url=args.ui_url, cache_dir=cache_dir
    )
    attached = [d.device for d in devices if tracker.trial_links(d.device)]
    where = f"; attached to the MLflow runs of {', '.join(attached)}" if attached else ""
    results().write(f"{path} ({path.stat().st_size:,} bytes){where}\n")
    return EXIT_OK
