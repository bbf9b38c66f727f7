"""``nnsweep bench`` of a decoder language model (``tiny_llama``, or ``--kind decoder``):
its prefill and decode graphs converted and timed per token, its perplexity from their logits."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from nnsweep.cli._output import EXIT_FAILED, EXIT_OK, Status, _one_line, _usage_error, results
from nnsweep.core.errors import SpecError, TrialError
from nnsweep.core.measure import MeasureSettings
from nnsweep.core.metrics import DECODE_PER_TOKEN, PERPLEXITY, PREFILL, SIZE, TOKENS_PER_S, row

__all__ = ["is_decoder", "run_decoder"]

_OPTIONS = {"model": "--model", "runtime": "--runtime", "quant.mode": "--quant", "threads": "--threads"}
# options that make sense only for a model of one input (its data, its metrics, its layers' ranking)
_NOT_FOR_DECODERS = ("metric", "data", "float_layers", "profile", "explain", "weights", "input_shape")


def is_decoder(args: argparse.Namespace) -> bool:
    """Whether ``args`` bench a decoder language model: a built-in one, or ``--kind decoder``."""
    from nnsweep.models import DECODERS

    return args.model in DECODERS or getattr(args, "kind", None) == "decoder"


def _refuse_options(args: argparse.Namespace) -> None:
    for name in _NOT_FOR_DECODERS:
        if getattr(args, name, None):
            flag = "--" + name.replace("_", "-")
            raise SpecError(flag, f"does not apply to a decoder language model ({args.model})")


def run_decoder(args: argparse.Namespace, config: Any, settings: MeasureSettings, cache_dir: Path) -> int:
    """Convert (through the cache) and measure ``config`` of the decoder ``args.model``."""
    from nnsweep.artifacts import decoder as deploy
    from nnsweep.bench.decoding import DecodeSettings
    from nnsweep.models.decoder import eager_perplexity, load_decoder

    status = Status(enabled=not args.json)
    try:
        _refuse_options(args)
        deploy.check_runtime(config)
        status.line(f"loading {args.model} ...", tty_only=True)
        decoder = load_decoder(args.model, cache_dir / "models")
    except SpecError as exc:
        status.clear()
        return _usage_error(exc, _OPTIONS)
    try:
        status.line(f"converting {args.model} for {config.label()} (prefill and decode graphs) ...")
        artifact = deploy.convert(decoder, config, cache_dir)
        status.line("measuring prefill and decode steps ...", ticking=False)
        timing = deploy.measure(decoder, artifact, DecodeSettings(prefills=settings.iters, warmup=settings.warmup))
    except TrialError as exc:
        status.clear()
        sys.stderr.write(f"nnsweep bench: failed: {_one_line(str(exc))}\n")
        return EXIT_FAILED
    status.clear()
    fields = {
        "model": decoder.name,
        "model_digest": decoder.digest,
        "kind": "decoder",
        "config": config.to_dict(),
        "artifact": {
            "directory": str(artifact.directory),
            "files": [artifact.path(g).name for g in ("prefill", "decode")],
            SIZE: artifact.size_bytes,
            "cache_hit": artifact.cache_hit,
            "notes": list(artifact.notes),
        },
        "prompt_len": decoder.prompt_len,
        "max_len": decoder.max_len,
        "decode_steps": timing.decode_steps,
        "reference_perplexity": eager_perplexity(decoder),
        **timing.metrics(),
    }
    results().write((json.dumps(fields) if args.json else _summary(fields)) + "\n")
    return EXIT_OK


def _summary(fields: dict[str, Any]) -> str:
    artifact = fields["artifact"]
    lines = [
        f"Model: {fields['model']} (decoder, digest {fields['model_digest'][:12]})",
        f"Artifacts: {artifact['directory']} ({', '.join(artifact['files'])}; {artifact[SIZE]:,} bytes; "
        f"{'cached' if artifact['cache_hit'] else 'converted'})",
        f"Prompt {fields['prompt_len']} tokens, cache {fields['max_len']}, {fields['decode_steps']} decode steps timed",
    ]
    for name in (PREFILL, DECODE_PER_TOKEN, TOKENS_PER_S, PERPLEXITY):
        metric = row(name)
        lines.append(f"{metric.title()}: {fields[name] * metric.scale:.4g}")
    lines.append(f"perplexity of the eager fp32 model: {fields['reference_perplexity']:.4g}")
    lines.extend(artifact["notes"])
    return "\n".join(lines)
