"""Run a ``.pte`` with ExecuTorch's Python runtime (the same C++ runtime an app links).

Where PyTorch is not installed (a lite agent), the same C++ runtime runs through
nnsweep's torch-free runner instead (:mod:`nnsweep.runtimes.executorch.etlite`): the
executorch wheel's own shared libraries, of the version the host converts with.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import importlib.util
from types import ModuleType
from typing import Any

import numpy as np

from nnsweep.bench import Runner
from nnsweep.core.errors import BenchmarkError
from nnsweep.runtimes.common.outputs import concat_float
from nnsweep.runtimes.executorch import etlite as _etlite
from nnsweep.runtimes.executorch.info import BINDING_MODULES

__all__ = ["BINDING_MODULES", "ExecuTorchRunner", "bindings"]


# nnsweep backend name -> the id the runtime registers (kept in step with nnsweep.runtimes.executorch.converter).
_RUNTIME_IDS = {"xnnpack": "XnnpackBackend"}


def torch_free() -> bool:
    """Whether ExecuTorch runs torch-free here: no PyTorch, so no Python bindings."""
    return importlib.util.find_spec("torch") is None


@functools.cache
def bindings() -> ModuleType:
    """ExecuTorch's Python bindings of its C++ runtime (``executorch.extension.pybindings._C``).

    ``executorch.runtime`` reaches the same module through ``pybindings.portable_lib``,
    which imports ``executorch.exir``, the whole compiler, only to name a warning class.
    Importing the bindings alone keeps a fresh measuring process's start short
    (docs/explanation/measurement.md). The portable quantized kernels (int8 ops no
    delegate took) are a separate library, loaded here too; the bindings' inputs and
    outputs are torch tensors.
    """
    return [importlib.import_module(name) for name in BINDING_MODULES][-1]


@functools.cache
def _lite_library() -> ctypes.CDLL:
    try:
        return _etlite.find().load()
    except _etlite.EtLiteUnavailable as exc:
        raise BenchmarkError(f"no PyTorch here and no torch-free ExecuTorch runner: {exc}") from exc


class ExecuTorchRunner(Runner):
    """Loads the program once and executes its ``forward`` method."""

    _lite: _etlite.EtLiteProgram | None = None

    @classmethod
    def set_threads(cls, threads: int) -> None:
        # The threadpool can only be sized before any program is loaded: changing it
        # afterwards crashes (docs/explanation/architecture.md §5), hence one process per measurement.
        if torch_free():
            _etlite.set_threads(_lite_library(), threads)
            return
        bindings()._unsafe_reset_threadpool(threads)

    def load(self) -> None:
        if torch_free():
            self._load_lite()
            return
        runtime = bindings()
        registered = set(runtime._get_registered_backend_names())
        missing = [b for b in self.backends if b in _RUNTIME_IDS and _RUNTIME_IDS[b] not in registered]
        if missing:
            raise BenchmarkError(f"ExecuTorch runtime here lacks backend(s) {', '.join(missing)}")
        try:
            # The checks executorch.runtime.Runtime.load_program asks for by default.
            program = runtime._load_program(
                str(self.path), program_verification=runtime.Verification.InternalConsistency
            )
            if "forward" not in {program.get_method_name(i) for i in range(program.num_methods())}:
                raise BenchmarkError(f"{self.path.name} has no forward method")
            self._program = program  # the method runs in the program's memory: kept alive with it
            self._method = program.load_method("forward")
        except RuntimeError as exc:
            raise BenchmarkError(f"cannot load {self.path.name}: {exc}") from exc

    def _load_lite(self) -> None:
        lib = _lite_library()
        registered = set(_etlite.backends(lib))
        missing = [b for b in self.backends if b in _RUNTIME_IDS and _RUNTIME_IDS[b] not in registered]
        if missing:
            raise BenchmarkError(f"ExecuTorch runtime here lacks backend(s) {', '.join(missing)}")
        self._lite = _etlite.EtLiteProgram(lib, self.path)

    def prepare(self, x: np.ndarray) -> Any:
        if self._lite is not None:
            return self.io.prepare_input(x)
        import torch

        return torch.from_numpy(self.io.prepare_input(x))

    def run(self, prepared: Any) -> Any:
        if self._lite is not None:
            return self._lite([prepared])
        return self._method([prepared])  # every output (several for tuple/dict models)

    def run_inputs(self, prepared: list[Any]) -> list[Any]:
        if self._lite is not None:
            return list(self._lite(prepared))
        try:
            return list(self._method(prepared))
        except RuntimeError as exc:
            raise BenchmarkError(f"ExecuTorch failed to run {self.path.name}: {exc}") from exc

    def to_float(self, raw: Any) -> np.ndarray:
        if self._lite is not None:
            return concat_float(self.io, raw)
        return concat_float(self.io, [t.numpy() for t in raw])
