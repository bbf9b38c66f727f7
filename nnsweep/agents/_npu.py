"""Estimate-only devices: Arm Ethos-U NPUs, whose latency comes from the Vela compiler.

No Ethos-U exists on these machines. Its "measurement" is what Vela estimated when
the artifact was compiled (cycles, inference time at the NPU's clock, SRAM and
flash use), always marked ``estimated``; its accuracy is real: the integer TOSA
graph Vela compiled runs in the TOSA reference model on the host.
"""

from __future__ import annotations

import json
import os
import platform
import socket

from nnsweep.agents._capabilities import Capabilities
from nnsweep.agents._transport import MeasureReply, MeasureRequest, Transport
from nnsweep.bench import LatencyStats, Timing
from nnsweep.core.errors import BenchmarkError

__all__ = ["VelaEstimateTransport"]


class VelaEstimateTransport(Transport):
    """An Ethos-U configuration, measured by Vela's estimates.

    Args:
        target: the Ethos-U configuration, e.g. ``ethos-u55-128``.
    """

    name = "vela"

    def __init__(self, target: str) -> None:
        self.target = target

    def probe(self, device: str) -> Capabilities:
        from importlib import metadata

        return Capabilities(
            device=device,
            # The TOSA reference model runs on this host: measurements here must not overlap it.
            machine=socket.gethostname(),
            arch=self.target,
            cpu=f"Arm {self.target.upper()} NPU (latency: Vela estimates)",
            cores=1,
            memory_mb=0,
            # Only orders that start on the NPU can be estimated (portable closes them implicitly).
            runtimes={"executorch": (self.target,)},
            versions={"ethos-u-vela": metadata.version("ethos-u-vela"), "python": platform.python_version()},
            transport=self.name,
        )

    def measure(self, request: MeasureRequest) -> MeasureReply:
        from nnsweep.runtimes.ethosu.converter import TOSA_IO, TOSA_SIDECAR, run_tosa

        est = dict(request.estimates)
        if "inference_time_ms" not in est:
            raise BenchmarkError(f"the artifact carries no Vela estimate for {self.target}")
        latency = est["inference_time_ms"]
        timing = Timing(
            load_ms=0.0,
            first_inference_ms=latency,
            latency=LatencyStats.from_samples([latency]),
            samples_ms=(latency,),
            peak_rss_mb=0.0,  # no process runs: the NPU's memory is in estimate_sram_kib / estimate_flash_kib
            rss_before_load_mb=0.0,
            threads=1,
            loadavg_1m=os.getloadavg()[0],
        )
        outputs = None
        if TOSA_SIDECAR in request.sidecars:
            io_params = json.loads(request.sidecars[TOSA_IO])
            try:
                outputs = run_tosa(request.sidecars[TOSA_SIDECAR], io_params, request.inputs)
            except ValueError as exc:
                raise BenchmarkError(str(exc)) from exc
        cycles = est.get("cycles_total", 0.0)
        source = f"Vela estimate for {self.target}: {cycles:.0f} cycles at {est.get('npu_clock_mhz', 0):.0f} MHz"
        return MeasureReply(timing=timing, outputs=outputs, estimated=True, source=source, estimates=est)
