"""XNNPACK's lowering of one program with and without the skipped closing re-traces.

:mod:`nnsweep.convert.retrace` lets XNNPACK's ``preprocess`` passes skip their closing
re-trace of a graph no pass has touched since the last one. This script builds a model's
exported (and, for int8, quantized and calibrated) program as the ExecuTorch converter
does, makes its edge program once, and then lowers it to XNNPACK (``to_backend`` with
XNNPACK's passes) in turns, with the skip and without it, in one process, so the machine's
drift between whole processes does not enter the ratio. It prints each lowering's seconds,
the medians, their ratio, and the ``.pte`` digest of each side (they must be equal).

Usage: .venv/bin/python benchmarks/xnnpack_retrace.py [--model torchvision:mobilenet_v3_small]
       [--quant static_int8] [--rounds 4]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import statistics
import tempfile
import time
from pathlib import Path

from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

from nnsweep.convert import lowering
from nnsweep.convert.executorch import _program  # the converter's own program, before its stage
from nnsweep.convert.partition import LimitedPartitioner
from nnsweep.convert.provenance import shared_node_provenance
from nnsweep.core.config import Granularity, PartitionLimits, QuantConfig, QuantMode
from nnsweep.models import load_model


def _partitioners() -> list[LimitedPartitioner]:
    return [LimitedPartitioner(XnnpackPartitioner(), PartitionLimits())]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="torchvision:mobilenet_v3_small")
    parser.add_argument("--quant", default="static_int8", choices=[m.value for m in QuantMode])
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()

    quant = QuantConfig(mode=QuantMode(args.quant), granularity=Granularity.PER_CHANNEL)
    with tempfile.TemporaryDirectory(prefix="nnsweep-retrace-") as tmp, shared_node_provenance():
        bundle = load_model(args.model, cache_dir=Path(tmp))
        program = _program(bundle, quant)
        edge = lowering._edge_program(program, [p.inner for p in _partitioners()], None)
        skip = lowering.retrace_only_when_changed
        seconds: dict[str, list[float]] = {"skip": [], "trace every time": []}
        digests: dict[str, set[str]] = {name: set() for name in seconds}
        try:
            for n in range(args.rounds):
                for name in seconds:
                    lowering.retrace_only_when_changed = skip if name == "skip" else contextlib.nullcontext
                    start = time.perf_counter()
                    lowered = lowering._to_backend(edge, _partitioners())
                    seconds[name].append(time.perf_counter() - start)
                    digests[name].add(hashlib.sha256(lowered.to_executorch().buffer).hexdigest()[:16])
                    print(f"round {n + 1}, {name}: {seconds[name][-1]:.2f} s", flush=True)
        finally:
            lowering.retrace_only_when_changed = skip
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    for name, values in seconds.items():
        spread = f"{min(values):.2f}-{max(values):.2f}"
        print(f"{name}: median {medians[name]:.2f} s ({spread}), .pte {sorted(digests[name])}")
    print(f"ratio: {medians['skip'] / medians['trace every time']:.2f}")
    if digests["skip"] != digests["trace every time"] or len(digests["skip"]) != 1:
        raise SystemExit("the lowerings differ in bytes")


if __name__ == "__main__":
    main()
