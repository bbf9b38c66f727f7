"""Which linear layers an ``int4_weight`` conversion takes to 4 bits, and what it tells the user.

4-bit weights are quantized in groups of ``quant.group_size`` input features, each with its
own scale. A linear layer whose input features the group size does not divide stays float
(ExecuTorch's own 8da4w recipe filters layers so, and keeping the runtimes alike keeps
their accuracies comparable); the conversion names each such layer in its notes. A model
with no ``nn.Linear``, or none that the group size divides, is refused before converting:
its artifact would be the fp32 model under another name.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from torch import nn

from nnsweep.core.errors import ConversionError

__all__ = ["Int4Plan", "plan", "quantize_8da4w"]


@dataclass(frozen=True)
class Int4Plan:
    """The linear layers of a model as an ``int4_weight`` conversion takes them.

    Args:
        group_size: input features per weight scale.
        four_bit: module paths of the layers quantized to 4 bits.
        kept_float: ``(module path, in_features)`` of the layers the group size does not divide.
        left_float: ``(module path, why)`` of the layers a runtime's converter cannot take.
    """

    group_size: int
    four_bit: tuple[str, ...]
    kept_float: tuple[tuple[str, int], ...]
    left_float: tuple[tuple[str, str], ...] = ()

    def without(self, paths: tuple[str, ...], why: str) -> Int4Plan:
        """This plan with the 4-bit layers of ``paths`` left float for ``why``."""
        gone = tuple(p for p in self.four_bit if p in paths)
        return dataclasses.replace(
            self,
            four_bit=tuple(p for p in self.four_bit if p not in paths),
            left_float=(*self.left_float, *((p, why) for p in gone)),
        )

    def takes(self, path: str) -> bool:
        """Whether the layer at ``path`` is quantized to 4 bits."""
        return path in self.four_bit

    def notes(self) -> tuple[str, ...]:
        """What the partition report says of the 4-bit path: how many linear layers took it,
        and each one that stayed float with why."""
        total = len(self.four_bit) + len(self.kept_float) + len(self.left_float)
        lines = [f"int4_weight: {len(self.four_bit)} of {total} linear layers 4-bit (group size {self.group_size})"]
        lines.extend(
            f"int4_weight: {path} stays float: in_features {features} is not a multiple of group size {self.group_size}"
            for path, features in self.kept_float
        )
        lines.extend(f"int4_weight: {path} stays float: {why}" for path, why in self.left_float)
        return tuple(lines)


def plan(module: nn.Module, group_size: int, float_layers: tuple[str, ...] = ()) -> Int4Plan:
    """The :class:`Int4Plan` of ``module`` at ``group_size``, the linear layers of
    ``float_layers`` (``quant.float_layers``: the most sensitive, by the int4 ranking) left float.

    Raises:
        ConversionError: ``module`` has no ``nn.Linear``, or the group size divides the input
            features of none of them (the message names the smallest).
    """
    linears = [(path, m.in_features) for path, m in module.named_modules() if isinstance(m, nn.Linear)]
    if not linears:
        raise ConversionError(
            "int4_weight quantizes the weights of nn.Linear layers and this model has none "
            "(convolutions and other layers stay float): use an int8 mode"
        )
    four_bit = tuple(path for path, features in linears if features % group_size == 0)
    kept = tuple((path, features) for path, features in linears if features % group_size)
    if not four_bit:
        path, features = min(kept, key=lambda item: item[1])
        raise ConversionError(
            f"int4_weight with group size {group_size}: no linear layer's in_features is a multiple of it "
            f"(e.g. {path or 'the model'}: {features}); take a smaller group size"
        )
    return Int4Plan(group_size=group_size, four_bit=four_bit, kept_float=kept).without(float_layers, _KEPT)


_KEPT = "quant.float_layers keeps it float"


def quantize_8da4w(model: nn.Module, layers: Int4Plan) -> nn.Module:
    """Quantize, in place, the linear layers of ``layers`` to torchao's 8da4w: int4 weights
    symmetric in groups of ``layers.group_size`` input features, activations int8
    asymmetric per token at run time (``Int8DynamicActivationIntxWeightConfig``, the
    configuration ExecuTorch's own LLM export uses). Runs in eager PyTorch too, which is how
    the int4 ranking scores a layer (:mod:`nnsweep.sensitivity.int4`)."""
    import torch
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerGroup

    config = Int8DynamicActivationIntxWeightConfig(
        weight_dtype=torch.int4,  # type: ignore[attr-defined]  # torch >= 2.6 has it; its stubs do not
        weight_granularity=PerGroup(layers.group_size),
    )
    with torch.no_grad():
        quantize_(model, config, filter_fn=lambda module, path: isinstance(module, nn.Linear) and layers.takes(path))
    return model
