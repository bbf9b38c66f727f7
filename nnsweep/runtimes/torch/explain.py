"""PyTorch's intermediates for ``nnsweep bench --explain``: forward hooks on the quantized model's modules.

The TorchScript artifact is frozen (its submodules inlined into one graph): no module is left
to hook. So the model is rebuilt in eager form as the converter builds it (the same FX
quantization, engine and calibration, hence the same weights and scales) and each leaf
module's output is hooked; a quantized tensor is dequantized. FX keeps module paths (a
convolution fused with its BatchNorm and ReLU keeps the convolution's).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np

from nnsweep.bench.divergence import Observed, hooked_outputs
from nnsweep.core.errors import BenchmarkError

__all__ = ["explain"]

_NOTE = "the frozen TorchScript artifact rebuilt in eager form as its converter builds it, hooked per module"


def explain(bundle: Any, config: Any, artifact: Path, io: Any, inputs: np.ndarray) -> tuple[list[Observed], str]:
    """The quantized model's leaf-module outputs on ``inputs`` (see the module docstring)."""
    import torch

    from nnsweep.core.quant import QuantMode
    from nnsweep.runtimes.common.fx import quantize_fx, quantized_engine
    from nnsweep.runtimes.common.half import HalfPrecision
    from nnsweep.runtimes.torch.converter import quantize_dynamic_linears
    from nnsweep.runtimes.torch.runner import pick_engine

    if config.backends[:1] == ("nnapi",):
        raise BenchmarkError("NNAPI runs the whole model on the device: no intermediate outputs here")
    quant = config.quant
    engine, _ = pick_engine(config.backends)
    if quant.mode.is_int8 and engine is None:
        raise BenchmarkError(f"no quantized engine of {', '.join(config.backends)} is available here")
    with quantized_engine(engine or torch.backends.quantized.engine):
        if quant.mode is QuantMode.FP16:
            half = HalfPrecision(copy.deepcopy(bundle.module)).eval()
            observed = hooked_outputs(half.model, inputs, lambda x: x.half())
            return [(name and name.removeprefix("model."), values) for name, values in observed], _NOTE
        if quant.mode is QuantMode.DYNAMIC_INT8:
            model = quantize_dynamic_linears(bundle, quant)
        elif quant.mode.is_static:
            model = quantize_fx(bundle, quant, engine or torch.backends.quantized.engine)
        else:
            model = copy.deepcopy(bundle.module).eval()
        return hooked_outputs(model, inputs), _NOTE
