"""Held-out models for the time-to-answer benchmark (``benchmarks/time_to_answer.py``), three int8 failure kinds.

They were chosen before the search changes they judge and are used only as held-out
models: tuning the search on them would make them another training set.

Each is a real architecture (torchvision, Hugging Face ``transformers``) built from its
configuration with seeded random weights (nothing downloaded). Its BatchNorm statistics,
if any, are re-estimated on seeded data, and its Dataset's labels are the fp32 model's
own top-1 on that data, so ``accuracy`` is agreement with fp32 (fp32 scores 1.0) and
the accuracy-drop constraint measures what int8 costs. None carries the search
benchmark's planted outlier channels (``heldout_common.train_with_outliers``); each
failure kind is its function's docstring. Loadable as ``benchmarks/tta_models.py:NAME``;
``MODELS`` maps each name to its function.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from nnsweep.models import Dataset, Split

__all__ = [
    "FAILURE",
    "MODELS",
    "depthwise_model",
    "tta_depthwise",
    "tta_layernorm",
    "tta_slow_int8",
    "vit_model",
]

SEED = 0
CALIBRATION, EVALUATION = 256, 512
Bundle = tuple[nn.Module, torch.Tensor, Dataset]


def _inputs(n: int, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """Seeded smooth images: low-resolution noise upsampled, so neighbouring pixels correlate as in photos."""
    g = torch.Generator().manual_seed(seed)
    low = torch.randn(n, shape[0], max(2, shape[1] // 4), max(2, shape[2] // 4), generator=g)
    return nn.functional.interpolate(low, size=shape[1:], mode="bilinear", align_corners=False)


@torch.no_grad()
def _reestimate_bn(model: nn.Module, x: torch.Tensor) -> None:
    """BatchNorm running statistics from ``x`` (cumulative average), then eval mode."""
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None
    model.train()
    for batch in x.split(64):
        model(batch)
    model.eval()


@torch.no_grad()
def _bundle(model: nn.Module, shape: tuple[int, ...]) -> Bundle:
    """The model in eval mode, an example input and a Dataset labelled by the fp32 model itself."""
    model.eval()
    calib = _inputs(CALIBRATION, shape, SEED + 1)
    evals = _inputs(EVALUATION, shape, SEED + 2)

    def labels(x: torch.Tensor) -> np.ndarray:
        out = torch.cat([_logits(model(b)) for b in x.split(64)])
        return out.argmax(1).numpy().astype(np.int64)

    data = Dataset(
        train=None,
        calibration=Split(calib.numpy(), labels(calib)),
        evaluation=Split(evals.numpy(), labels(evals)),
    )
    return model, evals[:1].clone(), data


def _logits(out: object) -> torch.Tensor:
    return out if isinstance(out, torch.Tensor) else out.logits  # type: ignore[attr-defined]


SPREAD_DECADES = 4.0  # tta_depthwise: the depthwise channels' scales span this many powers of ten
LN_OUTLIER = 300.0  # tta_layernorm: the LayerNorm scale of the outlier dimensions (1 elsewhere)
QUERY_SCALE = 4.0  # tta_layernorm: the query projections' factor (sharper softmax)


def tta_depthwise() -> Bundle:
    """Failure kind: depthwise convolutions whose per-channel weight ranges differ wildly.

    torchvision's ``mobilenet_v3_small`` (10 classes, 64x64 inputs). In its blocks
    with ReLU and no squeeze-and-excitation (``features.2`` and ``features.3``), each
    depthwise BatchNorm's scale and shift of channel c are multiplied by a seeded
    factor s_c (log-uniform over ``SPREAD_DECADES`` powers of ten around 1) and the
    projection's input channel c is divided by s_c. ReLU is positively homogeneous, so
    fp32 is unchanged; once BatchNorm folds into the depthwise convolution its output
    channels' weights span those decades, so per-tensor int8 weights round most
    channels to zero. The activations between the depthwise and the projection carry
    the same spread, and every runtime quantizes activations per tensor, so per-channel
    weights alone do not save it either: keeping layers float does.
    """
    return depthwise_model(SPREAD_DECADES)


def depthwise_model(spread_decades: float) -> Bundle:
    """``tta_depthwise`` with its spread as a parameter (0: the plain mobilenet_v3_small)."""
    from torchvision.models import mobilenet_v3_small

    torch.manual_seed(SEED)
    model = mobilenet_v3_small(num_classes=10)
    shape = (3, 64, 64)
    _reestimate_bn(model, _inputs(512, shape, SEED))
    g = torch.Generator().manual_seed(SEED + 3)
    with torch.no_grad():
        for index in (2, 3):
            block = model.features[index].block  # type: ignore[index,union-attr]
            dw_bn, project = block[1][1], block[2][0]
            channels = dw_bn.num_features
            s = torch.pow(10.0, (torch.rand(channels, generator=g) - 0.5) * spread_decades)
            dw_bn.weight.mul_(s)
            dw_bn.bias.mul_(s)
            project.weight.div_(s.view(1, -1, 1, 1))
    return _bundle(model, shape)


def tta_layernorm() -> Bundle:
    """Failure kind: LayerNorm outputs and the residual stream with a few huge dimensions; peaked softmax.

    A small ViT from ``transformers.ViTConfig`` (4 layers, width 64, 4 heads, 32x32
    inputs in 8x8 patches, 10 classes), Hugging Face's own initialisation. As in trained
    transformers, a few hidden dimensions (seeded, 2 of 64) have LayerNorm scales far
    above the others (``LN_OUTLIER``) in every LayerNorm, so each LayerNorm output, and
    through the attention and MLP the residual stream, holds two dimensions far larger
    than the rest; the query projections are scaled by ``QUERY_SCALE``, which sharpens
    the softmax. A per-tensor int8 scale over such a tensor leaves the ordinary
    dimensions a few levels, whichever the weights' granularity.
    """
    return vit_model(LN_OUTLIER, QUERY_SCALE)


def vit_model(ln_outlier: float, query_scale: float) -> Bundle:
    """``tta_layernorm`` with its two factors as parameters (1, 1: the plain ViT)."""
    import transformers as hf

    torch.manual_seed(SEED)
    config = hf.ViTConfig(
        image_size=32,
        patch_size=8,
        num_channels=3,
        hidden_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=128,
        num_labels=10,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = hf.ViTForImageClassification(config)
    g = torch.Generator().manual_seed(SEED + 4)
    outliers = torch.randperm(config.hidden_size, generator=g)[:2]
    with torch.no_grad():
        for sub in model.modules():
            if isinstance(sub, nn.LayerNorm):
                sub.weight[outliers] = ln_outlier
        for layer in model.vit.layers:
            layer.attention.q_proj.weight.mul_(query_scale)
    return _bundle(_Logits(model), (3, 32, 32))


def tta_slow_int8() -> Bundle:
    """Failure kind: a runtime whose int8 kernels are slower than its fp32.

    torchvision's ``resnet18`` (10 classes, 64x64 inputs). ONNX Runtime's dynamic int8
    turns its convolutions into ``ConvInteger`` with the activations quantized at run
    time; on an x86 CPU those kernels are slower than its fp32 convolutions, so the mode
    a user picks for speed loses time (measured with ``nnsweep bench``:
    benchmarks/results/time_to_answer.md). Accuracy is not what fails here.
    """
    from torchvision.models import resnet18

    torch.manual_seed(SEED)
    model = resnet18(num_classes=10)
    shape = (3, 64, 64)
    _reestimate_bn(model, _inputs(512, shape, SEED))
    return _bundle(model, shape)


class _Logits(nn.Module):
    """A Hugging Face classifier called with pixels alone, returning only its logits."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.inner(pixel_values=pixel_values).logits


MODELS: dict[str, Callable[[], Bundle]] = {
    "tta_depthwise": tta_depthwise,
    "tta_layernorm": tta_layernorm,
    "tta_slow_int8": tta_slow_int8,
}
FAILURE: dict[str, str] = {
    "tta_depthwise": "depthwise per-channel weight ranges (per-tensor int8 weights)",
    "tta_layernorm": "LayerNorm / residual-stream outlier dimensions, peaked softmax (int8 activations)",
    "tta_slow_int8": "ONNX Runtime dynamic int8 slower than fp32 (latency)",
}
