"""The ``nnsweep`` command.

This is the only module that reads environment variables and configures
logging. Heavy libraries are imported inside the subcommands that need them, so
``nnsweep --help`` and argument errors stay instant.

Exit codes: 0 success · 1 the work failed (a conversion or benchmark) · 2 bad input.
Whatever goes wrong ends in one line on stderr; ``-v`` adds the traceback of an
unexpected error. Global options (``-v``, ``--cache-dir``) go before or after the
subcommand.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from nnsweep.cli._args import (
    _MAX_ITERS,
    _MAX_SECONDS,
    _MAX_THREADS,
    _MAX_WARMUP,
    _fraction,
    _global_options,
    _http_url,
    _int_in,
    _Parser,
    _positive_shape,
    _readable_token_option,
    _seconds,
    _SubParser,
)
from nnsweep.cli._output import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, _one_line, _usage_error
from nnsweep.core import runtimes
from nnsweep.core.errors import NnsweepError, SpecError, TrialError

__all__ = ["entry", "main"]

log = logging.getLogger("nnsweep")


# DeploymentConfig / MeasureSettings field -> the option that sets it, so errors name what the user typed.
_BENCH_OPTIONS = {
    "runtime": "--runtime",
    "backends": "--backends",
    "quant.mode": "--quant",
    "quant.granularity": "--granularity",
    "quant.calibration": "--calibration",
    "quant.calibration_batches": "--calibration-batches",
    "quant.interface": "--interface",
    "quant.qat_epochs": "--qat-epochs",
    "partitions": "--max-partitions/--min-nodes",
    "partitions.max_delegated_partitions": "--max-partitions",
    "partitions.min_nodes_per_partition": "--min-nodes",
    "threads": "--threads",
    "warmup": "--warmup",
    "iters": "--iters",
    "min_duration_s": "--min-duration",
    "timeout_s": "--timeout",
    "ci_rel": "--ci",
    "max_duration_s": "--max-duration",
    "model": "--model",
    "weights": "--weights",
    "input_shape": "--input-shape",
}


def _build_parser() -> _Parser:
    parser = _Parser(
        prog="nnsweep",
        description="Find, for every target device, the best way to deploy a PyTorch model.",
    )
    _global_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_SubParser)
    sub.required = True

    bench = sub.add_parser(
        "bench",
        help="convert one configuration and measure it on this machine",
        description="Convert a model for one deployment configuration (through the artifact cache), "
        "measure latency and memory in a fresh process, and evaluate accuracy and fidelity "
        "against the fp32 model on the same inputs.",
    )
    bench.add_argument(
        "--model", default="digits", help="digits, digits_gn, torchvision:NAME, pkg.mod:fn or file.py:fn"
    )
    bench.add_argument("--weights", type=Path, help="state dict for a torchvision model (default: random weights)")
    bench.add_argument("--input-shape", type=_positive_shape, help="input shape for user models, e.g. 1,3,224,224")
    bench.add_argument("--config", type=Path, help="a configuration file (YAML or JSON, as `nnsweep best` prints)")
    bench.add_argument("--runtime", help=f"{', '.join(runtimes.listed_names())} (default: executorch)")
    bench.add_argument("--backends", help="comma list in preference order, e.g. xnnpack,portable or CpuAcc,CpuRef")
    bench.add_argument("--quant", help="fp32, fp16, dynamic_int8, static_int8 or qat_int8 (default: fp32)")
    bench.add_argument("--granularity", help="per_tensor or per_channel (int8 modes; default per_channel)")
    bench.add_argument("--calibration", help="minmax, histogram, entropy or percentile (static int8)")
    bench.add_argument(
        "--calibration-batches", type=_int_in(1, 10_000), help="calibration batches of 16 samples (default 8)"
    )
    bench.add_argument("--interface", help="core (float in/out) or full (quantized in/out)")
    bench.add_argument("--qat-epochs", type=_int_in(0, 1000), help="fine-tuning epochs for qat_int8 (default 3)")
    bench.add_argument(
        "--max-partitions", type=_int_in(0, 10_000), help="keep the N largest delegated partitions (0 = no limit)"
    )
    bench.add_argument("--min-nodes", type=_int_in(1, 1_000_000), help="smaller delegated partitions fall back")
    bench.add_argument("--threads", type=_int_in(1, _MAX_THREADS), help="CPU threads (default 1)")
    bench.add_argument("--warmup", type=_int_in(0, _MAX_WARMUP), default=5, help="warm-up runs (default 5)")
    bench.add_argument("--iters", type=_int_in(1, _MAX_ITERS), default=200, help="timed runs (default 200)")
    bench.add_argument(
        "--min-duration", type=_seconds(0, _MAX_SECONDS), default=0.0, help="time at least this many seconds"
    )
    bench.add_argument(
        "--timeout",
        type=_seconds(0, _MAX_SECONDS, open_low=True),
        default=600.0,
        help="give up on the measurement after this many seconds (default 600)",
    )
    bench.add_argument(
        "--until-stable",
        action="store_true",
        help="after --iters, keep timing until the p50's 95%% confidence interval is within --ci of it",
    )
    bench.add_argument(
        "--ci",
        type=_fraction,
        default=0.01,
        help="with --until-stable: the interval's half-width as a fraction of the p50 (default 0.01 = 1%%)",
    )
    bench.add_argument(
        "--max-duration",
        type=_seconds(0, _MAX_SECONDS, open_low=True),
        default=10.0,
        help="with --until-stable: stop timing after this many seconds even if not stable (default 10)",
    )
    bench.add_argument("--json", action="store_true", help="print one JSON object instead of the summary")
    bench.set_defaults(handler=_cmd_bench)

    run = sub.add_parser(
        "run",
        help="run a sweep: an Optuna study per device, measured on its agent, logged to MLflow",
        description="Run the sweep SPEC (YAML). Interrupt it at any time and run it again to continue: "
        "finished trials are kept, interrupted ones are measured again.",
    )
    run.add_argument("spec", type=Path, help="sweep YAML, e.g. sweeps/quickstart.yaml")
    run.add_argument("--address", help="join this Ray cluster (HOST:PORT) instead of starting a local one")
    run.add_argument(
        "--executor",
        choices=["ray", "local"],
        default="ray",
        help="ray (default): agents and conversion workers on Ray; local: threads in this process",
    )
    run.add_argument("--no-tracking", action="store_true", help="do not log to MLflow")
    run.add_argument("--report", type=Path, help="the HTML report (default: reports/<sweep name>.html)")
    run.add_argument("--json", action="store_true", help="print the results as JSON instead of tables")
    run.add_argument(
        "--fresh",
        action="store_true",
        help="delete the sweep's studies and start over (needed after changing its model, measure settings, "
        "objectives, constraints or space)",
    )
    run.set_defaults(handler=_cmd_run)

    best = sub.add_parser(
        "best",
        help="print the best configuration of a finished sweep (input for `nnsweep bench --config`)",
        description="Print the chosen configuration per device from the sweep's Optuna studies.",
    )
    best.add_argument("spec", type=Path)
    best.add_argument("--device", help="only this device (default: every device of the spec)")
    best.add_argument("--format", choices=["yaml", "json"], default="yaml")
    best.add_argument(
        "--across-devices",
        action="store_true",
        help="one configuration for every device: feasible on each, the smallest worst-case slowdown "
        "against each device's own best",
    )
    best.set_defaults(handler=_cmd_best)

    report = sub.add_parser(
        "report",
        help="write the sweep's HTML report and attach it to each device's MLflow run",
        description="Write one self-contained HTML file (plotly inlined, opens offline): per device the "
        "accuracy-vs-latency trade-off with the Pareto front, the best configuration, its partition map, "
        "latency distributions and every trial linked to MLflow; the speed-up chart across devices.",
    )
    report.add_argument("spec", type=Path)
    report.add_argument("--out", type=Path, help="the HTML file (default: reports/<sweep name>.html)")
    report.add_argument("--no-tracking", action="store_true", help="do not read or attach to MLflow")
    report.add_argument(
        "--ui-url",
        type=_http_url,
        default=None,
        help="the http(s) MLflow UI the run links point into (default http://127.0.0.1:5000)",
    )
    report.set_defaults(handler=_cmd_report)

    ui = sub.add_parser(
        "ui",
        help="start the MLflow UI on 127.0.0.1 for a sweep's tracking store",
        description="Start `mlflow ui` against the sweep's tracking URI (sqlite by default).",
    )
    ui.add_argument("spec", type=Path)
    ui.add_argument("--port", type=_int_in(1, 65535), default=5000)
    ui.set_defaults(handler=_cmd_ui)

    devices = sub.add_parser(
        "devices",
        help="list the devices a cluster offers, with what each can run",
        description="Start each device's agent, probe it, and print its capabilities.",
    )
    devices.add_argument("--address", help="a Ray cluster (HOST:PORT); default: this machine only")
    devices.add_argument("--json", action="store_true")
    devices.set_defaults(handler=_cmd_devices)

    agent = sub.add_parser("agent", help="start Ray nodes: the head, or a board that joins it")
    agent_sub = agent.add_subparsers(dest="agent_command", metavar="ACTION", parser_class=_SubParser)
    agent_sub.required = True
    head = agent_sub.add_parser(
        "head",
        help="start the head node: conversions run here, and it is device `host`",
        description="Runs `ray start --head` with the resources nnsweep needs and Ray's token "
        "authentication (the token is generated if missing, kept 0600). Boards then join it.",
    )
    head.add_argument("--port", type=_int_in(1, 65535), default=6379)
    head.add_argument("--converters", type=_int_in(1, 1024), default=1, help="conversions that may run at once")
    head.add_argument("--device", default="host", help="this machine's device name (default host)")
    head.add_argument("--no-device", action="store_true", help="this machine converts but is not a device")
    head.add_argument("--block", action="store_true", help="stay in the foreground (for systemd)")
    head.add_argument(
        "--token-file",
        type=Path,
        help="the cluster's Ray auth token; generated 0600 if missing (default: $RAY_AUTH_TOKEN_PATH or "
        "~/.ray/auth_token)",
    )
    _readable_token_option(head)
    head.add_argument(
        "--dashboard-agent-port", type=_int_in(1, 65535), help="Ray's dashboard agent port (default 52365)"
    )
    head.set_defaults(handler=_cmd_agent_head)
    join = agent_sub.add_parser(
        "join",
        help="join a head as a device (run this on the board), or as a machine that converts",
        description="Runs `ray start --address HEAD:PORT` offering the resource device:NAME (and, with "
        "--converters N, N conversion slots), with Ray's token authentication (the head's token: "
        "--token-file, $RAY_AUTH_TOKEN or ~/.ray/auth_token).",
    )
    join.add_argument("--address", required=True, help="the head's HOST:PORT")
    join.add_argument("--device", help="this device's name in sweeps (omit on a machine that only converts)")
    join.add_argument(
        "--converters",
        type=_int_in(0, 1024),
        default=0,
        help="conversions this machine runs for sweeps at once, one CPU each (default 0: a board)",
    )
    join.add_argument("--machine", help="physical machine name (default: host name)")
    join.add_argument("--token-file", type=Path, help="file holding the head's Ray auth token (mode 0600)")
    join.add_argument("--dashboard-agent-port", type=_int_in(1, 65535), help="needed for a second node on one machine")
    join.add_argument("--block", action="store_true", help="stay in the foreground (for systemd)")
    _readable_token_option(join)
    join.set_defaults(handler=_cmd_agent_join)
    return parser


def _bench_config(args: argparse.Namespace) -> Any:
    from nnsweep.core.config import DeploymentConfig

    data: dict[str, Any] = {}
    if args.config is not None:
        data = _read_config_file(args.config)
    quant = dict(data.get("quant") or {})
    parts = dict(data.get("partitions") or {})
    if args.runtime is not None:
        data["runtime"] = args.runtime
    data.setdefault("runtime", "executorch")
    if args.backends is not None:
        data["backends"] = [b.strip() for b in args.backends.split(",") if b.strip()]
    for option, key in (
        ("quant", "mode"),
        ("granularity", "granularity"),
        ("calibration", "calibration"),
        ("calibration_batches", "calibration_batches"),
        ("interface", "interface"),
        ("qat_epochs", "qat_epochs"),
    ):
        if getattr(args, option) is not None:
            quant[key] = getattr(args, option)
    if args.max_partitions is not None:
        parts["max_delegated_partitions"] = args.max_partitions
    if args.min_nodes is not None:
        parts["min_nodes_per_partition"] = args.min_nodes
    if args.threads is not None:
        data["threads"] = args.threads
    data["quant"], data["partitions"] = quant, parts
    source = "--config" if args.config is not None else None
    try:
        return DeploymentConfig.from_dict(data)
    except SpecError as exc:
        if len(exc.message) > 200:
            raise SpecError(exc.field, exc.message[:197] + "...") from None
        raise
    except (TypeError, ValueError, KeyError) as exc:  # a config file's value of the wrong kind
        from nnsweep.spec import excerpt

        raise SpecError(source or "config", f"invalid configuration: {excerpt(str(exc), 120)}") from None


def _read_config_file(path: Path) -> dict[str, Any]:
    from nnsweep.spec import load_yaml

    data = load_yaml(path, "--config")
    if isinstance(data, dict) and "config" in data and isinstance(data["config"], dict):
        data = data["config"]  # accept the whole `nnsweep bench --json` / `nnsweep best` object
    if not isinstance(data, dict):
        raise SpecError("--config", f"{path} must hold a mapping with runtime, backends, quant, ...")
    for key in ("quant", "partitions"):
        if data.get(key) is not None and not isinstance(data[key], dict):
            raise SpecError(f"--config: {key}", "must be a mapping")
    if data.get("backends") is not None and (
        not isinstance(data["backends"], list) or not all(isinstance(b, str) for b in data["backends"])
    ):
        raise SpecError("--config: backends", "must be a list of backend names")
    return data


def _cmd_bench(args: argparse.Namespace, cache_dir: Path) -> int:
    from nnsweep.bench import MeasureSettings
    from nnsweep.models import check_reference

    try:
        config = _bench_config(args)
        settings = MeasureSettings(
            warmup=args.warmup,
            iters=args.iters,
            min_duration_s=args.min_duration,
            timeout_s=args.timeout,
            until_stable=args.until_stable,
            ci_rel=args.ci,
            max_duration_s=args.max_duration,
        )
        check_reference(args.model)
        if args.weights is not None and not args.weights.is_file():
            raise SpecError("weights", f"file {str(args.weights)[:200]!r} does not exist")
    except SpecError as exc:
        return _usage_error(exc, _BENCH_OPTIONS)
    return _execute_bench(args, config, settings, cache_dir)


def _execute_bench(args: argparse.Namespace, config: Any, settings: Any, cache_dir: Path) -> int:
    """Convert through the cache and measure: everything after the input is checked.

    On a cache hit the model is not loaded: its snapshot (digest, evaluation data,
    fp32 reference) and the artifact are all a measurement needs, and torch stays
    unimported (:class:`~nnsweep.models.SnapshotStore`).
    """
    from nnsweep.artifacts import deploy
    from nnsweep.artifacts.cache import ArtifactCache
    from nnsweep.bench._warm import ForkHere
    from nnsweep.models import SnapshotStore, load_model

    cache = ArtifactCache(cache_dir)
    store = SnapshotStore(cache.models_dir)
    status = _Status(enabled=not args.json)
    recipe = store.recipe(args.model, args.weights, args.input_shape)
    snapshot = store.lookup(recipe) if recipe is not None else None
    artifact = deploy.cached(snapshot.digest, config, cache) if snapshot is not None else None
    try:
        if artifact is None or snapshot is None:
            status.line(f"loading {args.model} ...", tty_only=True)
            try:
                bundle, snapshot = store.load(
                    args.model,
                    recipe,
                    lambda: load_model(
                        args.model,
                        cache_dir=cache.models_dir,
                        weights=args.weights,
                        input_shape=args.input_shape,
                        progress=status.line,
                    ),
                )
            except SpecError as exc:
                status.clear()
                return _usage_error(exc, _BENCH_OPTIONS)
            status.line(f"converting {bundle.name} for {config.label()} ...")
            artifact, hit = deploy.convert(bundle, config, cache)
        else:
            hit = True
        # On a cache hit this process is still light (no torch, no thread): fork the measurement from it.
        status.line(f"measuring ({settings.warmup} warm-up + {settings.iters} timed runs) ...", ticking=False)
        fork = ForkHere.for_runtime(config.runtime)
        result = deploy.measure(snapshot, artifact, settings, cache_hit=hit, worker=fork)
    except TrialError as exc:
        status.clear()
        sys.stderr.write(f"nnsweep bench: failed: {_one_line(str(exc))}\n")
        return EXIT_FAILED
    status.clear()
    if args.json:
        sys.stdout.write(json.dumps(result.to_dict()) + "\n")
    else:
        sys.stdout.write(_bench_summary(result) + "\n")
    return EXIT_OK


_STOPPED = {
    "iters": "after --iters runs",
    "min_duration": "after --min-duration",
    "stable": "stable",
    "cap": "not stable within --max-duration",
}


def _p50_interval(t: Any) -> str:
    low, high = t.p50_ci95_ms
    p50 = t.latency.p50
    half = (high - low) / 2 / p50 * 100 if p50 > 0 else float("nan")
    why = _STOPPED.get(t.stop_reason, t.stop_reason)
    return f"p50 95% confidence interval: {low * 1000:.1f}-{high * 1000:.1f} us (+/-{half:.2f} %; {why})"


def _bench_summary(result: Any) -> str:
    """A summary a ``benchmark_model`` user would recognise, then the partition report."""
    t, e, a = result.timing, result.evaluation, result.artifact
    lat = t.latency
    lines = [
        "STARTING!",
        f"Model: {result.model} (digest {result.model_digest[:12]})",
        f"Config: {a.config.label()}",
        f"Artifact: {a.path} ({a.size_bytes:,} bytes; "
        + ("cache hit" if result.cache_hit else f"converted in {a.convert_s:.1f} s")
        + ")",
        f"Num threads: [{t.threads}]  Loadavg (1 min): " + ("n/a" if t.loadavg_1m is None else f"{t.loadavg_1m:.2f}"),
        f"Init: {t.load_ms * 1000:.0f} us, First inference: {t.first_inference_ms * 1000:.0f} us, "
        f"Timed runs: {lat.count}",
        f"Inference timings in us: mean {lat.mean * 1000:.1f}  p50 {lat.p50 * 1000:.1f}  p90 {lat.p90 * 1000:.1f}  "
        f"p99 {lat.p99 * 1000:.1f}  std {lat.std * 1000:.1f}  min {lat.min * 1000:.1f}  max {lat.max * 1000:.1f}",
        _p50_interval(t),
        f"Peak memory footprint (MB): {t.peak_rss_mb:.1f} "
        f"(process; {t.rss_before_load_mb:.1f} before loading the model)",
    ]
    f = e.fidelity
    if e.accuracy is not None:
        lines.append(f"Accuracy (top-1, {e.samples} evaluation samples): {e.accuracy * 100:.2f} %")
    else:
        lines.append(f"Accuracy: n/a (no labelled data; fidelity on {e.samples} inputs)")
    sqnr = "inf (identical)" if f.sqnr_db == float("inf") else f"{f.sqnr_db:.1f} dB"
    lines.append(
        f"Fidelity vs fp32: top-1 agreement {f.top1_agreement * 100:.1f} %, max abs err {f.max_abs_err:.3g}, "
        f"mean abs err {f.mean_abs_err:.3g}, SQNR {sqnr}" + (" (worst of the outputs)" if e.per_output else "")
    )
    for i, part in enumerate(e.per_output):
        part_sqnr = "inf (identical)" if part.sqnr_db == float("inf") else f"{part.sqnr_db:.1f} dB"
        lines.append(
            f"  output {i}: top-1 agreement {part.top1_agreement * 100:.1f} %, max abs err {part.max_abs_err:.3g}, "
            f"mean abs err {part.mean_abs_err:.3g}, SQNR {part_sqnr}"
        )
    lines.append(a.partitions.render())
    return "\n".join(lines)


class _Status:
    """What ``nnsweep bench`` is doing, on stderr: on a terminal one transient line (with
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


def _load_checked_spec(path: Path, *, tracking: bool) -> Any:
    """The spec at ``path``, with its storage and (if used) tracking URI checked (a few seconds at most).

    Raises:
        SpecError: the spec is invalid or a URI is unusable.
    """
    from nnsweep.spec import load_spec
    from nnsweep.sweep.preflight import check_spec

    spec = load_spec(path)
    check_spec(spec, tracking=tracking)
    return spec


def _ray_client_env(address: str | None, allow_readable: bool = False) -> None:
    """Before this process joins a cluster as a Ray client: token mode, a token that only we can read,
    minor-version matching (see nnsweep.agents._node)."""
    from nnsweep.agents._node import RAY_ENV, check_token_file, default_token_path

    if not address:
        return
    if not os.environ.get("RAY_AUTH_TOKEN"):
        path = default_token_path(os.environ, Path.home())
        check_token_file(path, option="token", allow_readable=allow_readable)
    os.environ.update(RAY_ENV)


_SPEC_OPTIONS: dict[str, str] = {}  # sweep errors name the YAML field path as written


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


def _cmd_run(args: argparse.Namespace, cache_dir: Path) -> int:
    try:
        spec = _load_checked_spec(args.spec, tracking=not args.no_tracking)
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
    tracker = tracker_for(spec.tracking.uri, spec.tracking.experiment, spec.name, enabled=not args.no_tracking)
    from nnsweep.report.progress import ProgressDisplay

    display = ProgressDisplay(enabled=not args.json)
    sweep = Sweep(spec, executor, tracker, cache_dir, progress=display.update, fresh=args.fresh)
    interrupted = False
    try:
        with _stop_on_signals(sweep.stop):
            results = sweep.run()
        report = _publish_report(spec, args.report, tracker, devices=[_device_trials(r) for r in results])
    except SpecError as exc:  # found only once the devices are known (e.g. a device offers none of the runtimes)
        return _usage_error(exc, _SPEC_OPTIONS)
    except KeyboardInterrupt:
        display.close()
        sys.stderr.write("nnsweep run: interrupted; run the same command again to continue\n")
        interrupted = True
    finally:
        display.close()
        if hasattr(tracker, "close"):
            tracker.close()  # write what is still queued
        executor.shutdown()
    if interrupted:
        return EXIT_INTERRUPTED
    if args.json:
        out = [
            {
                "device": r.device,
                "capabilities": r.capabilities.to_dict(),
                "best": r.best.to_dict() if r.best else None,
                "pareto": [p.number for p in r.pareto],
                "pareto_remeasured": [x.to_dict() for x in r.spread],
                "trials": [t.to_dict() for t in r.records],
            }
            for r in results
        ]
        sys.stdout.write(json.dumps(out) + "\n")
    else:
        sys.stdout.write(_results_text(spec, results) + "\n")
        sys.stdout.write(f"Report: {report}\n")
    return EXIT_OK


def _results_text(spec: Any, results: Any) -> str:
    from nnsweep.sweep.front import render_table

    blocks = []
    for r in results:
        title = f"== {r.device}: {r.capabilities.summary()} — Pareto front (feasible)"
        blocks.append(render_table(r.pareto, spec.objectives, title=title))
        if r.best is not None:
            label = " (latency emulated)" if r.best.emulated else " (latency estimated)" if r.best.estimated else ""
            blocks.append(f"Best on {r.device}: trial #{r.best.number} {r.best.config.label()}{label}")
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
            blocks.append(_spread_text(r.spread))
    blocks.append(f"MLflow: {spec.tracking.uri} (experiment {spec.tracking.experiment!r}); `nnsweep ui {spec.source}`")
    return "\n\n".join(blocks)


def _spread_text(spread: Any) -> str:
    """The Pareto candidates' p50 in separate fresh processes: how much one process's figure is worth."""
    lines = [f"Pareto candidates measured again, {max(len(x.p50_ms) for x in spread)} fresh processes each:"]
    for x in spread:
        if not x.p50_ms:
            lines.append(f"  #{x.number} {x.config.label()}: not measured again ({x.error})")
            continue
        cv = "n/a" if x.cv is None else f"{x.cv:.2%}"
        p50s = ", ".join(f"{v:.4g}" for v in x.p50_ms)
        load = max(x.loadavg_1m)
        lines.append(
            f"  #{x.number} {x.config.label()}: p50 {p50s} ms (sweep: {x.sweep_p50_ms:.4g}); "
            f"CV between processes {cv}; load up to {load:.2f}"
        )
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


def _cmd_best(args: argparse.Namespace, cache_dir: Path) -> int:
    from nnsweep.spec import load_spec
    from nnsweep.sweep.front import best_across_devices, best_trial
    from nnsweep.sweep.loop import open_study, study_records

    try:
        spec = load_spec(args.spec)
        if args.device is not None and args.device not in spec.devices:
            raise SpecError("--device", f"{args.device!r} is not a device of {spec.name}: {', '.join(spec.devices)}")
        if args.device is not None and args.across_devices:
            raise SpecError("--across-devices", "chooses for every device of the spec: leave out --device")
    except SpecError as exc:
        return _usage_error(exc, _SPEC_OPTIONS)
    devices = [args.device] if args.device else list(spec.devices)
    records = {device: study_records(open_study(spec, device, create=False)) for device in devices}
    payload: Any
    if args.across_devices:
        shared = best_across_devices(records, spec.objectives)
        if shared is None:
            sys.stderr.write(f"nnsweep best: no configuration of {spec.name} is feasible on every device\n")
            return EXIT_FAILED
        payload = {
            "config": shared.config.to_dict(),
            "worst_slowdown": round(shared.worst_slowdown, 4),
            "devices": {
                c.device: {
                    "trial": c.record.number,
                    shared.metric: c.record.metrics[shared.metric],
                    f"own_best_{shared.metric}": c.own_best.metrics[shared.metric],
                    "own_best_config": c.own_best.config.label(),
                    "slowdown": round(c.slowdown, 4),
                    # latencies timed under emulation or estimated by a compiler: no real device's figure
                    "emulated": c.record.emulated or c.own_best.emulated,
                    "estimated": c.record.estimated or c.own_best.estimated,
                }
                for c in shared.costs
            },
        }
    else:
        chosen: dict[str, Any] = {}
        for device in devices:
            best = best_trial(records[device], spec.objectives)
            if best is None:
                sys.stderr.write(f"nnsweep best: {device} has no feasible measured trial yet\n")
                return EXIT_FAILED
            chosen[device] = {
                "trial": best.number,
                "metrics": dict(best.metrics),
                "config": best.config.to_dict(),
                # a compiler's estimate (Ethos-U) or a latency measured under emulation: no real device's figure
                "estimated": best.estimated,
                "emulated": best.emulated,
            }
        # One device: the config alone, so the output feeds `nnsweep bench --config` directly.
        payload = chosen[devices[0]] if len(devices) == 1 else chosen
    if args.format == "json":
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
    else:
        import yaml

        sys.stdout.write(yaml.safe_dump(payload, sort_keys=False))
    return EXIT_OK


def _report_path(spec: Any, given: Path | None) -> Path:
    return given if given is not None else Path("reports") / f"{spec.name}.html"


def _publish_report(
    spec: Any, given: Path | None, tracker: Any, *, devices: Any = None, ui_url: str | None = None
) -> Path:
    from nnsweep.report.html import DEFAULT_UI_URL, publish_report

    path = _report_path(spec, given)
    return publish_report(spec, path, tracker, devices=devices, ui_url=ui_url or DEFAULT_UI_URL)


def _device_trials(result: Any) -> Any:
    """What the report shows of a device, from the sweep that just ran (no second read of its study)."""
    from nnsweep.report.html import DeviceTrials

    baseline = result.baseline.number if result.baseline is not None else None
    return DeviceTrials(result.device, result.records, baseline, result.capabilities.summary())


def _cmd_report(args: argparse.Namespace, cache_dir: Path) -> int:
    from nnsweep.report.html import load_device

    try:
        spec = _load_checked_spec(args.spec, tracking=not args.no_tracking)
    except SpecError as exc:
        return _usage_error(exc, _SPEC_OPTIONS)
    devices = [load_device(spec, name) for name in spec.devices]
    if not any(d.records for d in devices):
        sys.stderr.write(f"nnsweep report: {spec.name} has no trials yet: run `nnsweep run {args.spec}` first\n")
        return EXIT_FAILED
    from nnsweep.tracking import MlflowTracker, NullTracker

    tracking = spec.tracking
    tracker = NullTracker() if args.no_tracking else MlflowTracker(tracking.uri, tracking.experiment, spec.name)
    path = _publish_report(spec, args.out, tracker, devices=devices, ui_url=args.ui_url)
    attached = [d.device for d in devices if tracker.trial_links(d.device)]
    where = f"; attached to the MLflow runs of {', '.join(attached)}" if attached else ""
    sys.stdout.write(f"{path} ({path.stat().st_size:,} bytes){where}\n")
    return EXIT_OK


def _cmd_ui(args: argparse.Namespace, cache_dir: Path) -> int:
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
        sys.stdout.write(f"{spec.name} is tracked by the MLflow server at {spec.tracking.uri}: open it in a browser\n")
        return EXIT_OK
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


def _cmd_devices(args: argparse.Namespace, cache_dir: Path) -> int:
    if args.address:
        try:
            _ray_client_env(args.address)
        except SpecError as exc:
            return _usage_error(exc, {})
        from nnsweep.execution.ray_cluster import RayExecutor

        executor = RayExecutor(address=args.address)
        try:
            found = executor.probe(executor.cluster_devices())
        finally:
            executor.shutdown()
        caps = list(found.values())
    else:
        from nnsweep.agents import LocalTransport

        caps = [LocalTransport().probe("host")]
    from nnsweep.sweep.space import accepted_values

    if args.json:
        out = [{**c.to_dict(), "space": accepted_values(c.runtimes, c.cores)} for c in caps]
        sys.stdout.write(json.dumps(out) + "\n")
        return EXIT_OK
    for c in caps:
        sys.stdout.write(f"{c.device}: {c.summary()}, {c.memory_mb} MB, machine {c.machine}, transport {c.transport}\n")
        sys.stdout.write(_space_lines(accepted_values(c.runtimes, c.cores)))
        for runtime, need in c.left_out.items():
            sys.stdout.write(f"    {runtime}: left out, its measuring process needs {need} MB with headroom\n")
    return EXIT_OK


def _space_lines(values: dict[str, Any]) -> str:
    """What a device's ``space:`` accepts, as the lines ``nnsweep devices`` prints."""

    def modes(table: dict[str, list[str]]) -> str:
        return ", ".join(f"{m} ({'/'.join(g)})" if g else m for m, g in table.items())

    lines = []
    for runtime, v in values["runtime"].items():
        lines.append(f"    {runtime}: backends {', '.join(v['backends'])}")
        lines.append(f"        quant: {modes(v['quant'])}")
        for backend, table in v["whole_model"].items():
            lines.append(f"        quant with {backend} first: {modes(table)}")
        if v["calibration"]:
            lines.append(f"        calibration: {', '.join(v['calibration'])}")
        limits = "max_delegated_partitions, min_nodes_per_partition" if v["partition_limits"] else "do not apply"
        lines.append(f"        partition limits: {limits}")
    low, high = values["threads"]
    lines.append(f"    threads: {low} to {high}")
    return "".join(line + "\n" for line in lines)


def _ray_start(cmd: list[str], env: dict[str, str]) -> int:
    import shutil
    import subprocess

    ray = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    if ray is None:
        sys.stderr.write("nnsweep agent: the `ray` command is not installed here\n")
        return EXIT_FAILED
    return subprocess.call([ray, *cmd[1:]], env=env)


def _cmd_agent_head(args: argparse.Namespace, cache_dir: Path) -> int:
    from nnsweep.agents._node import check_token_file, default_token_path, ensure_token, head_command, ray_env

    try:
        cmd = head_command(
            args.port,
            args.converters,
            host_device=None if args.no_device else args.device,
            block=args.block,
            dashboard_agent_port=args.dashboard_agent_port,
        )
        token = args.token_file or default_token_path(os.environ, Path.home())
        created = ensure_token(token)
        check_token_file(token, option="--token-file", allow_readable=args.allow_readable_token)
    except SpecError as exc:
        return _usage_error(exc, {})
    # The token is never printed: it opens the cluster to whoever reads it.
    state = "generated" if created else "existing"
    sys.stderr.write(
        f"nnsweep agent head: Ray token authentication on; {state} token in {token} (mode 0600). "
        f"Copy it to each board (e.g. scp -p) and join with --token-file.\n"
    )
    return _ray_start(cmd, ray_env(os.environ, token))


def _cmd_agent_join(args: argparse.Namespace, cache_dir: Path) -> int:
    import time

    from nnsweep.agents._node import (
        check_token_file,
        default_token_path,
        join_command,
        ray_env,
        ray_temp_dir,
        start_failure,
    )

    try:
        cmd = join_command(
            args.address,
            args.device,
            machine=args.machine,
            converters=args.converters,
            dashboard_agent_port=args.dashboard_agent_port,
            block=args.block,
        )
        token: Path | None = args.token_file
        if token is None and not os.environ.get("RAY_AUTH_TOKEN"):
            token = default_token_path(os.environ, Path.home())
        if token is not None:
            check_token_file(token, option="--token-file", allow_readable=args.allow_readable_token)
    except SpecError as exc:
        return _usage_error(exc, {})
    since = time.time() - 1.0  # some filesystems keep whole seconds
    code = _ray_start(cmd, ray_env(os.environ, token))
    reason = start_failure(ray_temp_dir(os.environ), since) if code != 0 else None
    if reason is not None:
        sys.stderr.write(f"nnsweep agent join: {reason}\n")
    return code


def _setup_logging(verbosity: int) -> None:
    level = logging.WARNING if verbosity == 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    # torch warns about its own pytree registrations on every import of torchao; not ours to act on.
    logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)


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
        code: int = args.handler(args, cache_dir)
    except SpecError as exc:
        return _usage_error(exc, _BENCH_OPTIONS)
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
