"""``nnsweep bench``: convert one configuration through the artifact cache and measure it here."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nnsweep.cli._args import _int_in, _positive_shape, one_of_setting, setting_option
from nnsweep.cli._bench_after import AfterRuns, add_after_options, after_runs
from nnsweep.cli._bench_decoder import is_decoder, run_decoder
from nnsweep.cli._bench_notes import CPUINFO, measured_float, name_float_layers, saturation_hint
from nnsweep.cli._bench_npu import estimate, estimate_fields, estimate_lines
from nnsweep.cli._bench_task import add_task_options, bench_task, task_data, user_metrics
from nnsweep.cli._output import EXIT_FAILED, EXIT_OK, Status, _one_line, _usage_error, results
from nnsweep.core import runtimes
from nnsweep.core.errors import SpecError, TrialError
from nnsweep.core.measure import MeasureSettings
from nnsweep.spec.settings import SearchSpace

if TYPE_CHECKING:
    from nnsweep.bench import Evaluation

# MeasureSettings field -> the option that sets it (its bounds, default and help are the field's).
_MEASURE_OPTIONS = {
    "warmup": "--warmup",
    "iters": "--iters",
    "min_duration_s": "--min-duration",
    "timeout_s": "--timeout",
    "until_stable": "--until-stable",
    "ci_rel": "--ci",
    "max_duration_s": "--max-duration",
}
# DeploymentConfig / MeasureSettings field -> the option that sets it, so errors name what the user typed.
_BENCH_OPTIONS = _MEASURE_OPTIONS | {
    "runtime": "--runtime",
    "backends": "--backends",
    "quant.mode": "--quant",
    "quant.granularity": "--granularity",
    "quant.calibration": "--calibration",
    "quant.calibration_batches": "--calibration-batches",
    "quant.interface": "--interface",
    "quant.qat_epochs": "--qat-epochs",
    "quant.group_size": "--group-size",
    "partitions": "--max-partitions/--min-nodes",
    "partitions.max_delegated_partitions": "--max-partitions",
    "partitions.min_nodes_per_partition": "--min-nodes",
    "threads": "--threads",
    "model": "--model",
    "weights": "--weights",
    "input_shape": "--input-shape",
    "quant.float_layers": "--float-layers",
    "quant.options": "--config: quant.options",
    "quant.options.quant_format": "--quant-format",
    "quant.options.activation_type": "--activation-type",
    "quant.options.weight_type": "--weight-type",
    "quant.options.reduce_range": "--reduce-range",
    "quant.options.int4_activations": "--int4-activations",
}
# The runtimes' own quantizer options bench sets (RuntimeInfo.quant_options): argparse dest -> option.
_QUANT_OPTIONS = ("quant_format", "activation_type", "weight_type", "reduce_range", "int4_activations")

log = logging.getLogger(__name__)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``nnsweep bench``: the configuration's options, then the measurement's."""
    parser = subparsers.add_parser(
        "bench",
        help="convert one configuration and measure it on this machine",
        description="Convert a model for one deployment configuration (through the artifact cache), "
        "measure latency and memory in a fresh process, and evaluate accuracy and fidelity "
        "against the fp32 model on the same inputs.",
    )
    _config_options(parser)
    _measure_options(parser)
    add_task_options(parser)
    add_after_options(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the summary")
    parser.set_defaults(handler=run)


def _config_options(parser: argparse.ArgumentParser) -> None:
    """The model and the deployment configuration (over a --config file)."""
    parser.add_argument(
        "--model", default="digits", help="digits, digits_gn, tiny_llama, torchvision:NAME, pkg.mod:fn or file.py:fn"
    )
    parser.add_argument(
        "--kind",
        choices=("model", "decoder"),
        help="decoder: the model is a decoder language model, timed per token (tiny_llama is one); "
        "default model (one input, one call)",
    )
    parser.add_argument("--weights", type=Path, help="state dict for a torchvision model (default: random weights)")
    parser.add_argument("--input-shape", type=_positive_shape, help="input shape for user models, e.g. 1,3,224,224")
    parser.add_argument("--config", type=Path, help="a configuration file (YAML or JSON, as `nnsweep best` prints)")
    parser.add_argument("--runtime", help=f"{', '.join(runtimes.listed_names())} (default: executorch)")
    parser.add_argument("--backends", help="comma list in preference order, e.g. xnnpack,portable or CpuAcc,CpuRef")
    parser.add_argument(
        "--quant", help="fp32, fp16, dynamic_int8, static_int8, qat_int8, int4_weight or a16w8 (default: fp32)"
    )
    parser.add_argument("--granularity", help="per_tensor or per_channel (int8 modes; default per_channel)")
    parser.add_argument("--calibration", help="minmax, histogram, entropy or percentile (static int8)")
    parser.add_argument(
        "--calibration-batches", type=_int_in(1, 10_000), help="calibration batches of 16 samples (default 8)"
    )
    parser.add_argument("--interface", help="core (float in/out) or full (quantized in/out)")
    parser.add_argument("--qat-epochs", type=_int_in(0, 1000), help="fine-tuning epochs for qat_int8 (default 3)")
    parser.add_argument(
        "--group-size",
        type=one_of_setting(SearchSpace, "group_size"),
        help="input features per 4-bit weight scale, int4_weight (default 32)",
    )
    parser.add_argument(
        "--max-partitions",
        type=one_of_setting(SearchSpace, "max_delegated_partitions"),
        help="keep the N largest delegated partitions (0 = no limit)",
    )
    parser.add_argument(
        "--min-nodes",
        type=one_of_setting(SearchSpace, "min_nodes_per_partition"),
        help="smaller delegated partitions fall back",
    )
    parser.add_argument("--threads", type=one_of_setting(SearchSpace, "threads"), help="CPU threads (default 1)")
    parser.add_argument(
        "--quant-format", help="ONNX Runtime static int8: qdq (default) or qoperator (QLinearConv, QGemm)"
    )
    parser.add_argument("--activation-type", help="ONNX Runtime static int8: uint8 (default) or int8 activations")
    parser.add_argument("--weight-type", help="ONNX Runtime int8 modes: int8 (default) or uint8 weights")
    parser.add_argument(
        "--reduce-range",
        nargs="?",
        const="true",
        metavar="true|false",
        help="ONNX Runtime int8 modes: 7-bit weights (against overflow on x86 CPUs without VNNI); default false",
    )
    parser.add_argument(
        "--int4-activations", help="ONNX Runtime int4_weight: float (default) or int8 (quantized at run time)"
    )
    parser.add_argument(
        "--float-layers",
        type=one_of_setting(SearchSpace, "float_layers"),
        help="int8 modes: keep the K layers the runtime's quantizer finds most sensitive in float "
        "(its ranking: nnsweep sensitivity; default 0, the whole model int8)",
    )


def _measure_options(parser: argparse.ArgumentParser) -> None:
    """How long and how often to time it: the spec's ``measure.*``, one option each."""
    until = {"ci_rel": "with --until-stable", "max_duration_s": "with --until-stable"}  # what it refines
    for name, flag in _MEASURE_OPTIONS.items():
        setting_option(parser, MeasureSettings, name, flag, context=until.get(name, ""))


def run(args: argparse.Namespace, cache_dir: Path) -> int:
    from nnsweep.models import check_reference

    try:
        config = _bench_config(args)
        settings = MeasureSettings(**{name: getattr(args, name) for name in _MEASURE_OPTIONS})
        check_reference(args.model)
        if is_decoder(args):
            return run_decoder(args, config, settings, cache_dir)
        metrics, data = user_metrics(args), task_data(args)
        if args.weights is not None and not args.weights.is_file():
            raise SpecError("weights", f"file {str(args.weights)[:200]!r} does not exist")
    except SpecError as exc:
        return _usage_error(exc, _BENCH_OPTIONS)
    return _execute_bench(args, config, settings, cache_dir, (metrics, data))


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
        ("group_size", "group_size"),
    ):
        if getattr(args, option) is not None:
            quant[key] = getattr(args, option)
    _quant_options(args, quant)
    if args.max_partitions is not None:
        parts["max_delegated_partitions"] = args.max_partitions
    if args.min_nodes is not None:
        parts["min_nodes_per_partition"] = args.min_nodes
    if args.threads is not None:
        data["threads"] = args.threads
    _default_granularity(data["runtime"], quant)
    if args.float_layers:
        # Stand-in names until the model's ranking names the layers (_name_float_layers):
        # enough to check now that the runtime and mode can keep layers float.
        quant["float_layers"] = [f"layer{i}" for i in range(args.float_layers)]
    data["quant"], data["partitions"] = quant, parts
    source = "--config" if args.config is not None else None
    try:
        config = DeploymentConfig.from_dict(data)
        if args.float_layers and not config.quant.float_layers:
            raise SpecError(
                "quant.float_layers", "keeps layers of an int8 or int4_weight model in float: give one of those --quant"
            )
        if quant.get("float_layers") and not config.quant.float_layers:  # a --config's, under fp32 or fp16
            raise SpecError(
                "--config: quant.float_layers", "keeps layers of an int8 or int4_weight model in float: give either"
            )
        return config
    except SpecError as exc:
        if len(exc.message) > 200:
            raise SpecError(exc.field, exc.message[:197] + "...") from None
        raise
    except (TypeError, ValueError, KeyError) as exc:  # a config file's value of the wrong kind
        from nnsweep.spec import excerpt

        raise SpecError(source or "config", f"invalid configuration: {excerpt(str(exc), 120)}") from None


