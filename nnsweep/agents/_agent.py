"""The device agent: one per device, one measurement at a time."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

from nnsweep.agents._capabilities import Capabilities
from nnsweep.agents._transport import LocalTransport, MeasureReply, MeasureRequest, Transport
from nnsweep.bench.profile import Profile

__all__ = ["DeviceAgent"]


class DeviceAgent:
    """Measures artifacts on one device through its transport.

    On Ray it runs as an actor with ``max_concurrency=1`` and the resource
    ``device:<name>``, so the device never runs two benchmarks at once; the
    same class runs in-process for the local executor and in tests.

    Args:
        device: the device's name.
        transport: how to reach it (default: this machine).
    """

    def __init__(self, device: str, transport: Transport | None = None) -> None:
        self.device = device
        self.transport = transport or LocalTransport()
        self._capabilities: Capabilities | None = None
        self.busy_s = 0.0

    def capabilities(self) -> Capabilities:
        if self._capabilities is None:
            self._capabilities = self.transport.probe(self.device)
        return self._capabilities

    def probe_again(self) -> Capabilities:
        """Probe the device anew, not answering from the first probe: whether a lost phone
        or ssh board answers again."""
        self._capabilities = None
        return self.capabilities()

    def measure(self, request: MeasureRequest) -> MeasureReply:
        """Measure one artifact; an emulated device's reply says so (``MeasureReply.emulated``)."""
        emulated = self.capabilities().emulated
        started = time.perf_counter()
        try:
            reply = self.transport.measure(request)
        finally:
            self.busy_s += time.perf_counter() - started
        if emulated and not reply.emulated:
            # The transport times what it runs; only the probe knows the device is emulated.
            reply = dataclasses.replace(reply, emulated=True)
        return reply

    def profile(self, request: MeasureRequest) -> Profile:
        """Profile one artifact per operator on the device; an emulated device's profile says so."""
        started = time.perf_counter()
        try:
            profile = self.transport.profile(request)
        finally:
            self.busy_s += time.perf_counter() - started
        if self.capabilities().emulated and profile.reason is None:
            profile = dataclasses.replace(profile, emulated=True)
        return profile

    def prepare(self, runtimes: Sequence[str]) -> None:
        """Get the transport ready for these runtimes (warm workers), before the first measurement."""
        self.transport.prepare(runtimes)

    def ping(self) -> str:
        return self.device
