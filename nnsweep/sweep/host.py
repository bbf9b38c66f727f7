"""What the coordinator does on its own host: the model, its fp32 reference, the
artifact cache, and turning a device's reply into a trial record.

Kept apart from :class:`~nnsweep.sweep.loop.Sweep` so the loop stays a loop; everything
here touches torch or the disk and runs on the coordinator's host (or, for
:meth:`HostSide.outputs`, on its evaluation thread).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from nnsweep.agents import MeasureReply, MeasureRequest
from nnsweep.bench import MeasureSettings
from nnsweep.core import runtimes
from nnsweep.core.config import DeploymentConfig, Granularity
from nnsweep.core.errors import SpecError
from nnsweep.core.metrics import ACCURACY, MAX_ABS_ERR, MEAN_ABS_ERR, SIZE, SQNR, TOP1_AGREEMENT, UserMetric
from nnsweep.core.results import TrialRecord, TrialStatus, metrics_from_result
from nnsweep.execution import ModelSource
from nnsweep.sweep.lifecycle import Ticket
from nnsweep.sweep.outcomes import QUALITY_FROM
from nnsweep.sweep.rankings import LayerRankings

if TYPE_CHECKING:
    from nnsweep.artifacts.cache import Artifact, ArtifactCache
    from nnsweep.bench.task import Task
    from nnsweep.models import ModelBundle, ModelSnapshot
    from nnsweep.sensitivity.scoring import RankingMetric

__all__ = ["HostSide", "host_twin", "ok_record"]

log = logging.getLogger(__name__)


def host_twin(config: DeploymentConfig) -> DeploymentConfig | None:
    """What runs on the host for ``config``'s outputs: ``None`` for its own artifact; for a
    whole-model backend only the device has (NNAPI), the config without it, on CPU kernels."""
    info = runtimes.get(config.runtime)
    if not (config.backends[:1] and config.backends[0] in info.whole_model):
        return None
    rest = config.backends[1:] or (info.default_backends[-1:] if config.quant.mode.is_int8 else ())
    return dataclasses.replace(config, backends=rest)


class HostSide:
    """The sweep's model and artifacts as the coordinator's host holds them.

    Args:
        source: how the model is loaded (the same reference the workers load).
        settings: the sweep's measure settings.
        notice: told, in a line, what a long step outside the trials is doing (a runtime's
            sensitivity ranking: minutes on a large model, before its first float-layer trial),
            and when an int8 artifact is float in effect (:class:`LayerRankings`).
        metrics: the user's own metrics, computed from each deployment's outputs here.
    """

    def __init__(
        self,
        source: ModelSource,
        settings: MeasureSettings,
        notice: Callable[[str], None] | None = None,
        metrics: tuple[UserMetric, ...] = (),
        ranked_by: str | None = None,
    ) -> None:
        self.source = source
        self.settings = settings
        self.notice = notice
        self._bundle: ModelBundle | None = None
        self._snapshot: ModelSnapshot | None = None
        self._artifacts: dict[str, Artifact] = {}  # config digest -> artifact
        self.metrics = metrics
        self.ranked_by = ranked_by  # the user metric float layers are chosen by (None: top-1)
        self.task: Task | None = None
        self.eager: dict[str, float] = {ACCURACY: 1.0}  # the fp32 model's own quality metrics
        self.timed: dict[Ticket, MeasureReply] = {}  # timed on a device, waiting for host outputs
        self._pool: ThreadPoolExecutor | None = None
        self.rankings = LayerRankings(source.ref, source.cache_root, notice)

    @property
    def bundle(self) -> ModelBundle:
        assert self._bundle is not None, "load() first"
        return self._bundle

    @property
    def snapshot(self) -> ModelSnapshot:
        """The model's reference outputs and evaluation inputs (what a measurement needs)."""
        assert self._snapshot is not None, "load() first"
        return self._snapshot

    def tell(self, *lines: str) -> None:
        """Say each of ``lines`` (logged, and to the sweep's notice)."""
        for line in lines:
            log.info("%s", line)
            if self.notice is not None:
                self.notice(line)

    def float_layers(
        self, runtime: str, granularity: Granularity | None, k: int, group_size: int | None = None
    ) -> tuple[str, ...]:
        """The ``k`` layers of the model that ``runtime`` keeps in float (:meth:`LayerRankings.float_layers`).

        Raises:
            SpecError: the runtime's quantizer cannot rank this model's layers.
        """
        return self.rankings.float_layers(self.bundle, runtime, granularity, k, self._ranking_metric(), group_size)

    def _ranking_metric(self) -> RankingMetric | None:
        if self.ranked_by is None or self.task is None:
            return None
        from nnsweep.sensitivity.scoring import RankingMetric

        at = [m.name for m in self.task.metrics].index(self.ranked_by)
        return RankingMetric(self.task.metrics[at], self.task.functions[at])

    def check_float_layers(self, counts: tuple[int, ...]) -> None:
        """Refuse counts of float layers the model does not have.

        Raises:
            SpecError: a count above the model's quantizable layers (``quantizable_layers``).
        """
        if max(counts) == 0:
            return
        from nnsweep.sensitivity.rank import quantizable_layers

        n = len(quantizable_layers(self.bundle.module, self.bundle.example_input))
        if max(counts) > n:
            raise SpecError("space.float_layers", f"{max(counts)} is above the model's {n} quantizable layers")

    def _cache(self) -> ArtifactCache:
        from nnsweep.artifacts.cache import ArtifactCache

        return ArtifactCache(self.source.cache_root)

    def load(self) -> None:
        """Load the model and compute its fp32 reference outputs and accuracy."""
        from nnsweep.bench import evaluate
        from nnsweep.models import ModelSnapshot, load_model

        self._bundle = load_model(
            self.source.ref,
            cache_dir=self._cache().models_dir,
            weights=self.source.weights,
            input_shape=self.source.input_shape,
            data=self.source.data,
        )
        self._snapshot = ModelSnapshot.of(self._bundle)
        self._snapshot.warn_if_constant()
        labels = self._bundle.dataset.evaluation.labels
        # Without labels, accuracy is top-1 agreement with fp32, which fp32 itself meets fully.
        if labels is not None:
            snap = self._snapshot
            accuracy = evaluate(
                snap.reference,
                snap.reference,
                labels,
                sizes=snap.outputs or None,
                accuracy_output=snap.accuracy_output,
                positions=snap.positions or None,
                class_axes=snap.class_axes or None,
            ).accuracy
            self.eager[ACCURACY] = 1.0 if accuracy is None else float(accuracy)
        if self.metrics:
            self.task = self._task()
            self.eager.update(self.task.check(self._snapshot.reference))

    def _task(self) -> Task:
        """The user's metrics, imported, with the evaluation targets (the data's own, else the labels)."""
        from nnsweep.bench.task import load_task
        from nnsweep.models import per_sample_shapes

        evaluation = self.bundle.dataset.evaluation
        targets = evaluation.targets if evaluation.targets is not None else evaluation.labels
        return load_task(self.metrics, targets, per_sample_shapes(self.bundle))

    def cached(self, config: DeploymentConfig) -> Artifact | None:
        """The artifact if this machine's cache holds it already (then no worker is needed)."""
        from nnsweep.artifacts import deploy

        artifact = deploy.cached(self.bundle.digest, config, self._cache())
        if artifact is not None:
            self.remember(artifact)
        return artifact

    def remember(self, artifact: Artifact) -> None:
        self._artifacts[artifact.config.digest()] = artifact

    def request_if_cached(self, config: DeploymentConfig) -> MeasureRequest | None:
        """:meth:`measure_request`, or ``None`` when the artifact is in no cache this host sees."""
        if config.digest() not in self._artifacts and self.cached(config) is None:
            return None
        return self.measure_request(config)

    def measure_request(self, config: DeploymentConfig) -> MeasureRequest:
        return MeasureRequest.of(self._artifacts[config.digest()], self.bundle.dataset.evaluation.inputs, self.settings)

    def submit_outputs(self, config: DeploymentConfig) -> Future[Any]:
        """:meth:`outputs` on this host's evaluation thread."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="nnsweep-evaluate")
        return self._pool.submit(self.outputs, config)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def outputs(self, config: DeploymentConfig) -> Any:
        """Run ``config``'s artifact once per evaluation input on this host, for its outputs only
        (a whole-model backend only the device has runs as its :func:`host_twin`)."""
        from nnsweep.artifacts import deploy

        a = self._artifacts[config.digest()]
        twin = host_twin(a.config)
        if twin is not None:
            a, _ = deploy.convert(self.bundle, twin, self._cache())
        settings = MeasureSettings(warmup=0, iters=1, timeout_s=self.settings.timeout_s)
        _, outputs = deploy.run_artifact(a, self.bundle.dataset.evaluation.inputs, settings)
        return outputs

    def quality(self, config: DeploymentConfig, outputs: Any) -> dict[str, float]:
        """The quality metrics of ``config``'s outputs on this host (the gate's figures).

        Raises:
            TrialError: the outputs are unusable, or a user metric failed on them.
        """
        from nnsweep.artifacts import deploy

        assert self._snapshot is not None, "load() first"
        evaluation, scores = deploy.evaluate_outputs(self._snapshot, outputs, self.task)
        f = evaluation.fidelity
        figures = {TOP1_AGREEMENT: f.top1_agreement, MAX_ABS_ERR: f.max_abs_err, MEAN_ABS_ERR: f.mean_abs_err}
        figures[ACCURACY] = f.top1_agreement if evaluation.accuracy is None else float(evaluation.accuracy)
        if math.isfinite(f.sqnr_db):
            figures[SQNR] = f.sqnr_db
        return {**figures, **scores}

    def untimed_record(self, sweep: str, ticket: Ticket, quality: dict[str, float]) -> TrialRecord:
        """The record of a trial that broke a quality bound on this host: never timed on its device."""
        a = self._artifacts[ticket.config.digest()]
        tags = {"artifact_sha256": a.sha256, QUALITY_FROM: "host", "accuracy_source": "outputs from a host run"}
        return ok_record(sweep, ticket, {**quality, SIZE: float(a.size_bytes)}, a.partitions.to_dict(), tags)

    def record(self, sweep: str, ticket: Ticket, reply: MeasureReply, *, on_host: bool) -> TrialRecord:
        """The trial's record from the device's reply (outputs evaluated against fp32).

        Raises:
            TrialError: the outputs are unusable.
        """
        from nnsweep.artifacts import deploy

        a = self._artifacts[ticket.config.digest()]
        assert reply.outputs is not None  # from the device, or from outputs() on this host
        assert self._snapshot is not None, "load() first"
        result = deploy.assemble(self._snapshot, a, reply.timing, reply.outputs, cache_hit=False, task=self.task)
        self.rankings.tell_if_float(ticket.config, result.evaluation.fidelity.sqnr_db, self._snapshot)
        data = result.to_dict()
        metrics = metrics_from_result(data)
        # A compiler's figures are logged under their own names, never as measurements.
        metrics.update({f"estimate_{k}": float(v) for k, v in reply.estimates.items()})
        # Where the measuring process's time went (start, import, load, warm-up, timed, lock wait).
        metrics.update({f"measure_{k}_ms": float(v) for k, v in (data.get("phases_ms") or {}).items()})
        held = data.get("held_monotonic")
        if held:  # when it held the machine's measurement lock (CLOCK_MONOTONIC of the device's machine)
            metrics["measure_held_from_s"], metrics["measure_held_until_s"] = float(held[0]), float(held[1])
        source = "labels" if data[ACCURACY] is not None else "fp32 agreement"
        if on_host:
            twin = host_twin(ticket.config)
            what = "the same artifact"
            if twin is not None:
                what = f"the same configuration without {ticket.config.backends[0]}, on CPU kernels"
            source += f" (outputs from a host run of {what})"
        tags = {"artifact_sha256": a.sha256, "accuracy_source": source, "latency_source": reply.source}
        tags["measure_stop"] = str(data.get("stop_reason", "iters"))  # iters, min_duration, stable or cap
        return ok_record(sweep, ticket, metrics, data["partitions"], tags, reply, tuple(data["samples_ms"]))


def ok_record(
    sweep: str,
    ticket: Ticket,
    metrics: dict[str, float],
    partitions: dict[str, Any],
    tags: dict[str, str],
    reply: MeasureReply | None = None,
    samples_ms: tuple[float, ...] = (),
) -> TrialRecord:
    """A trial's OK record; with the device's ``reply`` when it was timed (its labels carried
    over), without when a quality bound turned it away on this host."""
    return TrialRecord(
        sweep=sweep,
        device=ticket.device,
        number=ticket.number,
        config=ticket.config,
        status=TrialStatus.OK,
        metrics=metrics,
        partitions=partitions,
        samples_ms=samples_ms,
        estimated=reply is not None and reply.estimated,
        emulated=reply is not None and reply.emulated,
        tags=tags,
    )