def _quant_options(args: argparse.Namespace, quant: dict[str, Any]) -> None:
    """``--quant-format`` and the like into ``quant["options"]`` (over a --config file's);
    the runtime checks them with the rest of the configuration."""
    given = {name: getattr(args, name) for name in _QUANT_OPTIONS if getattr(args, name) is not None}
    if not given:
        return
    if "reduce_range" in given:
        flag = str(given["reduce_range"]).lower()
        if flag not in ("true", "false"):
            raise SpecError("quant.options.reduce_range", f"give true or false, or no value for true; got {flag!r}")
        given["reduce_range"] = flag == "true"
    options = quant.get("options") or {}
    if not isinstance(options, dict):
        raise SpecError("quant.options", "must be a mapping of option names to values")
    quant["options"] = {**options, **given}


def _default_granularity(runtime: str, quant: dict[str, Any]) -> None:
    """No granularity given: the runtime's own for the mode (per channel where it has it,
    else what it has: Arm NN's parser takes per-tensor int8 only)."""
    from nnsweep.core import runtimes
    from nnsweep.core.quant import Granularity, QuantMode

    mode = quant.get("mode")
    if "granularity" in quant or mode not in {m.value for m in QuantMode}:
        return
    try:
        allowed = runtimes.get(runtime).modes.get(QuantMode(mode), frozenset())
    except SpecError:
        return  # an unknown runtime is said by the config's own check
    if allowed and Granularity.PER_CHANNEL not in allowed:
        quant["granularity"] = sorted(g.value for g in allowed)[0]


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


