"""Run a ``.pte`` with ExecuTorch's Python runtime (the same C++ runtime an app links)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from nnsweep.bench._runner import Runner
from nnsweep.bench.runners._outputs import concat_float
from nnsweep.core.errors import BenchmarkError

__all__ = ["ExecuTorchRunner"]

# nnsweep backend name -> the id the runtime registers (kept in step with nnsweep.convert.executorch).
_RUNTIME_IDS = {"xnnpack": "XnnpackBackend"}


class ExecuTorchRunner(Runner):
    """Loads the program once and executes its ``forward`` method."""

    @classmethod
    def set_threads(cls, threads: int) -> None:
        # The threadpool can only be sized before any program is loaded: changing it
        # afterwards crashes (docs/architecture.md §5), hence one process per measurement.
        from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool

        _unsafe_reset_threadpool(threads)

    def load(self) -> None:
        # The portable quantized kernels (int8 ops no delegate took) are a separate library.
        import executorch.kernels.quantized  # noqa: F401
        from executorch.runtime import Runtime

        runtime = Runtime.get()
        registered = set(runtime.backend_registry.registered_backend_names)
        missing = [b for b in self.backends if b in _RUNTIME_IDS and _RUNTIME_IDS[b] not in registered]
        if missing:
            raise BenchmarkError(f"ExecuTorch runtime here lacks backend(s) {', '.join(missing)}")
        try:
            program = runtime.load_program(self.path)
            method = program.load_method("forward")
        except RuntimeError as exc:
            raise BenchmarkError(f"cannot load {self.path.name}: {exc}") from exc
        if method is None:
            raise BenchmarkError(f"{self.path.name} has no forward method")
        self._method = method

    def prepare(self, x: np.ndarray) -> Any:
        return torch.from_numpy(self.io.prepare_input(x))

    def run(self, prepared: Any) -> Any:
        return self._method.execute([prepared])  # every output (several for tuple/dict models)

    def to_float(self, raw: Any) -> np.ndarray:
        return concat_float(self.io, [t.numpy() for t in raw])
