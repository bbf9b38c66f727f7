"""Models probed for coverage (benchmarks/results/coverage.md, docs/explanation/conversion.md
"Half precision"), loadable as ``benchmarks/probe_models.py:NAME`` by ``nnsweep bench --model``.

Each function returns ``(module, example_input)`` with seeded random weights and no data, as
a user's model file would: ``nnsweep bench`` then measures fidelity against the fp32 model
on seeded inputs. They are written as research and application code writes them, not for
nnsweep: attention scaled by its runtime shape and written with ``einsum``; an L2-normalised
embedding net with reflect padding; a classifier returning probabilities and their
``argmax``; a ``cumsum`` gate; a weight-normalised dilated ``Conv1d`` stack; a Swin-style
shifted-window block; a MobileViT-style ``unfold``/``fold`` block; learned top-k token
selection; an SSD-style detector head; an ``nn.EmbeddingBag`` tower; an audio decoder
(``ConvTranspose1d``), prototypes by ``cdist``, a spatial transformer (``grid_sample``), a
bicubic upsampler, max and logsumexp pooling; a decoder block on
``F.scaled_dot_product_attention(is_causal=True)``, a ``Conv3d`` video classifier, a
GroupNorm/InstanceNorm U-Net with ``align_corners=True`` upsampling, Mish with dilated
convolutions and ``AdaptiveAvgPool2d((3, 3))``, a conformer convolution module (GLU,
depthwise ``Conv1d``, ``chunk``), a stem read by a BatchNorm and a ``cat``, Swin's patch
merging (``F.pad`` of an int8 sum), torchvision's Swin V2 window attention, an explicit
"same" pad read beside a residual add; and three sequence
models that build float32 on purpose (sinusoidal positions, rotary positions with a
float32 RMS norm, PyTorch's own float32 causal mask), for fp16. ``text_mask`` takes two
inputs, which nnsweep refuses (exit 2).
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.parametrizations import weight_norm


def _seeded(model_type: type[nn.Module], *shape: int) -> tuple[nn.Module, torch.Tensor]:
    """``model_type()`` in eval mode with seed 0, and a seeded random example of ``shape``."""
    torch.manual_seed(0)
    return model_type().eval(), torch.randn(*shape)


class EinsumAttention(torch.nn.Module):
    """Multi-head self-attention written with einsum, as many research codebases do."""

    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.inp = torch.nn.Linear(8, dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.head = torch.nn.Linear(dim, 5)

    def forward(self, x):
        h = self.inp(x)
        b, n, d = h.shape
        q, k, v = self.qkv(h).reshape(b, n, 3, self.heads, d // self.heads).unbind(2)
        att = torch.einsum("bqhd,bkhd->bhqk", q, k) * (d // self.heads) ** -0.5
        out = torch.einsum("bhqk,bkhd->bqhd", att.softmax(-1), v).reshape(b, n, d)
        return self.head(self.proj(out).mean(1))


class Embedder(torch.nn.Module):
    """A face/keyword embedding net: convs, global pooling, an L2-normalised 16-d vector."""

    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1, padding_mode="reflect"),
            torch.nn.ReLU6(),
            torch.nn.Conv2d(16, 32, 3, stride=2, padding=1),
            torch.nn.BatchNorm2d(32),
            torch.nn.ReLU6(),
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
            torch.nn.Linear(32, 16),
        )

    def forward(self, x):
        return F.normalize(self.body(x), dim=-1)


class ArgmaxHead(torch.nn.Module):
    """A classifier deployed to return its class ids and their probabilities."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.Hardswish(), torch.nn.Linear(64, 7))

    def forward(self, x):
        probs = self.net(x).softmax(-1)
        return probs, probs.argmax(-1)


