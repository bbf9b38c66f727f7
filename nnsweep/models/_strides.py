"""Standard strides for what a model function hands over: its example input, its data
splits and its weights.

numpy gives an axis added by indexing (``x[:, None]``) the stride 0 and still flags the
array C-contiguous, so ``np.ascontiguousarray`` and torch's ``.contiguous()`` leave it
as it is; a ``torch.from_numpy`` of it keeps the 0. An exporter that stores a tensor by its
dim order cannot take that (ExecuTorch: "0 in strides is not supported for ExecuTorch"),
nor a constant made by ``expand``. The model's load copies each such array or tensor to
the strides a fresh one of its shape has, once: every runtime, the fp32 reference and the
digests then see the same dense values.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

__all__ = ["has_standard_strides", "standard_array", "standard_tensor"]


def _c_strides(shape: tuple[int, ...], unit: int) -> tuple[int, ...]:
    """The strides of a fresh C-ordered array of ``shape`` whose elements are ``unit`` apart
    (a size-0 axis counts as 1, as torch counts it)."""
    strides, step = [], unit
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def has_standard_strides(value: Any) -> bool:
    """Whether ``value`` (a numpy array or a torch tensor) is laid out as a fresh one of its
    shape would be: C order, no stride of 0, nothing reversed, nothing skipped. An empty one
    always is (it has no element to read)."""
    if isinstance(value, np.ndarray):
        return value.size == 0 or value.strides == _c_strides(value.shape, value.itemsize)
    return value.numel() == 0 or tuple(value.stride()) == _c_strides(tuple(value.shape), 1)


def standard_array(array: np.ndarray) -> np.ndarray:
    """``array`` itself when it has standard strides, else a C-ordered copy (which has)."""
    return array if has_standard_strides(array) else np.array(array, copy=True, order="C")


def standard_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` itself when it has standard strides, else a copy that has: ``clone`` in
    the contiguous format allocates by shape alone (the default, ``preserve_format``, keeps
    a dense tensor's strides, a 0 on a size-1 axis included)."""
    if has_standard_strides(tensor):
        return tensor
    import torch

    return tensor.clone(memory_format=torch.contiguous_format)
