"""Run an ONNX model with ONNX Runtime; the backend order is the session's providers list.

This module runs on boards: it imports ONNX Runtime and numpy, never torch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort
from onnxruntime.capi import onnxruntime_pybind11_state as _ort_state

from nnsweep.bench import Runner
from nnsweep.core.errors import BenchmarkError
from nnsweep.runtimes.common.outputs import concat_float

__all__ = ["PROVIDERS", "OnnxRuntimeRunner", "providers_for", "session_options"]

PROVIDERS: dict[str, str] = {
    "cpu": "CPUExecutionProvider",
    "xnnpack": "XnnpackExecutionProvider",
    "acl": "ACLExecutionProvider",
    "armnn": "ArmNNExecutionProvider",
    "nnapi": "NnapiExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
    "cuda": "CUDAExecutionProvider",
}
"""nnsweep backend name -> ONNX Runtime execution provider (the one table of this mapping)."""

# ONNX Runtime's binding raises its own exception types (InvalidProtobuf, NoSuchFile,
# InvalidGraph, EPFail, ...), which derive from Exception, not RuntimeError.
_ORT_ERRORS: tuple[type[Exception], ...] = (
    RuntimeError,
    *(v for v in vars(_ort_state).values() if isinstance(v, type) and issubclass(v, Exception)),
)

# a wrong count or dtype of inputs is a ValueError of the binding's Python side
_RUN_INPUTS_ERRORS: tuple[type[Exception], ...] = (*_ORT_ERRORS, ValueError)


def providers_for(order: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """The providers of ``order`` available on this machine, and the backends skipped.

    The CPU provider is always last: it runs whatever the others do not take.

    Returns:
        ``(providers, skipped)``: provider names for a session, and the backends of
        ``order`` (nnsweep names, preferred first) whose provider this build lacks.

    Raises:
        ValueError: ``order`` names a backend ONNX Runtime does not know.

    Example:
        >>> providers_for(("cpu",))
        (['CPUExecutionProvider'], [])
    """
    unknown = [name for name in order if name not in PROVIDERS]
    if unknown:
        raise ValueError(f"unknown onnxruntime backend {unknown[0]!r}; known: {', '.join(PROVIDERS)}")
    available = set(ort.get_available_providers())
    chosen: list[str] = []
    skipped: list[str] = []
    for name in order:
        if name == "cpu":
            break  # the CPU provider runs every op: nothing after it is ever reached
        provider = PROVIDERS[name]
        if provider in available:
            chosen.append(provider)
        else:
            skipped.append(name)
    chosen.append(PROVIDERS["cpu"])
    return chosen, skipped


def session_options(threads: int) -> ort.SessionOptions:
    """Session options for a measurement: ``threads`` intra-op threads, sequential
    execution (one inter-op thread), all graph optimisations."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # Errors only: ORT logs node placement as warnings, which the partition report states.
    options.log_severity_level = 3
    return options


class OnnxRuntimeRunner(Runner):
    """One :class:`onnxruntime.InferenceSession` with the order's providers that exist here.

    ONNX Runtime takes its thread count per session, so :meth:`set_threads` stays the
    base class's no-op and :meth:`load` applies ``threads``. Providers of the order that
    this onnxruntime build lacks are skipped; the CPU provider always closes the list.
    """

    def load(self) -> None:
        try:
            providers, _ = providers_for(self.backends or ("cpu",))
        except ValueError as exc:
            raise BenchmarkError(str(exc)) from exc
        try:
            self._session = ort.InferenceSession(str(self.path), session_options(self.threads), providers=providers)
        except _ORT_ERRORS as exc:
            raise BenchmarkError(f"ONNX Runtime cannot load {self.path.name}: {type(exc).__name__}: {exc}") from exc
        self._inputs = [i.name for i in self._session.get_inputs()]
        self._input = self._inputs[0]

    def run(self, prepared: Any) -> Any:
        try:  # every output (several for tuple/dict models); to_float joins them
            return self._session.run(None, {self._input: prepared})  # type: ignore[no-any-return]
        except _ORT_ERRORS as exc:
            raise BenchmarkError(f"ONNX Runtime failed to run {self.path.name}: {type(exc).__name__}: {exc}") from exc

    def run_inputs(self, prepared: list[Any]) -> list[Any]:
        try:
            return self._session.run(None, dict(zip(self._inputs, prepared, strict=True)))  # type: ignore[no-any-return]
        except _RUN_INPUTS_ERRORS as exc:
            raise BenchmarkError(f"ONNX Runtime failed to run {self.path.name}: {type(exc).__name__}: {exc}") from exc

    def to_float(self, raw: Any) -> np.ndarray:
        return concat_float(self.io, raw)
