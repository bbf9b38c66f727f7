"""Deploy one configuration: convert (through the cache), measure, evaluate.

This is what ``nnsweep bench`` runs, and what a sweep runs per trial (conversion
on a host, measurement on the device's agent).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nnsweep.artifacts.cache import Artifact, ArtifactCache
from nnsweep.artifacts.key import artifact_key
from nnsweep.core import runtimes
from nnsweep.core.artifact import PartitionReport
from nnsweep.core.errors import (
    BenchmarkError,
    ConversionError,
    ConversionStorageError,
    SpecError,
    TrialError,
    clip,
    first_line,
)
from nnsweep.core.metrics import ACCURACY, FIRST_INFERENCE, LOAD, PEAK_RSS, SIZE
from nnsweep.core.tracing import TRACING
from nnsweep.runtimes.common.converter import Converter, rnn_export_warning_silenced
from nnsweep.runtimes.common.shortcuts import repeated_work_skipped

if TYPE_CHECKING:
    import numpy as np

    from nnsweep.bench import Evaluation, ForkHere, MeasureSettings, Timing, WarmWorker
    from nnsweep.bench.task import Task

    Forker = WarmWorker | ForkHere
    from nnsweep.core.config import DeploymentConfig
    from nnsweep.models import ModelBundle, ModelSnapshot
    from nnsweep.runtimes.common.converter import ConversionResult

__all__ = [
    "DeploymentResult",
    "assemble",
    "cached",
    "check_float_layers",
    "convert",
    "evaluate_outputs",
    "for_config",
    "measure",
    "run_artifact",
    "toolchain_failure",
]


def check_float_layers(bundle: ModelBundle, config: DeploymentConfig) -> None:
    """Refuse a configuration a user wrote whose ``float_layers`` names no module of the
    model (a typo), before anything is converted.

    Raises:
        SpecError: on ``quant.float_layers``, naming the paths and where the model's layers are listed.
    """
    if unknown := _unknown_float_layers(bundle, config):
        raise SpecError(
            "quant.float_layers",
            f"{', '.join(map(repr, unknown))}: no module of {bundle.name} has that path (`nnsweep sensitivity "
            f"--model {bundle.name} --runtime {config.runtime}` lists its layers)",
        )


def _unknown_float_layers(bundle: ModelBundle, config: DeploymentConfig) -> list[str]:
    """The paths of ``float_layers`` that are no module of the model (a layer folded away
    is still a module: it has nothing to keep float, which is no mistake)."""
    return sorted(set(config.quant.float_layers) - {name for name, _ in bundle.module.named_modules()})


def convert(bundle: ModelBundle, config: DeploymentConfig, cache: ArtifactCache) -> tuple[Artifact, bool]:
    """The artifact for ``config``, from the cache or freshly converted.

    Returns:
        The artifact and whether it was a cache hit.

    Raises:
        ConversionError: the converter failed; the message says why.
    """
    from nnsweep.core.config import Interface

    info = runtimes.get(config.runtime)
    key, toolchain = artifact_key(bundle.digest, config)
    if len(bundle.outputs) > 1 and config.quant.interface is Interface.FULL:
        # One output quantization (scale, zero point) per deployed model is all IOSpec describes.
        raise ConversionError("the full (quantized in/out) interface takes single-output models; use core")
    if unknown := _unknown_float_layers(bundle, config):  # a sweep's come from the ranking: never, unless a bug
        raise ConversionError(f"float_layers names {', '.join(unknown)}: no module of {bundle.name} has that path")

    def build(out_dir: Any) -> Any:
        try:
            converter = runtimes.load_object(info.converter)()
        except ImportError as exc:
            raise ConversionError(f"the {config.runtime} converter cannot be loaded here: {exc}") from exc
        if isinstance(converter, Converter):  # what other configurations of this model can reuse
            converter.stages = cache.stages.for_model(bundle.digest, config.runtime)
        try:
            with TRACING, rnn_export_warning_silenced(), repeated_work_skipped():
                return _named_float_layers(converter.convert(bundle, config, out_dir), config)
        except TrialError:
            raise
        except OSError as exc:  # a full disk, a vanished folder: the machine's fault, not the config's
            raise _storage_error(exc, out_dir) from exc
        except Exception as exc:  # toolchain code: whatever it raises fails this conversion only
            raise ConversionError(toolchain_failure(config, toolchain, exc)) from exc

    try:
        artifact, hit = cache.get_or_build(key, config, toolchain, build)
    except OSError as exc:
        raise _storage_error(exc, cache.root) from exc
    return for_config(artifact, config), hit


def toolchain_failure(config: DeploymentConfig, toolchain: dict[str, str], exc: BaseException) -> str:
    """One line for an exception a runtime's toolchain raised while converting: the runtime,
    its converter's version, the mode, the exception's type and the first line of its message
    (which names the operator or feature it lacks), clipped. The traceback stays on the
    exception's ``__cause__`` for ``-v``."""
    package = runtimes.get(config.runtime).packages[:1]
    version = f"{package[0]} {toolchain.get(package[0], '?')}" if package else config.runtime
    return clip(
        f"{config.runtime} ({version}) cannot convert this model for {config.quant.mode.value}: {first_line(exc)}",
        _FAILURE_LINE,
    )


