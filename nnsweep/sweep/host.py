"""What the coordinator does on its own host: the model, its fp32 reference, the
artifact cache, and turning a device's reply into a trial record.

Kept apart from :class:`~nnsweep.sweep.loop.Sweep` so the loop stays a loop; everything
here touches torch or the disk and runs on the coordinator's host (or, for
:meth:`HostSide.outputs`, on its evaluation thread).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from nnsweep.agents import MeasureReply, MeasureRequest
from nnsweep.bench import MeasureSettings
from nnsweep.core import runtimes
from nnsweep.core.config import DeploymentConfig, Granularity
from nnsweep.core.errors import ConversionError, SpecError
from nnsweep.core.results import TrialRecord, TrialStatus, metrics_from_result
from nnsweep.execution import ModelSource
from nnsweep.sweep.lifecycle import Ticket

if TYPE_CHECKING:
    from nnsweep.artifacts.cache import Artifact, ArtifactCache
    from nnsweep.models import ModelBundle, ModelSnapshot
    from nnsweep.sensitivity.rank import SensitivityReport

__all__ = ["HostSide", "host_twin"]

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
            sensitivity ranking: minutes on a large model, before its first float-layer trial).
    """

    # a ranking's progress is told at most this often (one line per quantize-and-evaluate
    # run would be a line every second or two on a small model)
    NOTICE_EVERY_S = 15.0

    def __init__(
        self, source: ModelSource, settings: MeasureSettings, notice: Callable[[str], None] | None = None
    ) -> None:
        self.source = source
        self.settings = settings
        self.notice = notice
        self._bundle: ModelBundle | None = None
        self._snapshot: ModelSnapshot | None = None
        self._artifacts: dict[str, Artifact] = {}  # config digest -> artifact
        self.eager_accuracy = 1.0
        self.timed: dict[Ticket, MeasureReply] = {}  # timed on a device, waiting for host outputs
        self._pool: ThreadPoolExecutor | None = None
        # per runtime and granularity: the ranked layers, or why the runtime cannot rank them
        self._rankings: dict[tuple[str, Granularity | None], SensitivityReport | SpecError] = {}
        self._told_float: set[tuple[str, Granularity | None, int]] = set()  # float in effect, said once

    @property
    def bundle(self) -> ModelBundle:
        assert self._bundle is not None, "load() first"
        return self._bundle

    def float_layers(self, runtime: str, granularity: Granularity | None, k: int) -> tuple[str, ...]:
        """The ``k`` layers of the model that ``runtime`` keeps in float: its own sensitivity
        ranking (:func:`nnsweep.sensitivity.ranking.ranking`: measured once per model, runtime
        and granularity, then read from the cache).

        Raises:
            SpecError: the runtime's quantizer cannot rank this model's layers (the
                ranking's :class:`ConversionError`, kept: asked again, it fails at once).
                The coordinator records the trial as an invalid combination and goes on.
        """
        from nnsweep.sensitivity.ranking import ranking

        key = (runtime, granularity)
        if key not in self._rankings:
            try:
                report, cached = ranking(
                    self.bundle, runtime, granularity, self.source.cache_root, progress=self._ranking_progress(runtime)
                )
                self._rankings[key] = report
                if not cached:
                    tie = " (all tie in top-1 on the calibration split: by output SQNR)" if report.all_tie() else ""
                    self._tell(f"{runtime}: ranked {len(report.layers)} layers in {report.seconds:.0f} s{tie}")
            except ConversionError as exc:  # once: the next count of this runtime fails at once
                log.warning("%s keeps no layers float for this model: %s", runtime, exc)
                self._rankings[key] = SpecError(f"{runtime}.float_layers", str(exc))
        found = self._rankings[key]
        if isinstance(found, SpecError):
            raise found
        names = tuple(found.ranked()[:k])
        if k and (*key, k) not in self._told_float and not found.int8_left(names):
            from nnsweep.sensitivity.rank import float_in_effect

            self._told_float.add((*key, k))
            self._tell(f"{runtime}: {float_in_effect(runtime, k)}")
        return names

    def _tell(self, text: str) -> None:
        log.info("%s", text)
        if self.notice is not None:
            self.notice(text)

    def _ranking_progress(self, runtime: str) -> Callable[[str], None]:
        """The progress of a ranking measured now (one read from the cache has none): what it
        is, told at its first line; then each line logged, one every :attr:`NOTICE_EVERY_S` told."""
        last: list[float] = []

        def progress(text: str) -> None:
            if not last:
                ref = self.source.ref
                self._tell(f"ranking the layers of {ref} through {runtime}'s quantizer (once per model) ...")
                last.append(time.monotonic())
            log.info("%s", text)
            if self.notice is not None and time.monotonic() - last[0] >= self.NOTICE_EVERY_S:
                last[0] = time.monotonic()
                self.notice(text)

        return progress

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
            ).accuracy
            self.eager_accuracy = 1.0 if accuracy is None else float(accuracy)

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
        a = self._artifacts[config.digest()]
        return MeasureRequest(
            runtime=a.config.runtime,
            artifact_name=a.path.name,
            artifact_bytes=a.path.read_bytes(),
            io=a.io,
            threads=a.config.threads,
            backends=a.config.backends,
            inputs=self.bundle.dataset.evaluation.inputs,
            settings=self.settings,
            sidecars={name: path.read_bytes() for name, (path, _) in a.sidecars.items()},
            estimates=dict(a.estimates),
        )

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

    def record(self, sweep: str, ticket: Ticket, reply: MeasureReply, *, on_host: bool) -> TrialRecord:
        """The trial's record from the device's reply (outputs evaluated against fp32).

        Raises:
            TrialError: the outputs are unusable.
        """
        from nnsweep.artifacts import deploy

        a = self._artifacts[ticket.config.digest()]
        assert reply.outputs is not None  # from the device, or from outputs() on this host
        assert self._snapshot is not None, "load() first"
        result = deploy.assemble(self._snapshot, a, reply.timing, reply.outputs, cache_hit=False)
        data = result.to_dict()
        metrics = metrics_from_result(data)
        # A compiler's figures are logged under their own names, never as measurements.
        metrics.update({f"estimate_{k}": float(v) for k, v in reply.estimates.items()})
        # Where the measuring process's time went (start, import, load, warm-up, timed, lock wait).
        metrics.update({f"measure_{k}_ms": float(v) for k, v in (data.get("phases_ms") or {}).items()})
        held = data.get("held_monotonic")
        if held:  # when it held the machine's measurement lock (CLOCK_MONOTONIC of the device's machine)
            metrics["measure_held_from_s"], metrics["measure_held_until_s"] = float(held[0]), float(held[1])
        source = "labels" if data["accuracy"] is not None else "fp32 agreement"
        if on_host:
            twin = host_twin(ticket.config)
            what = "the same artifact"
            if twin is not None:
                what = f"the same configuration without {ticket.config.backends[0]}, on CPU kernels"
            source += f" (outputs from a host run of {what})"
        tags = {"artifact_sha256": a.sha256, "accuracy_source": source, "latency_source": reply.source}
        tags["measure_stop"] = str(data.get("stop_reason", "iters"))  # iters, min_duration, stable or cap
        return TrialRecord(
            sweep=sweep,
            device=ticket.device,
            number=ticket.number,
            config=ticket.config,
            status=TrialStatus.OK,
            metrics=metrics,
            partitions=data["partitions"],
            samples_ms=tuple(data["samples_ms"]),
            estimated=reply.estimated,
            emulated=reply.emulated,
            tags=tags,
        )
