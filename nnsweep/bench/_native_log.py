"""What a runtime's native log says about a failure, for the one-line reason of a trial.

ExecuTorch's Python bindings raise with an error code only ("method->execute() failed
with error 0x12", "Failed to load method forward, error: 0x:1"); the cause is in the
lines its runtime logs to stderr as ``[source.cpp:line] message``: a kernel's check
("Check failed (...): Expect input tensor to be 3-D or 4-D, but got, 5."), a delegate's
refusal ("XNN Runtime creation failed with code: xnn_status_unsupported_parameter"), and
where it surfaced ("KernelCall failed at instruction 0:0 in operator
aten::convolution.out: 0x12").
"""

from __future__ import annotations

import re

__all__ = ["executorch_failure"]

_LOG_LINE = re.compile(r"^\[(?P<source>[\w.]+):\d+\] (?P<message>.+)$")
# Logged on every start on a machine without Arm registers: not a failure of the model.
_NOT_A_CAUSE = ("cpuinfo_utils",)


def executorch_failure(stderr: str, limit: int = 400) -> str:
    """The first and the last failure ExecuTorch logged (the cause, and where it surfaced),
    joined by " | "; empty when it logged none."""
    failures: list[str] = []
    for line in stderr.splitlines():
        found = _LOG_LINE.match(line.strip())
        if not found or found["source"].startswith(_NOT_A_CAUSE):
            continue
        message = found["message"].strip()
        if "failed" in message.lower() and message not in failures:
            failures.append(message)
    if not failures:
        return ""
    shown = " | ".join(failures[:1] + failures[-1:] if len(failures) > 1 else failures)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."