def _load(args: argparse.Namespace, cache: Any, progress: Any, data: Any) -> Any:
    from nnsweep.models import load_model

    return load_model(
        args.model,
        cache_dir=cache.models_dir,
        weights=args.weights,
        input_shape=args.input_shape,
        progress=progress,
        data=data,
    )


def _execute_bench(
    args: argparse.Namespace, config: Any, settings: Any, cache_dir: Path, task_input: tuple[Any, Any] = ((), None)
) -> int:
    """Convert through the cache and measure: everything after the input is checked.

    On a cache hit the model is not loaded: its snapshot (digest, evaluation data,
    fp32 reference) and the artifact are all a measurement needs, and torch stays
    unimported (:class:`~nnsweep.models.SnapshotStore`).
    """
    from nnsweep.artifacts import deploy
    from nnsweep.artifacts.cache import ArtifactCache
    from nnsweep.bench import ForkHere
    from nnsweep.models import SnapshotStore

    cache = ArtifactCache(cache_dir)
    store = SnapshotStore(cache.models_dir)
    status = Status(enabled=not args.json)
    metrics, data = task_input
    # the user's data or metrics need the model itself (targets, output shapes): no snapshot
    recipe = store.recipe(args.model, args.weights, args.input_shape) if not (metrics or data) else None
    task = None
    bundle = None
    float_note = None
    if args.float_layers:
        try:
            config, float_note = name_float_layers(args, config, cache_dir, status)
        except SpecError as exc:
            status.clear()
            return _usage_error(exc, _BENCH_OPTIONS)
    snapshot = store.lookup(recipe) if recipe is not None else None
    artifact = deploy.cached(snapshot.digest, config, cache) if snapshot is not None else None
    try:
        if artifact is None or snapshot is None:
            status.line(f"loading {args.model} ...", tty_only=True)
            try:
                bundle, snapshot = store.load(args.model, recipe, partial(_load, args, cache, status.line, data))
                task = bench_task(bundle, metrics, snapshot.reference)
            except SpecError as exc:
                status.clear()
                return _usage_error(exc, _BENCH_OPTIONS)
            try:  # the layers a --config names (--float-layers K takes them from the ranking)
                deploy.check_float_layers(bundle, config)
            except SpecError as exc:
                status.clear()
                return _usage_error(exc, {exc.field: f"--config: {exc.field}"})
            status.line(f"converting {bundle.name} for {config.label()} ...")
            artifact, hit = deploy.convert(bundle, config, cache)
        else:
            hit = True
        snapshot.warn_if_constant()
        reply = None
        if runtimes.npu_target(config) is not None:  # no such NPU here: Vela's estimate, the TOSA graph's outputs
            status.line(f"estimating; running its TOSA graph on {len(snapshot.evaluation)} inputs ...")
            result, reply = estimate(snapshot, artifact, settings, cache_hit=hit)
        else:
            # On a cache hit this process is still light (no torch, no thread): fork the measurement from it.
            status.line(f"measuring ({settings.warmup} warm-up + {settings.iters} timed runs) ...", ticking=False)
            fork = ForkHere.for_runtime(config.runtime)
            result = deploy.measure(snapshot, artifact, settings, cache_hit=hit, worker=fork, task=task)
    except TrialError as exc:
        status.clear()
        log.info("the failure's traceback (the toolchain's own, as its cause):", exc_info=exc)  # -v
        sys.stderr.write(f"nnsweep bench: failed: {_one_line(str(exc))}\n")
        return EXIT_FAILED
    loaded = bundle  # a cache hit loads the fp32 model only for --explain, its reference

    def fp32_model() -> Any:
        return loaded or _load(args, cache, status.line, data)

    after = after_runs(args, artifact, snapshot, settings.timeout_s, fp32_model, status.line)
    status.clear()
    _write_result(args, result, reply, after)
    # Nothing int8: no kernel saturates.
    hint = float_note or measured_float(config, result, snapshot) or saturation_hint(config, CPUINFO)
    if hint is not None:
        sys.stderr.write(f"nnsweep bench: note: {hint}\n")
    return EXIT_OK


