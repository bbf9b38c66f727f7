"""The lines ``nnsweep bench`` adds on stderr about what it measured: which layers
``--float-layers`` keeps float (the runtime's ranking), and notes on an int8 artifact that is
float in effect or whose kernels may saturate on this CPU. Kept apart from :mod:`nnsweep.cli.bench`,
which converts and measures."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from nnsweep.cli._output import Status
from nnsweep.core.errors import SpecError

__all__ = ["CPUINFO", "measured_float", "name_float_layers", "saturation_hint"]

CPUINFO = Path("/proc/cpuinfo")


def saturation_hint(config: Any, cpuinfo: Path) -> str | None:
    """What to measure beside an ONNX Runtime static or dynamic int8 deployment with int8 weights
    on an x86 CPU without VNNI, where its kernels saturate (benchmarks/results/onnxruntime_options.md)."""
    from nnsweep.core.options import SATURATION, unguarded_saturation, x86_without_vnni

    if config.runtime != "onnxruntime" or not x86_without_vnni(cpuinfo):
        return None
    options = {name: (value,) for name, value in config.quant.options}
    if not unguarded_saturation((config.quant.mode,), options):
        return None
    return f"this x86 CPU has no VNNI: {SATURATION}; measure --reduce-range true (7-bit weights) beside it"


def measured_float(config: Any, result: Any, snapshot: Any) -> str | None:
    """The note for an int8 artifact whose outputs measured float (whatever ``--float-layers``)."""
    from nnsweep.sensitivity.rank import measured_float_in_effect

    if not config.quant.mode.is_int8 or snapshot.constant_outputs():
        return None
    note = measured_float_in_effect(config.runtime, config.quant.mode.value, result.evaluation.fidelity.sqnr_db)
    return None if note is None else f"{note}; compare it with --quant fp32"


def name_float_layers(args: argparse.Namespace, config: Any, cache_dir: Path, status: Status) -> tuple[Any, str | None]:
    """``config`` with its ``--float-layers`` K named: the K most sensitive layers of the
    model by the runtime's own ranking (measured once, then read from the cache); and a note
    when no layer left int8 changes the outputs (the artifact is float in effect).

    Raises:
        SpecError: K above the model's quantizable layers.
    """
    import dataclasses

    from nnsweep.core.quant import QuantMode
    from nnsweep.models import SnapshotStore, load_model
    from nnsweep.sensitivity.rank import float_in_effect
    from nnsweep.sensitivity.ranking import cached_ranking, ranking

    store = SnapshotStore(cache_dir / "models")
    recipe = store.recipe(args.model, args.weights, args.input_shape)
    snapshot = store.lookup(recipe) if recipe is not None else None
    granularity, group_size = config.quant.granularity, config.quant.group_size
    report = None
    if snapshot is not None:
        report = cached_ranking(snapshot.digest, config.runtime, granularity, cache_dir, group_size=group_size)
    if report is None:
        status.line(f"loading {args.model} ...", tty_only=True)
        bundle = load_model(
            args.model, cache_dir=cache_dir / "models", weights=args.weights, input_shape=args.input_shape
        )
        _check_float_layer_count(bundle, args.float_layers)
        how = "each linear layer at 4 bits" if group_size else f"through {config.runtime}'s quantizer"
        status.line(f"ranking the layers of {args.model} {how} ...")
        report, _ = ranking(bundle, config.runtime, granularity, cache_dir, progress=status.line, group_size=group_size)
    if args.float_layers > len(report.layers):
        raise SpecError("quant.float_layers", f"{args.float_layers} is above the model's {len(report.layers)} layers")
    names = tuple(report.ranked())[: args.float_layers]
    config = dataclasses.replace(config, quant=dataclasses.replace(config.quant, float_layers=names))
    if report.int8_left(names) or config.quant.mode is not QuantMode.STATIC_INT8:  # the ranking's mode
        return config, None
    return config, f"{float_in_effect(config.runtime, len(names))}; compare it with --quant fp32"


def _check_float_layer_count(bundle: Any, k: int) -> None:
    from nnsweep.sensitivity.rank import quantizable_layers

    n = len(quantizable_layers(bundle.module, bundle.example_input))
    if k > n:
        raise SpecError("quant.float_layers", f"{k} is above the model's {n} quantizable layers")
