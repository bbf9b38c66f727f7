"""``Executor.start`` sets each agent probing its device; ``capabilities`` waits for that probe.

The coordinator loads the model between the two, so the probe runs beside the load.
"""

from __future__ import annotations

import threading

from nnsweep.agents import Capabilities, MeasureReply, MeasureRequest, Transport
from nnsweep.execution.local import LocalExecutor


class _HeldProbe(Transport):
    """A fake at the transport seam (no device to probe in a unit test): it counts its
    probes and answers only once the test lets it."""

    name = "held-probe"

    def __init__(self) -> None:
        self.calls = 0
        self.probing = threading.Event()
        self.answer = threading.Event()

    def probe(self, device: str) -> Capabilities:
        self.calls += 1
        self.probing.set()
        self.answer.wait(10)
        return Capabilities(device, "m", "x86_64", "cpu", 2, 4096, {"onnxruntime": ("cpu",)})

    def measure(self, request: MeasureRequest) -> MeasureReply:
        raise AssertionError("nothing is measured here")


def test_start_begins_the_probe_and_capabilities_takes_its_answer() -> None:
    transport = _HeldProbe()
    executor = LocalExecutor({"board": transport})
    try:
        executor.start(["board"])
        assert transport.probing.wait(10)  # probing before anyone asks for the capabilities
        transport.answer.set()
        caps = executor.capabilities("board")
        assert caps.device == "board" and caps.runtimes == {"onnxruntime": ("cpu",)}
        assert executor.capabilities("board") == caps and transport.calls == 1  # one probe, kept
    finally:
        transport.answer.set()
        executor.shutdown()


def test_a_conversion_goes_to_an_idle_actor_that_converted_the_same_program_last() -> None:
    """Two actors, both idle: the one whose process holds this model and quantization's edge
    program (nnsweep.runtimes.executorch.lowering) takes the next configuration of them; a busy one never does."""
    from nnsweep.execution.ray_cluster import RayExecutor

    executor = RayExecutor()
    first, second = object(), object()
    actors = [first, second]
    int8, fp32 = ("m", "executorch", "int8"), ("m", "executorch", "fp32")
    assert executor._least_busy(actors, int8) is first
    assert executor._least_busy(actors, fp32) is second  # first is busy
    executor._answered(first)
    executor._answered(second)
    assert executor._least_busy(actors, fp32) is second  # tied: the one that converted fp32 last
    assert executor._least_busy(actors, fp32) is first  # second is busy: idle beats affinity
