"""The sweep's layer rankings (one per runtime and granularity) and what it says about them.

A runtime's first float-layer trial needs its sensitivity ranking
(:func:`nnsweep.sensitivity.ranking.ranking`: measured once per model, runtime and
granularity, then read from the cache), which takes minutes on a large model: its progress
is told. Whether an int8 artifact is float in effect is told too, once: by the ranking (no
layer left int8 changes the outputs), or by a measurement (the outputs match fp32's to
float32's rounding, whatever the count of float layers). Kept apart from
:class:`~nnsweep.sweep.host.HostSide`, which holds the model and the artifacts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from nnsweep.core.config import DeploymentConfig, Granularity, QuantMode
from nnsweep.core.errors import ConversionError, SpecError

if TYPE_CHECKING:
    from nnsweep.models import ModelBundle, ModelSnapshot
    from nnsweep.sensitivity.rank import SensitivityReport
    from nnsweep.sensitivity.scoring import RankingMetric
    from nnsweep.spec import SweepSpec

__all__ = ["LayerRankings", "ranking_metric"]


def ranking_metric(spec: SweepSpec) -> str | None:
    """The user metric a sweep's rankings score with: the first objective that is one, else
    the first one a constraint bounds; ``None`` (top-1) when the user's metrics decide nothing."""
    users = [m.name for m in spec.metrics]
    for objective in spec.objectives:
        if objective.metric in users:
            return objective.metric
    c = spec.constraints
    bounded = [*c.max_drop, *c.min, *c.max]
    return next((name for name in users if name in bounded), None)


log = logging.getLogger(__name__)


class LayerRankings:
    """Each runtime's ranking of one model's layers, and the lines the sweep says about them.

    Args:
        ref: the model's reference, as the user gave it (named in the progress line).
        cache_root: the artifact cache, where rankings are kept.
        notice: told, in a line, what a ranking is doing and what an artifact is in effect.
    """

    # a ranking's progress is told at most this often (one line per quantize-and-evaluate
    # run would be a line every second or two on a small model)
    NOTICE_EVERY_S = 15.0

    def __init__(self, ref: str, cache_root: Path, notice: Callable[[str], None] | None = None) -> None:
        self.ref = ref
        self.cache_root = cache_root
        self.notice = notice
        # per runtime, granularity and int4 group size: the ranked layers, or why it cannot rank them
        self._rankings: dict[tuple[str, Granularity, int | None], SensitivityReport | SpecError] = {}
        self._told_float: set[tuple[str, Granularity, int | None, int]] = set()  # by the ranking, said once
        self._told_measured: set[tuple[str, str]] = set()  # (runtime, mode) measured, said once

    def float_layers(
        self,
        bundle: ModelBundle,
        runtime: str,
        granularity: Granularity | None,
        k: int,
        metric: RankingMetric | None = None,
        group_size: int | None = None,
    ) -> tuple[str, ...]:
        """The ``k`` layers of ``bundle`` that ``runtime`` keeps in float: its own ranking's first
        ``k``, scored by ``metric`` (the sweep's own, :func:`ranking_metric`) or top-1; with
        ``group_size``, the ``int4_weight`` ranking's first ``k`` linear layers.

        Raises:
            SpecError: the runtime's quantizer cannot rank this model's layers (the
                ranking's :class:`ConversionError`, kept: asked again, it fails at once).
                The coordinator records the trial as an invalid combination and goes on.
        """
        from nnsweep.sensitivity.ranking import ranking

        key = (runtime, granularity or Granularity.PER_TENSOR, group_size)  # as the ranking reads None
        if key not in self._rankings:
            try:
                report, cached = ranking(
                    bundle,
                    runtime,
                    granularity,
                    self.cache_root,
                    progress=self._progress(runtime),
                    metric=metric,
                    group_size=group_size,
                )
                self._rankings[key] = report
                if not cached:
                    by = f"{report.metric} on the {report.split} split"
                    tie = f" (all tie in {by}: by output SQNR)" if report.all_tie() else ""
                    scored = f" by {by}" if metric is not None else ""
                    self._tell(f"{runtime}: ranked {len(report.layers)} layers{scored} in {report.seconds:.0f} s{tie}")
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

    def tell_if_float(self, config: DeploymentConfig, sqnr_db: float, snapshot: ModelSnapshot) -> None:
        """Say, once per runtime and mode, that an int8 artifact measured float in effect
        (its outputs within float32's rounding of fp32's), unless the ranking said it first."""
        from nnsweep.sensitivity.rank import measured_float_in_effect

        quant = config.quant
        key = (config.runtime, quant.mode.value)
        if not quant.mode.is_int8 or key in self._told_measured:
            return
        ranked = (config.runtime, quant.granularity or Granularity.PER_TENSOR, None, len(quant.float_layers))
        if quant.mode is QuantMode.STATIC_INT8 and ranked in self._told_float:
            return
        note = measured_float_in_effect(config.runtime, quant.mode.value, sqnr_db)
        # the snapshot's scan of its reference only when there is something to say
        if note is not None and not snapshot.constant_outputs():
            self._told_measured.add(key)
            self._tell(note)

    def _tell(self, text: str) -> None:
        log.info("%s", text)
        if self.notice is not None:
            self.notice(text)

    def _progress(self, runtime: str) -> Callable[[str], None]:
        """The progress of a ranking measured now (one read from the cache has none): what it
        is, told at its first line; then each line logged, one every :attr:`NOTICE_EVERY_S` told."""
        last: list[float] = []

        def progress(text: str) -> None:
            if not last:
                self._tell(f"ranking the layers of {self.ref} through {runtime}'s quantizer (once per model) ...")
                last.append(time.monotonic())
            log.info("%s", text)
            if self.notice is not None and time.monotonic() - last[0] >= self.NOTICE_EVERY_S:
                last[0] = time.monotonic()
                self.notice(text)

        return progress
