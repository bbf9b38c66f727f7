"""The forms in which training code hands a model over, probed on 2026-11-29 (benchmarks/results/coverage.md,
"The forms a model comes in"), loadable as ``benchmarks/probe_forms.py:NAME`` by
``nnsweep bench --model``.

One small CNN (convolution, BatchNorm, a strided convolution, a linear head; seeded random
weights), returned as training and serving code leaves it: compiled with ``torch.compile``
(the model, or a submodule inside it), exported with ``torch.export`` (the program, or its
``.module()``), cast to float16, pruned with ``torch.nn.utils.prune``, with the hook-based
``weight_norm`` or ``spectral_norm``, and with a forward hook that scales a layer's output.

Probed later (benchmarks/results/coverage.md, "More forms, and the outputs a model returns"): wrapped in
``nn.DataParallel``, with channels-last weights, already quantized (``quantize_dynamic``,
QAT-prepared, torchao), built on the meta device, with lazy layers, and returning its
outputs as a named tuple, a list or nested containers.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import prune


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.c2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn(self.c1(x)))
        x = F.relu(self.c2(x))
        return self.fc(x.mean((2, 3)))


def _net() -> Net:
    torch.manual_seed(0)
    return Net().eval()


def _example() -> torch.Tensor:
    return torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(1))


def plain() -> tuple[nn.Module, torch.Tensor]:
    return _net(), _example()


def compiled() -> tuple[nn.Module, torch.Tensor]:
    return torch.compile(_net()), _example()  # type: ignore[return-value]


def compiled_inside() -> tuple[nn.Module, torch.Tensor]:
    net = _net()
    net.c2 = torch.compile(net.c2)  # type: ignore[assignment]
    return net, _example()


def exported() -> tuple[object, torch.Tensor]:
    return torch.export.export(_net(), (_example(),)), _example()


def exported_module() -> tuple[nn.Module, torch.Tensor]:
    return torch.export.export(_net(), (_example(),)).module(), _example()


def half_weights() -> tuple[nn.Module, torch.Tensor]:
    return _net().half(), _example()


def pruned() -> tuple[nn.Module, torch.Tensor]:
    net = _net()
    for layer in (net.c1, net.c2, net.fc):
        prune.l1_unstructured(layer, "weight", 0.5)
    return net, _example()


def weight_normed() -> tuple[nn.Module, torch.Tensor]:
    net = _net()
    net.c1 = torch.nn.utils.weight_norm(net.c1)
    net.fc = torch.nn.utils.weight_norm(net.fc)
    return net, _example()


def spectral_normed() -> tuple[nn.Module, torch.Tensor]:
    net = _net()
    net.fc = torch.nn.utils.spectral_norm(net.fc)
    return net.eval(), _example()


def hooked() -> tuple[nn.Module, torch.Tensor]:
    net = _net()
    net.c2.register_forward_hook(lambda module, inputs, output: output * 0.5)
    return net, _example()


def data_parallel() -> tuple[nn.Module, torch.Tensor]:
    return nn.DataParallel(_net()), _example()


def channels_last() -> tuple[nn.Module, torch.Tensor]:
    return _net().to(memory_format=torch.channels_last), _example()  # type: ignore[call-overload]


def dynamic_quantized() -> tuple[nn.Module, torch.Tensor]:
    return torch.ao.quantization.quantize_dynamic(_net(), {nn.Linear}, dtype=torch.qint8), _example()


def qat_prepared() -> tuple[nn.Module, torch.Tensor]:
    net = _net().train()
    net.qconfig = torch.ao.quantization.get_default_qat_qconfig("x86")  # type: ignore[assignment]
    torch.ao.quantization.prepare_qat(net, inplace=True)
    return net.eval(), _example()


def torchao_quantized() -> tuple[nn.Module, torch.Tensor]:
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    net = _net()
    quantize_(net, Int8WeightOnlyConfig())
    return net, _example()


def on_meta() -> tuple[nn.Module, torch.Tensor]:
    with torch.device("meta"):
        net = Net()
    return net, _example()


class Lazy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.LazyConv2d(16, 3, padding=1)
        self.fc = nn.LazyLinear(10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(F.relu(self.c1(x)).mean((2, 3)))


def lazy() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return Lazy().eval(), _example()


class Outputs(NamedTuple):
    logits: torch.Tensor
    embedding: torch.Tensor


class _Features(Net):
    def features(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn(self.c1(x)))
        return F.relu(self.c2(x)).mean((2, 3))


class NamedOutputs(_Features):
    def forward(self, x: torch.Tensor) -> Outputs:  # type: ignore[override]
        features = self.features(x)
        return Outputs(self.fc(features), features)


class ListOutputs(_Features):
    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:  # type: ignore[override]
        features = self.features(x)
        return [self.fc(features), features]


class NestedOutputs(_Features):
    def forward(self, x: torch.Tensor) -> dict[str, object]:  # type: ignore[override]
        features = self.features(x)
        return {"head": (self.fc(features),), "embedding": [features]}


def named_outputs() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return NamedOutputs().eval(), _example()


def list_outputs() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return ListOutputs().eval(), _example()


def nested_outputs() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return NestedOutputs().eval(), _example()