class CumsumGate(torch.nn.Module):
    """A sequence gate: cumulative sums, clamp, sigmoid gating, a 1-d depthwise conv."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(6, 24)
        self.dw = torch.nn.Conv1d(24, 24, 5, padding=2, groups=24)
        self.out = torch.nn.Linear(24, 3)

    def forward(self, x):
        h = self.inp(x)
        g = torch.sigmoid(torch.cumsum(h, dim=1).clamp(-6, 6))
        h = self.dw((h * g).transpose(1, 2)).transpose(1, 2)
        return self.out(F.silu(h).amax(1))


einsum = functools.partial(_seeded, EinsumAttention, 1, 12, 8)
embedder = functools.partial(_seeded, Embedder, 1, 3, 24, 24)
argmax = functools.partial(_seeded, ArgmaxHead, 1, 20)
cumsum = functools.partial(_seeded, CumsumGate, 1, 20, 6)


class WeightNormAudio(torch.nn.Module):
    """A HiFi-GAN/WaveNet-style stack: weight-normalised dilated Conv1d with LeakyReLU residuals."""

    def __init__(self, ch: int = 16) -> None:
        super().__init__()
        self.pre = weight_norm(torch.nn.Conv1d(1, ch, 7, padding=3))
        self.blocks = torch.nn.ModuleList(
            [weight_norm(torch.nn.Conv1d(ch, ch, 3, padding=d, dilation=d)) for d in (1, 3, 5)]
        )
        self.post = weight_norm(torch.nn.Conv1d(ch, 1, 7, padding=3))

    def forward(self, x):
        h = self.pre(x)
        for conv in self.blocks:
            h = h + conv(F.leaky_relu(h, 0.1))
        return torch.tanh(self.post(F.leaky_relu(h, 0.1)))


class ShiftedWindows(torch.nn.Module):
    """A Swin-style block: cyclic shift with torch.roll, window partition by view/permute, window attention."""

    def __init__(self, dim: int = 16, window: int = 4) -> None:
        super().__init__()
        self.window = window
        self.embed = torch.nn.Conv2d(3, dim, 2, stride=2)
        self.norm = torch.nn.LayerNorm(dim)
        self.attn = torch.nn.MultiheadAttention(dim, 2, batch_first=True)
        self.head = torch.nn.Linear(dim, 6)

    def forward(self, x):
        h = self.embed(x).permute(0, 2, 3, 1)  # B, H, W, C
        b, hh, ww, c = h.shape
        w = self.window
        s = torch.roll(self.norm(h), shifts=(-w // 2, -w // 2), dims=(1, 2))
        win = s.view(b, hh // w, w, ww // w, w, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, w * w, c)
        out, _ = self.attn(win, win, win, need_weights=False)
        out = out.view(b, hh // w, ww // w, w, w, c).permute(0, 1, 3, 2, 4, 5).reshape(b, hh, ww, c)
        h = h + torch.roll(out, shifts=(w // 2, w // 2), dims=(1, 2))
        return self.head(h.mean(dim=(1, 2)))


class Unfolded(torch.nn.Module):
    """MobileViT-style: local conv, then patches by F.unfold, a transformer over patches, F.fold back."""

    def __init__(self, ch: int = 8, patch: int = 2) -> None:
        super().__init__()
        self.patch = patch
        self.local = torch.nn.Conv2d(3, ch, 3, padding=1)
        self.mix = torch.nn.Linear(ch * patch * patch, ch * patch * patch)
        self.fuse = torch.nn.Conv2d(2 * ch, ch, 1)
        self.head = torch.nn.Linear(ch, 5)

    def forward(self, x):
        h = F.silu(self.local(x))
        size = h.shape[-2:]
        patches = F.unfold(h, self.patch, stride=self.patch)  # B, C*p*p, L
        mixed = self.mix(patches.transpose(1, 2)).transpose(1, 2)
        back = F.fold(mixed, size, self.patch, stride=self.patch)
        return self.head(self.fuse(torch.cat([h, back], 1)).mean(dim=(2, 3)))


class Gathered(torch.nn.Module):
    """Learned top-k token selection: scores, topk, gather, flip, index_select."""

    def __init__(self, dim: int = 12) -> None:
        super().__init__()
        self.score = torch.nn.Linear(dim, 1)
        self.proj = torch.nn.Linear(dim, dim)
        self.head = torch.nn.Linear(dim, 4)
        self.register_buffer("order", torch.arange(3, -1, -1))

    def forward(self, x):
        s = self.score(x).squeeze(-1)
        idx = s.topk(4, dim=1).indices
        picked = torch.gather(x, 1, idx.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
        picked = torch.index_select(torch.flip(picked, dims=[1]), 1, self.order)
        return self.head(F.gelu(self.proj(picked), approximate="tanh").mean(1))


weightnorm = functools.partial(_seeded, WeightNormAudio, 1, 1, 64)
swin = functools.partial(_seeded, ShiftedWindows, 1, 3, 16, 16)
unfold = functools.partial(_seeded, Unfolded, 1, 3, 8, 8)
gathered = functools.partial(_seeded, Gathered, 1, 10, 12)


class TextWithMask(torch.nn.Module):
    """Token ids and an attention mask, as a BERT-style classifier takes them."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(100, 16)
        self.head = torch.nn.Linear(16, 2)

    def forward(self, ids, mask):
        h = self.emb(ids) * mask.unsqueeze(-1)
        return self.head(h.sum(1) / mask.sum(1, keepdim=True))


