"""LiteRT's intermediates for ``nnsweep bench --explain``: an interpreter that keeps every tensor.

``experimental_preserve_all_tensors`` keeps each op's output readable after a run, but only
of the ops LiteRT's builtin kernels run (a delegate's are internal to it): the artifact is
run here without the XNNPACK delegate, on the builtin int8 kernels, and each op's output
is dequantized with its tensor's scale and zero point. litert-torch names an op's output by
its module stack (:mod:`~nnsweep.runtimes.litert.names` makes it a module path).
An op whose name has no module (the root's reshapes, the model's output) is left out.
4-D tensors are NHWC in LiteRT: they are compared as NCHW, the layout of the PyTorch model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from nnsweep.bench.divergence import Observed
from nnsweep.core.errors import BenchmarkError
from nnsweep.runtimes.litert.names import module_path

__all__ = ["explain"]

_NOTE = "every tensor kept by the interpreter, run on LiteRT's builtin kernels (the XNNPACK delegate's are internal)"


def _float(value: np.ndarray, quantization: tuple[float, int]) -> np.ndarray:
    scale, zero_point = quantization
    values = value.astype(np.float32)
    if np.issubdtype(value.dtype, np.integer) and scale:
        values = (values - zero_point) * scale
    return values.transpose(0, 3, 1, 2) if values.ndim == 4 else values


def explain(bundle: Any, config: Any, artifact: Path, io: Any, inputs: np.ndarray) -> tuple[list[Observed], str]:
    """Each named op's output on ``inputs`` (see the module docstring)."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    try:
        interp = Interpreter(
            model_path=str(artifact),
            num_threads=config.threads,
            experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
            experimental_preserve_all_tensors=True,
        )
        interp.allocate_tensors()
        source = interp.get_input_details()[0]
        layers: list[tuple[str, int, tuple[float, int]]] = []
        for op in interp._get_ops_details():  # the only API that lists ops with their output tensors
            for tensor in op["outputs"]:
                details = interp._get_tensor_details(int(tensor), 0)
                path = module_path(str(details["name"]), bundle.module)
                if path:
                    layers.append((path, int(tensor), details["quantization"]))
        rows: list[list[np.ndarray]] = [[] for _ in layers]
        for i in range(len(inputs)):
            interp.set_tensor(source["index"], io.prepare_input(inputs[i : i + 1]).astype(source["dtype"]))
            interp.invoke()
            for row, (_, tensor, quantization) in zip(rows, layers, strict=True):
                row.append(_float(interp.get_tensor(tensor), quantization))
    except (ValueError, RuntimeError) as exc:
        raise BenchmarkError(f"LiteRT cannot run {artifact.name} with every tensor kept: {exc}") from exc
    return [(path, np.concatenate(row)) for (path, _, _), row in zip(layers, rows, strict=True)], _NOTE
