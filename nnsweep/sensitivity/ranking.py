"""A runtime's ranking of a model's layers, measured once and kept in the cache.

:func:`ranking` measures, through the runtime's own int8 quantizer, what quantizing each
layer alone costs (``quantize_one``, :mod:`nnsweep.sensitivity.rank`), and keeps it under
the cache root keyed like an artifact (:func:`nnsweep.artifacts.key.stage_key`). An entry
carries its content's sha256; a damaged entry, or one ranking layers the model lacks, is
measured again.

Each runtime's evaluator is its :attr:`RuntimeInfo.sensitivity` hook. They quantize
statically and score top-1 (or agreement with fp32) on the calibration split, never the
evaluation split, so choosing layers does not tune on the data accuracy is judged with;
or, for a sweep decided by a user metric, that metric (:mod:`nnsweep.sensitivity.scoring`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from nnsweep.core import runtimes
from nnsweep.core.atomic import atomic_path
from nnsweep.core.digests import json_sha256
from nnsweep.core.errors import ConversionError, NnsweepError, SpecError, first_line
from nnsweep.core.metrics import ACCURACY
from nnsweep.core.quant import Granularity
from nnsweep.core.tracing import TRACING
from nnsweep.runtimes.common.converter import rnn_export_warning_silenced
from nnsweep.runtimes.common.shortcuts import repeated_work_skipped
from nnsweep.sensitivity.int4 import MODE as INT4_MODE
from nnsweep.sensitivity.int4 import int4_evaluator, int4_layers
from nnsweep.sensitivity.rank import (
    CALIBRATION_SAMPLES,
    Evaluator,
    LayerSensitivity,
    Method,
    Score,
    SensitivityReport,
    measure,
    quantizable_layers,
    reference_outputs,
    scored_layout,
)
from nnsweep.sensitivity.scoring import MetricScoring, RankingMetric, Scoring, Top1Scoring

if TYPE_CHECKING:
    import numpy as np

    from nnsweep.core.metrics import UserMetric
    from nnsweep.models import ModelBundle, Split

__all__ = [
    "cached_ranking",
    "evaluator",
    "ranked_runtimes",
    "ranking",
    "report_from_dict",
    "report_to_dict",
    "scoring",
]

log = logging.getLogger(__name__)


def ranked_runtimes() -> tuple[str, ...]:
    """The registered runtimes that rank layers (a :attr:`RuntimeInfo.sensitivity` hook)."""
    return tuple(name for name in runtimes.names() if runtimes.get(name).sensitivity)


def report_to_dict(report: SensitivityReport) -> dict[str, object]:
    """The report as JSON data (an SQNR of ``inf``, identical outputs, is written as ``Infinity``)."""
    return {
        "whole_int8": report.whole_int8,
        "all_float": report.all_float,
        "layers": [
            [e.layer, e.float_one, e.quantize_one, e.float_one_sqnr, e.quantize_one_sqnr] for e in report.layers
        ],
        "seconds": report.seconds,
        "evaluations": report.evaluations,
        "whole_int8_sqnr": report.whole_int8_sqnr,
        "all_float_sqnr": report.all_float_sqnr,
        "mode": report.mode,
        "metric": report.metric,
        "goal": report.goal,
        "split": report.split,
    }


def report_from_dict(data: dict[str, object]) -> SensitivityReport:
    """:func:`report_to_dict`'s data as a report (rows of three: no SQNR, ``nan``)."""
    layers = tuple(LayerSensitivity(str(row[0]), *map(float, row[1:5])) for row in data["layers"])  # type: ignore[attr-defined]
    return SensitivityReport(
        float(data["whole_int8"]),  # type: ignore[arg-type]
        float(data["all_float"]),  # type: ignore[arg-type]
        layers,
        float(data["seconds"]),  # type: ignore[arg-type]
        int(data["evaluations"]),  # type: ignore[call-overload]
        float(data.get("whole_int8_sqnr", "nan")),  # type: ignore[arg-type]
        float(data.get("all_float_sqnr", "nan")),  # type: ignore[arg-type]
        str(data.get("mode", "static_int8")),
        str(data.get("metric", ACCURACY)),
        str(data.get("goal", "maximize")),
        str(data.get("split", "calibration")),
    )


