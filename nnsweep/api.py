"""nnsweep from Python: measure a live model, or sweep it, from a notebook or a script.

The same code paths as the command line — :func:`measure` is ``nnsweep bench``,
:func:`sweep` is ``nnsweep run`` — with a model that lives in this process
instead of one named by reference.

Example:
    >>> import torch, nnsweep.api as ns  # doctest: +SKIP
    >>> net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10)).eval()
    >>> result = ns.measure(net, torch.randn(1, 1, 8, 8), runtime="onnxruntime")
    >>> results = ns.sweep({"name": "nb", "space": {"runtime": ["onnxruntime"]}}, net, torch.randn(1, 1, 8, 8))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nnsweep.core.config import DeploymentConfig
from nnsweep.core.errors import SpecError

if TYPE_CHECKING:
    import torch

    from nnsweep.artifacts.deploy import DeploymentResult
    from nnsweep.bench import MeasureSettings
    from nnsweep.models import Dataset
    from nnsweep.spec import SweepSpec
    from nnsweep.sweep.loop import DeviceProgress, DeviceResult

__all__ = ["measure", "sweep"]


def _live(name: str, model: torch.nn.Module, example_input: torch.Tensor, dataset: Dataset | None) -> str:
    from nnsweep.models import register_live

    return register_live(name, model, example_input, dataset)


def measure(
    model: torch.nn.Module,
    example_input: torch.Tensor,
    config: DeploymentConfig | None = None,
    *,
    dataset: Dataset | None = None,
    settings: MeasureSettings | None = None,
    cache_dir: Path | str | None = None,
    metrics: Mapping[str, Callable[..., Any]] | None = None,
    targets: Any = None,
    **options: Any,
) -> DeploymentResult:
    """Convert ``model`` for one configuration and measure it on this machine, as ``nnsweep bench``.

    ``config`` defaults to ``DeploymentConfig(**options)`` (e.g. ``runtime="onnxruntime"``);
    ``dataset`` to random inputs (accuracy is then top-1 agreement with the float model);
    ``settings`` to 5 warm-up and 200 timed runs; ``cache_dir`` to ``$NNSWEEP_CACHE`` or
    ``~/.cache/nnsweep``. Returns latency statistics, memory, size, accuracy and fidelity
    (``.to_dict()`` is ``bench --json``).
    ``metrics`` are your own, by name, each ``function(outputs, targets) -> float``
    (:mod:`nnsweep.bench.task`), scored on the deployment's outputs (``.metrics``);
    ``targets`` are what they get, one per evaluation sample (default: the evaluation labels).

    Raises:
        SpecError: the model or the configuration is not valid.
        TrialError: the conversion or the measurement failed.
    """
    from nnsweep.artifacts import deploy
    from nnsweep.artifacts.cache import ArtifactCache, default_cache_dir
    from nnsweep.bench import MeasureSettings
    from nnsweep.models import ModelSnapshot, load_model

    if config is None:
        config = DeploymentConfig.from_dict(options)  # an unknown field is a SpecError naming the allowed ones
    elif options:
        raise SpecError("config", f"give a config or its fields, not both ({', '.join(options)})")
    cache = ArtifactCache(Path(cache_dir) if cache_dir is not None else default_cache_dir())
    bundle = load_model(_live("measure", model, example_input, dataset), cache_dir=cache.models_dir)
    deploy.check_float_layers(bundle, config)
    artifact, hit = deploy.convert(bundle, config, cache)
    snapshot = ModelSnapshot.of(bundle)
    snapshot.warn_if_constant()
    task = _task(bundle, snapshot, metrics or {}, targets)
    return deploy.measure(snapshot, artifact, settings or MeasureSettings(), cache_hit=hit, task=task)


def _task(bundle: Any, snapshot: Any, metrics: Mapping[str, Callable[..., Any]], targets: Any) -> Any:
    """Callables as the user's metrics, checked on the fp32 outputs (``None`` without any)."""
    if not metrics:
        return None
    from nnsweep.bench.task import load_task
    from nnsweep.core.metrics import BUILTIN, UserMetric
    from nnsweep.models import per_sample_shapes

    for name, function in metrics.items():
        if name in BUILTIN or not callable(function):
            raise SpecError(f"metrics.{name}", "is a built-in metric's name, or not a callable")
    if targets is None:
        targets = bundle.dataset.evaluation.labels
    elif len(targets) != len(snapshot.evaluation):
        raise SpecError("targets", f"{len(targets)} targets for {len(snapshot.evaluation)} evaluation inputs")
    chosen = tuple(UserMetric(name, function, "maximize") for name, function in metrics.items())
    task = load_task(chosen, targets, per_sample_shapes(bundle))
    task.check(snapshot.reference)
    return task


