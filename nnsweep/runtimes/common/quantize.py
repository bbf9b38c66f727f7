"""Quantization pieces shared by the converters: calibration data and the QAT loop.

Each converter applies its own toolchain's quantizer (PT2E for ExecuTorch, FX for
torch, ``onnxruntime.quantization`` for ONNX Runtime); what they share is which
samples calibrate and how fake-quantized models are fine-tuned.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import torch
from torch import nn

from nnsweep.core.config import QuantConfig
from nnsweep.models import ModelBundle, flatten_outputs, reference_outputs

__all__ = ["QAT_LR", "calibration_samples", "qat_finetune"]

QAT_LR = 1e-4
_QAT_BATCH = 32
_SEED = 0


def calibration_samples(bundle: ModelBundle, quant: QuantConfig) -> Iterator[torch.Tensor]:
    """Batch-1 calibration inputs: ``calibration_batches`` x ``CALIBRATION_BATCH_SIZE``
    samples from the calibration split, repeating it when it is shorter."""
    data = bundle.dataset.calibration.inputs
    wanted = (quant.calibration_batches or 1) * QuantConfig.CALIBRATION_BATCH_SIZE
    for i in range(wanted):
        j = i % len(data)
        yield torch.from_numpy(data[j : j + 1].copy())


def qat_finetune(
    model: nn.Module,
    bundle: ModelBundle,
    quant: QuantConfig,
    forward: Callable[[torch.Tensor], torch.Tensor] | None = None,
    batch_size: int = 1,
) -> None:
    """Fine-tune a fake-quantized ``model`` in place for ``quant.qat_epochs`` epochs.

    With labelled training data the loss is cross-entropy on the scored output (the
    dataset's ``accuracy_output``); otherwise the model distills from the fp32 model's
    outputs on the calibration inputs (MSE over every output, side by side), so QAT
    also works for models that come without data, and for models with several outputs.

    Args:
        model: the prepared (fake-quantized) model; the caller switches train/eval
            mode as its toolchain requires.
        forward: how to call ``model`` (defaults to ``model(x)``).
        batch_size: 1 for graphs exported with a fixed batch of one.
    """
    forward = forward or model
    scored = bundle.dataset.accuracy_output

    def logits(x: torch.Tensor) -> torch.Tensor:  # the output top-1 is read from
        return flatten_outputs(forward(x))[scored]

    def rows(x: torch.Tensor) -> torch.Tensor:  # every output, one row per sample, as reference_outputs
        return torch.cat([leaf.reshape(len(x), -1).float() for leaf in flatten_outputs(forward(x))], dim=1)

    train = bundle.dataset.train
    if train is not None and train.labels is not None:
        x_all = torch.from_numpy(train.inputs)
        positions = bundle.positions[scored] if scored < len(bundle.positions) else 1  # a built-in model: 1
        y_all = torch.from_numpy(_targets(train.labels, positions))
        target_logits = None
    else:
        x_all = torch.from_numpy(bundle.dataset.calibration.inputs)
        # the fp32 outputs, one row per sample (one sample a call for a model of batch one)
        target_logits = torch.from_numpy(reference_outputs(bundle, bundle.dataset.calibration.inputs))
        y_all = None
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=QAT_LR * 10, momentum=0.9)
    gen = torch.Generator().manual_seed(_SEED)
    step = _QAT_BATCH if batch_size != 1 else 1
    for _ in range(quant.qat_epochs or 1):
        order = torch.randperm(len(x_all), generator=gen)
        for start in range(0, len(order), _QAT_BATCH):
            idx = order[start : start + _QAT_BATCH]
            opt.zero_grad()
            chunks = [x_all[idx[k : k + step]] for k in range(0, len(idx), step)]
            if y_all is not None:
                loss = nn.functional.cross_entropy(torch.cat([logits(c) for c in chunks]), y_all[idx])
            else:
                assert target_logits is not None
                loss = nn.functional.mse_loss(torch.cat([rows(c) for c in chunks]), target_logits[idx])
            loss.backward()
            opt.step()


def _targets(labels: np.ndarray, positions: int) -> np.ndarray:
    """Train labels as ``cross_entropy`` takes them: int64 (whole floats, int32 and bools
    failed every QAT conversion with "expected target dtype to be Long"), and a column of
    one label per sample (N, 1) for an output with one position as (N,) ("multi-target not
    supported"). Whole numbers in range: :func:`nnsweep.models._dataset_checks.check_labels`."""
    targets = np.asarray(labels, dtype=np.int64)
    if positions == 1 and targets.ndim == 2 and targets.shape[1] == 1:
        return targets[:, 0]
    return targets


def as_numpy_batches(samples: Iterator[torch.Tensor]) -> list[np.ndarray]:
    """Calibration samples as numpy arrays (for toolchains outside torch)."""
    return [s.numpy() for s in samples]