class Detector(torch.nn.Module):
    """An SSD-style head: per-anchor class scores (A, C) and decoded boxes (A, 4)."""

    def __init__(self, classes: int = 5) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, stride=2, padding=1),
            torch.nn.ReLU(),
            torch.nn.Conv2d(16, 16, 3, stride=2, padding=1),
            torch.nn.ReLU(),
        )
        self.cls = torch.nn.Conv2d(16, 2 * classes, 1)
        self.box = torch.nn.Conv2d(16, 2 * 4, 1)
        self.classes = classes
        self.register_buffer("anchors", torch.rand(2 * 8 * 8, 4))

    def forward(self, x):
        f = self.body(x)
        scores = self.cls(f).permute(0, 2, 3, 1).reshape(x.shape[0], -1, self.classes).sigmoid()
        deltas = self.box(f).permute(0, 2, 3, 1).reshape(x.shape[0], -1, 4)
        xy = self.anchors[:, :2] + deltas[..., :2] * self.anchors[:, 2:]
        wh = self.anchors[:, 2:] * torch.exp(deltas[..., 2:].clamp(max=4))
        return scores, torch.cat([xy - wh / 2, xy + wh / 2], -1)


class EmbBag(torch.nn.Module):
    """A recommender tower: EmbeddingBag (mean) over a fixed number of ids per sample, an MLP."""

    def __init__(self) -> None:
        super().__init__()
        self.bag = torch.nn.EmbeddingBag(500, 16, mode="mean")
        self.mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))

    def forward(self, ids):
        return torch.sigmoid(self.mlp(self.bag(ids)))


def text_mask():
    torch.manual_seed(0)
    return TextWithMask().eval(), (torch.randint(0, 100, (1, 12)), torch.ones(1, 12))


detector = functools.partial(_seeded, Detector, 1, 3, 32, 32)


def embbag():
    torch.manual_seed(0)
    return EmbBag().eval(), torch.randint(0, 500, (1, 6))


