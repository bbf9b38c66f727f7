"""What a model source produces: the module, an example input, and its data."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

__all__ = ["Dataset", "ModelBundle", "Split", "module_digest"]


@dataclass(frozen=True)
class Split:
    """Inputs (N, ...) float32, and labels (N,) int64 where the data is labelled."""

    inputs: np.ndarray
    labels: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.labels is not None and len(self.labels) != len(self.inputs):
            raise ValueError(f"{len(self.inputs)} inputs but {len(self.labels)} labels")

    def __len__(self) -> int:
        return len(self.inputs)

    def digest(self) -> str:
        h = hashlib.sha256()
        for array in (self.inputs, self.labels):
            if array is not None:
                h.update(str((array.dtype, array.shape)).encode())
                h.update(np.ascontiguousarray(array).tobytes())
        return h.hexdigest()


@dataclass(frozen=True)
class Dataset:
    """The splits a deployment needs.

    Args:
        calibration: inputs for static quantization ranges (labels unused).
        evaluation: inputs for accuracy and fidelity; accuracy needs labels.
        train: labelled data for quantization-aware fine-tuning; without it QAT
            distills from the fp32 model's outputs on the calibration inputs.
    """

    calibration: Split
    evaluation: Split
    train: Split | None = None

    @property
    def labelled(self) -> bool:
        return self.evaluation.labels is not None


@dataclass(frozen=True, eq=False)
class ModelBundle:
    """A float model ready to deploy.

    Args:
        name: the model reference the user gave (``digits``, ``torchvision:mobilenet_v2``).
        module: the fp32 ``torch.nn.Module`` in eval mode.
        example_input: one input of batch size 1.
        dataset: calibration and evaluation data.
        digest: sha256 of the architecture, weights and data; part of every cache key.
    """

    name: str
    module: torch.nn.Module
    example_input: torch.Tensor
    dataset: Dataset
    digest: str


def module_digest(name: str, module: torch.nn.Module, example_input: torch.Tensor, *extra: Any) -> str:
    """sha256 over a module's class, parameters and buffers, the input shape and ``extra``."""
    import torch

    h = hashlib.sha256()
    h.update(name.encode())
    h.update(f"{type(module).__module__}.{type(module).__qualname__}".encode())
    h.update(str(tuple(example_input.shape)).encode())
    for key, tensor in sorted(module.state_dict().items()):
        h.update(key.encode())
        h.update(str(tensor.dtype).encode())
        h.update(str(tuple(tensor.shape)).encode())
        h.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    for item in extra:
        h.update(repr(item).encode())
    return h.hexdigest()
