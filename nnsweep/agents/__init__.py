"""Device agents: capabilities, the transport seam, and the agent that measures."""

from nnsweep.agents._agent import DeviceAgent
from nnsweep.agents._bridge import AdbTransport, BridgeTransport, SshTransport, bridge_transport
from nnsweep.agents._capabilities import Capabilities
from nnsweep.agents._npu import VelaEstimateTransport
from nnsweep.agents._tools import ToolRun, parse_benchmark_model, parse_speed_benchmark_torch
from nnsweep.agents._transport import LocalTransport, MeasureReply, MeasureRequest, Transport

__all__ = [
    "AdbTransport",
    "BridgeTransport",
    "Capabilities",
    "DeviceAgent",
    "LocalTransport",
    "MeasureReply",
    "MeasureRequest",
    "SshTransport",
    "ToolRun",
    "Transport",
    "VelaEstimateTransport",
    "bridge_transport",
    "parse_benchmark_model",
    "parse_speed_benchmark_torch",
]
