"""The executor a sweep spec needs: its bridges and NPUs as transports, local threads or Ray."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nnsweep.core.errors import SpecError
from nnsweep.execution._base import Executor

if TYPE_CHECKING:
    from nnsweep.spec import SweepSpec

__all__ = ["executor_for"]


def executor_for(spec: SweepSpec, kind: str = "ray", address: str | None = None) -> Executor:
    """The executor for ``spec``: ``local`` (threads in this process) or ``ray`` (a local
    cluster, or the one at ``address``), with a transport for each bridge and NPU device.

    Raises:
        SpecError: ``address`` without Ray, or an unknown ``kind``.
    """
    from nnsweep.agents import VelaEstimateTransport, bridge_transport

    transports: dict[str, Any] = {name: bridge_transport(bridge) for name, bridge in spec.bridges.items()}
    transports.update({name: VelaEstimateTransport(target) for name, target in spec.npus.items()})
    if kind == "local":
        if address:
            raise SpecError("--address", "needs --executor ray")
        from nnsweep.execution.local import LocalExecutor

        return LocalExecutor(transports)
    if kind == "ray":
        from nnsweep.execution.ray_cluster import RayExecutor

        return RayExecutor(address=address, transports=transports)
    raise SpecError("executor", f"unknown executor {kind!r}; use local or ray")