def _live_metrics(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    """A spec mapping whose ``metrics`` give callables as functions, with each registered as
    ``live:NAME`` (a metric runs on the coordinator: any executor can use it)."""
    from nnsweep.models import register_live_function

    metrics = spec.get("metrics")
    if not isinstance(metrics, Mapping):
        return spec
    named = {}
    for name, entry in metrics.items():
        function = entry.get("function") if isinstance(entry, Mapping) else None
        if callable(function):
            entry = {**entry, "function": register_live_function(str(name), function)}
        named[name] = entry
    return {**spec, "metrics": named}


def sweep(
    spec: SweepSpec | Mapping[str, Any] | str | Path,
    model: torch.nn.Module | None = None,
    example_input: torch.Tensor | None = None,
    *,
    dataset: Dataset | None = None,
    executor: str = "local",
    address: str | None = None,
    tracking: bool = True,
    fresh: bool = False,
    cache_dir: Path | str | None = None,
    progress: Callable[[list[DeviceProgress]], None] | None = None,
    notice: Callable[[str], None] | None = None,
) -> list[DeviceResult]:
    """Run a sweep, as ``nnsweep run``: per device its trials, Pareto front and best configuration.

    ``spec`` is a :class:`~nnsweep.spec.SweepSpec`, a sweep YAML's mapping or its path.
    ``model`` (with ``example_input`` of batch size 1, and optionally ``dataset``) is a live
    model that replaces the spec's; only this process has it, so it is swept with the
    ``local`` executor. ``executor`` is ``local`` or ``ray`` (``address``: a cluster to
    join); ``tracking`` logs to the spec's MLflow store; ``fresh`` deletes the sweep's studies
    first; ``cache_dir`` defaults to ``$NNSWEEP_CACHE`` or ``~/.cache/nnsweep``.
    ``progress`` gets every device's progress on each change, ``notice`` a line when a long
    step outside the trials (a sensitivity ranking) starts or moves on. A mapping's
    ``metrics`` may give callables as their ``function``.

    Raises:
        SpecError: the spec, the model or the devices refuse the sweep (nothing is written).
    """
    from nnsweep.artifacts.cache import check_cache_dir, default_cache_dir
    from nnsweep.execution import executor_for
    from nnsweep.spec import SweepSpec, load_yaml, parse_spec
    from nnsweep.sweep.loop import Sweep
    from nnsweep.tracking import tracker_for

    source = None  # a YAML's folder holds the sweep's state and anchors its relative paths
    if isinstance(spec, str | Path):
        source = Path(spec).resolve()
        spec = load_yaml(source, "spec")  # a mapping: a live model replaces its model, as below
    if not isinstance(spec, SweepSpec | Mapping):
        raise SpecError("spec", f"give a SweepSpec, a mapping or the path of a sweep YAML, not {type(spec).__name__}")
    if model is not None:
        if example_input is None:
            raise SpecError("example_input", "a live model needs its example input (batch size 1)")
        if executor != "local":
            raise SpecError("executor", "a live model exists only in this process: sweep it with executor='local'")
        name = spec.name if isinstance(spec, SweepSpec) else str(spec.get("name", "live"))
        ref = _live(name, model, example_input, dataset)
        spec = dataclasses.replace(spec, model=ref) if isinstance(spec, SweepSpec) else {**spec, "model": ref}
    if not isinstance(spec, SweepSpec):
        spec = parse_spec(_live_metrics(spec), source=source)
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    check_cache_dir(cache, "cache_dir", "give a folder")
    runner = executor_for(spec, executor, address)
    tracker = tracker_for(spec.tracking.uri, spec.experiment, spec.name, enabled=tracking)
    try:
        return Sweep(spec, runner, tracker, cache, progress=progress, notice=notice, fresh=fresh).run()
    finally:
        close = getattr(tracker, "close", None)
        if close is not None:
            close()  # write what is still queued
        runner.shutdown()
