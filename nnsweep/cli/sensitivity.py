"""``nnsweep sensitivity``: rank a model's layers by what int8 costs each, through a runtime's quantizer."""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nnsweep.cli._args import _positive_shape, one_of_setting
from nnsweep.cli._bench_task import add_task_options, bench_task, task_data, user_metrics
from nnsweep.cli._output import EXIT_OK, Status, _usage_error, results
from nnsweep.cli.bench import _BENCH_OPTIONS
from nnsweep.core.errors import ConversionError, SpecError
from nnsweep.core.metrics import ACCURACY, SQNR
from nnsweep.core.quant import Granularity
from nnsweep.spec.settings import SearchSpace

if TYPE_CHECKING:
    from nnsweep.core.metrics import UserMetric
    from nnsweep.sensitivity.rank import LayerSensitivity, SensitivityReport
    from nnsweep.sensitivity.scoring import RankingMetric

# The model options are bench's, so say them as bench does.
_OPTIONS = {
    **{key: _BENCH_OPTIONS[key] for key in ("model", "weights", "input_shape")},
    "runtime": "--runtime",
    "quant": "--quant",
    "quant.granularity": "--granularity",
    "quant.group_size": "--group-size",
    "granularity": "--granularity",
    "--metric": "--metric",
    "--max-samples": "--max-samples",
    "data.evaluation": "--data",
}


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``nnsweep sensitivity``."""
    parser = subparsers.add_parser(
        "sensitivity",
        help="rank a model's layers by how much int8 costs each, through a runtime's quantizer",
        description="Quantize each layer of the model alone (the others float: convolutions, linear layers and "
        "other modules with a weight of their own, such as attention, that the forward calls) with "
        "the runtime's own int8 quantizer and rank the layers by the top-1 accuracy each costs on the "
        "calibration split (or by --metric, your own, on --data's targets): the most sensitive are "
        "the ones to keep in float (space.float_layers, "
        "bench --float-layers). Kept in the cache per model, runtime and granularity.",
    )
    parser.add_argument("--model", default="digits_outlier", help="a model reference, as for bench")
    parser.add_argument("--weights", type=Path, help="state dict for a torchvision model (default: random weights)")
    parser.add_argument("--input-shape", type=_positive_shape, help="input shape for user models, e.g. 1,3,224,224")
    parser.add_argument("--runtime", required=True, help="onnxruntime, torch, executorch, litert or armnn")
    parser.add_argument(
        "--quant",
        default="static_int8",
        help="the int8 mode (the ranking quantizes statically; torch, on a model torch.fx cannot trace, dynamically), "
        "or int4_weight: the linear layers, each alone at 4 bits (torchao's 8da4w in PyTorch, for every runtime)",
    )
    parser.add_argument(
        "--group-size",
        type=one_of_setting(SearchSpace, "group_size"),
        help="int4_weight: input features per 4-bit weight scale (default 32)",
    )
    parser.add_argument("--granularity", help="per_tensor or per_channel weights (default: the runtime's own)")
    add_task_options(parser)
    parser.add_argument(
        "--goal",
        choices=("maximize", "minimize"),
        default="maximize",
        help="with --metric: whether larger or smaller values of it are better",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, cache_dir: Path) -> int:
    from nnsweep.core import runtimes
    from nnsweep.core.quant import QuantConfig, QuantMode
    from nnsweep.sensitivity.ranking import ranked_runtimes

    try:
        info = runtimes.get(args.runtime)
        if not info.sensitivity:
            raise SpecError(
                "runtime", f"no per-layer sensitivity for {args.runtime}; use {', '.join(ranked_runtimes())}"
            )
        mode = QuantMode(args.quant) if args.quant in {m.value for m in QuantMode} else None
        if mode is None or not (mode.is_int8 or mode.is_grouped):
            allowed = ", ".join(m.value for m in QuantMode if m.is_int8 or m.is_grouped)
            raise SpecError("quant", f"{args.quant!r} is not an int8 or int4_weight mode; use one of {allowed}")
        if mode not in info.modes:
            raise SpecError("quant", f"{args.runtime} cannot do {mode.value}")
        if args.group_size is not None and not mode.is_grouped:
            raise SpecError("quant.group_size", "belongs to --quant int4_weight")
        # int4_weight: QuantConfig checks the group size and fills in its default
        group_size = QuantConfig(mode, group_size=args.group_size).group_size
        granularity = None if mode.is_grouped else _granularity(args.granularity, info.modes[mode])
        from nnsweep.models import check_reference

        check_reference(args.model)
        metrics = user_metrics(args)
        if len(metrics) > 1:
            raise SpecError("--metric", "give one metric to rank the layers by")
        data = task_data(args)
    except SpecError as exc:
        return _usage_error(exc, _OPTIONS)
    status = Status(enabled=not args.json)
    status.line(f"loading {args.model}", tty_only=True)
    from nnsweep.artifacts.cache import ArtifactCache
    from nnsweep.models import ModelSnapshot, load_model
    from nnsweep.sensitivity.ranking import ranking

    cache = ArtifactCache(cache_dir)
    try:
        bundle = load_model(
            args.model, cache_dir=cache.models_dir, weights=args.weights, input_shape=args.input_shape, data=data
        )
        snapshot = ModelSnapshot.of(bundle)
        snapshot.warn_if_constant()  # every layer would cost nothing
        metric = _ranking_metric(bundle, metrics, args.goal, snapshot.reference)
        start = time.perf_counter()
        report, hit = ranking(
            bundle, args.runtime, granularity, cache_dir, progress=status.line, metric=metric, group_size=group_size
        )
    except SpecError as exc:
        status.clear()
        return _usage_error(exc, _OPTIONS)
    except ConversionError as exc:
        status.clear()
        if group_size is None:
            raise
        return _usage_error(SpecError("quant", str(exc)), _OPTIONS)  # no linear layer 4 bits could take
    wall = time.perf_counter() - start
    status.clear()
    if args.json:
        results().write(json.dumps(_json(args, granularity, report, hit, wall)) + "\n")
        return EXIT_OK
    lines = _table(f"{args.model} on {args.runtime}", granularity, report, hit, wall)
    results().write("\n".join(lines) + "\n")
    return EXIT_OK


def _ranking_metric(bundle: Any, metrics: tuple[UserMetric, ...], goal: Any, reference: Any) -> RankingMetric | None:
    """``--metric`` imported and checked on the fp32 outputs, with ``--goal`` (``None``: rank by top-1)."""
    import dataclasses

    from nnsweep.sensitivity.scoring import RankingMetric

    task = bench_task(bundle, tuple(dataclasses.replace(m, goal=goal) for m in metrics), reference)
    return None if task is None else RankingMetric(task.metrics[0], task.functions[0])


def _json(
    args: argparse.Namespace, granularity: Granularity | None, report: SensitivityReport, hit: bool, wall: float
) -> dict[str, object]:
    """The ranking as ``--json`` prints it."""
    return {
        "model": args.model,
        "runtime": args.runtime,
        "granularity": granularity.value if granularity else None,
        "mode": report.mode,  # the int8 mode the layers were quantized in
        "metric": report.metric,  # what the scores are: accuracy (top-1) or --metric
        "goal": report.goal,
        "split": report.split,
        "whole_int8": report.whole_int8,
        "all_float": report.all_float,
        # an SQNR of inf (outputs identical to fp32's) is null: JSON has no infinity
        "ranked": [
            {
                "layer": e.layer,
                "cost": report.score(e, "quantize_one"),
                SQNR: e.quantize_one_sqnr if math.isfinite(e.quantize_one_sqnr) else None,
                "inert": e.inert,  # its int8 changes nothing: the quantizer leaves it float
            }
            for e in report.ranked_entries("quantize_one")
        ],
        "all_tie": report.all_tie(),
        "seconds": report.seconds,
        "wall_s": wall,
        "cache_hit": hit,
    }


def _table(what: str, granularity: Granularity | None, report: SensitivityReport, hit: bool, wall: float) -> list[str]:
    """The ranking as text lines: the layers in order, what quantizing each alone costs."""
    g = f" {granularity.value}" if granularity else ""
    ranked = report.ranked_entries("quantize_one")
    top1 = report.metric == ACCURACY
    by = "top-1" if top1 else report.metric

    def value(v: float) -> str:
        return f"{v:.2%}" if top1 else f"{v:.4g}"

    def cost(e: LayerSensitivity) -> str:
        v = report.score(e, "quantize_one")
        return f"{v * 100:+6.2f} points" if top1 else f"{v:+10.4g} {report.metric}"

    lines = [
        f"{what} ({report.mode.replace('_', ' ')}{g}), {by} on the {report.split} split:",
        f"  all layers int8 {value(report.whole_int8)}; the candidate layers float {value(report.all_float)}",
        f"  layers by what quantizing each alone costs, {by} then the outputs' SQNR against fp32"
        " (keep the first K in float: --float-layers K):",
    ]
    lines += [
        f"  {i:3d}. {e.layer:<40} {cost(e)}  {e.quantize_one_sqnr:6.1f} dB"
        + ("  (int8 changes nothing: this quantizer leaves it float)" if e.inert else "")
        for i, e in enumerate(ranked, 1)
    ]
    if not ranked:
        lines.append("  none: the model has no convolution, linear layer or other layer with a weight to keep float")
    if report.all_tie():
        lines.append(
            f"  every layer costs the same {by} here (the {report.split} split does not tell them apart by"
            f" {by}): the order is by SQNR alone, how much each layer's int8 distorts the outputs"
        )
    source = "from the cache" if hit else f"measured in {report.seconds:.1f} s ({report.evaluations} runs)"
    lines.append(f"  ({source}; {wall:.1f} s now)")
    return lines


def _granularity(given: str | None, allowed: frozenset[Granularity]) -> Granularity | None:
    if given is None:
        return Granularity.PER_CHANNEL if Granularity.PER_CHANNEL in allowed else next(iter(sorted(allowed)), None)
    try:
        granularity = Granularity(given)
    except ValueError:
        raise SpecError("granularity", f"unknown value {given!r}; allowed: per_tensor, per_channel") from None
    if granularity not in allowed:
        raise SpecError("granularity", f"this runtime's mode allows {', '.join(sorted(g.value for g in allowed))}")
    return granularity
