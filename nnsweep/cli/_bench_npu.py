"""``nnsweep bench`` on an Ethos-U NPU, which no machine here has: Vela's estimate is the
latency, and the integer TOSA graph Vela compiled runs in the TOSA reference model on this
machine for the outputs, as a sweep's ``npus:`` device does
(:class:`~nnsweep.agents.VelaEstimateTransport`). Everything printed about its speed and
memory says it is an estimate."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nnsweep.core.errors import BenchmarkError
from nnsweep.core.runtimes import npu_target

if TYPE_CHECKING:
    from nnsweep.agents import MeasureReply
    from nnsweep.artifacts.cache import Artifact
    from nnsweep.artifacts.deploy import DeploymentResult
    from nnsweep.bench import MeasureSettings
    from nnsweep.models import ModelSnapshot

__all__ = ["estimate", "estimate_fields", "estimate_lines"]


def estimate(
    snapshot: ModelSnapshot, artifact: Artifact, settings: MeasureSettings, *, cache_hit: bool
) -> tuple[DeploymentResult, MeasureReply]:
    """Vela's estimate for ``artifact`` and its outputs from the TOSA reference model, evaluated
    against fp32.

    Raises:
        BenchmarkError: the artifact carries no estimate, or the TOSA graph does not run.
    """
    from nnsweep.agents import MeasureRequest, VelaEstimateTransport
    from nnsweep.artifacts import deploy

    target = npu_target(artifact.config)
    assert target is not None, "an Ethos-U configuration"
    reply = VelaEstimateTransport(target).measure(MeasureRequest.of(artifact, snapshot.evaluation.inputs, settings))
    if reply.outputs is None:  # the conversion writes the graph or fails: a cache entry without it is not ours
        raise BenchmarkError(f"{artifact.path.parent} carries no TOSA graph to run: delete it to convert again")
    return deploy.assemble(snapshot, artifact, reply.timing, reply.outputs, cache_hit=cache_hit), reply


def estimate_fields(reply: MeasureReply) -> dict[str, Any]:
    """What ``bench --json`` adds: the latency is an estimate, and Vela's figures by name."""
    return {"estimated": True, "latency_source": reply.source, "estimates": dict(reply.estimates)}


def estimate_lines(reply: MeasureReply) -> list[str]:
    """The summary's lines on speed and memory, each saying it is Vela's estimate."""
    est = reply.estimates
    lines = [
        f"Estimated inference time: {est.get('inference_time_ms', 0.0) * 1000:.1f} us "
        f"(an estimate, not a measurement: {reply.source})",
        f"Estimated memory: SRAM {est.get('sram_kib', 0.0):.1f} KiB, flash {est.get('flash_kib', 0.0):.1f} KiB; "
        f"{est.get('macs', 0.0):,.0f} MACs",
    ]
    if "npu_operators" in est:
        lines.append(
            f"Operators: {est['npu_operators']:.0f} on the NPU, {est.get('cpu_operators', 0.0):.0f} on its CPU "
            "(Vela's count)"
        )
    lines.append("Outputs: the integer TOSA graph Vela compiled, run in the TOSA reference model on this machine")
    return lines
