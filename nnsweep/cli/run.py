"""``nnsweep run``: run a sweep, then print its results and write its report."""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from nnsweep.cli import _report_file
from nnsweep.cli._output import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, _usage_error
from nnsweep.cli._output import results as stdout_results
from nnsweep.cli._ray import _ray_client_env
from nnsweep.cli._spec_args import _SPEC_OPTIONS, _load_checked_spec
from nnsweep.core.errors import SpecError


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``nnsweep run SPEC``."""
    parser = subparsers.add_parser(
        "run",
        help="run a sweep: an Optuna study per device, measured on its agent, logged to MLflow",
        description="Run the sweep SPEC (YAML). Interrupt it at any time and run it again to continue: "
        "finished trials are kept, interrupted ones are measured again.",
    )
    parser.add_argument("spec", type=Path, help="sweep YAML, e.g. sweeps/quickstart.yaml")
    parser.add_argument("--address", help="join this Ray cluster (HOST:PORT) instead of starting a local one")
    parser.add_argument(
        "--executor",
        choices=["ray", "local"],
        default="ray",
        help="ray (default): agents and conversion workers on Ray; local: threads in this process",
    )
    parser.add_argument(
        "--trials",
        type=int,
        metavar="N",
        help="this run's trial budget per device instead of the spec's budget.trials (a small first look; "
        "a later run with a larger budget continues the same studies)",
    )
    parser.add_argument("--no-tracking", action="store_true", help="do not log to MLflow")
    parser.add_argument("--report", type=Path, help="the HTML report (default: reports/<sweep name>.html)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of tables")
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="delete the sweep's studies and start over (needed after changing its model, measure settings, "
        "objectives, constraints or space)",
    )
    parser.add_argument(
        "--retry-failed",
        choices=["transient", "deterministic", "all"],
        help="try recorded failures of this kind again (transient ones, timeouts, hangs, MemoryError, "
        "crashed workers, are tried again on every resume anyway; deterministic: the toolchain refused)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, cache_dir: Path) -> int:
    try:
        spec = _load_checked_spec(args.spec, tracking=not args.no_tracking)
        if args.trials is not None:
            spec = _with_trials(spec, args.trials)
        _report_file.check_report_path(spec, args.report, "--report")
        _ray_client_env(args.address if args.executor == "ray" else None)
    except SpecError as exc:
        return _usage_error(exc, _SPEC_OPTIONS)

    from nnsweep.execution import executor_for
    from nnsweep.sweep.loop import Sweep
    from nnsweep.tracking import tracker_for

    try:
        executor = executor_for(spec, args.executor, args.address)
    except SpecError as exc:
        return _usage_error(exc, _SPEC_OPTIONS)
    tracker = tracker_for(spec.tracking.uri, spec.experiment, spec.name, enabled=not args.no_tracking)
    from nnsweep.report.progress import ProgressDisplay

    display = ProgressDisplay(enabled=not args.json)
    from nnsweep.core.results import FailureKind

    retry = (
        frozenset(FailureKind)
        if args.retry_failed == "all"
        else frozenset({FailureKind(args.retry_failed)} if args.retry_failed else ())
    )
    sweep = Sweep(
        spec, executor, tracker, cache_dir,
        progress=display.update, notice=display.note, fresh=args.fresh, retry_failed=retry,
    )  # fmt: skip
    interrupted = False
    unlogged = 0
    try:
        with _stop_on_signals(sweep.stop):
            results = sweep.run()
        report = _written_report(spec, args, tracker, results, cache_dir)
    except SpecError as exc:  # found only once the devices are known (e.g. a device offers none of the runtimes)
        return _usage_error(exc, _SPEC_OPTIONS)
    except KeyboardInterrupt:
        display.close()
        sys.stderr.write("nnsweep run: interrupted; run the same command again to continue\n")
        interrupted = True
    finally:
        display.close()
        if hasattr(tracker, "close"):
            unlogged = tracker.close() or 0  # write what is still queued (with backoff, if the server is away)
        executor.shutdown()
    if interrupted:
        return EXIT_INTERRUPTED
    if args.json:
        stdout_results().write(_results_json(results) + "\n")
    else:
        stdout_results().write(_results_text(spec, results, tracking=not args.no_tracking) + "\n")
        if report is not None:
            stdout_results().write(f"Report: {report}\n")
    lost = [r.device for r in results if r.lost]
    if lost:
        sys.stderr.write(
            f"nnsweep run: {', '.join(lost)} lost and not back before the sweep ended: what was measured is kept; "
            "run the same command again once it is back to run the rest of its budget\n"
        )
    if unlogged:
        sys.stderr.write(
            f"nnsweep run: {unlogged} finished trial(s) are not logged to MLflow (writing to {spec.tracking.uri} "
            "failed, as said above); the sweep's study keeps them, and the next `nnsweep run` of this spec logs them\n"
        )
        return EXIT_FAILED
    return EXIT_OK if report is not None and not lost else EXIT_FAILED


def _results_json(results: Any) -> str:
    """``nnsweep run --json``: per device its capabilities, best, front and trials."""
    return json.dumps(
        [
            {
                "device": r.device,
                "capabilities": r.capabilities.to_dict(),
                "best": r.best.to_dict() if r.best else None,
                "pareto": [p.number for p in r.pareto],
                "pareto_remeasured": [x.to_dict() for x in r.spread],
                "trials": [t.to_dict() for t in r.records],
                "lost": r.lost,
            }
            for r in results
        ]
    )


def _written_report(spec: Any, args: argparse.Namespace, tracker: Any, results: Any, cache_dir: Path) -> Path | None:
    """The report of the finished sweep, or None (said on stderr) when it could not be
    written: the sweep's results are still printed, and `nnsweep report` writes it later."""
    try:
        return _report_file._publish_report(
            spec, args.report, tracker, devices=[_device_trials(r) for r in results], cache_dir=cache_dir
        )
    except _report_file.ReportNotWritten as exc:
        sys.stderr.write(
            f"nnsweep run: {exc}; the sweep's trials are kept: "
            f"`nnsweep report {shlex.quote(str(args.spec))}` writes it once there is room\n"
        )
        return None