_FAILURE_LINE = 300  # characters of a toolchain failure's one line


def _named_float_layers(result: ConversionResult, config: DeploymentConfig) -> ConversionResult:
    """The partition report says which layers a mixed-precision artifact keeps in float."""
    layers = config.quant.float_layers
    if not layers:
        return result
    note = f"kept in float (mixed precision): {', '.join(layers)}"
    partitions = dataclasses.replace(result.partitions, notes=(*result.partitions.notes, note))
    return dataclasses.replace(result, partitions=partitions)


def _storage_error(exc: OSError, where: Any) -> ConversionStorageError:
    path = exc.filename or where
    reason = exc.strerror or str(exc) or type(exc).__name__
    return ConversionStorageError(f"cannot write the artifact at {path}: {reason}", path=path)


def cached(model_digest: str, config: DeploymentConfig, cache: ArtifactCache) -> Artifact | None:
    """The artifact for ``config`` if this machine's cache already holds it (no conversion)."""
    found = cache.get(artifact_key(model_digest, config)[0])
    return for_config(found, config) if found is not None else None


def for_config(artifact: Artifact, config: DeploymentConfig) -> Artifact:
    """The cached artifact as ``config``'s: an entry built for another thread count (a
    runtime-only knob, not in the key) holds the same bytes; it runs with ``config``'s."""
    return artifact if artifact.config == config else dataclasses.replace(artifact, config=config)


_MEASUREMENT_KEYS = ("p50_ci95_ms", "stop_reason", "lock_wait_ms", "isolation", "phases_ms", "held_monotonic")


@dataclass(frozen=True)
class DeploymentResult:
    """Everything measured for one configuration on one device."""

    model: str
    model_digest: str
    artifact: Artifact
    cache_hit: bool
    timing: Timing
    evaluation: Evaluation
    metrics: Mapping[str, float] = dataclasses.field(default_factory=dict)  # the user's own, by name

    def to_dict(self) -> dict[str, Any]:
        """The ``nnsweep bench --json`` object."""
        t, e = self.timing, self.evaluation
        return {
            "model": self.model,
            "config": self.artifact.config.to_dict(),
            "config_digest": self.artifact.config.digest(),
            "latency_ms": t.latency.to_dict(),
            LOAD: t.load_ms,
            FIRST_INFERENCE: t.first_inference_ms,
            "iterations": t.latency.count,
            PEAK_RSS: t.peak_rss_mb,
            "rss_before_load_mb": t.rss_before_load_mb,
            "threads": t.threads,
            "loadavg_1m": t.loadavg_1m,
            SIZE: self.artifact.size_bytes,
            ACCURACY: e.accuracy,
            "metrics": dict(self.metrics),
            "fidelity": e.fidelity.to_dict(),
            "fidelity_per_output": [f.to_dict() for f in e.per_output],
            "eval_samples": e.samples,
            "eval_positions": e.positions,  # classes per sample compared, each on its own (a tagger's steps)
            "partitions": self.artifact.partitions.to_dict(),
            "cache_hit": self.cache_hit,
            "convert_s": self.artifact.convert_s,
            "artifact": str(self.artifact.path),
            "samples_ms": list(t.samples_ms),
            # how the measurement went: its p50's 95 % interval, why it stopped, the machine lock's
            # wait, fresh process or forked child, and where the measuring process's time went
            **{k: v for k, v in t.to_dict().items() if k in _MEASUREMENT_KEYS},
        }


