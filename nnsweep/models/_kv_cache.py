"""A Llama-style decoder as one step against a static KV cache, with plain tensors in and out.

``StaticCacheStep.forward(input_ids[1, T], cache_position[T], k_cache, v_cache)`` returns
``(logits[1, T, vocab], k_cache, v_cache)``; each cache is ``[layers, 1, kv_heads, max_len,
head_dim]``. No cache object enters the graph: the new keys and values are written with a
one-hot product and a ``where``, and attention is masked to ``position <= cache_position``,
ops that ``torch.export``, ``torch.onnx`` and LiteRT all take. The same module serves the
prefill (T = the prompt length) and the decode graph (T = 1).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = ["StaticCacheStep", "cache_shape"]


def cache_shape(config: Any, max_len: int) -> tuple[int, int, int, int, int]:
    """``[layers, 1, kv_heads, max_len, head_dim]`` of a transformers Llama-style ``config``."""
    heads = int(config.num_attention_heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(config, "head_dim", None) or int(config.hidden_size) // heads)
    return (int(config.num_hidden_layers), 1, kv_heads, max_len, head_dim)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class StaticCacheStep(nn.Module):
    """One forward step of a transformers ``LlamaForCausalLM`` against a static KV cache.

    Its submodules are the causal LM's own (the linear layers keep their paths under
    ``lm.``), so quantizers and layer plans see the same layers as in the eager model.

    Args:
        lm: a transformers Llama-style causal LM (``lm.model.layers[i].self_attn.q_proj`` ...).
        max_len: the cache length: the longest prompt plus generation.
    """

    def __init__(self, lm: Any, max_len: int) -> None:
        super().__init__()
        self.lm = lm
        config = lm.config
        self.cache_shape = cache_shape(config, max_len)  # what a user's module of this form declares too
        self.heads = int(config.num_attention_heads)
        self.scaling = float(getattr(lm.model.rotary_emb, "attention_scaling", 1.0))
        self.register_buffer("inv_freq", lm.model.rotary_emb.inv_freq.detach().clone(), persistent=False)
        self.register_buffer("slots", torch.arange(max_len), persistent=False)
        self.inv_freq: torch.Tensor
        self.slots: torch.Tensor

    def forward(
        self, input_ids: torch.Tensor, cache_position: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        model: Any = self.lm.model
        h = model.embed_tokens(input_ids)
        freqs = cache_position.to(torch.float32)[:, None] * self.inv_freq[None, :]
        angles = torch.cat((freqs, freqs), dim=-1)
        cos, sin = angles.cos() * self.scaling, angles.sin() * self.scaling
        written = (self.slots[:, None] == cache_position[None, :]).to(torch.float32)  # [S, T] one-hot
        filled = written.sum(dim=1)[:, None] > 0  # [S, 1]
        visible = self.slots[None, :] <= cache_position[:, None]  # [T, S]
        keys, values = [], []
        for i, layer in enumerate(model.layers):
            h, k, v = self._layer(layer, h, cos, sin, written, filled, visible, k_cache[i], v_cache[i])
            keys.append(k)
            values.append(v)
        lm: Any = self.lm
        logits = lm.lm_head(model.norm(h))
        return logits, torch.stack(keys), torch.stack(values)

    def _layer(
        self,
        layer: Any,
        h: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        written: torch.Tensor,
        filled: torch.Tensor,
        visible: torch.Tensor,
        k_past: torch.Tensor,
        v_past: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        attn = layer.self_attn
        _, kv_heads, _, head_dim = k_past.shape
        steps = h.shape[1]
        x = layer.input_layernorm(h)
        q = attn.q_proj(x).view(1, steps, self.heads, head_dim).transpose(1, 2)
        k = attn.k_proj(x).view(1, steps, kv_heads, head_dim).transpose(1, 2)
        v = attn.v_proj(x).view(1, steps, kv_heads, head_dim).transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        k_all = torch.where(filled, torch.matmul(written, k), k_past)  # [1, kv, S, D]
        v_all = torch.where(filled, torch.matmul(written, v), v_past)
        group = self.heads // kv_heads
        k_rep = k_all.repeat_interleave(group, dim=1) if group > 1 else k_all
        v_rep = v_all.repeat_interleave(group, dim=1) if group > 1 else v_all
        scores = torch.matmul(q, k_rep.transpose(-1, -2)) * (head_dim**-0.5)
        scores = torch.where(visible, scores, torch.full_like(scores, -1e9))
        out = torch.matmul(torch.softmax(scores, dim=-1), v_rep)
        out = out.transpose(1, 2).reshape(1, steps, self.heads * head_dim)
        h = h + attn.o_proj(out)
        return h + layer.mlp(layer.post_attention_layernorm(h)), k_all, v_all
