"""A deployed model's outputs as one float row: what the harness records per input.

A model with several outputs (a tuple or dict: detection heads, multi-task models)
returns them in the order ``torch.export`` flattens them; each becomes float32,
flattened, and they are concatenated in that order, as
:func:`nnsweep.artifacts.deploy.reference_outputs` lays out the fp32 reference.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from nnsweep.core.artifact import IOSpec

__all__ = ["concat_float", "flatten_order"]

# litert-torch names a model's outputs ``output_0``, ``output_1``, ... in torch.export's
# flatten order; the tensor names carry it (``serving_default_output_1_output``).
_NUMBERED = re.compile(r"(?:^|_)output_(\d+)(?:_|$)")


def flatten_order(names: Sequence[str]) -> list[int]:
    """Positions of ``names`` (a ``.tflite`` model's output tensors) in flatten order.

    The order comes from the ``output_N`` in each name; names without one keep the
    order the model lists them in.
    """
    numbers = [_NUMBERED.search(name) for name in names]
    if len(names) < 2 or not all(numbers):
        return list(range(len(names)))
    keys = [int(m.group(1)) for m in numbers if m]
    return sorted(range(len(names)), key=keys.__getitem__)


def concat_float(io: IOSpec, arrays: Sequence[np.ndarray]) -> np.ndarray:
    """One output: as ``io`` dequantizes it. Several: each float32 and flattened, side by side.

    Only single-output models take the ``full`` interface (quantized outputs), so the
    output quantization in ``io`` belongs to the first output.
    """
    if len(arrays) == 1:
        return io.float_output(np.asarray(arrays[0]))
    first = io.float_output(np.asarray(arrays[0])).reshape(-1)
    rest = [np.asarray(a, dtype=np.float32).reshape(-1) for a in arrays[1:]]
    return np.concatenate([first, *rest]).astype(np.float32, copy=False)