def run_artifact(
    artifact: Artifact, inputs: np.ndarray, settings: MeasureSettings, worker: Forker | None = None
) -> tuple[Timing, np.ndarray]:
    """Time ``artifact`` in a process of its own on this machine, as its config says (runtime,
    backends, threads), and return that timing and its outputs on ``inputs``.

    Args:
        worker: what forks the measuring process (``None``: a fresh process).

    Raises:
        BenchmarkError: it did not load or run.
    """
    from nnsweep.bench import measure_in_subprocess

    return measure_in_subprocess(
        runtime=artifact.config.runtime,
        artifact=artifact.path,
        io=artifact.io,
        threads=artifact.config.threads,
        backends=artifact.config.backends,
        inputs=inputs,
        settings=settings,
        worker=worker,
    )


def measure(
    model: ModelSnapshot,
    artifact: Artifact,
    settings: MeasureSettings,
    *,
    cache_hit: bool = False,
    worker: Forker | None = None,
    task: Task | None = None,
) -> DeploymentResult:
    """Time ``artifact`` on this machine in a process of its own, then evaluate its outputs
    (and score them with the user's ``task``).

    Raises:
        BenchmarkError: it did not load or run, or its outputs are unusable.
        MetricError: a user metric failed on its outputs.
    """
    timing, outputs = run_artifact(artifact, model.evaluation.inputs, settings, worker)
    return assemble(model, artifact, timing, outputs, cache_hit=cache_hit, task=task)


def evaluate_outputs(
    model: ModelSnapshot, outputs: np.ndarray, task: Task | None = None
) -> tuple[Evaluation, dict[str, float]]:
    """A deployment's ``outputs`` against the model's fp32 reference, and the user's metrics on them.

    Raises:
        BenchmarkError: the outputs are unusable (wrong shape, NaN).
        MetricError: a user metric failed on them.
    """
    from nnsweep.bench import evaluate

    try:
        evaluation = evaluate(
            outputs,
            model.reference,
            model.evaluation.labels,
            sizes=model.outputs or None,
            accuracy_output=model.accuracy_output,
            positions=model.positions or None,
            class_axes=model.class_axes or None,
        )
    except ValueError as exc:
        raise BenchmarkError(f"unusable outputs: {exc}") from exc
    return evaluation, (task.score(outputs) if task is not None else {})


def assemble(
    model: ModelSnapshot,
    artifact: Artifact,
    timing: Timing,
    outputs: np.ndarray,
    *,
    cache_hit: bool,
    task: Task | None = None,
) -> DeploymentResult:
    """Evaluate a device's ``outputs`` against the model's fp32 reference (and with the
    user's ``task``) and combine with its timing.

    Raises:
        BenchmarkError: the outputs are unusable (wrong shape, NaN).
        MetricError: a user metric failed on them.
    """
    evaluation, scores = evaluate_outputs(model, outputs, task)
    if timing.placement is not None:  # the measuring machine's runtime placed the ops itself (Arm NN)
        placed = PartitionReport.from_dict(timing.placement)
        # what the conversion noted about the model (an op Arm NN reads differently) holds
        # wherever it runs; the converting machine's placement notes do not
        notes = (*placed.notes, *(n for n in artifact.model_notes if n not in placed.notes))
        artifact = dataclasses.replace(artifact, partitions=dataclasses.replace(placed, notes=notes))
    return DeploymentResult(model.name, model.digest, artifact, cache_hit, timing, evaluation, scores)
