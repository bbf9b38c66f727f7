"""Model files for ``benchmarks/float_fidelity.py``: structures the mixed-precision faults hid in.

Random weights and nnsweep's synthetic data for user models (nothing trained, nothing
downloaded): fidelity against the float model is what is measured, not accuracy. Each
is a model reference, e.g. ``nnsweep bench --model benchmarks/fidelity_models.py:unetish``.

    attn      patch embedding, two pre-norm attention blocks (nn.MultiheadAttention, GELU MLP), mean, head
    shuffle   grouped 1x1 convolutions, a channel shuffle (view/transpose), depthwise, concatenation
    dw1d      Conv1d: pointwise, dilated strided depthwise, hardswish, a residual add, max over time
    unetish   an encoder, one convolution applied twice, a transposed convolution, a skip concatenation
    gru       a linear projection, nn.GRU over the rows, head
    shared    three convolutions of which one is applied twice
    tconv     a strided convolution, then a transposed one
    twoheads  a trunk and two outputs: class logits and a sigmoid map
    encoder   a linear embedding, nn.TransformerEncoder (two layers, one op to torch.fx), mean, head

``benchmarks/float_fidelity.py`` also runs four torchvision classifiers by reference
(``torchvision:NAME``, loaded as nnsweep loads them for a user).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Attn(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.embed = nn.Conv2d(1, d, 4, stride=4)
        self.blocks = nn.ModuleList()
        for _ in range(2):
            self.blocks.append(
                nn.ModuleDict(
                    dict(
                        ln1=nn.LayerNorm(d),
                        attn=nn.MultiheadAttention(d, 4, batch_first=True),
                        ln2=nn.LayerNorm(d),
                        fc1=nn.Linear(d, 2 * d),
                        fc2=nn.Linear(2 * d, d),
                    )
                )
            )
        self.head = nn.Linear(d, 10)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)
        for b in self.blocks:
            h = b["ln1"](x)
            x = x + b["attn"](h, h, h, need_weights=False)[0]
            x = x + b["fc2"](F.gelu(b["fc1"](b["ln2"](x))))
        return self.head(x.mean(1))


def attn() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return Attn().eval(), torch.randn(1, 1, 16, 16)


class Shuffle(nn.Module):
    def __init__(self, c=32, g=4):
        super().__init__()
        self.g = g
        self.stem = nn.Conv2d(3, c, 3, stride=2, padding=1)
        self.g1 = nn.Conv2d(c, c, 1, groups=g)
        self.bn1 = nn.BatchNorm2d(c)
        self.dw = nn.Conv2d(c, c, 3, stride=2, padding=1, groups=c)
        self.bn2 = nn.BatchNorm2d(c)
        self.g2 = nn.Conv2d(c, c, 1, groups=g)
        self.head = nn.Linear(2 * c, 10)

    def forward(self, x):
        x = F.relu(self.stem(x))
        y = F.relu(self.bn1(self.g1(x)))
        n, c, h, w = y.shape
        y = y.view(n, self.g, c // self.g, h, w).transpose(1, 2).reshape(n, c, h, w)
        y = self.g2(self.bn2(self.dw(y)))
        z = F.avg_pool2d(x, 3, stride=2, padding=1)
        out = F.relu(torch.cat([y, z], 1))
        return self.head(out.mean((2, 3)))


def shuffle() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return Shuffle().eval(), torch.randn(1, 3, 32, 32)


class DW1d(nn.Module):
    def __init__(self, c=24):
        super().__init__()
        self.pw0 = nn.Conv1d(16, c, 1)
        self.dw = nn.Conv1d(c, c, 5, stride=2, padding=4, dilation=2, groups=c)
        self.pw = nn.Conv1d(c, 2 * c, 1)
        self.dw2 = nn.Conv1d(2 * c, 2 * c, 3, padding=1, groups=2 * c, bias=False)
        self.head = nn.Linear(2 * c, 10)

    def forward(self, x):
        x = F.hardswish(self.pw0(x))
        x = F.hardswish(self.pw(self.dw(x)))
        x = x + self.dw2(x)
        return self.head(x.amax(-1))


def dw1d() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return DW1d().eval(), torch.randn(1, 16, 64)


class UNetish(nn.Module):
    def __init__(self, c=16):
        super().__init__()
        self.enc = nn.Conv2d(3, c, 3, padding=1)
        self.down = nn.Conv2d(c, 2 * c, 3, stride=2, padding=1)
        self.mid = nn.Conv2d(2 * c, 2 * c, 3, padding=1)  # applied twice (shared)
        self.up = nn.ConvTranspose2d(2 * c, c, 2, stride=2)
        self.fuse = nn.Conv2d(2 * c, c, 1)
        self.head = nn.Linear(c, 10)

    def forward(self, x):
        e = F.relu(self.enc(x))
        d = F.relu(self.down(e))
        d = F.relu(self.mid(d))
        d = F.relu(self.mid(d))
        u = self.up(d)
        f = F.relu(self.fuse(torch.cat([u, e], 1)))
        return self.head(f.mean((2, 3)))


def unetish() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return UNetish().eval(), torch.randn(1, 3, 32, 32)


class GRUNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 32)
        self.gru = nn.GRU(32, 32, batch_first=True)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        x = torch.tanh(self.proj(x.squeeze(1)))
        y, _ = self.gru(x)
        return self.head(y[:, -1])


def gru() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return GRUNet().eval(), torch.randn(1, 1, 16, 16)


class Tconv(nn.Module):
    def __init__(self, c=16):
        super().__init__()
        self.enc = nn.Conv2d(3, c, 3, stride=2, padding=1)
        self.up = nn.ConvTranspose2d(c, c, 2, stride=2)
        self.head = nn.Linear(c, 10)

    def forward(self, x):
        return self.head(F.relu(self.up(F.relu(self.enc(x)))).mean((2, 3)))


def tconv() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return Tconv().eval(), torch.randn(1, 3, 32, 32)


class Shared(nn.Module):
    def __init__(self, c=16):
        super().__init__()
        self.enc = nn.Conv2d(3, c, 3, padding=1)
        self.mid = nn.Conv2d(c, c, 3, padding=1)
        self.head = nn.Linear(c, 10)

    def forward(self, x):
        x = F.relu(self.enc(x))
        x = F.relu(self.mid(x))
        x = F.relu(self.mid(x))
        return self.head(x.mean((2, 3)))


def shared() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return Shared().eval(), torch.randn(1, 3, 32, 32)


class TwoHeads(nn.Module):
    def __init__(self, c=16):
        super().__init__()
        self.trunk = nn.Conv2d(3, c, 3, stride=2, padding=1)
        self.cls = nn.Linear(c, 10)
        self.box = nn.Conv2d(c, 4, 1)

    def forward(self, x):
        x = F.relu(self.trunk(x))
        return self.cls(x.mean((2, 3))), torch.sigmoid(self.box(x))


def twoheads() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return TwoHeads().eval(), torch.randn(1, 3, 32, 32)


class Encoder(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.embed = nn.Linear(16, d)
        layer = nn.TransformerEncoderLayer(d, 4, 2 * d, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(d, 5)

    def forward(self, x):
        return self.head(self.encoder(self.embed(x)).mean(1))


def encoder() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return Encoder().eval(), torch.randn(1, 10, 16)
