"""Device agents: capabilities, the transport seam, and the agent that measures."""

from nnsweep.agents._agent import DeviceAgent
from nnsweep.agents._bridge import AdbTransport, BridgeTransport, SshTransport, bridge_transport
from nnsweep.agents._capabilities import Capabilities
from nnsweep.agents._npu import VelaEstimateTransport
from nnsweep.agents._tools import DeviceTool, ToolRun
from nnsweep.agents._transport import LocalTransport, MeasureReply, MeasureRequest, Transport
from nnsweep.runtimes.litert.device_tool import parse_benchmark_model
from nnsweep.runtimes.torch.device_tool import parse_speed_benchmark_torch

__all__ = [
    "AdbTransport",
    "BridgeTransport",
    "Capabilities",
    "DeviceAgent",
    "DeviceTool",
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
