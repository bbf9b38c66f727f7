"""Device agents: capabilities, the transport seam, and the agent that measures."""

from nnsweep.agents._agent import DeviceAgent
from nnsweep.agents._capabilities import Capabilities
from nnsweep.agents._transport import LocalTransport, MeasureReply, MeasureRequest, Transport

__all__ = ["Capabilities", "DeviceAgent", "LocalTransport", "MeasureReply", "MeasureRequest", "Transport"]
