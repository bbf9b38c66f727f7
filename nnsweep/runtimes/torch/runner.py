"""Run a TorchScript artifact with PyTorch's CPU kernels and a quantized engine.

The quantized engine (``x86``, ``fbgemm``, ``qnnpack``, ``onednn``) decides which
int8 kernels run: packed weights are re-packed for the current engine when the
module is loaded, so the engine is set *before* :func:`torch.jit.load`, chosen from
the backend order by :func:`pick_engine` exactly as the converter chose it.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from nnsweep.bench import Runner
from nnsweep.core.errors import BenchmarkError

__all__ = ["META_FILE", "TorchScriptRunner", "pick_engine"]

META_FILE = "nnsweep.json"
"""Name of the extra file inside the TorchScript archive that records how it was built
(``{"engine": "x86" | null, "mode": "static_int8"}``)."""


def pick_engine(order: Iterable[str], supported: Iterable[str] | None = None) -> tuple[str | None, tuple[str, ...]]:
    """The first quantized engine of ``order`` that this PyTorch build supports.

    Args:
        order: the backend preference order of a configuration.
        supported: the engines to choose from; defaults to
            ``torch.backends.quantized.supported_engines`` of this process.

    Returns:
        The engine (``None`` when the order is empty or names no supported engine)
        and the engines skipped on the way, so the partition report can say so.

    Example:
        >>> pick_engine(["qnnpack", "x86"], supported=["x86", "fbgemm"])
        ('x86', ('qnnpack',))
    """
    available = set(torch.backends.quantized.supported_engines if supported is None else supported)
    skipped: list[str] = []
    for engine in order:
        if engine in available:
            return engine, tuple(skipped)
        skipped.append(engine)
    return None, tuple(skipped)


class TorchScriptRunner(Runner):
    """Loads the TorchScript module with the order's quantized engine and runs it under inference mode.

    ``full``-interface artifacts take a ``torch.quint8`` tensor and return one:
    :meth:`prepare` builds it from the uint8 array of :meth:`IOSpec.prepare_input`
    with the artifact's input scale and zero point, and :meth:`to_float` dequantizes.
    """

    @classmethod
    def set_threads(cls, threads: int) -> None:
        """Intra-op threads as asked; one inter-op thread (a single inference has no parallel branches).

        PyTorch accepts the inter-op count only before its first parallel work, hence once per process.
        """
        torch.set_num_threads(threads)
        if torch.get_num_interop_threads() != 1:
            torch.set_num_interop_threads(1)

    def load(self) -> None:
        if self.backends[:1] == ("nnapi",):
            raise BenchmarkError("NNAPI models run only on Android (libneuralnetworks.so): measure over the adb bridge")
        engine: str | None = None
        if self.backends:
            engine, _ = pick_engine(self.backends)
            if engine is None:
                raise BenchmarkError(
                    f"none of the quantized engines {', '.join(self.backends)} is available here "
                    f"(this PyTorch build has {', '.join(torch.backends.quantized.supported_engines)})"
                )
            torch.backends.quantized.engine = engine
        extra = {META_FILE: ""}
        try:
            with warnings.catch_warnings():
                # torch.jit is deprecated in favour of ExecuTorch; TorchScript is still what Mobile/NNAPI load.
                warnings.filterwarnings("ignore", message=r"`torch\.jit\.\w+` is deprecated", category=FutureWarning)
                module = torch.jit.load(str(self.path), map_location="cpu", _extra_files=extra)
        except (RuntimeError, ValueError, OSError) as exc:
            raise BenchmarkError(f"cannot load {self.path.name}: {exc}") from exc
        built_for = json.loads(extra[META_FILE]).get("engine") if extra[META_FILE] else None
        if built_for is not None and built_for != engine:
            # Its activation ranges were calibrated for another engine's kernels (x86 and
            # fbgemm use 7-bit activations): measuring it here would report the wrong thing.
            raise BenchmarkError(
                f"{self.path.name} was quantized for the {built_for} engine, but this machine "
                f"would run it on {engine or 'no engine'}"
            )
        self._module = module.eval()

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
        from nnsweep.models import flatten_outputs

        tensors = [t.dequantize() if t.is_quantized else t for t in flatten_outputs(raw)]
        arrays = [np.asarray(t.float().numpy(), dtype=np.float32) for t in tensors]
        return arrays[0] if len(arrays) == 1 else np.concatenate([a.reshape(-1) for a in arrays])
