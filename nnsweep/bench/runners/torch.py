"""Run a TorchScript artifact with PyTorch's CPU kernels and a quantized engine."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from nnsweep.bench._runner import Runner
from nnsweep.errors import BenchmarkError

__all__ = ["TorchScriptRunner", "pick_engine"]


def pick_engine(order: Iterable[str], supported: Iterable[str] | None = None) -> tuple[str | None, list[str]]:
    """The first quantized engine of ``order`` this PyTorch build supports.

    Returns:
        The engine (``None`` when the order is empty or none is supported) and the
        engines skipped on the way, so the partition report can say so.
    """
    available = set(torch.backends.quantized.supported_engines if supported is None else supported)
    skipped: list[str] = []
    for engine in order:
        if engine in available:
            return engine, skipped
        skipped.append(engine)
    return None, skipped


class TorchScriptRunner(Runner):
    """Loads the TorchScript module, selects the quantized engine, runs under inference mode."""

    @classmethod
    def set_threads(cls, threads: int) -> None:
        torch.set_num_threads(threads)
        torch.set_num_interop_threads(1)

    def load(self) -> None:
        if self.backends[:1] == ("nnapi",):
            raise BenchmarkError("NNAPI models run only on Android (libneuralnetworks.so): measure over the adb bridge")
        if self.backends:
            engine, _ = pick_engine(self.backends)
            if engine is None:
                raise BenchmarkError(
                    f"none of the quantized engines {', '.join(self.backends)} is available here "
                    f"(this build has {', '.join(torch.backends.quantized.supported_engines)})"
                )
            torch.backends.quantized.engine = engine
        try:
            self._module = torch.jit.load(str(self.path), map_location="cpu").eval()
        except RuntimeError as exc:
            raise BenchmarkError(f"cannot load {self.path.name}: {exc}") from exc

    def prepare(self, x: np.ndarray) -> Any:
        data = torch.from_numpy(self.io.prepare_input(x))
        if self.io.input_scale is not None:
            # The "full" interface takes a quantized tensor with the model's input qparams.
            return torch._make_per_tensor_quantized_tensor(data, self.io.input_scale, self.io.input_zero_point or 0)
        return data

    def run(self, prepared: Any) -> Any:
        with torch.inference_mode():
            return self._module(prepared)

    def to_float(self, raw: Any) -> np.ndarray:
        if raw.is_quantized:
            return np.asarray(raw.dequantize().numpy(), dtype=np.float32)
        return np.asarray(raw.float().numpy(), dtype=np.float32)