def _write_result(args: argparse.Namespace, result: Any, reply: Any, after: AfterRuns) -> None:
    """The summary (or JSON object), an NPU's estimate in place of the timings, then what ran after
    the timed runs (the profile, the divergence by layer)."""
    p50 = result.timing.latency.p50 if reply is None else None
    if args.json:
        fields = {} if reply is None else estimate_fields(reply)
        results().write(json.dumps(result.to_dict() | fields | after.fields(p50)) + "\n")
    else:
        summary = _bench_summary(result, None if reply is None else estimate_lines(reply))
        results().write(summary + after.text(p50) + "\n")


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


def _bench_summary(result: Any, estimated: list[str] | None = None) -> str:
    """A summary a ``benchmark_model`` user would recognise, then the partition report.
    ``estimated``: the lines on speed and memory of an NPU's estimate, instead of the timings."""
    t, a = result.timing, result.artifact
    lines = [
        "STARTING!",
        f"Model: {result.model} (digest {result.model_digest[:12]})",
        f"Config: {a.config.label()}",
        f"Artifact: {a.path} ({a.size_bytes:,} bytes; "
        + ("cache hit" if result.cache_hit else f"converted in {a.convert_s:.1f} s")
        + ")",
        *(_timing_lines(t) if estimated is None else estimated),
    ]
    lines += quality_lines(result.evaluation)
    lines += [f"Metric {name}: {value:.6g}" for name, value in result.metrics.items()]
    lines.append(a.partitions.render())
    return "\n".join(lines)


