"""A decoder language model's per-token figures, from its prefill and decode runners.

Two graphs, each one static-cache step (:mod:`nnsweep.models._kv_cache`): the prefill at the
fixed prompt length, the decode at one token. Each call is timed with
``time.perf_counter_ns`` around :meth:`~nnsweep.bench.Runner.run_inputs` alone, its
inputs prepared before, as the timing harness times a single-input model; the caches a step
returns are fed to the next step in the runtime's own form.

* ``prefill_ms``: the p50 of the prefill graph, each call from an empty cache.
* ``decode_ms_per_token``: the p50 over every decode step of greedy generations from the
  prompt to the cache's length.
* ``tokens_per_s``: those decode steps over their summed time (a mean, where the p50 is a median).
* ``perplexity``: on the held-out text, the prefill's logits for the prompt, then one decode
  step per token to the end (teacher-forced): the deployed artifacts' logits, both graphs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nnsweep.bench._runner import Runner
from nnsweep.core.errors import BenchmarkError
from nnsweep.core.metrics import DECODE_PER_TOKEN, PERPLEXITY, PREFILL, TOKENS_PER_S

__all__ = [
    "DecodeSamples",
    "DecodeSettings",
    "DecodeTiming",
    "artifact_perplexity",
    "measure_decoder",
    "perplexity_of_logits",
    "teacher_forced_logits",
    "time_decoder",
]


@dataclass(frozen=True)
class DecodeSettings:
    """How often to run each graph: ``prefills`` timed prefill calls, ``generations`` greedy
    generations (each ``max_len - prompt_len`` timed decode steps), after ``warmup`` of each."""

    prefills: int = 20
    generations: int = 3
    warmup: int = 2

    def __post_init__(self) -> None:
        for name in ("prefills", "generations"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.warmup < 0:
            raise ValueError("warmup must be at least 0")


@dataclass(frozen=True)
class DecodeTiming:
    """What one decoder measurement saw (times in milliseconds)."""

    prefill_ms: float
    decode_ms_per_token: float
    tokens_per_s: float
    perplexity: float
    prefill_samples: int
    decode_steps: int

    def metrics(self) -> dict[str, float]:
        """The figures by their metric names (:mod:`nnsweep.core.metrics`)."""
        return {
            PREFILL: self.prefill_ms,
            DECODE_PER_TOKEN: self.decode_ms_per_token,
            TOKENS_PER_S: self.tokens_per_s,
            PERPLEXITY: self.perplexity,
        }


def perplexity_of_logits(logits: np.ndarray, text: np.ndarray) -> float:
    """exp of the mean negative log-likelihood of ``text[1:]`` under ``logits[:-1]`` ([T, vocab])."""
    x = np.asarray(logits, dtype=np.float64)[:-1]
    x = x - x.max(axis=-1, keepdims=True)
    log_probs = x - np.log(np.exp(x).sum(axis=-1, keepdims=True))
    nll = -log_probs[np.arange(len(x)), np.asarray(text[1:])]
    return float(math.exp(nll.mean()))


class _Steps:
    """The two runners with the inputs they take, the cache of the last call kept in runtime form."""

    def __init__(self, prefill: Runner, decode: Runner, cache: tuple[int, ...]) -> None:
        self.prefill, self.decode = prefill, decode
        self.empty = np.zeros(cache, dtype=np.float32)

    def first(self, prompt: np.ndarray) -> tuple[list[Any], float]:
        inputs = self.prefill.prepare_inputs(
            [prompt[None].astype(np.int64), np.arange(len(prompt), dtype=np.int64), self.empty, self.empty]
        )
        t0 = time.perf_counter_ns()
        out = self.prefill.run_inputs(inputs)
        return out, (time.perf_counter_ns() - t0) / 1e6

    def next(self, token: int, position: int, caches: list[Any]) -> tuple[list[Any], float]:
        small = self.decode.prepare_inputs([np.array([[token]], dtype=np.int64), np.array([position], dtype=np.int64)])
        inputs = [*small, *caches]
        t0 = time.perf_counter_ns()
        out = self.decode.run_inputs(inputs)
        return out, (time.perf_counter_ns() - t0) / 1e6


def _logits(raw: Any) -> np.ndarray:
    return np.asarray(raw, dtype=np.float32).reshape(-1, np.asarray(raw).shape[-1])


def teacher_forced_logits(
    prefill: Runner, decode: Runner, text: np.ndarray, prompt_len: int, cache: tuple[int, ...]
) -> np.ndarray:
    """The two runners' logits for every position of ``text`` ([len(text), vocab]): the prefill's
    for the prompt, then one decode step per token, each fed the text's own next token."""
    steps = _Steps(prefill, decode, cache)
    out, _ = steps.first(text[:prompt_len])
    rows = [_logits(out[0])]
    for position in range(prompt_len, len(text)):
        out, _ = steps.next(int(text[position]), position, out[1:])
        rows.append(_logits(out[0]))
    return np.concatenate(rows)


