"""Run an ONNX model with ONNX Runtime; the backend order is the providers list."""

from __future__ import annotations

from typing import Any

import onnxruntime as ort

from nnsweep.bench._runner import Runner
from nnsweep.errors import BenchmarkError

__all__ = ["PROVIDERS", "OnnxRuntimeRunner", "providers_for", "session_options"]

# nnsweep backend name -> ONNX Runtime execution provider.
PROVIDERS = {
    "cpu": "CPUExecutionProvider",
    "xnnpack": "XnnpackExecutionProvider",
    "acl": "ACLExecutionProvider",
    "armnn": "ArmNNExecutionProvider",
    "nnapi": "NnapiExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
    "cuda": "CUDAExecutionProvider",
}


def providers_for(order: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """The providers of ``order`` available here (CPU always last), and the backends skipped."""
    available = set(ort.get_available_providers())
    chosen, skipped = [], []
    for name in order:
        provider = PROVIDERS[name]
        if provider in available:
            chosen.append(provider)
        else:
            skipped.append(name)
    if PROVIDERS["cpu"] not in chosen:
        chosen.append(PROVIDERS["cpu"])
    return chosen, skipped


def session_options(threads: int) -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only: placement warnings go to the partition report
    return options


class OnnxRuntimeRunner(Runner):
    """One inference session with the order's providers that exist on this machine."""

    def load(self) -> None:
        providers, _ = providers_for(self.backends or ("cpu",))
        try:
            self._session = ort.InferenceSession(str(self.path), session_options(self.threads), providers=providers)
        except (ort.capi.onnxruntime_pybind11_state.Fail, RuntimeError) as exc:  # type: ignore[attr-defined]
            raise BenchmarkError(f"ONNX Runtime cannot load {self.path.name}: {exc}") from exc
        self._input = self._session.get_inputs()[0].name

    def run(self, prepared: Any) -> Any:
        return self._session.run(None, {self._input: prepared})[0]