def quality_lines(e: Evaluation) -> list[str]:
    """Accuracy and fidelity as the summary prints them. An output with a class at each of
    several positions (a tagger's steps, a segmentation's pixels) says that top-1 is per
    position, so 95 % reads as 95 % of the steps, not of the sequences."""
    f = e.fidelity
    each = f" at each of {e.positions} positions" if e.positions > 1 else ""
    if e.accuracy is not None:
        lines = [f"Accuracy (top-1{each}, {e.samples} evaluation samples): {e.accuracy * 100:.2f} %"]
    else:
        lines = [f"Accuracy: n/a (no labelled data; fidelity on {e.samples} inputs)"]
    sqnr = "inf (identical)" if f.sqnr_db == float("inf") else f"{f.sqnr_db:.1f} dB"
    per_position = " (per position)" if e.positions > 1 else ""
    lines.append(
        f"Fidelity vs fp32: top-1 agreement {f.top1_agreement * 100:.1f} %{per_position}, "
        f"max abs err {f.max_abs_err:.3g}, mean abs err {f.mean_abs_err:.3g}, SQNR {sqnr}"
        + (" (worst of the outputs; class ids by their agreement only)" if e.per_output else "")
    )
    for i, part in enumerate(e.per_output):
        part_sqnr = "inf (identical)" if part.sqnr_db == float("inf") else f"{part.sqnr_db:.1f} dB"
        lines.append(
            f"  output {i}: top-1 agreement {part.top1_agreement * 100:.1f} %, max abs err {part.max_abs_err:.3g}, "
            f"mean abs err {part.mean_abs_err:.3g}, SQNR {part_sqnr}"
        )
    return lines


def _timing_lines(t: Any) -> list[str]:
    """The measured timings and memory, as ``benchmark_model`` prints them."""
    lat = t.latency
    return [
        f"Num threads: [{t.threads}]  Loadavg (1 min): "
        + ("n/a" if t.loadavg_1m is None else f"{t.loadavg_1m:.2f}")
        + _others_text(t),
        f"Init: {t.load_ms * 1000:.0f} us, First inference: {t.first_inference_ms * 1000:.0f} us, "
        f"Timed runs: {lat.count}",
        f"Inference timings in us: mean {lat.mean * 1000:.1f}  p50 {lat.p50 * 1000:.1f}  p90 {lat.p90 * 1000:.1f}  "
        f"p99 {lat.p99 * 1000:.1f}  std {lat.std * 1000:.1f}  min {lat.min * 1000:.1f}  max {lat.max * 1000:.1f}",
        _p50_interval(t),
        f"Peak memory footprint (MB): {t.peak_rss_mb:.1f} "
        f"(process; {t.rss_before_load_mb:.1f} before loading the model)",
    ]


def _others_text(t: Any) -> str:
    """Other processes' work on the measuring cores during the timed runs, where known."""
    others = t.others_cores
    if others is None:
        return ""
    return f"  Others on its cores: {others:.2f} cores" + (
        " (beyond what its threads left spare: this figure met contention)" if t.contended else ""
    )