def _with_trials(spec: Any, trials: int) -> Any:
    """The spec with ``--trials``' budget (the budget is not part of the sweep's fingerprint).

    Raises:
        SpecError: ``trials`` is out of ``budget.trials``' bounds.
    """
    import dataclasses

    from nnsweep.core.fields import number_text, setting_of
    from nnsweep.spec.settings import Budget

    low = setting_of(Budget, "trials")[0].ge
    if low is not None and trials < low:
        raise SpecError("--trials", f"must be at least {number_text(low)}, got {trials}")
    try:
        return dataclasses.replace(spec, budget=dataclasses.replace(spec.budget, trials=trials))
    except SpecError as exc:  # the budget's own bound, said for the option
        raise SpecError("--trials", exc.message) from None


@contextlib.contextmanager
def _stop_on_signals(stop: Callable[[], bool]) -> Iterator[None]:
    """SIGTERM and Ctrl-C stop the sweep at its next safe point (in-flight trials are
    requeued, the tracker is flushed); a second one, or one before the sweep's loop runs
    (nothing in flight yet), interrupts at once."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def handler(signum: int, frame: object) -> None:
        received.append(signum)
        if not stop() or len(received) > 1:
            raise KeyboardInterrupt

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


def _device_trials(result: Any) -> Any:
    """What the report shows of a device, from the sweep that just ran (no second read of its study)."""
    from nnsweep.report.html import DeviceTrials

    baseline = result.baseline.number if result.baseline is not None else None
    return DeviceTrials(
        result.device,
        result.records,
        baseline,
        result.capabilities.summary(),
        profiles=result.profiles,
        divergences=result.divergences,
    )


def _results_text(spec: Any, results: Any, *, tracking: bool) -> str:
    """Each device's front, best and trials; where the runs are logged when ``tracking`` is on
    (``--no-tracking`` writes no MLflow database, so there is none to point to)."""
    from nnsweep.report.text import render_table

    blocks = []
    for r in results:
        title = f"== {r.device}: {r.capabilities.summary()} — Pareto front (feasible)"
        blocks.append(render_table(r.pareto, spec.objectives, title=title))
        if r.best is not None:
            label = " (latency emulated)" if r.best.emulated else " (latency estimated)" if r.best.estimated else ""
            label += " (float in effect: its int8 changed nothing the outputs show)" if r.best.float_in_effect else ""
            blocks.append(f"Best on {r.device}: trial #{r.best.number} {r.best.config.label()}{label}")
            if r.choice.tied:
                tied = ", ".join(f"#{n}" for n in r.choice.tied)
                blocks.append(
                    f"  tied on {r.choice.tied_on} with {tied} "
                    f"(their intervals overlap); {r.choice.broken_by} broke the tie"
                )
        else:
            blocks.append(f"Best on {r.device}: none (no feasible measured trial)")
        tried = [t for t in r.records if t.reused_from is None]
        measured = sum(1 for t in tried if t.status.value == "ok")
        failed = sum(1 for t in tried if t.status.value == "failed")
        repeats = len(r.records) - len(tried)
        blocks.append(
            f"Trials: {measured} measured, {failed} failed (distinct configurations); "
            f"{repeats} repeats of those told to the study for free"
        )
        if r.exhausted:
            blocks.append(f"Space: exhausted, every one of its {r.space_size or 'reachable'} configurations was tried")
        else:
            blocks.append(f"Space: {r.space_size if r.space_size is not None else 'unbounded'} configurations")
        blocks.append(_breakdown_text(r.breakdown))
        if r.spread:
            blocks.append(_spread_text(r.spread, r.baseline.number if r.baseline else None, r.fell_off))
    if tracking:
        ui = f"nnsweep ui {shlex.quote(str(spec.source))}"  # a path with spaces pastes as one argument
        blocks.append(f"MLflow: {spec.tracking.uri} (experiment {spec.experiment!r}); `{ui}`")
    return "\n\n".join(blocks)


def _spread_text(spread: Any, baseline: int | None, fell_off: tuple[int, ...]) -> str:
    """The front and the baseline measured again in fresh processes: the pooled median that
    decides, its interval, and how far the sweep's own figure was from it."""
    rounds = max(len(x.p50_ms) for x in spread)
    lines = [f"Front and baseline measured again, interleaved, {rounds} fresh processes each (these decide):"]
    for x in spread:
        name = f"#{x.number}{' (fp32 baseline)' if x.number == baseline else ''} {x.config.label()}"
        if not x.p50_ms or x.interval_ms is None:
            lines.append(f"  {name}: not measured again ({x.error})")
            continue
        low, high, coverage = x.interval_ms
        cv = "n/a" if x.cv is None else f"{x.cv:.2%}"
        gap = x.gap or 0.0
        flag = "  <- the sweep's figure is off by more than 10 %" if abs(gap) > 0.10 else ""
        if x.left_out_ms:
            flag += f"; {len(x.left_out_ms)} process(es) met other work on their cores: left out, measured again"
        if x.all_contended:
            flag += "; every process met other work on its cores (pooled anyway: measure on a quieter machine)"
        lines.append(
            f"  {name}: p50 {x.median_ms:.4g} ms [{low:.4g}, {high:.4g}] ({coverage:.0%} interval of the median); "
            f"sweep {x.sweep_p50_ms:.4g} ms ({gap:+.0%}); CV between processes {cv}; "
            f"load up to {max(x.loadavg_1m):.2f}{flag}"
        )
    if fell_off:
        lines.append("  Off the front on the re-measured figures: " + ", ".join(f"#{n}" for n in fell_off))
    return "\n".join(lines)


def _breakdown_text(breakdown: Any) -> str:
    """Where a device's time went, and how far it is from the physical limit (its timed runs)."""
    timed = breakdown.get("timed runs", 0.0)
    parts = [
        f"{name} {seconds:.1f} s" for name, seconds in breakdown.items() if name != "timed runs" and seconds >= 0.05
    ]
    text = "Time: " + (", ".join(parts) or "nothing measured in this sweep")
    measuring = breakdown.get("measuring", 0.0)
    if timed > 0 and measuring > 0:
        text += f"; timed runs {timed:.3g} s = {timed / measuring:.2%} of the time measuring"
    return text
