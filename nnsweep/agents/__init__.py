"""Device agents: capabilities, the transport seam, and the agent that measures."""

from nnsweep.agents._agent import DeviceAgent
from nnsweep.agents._bridge import AdbTransport, BridgeTransport, SshTransport, bridge_transport
from nnsweep.agents._capabilities import Capabilities, converter_versions, refuse_version_skew
from nnsweep.agents._node import (
    RAY_ENV,
    check_head_answers,
    check_token_file,
    default_token_path,
    ensure_token,
    head_command,
    join_command,
    local_token,
    ray_env,
    ray_temp_dir,
    start_failure,
)
from nnsweep.agents._npu import VelaEstimateTransport
from nnsweep.agents._tools import DeviceTool, ToolRun
from nnsweep.agents._transport import LocalTransport, MeasureReply, MeasureRequest, Transport

__all__ = [
    "RAY_ENV",
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
    "check_head_answers",
    "check_token_file",
    "converter_versions",
    "default_token_path",
    "ensure_token",
    "head_command",
    "join_command",
    "local_token",
    "ray_env",
    "ray_temp_dir",
    "refuse_version_skew",
    "start_failure",
]
