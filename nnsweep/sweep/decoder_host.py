"""The coordinator's host side for a decoder language model (:mod:`nnsweep.models.decoder`).

What :class:`~nnsweep.sweep.host.HostSide` does for a model of one input, for a decoder: its
reference is the eager fp32 model's perplexity on the held-out text; a measurement request
carries the text and both graphs (:class:`~nnsweep.core.artifact.DecoderShape`); a trial's
record has the per-token figures the device timed and the perplexity of the logits it
returned. A decoder trial's latency figures are one decode step's, so re-measuring the front
pools decode steps and ``decode_ms_per_token`` follows ``latency_p50_ms``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

from nnsweep.agents import MeasureReply, MeasureRequest
from nnsweep.core.artifact import DecoderShape
from nnsweep.core.config import DeploymentConfig, Granularity
from nnsweep.core.errors import BenchmarkError, SpecError
from nnsweep.core.metrics import (
    DECODE_PER_TOKEN,
    FIRST_INFERENCE,
    LATENCY_MEAN,
    LATENCY_P50,
    LATENCY_P90,
    LATENCY_P99,
    LOAD,
    PEAK_RSS,
    PERPLEXITY,
    SIZE,
)
from nnsweep.core.results import TrialRecord
from nnsweep.sweep.host import HostSide, ok_record
from nnsweep.sweep.lifecycle import Ticket

if TYPE_CHECKING:
    from nnsweep.models.decoder import Decoder

__all__ = ["DecoderHost"]


class DecoderHost(HostSide):
    """The sweep's decoder, its eager perplexity and its trials' records (module docstring)."""

    _decoder: Decoder | None = None

    @property
    def bundle(self) -> Any:
        """The :class:`~nnsweep.models.decoder.Decoder` (its ``digest`` and ``module`` are what
        the sweep reads of a model)."""
        assert self._decoder is not None, "load() first"
        return self._decoder

    def load(self) -> None:
        """Load the decoder and compute the eager fp32 model's perplexity on its held-out text."""
        from nnsweep.models.decoder import eager_perplexity, load_decoder

        self._decoder = load_decoder(self.source.ref, self._cache().models_dir)
        self.eager = {PERPLEXITY: eager_perplexity(self._decoder)}

    def check_float_layers(self, counts: tuple[int, ...]) -> None:
        """The spec keeps a decoder's layers all at the mode's format (``space.float_layers: 0``)."""

    def float_layers(
        self, runtime: str, granularity: Granularity | None, k: int, group_size: int | None = None
    ) -> tuple[str, ...]:
        raise SpecError("space.float_layers", "a decoder language model's layers are not ranked; leave it at 0")

    def measure_request(self, config: DeploymentConfig) -> MeasureRequest:
        from nnsweep.artifacts.decoder import decode_sidecar

        decoder = self.bundle
        request = MeasureRequest.of(self._artifacts[config.digest()], decoder.held_out, self.settings)
        shape = DecoderShape(decoder.prompt_len, decoder.cache, decode_sidecar(config.runtime))
        return dataclasses.replace(request, decoder=shape)

    def outputs(self, config: DeploymentConfig) -> Any:
        raise BenchmarkError("a decoder's logits come from its device's measurement")

    def quality(self, config: DeploymentConfig, outputs: Any) -> dict[str, float]:
        """The perplexity of the held-out text under ``outputs``, the logits at each of its positions.

        Raises:
            BenchmarkError: the logits are not finite.
        """
        from nnsweep.bench.decoding import perplexity_of_logits

        value = perplexity_of_logits(outputs, self.bundle.held_out)
        if not math.isfinite(value):
            raise BenchmarkError("the deployed decoder's logits are not finite: no perplexity")
        return {PERPLEXITY: value}

    def record(self, sweep: str, ticket: Ticket, reply: MeasureReply, *, on_host: bool) -> TrialRecord:
        """The trial's record: the device's per-token figures and the perplexity of its logits.

        Raises:
            TrialError: the logits are not finite.
        """
        a = self._artifacts[ticket.config.digest()]
        t = reply.timing
        metrics = {
            **self.quality(ticket.config, reply.outputs),
            **t.figures,
            DECODE_PER_TOKEN: t.latency.p50,
            LATENCY_P50: t.latency.p50,
            LATENCY_MEAN: t.latency.mean,
            LATENCY_P90: t.latency.p90,
            LATENCY_P99: t.latency.p99,
            SIZE: float(a.size_bytes + sum(path.stat().st_size for path, _ in a.sidecars.values())),
            LOAD: t.load_ms,
            FIRST_INFERENCE: t.first_inference_ms,
            PEAK_RSS: t.peak_rss_mb,
        }
        metrics.update({f"measure_{k}_ms": float(v) for k, v in t.phases_ms.items()})
        tags = {
            "artifact_sha256": a.sha256,
            "accuracy_source": "perplexity of the device's logits on the held-out text",
            "latency_source": f"{reply.source}: one decode step against the static KV cache",
        }
        return ok_record(sweep, ticket, metrics, a.partitions.to_dict(), tags, reply, t.samples_ms)
