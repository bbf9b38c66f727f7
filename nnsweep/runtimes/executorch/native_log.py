"""What ExecuTorch's native log says about a failure, for the one-line reason of a trial.

ExecuTorch's Python bindings raise with an error code only ("method->execute() failed
with error 0x12", "Failed to load method forward, error: 0x:1"); the cause is in the
lines its runtime logs to stderr as ``[source.cpp:line] message``: a kernel's check
("Check failed (...): Expect input tensor to be 3-D or 4-D, but got, 5."), a delegate's
refusal ("XNN Runtime creation failed with code: xnn_status_unsupported_parameter"), and
where it surfaced ("KernelCall failed at instruction 0:0 in operator
aten::convolution.out: 0x12"); a program whose delegate this build lacks logs "Backend
EthosUBackend is not registered." before its load fails with 0x20. The code is named
too, from ExecuTorch's ``runtime/core/error.h``.
"""

from __future__ import annotations

import re

__all__ = ["error_name", "executorch_failure"]

_LOG_LINE = re.compile(r"^\[(?P<source>[\w.]+):\d+\] (?P<message>.+)$")
# Logged on every start on a machine without Arm registers: not a failure of the model.
_NOT_A_CAUSE = ("cpuinfo_utils",)
_FAILURE_WORDS = ("failed", "not registered", "missing")
# executorch/runtime/core/error.h (ExecuTorch 1.5)
_ERROR_NAMES = {
    0x01: "Internal",
    0x02: "InvalidState",
    0x10: "NotSupported",
    0x11: "NotImplemented",
    0x12: "InvalidArgument",
    0x13: "InvalidType",
    0x14: "OperatorMissing",
    0x20: "NotFound",
    0x21: "MemoryAllocationFailed",
    0x22: "AccessFailed",
    0x23: "InvalidProgram",
    0x24: "InvalidExternalData",
    0x25: "OutOfResources",
    0x30: "DelegateInvalidCompatibility",
    0x31: "DelegateMemoryAllocationFailed",
    0x32: "DelegateInvalidHandle",
}


def executorch_failure(stderr: str, limit: int = 400) -> str:
    """The first and the last failure ExecuTorch logged (the cause, and where it surfaced),
    joined by " | "; empty when it logged none."""
    failures: list[str] = []
    for line in stderr.splitlines():
        found = _LOG_LINE.match(line.strip())
        if not found or found["source"].startswith(_NOT_A_CAUSE):
            continue
        message = found["message"].strip()
        if any(word in message.lower() for word in _FAILURE_WORDS) and message not in failures:
            failures.append(message)
    if not failures:
        return ""
    shown = " | ".join(failures[:1] + failures[-1:] if len(failures) > 1 else failures)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def error_name(message: str) -> str:
    """The name of the ExecuTorch error code at the end of ``message`` ("... error: 0x:20"
    -> "NotFound"); empty when there is none or it is unknown."""
    found = re.search(r"0x:?(?P<hex>[0-9a-fA-F]{1,2})\s*$", message.strip())
    return _ERROR_NAMES.get(int(found["hex"], 16), "") if found else ""