def ranking(
    bundle: ModelBundle,
    runtime: str,
    granularity: Granularity | None,
    cache_root: Path,
    progress: Callable[[str], None] | None = None,
    metric: RankingMetric | None = None,
    group_size: int | None = None,
) -> tuple[SensitivityReport, bool]:
    """The runtime's sensitivity report for ``bundle``, from the cache or measured now.

    ``metric``: the user metric to rank by (else top-1, :func:`evaluator`). ``group_size``:
    rank the linear layers for ``int4_weight`` at that group size instead
    (:mod:`nnsweep.sensitivity.int4`, one ranking for every runtime).

    Returns:
        The report and whether it came from the cache.

    Raises:
        SpecError: no ranking for this runtime.
        ConversionError: the runtime's quantizer fails on this model (litert-torch 0.10's
            on an ``nn.GRU`` called without a hidden state, for one).
    """
    if runtime not in ranked_runtimes() and group_size is None:
        known = ", ".join(ranked_runtimes())
        raise SpecError("runtime", f"no per-layer sensitivity for {runtime}; it has one for: {known}")
    granularity = granularity or Granularity.PER_TENSOR
    user = metric.metric if metric is not None else None
    split_name = _metric_split(bundle, metric)
    path = _entry(bundle.digest, runtime, granularity, cache_root, user, split_name, group_size)
    if group_size is None:
        layers = quantizable_layers(bundle.module, bundle.example_input)
    else:
        layers = int4_layers(bundle, group_size)
    found = _read_entry(path)
    if found is not None:
        if sorted(e.layer for e in found.layers) == sorted(layers):
            return found, True
        log.warning("sensitivity entry %s ranks layers this model does not have; measuring again", path.name)
    done = [0]

    def counted(keep: frozenset[str]) -> Score:
        done[0] += 1
        if progress is not None:
            progress(f"{runtime}: {done[0]}/{len(layers) + 2} quantize-and-evaluate runs")
        return evaluate(keep)

    quantize_one: tuple[Method, ...] = ("quantize_one",)
    try:
        with TRACING, rnn_export_warning_silenced(), repeated_work_skipped():
            if group_size is None:
                evaluate = evaluator(bundle, runtime, granularity, metric)  # exports the model
            else:
                scored_split, scored = scoring(bundle, metric)
                evaluate = int4_evaluator(bundle, scored_split, group_size, scored)
            report = measure(layers, counted, methods=quantize_one)
        if group_size is not None:
            report = dataclasses.replace(report, mode=INT4_MODE)
        elif mode := getattr(evaluate, "mode", None):  # an evaluator that may rank in another int8 mode
            report = dataclasses.replace(report, mode=mode)
        if metric is not None:
            split = _metric_split(bundle, metric)
            report = dataclasses.replace(report, metric=metric.metric.name, goal=metric.metric.goal, split=split)
    except NnsweepError:
        raise
    except Exception as exc:  # toolchain code: its quantizer cannot take this model
        raise ConversionError(
            f"{runtime}'s quantizer cannot rank the layers of this model ({first_line(exc, 160)}); "
            f"rank them through another runtime, or keep {runtime}'s float_layers at 0"
        ) from exc
    try:
        with atomic_path(path) as tmp:
            tmp.write_text(_sealed(report))
    except OSError as exc:  # measured minutes ago: keep the answer, lose only the cache entry
        reason = exc.strerror or exc
        log.warning("cannot keep the %s ranking at %s (%s): the next run measures it again", runtime, path, reason)
    return report, False


def _entry(
    digest: str,
    runtime: str,
    granularity: Granularity,
    cache_root: Path,
    metric: UserMetric | None = None,
    split: str = "calibration",
    group_size: int | None = None,
) -> Path:
    from nnsweep.artifacts.key import runtime_toolchain, stage_key, toolchain_versions
    from nnsweep.bench.task import function_digest

    settings = {
        "runtime": runtime,
        "granularity": granularity.value,
        "method": "quantize_one",
        "samples": CALIBRATION_SAMPLES,
        # which layers are candidates (rank.quantizable_layers): 3, the layers the forward
        # calls, attention blocks included, parametrizations not (2 listed weight_norm's
        # factors as layers; 1 listed uncalled ones, such as out_proj)
        "candidates": 3,
        # ties in accuracy broken by the outputs' SQNR against fp32 (rank.SensitivityReport.ranked)
        "tie_break": "sqnr",
    }
    if group_size is None:
        settings.update(runtimes.get(runtime).sensitivity_settings)
    else:  # one int4 ranking for every runtime: torchao's 8da4w in eager PyTorch
        settings.update(runtime="int4_weight", granularity="per_group", group_size=group_size, method="int4_one")
    if metric is not None:  # a top-1 ranking's key is as it was, so its entries are still found
        settings.update(metric=metric.name, goal=metric.goal, code=function_digest(metric.function), split=split)
    if group_size is None:
        toolchain = runtime_toolchain(runtime)
    else:
        toolchain = {**toolchain_versions(("torch", "torchao")), "converters": runtime_toolchain(runtime)["converters"]}
    key = stage_key(digest, "sensitivity", settings, toolchain)
    return cache_root / "sensitivity" / key[:2] / f"{key}.json"


