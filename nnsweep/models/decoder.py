"""Decoder language models: the built-in ``tiny_llama`` and a user's own, as a :class:`Decoder`.

``tiny_llama`` is a transformers ``LlamaConfig`` (2 layers, width 128, vocabulary 256)
trained for a few seconds on seeded synthetic text: a Markov chain in which each token has
four likely successors, so a trained model's perplexity (about 4) is far from a random
one's (about 256) and a quantization that hurts it shows. Nothing is downloaded. A user's
function (``file.py:function``, run with ``--kind decoder``) returns a transformers
Llama-style causal LM, or a module already in the static-cache form of
:class:`~nnsweep.models._kv_cache.StaticCacheStep`.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from nnsweep.core.atomic import atomic_path
from nnsweep.core.errors import SpecError
from nnsweep.models._kv_cache import StaticCacheStep, cache_shape
from nnsweep.models._load import DECODERS
from nnsweep.models._user_code import import_function

__all__ = [
    "DECODERS",
    "FORM",
    "Decoder",
    "StaticCacheStep",
    "eager_perplexity",
    "load_decoder",
    "synthetic_text",
    "tiny_llama",
]

log = logging.getLogger(__name__)

FORM = (
    "forward(input_ids[1,T] int64, cache_position[T] int64, k_cache, v_cache[layers,1,kv_heads,max_len,head_dim]) "
    "-> (logits[1,T,vocab], k_cache, v_cache)"
)

SEED = 0
VOCAB = 256
PROMPT_LEN = 32
MAX_LEN = 128
_STEPS = 150
_BATCH = 16
_SEQ = 64
_LR = 3e-3
_SUCCESSORS = 4


@dataclass(frozen=True)
class Decoder:
    """A decoder ready to export: one step against a static KV cache, and its text.

    Args:
        name: the model reference.
        step: the module of the static-cache form (:data:`FORM`).
        cache: the shape of each of the two caches.
        vocab: the vocabulary size (the logits' last dimension).
        prompt_len: tokens the prefill graph takes at once.
        held_out: seeded held-out token ids (``max_len`` of them) perplexity is measured on.
        digest: sha256 of the weights and the held-out text (part of the artifact's key).
    """

    name: str
    step: nn.Module
    cache: tuple[int, int, int, int, int]
    vocab: int
    prompt_len: int
    held_out: np.ndarray
    digest: str

    @property
    def max_len(self) -> int:
        return self.cache[3]

    def empty_cache(self) -> torch.Tensor:
        return torch.zeros(self.cache)

    @property
    def module(self) -> nn.Module:
        """The step module, by the name a :class:`~nnsweep.models.ModelBundle` gives its module
        (a sweep's fingerprint reads the code behind either)."""
        return self.step

    @property
    def class_axes(self) -> tuple[int, ...]:
        """No output is read as classes: a decoder's quality is its perplexity."""
        return ()


def synthetic_text(tokens: int, seed: int, vocab: int = VOCAB) -> np.ndarray:
    """``tokens`` ids of the seeded Markov chain (its transitions fixed by :data:`SEED`, the walk by ``seed``)."""
    table = np.random.RandomState(SEED).randint(0, vocab, size=(vocab, _SUCCESSORS))
    weights = np.array([0.55, 0.25, 0.12, 0.08])
    rng = np.random.RandomState(seed)
    out = np.empty(tokens, dtype=np.int64)
    out[0] = rng.randint(vocab)
    picks = rng.choice(_SUCCESSORS, size=tokens, p=weights)
    for i in range(1, tokens):
        out[i] = table[out[i - 1], picks[i]]
    return out


def _llama() -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=MAX_LEN,
        tie_word_embeddings=False,
    )
    torch.manual_seed(SEED)
    return LlamaForCausalLM(config)


def _train(lm: nn.Module) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the same weights on every machine (parallel sums reorder)
    try:
        text = torch.from_numpy(synthetic_text(_STEPS * _BATCH * _SEQ // 4, seed=SEED + 1))
        gen = torch.Generator().manual_seed(SEED)
        opt = torch.optim.AdamW(lm.parameters(), lr=_LR)
        lm.train()
        for _ in range(_STEPS):
            starts = torch.randint(0, len(text) - _SEQ, (_BATCH,), generator=gen)
            batch = torch.stack([text[s : s + _SEQ] for s in starts.tolist()])
            loss = lm(input_ids=batch, labels=batch).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
        lm.eval()
    finally:
        torch.set_num_threads(threads)


def _recipe() -> str:
    import importlib.metadata

    versions = [importlib.metadata.version(p) for p in ("torch", "transformers")]
    recipe = (SEED, VOCAB, _STEPS, _BATCH, _SEQ, _LR, _SUCCESSORS, versions)
    return hashlib.sha256(repr(recipe).encode()).hexdigest()


def tiny_llama(cache_dir: Path | None = None) -> nn.Module:
    """The built-in ``tiny_llama`` causal LM, trained on first use (weights kept in ``cache_dir``)."""
    lm = _llama()
    path = cache_dir / f"tiny_llama-{_recipe()}.pt" if cache_dir is not None else None
    if path is not None and path.is_file():
        lm.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        return lm.eval()
    log.info("training tiny_llama on seeded synthetic text (a few seconds)")
    _train(lm)
    if path is not None:
        with atomic_path(path) as tmp:
            torch.save(lm.state_dict(), tmp)
    return lm


def load_decoder(ref: str, cache_dir: Path | None = None) -> Decoder:
    """The :class:`Decoder` ``ref`` names: ``tiny_llama`` or a user's ``file.py:function``.

    Raises:
        SpecError: the reference does not resolve, or what it returns is not a decoder of
            the static-cache form (one line naming what to return).
    """
    if ref in DECODERS:
        module: Any = tiny_llama(cache_dir)
    elif ":" not in ref:
        raise SpecError(
            "model", f"{ref} is not a decoder language model: give {', '.join(DECODERS)} or file.py:function"
        )
    else:
        func = import_function(ref, field="model")
        try:
            module = func()
        except Exception as exc:  # the user's code: any failure is theirs to fix
            raise SpecError("model", f"{ref}() failed: {type(exc).__name__}: {exc}") from exc
    step, cache = _static_form(ref, module)
    vocab = _vocab(ref, step, cache)
    held_out = synthetic_text(cache[3], seed=SEED + 2, vocab=vocab)
    return Decoder(ref, step, cache, vocab, PROMPT_LEN, held_out, _digest(ref, step, held_out))


def _static_form(ref: str, module: Any) -> tuple[nn.Module, tuple[int, int, int, int, int]]:
    """``module`` as a static-cache step: a Llama-style causal LM is wrapped; a module that
    already takes the form must say its cache shape (a ``cache_shape`` attribute)."""
    what = (
        f"{ref}() must return a transformers Llama-style causal LM (e.g. LlamaForCausalLM) or an nn.Module whose "
        f"{FORM}, with a cache_shape attribute"
    )
    if not isinstance(module, nn.Module):
        raise SpecError("model", f"{what}; it returned {type(module).__name__}")
    module = module.eval()
    inner = getattr(module, "model", None)
    if hasattr(module, "lm_head") and hasattr(inner, "layers") and hasattr(inner, "rotary_emb"):
        return StaticCacheStep(module, MAX_LEN).eval(), cache_shape(module.config, MAX_LEN)
    params = [p for p in inspect.signature(module.forward).parameters.values() if p.kind != p.VAR_KEYWORD]
    shape = getattr(module, "cache_shape", None)
    if len(params) != 4 or not isinstance(shape, tuple) or len(shape) != 5:
        taken = ", ".join(p.name for p in params)
        raise SpecError("model", f"{what}; its forward takes ({taken})")
    if int(shape[3]) <= PROMPT_LEN:
        raise SpecError(
            "model", f"{ref}(): its cache_shape holds {shape[3]} positions; the prompt alone is {PROMPT_LEN}"
        )
    return module, tuple(int(s) for s in shape)  # type: ignore[return-value]


def _vocab(ref: str, step: nn.Module, cache: tuple[int, ...]) -> int:
    """The logits' width, from one decode step (and the check that it returns the form's three tensors)."""
    ids = torch.zeros((1, 1), dtype=torch.int64)
    try:
        with torch.no_grad():
            out = step(ids, torch.zeros(1, dtype=torch.int64), torch.zeros(cache), torch.zeros(cache))
    except Exception as exc:  # the user's module on the form's inputs
        raise SpecError("model", f"{ref}(): one decode step of the form {FORM} failed: {exc}") from None
    shapes_ok = isinstance(out, tuple) and len(out) == 3 and all(isinstance(t, torch.Tensor) for t in out)
    if not shapes_ok or out[0].dim() != 3 or tuple(out[1].shape) != cache or tuple(out[2].shape) != cache:
        raise SpecError("model", f"{ref}(): forward must return (logits[1,T,vocab], k_cache, v_cache) as {FORM}")
    return int(out[0].shape[-1])


def _digest(ref: str, step: nn.Module, held_out: np.ndarray) -> str:
    h = hashlib.sha256(ref.encode())
    for name, tensor in sorted(step.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().contiguous().numpy().tobytes())
    h.update(held_out.tobytes())
    return h.hexdigest()


def eager_perplexity(decoder: Decoder) -> float:
    """The perplexity of the held-out text by the fp32 step module in eager PyTorch, through
    the same prefill and decode steps the artifacts run: what an fp32 artifact should give."""
    text = torch.from_numpy(decoder.held_out[None].copy())
    k = v = decoder.empty_cache()
    rows = []
    with torch.no_grad():
        logits, k, v = decoder.step(text[:, : decoder.prompt_len], torch.arange(decoder.prompt_len), k, v)
        rows.append(logits[0])
        for position in range(decoder.prompt_len, decoder.max_len):
            logits, k, v = decoder.step(text[:, position : position + 1], torch.tensor([position]), k, v)
            rows.append(logits[0])
    log_probs = torch.log_softmax(torch.cat(rows)[:-1].double(), dim=-1)
    nll = -log_probs.gather(1, text[0, 1:, None]).mean()
    return float(nll.exp())
