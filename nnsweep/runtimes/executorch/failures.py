"""What ExecuTorch's own log says about a failed measurement: the error code's name and the
failures it logged, added to the message (:attr:`RuntimeInfo.failure_detail`)."""

from __future__ import annotations

from nnsweep.runtimes.executorch.native_log import error_name, executorch_failure

__all__ = ["detail"]


def detail(message: str, stderr: str) -> str:
    """``message`` with the name of the error code it ends with and ExecuTorch's logged failures."""
    name, said = error_name(message), executorch_failure(stderr)
    return message + (f" ({name})" if name else "") + (f" (ExecuTorch's log: {said})" if said else "")