def cached_ranking(
    digest: str,
    runtime: str,
    granularity: Granularity | None,
    cache_root: Path,
    metric: UserMetric | None = None,
    split: str = "calibration",
    group_size: int | None = None,
) -> SensitivityReport | None:
    """The report :func:`ranking` kept for the model ``digest``, if any (a damaged one: ``None``);
    ``metric``, ``split`` and ``group_size`` as the ranking was made (:attr:`SensitivityReport.split`)."""
    g = granularity or Granularity.PER_TENSOR
    return _read_entry(_entry(digest, runtime, g, cache_root, metric, split, group_size))


def _read_entry(path: Path) -> SensitivityReport | None:
    if not path.is_file():
        return None
    try:
        return report_from_dict(_unsealed(path.read_text()))
    except _UnsealedError:
        log.info("sensitivity entry %s was written by an older nnsweep; measuring again", path.name)
        return None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # a damaged entry is measured again
        log.warning("sensitivity entry %s is damaged (%s); measuring again", path.name, exc)
        return None


class _UnsealedError(ValueError):
    """An entry without the sha256 of its content (an unsealed format): measured again."""


def _sealed(report: SensitivityReport) -> str:
    """The entry's text: the report's data and the sha256 of its canonical JSON, so an entry
    altered after it was written (a flipped digit, a layer renamed) reads as damaged, as an
    artifact whose bytes no longer match its manifest does."""
    data = report_to_dict(report)
    return json.dumps({"sha256": json_sha256(data), "report": data})


def _unsealed(text: str) -> dict[str, object]:
    """The report's data from :func:`_sealed`'s text. Raises ``ValueError`` when the digest
    does not match (an unsealed entry has none: measured again)."""
    entry = json.loads(text)
    if isinstance(entry, dict) and "whole_int8" in entry and "sha256" not in entry:
        raise _UnsealedError
    data = entry["report"]
    if entry["sha256"] != json_sha256(data):
        raise ValueError("its content does not match its sha256")
    return data  # type: ignore[no-any-return]


def _scored_split(bundle: ModelBundle) -> tuple[Split, np.ndarray]:
    """The calibration split, labelled, and the fp32 model's scored output on it. The labels are
    its own, else the fp32 model's top-1 (the score is then top-1 agreement with fp32, as
    ``nnsweep bench`` reports for such models)."""
    from nnsweep.bench import predicted_classes

    split = bundle.dataset.calibration
    reference = reference_outputs(bundle, split)
    if split.labels is not None:
        return split, reference
    positions, class_axis = scored_layout(bundle)
    return dataclasses.replace(
        split, labels=predicted_classes(reference, positions=positions, class_axis=class_axis)
    ), reference


def _metric_split(bundle: ModelBundle, metric: RankingMetric | None) -> str:
    """Where a user metric is scored: the calibration split when its data gave targets (the
    ranking then tunes nothing on the data the sweep is judged with), else the evaluation
    split, the only data with targets for the metric."""
    if metric is None or bundle.dataset.calibration.targets is not None:
        return "calibration"
    return "evaluation"


def scoring(bundle: ModelBundle, metric: RankingMetric | None = None) -> tuple[Split, Scoring]:
    """The split a ranking scores on and how: top-1 on the calibration split, or ``metric``
    (:func:`_metric_split`) with the split's targets."""
    if metric is None:
        split, reference = _scored_split(bundle)
        return split, Top1Scoring(bundle, split, reference)
    from nnsweep.models import per_sample_shapes
    from nnsweep.models import reference_outputs as side_by_side

    split = getattr(bundle.dataset, _metric_split(bundle, metric))
    targets = split.targets if split.targets is not None else split.labels
    return split, MetricScoring(metric, targets, per_sample_shapes(bundle), side_by_side(bundle, split.inputs))


def evaluator(
    bundle: ModelBundle, runtime: str, granularity: Granularity, metric: RankingMetric | None = None
) -> Evaluator:
    """Top-1 on the calibration split (or ``metric``, :func:`scoring`), and the outputs' SQNR
    against fp32, with the given layers kept float, through ``runtime``'s quantizer (its
    registry entry's :attr:`~nnsweep.core.runtimes.RuntimeInfo.sensitivity`)."""
    hook = runtimes.get(runtime).sensitivity
    if not hook:
        raise SpecError(
            "runtime", f"no per-layer sensitivity for {runtime}; it has one for: {', '.join(ranked_runtimes())}"
        )
    split, scored = scoring(bundle, metric)
    per_channel = granularity is Granularity.PER_CHANNEL
    build: Callable[..., Evaluator] = runtimes.load_object(hook)
    return build(bundle, split, per_channel, scored)