def artifact_perplexity(
    prefill: Runner, decode: Runner, text: np.ndarray, prompt_len: int, cache: tuple[int, ...]
) -> float:
    """The perplexity of ``text`` (``cache[3]`` ids) from the two runners' logits (module docstring)."""
    return perplexity_of_logits(teacher_forced_logits(prefill, decode, text, prompt_len, cache), text)


def _generate(steps: _Steps, prompt: np.ndarray, max_len: int) -> list[float]:
    out, _ = steps.first(prompt)
    times = []
    for position in range(len(prompt), max_len):
        token = int(_logits(out[0])[-1].argmax())
        out, ms = steps.next(token, position, out[1:])
        times.append(ms)
    return times


@dataclass(frozen=True)
class DecodeSamples:
    """The times of one decoder measurement in ms: its first prefill call (before any warm-up),
    each timed prefill call and each timed decode step."""

    first_ms: float
    prefill_ms: tuple[float, ...]
    decode_ms: tuple[float, ...]


def time_decoder(
    prefill: Runner, decode: Runner, prompt: np.ndarray, cache: tuple[int, ...], settings: DecodeSettings
) -> DecodeSamples:
    """Time the prefill calls and the decode steps (loaded runners; module docstring).

    Raises:
        BenchmarkError: the cache leaves no decode step after the prompt.
    """
    steps = _Steps(prefill, decode, cache)
    first = steps.first(prompt)[1]
    for _ in range(settings.warmup):
        steps.first(prompt)
        _generate(steps, prompt, min(cache[3], len(prompt) + 4))
    prefills = tuple(steps.first(prompt)[1] for _ in range(settings.prefills))
    decodes = tuple(ms for _ in range(settings.generations) for ms in _generate(steps, prompt, cache[3]))
    if not decodes:
        raise BenchmarkError(f"the cache ({cache[3]}) leaves no decode step after a prompt of {len(prompt)}")
    return DecodeSamples(first, prefills, decodes)


def measure_decoder(
    prefill: Runner,
    decode: Runner,
    text: np.ndarray,
    prompt_len: int,
    cache: Sequence[int],
    settings: DecodeSettings | None = None,
) -> DecodeTiming:
    """Time both graphs and compute the perplexity on ``text`` (loaded runners; module docstring).

    Raises:
        BenchmarkError: a runner failed, or the artifact's logits are not finite.
    """
    settings = settings or DecodeSettings()
    shape = tuple(cache)
    samples = time_decoder(prefill, decode, np.asarray(text[:prompt_len]), shape, settings)
    prefills, decodes = samples.prefill_ms, samples.decode_ms
    value = artifact_perplexity(prefill, decode, np.asarray(text), prompt_len, shape)
    if not math.isfinite(value):
        raise BenchmarkError("the deployed decoder's logits are not finite: no perplexity")
    return DecodeTiming(
        prefill_ms=float(np.median(prefills)),
        decode_ms_per_token=float(np.median(decodes)),
        tokens_per_s=len(decodes) / (sum(decodes) / 1000.0),
        perplexity=value,
        prefill_samples=len(prefills),
        decode_steps=len(decodes),
    )