class Sinus(torch.nn.Module):
    """A token-free sequence model that builds its sinusoidal positions in forward with an explicit float32 dtype."""

    def __init__(self, dim: int = 32) -> None:
        super().__init__()
        self.dim = dim
        self.inp = torch.nn.Linear(8, dim)
        self.mix = torch.nn.Linear(dim, dim)
        self.head = torch.nn.Linear(dim, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        pos = torch.arange(x.shape[1], dtype=torch.float32).unsqueeze(1)
        freq = torch.exp(torch.arange(0, self.dim, 2, dtype=torch.float32) * (-math.log(10000.0) / self.dim))
        pe = torch.cat([torch.sin(pos * freq), torch.cos(pos * freq)], dim=1)
        h = torch.relu(self.mix(h + pe))
        return self.head(h.mean(dim=1))


sinus = functools.partial(_seeded, Sinus, 1, 16, 8)


class Rope(torch.nn.Module):
    """Self-attention with rotary position embeddings, the angles computed in float32 as
    LLaMA-style code does (``torch.arange(n, dtype=torch.float32)``), an RMS norm in float32."""

    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.inp = torch.nn.Linear(8, dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim, bias=False)
        self.out = torch.nn.Linear(dim, dim, bias=False)
        self.norm_weight = torch.nn.Parameter(torch.ones(dim))
        self.head = torch.nn.Linear(dim, 4)
        half = dim // heads // 2
        self.register_buffer(
            "inv_freq", 1.0 / (10000 ** (torch.arange(half, dtype=torch.float32) / half)), persistent=False
        )

    def rms(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.to(torch.float32)
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.norm_weight * x32.to(x.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        h = self.inp(x)
        q, k, v = self.qkv(self.rms(h)).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        t = torch.arange(n, dtype=torch.float32)
        freqs = torch.outer(t, self.inv_freq.float())
        cos, sin = torch.cat([freqs, freqs], -1).cos(), torch.cat([freqs, freqs], -1).sin()

        def rotate(u: torch.Tensor) -> torch.Tensor:
            u1, u2 = u.chunk(2, -1)
            return u * cos + torch.cat([-u2, u1], -1) * sin

        a = torch.nn.functional.scaled_dot_product_attention(rotate(q), rotate(k), v, is_causal=True)
        h = h + self.out(a.transpose(1, 2).reshape(b, n, -1))
        return self.head(h.mean(1))


rope = functools.partial(_seeded, Rope, 1, 16, 8)


class Causal(torch.nn.Module):
    """A causal transformer encoder over a float sequence, masked with PyTorch's own
    ``generate_square_subsequent_mask`` (float32 whatever the model's dtype), learned positions."""

    def __init__(self, dim: int = 32, steps: int = 16) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(8, dim)
        self.pos = torch.nn.Parameter(torch.randn(steps, dim) * 0.02)
        layer = torch.nn.TransformerEncoderLayer(dim, 4, 64, dropout=0.0, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = torch.nn.Linear(dim, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = torch.nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        h = self.encoder(self.inp(x) + self.pos, mask=mask, is_causal=True)
        return self.head(h[:, -1])


causal = functools.partial(_seeded, Causal, 1, 16, 8)


class AudioDecoder(nn.Module):
    """A waveform decoder: ConvTranspose1d upsampling (stride 4), ELU, a Softplus gain."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Conv1d(8, 16, 3, padding=1)
        self.up = nn.ConvTranspose1d(16, 8, 8, stride=4, padding=2)
        self.out = nn.Conv1d(8, 1, 5, padding=2)

    def forward(self, x):
        h = F.elu(self.inp(x))
        return self.out(F.elu(self.up(h))) * F.softplus(h.mean(dim=(1, 2), keepdim=True))


class Prototypes(nn.Module):
    """Few-shot style: an embedding, distances to learned prototypes with cdist, -distance as logits."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1),
            nn.ReLU(),
            nn.PixelUnshuffle(2),
            nn.Conv2d(32, 16, 3),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.protos = nn.Parameter(torch.randn(6, 16))

    def forward(self, x):
        return -torch.cdist(self.body(x), self.protos)


class SpatialTransformer(nn.Module):
    """A spatial transformer: affine parameters from a small localiser, affine_grid, grid_sample, a classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.loc = nn.Sequential(nn.Conv2d(1, 4, 3, stride=2), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 7 * 7, 6))
        nn.init.zeros_(self.loc[-1].weight)
        with torch.no_grad():
            self.loc[-1].bias.copy_(torch.tensor([1.0, 0.1, 0.0, -0.1, 1.0, 0.0]))
        self.cls = nn.Sequential(nn.Conv2d(1, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))

    def forward(self, x):
        theta = self.loc(x).view(-1, 2, 3)
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        return self.cls(F.grid_sample(x, grid, align_corners=False))


class Bicubic(nn.Module):
    """Super-resolution-ish: bicubic upsampling of the input plus a learned residual."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.SiLU(), nn.Conv2d(16, 3, 3, padding=1))

    def forward(self, x):
        up = F.interpolate(x, scale_factor=2, mode="bicubic", align_corners=False)
        return up + F.interpolate(self.body(x), scale_factor=2, mode="nearest")


class PoolHead(nn.Module):
    """A sequence classifier pooling by max and logsumexp over time, SELU in between."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(10, 24)
        self.head = nn.Linear(48, 5)

    def forward(self, x):
        h = F.selu(self.proj(x))
        return self.head(torch.cat([h.max(dim=1).values, torch.logsumexp(h, dim=1)], -1))


audio = functools.partial(_seeded, AudioDecoder, 1, 8, 32)
prototypes = functools.partial(_seeded, Prototypes, 1, 1, 12, 12)
stn = functools.partial(_seeded, SpatialTransformer, 1, 1, 16, 16)
bicubic = functools.partial(_seeded, Bicubic, 1, 3, 16, 16)
poolhead = functools.partial(_seeded, PoolHead, 1, 20, 10)


class Sdpa(nn.Module):
    """A decoder block on F.scaled_dot_product_attention with is_causal, pre-norm, GELU MLP."""

    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.heads = heads
        self.inp = nn.Linear(12, dim)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.head = nn.Linear(dim, 7)

    def forward(self, x):
        h = self.inp(x)
        b, n, d = h.shape
        q, k, v = self.qkv(self.norm1(h)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = h + self.proj(att.transpose(1, 2).reshape(b, n, d))
        h = h + self.mlp(self.norm2(h))
        return self.head(h[:, -1])


class Video(nn.Module):
    """A tiny video classifier: Conv3d, BatchNorm3d, ReLU, a (2+1)D block, AdaptiveAvgPool3d."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv3d(3, 8, 3, padding=1), nn.BatchNorm3d(8), nn.ReLU())
        self.spatial = nn.Conv3d(8, 8, (1, 3, 3), padding=(0, 1, 1))
        self.temporal = nn.Conv3d(8, 16, (3, 1, 1), padding=(1, 0, 0))
        self.pool = nn.AdaptiveAvgPool3d(1)
        self.head = nn.Linear(16, 6)

    def forward(self, x):
        h = self.stem(x)
        h = F.relu(self.temporal(F.relu(self.spatial(h))))
        return self.head(self.pool(h).flatten(1))


class GnUnet(nn.Module):
    """A two-level U-Net with GroupNorm and InstanceNorm, bilinear upsampling (align_corners=True), a skip concat."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.SiLU())
        self.down = nn.Sequential(
            nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.InstanceNorm2d(16, affine=True), nn.SiLU()
        )
        self.dec = nn.Sequential(nn.Conv2d(24, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.SiLU())
        self.out = nn.Conv2d(8, 2, 1)

    def forward(self, x):
        e = self.enc(x)
        d = self.down(e)
        u = F.interpolate(d, size=e.shape[-2:], mode="bilinear", align_corners=True)
        return self.out(self.dec(torch.cat([e, u], 1)))


class MishPool(nn.Module):
    """Mish activations, dilated convolutions, AdaptiveAvgPool2d to 3x3, a flattened head with dropout."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 12, 3, padding=2, dilation=2),
            nn.Mish(),
            nn.Conv2d(12, 12, 3, padding=1, groups=12),
            nn.Hardswish(),
            nn.AdaptiveAvgPool2d((3, 3)),
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(0.1), nn.Linear(12 * 9, 5))

    def forward(self, x):
        return self.head(self.body(x))


class Conformer(nn.Module):
    """A conformer convolution module: pointwise conv to 2C, GLU, depthwise Conv1d, BatchNorm1d, Swish, pointwise."""

    def __init__(self, dim=16):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.pw1 = nn.Conv1d(dim, 2 * dim, 1)
        self.dw = nn.Conv1d(dim, dim, 7, padding=3, groups=dim)
        self.bn = nn.BatchNorm1d(dim)
        self.pw2 = nn.Conv1d(dim, dim, 1)
        self.head = nn.Linear(dim, 4)

    def forward(self, x):  # (B, T, C)
        h = self.norm(x).transpose(1, 2)
        h = F.glu(self.pw1(h), dim=1)
        h = self.pw2(F.silu(self.bn(self.dw(h))))
        a, b = torch.chunk(h, 2, dim=1)
        h = torch.cat([b, a], 1).transpose(1, 2) + x
        return self.head(h.mean(1))


class StemNorm(nn.Module):
    """A stem convolution read by a BatchNorm and, unnormalised, by a concatenation (as a
    pre-activation block's shortcut reads it), then a DenseNet-style ``cat``."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.BatchNorm2d(8)
        self.conv = nn.Conv2d(8, 8, 3, padding=1)
        self.head = nn.Linear(16, 4)
        with torch.no_grad():  # statistics far from the identity, so a fold shows
            self.norm.running_mean.uniform_(-1, 1)
            self.norm.running_var.uniform_(0.2, 3)
            self.norm.weight.uniform_(0.5, 2)
            self.norm.bias.uniform_(-1, 1)

    def forward(self, x):
        x = self.stem(x)
        y = self.conv(torch.relu(self.norm(x)))
        return self.head(torch.cat([x, y], 1).mean((2, 3)))


class PatchMerge(nn.Module):
    """Swin's patch merging after a residual block, channels last: ``F.pad`` by the odd
    rows and columns (none here), four strided slices, ``cat``, a linear reduction."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Conv2d(3, 16, 4, stride=4)
        self.mlp = nn.Linear(16, 16)
        self.reduction = nn.Linear(64, 32)
        self.head = nn.Linear(32, 6)

    def forward(self, x):
        h = self.embed(x).permute(0, 2, 3, 1)
        h = h + self.mlp(h)
        rows, cols = h.shape[1], h.shape[2]
        h = F.pad(h, (0, 0, 0, cols % 2, 0, rows % 2))
        h = torch.cat([h[:, 0::2, 0::2], h[:, 1::2, 0::2], h[:, 0::2, 1::2], h[:, 1::2, 1::2]], -1)
        return self.head(self.reduction(h).mean((1, 2)))


class SwinV2Block(nn.Module):
    """torchvision's Swin V2 window attention (cosine attention, a position bias computed
    by an MLP from a constant table, ``16 * sigmoid``) on a patch embedding."""

    def __init__(self):
        super().__init__()
        from torchvision.models.swin_transformer import ShiftedWindowAttentionV2

        self.embed = nn.Conv2d(3, 16, 4, stride=4)
        self.attn = ShiftedWindowAttentionV2(16, [4, 4], [2, 2], 2)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        h = self.embed(x).permute(0, 2, 3, 1)
        return self.head(self.attn(h).mean((1, 2)))


class PadResidual(nn.Module):
    """A pointwise convolution's output padded explicitly (TF-style "same" padding, as
    Hugging Face's MobileNetV2 writes it) for a depthwise convolution, and added back."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.pw = nn.Conv2d(8, 8, 1)
        self.dw = nn.Conv2d(8, 8, 3, groups=8)
        self.head = nn.Linear(8, 10)

    def forward(self, x):
        y = self.pw(F.relu(self.stem(x)))
        return self.head((y + self.dw(F.pad(y, (1, 1, 1, 1)))).mean((2, 3)))


sdpa = functools.partial(_seeded, Sdpa, 1, 10, 12)
video = functools.partial(_seeded, Video, 1, 3, 4, 12, 12)
gnunet = functools.partial(_seeded, GnUnet, 1, 3, 16, 16)
mishpool = functools.partial(_seeded, MishPool, 1, 3, 16, 16)
conformer = functools.partial(_seeded, Conformer, 1, 20, 16)
stemnorm = functools.partial(_seeded, StemNorm, 1, 3, 12, 12)
patchmerge = functools.partial(_seeded, PatchMerge, 1, 3, 32, 32)
swinv2 = functools.partial(_seeded, SwinV2Block, 1, 3, 32, 32)
padres = functools.partial(_seeded, PadResidual, 1, 3, 16, 16)
