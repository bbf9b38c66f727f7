"""User-style models for benchmarks/zoo.py, loadable as ``benchmarks/zoo_models.py:NAME``.

Each function returns ``(module, example_input)`` the way a user's model file would: no
data, so ``nnsweep bench`` evaluates fidelity against the fp32 model on seeded inputs.
They are the shapes that broke conversions before: attention layers (torch dynamic int8),
a constant multiplier registered as an expanded buffer (a stride-0 tensor ExecuTorch
refused), a model with two outputs, a text classifier that takes token ids, and ``bert``: Hugging
Face's ``BertForSequenceClassification`` from a small ``BertConfig`` (seeded random weights,
nothing downloaded), wrapped to return its logits as a tensor. Opt-in
(``--models convnext,gru``): a two-stage ConvNeXt (torchvision's ``LayerNorm2d``, which
torch's static int8 failed on), a GRU classifier called as ``gru(x)`` (which
litert-torch's static int8 quantizer cannot annotate, and says so), and a small U-Net
(``unet``: skip concatenations, a nearest upsampling and a transposed convolution, which
Arm NN 20.08 refused until its bias became an ``ADD``), and ``mlp_block``: two pre-norm
MLP blocks of a transformer over ``(1, 16, 256)`` tokens, the linear layers that
``int4_weight`` quantizes (every input width a multiple of 256).
"""

from __future__ import annotations

import torch
from torch import nn

SEQ, D_MODEL = 16, 32
VOCAB = 1000


class _Encoder(nn.Module):
    """A 2-layer transformer encoder over a ``(1, SEQ, D_MODEL)`` sequence, then a linear head."""

    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(D_MODEL, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(D_MODEL, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x).mean(dim=1))


class _TextClassifier(nn.Module):
    """Token ids ``(1, SEQ)`` int64 -> an ``nn.Embedding`` of ``VOCAB`` with learned positions,
    one transformer encoder layer, the mean over tokens, a linear head (4 classes)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D_MODEL)
        self.position = nn.Parameter(torch.randn(1, SEQ, D_MODEL) * 0.1)
        self.layer = nn.TransformerEncoderLayer(D_MODEL, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
        self.head = nn.Linear(D_MODEL, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.layer(self.embed(ids) + self.position).mean(dim=1))


class _BufferMLP(nn.Module):
    """An MLP whose hidden layer, seen as 4 groups of 32, is scaled and shifted by registered
    buffers made with ``expand``: one stored row of 32 seen 4 times (stride 0 along the
    groups); the shift is a non-persistent buffer (not in the state dict)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(64, 128)
        self.fc2 = nn.Linear(128, 10)
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 32).expand(4, 32))
        self.register_buffer("shift", torch.linspace(-0.1, 0.1, 32).expand(4, 32), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.fc1(x)).view(-1, 4, 32) * self.scale + self.shift
        return self.fc2(hidden.flatten(1))


class _TwoHeads(nn.Module):
    """A small convolutional trunk with two outputs (class logits and a 4-value box)."""

    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.classes = nn.Linear(32, 10)
        self.box = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.trunk(x)
        return self.classes(features), self.box(features)


class _BertLogits(nn.Module):
    """Token ids ``(1, SEQ)`` -> a Hugging Face BERT classifier's logits (3 classes), as a
    tensor rather than its ``SequenceClassifierOutput``."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import BertConfig, BertForSequenceClassification

        config = BertConfig(
            vocab_size=VOCAB,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=128,
            max_position_embeddings=64,
            num_labels=3,
        )
        self.bert = BertForSequenceClassification(config)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.bert(input_ids=ids).logits


class _Gru(nn.Module):
    """A GRU over a ``(1, SEQ, D_MODEL)`` sequence, called without its initial state, then a head."""

    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(D_MODEL, 32, batch_first=True)
        self.head = nn.Linear(32, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(x)
        return self.head(out[:, -1])


class _UNet(nn.Module):
    """Two levels down (max-pool), back up by a nearest upsampling and by a transposed
    convolution, each joined to its skip by a concatenation; a two-class mask out."""

    def __init__(self) -> None:
        super().__init__()

        def block(cin: int, cout: int) -> nn.Sequential:
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU())

        self.e1, self.e2, self.e3 = block(3, 16), block(16, 32), block(32, 64)
        self.up = nn.ConvTranspose2d(32, 32, 2, stride=2)
        self.d2, self.d1 = block(64 + 32, 32), block(32 + 16, 16)
        self.head = nn.Conv2d(16, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.e1(x)
        b = self.e2(nn.functional.max_pool2d(a, 2))
        c = self.e3(nn.functional.max_pool2d(b, 2))
        d = self.d2(torch.cat([nn.functional.interpolate(c, scale_factor=2.0, mode="nearest"), b], 1))
        return self.head(self.d1(torch.cat([self.up(d), a], 1)))


class _MLPBlocks(nn.Module):
    """Two pre-norm transformer MLP blocks (256 -> 1024 -> 256, GELU, residual) over 16
    tokens, the mean over tokens, a linear head (10 classes)."""

    def __init__(self, width: int = 256, blocks: int = 2) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(width), nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
            for _ in range(blocks)
        )
        self.head = nn.Linear(width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + block(x)
        return self.head(x.mean(dim=1))


def mlp_block() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return _MLPBlocks().eval(), torch.randn(1, SEQ, 256)


def encoder() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return _Encoder().eval(), torch.randn(1, SEQ, D_MODEL)


def buffer_mlp() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return _BufferMLP().eval(), torch.randn(1, 64)


def two_heads() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return _TwoHeads().eval(), torch.randn(1, 3, 32, 32)


def text_classifier() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return _TextClassifier().eval(), torch.randint(0, VOCAB, (1, SEQ))


def bert() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return _BertLogits().eval(), torch.randint(0, VOCAB, (1, SEQ))


def convnext() -> tuple[nn.Module, torch.Tensor]:
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt

    torch.manual_seed(0)
    net = ConvNeXt([CNBlockConfig(16, 32, 1), CNBlockConfig(32, None, 1)], num_classes=10)
    return net.eval(), torch.randn(1, 3, 32, 32)


def gru() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return _Gru().eval(), torch.randn(1, SEQ, D_MODEL)


def unet() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    net = _UNet()
    for m in net.modules():  # statistics a trained net would have, not the identity
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    return net.eval(), torch.randn(1, 3, 32, 32)
